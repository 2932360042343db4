//! Race family: every pair of operations that touch one instance or one parent's capacity,
//! raced over a real bus (a private `dbus-daemon`) against the service on the simulated host,
//! round after round. The service runs in this process (the production `Service` and engine,
//! served on the bus) so that after every round the test can read the simulated host's sysfs
//! and check:
//!
//! * at most one domain was told it holds an instance, and it is the holder the service shows;
//! * every acknowledged success is true of the host (sysfs) and of the service's state;
//! * nothing appeared on the host that the service does not manage.
//!
//! A slowed sysfs write (fault injection of the simulated host) widens each operation's window
//! between its check and its write, so a check made outside the lock of its write shows up.
//! Rounds per pair: `RACE_ROUNDS` (default 40, CI); `scripts/races` runs a long version.
//! Each test prints one `races:` line (pair, rounds, outcomes, violations) and fails on any
//! violation, naming the round.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use dbus_api::names::{device_key, option, ERROR_PREFIX};
use dbus_api::path;
use dbus_api::proxy::{InstanceProxy, JobProxy, ManagerProxy, SriovProxy};
use dbus_api::wire::InstanceEntry;
use e2e_tests::bus::{repo_root, service_signals};
use e2e_tests::in_process::InProcessService;
use futures_util::StreamExt;
use mdev_engine::EngineConfig;
use mdev_host::discovery::{self, names::PciAddress};
use mdev_sim::Fault;
use zbus::{MessageStream, OwnedObjectPath, Variant};

const T4: &str = "0000:3b:00.0";
const T4_PROFILE: &str = "nvidia-t4-2q";
const H200: &str = "0000:4b:00.0";
/// The H200's VFs: what `sriov-manage -e` enables.
const ALL_VFS: u32 = 32;
const H200_PROFILE: &str = "nvidia-h200-35c";
/// Delay of the slowed sysfs writes.
const SLOW_WRITE: Duration = Duration::from_millis(10);
/// Callers racing for one instance in the claim-vs-claim pair.
const CLAIMANTS: usize = 8;

