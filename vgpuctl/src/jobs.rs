//! Waiting for a job the service started for us (a Ctrl-C cancels it), and naming a job. The
//! `jobs` and `job cancel` commands are in `commands::jobs`.

use std::collections::HashMap;

use dbus_api::names::{interface, BUS_NAME};
use dbus_api::options::NoOptions;
use dbus_api::proxy::JobProxy;
use dbus_api::{path, ClientError, ErrorKind};
use futures_util::StreamExt;
use tokio::signal::unix::{signal, Signal, SignalKind};
use vgpu_types::error_chain;
use zbus::message::Type;
use zbus::{Connection, MatchRule, MessageStream, OwnedObjectPath, OwnedVariant};

use crate::failure::{failure, Failure, EXIT_UNAVAILABLE};
use crate::service::Sent;

/// Prefix of every job's path.
const JOBS_PATH: &str = "/org/mdevmanager/VGpu1/jobs";

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    /// The job.
    pub job: OwnedObjectPath,
    /// Whether it succeeded.
    pub success: bool,
    /// Its message (`<Kind>: <text>` on failure).
    pub message: String,
    /// The objects it made.
    pub result_objects: Vec<OwnedObjectPath>,
    /// On failure, the D-Bus error name (`Job.ErrorName`; empty from an older service).
    pub error_name: String,
}

impl JobEnd {
    /// The failure for a job that did not succeed (exit status from the error kind).
    pub fn failure(&self) -> Failure {
        match ErrorKind::from_dbus_name(&self.error_name) {
            Some(kind) => failure(kind, self.message.clone()),
            None => job_failure(&self.message),
        }
    }

    /// Whether it ended cancelled (error kind `Cancelled`).
    pub fn cancelled(&self) -> bool {
        !self.success && self.failure().code == ErrorKind::Cancelled.exit_code()
    }

    /// `done`, `failed` or `cancelled`, as `Manager.JobRemoved` says it.
    pub fn result(&self) -> &'static str {
        if self.success {
            "done"
        } else if self.cancelled() {
            "cancelled"
        } else {
            "failed"
        }
    }
}

/// A job's failure message is `<Kind>: <message>`; the kind picks the exit status.
pub fn job_failure(message: &str) -> Failure {
    let kind = message
        .split_once(':')
        .and_then(|(kind, _)| ErrorKind::ALL.into_iter().find(|k| k.short_name() == kind))
        .unwrap_or(ErrorKind::Failed);
    failure(kind, message.to_string())
}

/// Job signals subscribed to *before* the call that starts a job, so a job that ends before
/// its path is known is not missed.
pub struct JobWatch {
    stream: MessageStream,
}

impl JobWatch {
    /// Subscribes to the service's `PropertiesChanged` on job objects.
    pub async fn subscribe(connection: &Connection) -> Result<Self, Failure> {
        let rule = MatchRule::builder()
            .msg_type(Type::Signal)
            .sender(BUS_NAME)
            .interface("org.freedesktop.DBus.Properties")
            .member("PropertiesChanged")
            .path_namespace(JOBS_PATH)
            .build()?;
        let stream = MessageStream::for_match_rule(rule, connection, None).await?;
        Ok(Self { stream })
    }

    /// Waits until `job` finishes (its `Finished` turns true, announced with its result in one
    /// `PropertiesChanged`).
    pub async fn wait(mut self, job: &OwnedObjectPath) -> Result<JobEnd, Failure> {
        while let Some(message) = self.stream.next().await {
            let message = message?;
            if message.header().path().map(|p| p.as_str()) != Some(job.as_str()) {
                continue;
            }
            let Ok((iface, changed, _)) =
                message
                    .body()
                    .deserialize::<(String, HashMap<String, OwnedVariant>, Vec<String>)>()
            else {
                continue;
            };
            if iface != interface::JOB {
                continue;
            }
            let get_bool = |name: &str| {
                changed
                    .get(name)
                    .and_then(|v| bool::try_from(v).ok())
                    .unwrap_or(false)
            };
            if !get_bool("Finished") {
                continue;
            }
            let text = |name: &str| {
                changed
                    .get(name)
                    .and_then(|v| v.try_clone().ok())
                    .and_then(|v| String::try_from(v).ok())
                    .unwrap_or_default()
            };
            let message = text("Message");
            let error_name = text("ErrorName");
            let result_objects = changed
                .get("ResultObjects")
                .and_then(|v| v.try_clone().ok())
                .and_then(|v| Vec::<OwnedObjectPath>::try_from(v).ok())
                .unwrap_or_default();
            return Ok(JobEnd {
                job: job.clone(),
                success: get_bool("Success"),
                message,
                result_objects,
                error_name,
            });
        }
        Err(Failure::new(
            format!("the service went away before job {} finished", job.as_str()),
            EXIT_UNAVAILABLE,
        ))
    }
}

