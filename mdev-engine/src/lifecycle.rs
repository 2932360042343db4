//! Lifecycle steps on the host: create/remove mdevs, set VF counts, bind VFs to `vfio-pci`
//! and back, set NVIDIA VF vGPU types. Each step is one short sequence of sysfs writes with the
//! kernel's rules (ordering, `0` before a new VF count) and refuses before writing anything when
//! a process holds the device.
//!
//! Writes that can block in the kernel go through a [`BoundedWriter`]: the write runs on its own
//! thread and the caller waits at most the configured timeout; a write still stuck afterwards is
//! counted (and refused new company once too many are stuck), never forgotten. A writer made
//! with [`BoundedWriter::inline`] has no deadline and writes on the caller's thread instead:
//! for hosts whose writes cannot block (a simulated host under the model fuzzer), where the
//! hand-over to a worker only adds two thread wake-ups to every write.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use crate::{lock, EngineError};
use mdev_host::discovery::{self, layout, names::PciAddress};
use mdev_host::holders;
use mdev_host::HostFs;

pub use mdev_host::discovery::VFIO_PCI;

/// The NVIDIA host driver, whose SR-IOV VFs carry vGPUs while bound to it.
pub const NVIDIA_DRIVER: &str = "nvidia";

/// How many writes may stay blocked in the kernel before new blocking writes are refused.
pub const MAX_STUCK_WRITES: usize = 4;

/// How many finished workers wait for the next write instead of ending.
const MAX_IDLE_WORKERS: usize = 2;

/// Runs sysfs writes on worker threads with a timeout (or, made with
/// [`BoundedWriter::inline`], on the caller's thread without one).
#[derive(Debug, Clone)]
pub struct BoundedWriter {
    host: Arc<dyn HostFs>,
    /// `None`: no deadline, the write runs on the caller's thread.
    timeout: Option<Duration>,
    stuck: Arc<AtomicUsize>,
    /// Idle workers, each reached through its job channel. Reusing them keeps a thread spawn
    /// (and, on a busy host, a wait to be scheduled) off every write: reconcile makes hundreds.
    /// Workers hold only a weak reference, so they end when the last writer clone is dropped.
    idle: Arc<Mutex<Vec<mpsc::Sender<WorkerJob>>>>,
}

/// What a worker runs: the write, returning what hands its result to the caller.
type WorkerRun = Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send>;

/// A write for a worker, with the handle that puts the worker back into the idle pool.
struct WorkerJob {
    /// The worker goes back into the pool between the write and the hand-over of its result,
    /// so a caller that writes again at once (reconcile, a batch) finds it idle instead of
    /// starting a thread.
    run: WorkerRun,
    handle: mpsc::Sender<WorkerJob>,
}

impl std::fmt::Debug for WorkerJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkerJob")
    }
}

impl BoundedWriter {
    /// A writer over `host` that waits at most `timeout` per write.
    pub fn new(host: Arc<dyn HostFs>, timeout: Duration) -> Self {
        Self::with_deadline(host, Some(timeout))
    }

    /// A writer over `host` that writes on the caller's thread and waits as long as the write
    /// takes: no worker, no deadline, so nothing is ever counted stuck. Only for hosts whose
    /// writes return promptly (a simulated host); a real kernel write can block for good.
    pub fn inline(host: Arc<dyn HostFs>) -> Self {
        Self::with_deadline(host, None)
    }

