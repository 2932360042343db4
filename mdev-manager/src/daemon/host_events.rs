//! Feeding kernel device events into the engine, so changes made outside the service (a driver
//! loaded, an mdev removed by hand) are republished on the bus.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::hotplug::{HostEvent, HostEventAction, HostEvents};
use crate::sim::{SimEvent, SimHost, UeventAction};

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

/// Starts the engine's hotplug thread on the host's event source: the simulated host's channel,
/// or udev on a real host (`real_root` true: the service runs on `/`, so the kernel's events are
/// about the devices it manages). A re-rooted real host (tests) has no event source.
pub fn host_events(
    engine: &Arc<Engine>,
    sim: Option<&SimHost>,
    real_root: bool,
    stop: &Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    let source: Box<dyn HostEvents> = match sim {
        Some(sim) => Box::new(SimHostEvents::new(sim)),
        None if real_root => match crate::hotplug::UdevEvents::new() {
            Ok(udev) => Box::new(udev),
            Err(error) => {
                tracing::warn!(%error, "no udev monitor: changes made outside the service show up on Rescan only");
                return None;
            }
        },
        None => return None,
    };
    Some(engine.spawn_hotplug(source, stop.clone()))
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
