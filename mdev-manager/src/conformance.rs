//! Conformance scenarios: the kernel behaviours the engine relies on, written once against
//! [`HostFs`] and a [`DeviceHolder`], run on the simulated host (`cargo test`,
//! `mdev-conformance --simulate samples`) and on a real kernel (`mdev-conformance --root /`
//! in the VM tier). Every step records its outcome as data (`ok`, an errno name, `blocks`,
//! or a value read) next to the outcome the real 6.1 kernel gave
//! (`docs/simulated-host.md`, conformance table); the two runs' JSON reports are diffed.
//!
//! The scenarios expect the VM tier's guest: `mtty`, `mbochs count=64`, `mdpy count=4`,
//! `nvme` and `vfio-pci` loaded, and QEMU's SR-IOV NVMe PF. Whatever is missing is recorded
//! as `skipped`, never guessed. They only touch instances with UUIDs of their own
//! (`cf000000-0000-4000-8000-…`) and the VFs they enable.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::host::HostFs;
use crate::sim::{errno_name, SimHolder, SimHost};

/// Something that holds a VFIO device open the way a VMM does, until dropped.
pub trait HeldDevice: Send + std::fmt::Debug {}

impl HeldDevice for SimHolder {}

/// Opens a device's VFIO group and the device itself (what QEMU does at start).
pub trait DeviceHolder: Send + Sync {
    /// Holds the device whose sysfs directory is `device` (`/sys/bus/mdev/devices/<uuid>`,
    /// `/sys/bus/pci/devices/<BDF>`). Errors carry the kernel's errno (EBUSY while another
    /// process holds the group).
    fn hold(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>>;
}

/// [`DeviceHolder`] on the simulated host: a simulated `qemu-system-x86` process.
#[derive(Debug, Clone)]
pub struct SimDeviceHolder(pub SimHost);

impl DeviceHolder for SimDeviceHolder {
    fn hold(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>> {
        Ok(Box::new(self.0.hold_device(device, "qemu-system-x86")?))
    }
}

/// [`DeviceHolder`] on a real host rooted at `root`: opens `/dev/vfio/vfio` and
/// `/dev/vfio/<group>`, attaches the group to the container with the type1 IOMMU, and gets
/// the device fd (`VFIO_GROUP_GET_DEVICE_FD`), which is what makes a `remove` block.
#[derive(Debug, Clone)]
pub struct VfioDeviceHolder {
    root: PathBuf,
}

impl VfioDeviceHolder {
    /// A holder for the host rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

/// The open descriptors of a real VFIO device; closing them releases it.
#[derive(Debug)]
pub struct VfioHeld {
    _device: std::os::fd::OwnedFd,
    _group: File,
    _container: File,
}

impl HeldDevice for VfioHeld {}

/// `_IO(';', nr)`: VFIO's ioctls carry no size or direction bits.
const fn vfio_io(nr: u64) -> u64 {
    ((b';' as u64) << 8) | nr
}
const VFIO_SET_IOMMU: u64 = vfio_io(102);
const VFIO_GROUP_SET_CONTAINER: u64 = vfio_io(104);
const VFIO_GROUP_GET_DEVICE_FD: u64 = vfio_io(106);
const VFIO_TYPE1_IOMMU: libc::c_ulong = 1;
const VFIO_TYPE1V2_IOMMU: libc::c_ulong = 3;

impl DeviceHolder for VfioDeviceHolder {
    fn hold(&self, device: &Path) -> io::Result<Box<dyn HeldDevice>> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let fs = crate::host::RealFs::new(&self.root);
        let group_link = fs.read_link(&device.join("iommu_group"))?;
        let group = group_link
            .file_name()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        let name = fs.resolve(device)?.canonicalize()?;
        let name = name
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?
            .to_string();
        let container = OpenOptions::new()
            .read(true)
            .write(true)
            .open(fs.resolve(Path::new("/dev/vfio/vfio"))?)?;
        let group_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(fs.resolve(&Path::new("/dev/vfio").join(group))?)?;
        let container_fd: libc::c_int = container.as_raw_fd();
        // SAFETY: VFIO_GROUP_SET_CONTAINER reads one int (the container fd) through the
        // pointer, which points at a live local for the duration of the call.
        if unsafe {
            libc::ioctl(
                group_file.as_raw_fd(),
                VFIO_GROUP_SET_CONTAINER as libc::Ioctl,
                &container_fd,
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: VFIO_SET_IOMMU takes the IOMMU type by value; no memory is passed.
        if unsafe {
            libc::ioctl(
                container.as_raw_fd(),
                VFIO_SET_IOMMU as libc::Ioctl,
                VFIO_TYPE1V2_IOMMU,
            )
        } < 0
        {
            // SAFETY: as above, with the older type1 IOMMU.
            if unsafe {
                libc::ioctl(
                    container.as_raw_fd(),
                    VFIO_SET_IOMMU as libc::Ioctl,
                    VFIO_TYPE1_IOMMU,
                )
            } < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        let cname =
            std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: VFIO_GROUP_GET_DEVICE_FD reads a NUL-terminated device name through the
        // pointer, which stays valid for the call; it returns a new fd or -1.
        let fd = unsafe {
            libc::ioctl(
                group_file.as_raw_fd(),
                VFIO_GROUP_GET_DEVICE_FD as libc::Ioctl,
                cname.as_ptr(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the ioctl succeeded, so `fd` is a new descriptor nobody else owns.
        let device_fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(Box::new(VfioHeld {
            _device: device_fd,
            _group: group_file,
            _container: container,
        }))
    }
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub enum Outcome {
    /// The operation succeeded (or the check held).
    Ok,
    /// It failed with this errno (`EINVAL`, `ENOSPC`, ...).
    Errno(String),
    /// The write did not return while a holder kept the device open.
    Blocks,
    /// A value read from the host.
    Value(String),
    /// Not run, and why (the host lacks what the step needs).
    Skipped(String),
}

impl From<Outcome> for String {
    fn from(outcome: Outcome) -> String {
        match outcome {
            Outcome::Ok => "ok".to_string(),
            Outcome::Errno(name) => name,
            Outcome::Blocks => "blocks".to_string(),
            Outcome::Value(value) => format!("= {value}"),
            Outcome::Skipped(why) => format!("skipped: {why}"),
        }
    }
}

impl From<String> for Outcome {
    fn from(text: String) -> Outcome {
        if text == "ok" {
            Outcome::Ok
        } else if text == "blocks" {
            Outcome::Blocks
        } else if let Some(value) = text.strip_prefix("= ") {
            Outcome::Value(value.to_string())
        } else if let Some(why) = text.strip_prefix("skipped: ") {
            Outcome::Skipped(why.to_string())
        } else {
            Outcome::Errno(text)
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from(self.clone()))
    }
}

impl Outcome {
    /// The outcome of a file operation.
    pub fn of(result: &io::Result<()>) -> Outcome {
        match result {
            Ok(()) => Outcome::Ok,
            Err(error) => Outcome::Errno(
                error
                    .raw_os_error()
                    .map_or_else(|| format!("{:?}", error.kind()), errno_name),
            ),
        }
    }

    fn errno(code: i32) -> Outcome {
        Outcome::Errno(errno_name(code))
    }
}

/// One step of a scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Scenario name.
    pub scenario: String,
    /// What the step does.
    pub step: String,
    /// What the real 6.1 kernel does (the oracle).
    pub expected: Outcome,
    /// What this host did.
    pub outcome: Outcome,
}

impl Step {
    /// Whether the host did what the real kernel does. Skipped steps count as matching.
    pub fn matches(&self) -> bool {
        matches!(self.outcome, Outcome::Skipped(_)) || self.outcome == self.expected
    }
}

/// The record of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Which host ran (`sim:samples`, `root:/`).
    pub host: String,
    /// Every step in order.
    pub steps: Vec<Step>,
}

impl Report {
    /// Steps whose outcome differs from the real kernel's.
    pub fn mismatches(&self) -> Vec<&Step> {
        self.steps.iter().filter(|s| !s.matches()).collect()
    }

    /// Lines describing where two runs (say, the simulator and the real kernel) differ,
    /// keyed by scenario and step.
    pub fn diff(&self, other: &Report) -> Vec<String> {
        let index = |report: &Report| -> BTreeMap<(String, String), Outcome> {
            report
                .steps
                .iter()
                .map(|s| ((s.scenario.clone(), s.step.clone()), s.outcome.clone()))
                .collect()
        };
        let (mine, theirs) = (index(self), index(other));
        let mut lines = Vec::new();
        for (key, outcome) in &mine {
            match theirs.get(key) {
                Some(other_outcome) if other_outcome == outcome => {}
                Some(other_outcome) => lines.push(format!(
                    "{} / {}: {} = {outcome}, {} = {other_outcome}",
                    key.0, key.1, self.host, other.host
                )),
                None => lines.push(format!("{} / {}: only in {}", key.0, key.1, self.host)),
            }
        }
        for key in theirs.keys().filter(|k| !mine.contains_key(*k)) {
            lines.push(format!("{} / {}: only in {}", key.0, key.1, other.host));
        }
        lines
    }

    /// A plain-text table: scenario, step, expected, outcome, and `MISMATCH` where they differ.
    pub fn to_table(&self) -> String {
        let mut out = format!("conformance on {}\n", self.host);
        for step in &self.steps {
            let flag = if step.matches() { "" } else { "  MISMATCH" };
            out.push_str(&format!(
                "{:<20} {:<58} expected {:<10} got {}{flag}\n",
                step.scenario,
                step.step,
                step.expected.to_string(),
                step.outcome
            ));
        }
        out.push_str(&format!(
            "{} steps, {} mismatches\n",
            self.steps.len(),
            self.mismatches().len()
        ));
        out
    }
}

/// Timing of the blocking checks.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    /// How long a write must stay unfinished while held to count as `blocks`.
    pub block_wait: Duration,
    /// How long a blocked write may take to finish after the holder lets go.
    pub release_wait: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            block_wait: Duration::from_secs(2),
            release_wait: Duration::from_secs(30),
        }
    }
}

const MDEV_BUS: &str = "/sys/class/mdev_bus";
const MDEV_DEVICES: &str = "/sys/bus/mdev/devices";
const PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// The UUIDs the scenarios create; nothing else is ever removed.
fn test_uuid(n: u32) -> String {
    format!("cf000000-0000-4000-8000-{n:012x}")
}

struct Runner {
    host: Arc<dyn HostFs>,
    holder: Arc<dyn DeviceHolder>,
    options: RunOptions,
    steps: Vec<Step>,
    scenario: String,
}

impl Runner {
    fn record(&mut self, step: impl Into<String>, expected: Outcome, outcome: Outcome) {
        self.steps.push(Step {
            scenario: self.scenario.clone(),
            step: step.into(),
            expected,
            outcome,
        });
    }

