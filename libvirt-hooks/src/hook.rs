//! What the hook does for each operation, given the call and the domain XML. The binary is a
//! thin shell around [`run`]: it reads stdin, calls `run` and writes the [`HookOutcome`].
//!
//! libvirt's rules shape every branch (libvirt docs/hooks.rst): a non-zero exit at `prepare`
//! aborts the start and libvirt logs our stderr; a non-zero exit at `reconnect` kills the
//! running guest, so reconnect always exits 0; for `migrate`/`restore` stdout is the domain XML
//! (empty output means unchanged) and a failure cancels the operation.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vgpu_types::Uuid;

use crate::config::ConfigError;
use crate::domain_index::lists_domain;
use crate::domain_uuid::domain_uuid;
use crate::invocation::{HookInvocation, Operation};
use crate::pending::record_pending_release;
use crate::plan::{plan_from_xml, ClaimPlan};
use crate::scan::may_hold_vgpus;
use crate::service::{ServiceClient, ServiceError};

/// The environment variable that overrides every call timeout, in seconds (tests use it to
/// keep waits short).
pub const TIMEOUT_ENV: &str = "MDEV_MANAGER_HOOK_TIMEOUT_SECS";

/// Where and how long the hook may work.
#[derive(Debug, Clone)]
pub struct HookSettings {
    /// The host root for the pending-release records (`/` on a host).
    pub root: PathBuf,
    /// Overrides the per-operation call timeouts when set.
    pub timeout_override: Option<Duration>,
}

impl HookSettings {
    /// From the environment: [`crate::pending::ROOT_ENV`] and [`TIMEOUT_ENV`].
    pub fn from_env() -> Self {
        let timeout_override = std::env::var(TIMEOUT_ENV)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Self {
            root: crate::pending::host_root(),
            timeout_override,
        }
    }

    /// The service's state directory (a host path, under [`Self::root`]): from the service's
    /// config file under the root, as the service reads it.
    pub fn state_dir(&self) -> Result<PathBuf, ConfigError> {
        crate::config::state_dir(&self.root)
    }

    /// How long a call for `operation` may take. libvirt waits for us with the domain locked,
    /// so every call is bounded; claiming may have to enable SR-IOV VFs, which takes seconds,
    /// hence the longer bound there.
    pub fn timeout(&self, operation: Operation) -> Duration {
        self.timeout_override.unwrap_or(match operation {
            Operation::Prepare | Operation::Migrate | Operation::Restore => Duration::from_secs(60),
            Operation::Release => Duration::from_secs(20),
            Operation::Reconnect | Operation::Other => Duration::from_secs(10),
        })
    }
}

/// What the hook process should do on exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutcome {
    /// The exit status.
    pub exit_code: u8,
    /// Bytes for stdout (the domain XML for migrate/restore; empty otherwise).
    pub stdout: Vec<u8>,
    /// Lines for stderr, each a complete message.
    pub stderr: Vec<String>,
}

