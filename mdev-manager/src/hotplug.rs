//! Hotplug: kernel device events (udev on a real host, the simulated host's event channel in
//! tests) that tell the engine a parent or an instance appeared, vanished or changed.

use std::collections::BTreeMap;
use std::time::Duration;

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
