//! The simulated host's uevents as the engine's host-event source: what udev is on a real host.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use mdev_host::events::{HostEvent, HostEventAction, HostEvents};

use crate::{SimEvent, SimHost, UeventAction};

/// The simulated host's uevents as [`HostEvents`].
#[derive(Debug)]
pub struct SimHostEvents {
    receiver: Receiver<SimEvent>,
    closed: bool,
}

impl SimHostEvents {
    /// Subscribes to `host`'s uevents from now on.
    pub fn new(host: &SimHost) -> Self {
        Self {
            receiver: host.subscribe(),
            closed: false,
        }
    }
}

/// Converts a simulated uevent into the engine's event.
pub fn host_event(event: &SimEvent) -> HostEvent {
    HostEvent {
        action: match event.action {
            UeventAction::Add => HostEventAction::Add,
            UeventAction::Remove => HostEventAction::Remove,
            UeventAction::Change => HostEventAction::Change,
            UeventAction::Bind => HostEventAction::Bind,
            UeventAction::Unbind => HostEventAction::Unbind,
        },
        subsystem: event.subsystem.clone(),
        sysname: event
            .devpath
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string(),
        properties: event.properties.clone(),
    }
}

impl HostEvents for SimHostEvents {
    fn next_event(&mut self, timeout: Duration) -> Option<HostEvent> {
        match self.receiver.recv_timeout(timeout) {
            Ok(event) => Some(host_event(&event)),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.closed = true;
                None
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn sysname_is_the_last_devpath_component() {
        let event = SimEvent {
            action: UeventAction::Remove,
            devpath: "/devices/pci0000:00/0000:00:02.0/0b7f4c6e-1a2b-4c3d-8e9f-001122334455".into(),
            subsystem: "mdev".into(),
            properties: BTreeMap::from([("MDEV_TYPE".to_string(), "nvidia-558".to_string())]),
        };
        let converted = host_event(&event);
        assert_eq!(converted.action, HostEventAction::Remove);
        assert_eq!(converted.sysname, "0b7f4c6e-1a2b-4c3d-8e9f-001122334455");
        assert_eq!(converted.subsystem, "mdev");
        assert_eq!(
            converted.properties.get("MDEV_TYPE").map(String::as_str),
            Some("nvidia-558")
        );
    }
}