    fn write(&self, path: &str, data: &[u8]) -> io::Result<()> {
        self.host.write(Path::new(path), data)
    }

    fn step_write(&mut self, step: &str, expected: Outcome, path: &str, data: &[u8]) -> Outcome {
        let outcome = Outcome::of(&self.write(path, data));
        self.record(step, expected, outcome.clone());
        outcome
    }

    fn check(&mut self, step: &str, holds: bool, missing: i32) {
        let outcome = if holds {
            Outcome::Ok
        } else {
            Outcome::errno(missing)
        };
        self.record(step, Outcome::Ok, outcome);
    }

    fn skip(&mut self, step: &str, expected: Outcome, why: &str) {
        self.record(step, expected, Outcome::Skipped(why.to_string()));
    }

    fn type_dir(parent: &str, type_id: &str) -> String {
        format!("{MDEV_BUS}/{parent}/mdev_supported_types/{type_id}")
    }

    fn has_type(&self, parent: &str, type_id: &str) -> bool {
        self.host
            .is_dir(Path::new(&Self::type_dir(parent, type_id)))
    }

    fn create(&self, parent: &str, type_id: &str, uuid: &str) -> io::Result<()> {
        self.write(
            &format!("{}/create", Self::type_dir(parent, type_id)),
            uuid.as_bytes(),
        )
    }