    fn with_deadline(host: Arc<dyn HostFs>, timeout: Option<Duration>) -> Self {
        Self {
            host,
            timeout,
            stuck: Arc::new(AtomicUsize::new(0)),
            idle: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Runs `run` on an idle worker, or on a new one when none is idle (a worker stuck in the
    /// kernel is not idle, so a blocked write never delays the next).
    fn dispatch(&self, run: WorkerRun) -> std::io::Result<()> {
        let mut run = run;
        loop {
            let Some(handle) = lock(&self.idle).pop() else {
                break;
            };
            match handle.send(WorkerJob {
                run,
                handle: handle.clone(),
            }) {
                Ok(()) => return Ok(()),
                // That worker is gone; take the job back and try the next.
                Err(mpsc::SendError(back)) => run = back.run,
            }
        }
        let (handle, jobs) = mpsc::channel::<WorkerJob>();
        let pool = Arc::downgrade(&self.idle);
        std::thread::Builder::new()
            .name("sysfs-write".into())
            .spawn(move || {
                let mut next = Some(WorkerJob { run, handle });
                while let Some(WorkerJob { run, handle }) = next.take() {
                    let deliver = run();
                    let pooled = pool.upgrade().is_some_and(|pool| {
                        let mut idle = lock(&pool);
                        if idle.len() >= MAX_IDLE_WORKERS {
                            return false;
                        }
                        idle.push(handle);
                        true
                    });
                    deliver();
                    if !pooled {
                        return;
                    }
                    next = jobs.recv().ok();
                }
            })
            .map(drop)
    }

    /// Writes still blocked in the kernel after their caller gave up.
    pub fn stuck(&self) -> usize {
        self.stuck.load(Ordering::SeqCst)
    }

    /// Writes `data` to `path`, waiting at most the timeout (an inline writer: as long as
    /// the write takes).
    pub fn write(&self, path: &Path, data: &[u8]) -> Result<(), EngineError> {
        let stuck = self.stuck();
        if stuck >= MAX_STUCK_WRITES {
            return Err(EngineError::TooManyStuckWrites {
                stuck,
                path: path.to_owned(),
            });
        }
        let Some(timeout) = self.timeout else {
            // Same result and error as a worker's write that finished in time.
            return self
                .host
                .write(path, data)
                .map_err(|source| EngineError::Sysfs {
                    op: "write",
                    path: path.to_owned(),
                    source,
                });
        };
        let slot = Arc::new((Mutex::new(WriteSlot::default()), Condvar::new()));
        let host = Arc::clone(&self.host);
        let thread_path = path.to_owned();
        let thread_data = data.to_vec();
        let thread_slot = Arc::clone(&slot);
        let thread_stuck = Arc::clone(&self.stuck);
        // The worker owns everything it needs, so an abandoned write can finish (or stay
        // blocked) without borrowing from the caller.
        let spawned = self.dispatch(Box::new(move || {
            let result = host.write(&thread_path, &thread_data);
            Box::new(move || {
                let (lock, ready) = &*thread_slot;
                let mut slot = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if slot.abandoned {
                    // The caller gave up and counted this write as stuck; it is not any more.
                    thread_stuck.fetch_sub(1, Ordering::SeqCst);
                } else {
                    slot.result = Some(result);
                    ready.notify_all();
                }
            })
        }));
        if let Err(source) = spawned {
            return Err(EngineError::Sysfs {
                op: "write",
                path: path.to_owned(),
                source,
            });
        }
        let (lock, ready) = &*slot;
        let guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (mut guard, _) = ready
            .wait_timeout_while(guard, timeout, |slot| slot.result.is_none())
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match guard.result.take() {
            Some(result) => result.map_err(|source| EngineError::Sysfs {
                op: "write",
                path: path.to_owned(),
                source,
            }),
            None => {
                // Under the slot's lock, so the worker sees `abandoned` exactly when it was counted.
                guard.abandoned = true;
                self.stuck.fetch_add(1, Ordering::SeqCst);
                Err(EngineError::WriteTimedOut {
                    path: path.to_owned(),
                    timeout,
                })
            }
        }
    }
}

/// Hand-over between a bounded write's worker and its caller.
#[derive(Debug, Default)]
struct WriteSlot {
    result: Option<std::io::Result<()>>,
    abandoned: bool,
}

/// The host plus the writer: what every lifecycle step needs.
#[derive(Debug, Clone)]
pub struct Host {
    /// File operations.
    pub fs: Arc<dyn HostFs>,
    /// Bounded writes.
    pub writer: BoundedWriter,
    /// uevents our own writes cause (mdev add/remove, a VF's driver bind/unbind), so hotplug
    /// does not announce them a second time.
    pub echoes: Arc<OwnEchoes>,
}

/// How long an expected uevent of our own write is waited for. A uevent reaches the monitor
/// within milliseconds; the window only bounds what an event that never came can hide.
const ECHO_WINDOW: Duration = Duration::from_secs(30);

/// Which uevent one of our writes causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EchoKind {
    /// mdev `add` (our `create` write).
    Added,
    /// mdev `remove` (our `remove` write).
    Removed,
    /// PCI `bind` of a function (our `drivers_probe` write when taking or giving back a VF).
    Bound,
    /// PCI `unbind` of a function (our write to its driver's `unbind`).
    Unbound,
}

/// The mdev `add`/`remove` and PCI `bind`/`unbind` uevents the service's own writes are about
/// to cause. The engine
/// announces its own changes itself (after recording them); the kernel's uevent for the same
/// change is recognised here and dropped, while changes made outside the service still come
/// through hotplug. Registered *before* the write, because the uevent can arrive before the
/// writing call returns.
#[derive(Debug, Default)]
pub struct OwnEchoes {
    expected: Mutex<Expected>,
}

/// The expectations by kind and device, and the same in the order they were noted (with when),
/// so expiring the old ones looks only at those old enough: a scan of every expectation on
/// each write made a reconcile of 4,096 instances quadratic.
#[derive(Debug, Default)]
struct Expected {
    by_id: std::collections::HashMap<(EchoKind, String), std::time::Instant>,
    /// Oldest first; an entry whose key was taken, cancelled or noted again since stays
    /// here until it expires, and then removes nothing.
    noted: std::collections::VecDeque<(std::time::Instant, EchoKind, String)>,
}

impl Expected {
    /// Drops the expectations noted `ECHO_WINDOW` or longer before `now`.
    fn expire(&mut self, now: std::time::Instant) {
        while self
            .noted
            .front()
            .is_some_and(|(since, ..)| now.duration_since(*since) >= ECHO_WINDOW)
        {
            if let Some((since, kind, id)) = self.noted.pop_front() {
                let key = (kind, id);
                // Noted again since: that later note is the one in force.
                if self.by_id.get(&key) == Some(&since) {
                    self.by_id.remove(&key);
                }
            }
        }
    }
}

impl OwnEchoes {
    /// Notes that our write will cause `kind` for the device `id` (an mdev UUID, a PCI
    /// address: the uevent's sysname).
    pub fn expect(&self, kind: EchoKind, id: &str) {
        let now = std::time::Instant::now();
        let mut expected = lock(&self.expected);
        expected.expire(now);
        expected.by_id.insert((kind, id.to_owned()), now);
        expected.noted.push_back((now, kind, id.to_owned()));
    }

    /// Drops an expectation whose write failed (no uevent will come).
    pub fn cancel(&self, kind: EchoKind, id: &str) {
        lock(&self.expected).by_id.remove(&(kind, id.to_owned()));
    }

    /// Whether a uevent is the echo of our own write (consumes the expectation).
    pub fn take(&self, kind: EchoKind, uuid: &str) -> bool {
        let now = std::time::Instant::now();
        let mut expected = lock(&self.expected);
        expected.expire(now);
        expected
            .by_id
            .remove(&(kind, uuid.to_owned()))
            .is_some_and(|since| now.duration_since(since) < ECHO_WINDOW)
    }

    /// Runs `write` expecting `kind` for `id`; a write refused outright causes no uevent,
    /// while one that timed out may still complete, so its expectation stays.
    fn around(
        &self,
        kind: EchoKind,
        id: &str,
        write: impl FnOnce() -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        self.expect(kind, id);
        let result = write();
        if let Err(error) = &result {
            if !matches!(error, EngineError::WriteTimedOut { .. }) {
                self.cancel(kind, id);
            }
        }
        result
    }
}

impl Host {
    /// Writes a text value (validated by the caller) to a sysfs attribute.
    pub fn write(&self, path: &Path, value: &str) -> Result<(), EngineError> {
        self.writer.write(path, value.as_bytes())
    }

    fn refuse_if_held(&self, what: String, nodes: Vec<PathBuf>) -> Result<(), EngineError> {
        let holders = holders::find_holders(self.fs.as_ref(), &nodes);
        if holders.is_empty() {
            Ok(())
        } else {
            Err(EngineError::InUse { what, holders })
        }
    }

    /// Refuses when a process holds the mdev's group node or cdev.
    pub fn check_mdev_not_held(&self, uuid: &crate::Uuid) -> Result<(), EngineError> {
        let dir = layout::mdev_device(uuid);
        let group = discovery::iommu_group_of(self.fs.as_ref(), &dir);
        let cdev = discovery::list_sorted(self.fs.as_ref(), &dir.join("vfio-dev"))
            .ok()
            .and_then(|names| names.into_iter().next());
        self.refuse_if_held(
            format!("mdev {uuid}"),
            holders::device_nodes(group, cdev.as_deref()),
        )
    }

    /// Refuses when a process holds the PCI function's group node or cdev.
    pub fn check_pci_not_held(&self, address: PciAddress) -> Result<(), EngineError> {
        let dir = layout::pci_device(&address);
        let group = discovery::iommu_group_of(self.fs.as_ref(), &dir);
        let cdev = discovery::pci_vfio_device(self.fs.as_ref(), address);
        self.refuse_if_held(
            format!("PCI device {address}"),
            holders::device_nodes(group, cdev.as_deref()),
        )
    }

    /// Creates an mdev and writes its vendor attributes in order. If an attribute write fails,
    /// the new mdev is removed again (and a failing removal is reported with the cause).
    pub fn create_mdev(
        &self,
        parent: &str,
        type_id: &str,
        uuid: &crate::Uuid,
        attributes: &[(String, String)],
    ) -> Result<(), EngineError> {
        self.echoes.around(EchoKind::Added, &uuid.to_string(), || {
            self.write(
                &layout::mdev_type(parent, type_id).join("create"),
                &uuid.to_string(),
            )
        })?;
        for (name, value) in attributes {
            let path = layout::mdev_device(uuid).join(name);
            if let Err(error) = self.write(&path, value) {
                let rollback = self
                    .remove_mdev(uuid)
                    .err()
                    .map(|e| format!("removing mdev {uuid}: {e}"));
                return Err(EngineError::Batch {
                    step: format!("writing attribute {name} of mdev {uuid}"),
                    source: Box::new(error),
                    rollback_failures: rollback.into_iter().collect(),
                });
            }
        }
        Ok(())
    }

    /// Removes an mdev after checking nobody holds it.
    pub fn remove_mdev(&self, uuid: &crate::Uuid) -> Result<(), EngineError> {
        self.check_mdev_not_held(uuid)?;
        self.echoes
            .around(EchoKind::Removed, &uuid.to_string(), || {
                self.write(&layout::mdev_device(uuid).join("remove"), "1")
            })
    }

    /// Sets a PF's VF count: autoprobe off, `0` first when changing a non-zero count, then `n`.
    /// Refuses when any current VF is held (the kernel would block).
    pub fn set_num_vfs(
        &self,
        pf: PciAddress,
        current: u32,
        num_vfs: u32,
    ) -> Result<(), EngineError> {
        if current == num_vfs {
            return Ok(());
        }
        let dir = layout::pci_device(&pf);
        if current > 0 {
            for vf in self.vfs_of(pf) {
                self.check_pci_not_held(vf)?;
            }
        }
        let autoprobe = dir.join("sriov_drivers_autoprobe");
        if self.fs.exists(&autoprobe) {
            // VFs are handed to guests through vfio-pci, so no host driver should grab them,
            // except on NVIDIA SR-IOV vGPU PFs: there the VFs must be probed by `nvidia` to
            // get their `nvidia/current_vgpu_type` files.
            let pf_driver = discovery::link_target_name(self.fs.as_ref(), &dir.join("driver"));
            let value = if pf_driver.as_deref() == Some(NVIDIA_DRIVER) {
                "1"
            } else {
                "0"
            };
            self.write(&autoprobe, value)?;
        }
        let numvfs = dir.join("sriov_numvfs");
        if current > 0 {
            self.write(&numvfs, "0")?;
        }
        if num_vfs > 0 {
            self.write(&numvfs, &num_vfs.to_string())?;
        }
        Ok(())
    }

    /// The addresses of a PF's enabled VFs, by index.
    pub fn vfs_of(&self, pf: PciAddress) -> Vec<PciAddress> {
        discovery::read_sriov_pf(self.fs.as_ref(), pf)
            .map(|pf| pf.vfs.into_iter().map(|vf| vf.function.address).collect())
            .unwrap_or_default()
    }

    /// Binds a VF to `vfio-pci` (override, unbind the current driver, probe). Returns the driver
    /// it had before (given back by [`Host::unbind_vfio`]).
    pub fn bind_vfio(&self, vf: PciAddress) -> Result<Option<String>, EngineError> {
        let dir = layout::pci_device(&vf);
        let previous = discovery::link_target_name(self.fs.as_ref(), &dir.join("driver"));
        if previous.as_deref() == Some(VFIO_PCI) {
            return Ok(None);
        }
        self.write(&dir.join("driver_override"), VFIO_PCI)?;
        let id = vf.to_string();
        let bound = (|| {
            if let Some(driver) = &previous {
                self.check_pci_not_held(vf)?;
                self.echoes.around(EchoKind::Unbound, &id, || {
                    self.write(&layout::pci_driver_file(driver, "unbind"), &id)
                })?;
            }
            self.echoes.around(EchoKind::Bound, &id, || {
                self.write(Path::new(layout::PCI_DRIVERS_PROBE), &id)
            })?;
            let now = discovery::link_target_name(self.fs.as_ref(), &dir.join("driver"));
            if now.as_deref() != Some(VFIO_PCI) {
                return Err(EngineError::NotSupported {
                    what: format!("binding VF {vf} to {VFIO_PCI}"),
                    reason: format!(
                        "after probing, its driver is {}",
                        now.as_deref().unwrap_or("none")
                    ),
                });
            }
            Ok(())
        })();
        if let Err(error) = bound {
            // Leave the VF as we found it: no override, and its old driver back if we took it.
            let _ = self.write(&dir.join("driver_override"), "\n");
            if previous.is_some()
                && discovery::link_target_name(self.fs.as_ref(), &dir.join("driver")).is_none()
            {
                let _ = self.write(Path::new(layout::PCI_DRIVERS_PROBE), &vf.to_string());
            }
            return Err(error);
        }
        Ok(previous)
    }

    /// Unbinds a VF from `vfio-pci`, clears the override and gives it back to `previous_driver`
    /// (by probing) when it had one.
    pub fn unbind_vfio(
        &self,
        vf: PciAddress,
        previous_driver: Option<&str>,
    ) -> Result<(), EngineError> {
        let dir = layout::pci_device(&vf);
        if !self.fs.exists(&dir) {
            return Ok(());
        }
        self.check_pci_not_held(vf)?;
        let id = vf.to_string();
        if discovery::link_target_name(self.fs.as_ref(), &dir.join("driver")).as_deref()
            == Some(VFIO_PCI)
        {
            self.echoes.around(EchoKind::Unbound, &id, || {
                self.write(&layout::pci_driver_file(VFIO_PCI, "unbind"), &id)
            })?;
        }
        // An empty line clears the override (what `echo "" > driver_override` writes).
        self.write(&dir.join("driver_override"), "\n")?;
        if previous_driver.is_some() {
            self.echoes.around(EchoKind::Bound, &id, || {
                self.write(Path::new(layout::PCI_DRIVERS_PROBE), &id)
            })?;
        }
        Ok(())
    }

    /// Creates an NVIDIA vGPU on a VF by writing its type id to `current_vgpu_type`.
    pub fn set_nvidia_vgpu(&self, vf: PciAddress, type_id: u32) -> Result<(), EngineError> {
        self.write(
            &layout::pci_device(&vf).join("nvidia/current_vgpu_type"),
            &type_id.to_string(),
        )
    }

    /// Destroys the NVIDIA vGPU on a VF (writes `0`), after checking nobody holds the VF.
    pub fn clear_nvidia_vgpu(&self, vf: PciAddress) -> Result<(), EngineError> {
        self.check_pci_not_held(vf)?;
        self.write(
            &layout::pci_device(&vf).join("nvidia/current_vgpu_type"),
            "0",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mdev_host::HostCommands;
    use mdev_sim::SimHost;
    use std::ffi::OsString;
    use std::thread::ThreadId;

    /// The simulated host, noting which thread made each write.
    #[derive(Debug)]
    struct WriterThreads {
        sim: SimHost,
        threads: Mutex<Vec<ThreadId>>,
    }

    impl HostFs for WriterThreads {
        fn read(&self, path: &Path) -> std::io::Result<String> {
            self.sim.read(path)
        }
        fn write(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
            lock(&self.threads).push(std::thread::current().id());
            self.sim.write(path, data)
        }
        fn list(&self, dir: &Path) -> std::io::Result<Vec<OsString>> {
            self.sim.list(dir)
        }
        fn read_link(&self, path: &Path) -> std::io::Result<PathBuf> {
            self.sim.read_link(path)
        }
        fn exists(&self, path: &Path) -> bool {
            self.sim.exists(path)
        }
        fn is_dir(&self, path: &Path) -> bool {
            self.sim.is_dir(path)
        }
        fn commands(&self) -> &dyn HostCommands {
            self.sim.commands()
        }
    }

    const UUID: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001";

    /// Creates an mdev and then writes to a type that does not exist, through `writer`.
    fn create_then_fail(writer: &BoundedWriter) -> (Result<(), EngineError>, String) {
        let created = writer.write(
            &layout::mdev_type("mtty", "mtty-1").join("create"),
            UUID.as_bytes(),
        );
        let refused = writer
            .write(
                &layout::mdev_type("mtty", "no-such-type").join("create"),
                UUID.as_bytes(),
            )
            .expect_err("a write to a missing type's create file fails");
        (created, refused.to_string())
    }

    #[test]
    fn an_inline_writer_writes_on_the_callers_thread_with_the_bounded_writers_results() {
        let mut outcomes = Vec::new();
        for inline in [true, false] {
            let host = Arc::new(WriterThreads {
                sim: SimHost::builtin("samples").unwrap(),
                threads: Mutex::new(Vec::new()),
            });
            let writer = if inline {
                BoundedWriter::inline(host.clone())
            } else {
                BoundedWriter::new(host.clone(), Duration::from_secs(60))
            };
            let (created, refused) = create_then_fail(&writer);
            created.unwrap();
            assert_eq!(host.sim.mdev_uuids(), vec![UUID.to_string()]);
            let threads = lock(&host.threads).clone();
            assert_eq!(threads.len(), 2);
            let on_caller = threads.iter().all(|id| *id == std::thread::current().id());
            assert_eq!(
                on_caller, inline,
                "inline {inline}: writes ran on {threads:?}"
            );
            assert_eq!(writer.stuck(), 0);
            outcomes.push(refused);
        }
        assert_eq!(
            outcomes[0], outcomes[1],
            "the two writers report a failure alike"
        );
        assert!(outcomes[0].contains("no-such-type"), "{}", outcomes[0]);
    }

    /// Expiring looks only at notes old enough, keeps an expectation noted again after an
    /// older note of the same device, and leaves nothing behind once every note expired.
    #[test]
    fn expectations_expire_after_the_window_and_a_renewed_one_survives_its_old_note() {
        let start = std::time::Instant::now();
        let later = start + Duration::from_secs(10);
        let mut expected = Expected::default();
        for (at, id) in [(start, "a"), (start, "b"), (later, "a")] {
            expected.expire(at);
            expected.by_id.insert((EchoKind::Added, id.to_owned()), at);
            expected
                .noted
                .push_back((at, EchoKind::Added, id.to_owned()));
        }
        expected.expire(start + ECHO_WINDOW);
        let held: Vec<&str> = expected.by_id.keys().map(|(_, id)| id.as_str()).collect();
        assert_eq!(held, ["a"], "b expired, a was noted again later");
        assert_eq!(expected.noted.len(), 1);
        expected.expire(later + ECHO_WINDOW);
        assert!(expected.by_id.is_empty());
        assert!(expected.noted.is_empty());
    }

    /// An echo is recognised once: the expectation is consumed by the uevent; a cancelled one
    /// is not recognised at all.
    #[test]
    fn an_expected_echo_is_taken_once_and_a_cancelled_one_never() {
        let echoes = OwnEchoes::default();
        echoes.expect(EchoKind::Added, "u1");
        echoes.expect(EchoKind::Removed, "u2");
        echoes.cancel(EchoKind::Removed, "u2");
        assert!(echoes.take(EchoKind::Added, "u1"));
        assert!(!echoes.take(EchoKind::Added, "u1"));
        assert!(!echoes.take(EchoKind::Removed, "u2"));
        assert!(!echoes.take(EchoKind::Bound, "u1"));
    }
}
