//! Hotplug: kernel device events (udev on a real host, the simulated host's event channel in
//! tests) that tell the engine a parent or an instance appeared, vanished or changed.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::discovery::{self, layout, names, names::PciAddress};
use crate::engine::{lock, Engine, EngineEvent};
use crate::lifecycle::EchoKind;

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

impl Engine {
    /// Applies one host event to the model and emits the matching [`EngineEvent`]s. A parent
    /// that registers gets its autostart instances started.
    pub fn handle_host_event(&self, event: &HostEvent) {
        let mdev_state = event.properties.get("MDEV_STATE").map(String::as_str);
        match (event.subsystem.as_str(), event.action, mdev_state) {
            (_, HostEventAction::Change, Some("registered")) => {
                self.emit(EngineEvent::ParentAdded {
                    parent: event.sysname.clone(),
                });
                self.start_autostart_on(&event.sysname);
            }
            (_, HostEventAction::Change, Some("unregistered")) => {
                self.emit(EngineEvent::ParentRemoved {
                    parent: event.sysname.clone(),
                });
            }
            // Our own create and remove were announced (and recorded) by the call that made
            // them; their uevents only repeat that.
            ("mdev", HostEventAction::Add, _)
                if self.host.echoes.take(EchoKind::Added, &event.sysname) => {}
            ("mdev", HostEventAction::Remove, _)
                if self.host.echoes.take(EchoKind::Removed, &event.sysname) => {}
            // Likewise the driver changes of a VF we took for an instance or gave back.
            ("pci", HostEventAction::Bind, _)
                if self.host.echoes.take(EchoKind::Bound, &event.sysname) => {}
            ("pci", HostEventAction::Unbind, _)
                if self.host.echoes.take(EchoKind::Unbound, &event.sysname) => {}
            ("mdev", HostEventAction::Add, _) => {
                // A create the engine gave up on (timed out) that the kernel finished now.
                self.late_completion(&event.sysname);
                self.emit(EngineEvent::InstanceAdded {
                    uuid: event.sysname.clone(),
                })
            }
            ("mdev", HostEventAction::Remove, _) => self.mdev_vanished(&event.sysname),
            ("mdev", _, _) => self.emit(EngineEvent::InstanceChanged {
                uuid: event.sysname.clone(),
            }),
            ("pci", action, _) => self.pci_event(&event.sysname, action),
            _ => {}
        }
    }

    /// An mdev went away outside our control: a transient record is forgotten, a persistent one
    /// stays defined (and unclaimed); unknown ones are just announced.
    fn mdev_vanished(&self, sysname: &str) {
        let Ok(uuid) = names::parse_uuid(sysname) else {
            return;
        };
        let key = uuid.to_string();
        let record = lock(&self.state).instances.get(&key).cloned();
        let Some(record) = record else {
            self.emit(EngineEvent::InstanceRemoved { uuid: key });
            return;
        };
        if self.is_active(&record) {
            return; // already recreated (or the event is stale)
        }
        let forget = !record.persistent;
        let saved = self.update_state(|state| {
            if forget {
                state.instances.remove(&key);
            } else if let Some(kept) = state.instances.get_mut(&key) {
                kept.claim = None;
            }
        });
        if let Err(error) = saved {
            tracing::warn!(uuid = %key, %error, "cannot record that the mdev vanished");
        }
        self.emit(if forget {
            EngineEvent::InstanceRemoved { uuid: key }
        } else {
            EngineEvent::InstanceChanged { uuid: key }
        });
        self.emit(EngineEvent::ParentChanged {
            parent: record.parent,
        });
    }

    fn pci_event(&self, sysname: &str, action: HostEventAction) {
        let Ok(address) = sysname.parse::<PciAddress>() else {
            return;
        };
        let is_instance_vf = lock(&self.state)
            .instances
            .values()
            .find(|r| r.vf == Some(address))
            .map(|r| r.uuid.clone());
        if let Some(uuid) = is_instance_vf {
            self.emit(EngineEvent::InstanceChanged { uuid });
        }
        if let Some(pf) = discovery::physfn_of(self.fs(), address) {
            self.emit(EngineEvent::ParentChanged {
                parent: pf.to_string(),
            });
            return;
        }
        if action == HostEventAction::Bind {
            self.pf_driver_bound(sysname);
        }
        match action {
            HostEventAction::Add => {
                if self
                    .fs()
                    .exists(&layout::pci_device(&address).join("sriov_totalvfs"))
                {
                    self.emit(EngineEvent::ParentAdded {
                        parent: sysname.to_owned(),
                    });
                }
            }
            HostEventAction::Remove => {
                let known = lock(&self.state).parents.contains_key(sysname);
                if known {
                    self.emit(EngineEvent::ParentRemoved {
                        parent: sysname.to_owned(),
                    });
                }
            }
            _ => {
                if self
                    .fs()
                    .exists(&layout::pci_device(&address).join("sriov_totalvfs"))
                {
                    self.emit(EngineEvent::ParentChanged {
                        parent: sysname.to_owned(),
                    });
                }
            }
        }
    }

    /// A PF's driver bound (again): a driver reload took its VFs with it. The VF count
    /// recorded for it comes back first (through `sriov-manage` on an NVIDIA GPU), then its
    /// autostart instances, since an NVIDIA vGPU's `current_vgpu_type` lives on a VF.
    fn pf_driver_bound(&self, pf: &str) {
        let wanted = lock(&self.state).parents.get(pf).and_then(|p| p.num_vfs);
        let Some(num_vfs) = wanted else {
            return;
        };
        match self.restore_vf_count(pf, num_vfs) {
            Ok(true) => {
                tracing::info!(%pf, num_vfs, "restored the VFs after the driver bound again");
                self.emit(EngineEvent::ParentChanged {
                    parent: pf.to_owned(),
                });
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%pf, num_vfs, %error, "cannot restore the VFs after the driver bound again");
                return;
            }
        }
        self.start_autostart_on(pf);
    }

    /// Starts the autostart instances of a parent that just registered (the boot case where
    /// the vendor driver comes up after the service).
    fn start_autostart_on(&self, parent: &str) {
        let waiting: Vec<_> = lock(&self.state)
            .instances
            .values()
            .filter(|r| r.parent == parent && r.autostart)
            .cloned()
            .collect();
        for record in waiting {
            if let Err(error) = self.start_record(&record) {
                tracing::warn!(uuid = %record.uuid, %parent, %error, "cannot start autostart instance");
            }
        }
    }

    /// Runs a thread feeding `source` into [`Engine::handle_host_event`] until the source
    /// closes or `stop` is set.
    pub fn spawn_hotplug(
        self: &Arc<Self>,
        mut source: Box<dyn HostEvents>,
        stop: Arc<AtomicBool>,
    ) -> JoinHandle<()> {
        let engine = Arc::clone(self);
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) && !source.is_closed() {
                if let Some(event) = source.next_event(Duration::from_millis(200)) {
                    engine.handle_host_event(&event);
                }
            }
        })
    }
}
