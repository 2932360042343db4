//! systemd hardening of packaging/systemd/mdev-manager.service, checked offline with
//! `systemd-analyze security --offline=true` (systemd 252 and later). The exposure score is
//! printed; the check fails if the unit drops below systemd's "OK" band (exposure above 5.0)
//! or loses the settings that keep an unprivileged compromise from spreading.

use std::path::Path;
use std::process::Command;

#[test]
fn unit_exposure_stays_in_the_ok_band() {
    let unit =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd/mdev-manager.service");
    let output = match Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .output()
    {
        Ok(output) => output,
        Err(error) => {
            eprintln!("systemd-analyze not available ({error}); hardening not checked");
            return;
        }
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(line) = text.lines().find(|l| l.contains("Overall exposure level")) else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("offline") || stderr.contains("unrecognized option") {
            eprintln!("this systemd-analyze has no --offline; hardening not checked");
            return;
        }
        panic!("no exposure line in systemd-analyze output:\n{text}\n{stderr}");
    };
    println!("{}", line.trim());
    let score: f64 = line
        .split(':')
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the score in {line:?}"));
    assert!(
        score <= 5.0,
        "exposure {score} is above systemd's OK band: {line}"
    );
    let content = std::fs::read_to_string(&unit).expect("unit file");
    for setting in [
        "NoNewPrivileges=yes",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "RestrictAddressFamilies=AF_UNIX AF_NETLINK",
        "SystemCallFilter=@system-service",
        "CapabilityBoundingSet=",
    ] {
        assert!(content.contains(setting), "{setting} missing from the unit");
    }
}
