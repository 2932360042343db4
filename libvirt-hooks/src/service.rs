//! The hook's three calls to the service (`PrepareDomain`, `ReleaseDomain`, `VerifyDomain` on
//! `org.mdevmanager.VGpu1.Manager`), through dbus-api's proxy, each bounded by a timeout.
//!
//! The hook talks to nothing else: never to libvirt, which is blocked waiting for the hook.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use dbus_api::names::{interface, ROOT_PATH};
use dbus_api::options::{as_proxy_options, to_dict, DeviceSpec, NoOptions, PrepareOptions};
use dbus_api::proxy::ManagerProxy;
use dbus_api::{BusTarget, ClientError, ErrorKind};
use vgpu_types::Uuid;
use zbus::OwnedVariant;

use crate::pci::PciAddress;
use crate::plan::{ClaimPlan, ClaimedDevice, DeviceSource};

/// Why a call to the service did not succeed, as the hook must act on it.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No bus, or nobody owns `org.mdevmanager.VGpu1`: the daemon is not running.
    #[error("the mdev-manager service is not running")]
    NotRunning(#[source] ClientError),
    /// The service did not answer within the hook's bound.
    #[error("the mdev-manager service did not answer within {} s", .0.as_secs())]
    TimedOut(Duration),
    /// The service refused, with one of its typed errors; the message names the device.
    #[error("{}: {message}", describe(*kind))]
    Refused {
        /// The error kind.
        kind: ErrorKind,
        /// The service's message.
        message: String,
    },
    /// Any other failure on the bus.
    #[error("D-Bus call to the mdev-manager service failed")]
    Bus(#[source] ClientError),
}

/// A reason a hook message can lead with.
fn describe(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NoCapacity => "no capacity on any GPU",
        ErrorKind::NotAuthorized => "not authorized",
        ErrorKind::NotFound => "not found",
        ErrorKind::InUse => "in use by another domain",
        ErrorKind::AlreadyExists => "already exists",
        ErrorKind::InvalidArgs => "invalid request",
        ErrorKind::NotSupported => "not supported on this host",
        ErrorKind::Busy => "busy",
        ErrorKind::TimedOut => "timed out",
        ErrorKind::Cancelled => "cancelled",
        ErrorKind::Failed => "failed",
    }
}

impl ServiceError {
    /// Whether the service was simply not there (so a release must be recorded for later).
    pub fn is_not_running(&self) -> bool {
        matches!(self, ServiceError::NotRunning(_))
    }

    fn from_client(error: ClientError) -> Self {
        match error {
            ClientError::Service { kind, message } => ServiceError::Refused { kind, message },
            ClientError::Unavailable { .. } => ServiceError::NotRunning(error),
            ClientError::Bus(
                zbus::Error::InputOutput(ref io) | zbus::Error::Connection(ref io, _),
            ) if matches!(
                io.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
            {
                // No system bus socket (or nobody listening): then nothing can own our name.
                ServiceError::NotRunning(error)
            }
            other => ServiceError::Bus(other),
        }
    }
}

/// One device as the service's typed device dict (`dbus_api::options::DeviceSpec`, sent as
/// `a{sv}`): only the keys set are sent (a service older than a key refuses unknown keys).
pub fn device_spec(device: &ClaimedDevice) -> DeviceSpec {
    DeviceSpec {
        kind: Some(device.kind.as_str().to_owned()),
        uuid: device.uuid.map(|uuid| uuid.to_string()),
        profile: device.profile.clone(),
        parent: device.parent.clone(),
        weight: device.weight,
        pci_address: device.pci_address.as_ref().map(ToString::to_string),
        force: device.force.then_some(true),
        placement: device.placement.map(str::to_owned),
        numa_node: device.numa_node,
        numa_strict: (device.numa_node.is_some() && device.numa_strict).then_some(true),
    }
}

/// The wire form of `devices`, owned (see [`dbus_api::options::as_proxy_options`]).
fn device_dicts(devices: &[ClaimedDevice]) -> Vec<HashMap<String, OwnedVariant>> {
    devices
        .iter()
        .map(|device| to_dict(&device_spec(device)))
        .collect()
}

/// The instances the service manages (created or adopted), by the names a domain XML uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagedInstances {
    /// mdev UUIDs.
    pub uuids: HashSet<Uuid>,
    /// VF (and passed-through device) PCI addresses.
    pub pci_addresses: HashSet<PciAddress>,
}

