//! Client proxies for every interface. All mutating methods take a trailing `options a{sv}`
//! (see [`crate::names::option`]) and are sent with the "allow interactive authorization"
//! header flag, so polkit may ask the user when an agent is running.

use std::collections::HashMap;
use zbus::{OwnedObjectPath, OwnedVariant, Variant};

/// The `options a{sv}` argument as a proxy sends it.
pub type Options<'a> = HashMap<&'a str, Variant<'a>>;

/// `org.mdevmanager.VGpu1.Manager` on `/org/mdevmanager/VGpu1/Manager`.
#[zbus::proxy(
    interface = "org.mdevmanager.VGpu1.Manager",
    default_service = "org.mdevmanager.VGpu1",
    default_path = "/org/mdevmanager/VGpu1/Manager"
)]
pub trait Manager {
    /// The service version.
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> zbus::Result<String>;
    /// What this service instance supports (`mdev`, `sriov`, `persistence`, `simulated`, ...).
    #[zbus(property(emits_changed_signal = "const"))]
    fn features(&self) -> zbus::Result<Vec<String>>;
    /// The outcome of the last reconcile, one human-readable line per action taken or problem.
    #[zbus(property)]
    fn reconcile_report(&self) -> zbus::Result<Vec<String>>;

    /// Latency histograms and error counts of the operations served since the service
    /// started, and the number of running jobs.
    fn get_operation_stats(&self) -> zbus::Result<crate::operation_stats::OperationStats>;
    /// For each polkit action, whether the caller may do it: `yes`, `no` or `auth`.
    fn get_permissions(&self) -> zbus::Result<HashMap<String, String>>;
    /// Rescans the host (parents, types, instances) and reconciles.
    #[zbus(allow_interactive_auth)]
    fn rescan(&self, options: Options<'_>) -> zbus::Result<()>;
    /// Reloads the profile files.
    #[zbus(allow_interactive_auth)]
    fn reload_profiles(&self, options: Options<'_>) -> zbus::Result<()>;
    /// Imports mdevctl's definitions (`/etc/mdevctl.d`) as adopted persistent instances;
    /// option `dry-run b`. Returns (imported UUIDs, skipped UUIDs (already managed), problems).
    #[zbus(allow_interactive_auth)]
    fn import_mdevctl(
        &self,
        options: Options<'_>,
    ) -> zbus::Result<(Vec<String>, Vec<String>, Vec<String>)>;
    /// Creates instances from a profile; options `parent s`, `uuid s`, `count u`,
    /// `autostart b`, `weight u`. Returns the new instances' paths.
    #[zbus(allow_interactive_auth)]
    fn create_instances(
        &self,
        profile: &str,
        options: Options<'_>,
    ) -> zbus::Result<Vec<OwnedObjectPath>>;
    /// Destroys several instances (by UUID) with one state save; every UUID is checked before
    /// any is destroyed. Option `force b` as for `Instance.Destroy`.
    #[zbus(allow_interactive_auth)]
    fn destroy_instances(&self, uuids: &[&str], options: Options<'_>) -> zbus::Result<()>;
    /// Claims every vGPU a domain asks for, all or nothing (the libvirt hook's `prepare`).
    #[zbus(allow_interactive_auth)]
    fn prepare_domain(
        &self,
        domain_name: &str,
        domain_uuid: &str,
        devices: Vec<HashMap<&str, Variant<'_>>>,
        options: Options<'_>,
    ) -> zbus::Result<Vec<OwnedObjectPath>>;
    /// Releases a domain's claims; idempotent (the libvirt hook's `release`).
    #[zbus(allow_interactive_auth)]
    fn release_domain(
        &self,
        domain_name: &str,
        domain_uuid: &str,
        options: Options<'_>,
    ) -> zbus::Result<()>;
    /// Runs the VFIO preflight probe on an mdev UUID or a PCI address (a VF or pass-through
    /// device) in the service; returns the report as JSON (`ok`, `steps`, ...). No options yet.
    #[zbus(allow_interactive_auth)]
    fn probe(&self, target: &str, options: Options<'_>) -> zbus::Result<String>;
    /// Compares a domain's devices with what the host has; returns drift lines.
    fn verify_domain(
        &self,
        domain_name: &str,
        domain_uuid: &str,
        devices: Vec<HashMap<&str, Variant<'_>>>,
        options: Options<'_>,
    ) -> zbus::Result<Vec<String>>;
    /// Every instance in one reply (what `vgpuctl list` prints), read from the objects the
    /// service exports: the same records as `GetManagedObjects`, without the walk. No options
    /// yet.
    fn list_instances(&self, options: Options<'_>)
        -> zbus::Result<Vec<crate::wire::InstanceEntry>>;
    /// The vendor attributes of every instance that has any: (UUID, ordered `(name, value)`),
    /// sorted by UUID. No options yet.
    fn list_instance_attributes(
        &self,
        options: Options<'_>,
    ) -> zbus::Result<Vec<(String, Vec<(String, String)>)>>;
    /// Every mdev type in one reply; option `parent s` keeps one parent's (`NotFound` when the
    /// service has no such parent).
    fn list_types(&self, options: Options<'_>) -> zbus::Result<Vec<crate::wire::TypeEntry>>;
    /// Every profile with whether one instance of it would be placed now and where, or why
    /// not. No options yet.
    fn fit_profiles(&self, options: Options<'_>)
        -> zbus::Result<Vec<crate::wire::ProfileFitEntry>>;
    /// Every vGPU NVIDIA's `nvidia-smi vgpu -q` reports (VM, framebuffer used, utilization,
    /// licence), matched to the service's instances; at most 2 s old. `NotSupported` naming
    /// the tool where `nvidia-smi` is not installed. No options yet.
    fn get_vgpu_telemetry(
        &self,
        options: Options<'_>,
    ) -> zbus::Result<Vec<crate::wire::VgpuTelemetryEntry>>;

    /// `CreateInstances` as a Job (returned at once); options as `CreateInstances` plus
    /// `wait-for-parent u` (seconds). `Job.ResultObjects` lists the instances made.
    #[zbus(allow_interactive_auth)]
    fn start_create_instances(
        &self,
        profile: &str,
        options: Options<'_>,
    ) -> zbus::Result<OwnedObjectPath>;
    /// `PrepareDomain` as a Job (returned at once); option `wait-for-parent u` (seconds).
    #[zbus(allow_interactive_auth)]
    fn start_prepare_domain(
        &self,
        domain_name: &str,
        domain_uuid: &str,
        devices: Vec<HashMap<&str, Variant<'_>>>,
        options: Options<'_>,
    ) -> zbus::Result<OwnedObjectPath>;
    /// `ReleaseDomain` as a Job (returned at once; not cancelable).
    #[zbus(allow_interactive_auth)]
    fn start_release_domain(
        &self,
        domain_name: &str,
        domain_uuid: &str,
        options: Options<'_>,
    ) -> zbus::Result<OwnedObjectPath>;
    /// Declarative apply of a desired-state document as a Job (see docs/apply.md).
    #[zbus(allow_interactive_auth)]
    fn start_apply(
        &self,
        document: &str,
        format: &str,
        config_name: &str,
        options: Options<'_>,
    ) -> zbus::Result<OwnedObjectPath>;

    /// A job was started.
    #[zbus(signal)]
    fn job_new(&self, job: OwnedObjectPath, operation: String) -> zbus::Result<()>;
    /// A job finished; `result` is `done`, `failed` or `cancelled`.
    #[zbus(signal)]
    fn job_removed(
        &self,
        job: OwnedObjectPath,
        result: String,
        message: String,
    ) -> zbus::Result<()>;
}

/// `org.mdevmanager.VGpu1.Parent`: a GPU physical function.
#[zbus::proxy(
    interface = "org.mdevmanager.VGpu1.Parent",
    default_service = "org.mdevmanager.VGpu1"
)]
pub trait Parent {
    /// The parent's sysfs name, the key: its PCI address (`0000:3b:00.0`), or e.g. `mtty`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn name(&self) -> zbus::Result<String>;
    /// PCI address, empty for a non-PCI parent.
    #[zbus(property(emits_changed_signal = "const"))]
    fn pci_address(&self) -> zbus::Result<String>;
    /// PCI vendor id.
    #[zbus(property(emits_changed_signal = "const"))]
    fn vendor_id(&self) -> zbus::Result<u16>;
    /// PCI device id.
    #[zbus(property(emits_changed_signal = "const"))]
    fn device_id(&self) -> zbus::Result<u16>;
    /// Bound driver (`nvidia`, `i915`, ...), empty if none.
    #[zbus(property)]
    fn driver(&self) -> zbus::Result<String>;
    /// NUMA node, -1 when the platform does not say.
    #[zbus(property)]
    fn numa_node(&self) -> zbus::Result<i32>;
    /// How it can be split: `mdev`, `sriov`.
    #[zbus(property)]
    fn modes(&self) -> zbus::Result<Vec<String>>;
    /// Its mdev types.
    #[zbus(property)]
    fn types(&self) -> zbus::Result<Vec<OwnedObjectPath>>;
    /// The instances on it.
    #[zbus(property)]
    fn instances(&self) -> zbus::Result<Vec<OwnedObjectPath>>;
}

/// `org.mdevmanager.VGpu1.Sriov`: on parents with SR-IOV.
#[zbus::proxy(
    interface = "org.mdevmanager.VGpu1.Sriov",
    default_service = "org.mdevmanager.VGpu1"
)]
pub trait Sriov {
    /// `sriov_totalvfs`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn total_vfs(&self) -> zbus::Result<u32>;
    /// `sriov_numvfs`.
    #[zbus(property)]
    fn num_vfs(&self) -> zbus::Result<u32>;
    /// PCI addresses of the enabled VFs.
    #[zbus(property)]
    fn vfs(&self) -> zbus::Result<Vec<String>>;
    /// Sets the number of VFs; returns a Job at once (completion: `Manager.JobRemoved`).
    #[zbus(allow_interactive_auth)]
    fn set_num_vfs(&self, count: u32, options: Options<'_>) -> zbus::Result<OwnedObjectPath>;
}

/// `org.mdevmanager.VGpu1.MdevType`: a `mdev_supported_types/<type>` of a parent.
#[zbus::proxy(
    interface = "org.mdevmanager.VGpu1.MdevType",
    default_service = "org.mdevmanager.VGpu1"
)]
pub trait MdevType {
    /// The sysfs type directory name (`nvidia-558`), the key with `ParentAddress`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn id(&self) -> zbus::Result<String>;
    /// The type's `name` attribute.
    #[zbus(property(emits_changed_signal = "const"))]
    fn name(&self) -> zbus::Result<String>;
    /// The type's `description` attribute.
    #[zbus(property(emits_changed_signal = "const"))]
    fn description(&self) -> zbus::Result<String>;
    /// The type's `device_api` (`vfio-pci`).
    #[zbus(property(emits_changed_signal = "const"))]
    fn device_api(&self) -> zbus::Result<String>;
    /// The parent object.
    #[zbus(property(emits_changed_signal = "const"))]
    fn parent(&self) -> zbus::Result<OwnedObjectPath>;
    /// The parent's sysfs name.
    #[zbus(property(emits_changed_signal = "const"))]
    fn parent_name(&self) -> zbus::Result<String>;
    /// `available_instances` now.
    #[zbus(property)]
    fn available_instances(&self) -> zbus::Result<u32>;
    /// The instances of this type.
    #[zbus(property)]
    fn instances(&self) -> zbus::Result<Vec<OwnedObjectPath>>;
}

/// `org.mdevmanager.VGpu1.Instance`: an mdev or a VF the service knows.
#[zbus::proxy(
    interface = "org.mdevmanager.VGpu1.Instance",
    default_service = "org.mdevmanager.VGpu1"
)]
pub trait Instance {
    /// The UUID, the key (for VF kinds, the handle the service gave the VF).
    #[zbus(property(emits_changed_signal = "const"))]
    fn uuid(&self) -> zbus::Result<String>;
    /// `mdev`, `vf` or `nvidia-vf`.
    #[zbus(property(emits_changed_signal = "const"))]
    fn kind(&self) -> zbus::Result<String>;
    /// The VF's PCI address for VF kinds, empty for an mdev.
    #[zbus(property)]
    fn pci_address(&self) -> zbus::Result<String>;
    /// The parent object.
    #[zbus(property(emits_changed_signal = "const"))]
    fn parent(&self) -> zbus::Result<OwnedObjectPath>;
    /// The parent's sysfs name.
    #[zbus(property(emits_changed_signal = "const"))]
    fn parent_name(&self) -> zbus::Result<String>;
    /// The mdev type id (NVIDIA type id for `nvidia-vf`, `vfio-pci` for a plain VF).
    #[zbus(property, name = "Type")]
    fn mdev_type(&self) -> zbus::Result<String>;
    /// The profile it came from, empty if unknown.
    #[zbus(property)]
    fn profile(&self) -> zbus::Result<String>;
    /// Whether the device exists in the kernel now.
    #[zbus(property)]
    fn active(&self) -> zbus::Result<bool>;
    /// Whether the service keeps its definition when the device goes away.
    #[zbus(property)]
    fn persistent(&self) -> zbus::Result<bool>;
    /// Whether it is created when the service starts.
    #[zbus(property)]
    fn autostart(&self) -> zbus::Result<bool>;
    /// `created` (by the service), `adopted`, or empty for a device the service does not manage.
    #[zbus(property)]
    fn owner(&self) -> zbus::Result<String>;
    /// The name of the domain holding it, empty if free.
    #[zbus(property)]
    fn holder(&self) -> zbus::Result<String>;
    /// The UUID of the domain holding it, empty if free.
    #[zbus(property)]
    fn holder_uuid(&self) -> zbus::Result<String>;
    /// The IOMMU group number, -1 when not known (inactive).
    #[zbus(property)]
    fn iommu_group(&self) -> zbus::Result<i32>;
    /// Scheduling weight, 0 when unset.
    #[zbus(property)]
    fn weight(&self) -> zbus::Result<u32>;

