//! udev-like events the simulated host emits, in the order the real kernel sends its uevents
//! (see `docs/simulated-host.md`).

use std::collections::BTreeMap;

/// The uevent action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UeventAction {
    /// A device appeared.
    Add,
    /// A device went away.
    Remove,
    /// A device changed (mdev parents: `MDEV_STATE=registered|unregistered`).
    Change,
    /// A driver bound to the device (`DRIVER=`).
    Bind,
    /// The driver unbound.
    Unbind,
}

impl UeventAction {
    /// The kernel's spelling (`add`, `remove`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Remove => "remove",
            Self::Change => "change",
            Self::Bind => "bind",
            Self::Unbind => "unbind",
        }
    }
}

/// One event, with the properties a udev monitor would show.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SimEvent {
    /// What happened.
    pub action: UeventAction,
    /// The device path below `/sys` (`/devices/virtual/mtty/mtty/<uuid>`).
    pub devpath: String,
    /// The device's subsystem (`mdev`, `pci`, `vfio`, `vfio-dev`, `mtty`, ...).
    pub subsystem: String,
    /// Further properties (`DRIVER`, `MDEV_STATE`, `PCI_SLOT_NAME`, ...).
    pub properties: BTreeMap<String, String>,
}

impl SimEvent {
    /// A property by name.
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties.get(key).map(String::as_str)
    }
}

impl std::fmt::Display for SimEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} ({})",
            self.action.as_str(),
            self.devpath,
            self.subsystem
        )?;
        for (key, value) in &self.properties {
            write!(f, " {key}={value}")?;
        }
        Ok(())
    }
}
