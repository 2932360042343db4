//! Waiting for a parent: bounded by the configured readiness timeout and by the operation's
//! deadline, and ended by its cancel.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{cancel, lock, Engine, EngineError, OperationContext, PciAddress};
use mdev_host::discovery::{layout, names};

impl Engine {
    /// Waits (bounded by `timeout`, default [`EngineConfig::readiness_timeout`]) until `parent`
    /// is registered as an mdev parent or present as a PCI device, and at the latest by `ctx`'s
    /// deadline; a cancel of `ctx` ends the wait.
    pub fn wait_for_parent(
        &self,
        ctx: &OperationContext,
        parent: &str,
        timeout: Option<Duration>,
    ) -> Result<(), EngineError> {
        names::check_sysfs_name("parent", parent)?;
        let mdev_path = layout::mdev_parent(parent);
        let pci_path = parent
            .parse::<PciAddress>()
            .ok()
            .map(|a| layout::pci_device(&a));
        let ready = || {
            self.fs().exists(&mdev_path) || pci_path.as_ref().is_some_and(|p| self.fs().exists(p))
        };
        self.poll_until(ctx, parent, &mdev_path, timeout, ready)
    }

    /// Waits for `path` (the thing `parent` needs) to exist, bounded. A parent the host has never
    /// heard of (no PCI device, no record) is unknown at once rather than waited for.
    pub(crate) fn wait_for_path(
        &self,
        ctx: &OperationContext,
        parent: &str,
        path: &Path,
        timeout: Option<Duration>,
    ) -> Result<(), EngineError> {
        if self.fs().exists(path) {
            return Ok(());
        }
        let expected = parent
            .parse::<PciAddress>()
            .is_ok_and(|a| self.fs().exists(&layout::pci_device(&a)))
            || {
                let state = lock(&self.state);
                state.parents.contains_key(parent)
                    || state.instances.values().any(|r| r.parent == parent)
            };
        if !expected {
            return Err(EngineError::UnknownParent {
                parent: parent.to_owned(),
            });
        }
        self.poll_until(ctx, parent, path, timeout, || self.fs().exists(path))
    }

    fn poll_until(
        &self,
        ctx: &OperationContext,
        parent: &str,
        path: &Path,
        timeout: Option<Duration>,
        ready: impl Fn() -> bool,
    ) -> Result<(), EngineError> {
        let waited = timeout.unwrap_or(self.config.readiness_timeout);
        let start = Instant::now();
        // The operation may bound every wait inside it (its caller's wait-for-parent).
        let deadline = match ctx.deadline() {
            Some(outer) => outer.min(start + waited),
            None => start + waited,
        };
        loop {
            if ready() {
                return Ok(());
            }
            ctx.check(|| format!("{parent} appeared (waiting for {})", path.display()))?;
            let now = Instant::now();
            if now >= deadline {
                return Err(EngineError::ParentNotReady {
                    parent: parent.to_owned(),
                    path: path.to_owned(),
                    waited: now - start,
                });
            }
            std::thread::sleep(
                self.config
                    .poll_interval
                    .min(deadline - now)
                    .min(cancel::CANCEL_SLICE),
            );
        }
    }
}
