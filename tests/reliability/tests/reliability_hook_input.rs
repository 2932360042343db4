//! The libvirt hook refuses domain XML it cannot parse without touching anything: for every
//! unparseable input — the fuzz corpus's and every truncation of real domains — `prepare`
//! exits 1 with one line, never connects to the bus and writes no file.

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e_tests::bus::{files_under, package_binary};

fn unparseable_inputs() -> Vec<(String, Vec<u8>)> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/domain_xml");
    let mut inputs = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .expect("corpus")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let data = std::fs::read(&path).expect("read");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Every 37th truncation point of the document, plus the whole.
        for cut in (1..data.len()).step_by(37).chain([data.len()]) {
            let piece = data[..cut].to_vec();
            if libvirt_hooks::scan::may_hold_vgpus(&piece)
                && libvirt_hooks::plan::plan_from_xml(&piece).is_err()
            {
                inputs.push((format!("{name}[..{cut}]"), piece));
            }
        }
    }
    inputs
}

#[test]
fn unparseable_domain_xml_fails_prepare_and_touches_nothing() {
    let hook = package_binary("libvirt-hooks", "mdev-manager-hook");
    let inputs = unparseable_inputs();
    assert!(
        inputs.len() >= 20,
        "only {} unparseable inputs",
        inputs.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("bus");
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    for (name, xml) in &inputs {
        let mut child = Command::new(&hook)
            .args(["victim", "prepare", "begin", "-"])
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                format!("unix:path={}", socket.display()),
            )
            .env("MDEV_MANAGER_ROOT", &root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the hook");
        child.stdin.take().unwrap().write_all(xml).unwrap();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            listener.accept().is_err(),
            "{name}: the hook connected to the bus"
        );
        assert!(
            files_under(&root).is_empty(),
            "{name}: the hook wrote files"
        );
    }
    println!(
        "{} unparseable domain XML inputs refused untouched",
        inputs.len()
    );
}
