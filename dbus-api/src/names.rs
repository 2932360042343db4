//! Fixed names of the API: bus name, object paths, interfaces, polkit actions.
//!
//! These are the contract with every client, policy file and polkit rule; changing one is an
//! API break (bump the `VGpu1` suffix instead).

/// The well-known bus name the service owns.
pub const BUS_NAME: &str = "org.mdevmanager.VGpu1";
/// The root object path; it carries `org.freedesktop.DBus.ObjectManager`.
pub const ROOT_PATH: &str = "/org/mdevmanager/VGpu1";
/// The manager singleton.
pub const MANAGER_PATH: &str = "/org/mdevmanager/VGpu1/Manager";
/// Prefix of every error name the service sends.
pub const ERROR_PREFIX: &str = vgpu_types::ErrorKind::DBUS_ERROR_PREFIX;

/// Interface names.
pub mod interface {
    /// The manager singleton: version, permissions, creation, domain claims, jobs.
    pub const MANAGER: &str = "org.mdevmanager.VGpu1.Manager";
    /// A parent device (a GPU physical function).
    pub const PARENT: &str = "org.mdevmanager.VGpu1.Parent";
    /// SR-IOV control, on parents that support it.
    pub const SRIOV: &str = "org.mdevmanager.VGpu1.Sriov";
    /// An mdev type offered by a parent (a `mdev_supported_types/<type>` directory).
    pub const MDEV_TYPE: &str = "org.mdevmanager.VGpu1.MdevType";
    /// A vGPU instance: a mediated device or a virtual function the service manages.
    pub const INSTANCE: &str = "org.mdevmanager.VGpu1.Instance";
    /// A named profile from the catalog.
    pub const PROFILE: &str = "org.mdevmanager.VGpu1.Profile";
    /// A long-running operation.
    pub const JOB: &str = "org.mdevmanager.VGpu1.Job";
}

/// polkit action ids; reads need none.
pub mod action {
    /// Create, destroy, start and stop instances.
    pub const MANAGE_INSTANCES: &str = "org.mdevmanager.vgpu1.manage-instances";
    /// Make instances persistent or change their autostart flag.
    pub const MANAGE_PERSISTENT: &str = "org.mdevmanager.vgpu1.manage-persistent";
    /// Change the number of SR-IOV virtual functions or their binding.
    pub const CONFIGURE_SRIOV: &str = "org.mdevmanager.vgpu1.configure-sriov";
    /// Claim and release instances for a VM (the libvirt hook).
    pub const ASSIGN: &str = "org.mdevmanager.vgpu1.assign";
    /// Change scheduling weights.
    pub const SET_WEIGHTS: &str = "org.mdevmanager.vgpu1.set-weights";
    /// Rescan the host and reload profiles.
    pub const RELOAD: &str = "org.mdevmanager.vgpu1.reload";
    /// Take a pass-through GPU's IOMMU group although a member serves the host or is not a
    /// function of the GPU (`force` on a pass-through create or claim); checked on top of the
    /// method's own action.
    pub const FORCE: &str = "org.mdevmanager.vgpu1.force";

    /// Every action, in the order `GetPermissions` reports them.
    pub const ALL: [&str; 7] = [
        MANAGE_INSTANCES,
        MANAGE_PERSISTENT,
        CONFIGURE_SRIOV,
        ASSIGN,
        SET_WEIGHTS,
        RELOAD,
        FORCE,
    ];
}

/// Well-known keys of the trailing `options a{sv}` argument.
pub mod option {
    /// `b`: never ask the caller to authenticate interactively (udisks' name and meaning).
    pub const NO_USER_INTERACTION: &str = "auth.no_user_interaction";
    /// `s`: PCI address of the parent to place an instance on.
    pub const PARENT: &str = "parent";
    /// `s`: UUID for a new instance (only with `count` 1).
    pub const UUID: &str = "uuid";
    /// `u`: how many instances to create (default 1).
    pub const COUNT: &str = "count";
    /// `b`: keep the instance across reboots and start it at boot.
    pub const AUTOSTART: &str = "autostart";
    /// `u`: scheduling weight for the new instances.
    pub const WEIGHT: &str = "weight";
    /// `u`: seconds a job may wait for its parent to appear (`StartCreateInstances`,
    /// `StartPrepareDomain`).
    pub const WAIT_FOR_PARENT: &str = "wait-for-parent";
    /// `b`: act even though the instance is held by a VM; on `CreateInstances`, take a
    /// pass-through GPU's IOMMU group although a member serves the host (action `force`).
    pub const FORCE: &str = "force";
    /// `s`: how a profile is placed over the parents that can take it: `pack` (fill the
    /// busiest parent first) or `spread` (take the idlest).
    pub const PLACEMENT: &str = "placement";
    /// `u`: prefer parents on this NUMA node.
    pub const NUMA_NODE: &str = "numa-node";
    /// `b`: accept only parents on `numa-node` (needs `numa-node`).
    pub const NUMA_STRICT: &str = "numa-strict";
    /// `b` (`Instance.SetAutostart`): keep (`true`) or drop (`false`) the instance's
    /// definition; a running device stays running either way (mdevctl's define/undefine).
    /// On `CreateInstances`: keep a definition without autostart.
    pub const PERSISTENT: &str = "persistent";
    /// `s` (`CreateInstances`): create an mdev of this type id on `parent` (required) instead
    /// of from a profile (the profile argument is then empty): what mdevctl and libvirt ask for.
    pub const TYPE: &str = "type";
    /// `a(ss)` (`CreateInstances`): mdev vendor attributes `(name, value)`, written in this
    /// order after each creation of the device and kept with its definition (mdevctl's
    /// `attrs`).
    pub const ATTRIBUTES: &str = "attributes";
    /// `b` (`CreateInstances`, default `true`): `false` records a stopped definition without
    /// creating the device (mdevctl's `define`); needs `type` and `persistent` or `autostart`.
    pub const START: &str = "start";
    /// `b` (`ImportMdevctl`, `StartApply`): report what would be imported or the plan, change
    /// nothing.
    pub const DRY_RUN: &str = "dry-run";
    /// `b` (`StartApply`): like `dry-run`, and the Job fails (`Failed`) with the difference
    /// when the plan is not empty.
    pub const ASSERT: &str = "assert";
    /// `s` (`StartApply`): the document's file name, used in error messages.
    pub const FILE_NAME: &str = "file-name";
}

