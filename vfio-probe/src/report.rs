//! The probe's verdict: one entry per step, in the order they ran.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::target::Target;

/// One check a VMM's use of the device depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Find the device in sysfs and read its IOMMU group (and, for PCI, that vfio-pci has it).
    Resolve,
    /// Open `/dev/vfio/<group>` and check the group is viable (every device in it bound to a
    /// VFIO driver) and not held by another process.
    Group,
    /// Open `/dev/kvm`, create a VM and a kvm-vfio device.
    Kvm,
    /// Open the container `/dev/vfio/vfio` and check the API version and type1v2 IOMMU support.
    Container,
    /// Add the group to the container, set the type1 IOMMU, get the device fd and its info.
    Device,
    /// The group was added to the VM's kvm-vfio device (as a VMM does before starting a guest).
    KvmVfio,
    /// Map a small guest-memory region into the IOMMU for DMA, then unmap it.
    DmaMap,
    /// Read the device's regions (BARs, ROM, config space, VGA).
    Regions,
    /// Read the device's interrupt indexes (INTx, MSI, MSI-X, ...).
    Irqs,
    /// Read vendor:device from the PCI config space region.
    ConfigSpace,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Step::Resolve => "resolve",
            Step::Group => "group",
            Step::Kvm => "kvm",
            Step::Container => "container",
            Step::Device => "device",
            Step::KvmVfio => "kvm_vfio",
            Step::DmaMap => "dma_map",
            Step::Regions => "regions",
            Step::Irqs => "irqs",
            Step::ConfigSpace => "config_space",
        };
        f.write_str(name)
    }
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// It worked.
    Ok,
    /// It failed: a VMM would fail here too.
    Failed,
    /// It was not run (an earlier step failed, or the host cannot run it, e.g. no `/dev/kvm`).
    NotRun,
}

/// The outcome of one step with a line saying what was seen or why it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepReport {
    /// Which step.
    pub step: Step,
    /// How it ended.
    pub status: StepStatus,
    /// What was seen (on success) or the error chain / reason (otherwise).
    pub detail: String,
}

/// A device region as VFIO describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegionSummary {
    /// VFIO region index (0-5 BARs, 6 ROM, 7 config, 8 VGA).
    pub index: u32,
    /// The region's name for that index.
    pub name: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// Readable through the device fd.
    pub readable: bool,
    /// Writable through the device fd.
    pub writable: bool,
    /// Can be mmapped.
    pub mmap: bool,
}

/// An interrupt index as VFIO describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IrqSummary {
    /// VFIO IRQ index (0 INTx, 1 MSI, 2 MSI-X, 3 ERR, 4 REQ).
    pub index: u32,
    /// The index's name.
    pub name: &'static str,
    /// How many vectors it offers.
    pub count: u32,
}

/// What the probe learned about the device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeviceSummary {
    /// PCI vendor id from config space, 4 lower-case hex digits.
    pub vendor_id: Option<String>,
    /// PCI device id from config space, 4 lower-case hex digits.
    pub device_id: Option<String>,
    /// Non-empty regions.
    pub regions: Vec<RegionSummary>,
    /// Interrupt indexes with at least one vector.
    pub irqs: Vec<IrqSummary>,
    /// The most vectors any of INTx/MSI/MSI-X offers.
    pub max_interrupts: u32,
}

/// The probe's verdict on one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// The device probed.
    pub target: Target,
    /// Its sysfs directory, once resolved.
    pub sysfs_path: Option<PathBuf>,
    /// Its IOMMU group, once resolved.
    pub iommu_group: Option<u32>,
    /// Every step in the order run, including those not run.
    pub steps: Vec<StepReport>,
    /// What was read from the device.
    pub device: DeviceSummary,
    /// True when no step failed (steps not run for lack of host support do not count).
    pub ok: bool,
}

impl ProbeReport {
    pub(crate) fn new(target: Target) -> Self {
        Self {
            target,
            sysfs_path: None,
            iommu_group: None,
            steps: Vec::new(),
            device: DeviceSummary::default(),
            ok: true,
        }
    }

    pub(crate) fn record(&mut self, step: Step, status: StepStatus, detail: impl Into<String>) {
        if status == StepStatus::Failed {
            self.ok = false;
        }
        self.steps.push(StepReport {
            step,
            status,
            detail: detail.into(),
        });
    }

    /// The report of one step, if it was recorded.
    pub fn step(&self, step: Step) -> Option<&StepReport> {
        self.steps.iter().find(|s| s.step == step)
    }

    /// Human-readable lines: one per step, then the verdict.
    pub fn to_text(&self) -> String {
        let mut out = format!("{}", self.target);
        if let Some(group) = self.iommu_group {
            out.push_str(&format!(" (IOMMU group {group})"));
        }
        out.push('\n');
        for step in &self.steps {
            let status = match step.status {
                StepStatus::Ok => "ok",
                StepStatus::Failed => "FAILED",
                StepStatus::NotRun => "not run",
            };
            out.push_str(&format!(
                "  {:<13} {:<8} {}\n",
                step.step.to_string(),
                status,
                step.detail
            ));
        }
        out.push_str(if self.ok {
            "verdict: usable by a VMM\n"
        } else {
            "verdict: NOT usable by a VMM\n"
        });
        out
    }
}

/// Renders an error with its whole `source()` chain, `outer: inner: innermost`.
pub(crate) use vgpu_types::error_chain;

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ProbeReport {
        let mut report =
            ProbeReport::new(Target::Mdev("83b8f4f2-509f-382f-3c1e-e6bfe0fa1001".into()));
        report.iommu_group = Some(4);
        report.record(Step::Resolve, StepStatus::Ok, "found");
        report.record(Step::Kvm, StepStatus::NotRun, "no /dev/kvm on this host");
        report
    }

    #[test]
    fn not_run_steps_keep_the_verdict_ok_and_a_failure_does_not() {
        let mut report = sample();
        assert!(report.ok);
        report.record(Step::Container, StepStatus::Failed, "no /dev/vfio/vfio");
        assert!(!report.ok);
        assert!(report.to_text().ends_with("verdict: NOT usable by a VMM\n"));
    }

    #[test]
    fn json_names_steps_and_statuses_in_snake_case() {
        let json = serde_json::to_value(sample()).unwrap();
        assert_eq!(json["target"]["kind"], "mdev");
        assert_eq!(json["target"]["id"], "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001");
        assert_eq!(json["iommu_group"], 4);
        assert_eq!(json["steps"][1]["step"], "kvm");
        assert_eq!(json["steps"][1]["status"], "not_run");
        assert_eq!(json["steps"][1]["detail"], "no /dev/kvm on this host");
        assert_eq!(json["ok"], true);
    }

    #[test]
    fn text_has_one_line_per_step() {
        let text = sample().to_text();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.starts_with("mdev 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001 (IOMMU group 4)\n"));
        assert!(
            text.contains("kvm           not run  no /dev/kvm on this host"),
            "{text}"
        );
    }

    #[test]
    fn error_chain_joins_sources() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let err = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&err), "outer: inner");
    }
}
