//! Time-slice scheduling for vGPU instances: weights, guarantees, caps, plans and vendor
//! backends. Pure logic: nothing here reads or writes the host; the service applies the outputs.
//!
//! * [`model`]: the settings ([`InstanceSchedule`], [`ParentSchedule`], [`Policy`]) and
//!   admission control ([`admit`], [`check_parent`]).
//! * [`plan`]: [`Plan::compute`] turns settings and the busy set into shares and time per period.
//! * [`software`]: a stride scheduler that runs a plan in virtual time, for parents without a
//!   hardware scheduler and for measuring.
//! * [`nvidia`], [`amd`], [`gvt`]: what each vendor's driver can be told, and an honest
//!   [`InstanceReport`] of what it will enforce.
//! * [`svg`]: one period of a plan drawn as a timeline.
#![deny(missing_docs)]

pub mod amd;
pub mod backend;
pub mod gvt;
pub mod model;
pub mod nvidia;
pub mod plan;
pub mod report;
pub mod share;
pub mod software;
pub mod svg;

pub use backend::{Backend, Capabilities};
pub use model::{
    admit, check_parent, parse_duration_us, ComputeRequest, InstanceId, InstanceSchedule,
    ModelError, ParentSchedule, Policy, Refusal,
};
pub use plan::{Busy, Plan, PlannedInstance};
pub use report::InstanceReport;
pub use share::{Share, ShareError, Weight, WeightError};