    fn remove(&self, uuid: &str) {
        let _ = self.write(&format!("{MDEV_DEVICES}/{uuid}/remove"), b"1");
    }

    fn device_exists(&self, uuid: &str) -> bool {
        self.host
            .exists(Path::new(&format!("{MDEV_DEVICES}/{uuid}")))
    }

    /// Removes instances a previous interrupted run left behind (our UUIDs only).
    fn clean_leftovers(&self) {
        let Ok(names) = self.host.list(Path::new(MDEV_DEVICES)) else {
            return;
        };
        for name in names {
            let name = name.to_string_lossy();
            if name.starts_with("cf000000-0000-4000-8000-") {
                self.remove(&name);
            }
        }
    }

    /// Runs a write on its own thread; `blocks` if it has not returned within `block_wait`.
    /// Then `release` runs and the write must finish within `release_wait`.
    fn blocking_write(
        &mut self,
        step: &str,
        path: &str,
        data: &'static [u8],
        release: impl FnOnce(),
    ) {
        let (done_tx, done_rx) = channel();
        let host = Arc::clone(&self.host);
        let target = PathBuf::from(path);
        std::thread::spawn(move || {
            let _ = done_tx.send(host.write(&target, data));
        });
        let first = match done_rx.recv_timeout(self.options.block_wait) {
            Ok(result) => Outcome::of(&result),
            Err(_) => Outcome::Blocks,
        };
        let blocked = first == Outcome::Blocks;
        self.record(step, Outcome::Blocks, first);
        release();
        if blocked {
            let after = match done_rx.recv_timeout(self.options.release_wait) {
                Ok(result) => Outcome::of(&result),
                Err(RecvTimeoutError::Timeout) => Outcome::Blocks,
                Err(RecvTimeoutError::Disconnected) => Outcome::errno(libc::EIO),
            };
            self.record(
                format!("{step}: finishes after the holder closes"),
                Outcome::Ok,
                after,
            );
        }
    }
}

/// Runs every scenario and returns the report.
pub fn run(
    host: Arc<dyn HostFs>,
    holder: Arc<dyn DeviceHolder>,
    label: &str,
    options: RunOptions,
) -> Report {
    let mut runner = Runner {
        host,
        holder,
        options,
        steps: Vec::new(),
        scenario: String::new(),
    };
    runner.clean_leftovers();
    for (name, scenario) in SCENARIOS {
        runner.scenario = (*name).to_string();
        scenario(&mut runner);
    }
    Report {
        host: label.to_string(),
        steps: runner.steps,
    }
}

/// Runs the scenarios on a simulated host.
pub fn run_on_sim(host: &SimHost, label: &str, options: RunOptions) -> Report {
    run(
        Arc::new(host.clone()),
        Arc::new(SimDeviceHolder(host.clone())),
        label,
        options,
    )
}

type Scenario = fn(&mut Runner);

/// The scenarios, in run order.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("create", scenario_create),
    ("malformed-uuid", scenario_malformed),
    ("duplicate", scenario_duplicate),
    ("exhaustion", scenario_exhaustion),
    ("remove", scenario_remove),
    ("remove-while-held", scenario_remove_held),
    ("sriov", scenario_sriov),
    ("formats", scenario_formats),
];

fn scenario_create(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip("create mtty-1", Outcome::Ok, "no mtty parent");
        return;
    }
    let dir = Runner::type_dir("mtty", "mtty-1");
    let create = format!("{dir}/create");
    let available = r
        .host
        .read(Path::new(&format!("{dir}/available_instances")))
        .map(|s| s.trim().to_string());
    r.record(
        "available_instances of mtty-1 before",
        Outcome::Value("24".into()),
        available.map_or_else(|e| Outcome::of(&Err(e)), Outcome::Value),
    );
    let good = test_uuid(1);
    r.step_write(
        "UUID with newline",
        Outcome::Ok,
        &create,
        format!("{good}\n").as_bytes(),
    );
    let dev = format!("{MDEV_DEVICES}/{good}");
    let group = r
        .host
        .read_link(Path::new(&format!("{dev}/iommu_group")))
        .ok();
    r.check(
        "device has an iommu_group link",
        group.is_some(),
        libc::ENOENT,
    );
    let node = group
        .as_ref()
        .and_then(|g| g.file_name())
        .map(|n| format!("/dev/vfio/{}", n.to_string_lossy()));
    r.check(
        "/dev/vfio/<group> exists",
        node.as_ref().is_some_and(|n| r.host.exists(Path::new(n))),
        libc::ENOENT,
    );
    let mdev_type = r
        .host
        .read_link(Path::new(&format!("{dev}/mdev_type")))
        .ok();
    r.check(
        "mdev_type links to ../mdev_supported_types/mtty-1",
        mdev_type.as_deref() == Some(Path::new("../mdev_supported_types/mtty-1")),
        libc::ENOENT,
    );
    r.check(
        "driver link present",
        r.host
            .read_link(Path::new(&format!("{dev}/driver")))
            .is_ok(),
        libc::ENOENT,
    );
    r.check(
        "vfio-dev/vfioN present",
        r.host
            .list(Path::new(&format!("{dev}/vfio-dev")))
            .is_ok_and(|v| v.len() == 1),
        libc::ENOENT,
    );
    let available = r
        .host
        .read(Path::new(&format!("{dir}/available_instances")))
        .map(|s| s.trim().to_string());
    r.record(
        "available_instances of mtty-1 after one",
        Outcome::Value("23".into()),
        available.map_or_else(|e| Outcome::of(&Err(e)), Outcome::Value),
    );
    let upper = test_uuid(2).to_ascii_uppercase();
    r.step_write("upper-case UUID", Outcome::Ok, &create, upper.as_bytes());
    r.check(
        "upper-case UUID shows in lower case",
        r.device_exists(&test_uuid(2)),
        libc::ENOENT,
    );
    r.step_write(
        "UUID plus one trailing byte",
        Outcome::Ok,
        &create,
        format!("{}x", test_uuid(3)).as_bytes(),
    );
    r.step_write(
        "UUID without newline",
        Outcome::Ok,
        &create,
        test_uuid(4).as_bytes(),
    );
    for n in 1..=4 {
        r.remove(&test_uuid(n));
    }
    r.check(
        "all removed",
        (1..=4).all(|n| !r.device_exists(&test_uuid(n))),
        libc::EEXIST,
    );
}

fn scenario_malformed(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip(
            "malformed UUIDs",
            Outcome::errno(libc::EINVAL),
            "no mtty parent",
        );
        return;
    }
    let create = format!("{}/create", Runner::type_dir("mtty", "mtty-1"));
    let base = test_uuid(10);
    let cases: [(&str, Vec<u8>); 6] = [
        ("bad hex digit", format!("{}g", &base[..35]).into_bytes()),
        ("too short", base.as_bytes()[..35].to_vec()),
        ("no dashes", base.replace('-', "").into_bytes()),
        ("38 bytes", format!("{base}\n\n").into_bytes()),
        ("braces", format!("{{{base}}}").into_bytes()),
        ("empty line", b"\n".to_vec()),
    ];
    for (name, data) in cases {
        r.step_write(name, Outcome::errno(libc::EINVAL), &create, &data);
    }
    r.check("nothing was created", !r.device_exists(&base), libc::EEXIST);
}

fn scenario_duplicate(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip(
            "duplicate UUID",
            Outcome::errno(libc::EEXIST),
            "no mtty parent",
        );
        return;
    }
    let uuid = test_uuid(20);
    let create = format!("{}/create", Runner::type_dir("mtty", "mtty-1"));
    r.step_write("first create", Outcome::Ok, &create, uuid.as_bytes());
    r.step_write(
        "same UUID, same type",
        Outcome::errno(libc::EEXIST),
        &create,
        uuid.as_bytes(),
    );
    r.step_write(
        "same UUID, other type",
        Outcome::errno(libc::EEXIST),
        &format!("{}/create", Runner::type_dir("mtty", "mtty-2")),
        uuid.as_bytes(),
    );
    if r.has_type("mdpy", "mdpy-vga") {
        r.step_write(
            "same UUID, other parent",
            Outcome::errno(libc::EEXIST),
            &format!("{}/create", Runner::type_dir("mdpy", "mdpy-vga")),
            uuid.as_bytes(),
        );
    } else {
        r.skip(
            "same UUID, other parent",
            Outcome::errno(libc::EEXIST),
            "no mdpy parent",
        );
    }
    r.remove(&uuid);
}

