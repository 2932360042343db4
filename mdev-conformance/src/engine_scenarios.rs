//! Engine scenarios written once against any host: the simulated one in `cargo test`, the real
//! kernel in the VM tier (`RealFs::new("/")`, `DiskFiles::new(<scratch dir>)`,
//! `VfioDeviceHolder`). They expect the VM tier's guest (`mtty`, `mdpy count=4`, and for the
//! SR-IOV scenario QEMU's NVMe PF at `0000:01:00.0`), only touch instances with UUIDs of their
//! own (`ce000000-0000-4000-8000-…`) and the VFs they enable, and record what is missing as
//! skipped instead of guessing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::DeviceHolder;
use mdev_engine::state::StateFiles;
use mdev_engine::{
    CreateRequest, CreateTarget, DestroyOptions, DeviceRequest, DomainRef, Engine, EngineConfig,
    ErrorKind, ReconcileAction,
};
use mdev_host::discovery::{self, layout};
use mdev_host::HostFs;

/// How one scenario ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every check held.
    Passed,
    /// A check failed: what was expected and what happened.
    Failed(String),
    /// The host lacks what the scenario needs.
    Skipped(String),
}

/// One scenario's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// Scenario name.
    pub name: String,
    /// Its verdict.
    pub verdict: Verdict,
}

/// The PF the SR-IOV scenario uses (QEMU's NVMe controller in the VM tier's guest).
pub const NVME_PF: &str = "0000:01:00.0";

/// A UUID of the scenarios' own (`ce000000-0000-4000-8000-0000000000NN`).
fn own_uuid(n: u8) -> String {
    format!("ce000000-0000-4000-8000-0000000000{n:02x}")
}

type Check = Result<(), String>;

/// A scenario: `Ok(None)` passed, `Ok(Some(why))` skipped, `Err(why)` failed.
type Scenario = fn(&Context<'_>, &Engine) -> Result<Option<String>, String>;

fn ensure(condition: bool, what: impl FnOnce() -> String) -> Check {
    if condition {
        Ok(())
    } else {
        Err(what())
    }
}

fn expect_kind<T: std::fmt::Debug>(
    result: Result<T, mdev_engine::EngineError>,
    kind: ErrorKind,
    step: &str,
) -> Result<String, String> {
    match result {
        Err(error) if error.kind() == kind => Ok(error.to_string()),
        Err(error) => Err(format!(
            "{step}: expected {kind}, got {} ({error})",
            error.kind()
        )),
        Ok(value) => Err(format!("{step}: expected {kind}, got success ({value:?})")),
    }
}

fn step<T>(result: Result<T, mdev_engine::EngineError>, step: &str) -> Result<T, String> {
    result.map_err(|error| format!("{step}: {error} ({})", error.kind()))
}

fn mdev_request(parent: &str, type_id: &str, uuid: Option<String>) -> CreateRequest {
    CreateRequest {
        uuid,
        ..CreateRequest::new(CreateTarget::Mdev {
            parent: parent.into(),
            type_id: type_id.into(),
        })
    }
}

/// Everything a scenario needs.
struct Context<'a> {
    host: Arc<dyn HostFs>,
    files: Arc<dyn StateFiles>,
    state_dir: PathBuf,
    holder: &'a dyn DeviceHolder,
}

impl Context<'_> {
    /// A fresh engine with its own state directory per scenario.
    fn engine(&self, name: &str) -> Result<Arc<Engine>, String> {
        let config = EngineConfig {
            state_dir: self.state_dir.join(name),
            profiles_dir: self.state_dir.join("no-profiles"),
            readiness_timeout: Duration::from_secs(2),
            poll_interval: Duration::from_millis(20),
            write_timeout: Duration::from_secs(5),
            ..EngineConfig::default()
        };
        Engine::new(Arc::clone(&self.host), Arc::clone(&self.files), config)
            .map(Arc::new)
            .map_err(|error| format!("opening the engine: {error}"))
    }

    fn has_parent(&self, parent: &str) -> bool {
        self.host.exists(&layout::mdev_parent(parent))
    }

    /// Removes whatever a failed scenario left of its own instances.
    fn clean_up(&self, engine: &Engine) {
        for n in 0..32u8 {
            let uuid = own_uuid(n);
            let _ = engine.destroy(&uuid, DestroyOptions { force: true });
        }
    }
}

