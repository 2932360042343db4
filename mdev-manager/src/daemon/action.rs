//! The one path of a mutating D-Bus method. The method parses its typed options
//! (`dbus_api::options`) into an [`Action`]: the polkit questions to ask and the engine work to
//! run. [`Service::perform`] then authorizes (every question, in order, subject from the
//! message header), runs the work on the blocking pool, publishes the change and returns the
//! work's result for the reply; [`Service::perform_as_job`] differs only in running the same
//! work as a Job. Business rules live in the engine, not here.
//!
//! Publication ([`Service::publish`]) is the one place the exported objects are brought in line
//! after a call, so a caller that sees the reply has already been sent the signals.

use std::sync::Arc;

use dbus_api::BusError;
use zbus::message::Header;
use zbus::{Connection, OwnedObjectPath};

use super::auth::AuthRequest;
use super::{bus_error, error_chain, JobOutcome, JobSpec, Service};
use mdev_engine::schedule::ScheduleError;
use mdev_engine::{Engine, EngineError, OperationContext};

/// The engine work of an action: the cancel token is the Job's, or one nobody cancels for a
/// plain call.
type Work<T> = Box<dyn FnOnce(&Engine, &OperationContext) -> Result<T, BusError> + Send>;

/// An engine error, as the bus error the method replies with (one D-Bus name per kind).
pub trait IntoBusError {
    /// The bus error, its message the whole cause chain.
    fn into_bus_error(self) -> BusError;
}

impl IntoBusError for EngineError {
    fn into_bus_error(self) -> BusError {
        bus_error(&self)
    }
}

impl IntoBusError for BusError {
    fn into_bus_error(self) -> BusError {
        self
    }
}

impl IntoBusError for ScheduleError {
    fn into_bus_error(self) -> BusError {
        BusError::new(self.kind(), error_chain(&self))
    }
}

/// When the exported objects are brought in line after the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publish {
    /// After success (a failed call changed nothing: every engine call is all or nothing).
    OnSuccess,
    /// Also after a failure (a batch that removed some devices before it failed).
    Always,
    /// Never (a dry run, a read).
    Never,
}

/// One call, parsed: who must be allowed what, and what runs on the engine.
pub struct Action<T> {
    checks: Vec<AuthRequest>,
    /// For a Job: engine checks run (and answered) before the Job starts.
    precheck: Option<Work<()>>,
    work: Work<T>,
    publish: Publish,
}

impl<T> std::fmt::Debug for Action<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Action")
            .field("checks", &self.checks)
            .field("publish", &self.publish)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Action<T> {
    /// `work` on the engine, published after success, authorized by nothing yet.
    pub fn new<E: IntoBusError>(
        work: impl FnOnce(&Engine, &OperationContext) -> Result<T, E> + Send + 'static,
    ) -> Self {
        Self {
            checks: Vec::new(),
            precheck: None,
            work: Box::new(move |engine, token| {
                work(engine, token).map_err(IntoBusError::into_bus_error)
            }),
            publish: Publish::OnSuccess,
        }
    }

    /// Also asks polkit `request` (after the ones before it).
    pub fn authorized_by(mut self, request: AuthRequest) -> Self {
        self.checks.push(request);
        self
    }

    /// Asks polkit `request` only when `needed`.
    pub fn authorized_by_if(self, needed: bool, request: impl FnOnce() -> AuthRequest) -> Self {
        if needed {
            self.authorized_by(request())
        } else {
            self
        }
    }

    /// Runs `check` on the engine after authorization and before the work; as a Job, the
    /// caller gets its refusal instead of a Job that fails (nothing has changed either way).
    pub fn checked_first<E: IntoBusError>(
        mut self,
        check: impl FnOnce(&Engine) -> Result<(), E> + Send + 'static,
    ) -> Self {
        self.precheck = Some(Box::new(move |engine, _| {
            check(engine).map_err(IntoBusError::into_bus_error)
        }));
        self
    }

    /// Publishes also when the work fails part-way.
    pub fn published_even_on_failure(mut self) -> Self {
        self.publish = Publish::Always;
        self
    }

    /// Publishes nothing (the work changes nothing).
    pub fn changing_nothing(mut self) -> Self {
        self.publish = Publish::Never;
        self
    }
}

impl Service {
    /// Authorizes `action`, runs its work on the blocking pool, publishes and returns the
    /// work's result: the body of every synchronous mutating method.
    pub async fn perform<T: Send + 'static>(
        self: &Arc<Self>,
        connection: &Connection,
        action: Action<T>,
    ) -> Result<T, BusError> {
        let Action {
            checks,
            precheck,
            work,
            publish,
        } = action;
        self.authorize(checks).await?;
        self.precheck(precheck).await?;
        let token = OperationContext::default();
        let result = self
            .call(move |engine| Ok(work(engine, &token)))
            .await
            .and_then(|result| result);
        let changed = match publish {
            Publish::OnSuccess => result.is_ok(),
            Publish::Always => true,
            Publish::Never => false,
        };
        if changed {
            self.publish(connection).await;
        }
        result
    }

    /// [`Service::perform`] as a Job: authorizes now, returns the Job's path at once; the work
    /// runs with the Job's cancel token, `outcome` turns its result into the Job's outcome and
    /// the Job publishes before it reports (see [`Service::start_job`]).
    pub async fn perform_as_job<T: Send + 'static>(
        self: &Arc<Self>,
        connection: &Connection,
        header: &Header<'_>,
        action: Action<T>,
        job: JobSpec,
        outcome: impl FnOnce(T) -> JobOutcome + Send + 'static,
    ) -> Result<OwnedObjectPath, BusError> {
        let Action {
            checks,
            precheck,
            work,
            ..
        } = action;
        self.authorize(checks).await?;
        self.precheck(precheck).await?;
        let job = JobSpec {
            started_by_uid: self.caller_uid(connection, header).await,
            ..job
        };
        self.start_job(connection, job, move |engine, token| {
            work(engine, token).map(outcome)
        })
        .await
    }

    /// Asks polkit every question in order; the first refusal is the call's error.
    async fn authorize(&self, checks: Vec<AuthRequest>) -> Result<(), BusError> {
        for request in checks {
            self.authorizer.check(request).await?;
        }
        Ok(())
    }

    /// Runs an action's engine pre-check on the blocking pool.
    async fn precheck(&self, precheck: Option<Work<()>>) -> Result<(), BusError> {
        let Some(check) = precheck else {
            return Ok(());
        };
        let token = OperationContext::default();
        self.call(move |engine| Ok(check(engine, &token)))
            .await
            .and_then(|result| result)
    }

    /// Brings the exported objects in line with the engine after a change: the one call of
    /// [`Service::refresh`] for methods, jobs and rescans.
    pub async fn publish(self: &Arc<Self>, connection: &Connection) {
        self.refresh(connection).await;
    }
}
