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

pub mod engine_scenarios;
mod holder;
mod scenarios;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use holder::{DeviceHolder, HeldDevice, SimDeviceHolder, VfioDeviceHolder, VfioHeld};

use mdev_host::HostFs;
use mdev_sim::{errno_name, SimHost};
use scenarios::SCENARIOS;

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

    /// Starts a read on its own thread (it may block behind a device lock).
    fn start_read(&self, path: &str) -> std::sync::mpsc::Receiver<io::Result<String>> {
        let (done_tx, done_rx) = channel();
        let host = Arc::clone(&self.host);
        let target = PathBuf::from(path);
        std::thread::spawn(move || {
            let _ = done_tx.send(host.read(&target));
        });
        done_rx
    }

    /// Runs a write on its own thread and returns its outcome, or `blocks` if it has not
    /// returned within `block_wait`; `release` runs after either (so a blocked write can end
    /// and a real kernel is not left with a hung writer).
    fn write_within_block_wait(
        &mut self,
        path: &str,
        data: &'static [u8],
        release: impl FnOnce(),
    ) -> Outcome {
        let (done_tx, done_rx) = channel();
        let host = Arc::clone(&self.host);
        let target = PathBuf::from(path);
        std::thread::spawn(move || {
            let _ = done_tx.send(host.write(&target, data));
        });
        let outcome = match done_rx.recv_timeout(self.options.block_wait) {
            Ok(result) => Outcome::of(&result),
            Err(_) => Outcome::Blocks,
        };
        release();
        if outcome == Outcome::Blocks {
            let _ = done_rx.recv_timeout(self.options.release_wait);
        }
        outcome
    }

    /// Runs a write on its own thread; `blocks` if it has not returned within `block_wait`.
    /// While it blocks, `while_blocked` looks at the host; then `release` runs and the write
    /// must finish within `release_wait`.
    fn blocking_write(
        &mut self,
        step: &str,
        path: &str,
        data: &'static [u8],
        while_blocked: impl FnOnce(&mut Runner),
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
        if blocked {
            while_blocked(self);
        }
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

#[cfg(test)]
mod tests;
