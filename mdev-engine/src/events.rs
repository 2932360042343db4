//! Engine events: what changed (an instance, a parent), announced to every subscriber after
//! the change is recorded, with a generation count a reader can compare against.

use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{lock, Engine};

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
    /// A parent changed (available instances, VF count, schedule).
    ParentChanged {
        /// Parent name.
        parent: String,
    },
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
}