impl ManagedInstances {
    /// Reads the `org.mdevmanager.VGpu1.Instance` objects of a `GetManagedObjects` answer,
    /// keeping those whose `Owner` is set (`created` or `adopted`): an instance the service only
    /// observes belongs to someone else (mdevctl, the admin) and is not ours to claim.
    pub fn from_managed_objects(objects: &zbus::fdo::ManagedObjects) -> Self {
        let mut managed = Self::default();
        for interfaces in objects.values() {
            let Some(properties) = interfaces
                .iter()
                .find(|(name, _)| name.as_str() == interface::INSTANCE)
                .map(|(_, properties)| properties)
            else {
                continue;
            };
            let text = |key: &str| -> Option<String> {
                properties
                    .get(key)
                    .and_then(|value: &OwnedVariant| value.try_clone().ok())
                    .and_then(|value| String::try_from(value).ok())
            };
            if text("Owner").unwrap_or_default().is_empty() {
                continue;
            }
            if let Some(address) = text("PciAddress").and_then(|a| a.parse::<PciAddress>().ok()) {
                managed.pci_addresses.insert(address);
            } else if let Some(uuid) = text("Uuid").and_then(|u| Uuid::parse_any_spelling(&u).ok())
            {
                managed.uuids.insert(uuid);
            }
        }
        managed
    }

    /// Whether a device of a bare `<hostdev>` names one of these instances.
    pub fn contains(&self, device: &ClaimedDevice) -> bool {
        device.uuid.is_some_and(|uuid| self.uuids.contains(&uuid))
            || device
                .pci_address
                .is_some_and(|address| self.pci_addresses.contains(&address))
    }
}

/// The devices to send: every declared one, and the bare-hostdev ones the service manages.
/// `managed` is only consulted when the plan has bare-hostdev devices.
pub fn select_devices(plan: &ClaimPlan, managed: &ManagedInstances) -> Vec<ClaimedDevice> {
    plan.devices
        .iter()
        .filter(|device| device.source != DeviceSource::Hostdev || managed.contains(device))
        .cloned()
        .collect()
}

/// The options every hook call sends, as the option set `T` the service reads that method's
/// dict with (`PrepareOptions` for `PrepareDomain`, `NoOptions` for `ReleaseDomain` and
/// `VerifyDomain`): the hook runs unattended inside libvirtd, so polkit must never wait for a
/// password (`auth.no_user_interaction`), and nothing else is set.
fn hook_options<T: HookOptions>() -> HashMap<String, OwnedVariant> {
    T::unattended()
}

/// An option set the hook sends.
trait HookOptions {
    /// The set with only `auth.no_user_interaction` on, as its `a{sv}`.
    fn unattended() -> HashMap<String, OwnedVariant>;
}

impl HookOptions for PrepareOptions {
    fn unattended() -> HashMap<String, OwnedVariant> {
        to_dict(&PrepareOptions {
            wait_for_parent: None,
            no_user_interaction: Some(true),
        })
    }
}

impl HookOptions for NoOptions {
    fn unattended() -> HashMap<String, OwnedVariant> {
        to_dict(&NoOptions {
            no_user_interaction: Some(true),
        })
    }
}

/// A client for the hook's calls; one per hook run.
#[derive(Debug)]
pub struct ServiceClient {
    runtime: tokio::runtime::Runtime,
    timeout: Duration,
}

impl ServiceClient {
    /// A client whose calls (connecting included) give up after `timeout`.
    pub fn new(timeout: Duration) -> Result<Self, std::io::Error> {
        // One thread: the hook makes one call and exits; a thread pool would only cost startup.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Self { runtime, timeout })
    }

