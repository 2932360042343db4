//! Hotplug: the engine's reaction to kernel device events (udev on a real host, the simulated
//! host's event channel in tests; the event types and sources are in `mdev_host::events`) that
//! tell it a parent or an instance appeared, vanished or changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::lifecycle::EchoKind;
use crate::{lock, Engine, EngineEvent, OperationContext};
use mdev_host::discovery::{self, layout, names, names::PciAddress};
pub use mdev_host::events::{HostEvent, HostEventAction, HostEvents};

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
            ("mdev", HostEventAction::Add, _) => self.foreign_mdev_added(&event.sysname),
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
        let record = lock(&self.state).instance(&key).cloned();
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
                state.remove_instance(&key);
            } else if let Some(kept) = state.instance_mut(&key) {
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
        self.emit_capacity_change(&record);
    }

    /// An mdev appeared that no call of ours made: announced with the capacity of its type
    /// (read from the device; a device already gone again is announced alone).
    fn foreign_mdev_added(&self, sysname: &str) {
        // A create the engine gave up on (timed out) that the kernel finished now.
        self.late_completion(sysname);
        self.emit(EngineEvent::InstanceAdded {
            uuid: sysname.to_owned(),
        });
        let Ok(uuid) = names::parse_uuid(sysname) else {
            return;
        };
        if let Some(mdev) = discovery::read_mdev(self.fs(), &uuid) {
            self.emit(EngineEvent::TypeChanged {
                parent: mdev.parent,
                type_id: mdev.type_id,
            });
        }
    }

    fn pci_event(&self, sysname: &str, action: HostEventAction) {
        let Ok(address) = sysname.parse::<PciAddress>() else {
            return;
        };
        let is_instance_vf = lock(&self.state)
            .instances
            .values()
            .find(|r| r.vf == Some(address))
            .map(|r| r.uuid.to_string());
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
                if self.is_listed_parent(address) {
                    self.emit(EngineEvent::ParentAdded {
                        parent: sysname.to_owned(),
                    });
                }
            }
            HostEventAction::Remove => {
                // Gone: whether it was a GPU or a PF can no longer be read, so every removed
                // function is announced (a subscriber that never listed it drops nothing).
                self.emit(EngineEvent::ParentRemoved {
                    parent: sysname.to_owned(),
                });
            }
            _ => {
                if self.is_listed_parent(address) {
                    self.emit(EngineEvent::ParentChanged {
                        parent: sysname.to_owned(),
                    });
                }
            }
        }
    }

    /// Whether a PCI function is listed as a parent: an SR-IOV PF, or a GPU (display class),
    /// whose driver decides whether it can be passed through and why it hosts no vGPU.
    fn is_listed_parent(&self, address: PciAddress) -> bool {
        let dir = layout::pci_device(&address);
        self.fs().exists(&dir.join("sriov_totalvfs"))
            || discovery::read_optional(self.fs(), &dir.join("class"))
                .and_then(|class| {
                    u32::from_str_radix(class.trim().trim_start_matches("0x"), 16).ok()
                })
                .is_some_and(discovery::gpus::is_display_class)
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
            if let Err(error) = self.start_record(&OperationContext::default(), &record) {
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
