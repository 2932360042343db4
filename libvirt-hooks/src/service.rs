//! The hook's three calls to the service (`PrepareDomain`, `ReleaseDomain`, `VerifyDomain` on
//! `org.mdevmanager.VGpu1.Manager`), through dbus-api's proxy, each bounded by a timeout.
//!
//! The hook talks to nothing else: never to libvirt, which is blocked waiting for the hook.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use dbus_api::names::{device_key, option};
use dbus_api::proxy::ManagerProxy;
use dbus_api::{BusTarget, ClientError, ErrorKind};
use uuid::Uuid;
use zbus::Variant;

use crate::plan::ClaimedDevice;

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
            ClientError::Bus(zbus::Error::InputOutput(ref io))
                if matches!(
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

/// The wire form of one device (`a{sv}` with the keys of `dbus_api::names::device_key`).
pub fn device_dict(device: &ClaimedDevice) -> HashMap<&'static str, Variant<'static>> {
    let mut dict = HashMap::new();
    dict.insert(
        device_key::KIND,
        Variant::from(device.kind.as_str().to_owned()),
    );
    if let Some(uuid) = &device.uuid {
        dict.insert(
            device_key::UUID,
            Variant::from(uuid.as_hyphenated().to_string()),
        );
    }
    if let Some(profile) = &device.profile {
        dict.insert(device_key::PROFILE, Variant::from(profile.clone()));
    }
    if let Some(parent) = &device.parent {
        dict.insert(device_key::PARENT, Variant::from(parent.clone()));
    }
    if let Some(weight) = device.weight {
        dict.insert(device_key::WEIGHT, Variant::from(weight));
    }
    if let Some(address) = &device.pci_address {
        dict.insert(device_key::PCI_ADDRESS, Variant::from(address.to_string()));
    }
    dict
}

/// The options every hook call sends: the hook runs unattended inside libvirtd, so polkit must
/// never wait for a password.
fn hook_options() -> HashMap<&'static str, Variant<'static>> {
    HashMap::from([(option::NO_USER_INTERACTION, Variant::from(true))])
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
        F: FnOnce(ManagerProxy<'static>) -> Fut,
        Fut: Future<Output = Result<T, zbus::Error>>,
    {
        let timeout = self.timeout;
        self.runtime.block_on(async move {
            let work = async {
                let connection = dbus_api::connect(&BusTarget::System)
                    .await
                    .map_err(ServiceError::from_client)?;
                let proxy = ManagerProxy::new(&connection)
                    .await
                    .map_err(|e| ServiceError::from_client(e.into()))?;
                body(proxy)
                    .await
                    .map_err(|e| ServiceError::from_client(e.into()))
            };
            tokio::time::timeout(timeout, work)
                .await
                .unwrap_or(Err(ServiceError::TimedOut(timeout)))
        })
    }

    /// `PrepareDomain`: claims every device, all or nothing. Returns the instances' paths.
    pub fn prepare_domain(
        &self,
        domain_name: &str,
        domain_uuid: &Uuid,
        devices: &[ClaimedDevice],
    ) -> Result<Vec<String>, ServiceError> {
        let uuid = domain_uuid.as_hyphenated().to_string();
        let dicts: Vec<_> = devices.iter().map(device_dict).collect();
        self.call(|proxy| async move {
            let paths = proxy
                .prepare_domain(domain_name, &uuid, dicts, hook_options())
                .await?;
            Ok(paths.into_iter().map(|path| path.to_string()).collect())
        })
    }

    /// `ReleaseDomain`: idempotent.
    pub fn release_domain(
        &self,
        domain_name: &str,
        domain_uuid: &Uuid,
    ) -> Result<(), ServiceError> {
        let uuid = domain_uuid.as_hyphenated().to_string();
        self.call(|proxy| async move {
            proxy
                .release_domain(domain_name, &uuid, hook_options())
                .await
        })
    }

    /// `VerifyDomain`: the drift lines (empty when all is as the domain expects).
    pub fn verify_domain(
        &self,
        domain_name: &str,
        domain_uuid: &Uuid,
        devices: &[ClaimedDevice],
    ) -> Result<Vec<String>, ServiceError> {
        let uuid = domain_uuid.as_hyphenated().to_string();
        let dicts: Vec<_> = devices.iter().map(device_dict).collect();
        self.call(|proxy| async move {
            proxy
                .verify_domain(domain_name, &uuid, dicts, hook_options())
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{DeviceKind, DeviceSource};

    #[test]
    fn device_dict_carries_only_the_keys_set() {
        let device = ClaimedDevice {
            kind: DeviceKind::Vf,
            uuid: None,
            profile: Some("l40s-12q".into()),
            parent: None,
            weight: Some(300),
            pci_address: Some("0000:3b:00.4".parse().unwrap()),
            source: DeviceSource::Metadata,
        };
        let dict = device_dict(&device);
        let mut keys: Vec<_> = dict.keys().copied().collect();
        keys.sort_unstable();
        assert_eq!(keys, vec!["kind", "pci_address", "profile", "weight"]);
        assert_eq!(dict["kind"], Variant::from("vf".to_owned()));
        assert_eq!(dict["weight"], Variant::from(300u32));
        assert_eq!(
            dict["pci_address"],
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
}