/// Fills `type_id` on `parent`, then tries `last_type` once more; cleans up.
fn exhaust(
    r: &mut Runner,
    parent: &str,
    fill_type: &str,
    fill_count: u32,
    last_type: &str,
    expected: i32,
    first_uuid: u32,
) {
    if !r.has_type(parent, fill_type) || !r.has_type(parent, last_type) {
        r.skip(
            &format!("{parent}: exhausted create"),
            Outcome::errno(expected),
            &format!("no {parent} parent"),
        );
        return;
    }
    let uuids: Vec<String> = (0..fill_count).map(|n| test_uuid(first_uuid + n)).collect();
    let failures = uuids
        .iter()
        .filter(|u| r.create(parent, fill_type, u).is_err())
        .count();
    r.check(
        &format!("{parent}: {fill_count} x {fill_type} fit"),
        failures == 0,
        libc::ENOSPC,
    );
    let available = r
        .host
        .read(Path::new(&format!(
            "{}/available_instances",
            Runner::type_dir(parent, last_type)
        )))
        .map(|s| s.trim().to_string());
    r.record(
        format!("{parent}: available_instances of {last_type} when full"),
        Outcome::Value("0".into()),
        available.map_or_else(|e| Outcome::of(&Err(e)), Outcome::Value),
    );
    let extra = test_uuid(first_uuid + fill_count);
    let outcome = Outcome::of(&r.create(parent, last_type, &extra));
    r.record(
        format!("{parent}: one more {last_type}"),
        Outcome::errno(expected),
        outcome,
    );
    r.check(
        &format!("{parent}: the refused instance does not exist"),
        !r.device_exists(&extra),
        libc::EEXIST,
    );
    for uuid in uuids.iter().chain(std::iter::once(&extra)) {
        r.remove(uuid);
    }
}

fn scenario_exhaustion(r: &mut Runner) {
    exhaust(r, "mtty", "mtty-2", 12, "mtty-1", libc::ENOSPC, 100);
    exhaust(
        r,
        "mbochs",
        "mbochs-medium",
        4,
        "mbochs-small",
        libc::ENOSPC,
        200,
    );
    exhaust(r, "mdpy", "mdpy-xga", 4, "mdpy-vga", libc::EUSERS, 300);
}

fn scenario_remove(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip("remove", Outcome::Ok, "no mtty parent");
        return;
    }
    let uuid = test_uuid(30);
    let created = r.create("mtty", "mtty-1", &uuid);
    r.record("create", Outcome::Ok, Outcome::of(&created));
    let remove = format!("{MDEV_DEVICES}/{uuid}/remove");
    r.step_write("remove with 0", Outcome::Ok, &remove, b"0");
    r.check(
        "device still there after 0",
        r.device_exists(&uuid),
        libc::ENOENT,
    );
    r.step_write("remove with x", Outcome::errno(libc::EINVAL), &remove, b"x");
    r.step_write("remove with 1", Outcome::Ok, &remove, b"1\n");
    r.check("device gone", !r.device_exists(&uuid), libc::EEXIST);
    r.step_write(
        "second remove by path",
        Outcome::errno(libc::ENOENT),
        &remove,
        b"1",
    );
}

