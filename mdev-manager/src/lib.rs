//! mdev-manager: the daemon. It serves the D-Bus API `org.mdevmanager.VGpu1` over the engine
//! (mdev-engine) on the real host (mdev-host) or, with the `simulate` feature, on the
//! simulated one (mdev-sim). The library exists for the binary and the daemon's tests.
#![deny(missing_docs)]

pub mod daemon;
pub mod simulated;