/// The signal that interrupted a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// SIGINT (Ctrl-C).
    Int,
    /// SIGTERM.
    Term,
}

impl Interrupt {
    /// How the user knows it.
    fn name(self) -> &'static str {
        match self {
            Interrupt::Int => "Ctrl-C",
            Interrupt::Term => "SIGTERM",
        }
    }

    /// The shell's status for a process ended by this signal (128 + its number), used when a
    /// second one stops the waiting.
    pub fn exit_code(self) -> u8 {
        match self {
            Interrupt::Int => 130,
            Interrupt::Term => 143,
        }
    }
}

/// SIGINT and SIGTERM caught while vgpuctl waits for a job it started. Catch them *before* the
/// call that starts the job: from then on an interrupt cancels the job instead of ending vgpuctl
/// and leaving the job running (one that arrives during the call is acted on once the job's path
/// is back).
pub struct Interrupts {
    int: Signal,
    term: Signal,
}

impl Interrupts {
    /// Installs the handlers (for the rest of the process: they are not given back).
    pub fn catch() -> Result<Self, Failure> {
        let install = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| Failure::new(format!("cannot catch {name}: {e}"), 1))
        };
        Ok(Self {
            int: install(SignalKind::interrupt(), "SIGINT")?,
            term: install(SignalKind::terminate(), "SIGTERM")?,
        })
    }

    /// The next interrupt.
    async fn next(&mut self) -> Interrupt {
        tokio::select! {
            Some(()) = self.int.recv() => Interrupt::Int,
            Some(()) = self.term.recv() => Interrupt::Term,
            // Both streams closed (the runtime is shutting down): no interrupt will come.
            else => std::future::pending().await,
        }
    }
}

/// A job waited for by [`wait_or_cancel`].
#[derive(Debug)]
pub struct Waited {
    /// How it ended (its own result: done, or failed for a reason other than our cancel).
    pub end: JobEnd,
    /// An interrupt asked the service to cancel it, but it ended before the cancel took effect;
    /// the caller says what it did.
    pub cancel_too_late: bool,
}

/// What became of the cancel an interrupt asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelState {
    /// The service took it (or the job was gone already): the job ends cancelled, or completed
    /// if it was past its last check.
    Requested,
    /// The job cannot be cancelled, or the service refused: it runs to its own end.
    Refused,
}

/// Waits for `job` (watched by `watch`, subscribed before the job started). The first
/// interrupt asks the service to cancel it (`Job.Cancel`; its starter always may) and the wait
/// goes on until the job ends; a second one stops waiting at once. `undone` says what a
/// cancelled job leaves behind (`nothing was created`).
///
/// Returns the job's end when it ran to its own end; a job we cancelled is the `Cancelled`
/// failure (exit 12) saying so; a second interrupt is a failure with the shell's status for
/// the signal (130 for Ctrl-C).
pub async fn wait_or_cancel(
    connection: &Connection,
    watch: JobWatch,
    job: &OwnedObjectPath,
    interrupts: &mut Interrupts,
    undone: &str,
) -> Result<Waited, Failure> {
    let end = watch.wait(job);
    tokio::pin!(end);

    // Until the first interrupt.
    let first = tokio::select! {
        end = &mut end => {
            return Ok(Waited { end: end?, cancel_too_late: false });
        }
        interrupt = interrupts.next() => interrupt,
    };
    eprintln!(
        "vgpuctl: {}: cancelling job {} ({} again stops waiting)",
        first.name(),
        job.as_str(),
        first.name()
    );

    // While the cancel is being asked for.
    let call = request_cancel(connection, job);
    tokio::pin!(call);
    let state = tokio::select! {
        end = &mut end => {
            return finish(end?, CancelState::Requested, undone);
        }
        interrupt = interrupts.next() => {
            return Err(stop_waiting(job, interrupt, "its cancel was being asked for"));
        }
        state = &mut call => state,
    };

    // Until the job ends.
    tokio::select! {
        end = &mut end => finish(end?, state, undone),
        interrupt = interrupts.next() => {
            let what = match state {
                CancelState::Requested => "its cancel was requested",
                CancelState::Refused => "it keeps running",
            };
            Err(stop_waiting(job, interrupt, what))
        }
    }
}