impl HookOutcome {
    fn success() -> Self {
        Self {
            exit_code: 0,
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }

    fn failure(line: String) -> Self {
        Self {
            exit_code: 1,
            stdout: Vec::new(),
            stderr: vec![line],
        }
    }

    fn note(mut self, line: String) -> Self {
        self.stderr.push(line);
        self
    }
}

/// Every message starts with this, so it stands out in libvirt's log.
const PREFIX: &str = "mdev-manager-hook";

/// Runs one hook call. Never panics on input; the only side effects are the D-Bus calls and,
/// at release with the service down, the pending-release record.
pub fn run(invocation: &HookInvocation, domain_xml: &[u8], settings: &HookSettings) -> HookOutcome {
    let operation = invocation.operation;
    let domain = &invocation.domain_name;
    if operation == Operation::Other {
        return HookOutcome::success();
    }
    // Release goes by the domain's UUID: a domain the service lists as holding claims is
    // released whatever its XML names now (a vGPU hot-unplugged before the stop is not in it).
    let mut state_dir = None;
    if operation == Operation::Release {
        let dir = match settings.state_dir() {
            Ok(dir) => dir,
            Err(error) => {
                return HookOutcome::failure(format!(
                    "{PREFIX}: release of domain '{domain}': cannot tell the service's state directory: {}",
                    chain(&error)
                ))
            }
        };
        let listed =
            domain_uuid(domain_xml).filter(|uuid| lists_domain(&settings.root, &dir, uuid));
        if let Some(domain_uuid) = listed {
            return match connect(operation, settings) {
                Ok(client) => release(&client, domain, &domain_uuid, settings, &dir),
                Err(outcome) => outcome,
            };
        }
        state_dir = Some(dir);
    }
    // The fast path: most domains on a host have no vGPU. An oversized input skips it so that
    // the parser refuses it explicitly.
    if domain_xml.len() <= crate::MAX_DOMAIN_XML_BYTES && !may_hold_vgpus(domain_xml) {
        return HookOutcome::success();
    }
    let plan = match plan_from_xml(domain_xml) {
        Ok(plan) => plan,
        Err(error) => {
            let line = format!(
                "{PREFIX}: {} of domain '{domain}': cannot read the domain XML: {}",
                operation.label(),
                chain(&error)
            );
            return match operation {
                // A failed reconnect kills a running guest; a bad XML is no reason for that.
                Operation::Reconnect => HookOutcome::success().note(line),
                _ => HookOutcome::failure(line),
            };
        }
    };
    if plan.is_empty() {
        return HookOutcome::success();
    }
    let Some(domain_uuid) = plan.domain_uuid else {
        let line = format!(
            "{PREFIX}: {} of domain '{domain}': the domain XML has no <uuid>, which claims are keyed by",
            operation.label()
        );
        return match operation {
            Operation::Reconnect => HookOutcome::success().note(line),
            _ => HookOutcome::failure(line),
        };
    };
    let client = match connect(operation, settings) {
        Ok(client) => client,
        Err(outcome) => return outcome,
    };
    match (operation, state_dir) {
        (Operation::Prepare, _) => prepare(&client, domain, &domain_uuid, &plan),
        (Operation::Migrate | Operation::Restore, _) => {
            let mut outcome = prepare(&client, domain, &domain_uuid, &plan);
            if outcome.exit_code == 0 {
                // Unchanged: the UUIDs and addresses the XML names are the ones we claimed.
                outcome.stdout = domain_xml.to_vec();
            }
            outcome
        }
        (Operation::Release, Some(dir)) => release(&client, domain, &domain_uuid, settings, &dir),
        (Operation::Reconnect, _) => reconnect(&client, domain, &domain_uuid, &plan),
        // Release always has its state directory (read above); Other returned at the top.
        (Operation::Release | Operation::Other, _) => HookOutcome::success(),
    }
}

/// The D-Bus client for `operation`, or the outcome when it cannot be made.
fn connect(operation: Operation, settings: &HookSettings) -> Result<ServiceClient, HookOutcome> {
    ServiceClient::new(settings.timeout(operation)).map_err(|error| {
        let line = format!("{PREFIX}: cannot start the D-Bus client: {error}");
        match operation {
            Operation::Reconnect => HookOutcome::success().note(line),
            _ => HookOutcome::failure(line),
        }
    })
}

fn prepare(
    client: &ServiceClient,
    domain: &str,
    domain_uuid: &Uuid,
    plan: &ClaimPlan,
) -> HookOutcome {
    match client.prepare_domain(domain, domain_uuid, plan) {
        Ok(_) => HookOutcome::success(),
        Err(error) if error.is_not_running() && !plan.declares_vgpus() => {
            // Only bare hostdevs: they may be mdevctl's or the admin's, which libvirt can start
            // without us. Blocking every VM with a passed-through device while the service is
            // down would be worse than letting libvirt report a missing mdev itself.
            HookOutcome::success().note(format!(
                "{PREFIX}: domain '{domain}': {}; not claiming {} (no vGPU metadata)",
                chain(&error),
                list_devices(plan)
            ))
        }
        Err(error) => HookOutcome::failure(format!(
            "{PREFIX}: cannot claim vGPUs for domain '{domain}' ({}): {}",
            list_devices(plan),
            chain(&error)
        )),
    }
}

fn release(
    client: &ServiceClient,
    domain: &str,
    domain_uuid: &Uuid,
    settings: &HookSettings,
    state_dir: &Path,
) -> HookOutcome {
    match client.release_domain(domain, domain_uuid) {
        Ok(()) => HookOutcome::success(),
        Err(error @ (ServiceError::NotRunning(_) | ServiceError::TimedOut(_))) => {
            match record_pending_release(&settings.root, state_dir, domain_uuid, domain) {
                Ok(path) => {
                    let outcome = HookOutcome::success().note(format!(
                        "{PREFIX}: domain '{domain}': {}; release recorded in {} for the service to finish when it starts",
                        chain(&error),
                        path.display()
                    ));
                    // A service that is up but stuck deserves a line in libvirt's log; a
                    // stopped one is an ordinary state.
                    if error.is_not_running() {
                        outcome
                    } else {
                        HookOutcome {
                            exit_code: 1,
                            ..outcome
                        }
                    }
                }
                Err(record_error) => HookOutcome::failure(format!(
                    "{PREFIX}: domain '{domain}': {}, and {}",
                    chain(&error),
                    chain(&record_error)
                )),
            }
        }
        Err(error) => HookOutcome::failure(format!(
            "{PREFIX}: cannot release the vGPUs of domain '{domain}' ({domain_uuid}): {}",
            chain(&error)
        )),
    }
}

fn reconnect(
    client: &ServiceClient,
    domain: &str,
    domain_uuid: &Uuid,
    plan: &ClaimPlan,
) -> HookOutcome {
    // Exit 0 whatever happens: libvirt kills the guest when reconnect fails.
    match client.verify_domain(domain, domain_uuid, plan) {
        Ok(drift) => HookOutcome {
            exit_code: 0,
            stdout: Vec::new(),
            stderr: drift
                .into_iter()
                .map(|line| format!("{PREFIX}: domain '{domain}': drift: {}", one_line(&line)))
                .collect(),
        },
        Err(error) => HookOutcome::success().note(format!(
            "{PREFIX}: domain '{domain}': cannot verify vGPU claims: {}",
            chain(&error)
        )),
    }
}

/// `mdev c217... (profile 'x'), vf 0000:3b:00.4`.
fn list_devices(plan: &ClaimPlan) -> String {
    plan.devices
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// An error and its sources on one line: libvirt logs one line per hook failure.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = one_line(&error.to_string());
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = one_line(&cause.to_string());
        // Some foreign errors (zbus, io wrappers) repeat their source in their own message.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(operation: &str, sub: &str) -> HookInvocation {
        HookInvocation::from_args(["vm1", operation, sub, "-"].map(std::ffi::OsString::from))
            .unwrap()
    }

