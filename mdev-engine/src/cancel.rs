//! Cancelling long operations, and waiting for a parent before one.
//!
//! A [`CancelToken`] is a shared flag: the daemon keeps one per job and sets it when a client
//! calls `Job.Cancel`. The job runs its engine call with an [`OperationContext`] holding the
//! token ([`OperationContext::cancellable`]), and the long operations check it between steps:
//!
//! * a batch create ([`Engine::create_batch`]) and a domain claim ([`Engine::claim_domain`])
//!   before each request or device and once more after the last one, rolling back everything
//!   they did;
//! * a whole-GPU pass-through before binding each member of the IOMMU group (the members already
//!   bound go back to their drivers);
//! * a VF create before binding the VF to `vfio-pci`;
//! * every wait for a parent, at each poll.
//!
//! So a cancelled operation is all or nothing, like a failed one: it ends with
//! [`EngineError::Cancelled`] (kind [`ErrorKind::Cancelled`], possibly inside a `Batch` or
//! pass-through error saying it was rolled back). A step already running (one sysfs write)
//! finishes first; an operation past its last check completes normally.
//!
//! [`Engine::wait_for_parent_then`] retries an operation that failed because its parent is not
//! there yet (SR-IOV VFs being enabled, a vendor driver loading), until it runs or a deadline
//! passes ([`EngineError::ParentWaitTimedOut`], kind `TimedOut`, naming the parent).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::passthrough::PassthroughError;
use super::{Engine, EngineError, EngineEvent, ErrorKind, OperationContext};

/// A cancellation flag shared between whoever may cancel and the operation. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not cancelled yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the operation to stop at its next check. Idempotent.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `Err(EngineError::Cancelled)` naming `what` (the step not taken) once cancelled.
    pub fn check(&self, what: impl FnOnce() -> String) -> Result<(), EngineError> {
        if self.is_cancelled() {
            Err(EngineError::Cancelled { what: what() })
        } else {
            Ok(())
        }
    }
}

impl Engine {
    /// Runs `operation` with `ctx`; while it fails because its parent is not there yet
    /// ([`EngineError::missing_parent`]), waits and runs it again, until it runs, fails
    /// otherwise, `ctx` is cancelled, or `timeout` passes: then
    /// [`EngineError::ParentWaitTimedOut`] names the parent and carries the last failure.
    /// `operation` gets the context to run with: `ctx` ending by the same deadline, so waits
    /// inside it (a parent registering) end then too.
    ///
    /// Each attempt must be all or nothing (a batch create, a domain claim), so a retry starts
    /// from a clean host.
    pub fn wait_for_parent_then<T>(
        &self,
        ctx: &OperationContext,
        timeout: Duration,
        mut operation: impl FnMut(&OperationContext) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let deadline = Instant::now() + timeout;
        let attempt_context = ctx.clone().with_deadline(deadline);
        // Subscribed before the first attempt: a parent that registers or appears (hotplug
        // `ParentAdded`) wakes the wait at once; anything else is seen by polling.
        let events = self.subscribe();
        loop {
            ctx.check(|| "starting".to_owned())?;
            let error = match operation(&attempt_context) {
                Err(error) if error.kind() != ErrorKind::Cancelled => error,
                other => return other,
            };
            let Some(parent) = error.missing_parent() else {
                return Err(error);
            };
            // What the failed attempt itself announced (a rollback) is no reason to retry.
            while events.try_recv().is_some() {}
            let next = Instant::now() + self.config.poll_interval;
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Err(EngineError::ParentWaitTimedOut {
                        parent,
                        waited: timeout,
                        last: Box::new(error),
                    });
                }
                if now >= next {
                    break;
                }
                ctx.check(|| format!("parent {parent} appeared"))?;
                // Slices of the poll interval, so a cancel is seen promptly.
                let slice = (next - now).min(deadline - now).min(CANCEL_SLICE);
                // Only an added parent wakes the retry early: "changed" events come in storms
                // (every create announces one) and would make the retries busy.
                if let Some(EngineEvent::ParentAdded { .. }) = events.recv_timeout(slice) {
                    break;
                }
            }
        }
    }
}

/// Longest sleep between two looks at a cancel token.
pub(crate) const CANCEL_SLICE: Duration = Duration::from_millis(50);