/// Runs every scenario. `state_dir` is a host path (under `files`) the scenarios may fill.
pub fn run(
    host: Arc<dyn HostFs>,
    files: Arc<dyn StateFiles>,
    state_dir: &Path,
    holder: &dyn DeviceHolder,
) -> Vec<ScenarioResult> {
    let context = Context {
        host,
        files,
        state_dir: state_dir.to_owned(),
        holder,
    };
    let scenarios: [(&str, Scenario); 9] = [
        ("create-destroy", create_destroy),
        ("bad-input-changes-nothing", bad_input),
        ("batch-rolls-back", batch_rolls_back),
        ("ownership", ownership),
        ("in-use-refused", in_use),
        ("claims", claims),
        ("reconcile-recreates-autostart", reconcile_recreates),
        ("last-instance-race", last_instance_race),
        ("sriov-vf-bind", sriov_vf),
    ];
    scenarios
        .iter()
        .map(|(name, scenario)| {
            let verdict = match context.engine(name) {
                Err(error) => Verdict::Failed(error),
                Ok(engine) => {
                    let outcome = scenario(&context, &engine);
                    context.clean_up(&engine);
                    match outcome {
                        Ok(None) => Verdict::Passed,
                        Ok(Some(why)) => Verdict::Skipped(why),
                        Err(why) => Verdict::Failed(why),
                    }
                }
            };
            ScenarioResult {
                name: (*name).to_owned(),
                verdict,
            }
        })
        .collect()
}

fn need_mtty(context: &Context<'_>) -> Option<String> {
    (!context.has_parent("mtty")).then(|| "no mtty parent (modprobe mtty)".to_owned())
}

fn create_destroy(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    if let Some(skip) = need_mtty(context) {
        return Ok(Some(skip));
    }
    let uuid = own_uuid(1);
    let info = step(
        engine.create(mdev_request("mtty", "mtty-2", Some(uuid.to_uppercase()))),
        "create",
    )?;
    ensure(info.uuid == uuid, || {
        format!("UUID not normalized: {}", info.uuid)
    })?;
    ensure(info.active && info.iommu_group.is_some(), || {
        format!("not active with a group: {info:?}")
    })?;
    ensure(
        context
            .host
            .exists(&Path::new(layout::MDEV_DEVICES).join(&uuid)),
        || "no /sys/bus/mdev/devices entry".into(),
    )?;
    step(engine.destroy(&uuid, DestroyOptions::default()), "destroy")?;
    ensure(
        !context
            .host
            .exists(&Path::new(layout::MDEV_DEVICES).join(&uuid)),
        || "the mdev still exists after destroy".into(),
    )?;
    expect_kind(
        engine.destroy(&uuid, DestroyOptions::default()),
        ErrorKind::NotFound,
        "second destroy",
    )?;
    Ok(None)
}

fn bad_input(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    if let Some(skip) = need_mtty(context) {
        return Ok(Some(skip));
    }
    let before = step(engine.inventory(), "inventory")?;
    let bad = [
        mdev_request("mtty", "mtty-2", Some("not-a-uuid".into())),
        mdev_request("../mtty", "mtty-2", None),
        mdev_request("mtty", "../../remove", None),
        CreateRequest {
            attributes: vec![("vendor/x".into(), "1\n2".into())],
            ..mdev_request("mtty", "mtty-2", None)
        },
    ];
    for request in bad {
        let shown = format!("{request:?}");
        expect_kind(engine.create(request), ErrorKind::InvalidArgs, &shown)?;
    }
    if context
        .host
        .exists(&Path::new(layout::PCI_DEVICES).join(NVME_PF))
    {
        expect_kind(
            engine.set_num_vfs(NVME_PF, 65_536, DestroyOptions::default()),
            ErrorKind::InvalidArgs,
            "absurd VF count",
        )?;
    }
    let after = step(engine.inventory(), "inventory")?;
    ensure(before == after, || {
        "the host changed after refused requests".into()
    })?;
    Ok(None)
}

fn available(context: &Context<'_>, parent: &str, type_id: &str) -> u32 {
    discovery::read_mdev_type(context.host.as_ref(), parent, type_id).available_instances
}