fn rounds() -> usize {
    std::env::var("RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

/// The service on the default simulated host (T4 mdev vGPU, H200 SR-IOV vGPU).
async fn start() -> InProcessService {
    let config = EngineConfig {
        poll_interval: Duration::from_millis(10),
        ..EngineConfig::default()
    };
    InProcessService::start(
        &repo_root().join("mdev-sim/topologies/default.toml"),
        config,
    )
    .await
}

/// The short error name (`InUse`), or the whole name for a non-service error.
fn error_name(error: &zbus::Error) -> String {
    match error {
        zbus::Error::MethodError(name, _, _) => {
            let name = name.as_str();
            name.strip_prefix(ERROR_PREFIX)
                .and_then(|s| s.strip_prefix('.'))
                .unwrap_or(name)
                .to_owned()
        }
        // A call on an object that is gone (a destroyed instance, a finished job).
        other
            if other
                .to_string()
                .contains("org.freedesktop.DBus.Error.UnknownObject") =>
        {
            "UnknownObject".into()
        }
        other => format!("transport: {other}"),
    }
}

fn outcome<T>(result: &Result<T, zbus::Error>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(error) => error_name(error),
    }
}

/// Head starts (first operation's delay, second's) cycled through the rounds, so that each
/// side of a pair gets ahead in some rounds and both start together in others.
fn stagger(round: usize) -> (Duration, Duration) {
    let ms = Duration::from_millis;
    match round % 6 {
        0 => (ms(0), ms(0)),
        1 => (ms(0), ms(3)),
        2 => (ms(0), ms(12)),
        3 => (ms(3), ms(0)),
        4 => (ms(12), ms(0)),
        _ => (ms(30), ms(0)),
    }
}

fn round_uuid(pair: u8, round: usize) -> String {
    format!("7ace{pair:02x}00-0000-4000-8000-{round:012x}")
}

fn domain_uuid(index: usize) -> String {
    format!("d0a10000-0000-4000-8000-{index:012x}")
}

fn claim_by_uuid(uuid: &str) -> HashMap<&'static str, Variant<'static>> {
    HashMap::from([
        (device_key::KIND, Variant::from("mdev")),
        (device_key::UUID, Variant::from(uuid.to_owned())),
    ])
}

/// One pair's run: the service, counts of outcomes, and the violations seen.
struct Race {
    pair: &'static str,
    host: InProcessService,
    manager: ManagerProxy<'static>,
    outcomes: BTreeMap<String, u32>,
    violations: Vec<String>,
}

impl Race {
    async fn new(pair: &'static str) -> Self {
        let host = start().await;
        let manager = ManagerProxy::new(&host.client).await.expect("Manager");
        Self {
            pair,
            host,
            manager,
            outcomes: BTreeMap::new(),
            violations: Vec::new(),
        }
    }

    fn note(&mut self, outcome: String) {
        *self.outcomes.entry(outcome).or_default() += 1;
    }

    fn violation(&mut self, round: usize, what: String) {
        self.violations.push(format!("round {round}: {what}"));
    }

    async fn instances(&self) -> BTreeMap<String, InstanceEntry> {
        self.manager
            .list_instances(HashMap::new())
            .await
            .expect("ListInstances")
            .into_iter()
            .map(|entry| (entry.uuid.clone(), entry))
            .collect()
    }

    async fn instance_proxy(&self, uuid: &str) -> InstanceProxy<'static> {
        InstanceProxy::builder(&self.host.client)
            .path(path::mdev_instance_path(uuid))
            .build()
            .await
            .expect("Instance proxy")
    }

    /// A T4 instance with `uuid` (`persistent` ones may be stopped and started again).
    async fn create_t4(&self, uuid: &str, persistent: bool) {
        let options = HashMap::from([
            (option::PARENT, Variant::from(T4)),
            (option::UUID, Variant::from(uuid.to_owned())),
            (option::AUTOSTART, Variant::from(persistent)),
        ]);
        self.manager
            .create_instances(T4_PROFILE, options)
            .await
            .expect("CreateInstances");
    }

    /// The checks made after every round, whatever the pair.
    async fn check_host(&mut self, round: usize) {
        let listed = self.instances().await;
        let sim = self.host.sim.clone();
        for uuid in sim.mdev_uuids() {
            match listed.get(&uuid) {
                Some(entry) if !entry.owner.is_empty() => {}
                _ => self.violation(round, format!("mdev {uuid} is on the host, unmanaged")),
            }
        }
        for entry in listed.values() {
            if entry.kind == "mdev" && entry.active && !sim.mdev_uuids().contains(&entry.uuid) {
                self.violation(
                    round,
                    format!("{} is listed active but not on the host", entry.uuid),
                );
            }
        }
        // Every NVIDIA vGPU set on a VF belongs to an instance the service lists on that VF.
        let pf: PciAddress = H200.parse().expect("H200 address");
        if let Some(sriov) = discovery::read_sriov_pf(&sim, pf) {
            for vf in sriov.vfs {
                let address = vf.function.address;
                let current = discovery::read_nvidia_vf(&sim, address)
                    .map(|nv| nv.current_type)
                    .unwrap_or(0);
                let listed_here = listed
                    .values()
                    .any(|e| e.pci_address == address.to_string() && e.active);
                if current != 0 && !listed_here {
                    self.violation(
                        round,
                        format!("VF {address} carries vGPU type {current}, unmanaged"),
                    );
                }
            }
        }
        for entry in listed.values().filter(|e| e.kind == "nvidia-vf") {
            let vf: Option<PciAddress> = entry.pci_address.parse().ok();
            let current = vf
                .and_then(|vf| discovery::read_nvidia_vf(&sim, vf))
                .map(|nv| nv.current_type);
            if entry.active && current.unwrap_or(0) == 0 {
                self.violation(
                    round,
                    format!(
                        "{} is listed active on VF {} which carries no vGPU",
                        entry.uuid, entry.pci_address
                    ),
                );
            }
        }
    }

    /// Destroys whatever the round left (forced: claims included) and checks the host is clean.
    async fn clean_up(&mut self, round: usize) {
        for uuid in self.instances().await.into_keys() {
            let options = HashMap::from([(option::FORCE, Variant::from(true))]);
            if let Err(error) = self.manager.destroy_instances(&[&uuid], options).await {
                self.violation(round, format!("cleanup: destroying {uuid}: {error}"));
            }
        }
        if !self.host.sim.mdev_uuids().is_empty() {
            self.violation(round, "cleanup left mdevs on the host".into());
        }
    }

    fn finish(self, rounds: usize) {
        println!(
            "races: {}: {rounds} rounds, outcomes {:?}, {} violations",
            self.pair,
            self.outcomes,
            self.violations.len()
        );
        // The first few name the rounds; the count says how many there were.
        assert!(
            self.violations.is_empty(),
            "{}: {} violations, the first ones:\n{}",
            self.pair,
            self.violations.len(),
            self.violations
                .iter()
                .take(8)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// `Manager.JobRemoved` for `job`: (result, message).
async fn job_end(signals: &mut MessageStream, job: &OwnedObjectPath) -> (String, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let message = tokio::time::timeout_at(deadline, signals.next())
            .await
            .unwrap_or_else(|_| panic!("job {job} did not end within 60 s"))
            .expect("signal stream open")
            .expect("signal");
        if message.header().member().map(|m| m.as_str()) != Some("JobRemoved") {
            continue;
        }
        let (path, result, text): (OwnedObjectPath, String, String) =
            message.body().deserialize().expect("JobRemoved body");
        if &path == job {
            return (result, text);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_vs_claim_leaves_exactly_one_holder_per_instance() {
    let mut race = Race::new("claim vs claim").await;
    // Starting a defined instance is the claim's slow step between its check and its write.
    let _slow = race
        .host
        .sim
        .inject_fault(Fault::slow("*/mdev_supported_types/*/create", SLOW_WRITE));
    let rounds = rounds();
    for round in 0..rounds {
        let uuid = round_uuid(1, round);
        // Odd rounds: a defined (stopped) instance the claims start; even: a running one.
        let defined = round % 2 == 1;
        race.create_t4(&uuid, defined).await;
        if defined {
            race.instance_proxy(&uuid)
                .await
                .stop(HashMap::new())
                .await
                .expect("Stop");
        }
        let claims = (0..CLAIMANTS).map(|index| {
            let manager = race.manager.clone();
            let uuid = uuid.clone();
            async move {
                manager
                    .prepare_domain(
                        &format!("race-{index}"),
                        &domain_uuid(index),
                        vec![claim_by_uuid(&uuid)],
                        HashMap::new(),
                    )
                    .await
            }
        });
        let results = futures_util::future::join_all(claims).await;
        let winners: Vec<usize> = (0..CLAIMANTS).filter(|i| results[*i].is_ok()).collect();
        for result in &results {
            race.note(outcome(result));
        }
        if winners.len() != 1 {
            race.violation(
                round,
                format!("{} domains were told they hold {uuid}", winners.len()),
            );
        }
        for result in &results {
            if let Err(error) = result {
                if error_name(error) != "InUse" || !error.to_string().contains(&uuid) {
                    race.violation(round, format!("a losing claim got {error}"));
                }
            }
        }
        let listed = race.instances().await;
        let holder = listed.get(&uuid).map(|e| e.holder_uuid.clone());
        if let Some(&winner) = winners.first() {
            if holder != Some(domain_uuid(winner)) {
                race.violation(
                    round,
                    format!("told domain {winner} it holds {uuid}; the holder is {holder:?}"),
                );
            }
            if !race.host.sim.mdev_uuids().contains(&uuid) {
                race.violation(round, format!("claimed {uuid} is not on the host"));
            }
        }
        race.check_host(round).await;
        for index in winners {
            race.manager
                .release_domain(
                    &format!("race-{index}"),
                    &domain_uuid(index),
                    HashMap::new(),
                )
                .await
                .expect("ReleaseDomain");
        }
        race.clean_up(round).await;
    }
    race.finish(rounds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_vs_destroy_never_both_succeed_and_leave_nothing_unmanaged() {
    let mut race = Race::new("claim vs destroy").await;
    // The removal is the destroy's slow step between its claim check and forgetting.
    let _slow = race
        .host
        .sim
        .inject_fault(Fault::slow("*/remove", SLOW_WRITE));
    let rounds = rounds();
    let domain = domain_uuid(1);
    for round in 0..rounds {
        let uuid = round_uuid(2, round);
        race.create_t4(&uuid, false).await;
        let (destroy_delay, claim_delay) = stagger(round);
        let destroy = {
            let manager = race.manager.clone();
            let uuid = uuid.clone();
            async move {
                tokio::time::sleep(destroy_delay).await;
                manager.destroy_instances(&[&uuid], HashMap::new()).await
            }
        };
        let claim = {
            let manager = race.manager.clone();
            let (uuid, domain) = (uuid.clone(), domain.clone());
            async move {
                tokio::time::sleep(claim_delay).await;
                manager
                    .prepare_domain(
                        "race-1",
                        &domain,
                        vec![claim_by_uuid(&uuid)],
                        HashMap::new(),
                    )
                    .await
            }
        };
        let (destroyed, claimed) = futures_util::future::join(destroy, claim).await;
        race.note(format!(
            "destroy {} / claim {}",
            outcome(&destroyed),
            outcome(&claimed)
        ));
        let listed = race.instances().await;
        let on_host = race.host.sim.mdev_uuids().contains(&uuid);
        match (&destroyed, &claimed) {
            (Ok(()), Ok(_)) => race.violation(
                round,
                format!("claimed {uuid} was destroyed without force (both succeeded)"),
            ),
            (Ok(()), Err(error)) => {
                if error_name(error) != "NotFound" || !error.to_string().contains(&uuid) {
                    race.violation(round, format!("the claim after the destroy got {error}"));
                }
                if on_host || listed.contains_key(&uuid) {
                    race.violation(round, format!("destroyed {uuid} is still there"));
                }
            }
            (Err(error), Ok(_)) => {
                if error_name(error) != "InUse" {
                    race.violation(round, format!("the destroy of a claimed one got {error}"));
                }
                let holder = listed.get(&uuid).map(|e| e.holder_uuid.as_str());
                if !on_host || holder != Some(domain.as_str()) {
                    race.violation(
                        round,
                        format!("claimed {uuid}: on host {on_host}, holder {holder:?}"),
                    );
                }
            }
            (Err(d), Err(c)) => race.violation(round, format!("both failed: {d}; {c}")),
        }
        race.check_host(round).await;
        race.manager
            .release_domain("race-1", &domain, HashMap::new())
            .await
            .expect("ReleaseDomain");
        race.clean_up(round).await;
    }
    race.finish(rounds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn destroy_vs_destroy_removes_once_and_the_other_is_told_not_found() {
    let mut race = Race::new("destroy vs destroy").await;
    let _slow = race
        .host
        .sim
        .inject_fault(Fault::slow("*/remove", SLOW_WRITE));
    let rounds = rounds();
    for round in 0..rounds {
        let uuid = round_uuid(3, round);
        // Alternate transient and persistent (the latter go through pending_destroys).
        race.create_t4(&uuid, round % 2 == 1).await;
        let destroys = (0..2).map(|_| {
            let manager = race.manager.clone();
            let uuid = uuid.clone();
            async move { manager.destroy_instances(&[&uuid], HashMap::new()).await }
        });
        let results = futures_util::future::join_all(destroys).await;
        for result in &results {
            race.note(outcome(result));
        }
        let succeeded = results.iter().filter(|r| r.is_ok()).count();
        if succeeded != 1 {
            race.violation(round, format!("{succeeded} destroys of {uuid} succeeded"));
        }
        for error in results.iter().filter_map(|r| r.as_ref().err()) {
            if error_name(error) != "NotFound" || !error.to_string().contains(&uuid) {
                race.violation(round, format!("the second destroy got {error}"));
            }
        }
        if race.host.sim.mdev_uuids().contains(&uuid) || race.instances().await.contains_key(&uuid)
        {
            race.violation(round, format!("destroyed {uuid} is still there"));
        }
        race.check_host(round).await;
        race.clean_up(round).await;
    }
    race.finish(rounds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn weight_change_vs_destroy_either_applies_first_or_finds_the_instance_gone() {
    let mut race = Race::new("weight vs destroy").await;
    let _slow = race
        .host
        .sim
        .inject_fault(Fault::slow("*/remove", SLOW_WRITE));
    let rounds = rounds();
    for round in 0..rounds {
        let uuid = round_uuid(4, round);
        race.create_t4(&uuid, false).await;
        let weight = 100 + round as u32;
        let proxy = zbus::Proxy::new(
            &race.host.client,
            dbus_api::names::BUS_NAME,
            path::mdev_instance_path(&uuid),
            dbus_api::names::interface::INSTANCE,
        )
        .await
        .expect("Instance proxy");
        let (set_delay, destroy_delay) = stagger(round);
        let set = async move {
            tokio::time::sleep(set_delay).await;
            let options: HashMap<&str, Variant<'_>> = HashMap::new();
            proxy
                .call_method("SetSchedule", &(weight, 0u32, 0u32, options))
                .await
                .map(|_| ())
        };
        let destroy = {
            let manager = race.manager.clone();
            let uuid = uuid.clone();
            async move {
                tokio::time::sleep(destroy_delay).await;
                manager.destroy_instances(&[&uuid], HashMap::new()).await
            }
        };
        let (set, destroyed) = futures_util::future::join(set, destroy).await;
        race.note(format!(
            "weight {} / destroy {}",
            outcome(&set),
            outcome(&destroyed)
        ));
        let listed = race.instances().await;
        match &destroyed {
            Ok(()) => {
                if listed.contains_key(&uuid) || race.host.sim.mdev_uuids().contains(&uuid) {
                    race.violation(round, format!("destroyed {uuid} is still there"));
                }
            }
            Err(error) => race.violation(round, format!("an unclaimed destroy got {error}")),
        }
        if let Err(error) = &set {
            // After the destroy the instance (and its object) is gone.
            let name = error_name(error);
            if name != "NotFound" && name != "UnknownObject" {
                race.violation(round, format!("the weight change got {error}"));
            }
        }
        race.check_host(round).await;
        race.clean_up(round).await;
    }
    race.finish(rounds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_vs_sriov_vf_count_change_keeps_every_vgpu_on_an_existing_vf() {
    let mut race = Race::new("create vs SR-IOV count").await;
    let mut signals = service_signals(&race.host.client).await;
    let sriov = SriovProxy::builder(&race.host.client)
        .path(path::parent_path(H200))
        .build()
        .await
        .expect("Sriov proxy");
    let set_vfs = |count: u32| {
        let sriov = sriov.clone();
        async move { sriov.set_num_vfs(count, HashMap::new()).await }
    };
    // An NVIDIA PF changes its VFs through sriov-manage: all of them (32 on the H200) or none.
    // Each round either disables them all, which a vGPU made first on one of them refuses, or
    // enables them all again.
    let job = set_vfs(ALL_VFS).await.expect("SetNumVfs 32");
    assert_eq!(job_end(&mut signals, &job).await.0, "done");
    let _slow = race
        .host
        .sim
        .inject_fault(Fault::slow("*/nvidia/current_vgpu_type", SLOW_WRITE));
    let rounds = rounds();
    let pf: PciAddress = H200.parse().expect("H200 address");
    for round in 0..rounds {
        let before = discovery::read_sriov_pf(&race.host.sim, pf)
            .map(|p| p.num_vfs)
            .unwrap_or(0);
        let target = if before == ALL_VFS { 0 } else { ALL_VFS };
        let (create_delay, change_delay) = stagger(round);
        let create = {
            let manager = race.manager.clone();
            async move {
                tokio::time::sleep(create_delay).await;
                let options = HashMap::from([(option::PARENT, Variant::from(H200))]);
                manager.create_instances(H200_PROFILE, options).await
            }
        };
        let change = async {
            tokio::time::sleep(change_delay).await;
            set_vfs(target).await
        };
        let (created, job) = futures_util::future::join(create, change).await;
        let changed = match &job {
            Ok(job) => job_end(&mut signals, job).await,
            Err(error) => ("refused".into(), error.to_string()),
        };
        race.note(format!(
            "create {} / set VFs {}",
            outcome(&created),
            changed.0
        ));
        if std::env::var_os("RACE_VERBOSE").is_some() {
            println!(
                "round {round}: set VFs to {target}: {} {}",
                changed.0, changed.1
            );
        }
        let after = discovery::read_sriov_pf(&race.host.sim, pf)
            .map(|p| p.num_vfs)
            .unwrap_or(0);
        let expected = if changed.0 == "done" { target } else { before };
        if after != expected {
            race.violation(
                round,
                format!(
                    "VF count {after} on the host; the change to {target} ended {} ({})",
                    changed.0, changed.1
                ),
            );
        }
        if let Ok(paths) = &created {
            let listed = race.instances().await;
            for object in paths {
                let entry = listed.values().find(|e| &e.object == object);
                match entry {
                    Some(entry) if entry.active => {}
                    other => race.violation(
                        round,
                        format!("created {object} is not an active instance: {other:?}"),
                    ),
                }
            }
        }
        race.check_host(round).await;
        race.clean_up(round).await;
    }
    race.finish(rounds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn job_cancel_vs_completion_ends_either_done_with_the_instance_or_cancelled_with_nothing() {
    let mut race = Race::new("cancel vs completion").await;
    let mut signals = service_signals(&race.host.client).await;
    let _slow = race
        .host
        .sim
        .inject_fault(Fault::slow("*/mdev_supported_types/*/create", SLOW_WRITE));
    let rounds = rounds();
    for round in 0..rounds {
        let uuid = round_uuid(6, round);
        let options = HashMap::from([
            (option::PARENT, Variant::from(T4)),
            (option::UUID, Variant::from(uuid.clone())),
        ]);
        let job = race
            .manager
            .start_create_instances(T4_PROFILE, options)
            .await
            .expect("StartCreateInstances");
        // From at once to after the slowed create has landed.
        tokio::time::sleep(Duration::from_millis((round % 6) as u64 * 8)).await;
        let cancel = JobProxy::builder(&race.host.client)
            .path(job.clone())
            .build()
            .await
            .expect("Job proxy")
            .cancel(HashMap::new())
            .await;
        let (result, message) = job_end(&mut signals, &job).await;
        race.note(format!("cancel {} / job {result}", outcome(&cancel)));
        if let Err(error) = &cancel {
            // Too late: the job has finished (NotSupported, "already finished") and its
            // object may be gone already (UnknownObject).
            let name = error_name(error);
            if name != "UnknownObject"
                && !(name == "NotSupported" && error.to_string().contains("already finished"))
            {
                race.violation(round, format!("Cancel got {error}"));
            }
        }
        let listed = race.instances().await;
        let on_host = race.host.sim.mdev_uuids().contains(&uuid);
        match result.as_str() {
            "done" => {
                if !on_host || !listed.get(&uuid).is_some_and(|e| e.active) {
                    race.violation(round, format!("job done, yet {uuid} is not there"));
                }
            }
            "cancelled" if cancel.is_err() => race.violation(
                round,
                format!("job cancelled by a refused Cancel: {message}"),
            ),
            "cancelled" => {
                if on_host || listed.contains_key(&uuid) {
                    race.violation(round, format!("job cancelled, yet {uuid} is there"));
                }
            }
            other => race.violation(round, format!("job ended {other}: {message}")),
        }
        race.check_host(round).await;
        race.clean_up(round).await;
    }
    race.finish(rounds);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apply_job_vs_destroy_of_an_instance_it_removes_never_brings_that_instance_back() {
    let mut race = Race::new("apply vs destroy").await;
    let mut signals = service_signals(&race.host.client).await;
    // The removal is the slow step of both the apply's destroys and the plain destroy.
    let _slow = race
        .host
        .sim
        .inject_fault(Fault::slow("*/remove", SLOW_WRITE));
    // The T4 described whole with one 4Q: both 2Q instances are planned for removal.
    let document = format!(
        "version = 1\n\n[[instances]]\nparent = \"{T4}\"\nprofile = \"nvidia-t4-4q\"\ncount = 1\n"
    );
    let rounds = rounds();
    for round in 0..rounds {
        let target = round_uuid(7, round);
        let other = round_uuid(8, round);
        race.create_t4(&target, false).await;
        race.create_t4(&other, false).await;
        let (apply_delay, destroy_delay) = stagger(round);
        let apply = {
            let manager = race.manager.clone();
            let document = document.clone();
            async move {
                tokio::time::sleep(apply_delay).await;
                manager
                    .start_apply(&document, "toml", "", HashMap::new())
                    .await
            }
        };
        let destroy = {
            let manager = race.manager.clone();
            let target = target.clone();
            async move {
                tokio::time::sleep(destroy_delay).await;
                manager.destroy_instances(&[&target], HashMap::new()).await
            }
        };
        let (job, destroyed) = futures_util::future::join(apply, destroy).await;
        let job = job.expect("StartApply");
        let (result, message) = job_end(&mut signals, &job).await;
        race.note(format!("apply {result} / destroy {}", outcome(&destroyed)));
        let listed = race.instances().await;
        let on_host = race.host.sim.mdev_uuids();
        // Whoever removed it, the instance the destroy named stays gone.
        if listed.contains_key(&target) || on_host.contains(&target) {
            race.violation(
                round,
                format!("{target} is back (apply {result}: {message})"),
            );
        }
        match (result.as_str(), &destroyed) {
            // The destroy went first and the job planned after it (its plan removes only the
            // other one), or the job removed both and the destroy found nothing.
            ("done", destroyed) => {
                if let Err(error) = destroyed {
                    if error_name(error) != "NotFound" {
                        race.violation(round, format!("the destroy after the apply got {error}"));
                    }
                }
                if listed.contains_key(&other) || on_host.contains(&other) {
                    race.violation(round, format!("apply done, yet {other} is there"));
                }
            }
            // The job planned before the destroy and found its plan stale: it changed
            // nothing, the other one stays.
            ("failed", Ok(())) => {
                if !listed.contains_key(&other) || !on_host.contains(&other) {
                    race.violation(round, format!("apply failed, yet {other} is gone"));
                }
            }
            (other_result, destroyed) => race.violation(
                round,
                format!(
                    "apply {other_result} ({message}), destroy {}",
                    outcome(destroyed)
                ),
            ),
        }
        race.check_host(round).await;
        race.clean_up(round).await;
    }
    race.finish(rounds);
}
