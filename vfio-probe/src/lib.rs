//! VFIO preflight probe: checks that a VMM will be able to use an mdev or a VF.
#![deny(missing_docs)]