/// The options of the `Job.Cancel` an interrupt sends: never prompt for a password while the
/// user is abandoning the command (the starter needs none).
pub fn cancel_options() -> NoOptions {
    NoOptions {
        no_user_interaction: Some(true),
    }
}

/// `Job.Cancel` on `job`; a refusal is said on stderr (the wait goes on).
async fn request_cancel(connection: &Connection, job: &OwnedObjectPath) -> CancelState {
    let result = async {
        let proxy = JobProxy::builder(connection)
            .path(job.clone())
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        let sent = Sent::new(&cancel_options());
        proxy.cancel(sent.proxy()).await
    }
    .await;
    match result.map_err(ClientError::from) {
        Ok(()) => CancelState::Requested,
        // It has ended already; its end is on its way (the watch subscribed before it began).
        Err(ClientError::Other { name, .. }) if name.ends_with("UnknownObject") => {
            CancelState::Requested
        }
        Err(ClientError::Service {
            kind: ErrorKind::NotSupported,
            message,
        }) => {
            eprintln!(
                "vgpuctl: {message}; waiting for it to end (Ctrl-C again stops waiting; the job keeps running)"
            );
            CancelState::Refused
        }
        Err(error) => {
            eprintln!(
                "vgpuctl: cannot cancel job {}: {}; waiting for it to end (Ctrl-C again stops waiting; the job keeps running)",
                job.as_str(),
                error_chain(&error)
            );
            CancelState::Refused
        }
    }
}

/// The outcome of a job that ended after an interrupt asked for its cancel.
fn finish(end: JobEnd, state: CancelState, undone: &str) -> Result<Waited, Failure> {
    if state == CancelState::Refused {
        return Ok(Waited {
            end,
            cancel_too_late: false,
        });
    }
    if end.cancelled() {
        return Err(failure(
            ErrorKind::Cancelled,
            format!(
                "job {} cancelled: {undone} ({})",
                end.job.as_str(),
                end.message
            ),
        ));
    }
    if !end.success {
        eprintln!(
            "vgpuctl: job {} ended before the cancel took effect",
            end.job.as_str()
        );
    }
    Ok(Waited {
        end,
        cancel_too_late: true,
    })
}

/// A second interrupt: vgpuctl stops waiting for `job` and says where it was left.
fn stop_waiting(job: &OwnedObjectPath, interrupt: Interrupt, state: &str) -> Failure {
    Failure::new(
        format!(
            "{}: stopped waiting for job {} ({state}; `vgpuctl jobs` shows whether it still runs)",
            interrupt.name(),
            job.as_str()
        ),
        interrupt.exit_code(),
    )
}

