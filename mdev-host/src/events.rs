//! Host events: kernel device events reduced to what the engine needs ([`HostEvent`]), the
//! source seam ([`HostEvents`]) and the real host's source, a udev monitor ([`UdevEvents`]).
//! The simulated host's source lives in mdev-sim; the engine's reaction in mdev-engine's
//! `hotplug`.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What happened to a device (the uevent `ACTION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostEventAction {
    /// `add`.
    Add,
    /// `remove`.
    Remove,
    /// `change` (mdev parents announce `MDEV_STATE=registered|unregistered` this way).
    Change,
    /// `bind` (a driver attached).
    Bind,
    /// `unbind` (a driver detached).
    Unbind,
    /// Any other action; carried so nothing is silently dropped.
    Other,
}

/// One kernel device event, reduced to what the engine needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEvent {
    /// The action.
    pub action: HostEventAction,
    /// The subsystem (`mdev`, `pci`, `vfio`, `mtty`, ...).
    pub subsystem: String,
    /// The device's sysfs name (last component of its devpath: a UUID, a PCI address).
    pub sysname: String,
    /// The uevent properties (`MDEV_STATE`, `DRIVER`, ...).
    pub properties: BTreeMap<String, String>,
}

/// A source of host events.
pub trait HostEvents: Send {
    /// Waits at most `timeout` for the next event; `None` when none came. An event source that
    /// has ended (the channel closed) also answers `None`; [`HostEvents::is_closed`] tells apart.
    fn next_event(&mut self, timeout: Duration) -> Option<HostEvent>;

    /// Whether the source can deliver no more events.
    fn is_closed(&self) -> bool {
        false
    }
}

/// The real host's events: a udev monitor (events after `systemd-udevd` processed them),
/// keeping the subsystems the engine cares about (`mdev`, `pci`, `vfio`, `vfio-dev`) and any
/// `change` carrying `MDEV_STATE` (a parent registering or unregistering, whatever its own
/// subsystem).
///
/// libudev handles may not move between threads, so the monitor lives on its own reader
/// thread and hands events over a channel; the thread ends when this value is dropped.
#[derive(Debug)]
pub struct UdevEvents {
    receiver: mpsc::Receiver<HostEvent>,
    closed: bool,
}

/// Subsystems whose events always matter.
const WATCHED_SUBSYSTEMS: [&str; 4] = ["mdev", "pci", "vfio", "vfio-dev"];

/// How often the reader thread checks whether its consumer is gone.
const READER_POLL: Duration = Duration::from_millis(250);

impl UdevEvents {
    /// Opens a udev monitor. No subsystem filter is installed: parents announce readiness with
    /// a `change` on their *own* subsystem (`mtty`, `pci`, ...), which a filter would drop.
    pub fn new() -> io::Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let (opened_sender, opened) = mpsc::channel();
        std::thread::Builder::new()
            .name("udev-monitor".into())
            .spawn(move || {
                let socket =
                    match udev::MonitorBuilder::new().and_then(udev::MonitorBuilder::listen) {
                        Ok(socket) => {
                            let _ = opened_sender.send(Ok(()));
                            socket
                        }
                        Err(error) => {
                            let _ = opened_sender.send(Err(error));
                            return;
                        }
                    };
                loop {
                    for event in socket.iter() {
                        if let Some(event) = Self::convert(&event) {
                            if sender.send(event).is_err() {
                                return;
                            }
                        }
                    }
                    let mut poll_fd = libc::pollfd {
                        fd: socket.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    let millis = libc::c_int::try_from(READER_POLL.as_millis()).unwrap_or(250);
                    // SAFETY: `poll_fd` is a valid, exclusively borrowed array of one pollfd that
                    // outlives the call, and its fd is the monitor socket owned by this thread.
                    let ready = unsafe { libc::poll(&mut poll_fd, 1, millis) };
                    if ready < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted
                    {
                        return;
                    }
                    if ready == 0 && sender.send(HostEvent::heartbeat()).is_err() {
                        return;
                    }
                }
            })?;
        opened
            .recv()
            .map_err(|_| io::Error::other("udev monitor thread ended before opening"))??;
        Ok(Self {
            receiver,
            closed: false,
        })
    }

    fn convert(event: &udev::Event) -> Option<HostEvent> {
        let subsystem = event.subsystem()?.to_string_lossy().into_owned();
        let properties: BTreeMap<String, String> = event
            .properties()
            .map(|p| {
                (
                    p.name().to_string_lossy().into_owned(),
                    p.value().to_string_lossy().into_owned(),
                )
            })
            .collect();
        if !WATCHED_SUBSYSTEMS.contains(&subsystem.as_str())
            && !properties.contains_key("MDEV_STATE")
        {
            return None;
        }
        let action = match event.event_type() {
            udev::EventType::Add => HostEventAction::Add,
            udev::EventType::Remove => HostEventAction::Remove,
            udev::EventType::Change => HostEventAction::Change,
            udev::EventType::Bind => HostEventAction::Bind,
            udev::EventType::Unbind => HostEventAction::Unbind,
            udev::EventType::Unknown => HostEventAction::Other,
        };
        Some(HostEvent {
            action,
            subsystem,
            sysname: event.sysname().to_string_lossy().into_owned(),
            properties,
        })
    }
}

impl HostEvent {
    /// The reader thread's "still here" tick (lets it notice a dropped consumer); never
    /// handed to callers.
    fn heartbeat() -> Self {
        Self {
            action: HostEventAction::Other,
            subsystem: String::new(),
            sysname: String::new(),
            properties: BTreeMap::new(),
        }
    }
}

impl HostEvents for UdevEvents {
    fn next_event(&mut self, timeout: Duration) -> Option<HostEvent> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.receiver.recv_timeout(left) {
                Ok(event) if event.subsystem.is_empty() => continue,
                Ok(event) => return Some(event),
                Err(mpsc::RecvTimeoutError::Timeout) => return None,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.closed = true;
                    return None;
                }
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.closed
    }
}
