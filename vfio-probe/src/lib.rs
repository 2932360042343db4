//! VFIO preflight probe: checks that a VMM will be able to use an mdev or a VF, by taking the
//! steps a VMM takes (open the group and container, set the type1 IOMMU, map guest memory for
//! DMA, get the device fd and read its regions, interrupts and config space, and attach the
//! group to a KVM VM through the kvm-vfio device) and reporting each one.
//!
//! ```no_run
//! let target: vfio_probe::Target = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001".parse()?;
//! let report = vfio_probe::probe(&target, &vfio_probe::ProbeOptions::default());
//! println!("{}", report.to_text());
//! # Ok::<(), vfio_probe::TargetError>(())
//! ```
#![deny(missing_docs)]

mod probe;
mod report;
mod target;

pub use probe::{probe, KvmUse, ProbeOptions};
pub use report::{
    DeviceSummary, IrqSummary, ProbeReport, RegionSummary, Step, StepReport, StepStatus,
};
pub use target::{ResolvedTarget, Target, TargetError};