/// A job path from `PATH` or a job number.
pub fn job_path(text: &str) -> Result<OwnedObjectPath, Failure> {
    if let Ok(id) = text.parse::<u64>() {
        return Ok(path::job_path(id));
    }
    let valid = text
        .strip_prefix(JOBS_PATH)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|id| id.parse::<u64>().is_ok());
    if !valid {
        return Err(failure(
            ErrorKind::InvalidArgs,
            format!("{text:?} is not a job: give its number or its path {JOBS_PATH}/<n>"),
        ));
    }
    OwnedObjectPath::try_from(text.to_string())
        .map_err(|e| failure(ErrorKind::InvalidArgs, format!("job path {text:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_named_by_number_or_path() {
        assert_eq!(
            job_path("3").unwrap().as_str(),
            "/org/mdevmanager/VGpu1/jobs/3"
        );
        assert_eq!(
            job_path("/org/mdevmanager/VGpu1/jobs/12").unwrap().as_str(),
            "/org/mdevmanager/VGpu1/jobs/12"
        );
        for bad in [
            "",
            "x",
            "/org/mdevmanager/VGpu1/jobs/",
            "/org/elsewhere/1",
            "-1",
        ] {
            let failure = job_path(bad).unwrap_err();
            assert_eq!(failure.code, ErrorKind::InvalidArgs.exit_code(), "{bad}");
        }
    }

    fn end(success: bool, message: &str, error_name: &str) -> JobEnd {
        JobEnd {
            job: job_path("7").unwrap(),
            success,
            message: message.into(),
            result_objects: Vec::new(),
            error_name: error_name.into(),
        }
    }

    #[test]
    fn a_job_end_names_its_result() {
        let cancelled = end(
            false,
            "Cancelled: cancelled before parent 0000:08:00.4 appeared",
            "org.mdevmanager.VGpu1.Error.Cancelled",
        );
        assert!(cancelled.cancelled());
        assert_eq!(cancelled.result(), "cancelled");
        // From a service that sends no ErrorName: the message's kind.
        assert_eq!(end(false, "Cancelled: stop", "").result(), "cancelled");
        assert_eq!(end(false, "TimedOut: parent x", "").result(), "failed");
        assert_eq!(end(true, "PF now has 2 VFs", "").result(), "done");
    }

    /// After an interrupt asked for the cancel: a cancelled end is exit 12 saying nothing was
    /// done; an end that beat the cancel is the job's own result, flagged so the caller says
    /// what it did; when the cancel was refused, the end is the job's own result, unflagged.
    #[test]
    fn an_interrupted_wait_ends_as_the_job_did() {
        let cancelled = end(
            false,
            "Cancelled: cancelled before parent 0000:08:00.4 appeared",
            "org.mdevmanager.VGpu1.Error.Cancelled",
        );
        let failure = finish(
            cancelled.clone(),
            CancelState::Requested,
            "nothing was created",
        )
        .unwrap_err();
        assert_eq!(failure.code, ErrorKind::Cancelled.exit_code());
        assert!(
            failure
                .message
                .starts_with("job /org/mdevmanager/VGpu1/jobs/7 cancelled: nothing was created"),
            "{}",
            failure.message
        );
        let waited = finish(cancelled, CancelState::Refused, "nothing was created").unwrap();
        assert!(!waited.cancel_too_late);
        assert_eq!(waited.end.failure().code, ErrorKind::Cancelled.exit_code());

        let done = finish(end(true, "", ""), CancelState::Requested, "-").unwrap();
        assert!(done.cancel_too_late && done.end.success);
        let timed_out = end(
            false,
            "TimedOut: parent 0000:08:00.4 did not appear within 5s",
            "org.mdevmanager.VGpu1.Error.TimedOut",
        );
        let waited = finish(timed_out, CancelState::Requested, "-").unwrap();
        assert_eq!(
            waited.end.failure().code,
            ErrorKind::TimedOut.exit_code(),
            "the job's own failure"
        );
    }

    #[test]
    fn a_second_interrupt_exits_like_the_signal() {
        let job = job_path("7").unwrap();
        let failure = stop_waiting(&job, Interrupt::Int, "its cancel was requested");
        assert_eq!(failure.code, 130);
        assert!(failure
            .message
            .contains("stopped waiting for job /org/mdevmanager/VGpu1/jobs/7"));
        assert_eq!(stop_waiting(&job, Interrupt::Term, "-").code, 143);
    }

    #[test]
    fn a_failed_job_exits_with_its_kind() {
        assert_eq!(
            job_failure("Cancelled: cancelled before binding 0000:41:00.0 to vfio-pci").code,
            ErrorKind::Cancelled.exit_code()
        );
        assert_eq!(
            job_failure("TimedOut: parent mtty did not appear within 5s").code,
            ErrorKind::TimedOut.exit_code()
        );
        assert_eq!(
            job_failure("no kind here").code,
            ErrorKind::Failed.exit_code()
        );
    }
}