fn batch_rolls_back(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    if !context.has_parent("mdpy") {
        return Ok(Some("no mdpy parent (modprobe mdpy)".into()));
    }
    let free = available(context, "mdpy", "mdpy-vga");
    if free == 0 || free > 16 {
        return Ok(Some(format!(
            "mdpy has {free} free instances; the scenario needs 1..=16"
        )));
    }
    let requests: Vec<CreateRequest> = (0..=free)
        .map(|n| mdev_request("mdpy", "mdpy-vga", Some(own_uuid(0x10 + n as u8))))
        .collect();
    let error = match engine.create_batch(requests) {
        Ok(created) => {
            return Err(format!(
                "a batch of {} over {free} free instances succeeded",
                created.len()
            ))
        }
        Err(error) => error,
    };
    ensure(error.kind() == ErrorKind::NoCapacity, || {
        format!("expected NoCapacity, got {} ({error})", error.kind())
    })?;
    ensure(error.to_string().contains("rolled back"), || {
        format!("no rollback in {error}")
    })?;
    ensure(available(context, "mdpy", "mdpy-vga") == free, || {
        "capacity not given back after rollback".into()
    })?;
    Ok(None)
}

fn ownership(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    if let Some(skip) = need_mtty(context) {
        return Ok(Some(skip));
    }
    let uuid = own_uuid(2);
    context
        .host
        .write(
            &layout::mdev_type("mtty", "mtty-1").join("create"),
            uuid.as_bytes(),
        )
        .map_err(|error| format!("creating an mdev outside the engine: {error}"))?;
    expect_kind(
        engine.destroy(&uuid, DestroyOptions::default()),
        ErrorKind::NotSupported,
        "destroy of a foreign mdev",
    )?;
    ensure(
        context
            .host
            .exists(&Path::new(layout::MDEV_DEVICES).join(&uuid)),
        || "the foreign mdev was removed".into(),
    )?;
    step(engine.adopt(&uuid), "adopt")?;
    step(
        engine.destroy(&uuid, DestroyOptions::default()),
        "destroy after adopt",
    )?;
    Ok(None)
}

fn in_use(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    if let Some(skip) = need_mtty(context) {
        return Ok(Some(skip));
    }
    let uuid = own_uuid(3);
    let info = step(
        engine.create(mdev_request("mtty", "mtty-2", Some(uuid.clone()))),
        "create",
    )?;
    let held = context
        .holder
        .hold(&info.sysfs_path)
        .map_err(|error| format!("holding {}: {error}", info.sysfs_path.display()))?;
    let text = expect_kind(
        engine.destroy(&uuid, DestroyOptions { force: true }),
        ErrorKind::InUse,
        "destroy while held",
    )?;
    ensure(text.contains("pid "), || {
        format!("the refusal names no pid: {text}")
    })?;
    ensure(
        engine.instance(&uuid).map(|i| i.active).unwrap_or(false),
        || "the held mdev is gone".into(),
    )?;
    drop(held);
    step(
        engine.destroy(&uuid, DestroyOptions::default()),
        "destroy after release",
    )?;
    Ok(None)
}

fn claims(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    if let Some(skip) = need_mtty(context) {
        return Ok(Some(skip));
    }
    let uuid = own_uuid(4);
    let vm1 = DomainRef {
        name: "conformance-vm1".into(),
        uuid: own_uuid(0x1e),
    };
    let vm2 = DomainRef {
        name: "conformance-vm2".into(),
        uuid: own_uuid(0x1f),
    };
    let wants = [DeviceRequest {
        kind: "mdev".into(),
        uuid: Some(uuid.clone()),
        profile: Some("mtty".into()),
        ..DeviceRequest::default()
    }];
    let claimed = step(engine.claim_domain(&vm1, &wants), "claim")?;
    ensure(claimed.len() == 1 && claimed[0].uuid == uuid, || {
        format!("claimed {claimed:?}")
    })?;
    expect_kind(
        engine.claim_domain(&vm2, &wants),
        ErrorKind::InUse,
        "claim by another domain",
    )?;
    ensure(engine.verify_domain(&vm1, &wants).is_empty(), || {
        format!("drift: {:?}", engine.verify_domain(&vm1, &wants))
    })?;
    let report = step(engine.release_domain(&vm1), "release")?;
    ensure(report.destroyed == [uuid.clone()], || {
        format!("release did {report:?}")
    })?;
    Ok(None)
}

