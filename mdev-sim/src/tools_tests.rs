//! The simulated vendor tools against what NVIDIA's guide and its shipped `sriov-manage` do.

use std::path::Path;
use std::time::Duration;

use super::*;
use mdev_host::command::{CommandError, RunLimits};

const H200: &str = "0000:4b:00.0";

fn never() -> bool {
    false
}

fn sriov_manage(host: &SimHost, args: &[&str]) -> mdev_host::CommandOutput {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    host.commands()
        .run(
            Path::new(SRIOV_MANAGE),
            &args,
            &RunLimits {
                timeout: Duration::from_secs(60),
                cancelled: &never,
            },
        )
        .unwrap()
}

fn numvfs(host: &SimHost, pf: &str) -> String {
    host.read(Path::new(&format!(
        "/sys/bus/pci/devices/{pf}/sriov_numvfs"
    )))
    .unwrap()
    .trim()
    .to_owned()
}

#[test]
fn sriov_manage_enables_every_vf_bound_to_nvidia_and_disables_them() {
    let host = SimHost::builtin("default").unwrap();
    assert!(host.commands().installed(Path::new(SRIOV_MANAGE)));
    let output = sriov_manage(&host, &["-e", H200]);
    assert_eq!(
        (
            output.status,
            output.stdout.as_str(),
            output.stderr.as_str()
        ),
        (0, "Enabling VFs on 0000:4b:00.0\n", "")
    );
    assert_eq!(numvfs(&host, H200), "32", "all of sriov_totalvfs");
    let vf = host
        .read_link(Path::new(&format!("/sys/bus/pci/devices/{H200}/virtfn0")))
        .unwrap();
    let vf = vf.file_name().unwrap().to_string_lossy().into_owned();
    let driver = host
        .read_link(Path::new(&format!("/sys/bus/pci/devices/{vf}/driver")))
        .unwrap();
    assert!(driver.ends_with("nvidia"), "{driver:?}");
    assert!(host.exists(Path::new(&format!(
        "/sys/bus/pci/devices/{vf}/nvidia/current_vgpu_type"
    ))));

    let again = sriov_manage(&host, &["-e", H200]);
    assert_eq!(
        (again.status, again.stdout.as_str()),
        (0, "GPU at 0000:4b:00.0 already has VFs enabled.\n")
    );
    let disabled = sriov_manage(&host, &["-d", "4b:00.0"]);
    assert_eq!(
        (disabled.status, disabled.stdout.as_str()),
        (0, "Disabling VFs on 0000:4b:00.0\n")
    );
    assert_eq!(numvfs(&host, H200), "0");
    let again = sriov_manage(&host, &["-d", H200]);
    assert_eq!(
        again.stdout,
        "GPU at 0000:4b:00.0 already has VFs disabled.\n"
    );
}

#[test]
fn sriov_manage_answers_other_devices_and_bad_arguments_like_the_script() {
    let host = SimHost::builtin("default").unwrap();
    // The T4 has no SR-IOV: nothing to do, success, no output.
    let t4 = sriov_manage(&host, &["-e", "0000:3b:00.0"]);
    assert_eq!(
        (t4.status, t4.stdout.as_str(), t4.stderr.as_str()),
        (0, "", "")
    );
    // Not an NVIDIA function (the Intel GPU), or no such function: exit 1, no output.
    for gpu in ["0000:00:02.0", "0000:99:00.0", "nonsense"] {
        let output = sriov_manage(&host, &["-e", gpu]);
        assert_eq!((output.status, output.stdout.as_str()), (1, ""), "{gpu}");
    }
    for args in [&[][..], &["-x", H200][..], &["-e"][..]] {
        let output = sriov_manage(&host, args);
        assert_eq!(output.status, 1, "{args:?}");
        assert!(output.stderr.starts_with("Usage:"), "{args:?}: {output:?}");
    }
    // ALL: every NVIDIA GPU's function 0.
    let all = sriov_manage(&host, &["-e", "ALL"]);
    assert_eq!(
        (all.status, all.stdout.as_str()),
        (0, "Enabling VFs on 0000:4b:00.0\n")
    );
    assert_eq!(numvfs(&host, H200), "32");
}

#[test]
fn a_refused_sriov_numvfs_write_fails_sriov_manage_with_the_kernel_error() {
    let host = SimHost::builtin("default").unwrap();
    host.inject_fault(Fault::fail("*/sriov_numvfs", libc::EIO).times(1));
    let output = sriov_manage(&host, &["-e", H200]);
    assert_eq!(output.status, 1);
    assert!(
        output.stderr.contains("write error: Input/output error"),
        "{output:?}"
    );
    assert_eq!(numvfs(&host, H200), "0");
}

#[test]
fn a_host_without_the_vgpu_manager_has_no_sriov_manage() {
    let host = SimHost::builtin("h200-real").unwrap();
    assert!(!host.commands().installed(Path::new(SRIOV_MANAGE)));
    let error = host
        .commands()
        .run(
            Path::new(SRIOV_MANAGE),
            &["-e".to_owned(), "0000:00:06.0".to_owned()],
            &RunLimits {
                timeout: Duration::from_secs(1),
                cancelled: &never,
            },
        )
        .unwrap_err();
    assert!(
        matches!(error, CommandError::NotInstalled { .. }),
        "{error}"
    );
    assert!(error.to_string().contains(SRIOV_MANAGE), "{error}");
}
