//! The .deb's maintainer scripts (packaging/debian/postinst, postrm) take over the command name
//! `mdevctl` in a way dpkg knows about and a user can undo: a dpkg diversion of
//! /usr/sbin/mdevctl to /usr/sbin/mdevctl.distrib plus a symlink to
//! /usr/bin/mdev-manager-mdevctl. The scripts run here against a scratch root through
//! `DPKG_ROOT` (which the scripts and dpkg-divert both honour), with the real dpkg-divert and a
//! scratch dpkg database; nothing outside the temporary directory is touched.

use std::path::{Path, PathBuf};
use std::process::Command;

const OURS: &str = "/usr/bin/mdev-manager-mdevctl";
const REAL_BYTES: &str = "#!/bin/sh\necho the real mdevctl\n";

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging/debian")
        .join(name)
}

/// A scratch root with an empty dpkg database, and the real mdevctl at /usr/sbin/mdevctl when
/// `with_real_mdevctl`.
fn scratch_root(with_real_mdevctl: bool) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    for dir in ["var/lib/dpkg/info", "usr/sbin", "usr/bin", "etc"] {
        std::fs::create_dir_all(root.path().join(dir)).expect("scratch dirs");
    }
    std::fs::write(root.path().join("var/lib/dpkg/status"), "").expect("dpkg status");
    if with_real_mdevctl {
        std::fs::write(root.path().join("usr/sbin/mdevctl"), REAL_BYTES).expect("real mdevctl");
    }
    root
}

/// Runs a maintainer script as dpkg would (`postinst configure`, `postrm remove`), rooted at
/// `root`; panics with its output when it fails.
fn run(root: &Path, name: &str, args: &[&str]) {
    let output = Command::new("sh")
        .arg(script(name))
        .args(args)
        .env("DPKG_ROOT", root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name} (is dpkg installed?): {e}"));
    assert!(
        output.status.success(),
        "{name} {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The package holding the diversion of /usr/sbin/mdevctl in `root`'s dpkg database, if any.
fn diverted_by(root: &Path) -> Option<String> {
    let output = Command::new("dpkg-divert")
        .args(["--listpackage", "/usr/sbin/mdevctl"])
        .env("DPKG_ROOT", root)
        .output()
        .expect("dpkg-divert");
    assert!(output.status.success(), "dpkg-divert --listpackage failed");
    let package = String::from_utf8_lossy(&output.stdout).trim().to_string();
    (!package.is_empty()).then_some(package)
}

fn link_target(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()
        .map(|p| p.display().to_string())
}

fn assert_taken_over(root: &Path) {
    assert_eq!(
        link_target(&root.join("usr/sbin/mdevctl")).as_deref(),
        Some(OURS),
        "/usr/sbin/mdevctl is our symlink"
    );
    assert_eq!(diverted_by(root).as_deref(), Some("mdev-manager"));
}

fn assert_given_back(root: &Path, with_real_mdevctl: bool) {
    assert_eq!(diverted_by(root), None, "no diversion left");
    assert!(!root.join("usr/sbin/mdevctl.distrib").exists());
    let mdevctl = root.join("usr/sbin/mdevctl");
    assert_eq!(link_target(&mdevctl), None, "our symlink is gone");
    if with_real_mdevctl {
        assert_eq!(
            std::fs::read_to_string(&mdevctl).expect("the real mdevctl is back"),
            REAL_BYTES
        );
    } else {
        assert!(!mdevctl.exists(), "no mdevctl was there before");
    }
}

#[test]
fn install_diverts_the_real_mdevctl_and_links_ours_and_remove_gives_it_back() {
    let root = scratch_root(true);
    run(root.path(), "postinst", &["configure", ""]);
    assert_taken_over(root.path());
    assert_eq!(
        std::fs::read_to_string(root.path().join("usr/sbin/mdevctl.distrib"))
            .expect("the real mdevctl kept as mdevctl.distrib"),
        REAL_BYTES
    );
    // An upgrade runs postinst again: nothing changes.
    run(root.path(), "postinst", &["configure", "1.0.0"]);
    assert_taken_over(root.path());

    run(root.path(), "postrm", &["remove"]);
    assert_given_back(root.path(), true);
}

#[test]
fn install_without_a_real_mdevctl_links_ours_and_remove_leaves_no_mdevctl() {
    let root = scratch_root(false);
    run(root.path(), "postinst", &["configure", ""]);
    assert_taken_over(root.path());
    run(root.path(), "postrm", &["remove"]);
    assert_given_back(root.path(), false);
}

#[test]
fn the_opt_out_file_and_reconfigure_give_the_real_mdevctl_back_while_the_package_stays() {
    let root = scratch_root(true);
    run(root.path(), "postinst", &["configure", ""]);
    assert_taken_over(root.path());
    std::fs::create_dir_all(root.path().join("etc/mdev-manager")).expect("config dir");
    std::fs::write(root.path().join("etc/mdev-manager/no-mdevctl-takeover"), "").expect("opt out");
    // dpkg-reconfigure runs postinst configure with the installed version.
    run(root.path(), "postinst", &["configure", "1.0.0"]);
    assert_given_back(root.path(), true);
    // Later upgrades keep the opt-out, and removing the package is still clean.
    run(root.path(), "postinst", &["configure", "1.0.0"]);
    assert_given_back(root.path(), true);
    run(root.path(), "postrm", &["remove"]);
    assert_given_back(root.path(), true);
}

#[test]
fn a_file_an_admin_put_at_usr_sbin_mdevctl_is_left_alone() {
    let root = scratch_root(true);
    run(root.path(), "postinst", &["configure", ""]);
    let mdevctl = root.path().join("usr/sbin/mdevctl");
    std::fs::remove_file(&mdevctl).expect("remove our symlink");
    std::fs::write(&mdevctl, "admin's own\n").expect("admin's file");
    run(root.path(), "postinst", &["configure", "1.0.0"]);
    assert_eq!(
        std::fs::read_to_string(&mdevctl).expect("admin's file"),
        "admin's own\n"
    );
    run(root.path(), "postrm", &["remove"]);
    assert_eq!(
        std::fs::read_to_string(&mdevctl).expect("admin's file"),
        "admin's own\n",
        "postrm removes only our symlink"
    );
    assert_eq!(
        diverted_by(root.path()),
        None,
        "the diversion goes with the package"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("usr/sbin/mdevctl.distrib"))
            .expect("the real mdevctl stays beside the admin's file"),
        REAL_BYTES
    );
}