    /// Destroys it (removes the mdev or releases the VF) and forgets its definition; option
    /// `force b` destroys it even when a domain holds it.
    #[zbus(allow_interactive_auth)]
    fn destroy(&self, options: Options<'_>) -> zbus::Result<()>;
    /// Creates the device of a persistent, inactive instance.
    #[zbus(allow_interactive_auth)]
    fn start(&self, options: Options<'_>) -> zbus::Result<()>;
    /// Removes the device of a persistent instance but keeps its definition.
    #[zbus(allow_interactive_auth)]
    fn stop(&self, options: Options<'_>) -> zbus::Result<()>;
    /// `Destroy` as a Job (returned at once; not cancelable).
    #[zbus(allow_interactive_auth)]
    fn start_destroy(&self, options: Options<'_>) -> zbus::Result<OwnedObjectPath>;
    /// Sets the autostart flag (which makes the instance persistent); option `persistent b`
    /// keeps or drops the definition explicitly.
    #[zbus(allow_interactive_auth)]
    fn set_autostart(&self, autostart: bool, options: Options<'_>) -> zbus::Result<()>;
    /// Replaces the ordered vendor attributes of a persistent mdev instance; they are written
    /// the next time the device is created (a running device is not touched).
    #[zbus(allow_interactive_auth)]
    fn set_attributes(
        &self,
        attributes: &[(String, String)],
        options: Options<'_>,
    ) -> zbus::Result<()>;
}

/// `org.mdevmanager.VGpu1.Profile`: a catalog profile.
#[zbus::proxy(
    interface = "org.mdevmanager.VGpu1.Profile",
    default_service = "org.mdevmanager.VGpu1"
)]
pub trait Profile {
    /// The profile name, the key.
    #[zbus(property)]
    fn name(&self) -> zbus::Result<String>;
    /// Its description, empty if none.
    #[zbus(property)]
    fn description(&self) -> zbus::Result<String>;
}

/// `org.mdevmanager.VGpu1.Job`: a long operation.
#[zbus::proxy(
    interface = "org.mdevmanager.VGpu1.Job",
    default_service = "org.mdevmanager.VGpu1"
)]
pub trait Job {
    /// What it does (`sriov-set-numvfs`, `create-instances`, `prepare-domain`,
    /// `release-domain`).
    #[zbus(property(emits_changed_signal = "const"))]
    fn operation(&self) -> zbus::Result<String>;
    /// The objects it acts on.
    #[zbus(property(emits_changed_signal = "const"))]
    fn objects(&self) -> zbus::Result<Vec<OwnedObjectPath>>;
    /// uid of the caller that started it.
    #[zbus(property(emits_changed_signal = "const"))]
    fn started_by_uid(&self) -> zbus::Result<u32>;
    /// Whether `Cancel` can stop it.
    #[zbus(property(emits_changed_signal = "const"))]
    fn cancelable(&self) -> zbus::Result<bool>;
    /// The objects it made (created or claimed instances), once it succeeded.
    #[zbus(property)]
    fn result_objects(&self) -> zbus::Result<Vec<OwnedObjectPath>>;
    /// Whether it has finished.
    #[zbus(property)]
    fn finished(&self) -> zbus::Result<bool>;
    /// Whether it succeeded (meaningful once finished).
    #[zbus(property)]
    fn success(&self) -> zbus::Result<bool>;
    /// The outcome message (meaningful once finished).
    #[zbus(property)]
    fn message(&self) -> zbus::Result<String>;
    /// On failure, the D-Bus error name the synchronous method would have returned.
    #[zbus(property)]
    fn error_name(&self) -> zbus::Result<String>;
    /// Asks it to stop at its next step; what it did is undone and it completes with
    /// `Cancelled`. Its starter may; anyone else needs the operation's polkit action.
    #[zbus(allow_interactive_auth)]
    fn cancel(&self, options: Options<'_>) -> zbus::Result<()>;
    /// Emitted once when it finishes.
    #[zbus(signal)]
    fn completed(&self, success: bool, message: String) -> zbus::Result<()>;
}

/// The property dict of one interface, as `GetAll` and `GetManagedObjects` return it.
pub type PropertyMap = HashMap<String, OwnedVariant>;