fn scenario_remove_held(r: &mut Runner) {
    if !r.has_type("mtty", "mtty-1") {
        r.skip("remove while held", Outcome::Blocks, "no mtty parent");
        return;
    }
    let uuid = test_uuid(40);
    let created = r.create("mtty", "mtty-1", &uuid);
    r.record("create", Outcome::Ok, Outcome::of(&created));
    let device = PathBuf::from(format!("{MDEV_DEVICES}/{uuid}"));
    let held = r.holder.hold(&device);
    r.record(
        "hold the VFIO device",
        Outcome::Ok,
        Outcome::of(
            &held
                .as_ref()
                .map(|_| ())
                .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO))),
        ),
    );
    let Ok(held) = held else {
        r.remove(&uuid);
        return;
    };
    let second = r.holder.hold(&device).map(|_| ());
    r.record(
        "open the group again while held",
        Outcome::errno(libc::EBUSY),
        Outcome::of(&second),
    );
    let group = r
        .host
        .read_link(&device.join("iommu_group"))
        .ok()
        .and_then(|t| {
            t.file_name()
                .map(|n| format!("/dev/vfio/{}", n.to_string_lossy()))
        });
    let targets = proc_fd_targets(r.host.as_ref());
    r.check(
        "a /proc/<pid>/fd link names /dev/vfio/<group>",
        group.is_some_and(|g| targets.contains(&g)),
        libc::ENOENT,
    );
    r.check(
        "a /proc/<pid>/fd link is anon_inode:[vfio-device]",
        targets.iter().any(|t| t == "anon_inode:[vfio-device]"),
        libc::ENOENT,
    );
    r.blocking_write(
        "remove while held",
        &format!("{}/remove", device.display()),
        b"1",
        move || drop(held),
    );
    r.check(
        "device gone after release",
        !r.device_exists(&uuid),
        libc::EEXIST,
    );
}

/// Every `/proc/<pid>/fd/<n>` link target on the host, the way the engine looks for holders.
fn proc_fd_targets(host: &dyn HostFs) -> Vec<String> {
    let mut targets = Vec::new();
    let Ok(entries) = host.list(Path::new("/proc")) else {
        return targets;
    };
    for pid in entries
        .iter()
        .filter_map(|e| e.to_str())
        .filter(|e| e.bytes().all(|b| b.is_ascii_digit()))
    {
        let fd_dir = format!("/proc/{pid}/fd");
        let Ok(fds) = host.list(Path::new(&fd_dir)) else {
            continue;
        };
        for fd in fds {
            if let Ok(target) = host.read_link(&Path::new(&fd_dir).join(&fd)) {
                targets.push(target.to_string_lossy().into_owned());
            }
        }
    }
    targets
}

/// The first PF with SR-IOV (QEMU's nvme in the VM tier) and its driver.
fn find_pf(host: &dyn HostFs) -> Option<(String, Option<String>)> {
    let mut names: Vec<String> = host
        .list(Path::new(PCI_DEVICES))
        .ok()?
        .iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .find(|bdf| host.exists(Path::new(&format!("{PCI_DEVICES}/{bdf}/sriov_totalvfs"))))
        .map(|bdf| {
            let driver = host
                .read_link(Path::new(&format!("{PCI_DEVICES}/{bdf}/driver")))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            (bdf, driver)
        })
}

