//! Per-instance serialization. Every operation that reads an instance's record, decides on
//! it and then changes the record or the device (claim, start, stop, destroy, adopt, a
//! scheduling change) holds that instance's lock from the read to the last write, so two of
//! them on one UUID run one after the other: a claim never acts on a record a destroy is
//! removing, and two claims never both see "unclaimed".
//!
//! Lock order: instance locks, then a parent's lock, then the state lock. A thread holds at
//! most one set of instance locks at a time (taken all at once: a batch takes every UUID it
//! names in one step), so instance locks cannot deadlock among themselves.

use std::collections::HashSet;
use std::sync::{Condvar, Mutex};

use super::lock;

/// The UUIDs some operation holds right now; waiters sleep on `freed`.
#[derive(Debug, Default)]
pub(crate) struct InstanceLocks {
    busy: Mutex<HashSet<String>>,
    freed: Condvar,
}

/// Holds the locks of some instances until dropped (also on a panic).
#[derive(Debug)]
pub(crate) struct InstanceGuard<'a> {
    locks: &'a InstanceLocks,
    uuids: Vec<String>,
}

impl InstanceLocks {
    /// Waits until no other operation holds `uuid`, then holds it.
    pub(crate) fn hold(&self, uuid: &str) -> InstanceGuard<'_> {
        self.hold_all(std::slice::from_ref(&uuid.to_owned()))
    }

    /// Waits until no other operation holds any of `uuids`, then holds them all at once
    /// (never some of them while waiting for the rest, which could deadlock two batches).
    pub(crate) fn hold_all(&self, uuids: &[String]) -> InstanceGuard<'_> {
        let mut busy = lock(&self.busy);
        while uuids.iter().any(|uuid| busy.contains(uuid)) {
            busy = self
                .freed
                .wait(busy)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        busy.extend(uuids.iter().cloned());
        InstanceGuard {
            locks: self,
            uuids: uuids.to_vec(),
        }
    }
}

impl Drop for InstanceGuard<'_> {
    fn drop(&mut self) {
        let mut busy = lock(&self.locks.busy);
        for uuid in &self.uuids {
            busy.remove(uuid);
        }
        drop(busy);
        self.locks.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_held_instance_makes_the_next_holder_wait_until_it_is_dropped() {
        let locks = Arc::new(InstanceLocks::default());
        let released = Arc::new(AtomicBool::new(false));
        let guard = locks.hold("a");
        let waiter = {
            let locks = Arc::clone(&locks);
            let released = Arc::clone(&released);
            std::thread::spawn(move || {
                let _held = locks.hold_all(&["b".to_owned(), "a".to_owned()]);
                released.load(Ordering::SeqCst)
            })
        };
        // Another instance is free meanwhile.
        drop(locks.hold("c"));
        released.store(true, Ordering::SeqCst);
        drop(guard);
        assert!(
            waiter.join().unwrap(),
            "the waiter got the lock only after the holder dropped it"
        );
        assert!(lock(&locks.busy).is_empty(), "every lock was given back");
    }
}