/// Values of the `placement` option (and of the `placement` config key).
pub mod placement {
    /// Fill the busiest parent that still has room (keeps whole GPUs free).
    pub const PACK: &str = "pack";
    /// Take the idlest parent.
    pub const SPREAD: &str = "spread";
}

/// Keys of the per-device dicts of `PrepareDomain` and `VerifyDomain`.
pub mod device_key {
    /// `s`: `mdev`, `vf` or `passthrough`.
    pub const KIND: &str = "kind";
    /// `s`: the mdev UUID the domain XML names.
    pub const UUID: &str = "uuid";
    /// `s`: the profile to create the device from when it does not exist.
    pub const PROFILE: &str = "profile";
    /// `s`: parent PCI address.
    pub const PARENT: &str = "parent";
    /// `u`: scheduling weight.
    pub const WEIGHT: &str = "weight";
    /// `s`: PCI address (VF or passthrough device).
    pub const PCI_ADDRESS: &str = "pci_address";
    /// `b`: pass-through only: take the GPU's IOMMU group although a member serves the host
    /// or is not a function of the GPU (action `force` on top of `assign`).
    pub const FORCE: &str = "force";
    /// `s`: `pack` or `spread`, for a device created from its profile (as the option).
    pub const PLACEMENT: &str = "placement";
    /// `u`: prefer parents on this NUMA node (as the option).
    pub const NUMA_NODE: &str = "numa-node";
    /// `b`: only parents on `numa-node` (as the option).
    pub const NUMA_STRICT: &str = "numa-strict";
    /// `b` (`Instance.SetAutostart`): keep (`true`) or drop (`false`) the instance's
    /// definition; a running device stays running either way (mdevctl's define/undefine).
    /// On `CreateInstances`: keep a definition without autostart.
    pub const PERSISTENT: &str = "persistent";
    /// `s` (`CreateInstances`): create an mdev of this type id on `parent` (required) instead
    /// of from a profile (the profile argument is then empty): what mdevctl and libvirt ask for.
    pub const TYPE: &str = "type";
    /// `b` (`ImportMdevctl`): report what would be imported, change nothing.
    pub const DRY_RUN: &str = "dry-run";
}

/// The `Kind` property of an instance: every [`vgpu_types::InstanceKind`], spelled as the
/// state file and the engine spell it.
pub mod instance_kind {
    use vgpu_types::InstanceKind;

    /// A VFIO mediated device (`/sys/bus/mdev/devices/<uuid>`).
    pub const MDEV: &str = "mdev";
    /// An SR-IOV virtual function bound to `vfio-pci`.
    pub const VF: &str = "vf";
    /// An NVIDIA SR-IOV vGPU (a VF with a vGPU type set).
    pub const NVIDIA_VF: &str = "nvidia-vf";
    /// A whole GPU passed through (its IOMMU group bound to `vfio-pci` by the service).
    pub const PASSTHROUGH: &str = "passthrough";

    /// Every kind the wire carries, in the order of [`InstanceKind`].
    pub const ALL: [InstanceKind; 4] = [
        InstanceKind::Mdev,
        InstanceKind::Vf,
        InstanceKind::NvidiaVf,
        InstanceKind::Passthrough,
    ];

    /// The `Kind` value of `kind`. Exhaustive: a kind added to the vocabulary does not
    /// compile until the wire names it.
    pub fn name(kind: InstanceKind) -> &'static str {
        match kind {
            InstanceKind::Mdev => MDEV,
            InstanceKind::Vf => VF,
            InstanceKind::NvidiaVf => NVIDIA_VF,
            InstanceKind::Passthrough => PASSTHROUGH,
        }
    }

    /// The kind a `Kind` value names; `None` for a value this build does not know (a newer
    /// service's).
    pub fn parse(value: &str) -> Option<InstanceKind> {
        ALL.into_iter().find(|kind| name(*kind) == value)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn every_kind_has_one_wire_name_equal_to_its_stored_spelling() {
            let mut names: Vec<&str> = ALL.iter().map(|kind| name(*kind)).collect();
            for kind in ALL {
                assert_eq!(name(kind), kind.to_string());
                assert_eq!(parse(name(kind)), Some(kind));
            }
            assert_eq!(names, [MDEV, VF, NVIDIA_VF, PASSTHROUGH]);
            names.dedup();
            assert_eq!(names.len(), 4);
            assert_eq!(parse("gpu"), None);
            assert_eq!(parse("Mdev"), None);
        }
    }
}