fn scenario_sriov(r: &mut Runner) {
    let Some((pf, driver)) = find_pf(r.host.as_ref()) else {
        r.skip("SR-IOV", Outcome::Ok, "no SR-IOV PF");
        return;
    };
    let base = format!("{PCI_DEVICES}/{pf}");
    let numvfs = format!("{base}/sriov_numvfs");
    let total: u32 = r
        .host
        .read(Path::new(&format!("{base}/sriov_totalvfs")))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    match &driver {
        Some(name) => {
            let unbind = r.write(
                &format!("/sys/bus/pci/drivers/{name}/unbind"),
                pf.as_bytes(),
            );
            r.record("unbind the PF driver", Outcome::Ok, Outcome::of(&unbind));
            r.step_write(
                "sriov_numvfs=2 without PF driver",
                Outcome::errno(libc::ENOENT),
                &numvfs,
                b"2",
            );
            r.step_write(
                "bind the PF driver back",
                Outcome::Ok,
                &format!("/sys/bus/pci/drivers/{name}/bind"),
                pf.as_bytes(),
            );
        }
        None => {
            r.step_write(
                "sriov_numvfs=2 without PF driver",
                Outcome::errno(libc::ENOENT),
                &numvfs,
                b"2",
            );
            r.skip(
                "SR-IOV with a PF driver",
                Outcome::Ok,
                "the PF has no driver",
            );
            return;
        }
    }
    r.step_write(
        "sriov_numvfs above total",
        Outcome::errno(libc::ERANGE),
        &numvfs,
        format!("{}", total + 1).as_bytes(),
    );
    r.step_write(
        "sriov_numvfs=abc",
        Outcome::errno(libc::EINVAL),
        &numvfs,
        b"abc",
    );
    r.step_write(
        "sriov_drivers_autoprobe=0",
        Outcome::Ok,
        &format!("{base}/sriov_drivers_autoprobe"),
        b"0",
    );
    r.step_write("sriov_numvfs 0 -> 2", Outcome::Ok, &numvfs, b"2");
    let vf0 = r
        .host
        .read_link(Path::new(&format!("{base}/virtfn0")))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
    r.check(
        "virtfn0 and virtfn1 exist",
        vf0.is_some() && r.host.exists(Path::new(&format!("{base}/virtfn1"))),
        libc::ENOENT,
    );
    r.step_write(
        "sriov_numvfs 2 -> 3",
        Outcome::errno(libc::EBUSY),
        &numvfs,
        b"3",
    );
    r.step_write("sriov_numvfs 2 -> 2", Outcome::Ok, &numvfs, b"2");
    r.step_write(
        "drivers_probe of a bogus BDF",
        Outcome::errno(libc::ENODEV),
        "/sys/bus/pci/drivers_probe",
        b"0000:ff:1f.7",
    );
    let vfio_loaded = r.host.is_dir(Path::new("/sys/bus/pci/drivers/vfio-pci"));
    match (vf0, vfio_loaded) {
        (Some(vf), true) => {
            let vf_dir = format!("{PCI_DEVICES}/{vf}");
            r.step_write(
                "VF driver_override=vfio-pci",
                Outcome::Ok,
                &format!("{vf_dir}/driver_override"),
                b"vfio-pci\n",
            );
            r.step_write(
                "drivers_probe of the VF",
                Outcome::Ok,
                "/sys/bus/pci/drivers_probe",
                vf.as_bytes(),
            );
            let bound = r
                .host
                .read_link(Path::new(&format!("{vf_dir}/driver")))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            r.record(
                "VF driver after probe",
                Outcome::Value("vfio-pci".into()),
                bound.map_or_else(|| Outcome::errno(libc::ENOENT), Outcome::Value),
            );
            let group = r
                .host
                .read_link(Path::new(&format!("{vf_dir}/iommu_group")))
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            r.check(
                "/dev/vfio/<group> of the VF exists",
                group.is_some_and(|g| r.host.exists(Path::new(&format!("/dev/vfio/{g}")))),
                libc::ENOENT,
            );
            r.step_write(
                "second bind to vfio-pci",
                Outcome::errno(libc::EBUSY),
                "/sys/bus/pci/drivers/vfio-pci/bind",
                vf.as_bytes(),
            );
            match r.holder.hold(Path::new(&vf_dir)) {
                Ok(held) => {
                    r.record("hold the VF's VFIO device", Outcome::Ok, Outcome::Ok);
                    r.blocking_write(
                        "sriov_numvfs=0 while a VF is held",
                        &numvfs,
                        b"0",
                        move || drop(held),
                    );
                }
                Err(error) => {
                    r.record(
                        "hold the VF's VFIO device",
                        Outcome::Ok,
                        Outcome::of(&Err(error)),
                    );
                }
            }
        }
        (None, _) => r.skip("bind a VF to vfio-pci", Outcome::Ok, "no VF appeared"),
        (Some(_), false) => r.skip(
            "bind a VF to vfio-pci",
            Outcome::Ok,
            "vfio-pci is not loaded",
        ),
    }
    let _ = r.write(&numvfs, b"0");
    r.check(
        "VFs gone",
        !r.host.exists(Path::new(&format!("{base}/virtfn0"))),
        libc::EEXIST,
    );
    let _ = r.write(&format!("{base}/sriov_drivers_autoprobe"), b"1");
}

/// What reading a file gives: its text without the one trailing newline (inner newlines
/// escaped, `(no newline)` appended when there was none), or the errno.
fn read_value(host: &dyn HostFs, path: &str) -> Outcome {
    match host.read(Path::new(path)) {
        Ok(text) => match text.strip_suffix('\n') {
            Some(line) => Outcome::Value(line.replace('\n', "\\n")),
            None => Outcome::Value(format!("{} (no newline)", text.replace('\n', "\\n"))),
        },
        Err(error) => Outcome::of(&Err(error)),
    }
}

/// A link's stored target, with a trailing IOMMU group number replaced by `N` (numbers are
/// the kernel's to choose).
fn link_value(host: &dyn HostFs, path: &str) -> Outcome {
    match host.read_link(Path::new(path)) {
        Ok(target) => {
            let text = target.to_string_lossy().into_owned();
            match text.rsplit_once("iommu_groups/") {
                Some((head, number)) if number.bytes().all(|b| b.is_ascii_digit()) => {
                    Outcome::Value(format!("{head}iommu_groups/N"))
                }
                _ => Outcome::Value(text),
            }
        }
        Err(error) => Outcome::of(&Err(error)),
    }
}

fn sorted_listing(host: &dyn HostFs, path: &str) -> Outcome {
    match host.list(Path::new(path)) {
        Ok(names) => {
            let mut names: Vec<String> = names
                .iter()
                .map(|n| n.to_string_lossy().into_owned())
                .collect();
            names.sort();
            Outcome::Value(names.join(" "))
        }
        Err(error) => Outcome::of(&Err(error)),
    }
}

impl Runner {
    fn value(&mut self, step: &str, expected: &str, path: &str) {
        let outcome = read_value(self.host.as_ref(), path);
        self.record(step, Outcome::Value(expected.to_string()), outcome);
    }

    fn link(&mut self, step: &str, expected: &str, path: &str) {
        let outcome = link_value(self.host.as_ref(), path);
        self.record(step, Outcome::Value(expected.to_string()), outcome);
    }
}