    fn call<T, F, Fut>(&self, body: F) -> Result<T, ServiceError>
    where
        F: FnOnce(zbus::Connection, ManagerProxy<'static>) -> Fut,
        Fut: Future<Output = Result<T, zbus::Error>>,
    {
        let timeout = self.timeout;
        self.runtime.block_on(async move {
            let work = async {
                let connection = dbus_api::connect(&BusTarget::System)
                    .await
                    .map_err(ServiceError::from_client)?;
                // No property cache: the hook reads no property, so skip the GetAll round trip.
                let proxy = ManagerProxy::builder(&connection)
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await
                    .map_err(|e| ServiceError::from_client(e.into()))?;
                body(connection.clone(), proxy)
                    .await
                    .map_err(|e| ServiceError::from_client(e.into()))
            };
            tokio::time::timeout(timeout, work)
                .await
                .unwrap_or(Err(ServiceError::TimedOut(timeout)))
        })
    }

    /// `PrepareDomain` for the plan's devices (see [`select_devices`]), all or nothing.
    /// Returns the devices sent (empty when nothing was the service's, in which case no claim
    /// call is made).
    pub fn prepare_domain(
        &self,
        domain_name: &str,
        domain_uuid: &Uuid,
        plan: &ClaimPlan,
    ) -> Result<Vec<ClaimedDevice>, ServiceError> {
        let uuid = domain_uuid.to_string();
        self.call(|connection, proxy| async move {
            let devices = devices_to_send(&connection, plan).await?;
            if !devices.is_empty() {
                let sent = device_dicts(&devices);
                let dicts: Vec<_> = sent.iter().map(as_proxy_options).collect();
                let options = hook_options::<PrepareOptions>();
                proxy
                    .prepare_domain(domain_name, &uuid, dicts, as_proxy_options(&options))
                    .await?;
            }
            Ok(devices)
        })
    }

    /// `ReleaseDomain`: idempotent.
    pub fn release_domain(
        &self,
        domain_name: &str,
        domain_uuid: &Uuid,
    ) -> Result<(), ServiceError> {
        let uuid = domain_uuid.to_string();
        self.call(|_, proxy| async move {
            let options = hook_options::<NoOptions>();
            proxy
                .release_domain(domain_name, &uuid, as_proxy_options(&options))
                .await
        })
    }

    /// `VerifyDomain` for the plan's devices: the drift lines (empty when all is as the
    /// domain expects, or when nothing in it is the service's).
    pub fn verify_domain(
        &self,
        domain_name: &str,
        domain_uuid: &Uuid,
        plan: &ClaimPlan,
    ) -> Result<Vec<String>, ServiceError> {
        let uuid = domain_uuid.to_string();
        self.call(|connection, proxy| async move {
            let devices = devices_to_send(&connection, plan).await?;
            if devices.is_empty() {
                return Ok(Vec::new());
            }
            let sent = device_dicts(&devices);
            let dicts: Vec<_> = sent.iter().map(as_proxy_options).collect();
            let options = hook_options::<NoOptions>();
            proxy
                .verify_domain(domain_name, &uuid, dicts, as_proxy_options(&options))
                .await
        })
    }
}

/// Asks the service which instances it manages only when the plan has bare-hostdev devices:
/// a domain described by metadata alone costs no extra round trip.
async fn devices_to_send(
    connection: &zbus::Connection,
    plan: &ClaimPlan,
) -> Result<Vec<ClaimedDevice>, zbus::Error> {
    let managed = if plan.devices.iter().all(ClaimedDevice::is_declared) {
        ManagedInstances::default()
    } else {
        let objects = zbus::fdo::ObjectManagerProxy::builder(connection)
            .destination(dbus_api::names::BUS_NAME)
            .path(ROOT_PATH)
            .build()
            .await?
            .get_managed_objects()
            .await?;
        ManagedInstances::from_managed_objects(&objects)
    };
    Ok(select_devices(plan, &managed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DeviceKind, DeviceSource};
    use dbus_api::options::from_dict;
    use zbus::Variant;

    /// Each of the hook's three calls sends the option set its method is read with, and the
    /// service's parser takes it: unattended, nothing else set.
    #[test]
    fn the_hook_options_are_accepted_by_the_service_parser_of_each_call() {
        let prepare: PrepareOptions =
            from_dict("PrepareDomain", hook_options::<PrepareOptions>()).unwrap();
        assert_eq!(prepare.no_user_interaction, Some(true));
        assert_eq!(prepare.wait_for_parent, None);
        for method in ["ReleaseDomain", "VerifyDomain"] {
            let parsed: NoOptions = from_dict(method, hook_options::<NoOptions>()).unwrap();
            assert_eq!(parsed.no_user_interaction, Some(true), "{method}");
        }
        let keys: Vec<String> = hook_options::<NoOptions>().into_keys().collect();
        assert_eq!(keys, ["auth.no_user_interaction"]);
    }

    /// A device dict the hook builds is accepted by the service's `DeviceSpec` parser as it
    /// was built.
    #[test]
    fn the_hook_device_dict_is_accepted_by_the_service_parser() {
        let device = ClaimedDevice {
            kind: DeviceKind::Mdev,
            uuid: Some("9a1e5d2c-1111-4222-8333-444455556666".parse().unwrap()),
            profile: Some("nvidia-t4-2q".into()),
            parent: Some("0000:3b:00.0".into()),
            weight: None,
            pci_address: None,
            force: false,
            placement: None,
            numa_node: None,
            numa_strict: false,
            source: DeviceSource::Metadata,
        };
        let spec = device_spec(&device);
        let parsed: DeviceSpec = from_dict("PrepareDomain device 0", to_dict(&spec)).unwrap();
        assert_eq!(parsed, spec);
    }

    #[test]
    fn device_dict_carries_only_the_keys_set() {
        let device = ClaimedDevice {
            kind: DeviceKind::Vf,
            uuid: None,
            profile: Some("l40s-12q".into()),
            parent: None,
            weight: Some(300),
            pci_address: Some("0000:3b:00.4".parse().unwrap()),
            force: false,
            placement: Some("spread"),
            numa_node: Some(1),
            numa_strict: true,
            source: DeviceSource::Metadata,
        };
        let dict = to_dict(&device_spec(&device));
        let mut keys: Vec<_> = dict.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            vec![
                "kind",
                "numa-node",
                "numa-strict",
                "pci_address",
                "placement",
                "profile",
                "weight"
            ]
        );
        assert_eq!(*dict["placement"], Variant::from("spread".to_owned()));
        assert_eq!(*dict["numa-node"], Variant::from(1u32));
        assert_eq!(*dict["kind"], Variant::from("vf".to_owned()));
        assert_eq!(*dict["weight"], Variant::from(300u32));
        assert_eq!(
            *dict["pci_address"],
            Variant::from("0000:3b:00.4".to_owned())
        );
    }

    #[test]
    fn missing_bus_means_not_running() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no socket");
        let error =
            ServiceError::from_client(ClientError::Bus(zbus::Error::InputOutput(io.into())));
        assert!(error.is_not_running());
        let refused = ServiceError::from_client(ClientError::Service {
            kind: ErrorKind::NoCapacity,
            message: "profile 'a16-4q': no parent has room".into(),
        });
        assert!(!refused.is_not_running());
        assert_eq!(
            refused.to_string(),
            "no capacity on any GPU: profile 'a16-4q': no parent has room"
        );
    }