impl EngineError {
    /// The parent this failure says is not there (yet): an unknown or unregistered parent, a
    /// PCI device missing, a VF address that is no VF yet. Looks through `Batch` wrappers.
    pub fn missing_parent(&self) -> Option<String> {
        match self {
            Self::UnknownParent { parent } | Self::ParentNotReady { parent, .. } => {
                Some(parent.clone())
            }
            Self::InvalidArgument {
                what: "VF address",
                value,
                ..
            } => Some(value.clone()),
            Self::Passthrough(PassthroughError::NoDevice { address }) => Some(address.to_string()),
            Self::Batch { source, .. } => source.missing_parent(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{CreateRequest, CreateTarget, DiskFiles, EngineConfig};
    use mdev_sim::{Fault, SimHost};

    const GPU: &str = "0000:41:00.0";
    const AUDIO: &str = "0000:41:00.1";

    fn engine(sim: &SimHost, dir: &std::path::Path) -> Arc<Engine> {
        let config = EngineConfig {
            readiness_timeout: Duration::from_secs(5),
            poll_interval: Duration::from_millis(10),
            write_timeout: Duration::from_secs(5),
            ..EngineConfig::default()
        };
        Arc::new(Engine::new(Arc::new(sim.clone()), Arc::new(DiskFiles::new(dir)), config).unwrap())
    }

    fn driver(sim: &SimHost, address: &str) -> Option<String> {
        mdev_host::discovery::link_target_name(
            sim,
            &std::path::Path::new("/sys/bus/pci/devices")
                .join(address)
                .join("driver"),
        )
    }

    fn wait_until(mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready() {
            assert!(Instant::now() < deadline, "condition not reached");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn token_is_shared_by_clones_and_check_names_the_step() {
        let token = CancelToken::new();
        let clone = token.clone();
        assert!(token.check(|| "x".into()).is_ok());
        clone.cancel();
        assert!(token.is_cancelled());
        let error = token
            .check(|| "binding 0000:41:00.1 to vfio-pci".into())
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Cancelled);
        assert_eq!(
            error.to_string(),
            "cancelled before binding 0000:41:00.1 to vfio-pci"
        );
    }

    #[test]
    fn a_cancelled_token_stops_a_batch_before_it_changes_anything() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(&sim, dir.path());
        let token = CancelToken::new();
        token.cancel();
        let request = CreateRequest::new(CreateTarget::Mdev {
            parent: "mtty".into(),
            type_id: "mtty-1".into(),
        });
        let error = engine
            .create_batch_with(
                &OperationContext::cancellable(token),
                vec![request.clone(), request],
            )
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Cancelled, "{error}");
        assert!(sim.mdev_uuids().is_empty());
        assert!(engine.instances().unwrap().is_empty());
        // The token belongs to that call only: the same thread creates normally afterwards.
        engine
            .create(CreateRequest::new(CreateTarget::Mdev {
                parent: "mtty".into(),
                type_id: "mtty-1".into(),
            }))
            .unwrap();
    }

    #[test]
    fn cancelling_a_passthrough_bind_returns_the_bound_members() {
        let sim =
            SimHost::from_topology_str(include_str!("../../mdev-sim/topologies/passthrough.toml"))
                .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(&sim, dir.path());
        // The audio function is bound first; its probe write blocks until released.
        let fault = sim.inject_fault(Fault::block("/sys/bus/pci/drivers_probe").times(1));
        let token = CancelToken::new();
        let worker = {
            let engine = Arc::clone(&engine);
            let token = token.clone();
            std::thread::spawn(move || {
                let request = CreateRequest::new(CreateTarget::Passthrough {
                    gpu: GPU.into(),
                    force: false,
                });
                engine.create_batch_with(&OperationContext::cancellable(token), vec![request])
            })
        };
        wait_until(|| !sim.blocked_writes().is_empty());
        token.cancel();
        sim.release_fault(fault);
        let error = worker.join().unwrap().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Cancelled, "{error}");
        assert!(
            vgpu_types::error_chain(&error).contains(&format!("cancelled before binding {GPU}")),
            "{}",
            vgpu_types::error_chain(&error)
        );
        assert_eq!(driver(&sim, AUDIO).as_deref(), Some("snd_hda_intel"));
        assert_eq!(driver(&sim, GPU).as_deref(), Some("amdgpu"));
        assert!(engine.instances().unwrap().is_empty());
        assert!(crate::lock(&engine.state).passthrough.is_empty());
    }

    #[test]
    fn a_cancel_during_the_last_vf_bind_still_gives_the_vf_back() {
        let sim = SimHost::builtin("default").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(&sim, dir.path());
        engine
            .set_num_vfs("0000:4b:00.0", 32, Default::default())
            .unwrap();
        const VF: &str = "0000:4b:00.4";
        let before = driver(&sim, VF);
        assert!(before.is_some(), "the VF starts with a host driver");
        let fault = sim.inject_fault(Fault::block("/sys/bus/pci/drivers_probe").times(1));
        let token = CancelToken::new();
        let worker = {
            let engine = Arc::clone(&engine);
            let token = token.clone();
            std::thread::spawn(move || {
                let request = CreateRequest::new(CreateTarget::Vf {
                    pf: "0000:4b:00.0".into(),
                    vf: Some(VF.into()),
                });
                engine.create_batch_with(&OperationContext::cancellable(token), vec![request])
            })
        };
        wait_until(|| !sim.blocked_writes().is_empty());
        token.cancel();
        sim.release_fault(fault);
        let error = worker.join().unwrap().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Cancelled, "{error}");
        assert_eq!(driver(&sim, VF), before);
        assert!(engine.instances().unwrap().is_empty());
    }

