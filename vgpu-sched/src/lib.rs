//! Time-slice scheduling for vGPU instances: weights, guarantees, caps, plans and vendor backends. Pure logic.
#![deny(missing_docs)]