    fn instance(properties: &[(&str, &str)]) -> HashMap<String, OwnedVariant> {
        properties
            .iter()
            .map(|(key, value)| {
                let value = OwnedVariant::try_from(Variant::from((*value).to_owned())).unwrap();
                ((*key).to_owned(), value)
            })
            .collect()
    }

    #[test]
    fn only_owned_instances_count_as_managed_and_declared_devices_always_go() {
        use zbus::names::OwnedInterfaceName;
        use zbus::OwnedObjectPath;
        let mut objects: zbus::fdo::ManagedObjects = HashMap::new();
        let mut add = |path: &str, properties: HashMap<String, OwnedVariant>| {
            let name = OwnedInterfaceName::try_from(interface::INSTANCE).unwrap();
            objects.insert(
                OwnedObjectPath::try_from(path).unwrap(),
                HashMap::from([(name, properties)]),
            );
        };
        let ours = "c2177883-f1bb-47f0-914d-32a22e3a8804";
        let foreign = "3eb9d718-0b31-11ee-91aa-2b17f51ee12d";
        add(
            "/org/mdevmanager/VGpu1/instance/a",
            instance(&[("Uuid", ours), ("Owner", "created"), ("PciAddress", "")]),
        );
        add(
            "/org/mdevmanager/VGpu1/instance/b",
            instance(&[("Uuid", foreign), ("Owner", ""), ("PciAddress", "")]),
        );
        add(
            "/org/mdevmanager/VGpu1/instance/c",
            instance(&[
                ("Uuid", "0b7ab3b6-6a0e-4c1b-9d59-8c1e5f2a7d30"),
                ("Owner", "adopted"),
                ("PciAddress", "0000:3b:00.4"),
            ]),
        );
        let managed = ManagedInstances::from_managed_objects(&objects);
        assert_eq!(managed.uuids, HashSet::from([Uuid::parse(ours).unwrap()]));
        assert_eq!(
            managed.pci_addresses,
            HashSet::from(["0000:3b:00.4".parse().unwrap()])
        );

        let xml = format!(
            "<domain><name>d</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>\
             <metadata><v:vgpu xmlns:v='{ns}' profile='p' uuid='8a4e1c5f-2b6d-4e9a-a1f3-7c0d2e5b9f41'/></metadata><devices>\
             <hostdev mode='subsystem' type='mdev'><source><address uuid='{ours}'/></source></hostdev>\
             <hostdev mode='subsystem' type='mdev'><source><address uuid='{foreign}'/></source></hostdev>\
             <hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0' bus='0x3b' slot='0' function='4'/></source></hostdev>\
             <hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0' bus='0x5e' slot='0' function='1'/></source></hostdev>\
             </devices></domain>",
            ns = crate::NAMESPACE
        );
        let plan = crate::plan::plan_from_xml(xml.as_bytes()).unwrap();
        assert_eq!(plan.devices.len(), 5);
        let sent: Vec<String> = select_devices(&plan, &managed)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            sent,
            vec![
                "mdev 8a4e1c5f-2b6d-4e9a-a1f3-7c0d2e5b9f41 (profile 'p')".to_owned(),
                format!("mdev {ours}"),
                "vf 0000:3b:00.4".to_owned(),
            ]
        );
    }
}