    #[test]
    fn waiting_for_a_parent_runs_the_operation_once_it_appears() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(&sim, dir.path());
        sim.unload_module("mtty").unwrap();
        let loader = {
            let sim = sim.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                sim.load_module("mtty").unwrap();
            })
        };
        let request = CreateRequest::new(CreateTarget::Mdev {
            parent: "mtty".into(),
            type_id: "mtty-1".into(),
        });
        let created = engine
            .wait_for_parent_then(&OperationContext::new(), Duration::from_secs(20), |ctx| {
                engine.create_batch_with(ctx, vec![request.clone()])
            })
            .unwrap();
        loader.join().unwrap();
        assert_eq!(created.len(), 1);
        assert_eq!(sim.mdev_uuids(), vec![created[0].uuid.clone()]);
    }

    #[test]
    fn a_parent_registering_wakes_the_wait_without_polling() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        // Polling would first look again after an hour: only the hotplug event can wake it.
        let config = EngineConfig {
            poll_interval: Duration::from_secs(3600),
            ..EngineConfig::default()
        };
        let engine = Arc::new(
            Engine::new(
                Arc::new(sim.clone()),
                Arc::new(DiskFiles::new(dir.path())),
                config,
            )
            .unwrap(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let hotplug = engine.spawn_hotplug(
            Box::new(mdev_sim::host_events::SimHostEvents::new(&sim)),
            Arc::clone(&stop),
        );
        sim.unload_module("mtty").unwrap();
        let loader = {
            let sim = sim.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                sim.load_module("mtty").unwrap();
            })
        };
        let request = CreateRequest::new(CreateTarget::Mdev {
            parent: "mtty".into(),
            type_id: "mtty-1".into(),
        });
        let created =
            engine.wait_for_parent_then(&OperationContext::new(), Duration::from_secs(60), |ctx| {
                engine.create_batch_with(ctx, vec![request.clone()])
            });
        loader.join().unwrap();
        stop.store(true, Ordering::SeqCst);
        hotplug.join().unwrap();
        assert_eq!(created.unwrap().len(), 1);
    }

    #[test]
    fn waiting_for_a_parent_times_out_naming_it_and_creates_nothing() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(&sim, dir.path());
        let request = CreateRequest::new(CreateTarget::Profile {
            profile: "mtty".into(),
            parent: Some("no-such-parent".into()),
        });
        let error = engine
            .wait_for_parent_then(&OperationContext::new(), Duration::from_millis(50), |ctx| {
                engine.create_batch_with(ctx, vec![request.clone()])
            })
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::TimedOut, "{error}");
        assert!(
            error
                .to_string()
                .starts_with("parent no-such-parent did not appear"),
            "{error}"
        );
        assert!(sim.mdev_uuids().is_empty());
    }

    #[test]
    fn other_failures_end_the_wait_at_once_and_a_cancel_ends_it() {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(&sim, dir.path());
        let request = CreateRequest::new(CreateTarget::Profile {
            profile: "no-such-profile".into(),
            parent: None,
        });
        let error = engine
            .wait_for_parent_then(&OperationContext::new(), Duration::from_secs(60), |ctx| {
                engine.create_batch_with(ctx, vec![request.clone()])
            })
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");

        sim.unload_module("mtty").unwrap();
        let token = CancelToken::new();
        let canceller = {
            let token = token.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                token.cancel();
            })
        };
        let request = CreateRequest::new(CreateTarget::Mdev {
            parent: "mtty".into(),
            type_id: "mtty-1".into(),
        });
        let error = engine
            .wait_for_parent_then(
                &OperationContext::cancellable(token),
                Duration::from_secs(60),
                |ctx| engine.create_batch_with(ctx, vec![request.clone()]),
            )
            .unwrap_err();
        canceller.join().unwrap();
        assert_eq!(error.kind(), ErrorKind::Cancelled, "{error}");
        sim.load_module("mtty").unwrap();
        assert!(sim.mdev_uuids().is_empty());
    }
}
