//! Engine events: what changed (an instance, a parent), announced to every subscriber after
//! the change is recorded, with a generation count a reader can compare against.

use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{lock, Engine, InstanceKind};
use crate::state::InstanceRecord;

/// What changed, for subscribers (the daemon turns these into D-Bus signals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EngineEvent {
    /// An instance appeared (created by us or seen on the host).
    InstanceAdded {
        /// UUID.
        uuid: String,
    },
    /// An instance went away (or a definition was forgotten).
    InstanceRemoved {
        /// UUID.
        uuid: String,
    },
    /// An instance's record or state changed (claim, weight, persistence, active).
    InstanceChanged {
        /// UUID.
        uuid: String,
    },
    /// A parent (mdev parent or PF) appeared.
    ParentAdded {
        /// Parent name.
        parent: String,
    },
    /// A parent went away.
    ParentRemoved {
        /// Parent name.
        parent: String,
    },
    /// A parent's own record changed (VF count, driver binding, scheduling policy, or the
    /// free VFs of a PF after a VF instance came or went).
    ParentChanged {
        /// Parent name.
        parent: String,
    },
    /// The capacity of one mdev type changed (an mdev of it was made, removed, started or
    /// stopped): its device list and `available_instances`, and with them possibly the room
    /// left in the parent's other types (they share the parent's resources); nothing else of
    /// the parent.
    TypeChanged {
        /// Parent name.
        parent: String,
        /// mdev type id.
        type_id: String,
    },
    /// The set of loaded profiles changed (a reload).
    ProfilesChanged,
}

/// A subscription to [`EngineEvent`]s. Dropping it unsubscribes.
#[derive(Debug)]
pub struct EventSubscription {
    receiver: mpsc::Receiver<EngineEvent>,
}

impl EventSubscription {
    /// Waits for the next event; `None` when the engine is gone.
    pub fn recv(&self) -> Option<EngineEvent> {
        self.receiver.recv().ok()
    }

    /// Waits at most `timeout`; `None` on timeout or when the engine is gone.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<EngineEvent> {
        self.receiver.recv_timeout(timeout).ok()
    }

    /// The next event if one is queued.
    pub fn try_recv(&self) -> Option<EngineEvent> {
        self.receiver.try_recv().ok()
    }
}

impl Engine {
    /// How many events the engine has emitted so far. A reader that notes it *before* reading
    /// the engine has seen every change announced up to that count: a subscriber can skip the
    /// events it covers (the daemon refreshes its objects once for a method's own change
    /// instead of once more for the change's events).
    pub fn event_generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Subscribes to engine events.
    pub fn subscribe(&self) -> EventSubscription {
        let (sender, receiver) = mpsc::channel();
        lock(&self.subscribers).push(sender);
        EventSubscription { receiver }
    }

    pub(crate) fn emit(&self, event: EngineEvent) {
        // Counted before it is sent, so a subscriber that sees the event also sees the count.
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // A send fails only for a dropped subscription, which is how unsubscribing works.
        lock(&self.subscribers).retain(|subscriber| subscriber.send(event.clone()).is_ok());
    }

    /// Announces that `record`'s device appeared on or left its parent: for an mdev the
    /// capacity of its type ([`EngineEvent::TypeChanged`]), for the other kinds the parent
    /// (a PF's free VFs, a GPU's binding: [`EngineEvent::ParentChanged`]).
    pub(crate) fn emit_capacity_change(&self, record: &InstanceRecord) {
        self.emit(match record.kind {
            InstanceKind::Mdev => EngineEvent::TypeChanged {
                parent: record.parent.to_string(),
                type_id: record.type_id.to_string(),
            },
            _ => EngineEvent::ParentChanged {
                parent: record.parent.to_string(),
            },
        });
    }
}