    fn settings(root: &std::path::Path) -> HookSettings {
        HookSettings {
            root: root.to_owned(),
            timeout_override: Some(Duration::from_secs(2)),
        }
    }

    const PLAIN: &[u8] = b"<domain type='kvm'><name>vm1</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid><devices/></domain>";

    #[test]
    fn other_operations_and_plain_domains_succeed_without_output() {
        let root = tempfile::tempdir().unwrap();
        for (operation, sub) in [
            ("start", "begin"),
            ("prepare", "begin"),
            ("release", "end"),
            ("migrate", "begin"),
            ("reconnect", "begin"),
        ] {
            let outcome = run(&call(operation, sub), PLAIN, &settings(root.path()));
            assert_eq!(outcome, HookOutcome::success(), "{operation}");
        }
        // Even garbage is fine for operations that do not read the XML.
        assert_eq!(
            run(&call("started", "begin"), b"<<<", &settings(root.path())),
            HookOutcome::success()
        );
        assert!(
            std::fs::read_dir(root.path()).unwrap().next().is_none(),
            "nothing written"
        );
    }

    #[test]
    fn unreadable_xml_fails_prepare_but_never_reconnect() {
        let root = tempfile::tempdir().unwrap();
        let broken = b"<domain><devices><hostdev type='mdev'></devices></domain>";
        let outcome = run(&call("prepare", "begin"), broken, &settings(root.path()));
        assert_eq!(outcome.exit_code, 1);
        assert_eq!(outcome.stderr.len(), 1);
        assert!(
            outcome.stderr[0].starts_with("mdev-manager-hook: prepare of domain 'vm1': cannot read the domain XML: domain XML is not well-formed"),
            "{:?}",
            outcome.stderr
        );
        let outcome = run(&call("reconnect", "begin"), broken, &settings(root.path()));
        assert_eq!(outcome.exit_code, 0);
        assert_eq!(outcome.stderr.len(), 1);
    }

    #[test]
    fn oversized_xml_is_refused_at_prepare() {
        let root = tempfile::tempdir().unwrap();
        let huge = vec![b' '; crate::MAX_DOMAIN_XML_BYTES + 1];
        let outcome = run(&call("prepare", "begin"), &huge, &settings(root.path()));
        assert_eq!(outcome.exit_code, 1);
        assert!(
            outcome.stderr[0].contains("more than the"),
            "{:?}",
            outcome.stderr
        );
    }

    #[test]
    fn release_fails_naming_the_config_file_when_its_state_dir_cannot_be_read() {
        let root = tempfile::tempdir().unwrap();
        let config = root.path().join("etc/mdev-manager/mdev-manager.toml");
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, "state_dir = \"\"\"\n/srv\"\"\"\n").unwrap();
        let outcome = run(&call("release", "end"), PLAIN, &settings(root.path()));
        assert_eq!(outcome.exit_code, 1);
        assert_eq!(outcome.stderr.len(), 1);
        assert!(
            outcome.stderr[0].starts_with("mdev-manager-hook: release of domain 'vm1': cannot tell the service's state directory: config file")
                && outcome.stderr[0].contains("mdev-manager.toml, line 1: state_dir: multi-line"),
            "{:?}",
            outcome.stderr
        );
        // Other operations do not need the state directory.
        let outcome = run(&call("prepare", "begin"), PLAIN, &settings(root.path()));
        assert_eq!(outcome, HookOutcome::success());
    }

    #[test]
    fn chain_joins_sources_on_one_line() {
        let error = crate::pending::PendingError::Write {
            domain_uuid: Uuid::NIL,
            path: "/x".into(),
            source: std::io::Error::other("disk\nfull"),
        };
        assert_eq!(
            chain(&error),
            "cannot record the pending release of domain 00000000-0000-0000-0000-000000000000 in /x: disk full"
        );
    }
}
