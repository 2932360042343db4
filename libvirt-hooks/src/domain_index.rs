//! The service's index of the domains that hold claims, read without the bus.
//!
//! The service keeps one empty file per domain holding at least one claim,
//! `<state dir>/domains/<domain uuid>` (mdev-manager's `domain_index` module writes it): each
//! file is in place before the state naming the claim is saved, and is removed after the
//! state without it is, so a domain that holds a claim always has its file; a stale file
//! costs one needless `ReleaseDomain`. At `release` the hook asks the service only for
//! domains that have a file (or whose XML still names a vGPU), which keeps the release of
//! every other domain a process start and one `stat`.

use std::path::Path;

use vgpu_types::Uuid;

/// Directory of the index inside the state directory (mdev-manager's
/// `domain_index::DOMAIN_INDEX_DIR`).
pub const DOMAIN_INDEX_DIR: &str = "domains";

/// Whether the service's index lists `domain_uuid` (state directory `state_dir`, a host path
/// under `root`). `false` also when the index does not exist (a service that never ran).
pub fn lists_domain(root: &Path, state_dir: &Path, domain_uuid: &Uuid) -> bool {
    crate::config::under_root(root, state_dir)
        .join(DOMAIN_INDEX_DIR)
        .join(domain_uuid.to_string())
        .exists()
}