fn reconcile_recreates(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    if let Some(skip) = need_mtty(context) {
        return Ok(Some(skip));
    }
    let uuid = own_uuid(5);
    step(
        engine.create(CreateRequest {
            autostart: true,
            ..mdev_request("mtty", "mtty-1", Some(uuid.clone()))
        }),
        "create",
    )?;
    // Gone behind the engine's back (what a reboot or a driver reload does).
    context
        .host
        .write(
            &Path::new(layout::MDEV_DEVICES).join(&uuid).join("remove"),
            b"1",
        )
        .map_err(|error| format!("removing outside the engine: {error}"))?;
    let report = step(engine.reconcile(), "reconcile")?;
    ensure(
        report
            .actions
            .contains(&ReconcileAction::Recreated { uuid: uuid.clone() }),
        || format!("reconcile did {report:?}"),
    )?;
    step(engine.destroy(&uuid, DestroyOptions::default()), "destroy")?;
    Ok(None)
}

fn last_instance_race(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    if !context.has_parent("mdpy") {
        return Ok(Some("no mdpy parent (modprobe mdpy)".into()));
    }
    let free = available(context, "mdpy", "mdpy-xga") as usize;
    if free == 0 || free > 8 {
        return Ok(Some(format!(
            "mdpy has {free} free instances; the scenario needs 1..=8"
        )));
    }
    let threads = free + 4;
    let barrier = Barrier::new(threads);
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|n| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    engine.create(mdev_request(
                        "mdpy",
                        "mdpy-xga",
                        Some(own_uuid(0x40 + n as u8)),
                    ))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a racing thread panicked".to_owned()))
            .collect()
    });
    let mut created = 0;
    for result in results {
        match result? {
            Ok(info) => {
                created += 1;
                step(
                    engine.destroy(&info.uuid, DestroyOptions::default()),
                    "destroy",
                )?;
            }
            Err(error) if error.kind() == ErrorKind::NoCapacity => {}
            Err(error) => {
                return Err(format!(
                    "a racing create failed with {} ({error})",
                    error.kind()
                ))
            }
        }
    }
    ensure(created == free, || {
        format!("{created} creates succeeded for {free} free instances")
    })?;
    Ok(None)
}

fn sriov_vf(context: &Context<'_>, engine: &Engine) -> Result<Option<String>, String> {
    let Ok(pf) = NVME_PF.parse() else {
        return Ok(Some("bad PF constant".into()));
    };
    let Some(state) = discovery::read_sriov_pf(context.host.as_ref(), pf) else {
        return Ok(Some(format!("no SR-IOV PF at {NVME_PF}")));
    };
    if state.num_vfs != 0 || state.function.driver.is_none() {
        return Ok(Some(format!(
            "{NVME_PF} has VFs enabled already or no driver bound"
        )));
    }
    if !context.host.exists(&layout::pci_driver_file(
        mdev_engine::lifecycle::VFIO_PCI,
        "unbind",
    )) {
        return Ok(Some("vfio-pci is not loaded".into()));
    }
    let vfs = step(
        engine.set_num_vfs(NVME_PF, 2, DestroyOptions::default()),
        "enable 2 VFs",
    )?;
    ensure(vfs.len() == 2, || format!("enabled {vfs:?}"))?;
    let info = step(
        engine.create(CreateRequest::new(CreateTarget::Vf {
            pf: NVME_PF.into(),
            vf: None,
        })),
        "bind a VF",
    )?;
    ensure(info.active, || {
        format!("the VF is not bound to vfio-pci: {info:?}")
    })?;
    let held = context
        .holder
        .hold(&info.sysfs_path)
        .map_err(|error| format!("holding the VF: {error}"))?;
    expect_kind(
        engine.set_num_vfs(NVME_PF, 0, DestroyOptions { force: true }),
        ErrorKind::InUse,
        "disable VFs while held",
    )?;
    drop(held);
    step(
        engine.destroy(&info.uuid, DestroyOptions::default()),
        "release the VF",
    )?;
    step(
        engine.set_num_vfs(NVME_PF, 0, DestroyOptions::default()),
        "disable VFs",
    )?;
    Ok(None)
}
