//! What an engine operation may be stopped by, and how it saves: the explicit
//! [`OperationContext`] argument.
//!
//! Contract: every engine operation that can wait for a parent, write to the host or be
//! cancelled takes its context as an argument (the `*_with` methods; the plain methods run
//! with [`OperationContext::default`]: never cancelled, no deadline beyond the configured
//! readiness timeout, every record saved as it is committed). Nothing about an operation
//! depends on the thread it runs on. The context is handed down to every step of the
//! operation: a batch create checks its cancel token between requests, a wait for a parent
//! ends by its deadline, and a batch tells the creates inside it to leave the save to the
//! batch's end ([`Durability::DeferredToBatchEnd`]).

use std::time::Instant;

use super::cancel::CancelToken;
use super::EngineError;

/// When a newly committed instance record reaches the state file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Durability {
    /// Each committed record is saved at once (a single create, a claim).
    #[default]
    SaveEachRecord,
    /// The records are saved once, when the batch that runs the creates ends; their UUIDs
    /// were saved as `pending_creates` before any sysfs write, so a crash in between is
    /// repaired by reconcile.
    DeferredToBatchEnd,
}

/// The cancel token, the wait deadline and the durability of one engine operation. Cheap to
/// clone (the token is shared). [`OperationContext::default`] is the context of a plain call.
#[derive(Debug, Clone, Default)]
pub struct OperationContext {
    cancel: CancelToken,
    /// Every wait for a parent inside the operation ends by then.
    deadline: Option<Instant>,
    durability: Durability,
}

impl OperationContext {
    /// The context of a plain call: not cancellable, no deadline, every record saved at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// A context whose long steps stop, rolled back, once `token` is cancelled.
    pub fn cancellable(token: CancelToken) -> Self {
        Self {
            cancel: token,
            ..Self::default()
        }
    }

    /// This context with every wait ending by `deadline` at the latest (an earlier deadline
    /// the context already has stays).
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(
            self.deadline
                .map_or(deadline, |earlier| earlier.min(deadline)),
        );
        self
    }

    /// The token that cancels this operation.
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// When every wait inside the operation ends, if it has a deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the operation was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// `Err(EngineError::Cancelled)` naming `what` (the step not taken) once cancelled.
    pub fn check(&self, what: impl FnOnce() -> String) -> Result<(), EngineError> {
        self.cancel.check(what)
    }

    /// This context for the creates inside a batch: their records are saved at the batch's end.
    pub(super) fn in_batch(&self) -> Self {
        Self {
            durability: Durability::DeferredToBatchEnd,
            ..self.clone()
        }
    }

    /// How the records this operation commits are saved.
    pub(super) fn durability(&self) -> Durability {
        self.durability
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_plain_context_is_never_cancelled_has_no_deadline_and_saves_each_record() {
        let context = OperationContext::default();
        assert!(!context.is_cancelled());
        assert!(context.check(|| "anything".into()).is_ok());
        assert_eq!(context.deadline(), None);
        assert_eq!(context.durability(), Durability::SaveEachRecord);
    }

    #[test]
    fn a_cancellable_context_shares_its_token_and_names_the_step_not_taken() {
        let token = CancelToken::new();
        let context = OperationContext::cancellable(token.clone());
        let batch = context.in_batch();
        token.cancel();
        for context in [&context, &batch] {
            let error = context.check(|| "creating mtty-1".into()).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Cancelled);
            assert_eq!(error.to_string(), "cancelled before creating mtty-1");
        }
    }

    #[test]
    fn a_later_deadline_never_extends_an_earlier_one() {
        let now = Instant::now();
        let early = now + Duration::from_secs(1);
        let late = now + Duration::from_secs(60);
        let context = OperationContext::new().with_deadline(early);
        assert_eq!(context.clone().with_deadline(late).deadline(), Some(early));
        assert_eq!(
            OperationContext::new()
                .with_deadline(late)
                .with_deadline(early)
                .deadline(),
            Some(early)
        );
    }

    #[test]
    fn a_batch_context_defers_saves_and_keeps_token_and_deadline() {
        let deadline = Instant::now() + Duration::from_secs(5);
        let context = OperationContext::new().with_deadline(deadline);
        let batch = context.in_batch();
        assert_eq!(batch.durability(), Durability::DeferredToBatchEnd);
        assert_eq!(batch.deadline(), Some(deadline));
        assert_eq!(context.durability(), Durability::SaveEachRecord);
    }
}