/// File formats, link texts and access rules, read the same way on both hosts.
fn scenario_formats(r: &mut Runner) {
    if r.has_type("mtty", "mtty-1") {
        let mtty1 = Runner::type_dir("mtty", "mtty-1");
        let listing = sorted_listing(r.host.as_ref(), &mtty1);
        r.record(
            "mtty-1 type directory (no description)",
            Outcome::Value("available_instances create device_api devices name".into()),
            listing,
        );
        r.value(
            "mtty-1 name",
            "Single port serial",
            &format!("{mtty1}/name"),
        );
        r.value(
            "mtty-2 name",
            "Dual port serial",
            &format!("{}/name", Runner::type_dir("mtty", "mtty-2")),
        );
        r.value(
            "mtty-1 device_api",
            "vfio-pci",
            &format!("{mtty1}/device_api"),
        );
        r.link(
            "mdev_bus link of mtty",
            "../../devices/virtual/mtty/mtty",
            &format!("{MDEV_BUS}/mtty"),
        );
        let read_create = r
            .host
            .read(Path::new(&format!("{mtty1}/create")))
            .map(|_| ());
        r.record(
            "read a write-only create",
            Outcome::errno(libc::EACCES),
            Outcome::of(&read_create),
        );
        r.step_write(
            "write a read-only available_instances",
            Outcome::errno(libc::EACCES),
            &format!("{mtty1}/available_instances"),
            b"1",
        );
        r.step_write(
            "empty write to create",
            Outcome::Ok,
            &format!("{mtty1}/create"),
            b"",
        );
        let uuid = test_uuid(50);
        let created = r.create("mtty", "mtty-2", &uuid);
        r.record("create an mtty-2", Outcome::Ok, Outcome::of(&created));
        let dev = format!("{MDEV_DEVICES}/{uuid}");
        r.link(
            "mdev device link",
            &format!("../../../devices/virtual/mtty/mtty/{uuid}"),
            &dev,
        );
        r.link(
            "mdev iommu_group link",
            "../../../../../kernel/iommu_groups/N",
            &format!("{dev}/iommu_group"),
        );
        r.link(
            "mdev driver link",
            "../../../../../bus/mdev/drivers/mtty",
            &format!("{dev}/driver"),
        );
        r.link(
            "mdev mdev_type link",
            "../mdev_supported_types/mtty-2",
            &format!("{dev}/mdev_type"),
        );
        r.link(
            "type devices/ link",
            &format!("../../../{uuid}"),
            &format!("{}/devices/{uuid}", Runner::type_dir("mtty", "mtty-2")),
        );
        r.value(
            "mtty vendor/sample_mdev_dev",
            &format!("This is MDEV {uuid}"),
            &format!("{dev}/vendor/sample_mdev_dev"),
        );
        r.step_write(
            "remove with an overflowing number",
            Outcome::errno(libc::EINVAL),
            &format!("{dev}/remove"),
            b"99999999999999999999999",
        );
        r.step_write("remove with 2", Outcome::Ok, &format!("{dev}/remove"), b"2");
        r.check("device gone after 2", !r.device_exists(&uuid), libc::EEXIST);
    } else {
        r.skip("mdev formats", Outcome::Ok, "no mtty parent");
    }
    if r.has_type("mbochs", "mbochs-small") {
        let small = Runner::type_dir("mbochs", "mbochs-small");
        r.value(
            "mbochs-small name",
            "mbochs-small",
            &format!("{small}/name"),
        );
        r.value(
            "mbochs-small description",
            "virtual display, 4 MB video memory",
            &format!("{small}/description"),
        );
        let uuid = test_uuid(51);
        let created = r.create("mbochs", "mbochs-medium", &uuid);
        r.record(
            "create an mbochs-medium",
            Outcome::Ok,
            Outcome::of(&created),
        );
        r.value(
            "mbochs vendor/memory",
            "16 MB",
            &format!("{MDEV_DEVICES}/{uuid}/vendor/memory"),
        );
        r.remove(&uuid);
    }
    if r.has_type("mdpy", "mdpy-hd") {
        let hd = Runner::type_dir("mdpy", "mdpy-hd");
        r.value(
            "mdpy-hd description",
            "virtual display, 1920x1080 framebuffer",
            &format!("{hd}/description"),
        );
        r.value(
            "mdpy-hd available_instances",
            "4",
            &format!("{hd}/available_instances"),
        );
        let uuid = test_uuid(52);
        let created = r.create("mdpy", "mdpy-xga", &uuid);
        r.record("create an mdpy-xga", Outcome::Ok, Outcome::of(&created));
        r.value(
            "mdpy vendor/resolution",
            "1024x768",
            &format!("{MDEV_DEVICES}/{uuid}/vendor/resolution"),
        );
        r.value(
            "mdpy-hd available_instances with one mdpy-xga",
            "3",
            &format!("{hd}/available_instances"),
        );
        r.remove(&uuid);
    }
    let Some((pf, Some(driver))) = find_pf(r.host.as_ref()) else {
        r.skip("PCI formats", Outcome::Ok, "no SR-IOV PF with a driver");
        return;
    };
    let base = format!("{PCI_DEVICES}/{pf}");
    for (file, expected) in [
        ("vendor", "0x1b36"),
        ("device", "0x0010"),
        ("subsystem_vendor", "0x1af4"),
        ("subsystem_device", "0x1100"),
        ("class", "0x010802"),
        ("numa_node", "-1"),
        ("sriov_totalvfs", "4"),
        ("sriov_offset", "1"),
        ("sriov_stride", "1"),
        ("sriov_vf_device", "10"),
        ("sriov_numvfs", "0"),
        ("sriov_drivers_autoprobe", "1"),
        ("driver_override", "(null)"),
    ] {
        r.value(&format!("PF {file}"), expected, &format!("{base}/{file}"));
    }
    r.link(
        "PF driver link",
        &format!("../../../../bus/pci/drivers/{driver}"),
        &format!("{base}/driver"),
    );
    r.link(
        "PF iommu_group link",
        "../../../../kernel/iommu_groups/N",
        &format!("{base}/iommu_group"),
    );
    r.step_write(
        "sriov_numvfs=70000 (u16 overflow)",
        Outcome::errno(libc::EINVAL),
        &format!("{base}/sriov_numvfs"),
        b"70000",
    );
    r.step_write(
        "sriov_drivers_autoprobe=maybe",
        Outcome::errno(libc::EINVAL),
        &format!("{base}/sriov_drivers_autoprobe"),
        b"maybe",
    );
    r.step_write(
        "sriov_drivers_autoprobe=0",
        Outcome::Ok,
        &format!("{base}/sriov_drivers_autoprobe"),
        b"0",
    );
    r.step_write(
        "sriov_numvfs=2",
        Outcome::Ok,
        &format!("{base}/sriov_numvfs"),
        b"2",
    );
    let vf1 = r
        .host
        .read_link(Path::new(&format!("{base}/virtfn1")))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
    r.link(
        "virtfn0 link",
        "../0000:01:00.1",
        &format!("{base}/virtfn0"),
    );
    if let Some(vf) = vf1 {
        let vf_dir = format!("{PCI_DEVICES}/{vf}");
        r.link(
            "VF physfn link",
            &format!("../{pf}"),
            &format!("{vf_dir}/physfn"),
        );
        r.value("VF device", "0x0010", &format!("{vf_dir}/device"));
        r.value("VF vendor", "0x1b36", &format!("{vf_dir}/vendor"));
        r.check(
            "an unbound VF has no driver link",
            !r.host.exists(Path::new(&format!("{vf_dir}/driver"))),
            libc::EEXIST,
        );
        let group = link_value(r.host.as_ref(), &format!("{vf_dir}/iommu_group"));
        r.record(
            "VF iommu_group link",
            Outcome::Value("../../../../kernel/iommu_groups/N".into()),
            group,
        );
        let node = r
            .host
            .read_link(Path::new(&format!("{vf_dir}/iommu_group")))
            .ok()
            .and_then(|t| {
                t.file_name()
                    .map(|n| format!("/dev/vfio/{}", n.to_string_lossy()))
            });
        r.check(
            "no /dev/vfio node for a VF without a VFIO driver",
            node.is_some_and(|n| !r.host.exists(Path::new(&n))),
            libc::EEXIST,
        );
        if r.host.is_dir(Path::new("/sys/bus/pci/drivers/vfio-pci")) {
            r.step_write(
                "bind to vfio-pci without driver_override",
                Outcome::errno(libc::ENODEV),
                "/sys/bus/pci/drivers/vfio-pci/bind",
                vf.as_bytes(),
            );
        }
        r.step_write(
            &format!("unbind a VF from {driver} it is not bound to"),
            Outcome::errno(libc::ENODEV),
            &format!("/sys/bus/pci/drivers/{driver}/unbind"),
            vf.as_bytes(),
        );
        r.step_write(
            "VF driver_override=vfio-pci then text",
            Outcome::Ok,
            &format!("{vf_dir}/driver_override"),
            b"vfio-pci\nrest",
        );
        r.value(
            "VF driver_override after a newline",
            "vfio-pci",
            &format!("{vf_dir}/driver_override"),
        );
        r.step_write(
            "VF driver_override cleared with a newline",
            Outcome::Ok,
            &format!("{vf_dir}/driver_override"),
            b"\n",
        );
        r.value(
            "VF driver_override after clearing",
            "(null)",
            &format!("{vf_dir}/driver_override"),
        );
    } else {
        r.skip("VF formats", Outcome::Ok, "no VF appeared");
    }
    let _ = r.write(&format!("{base}/sriov_numvfs"), b"0");
    let _ = r.write(&format!("{base}/sriov_drivers_autoprobe"), b"1");
    r.value(
        "PF sriov_numvfs after the run",
        "0",
        &format!("{base}/sriov_numvfs"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast() -> RunOptions {
        RunOptions {
            block_wait: Duration::from_millis(300),
            release_wait: Duration::from_secs(20),
        }
    }

    #[test]
    fn samples_sim_matches_the_real_kernel_table() {
        let host = SimHost::builtin("samples").unwrap();
        let report = run_on_sim(&host, "sim:samples", fast());
        let mismatches = report.mismatches();
        assert!(mismatches.is_empty(), "{}", report.to_table());
        assert!(
            report
                .steps
                .iter()
                .all(|s| !matches!(s.outcome, Outcome::Skipped(_))),
            "{}",
            report.to_table()
        );
        assert!(report.steps.len() > 100);
        // Everything the scenarios made is gone again.
        assert!(host.mdev_uuids().is_empty());
        assert_eq!(host.vf_count(), 0);
        assert!(host
            .read(Path::new(
                "/sys/bus/pci/devices/0000:01:00.0/driver_override"
            ))
            .is_ok());
    }

    #[test]
    fn each_oracle_outcome_is_reached() {
        let host = SimHost::builtin("samples").unwrap();
        let report = run_on_sim(&host, "sim:samples", fast());
        for expected in [
            "EINVAL", "EEXIST", "ENOSPC", "EUSERS", "ENOENT", "ERANGE", "EBUSY", "ENODEV", "blocks",
        ] {
            assert!(
                report
                    .steps
                    .iter()
                    .any(|s| String::from(s.outcome.clone()) == expected),
                "no step gave {expected}"
            );
        }
    }

    #[test]
    fn a_broken_simulator_is_caught() {
        // Make remove fail instead of blocking: the report must flag it.
        let host = SimHost::builtin("samples").unwrap();
        host.inject_fault(crate::sim::Fault::fail(
            "/sys/bus/mdev/devices/cf000000-0000-4000-8000-000000000028/remove",
            libc::EBUSY,
        ));
        let report = run_on_sim(&host, "sim:samples", fast());
        let bad: Vec<&str> = report
            .mismatches()
            .iter()
            .map(|s| s.step.as_str())
            .collect();
        assert_eq!(bad, ["remove while held", "device gone after release"]);
    }

    #[test]
    fn report_round_trips_and_diffs() {
        let host = SimHost::builtin("samples").unwrap();
        let report = run_on_sim(&host, "sim:samples", fast());
        let json = serde_json::to_string_pretty(&report).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
        assert!(json.contains("\"blocks\""));
        let mut other = back.clone();
        other.host = "root:/".into();
        other.steps[0].outcome = Outcome::Value("23".into());
        let diff = report.diff(&other);
        assert_eq!(diff.len(), 1);
        assert!(
            diff[0].contains("sim:samples = = 24") && diff[0].contains("root:/ = = 23"),
            "{diff:?}"
        );
    }

    #[test]
    fn missing_parents_are_skipped_not_guessed() {
        let host = SimHost::builtin("samples").unwrap();
        host.unload_module("mtty").unwrap();
        let report = run_on_sim(&host, "sim:no-mtty", fast());
        assert!(report.mismatches().is_empty(), "{}", report.to_table());
        assert!(report
            .steps
            .iter()
            .any(|s| matches!(&s.outcome, Outcome::Skipped(why) if why.contains("mtty"))));
    }
}
