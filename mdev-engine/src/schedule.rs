//! Time-slice scheduling on the host: stores weights, guarantees, caps and per-parent policies
//! in the state file, admits them with `vgpu-sched`, applies them through the backend the
//! parent's driver has, and reports per instance what was asked and what the hardware gives.
//!
//! * software (sample drivers, simulated host): nothing to write; the plan runs in
//!   `vgpu_sched::software` in virtual time;
//! * NVIDIA: the service's modprobe file `/etc/modprobe.d/mdev-manager-nvidia.conf` (through
//!   [`StateFiles`](crate::state::StateFiles), so under the injected root); the driver reads it
//!   only when the module loads, and refuses changes while vGPUs exist;
//! * AMD GIM: `/sys/kernel/debug/gim/<bdf>/asymmetric_timeslice`, one `vf,µs` write per VF
//!   (through [`HostFs`](mdev_host::HostFs));
//! * Intel GVT-g: read-only, weights are fixed by type.
//!
//! Shares are in parts per million (ppm) in the state file and on D-Bus, `0` meaning unset.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vgpu_sched::nvidia::{self, NvidiaError, NvidiaVgpu};
use vgpu_sched::{
    admit, amd, gvt, software, Backend, Busy, InstanceId, InstanceReport, InstanceSchedule,
    ModelError, ParentSchedule, Plan, Policy, Refusal, Share,
};

use crate::state::{InstanceRecord, ParentName, Uuid};
use crate::ErrorKind;
use crate::{lock, Engine, EngineError, EngineEvent, InstanceKind, Scheduling};
use mdev_host::discovery::{Inventory, MdevParent, SriovPf};

/// Host path of the NVIDIA scheduler options file the service owns.
pub const NVIDIA_MODPROBE_PATH: &str = nvidia::MODPROBE_PATH;

/// Host path of GIM's per-VF time slice file for a GPU.
pub fn gim_timeslice_path(parent: &str) -> PathBuf {
    Path::new("/sys/kernel/debug/gim")
        .join(parent)
        .join("asymmetric_timeslice")
}

/// Where the loaded `nvidia` module shows its per-device registry options.
const NVIDIA_LOADED_PARAMETER: &str = "/sys/module/nvidia/parameters/NVreg_RegistryDwordsPerDevice";

/// Failures of scheduling changes. Nothing is stored when a change is refused.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The engine refused (unknown instance, state not saved, discovery failed).
    #[error("scheduling change failed")]
    Engine(#[source] EngineError),
    /// The settings fail admission control or a range check.
    #[error("scheduling settings refused")]
    Settings(#[source] ModelError),
    /// The NVIDIA backend refused (vGPUs running, bad address).
    #[error("NVIDIA scheduler change refused")]
    Nvidia(#[source] NvidiaError),
    /// The AMD backend refused (slices over GIM's budget).
    #[error("AMD GIM time slices refused")]
    Amd(#[source] amd::AmdError),
    /// The GVT-g report could not be made.
    #[error("Intel GVT-g report failed")]
    Gvt(#[source] gvt::GvtError),
    /// The software scheduler refused the plan.
    #[error("software scheduler refused")]
    Software(#[source] software::SoftwareError),
    /// The parent is not on the host.
    #[error("no parent device {parent}")]
    UnknownParent {
        /// The name asked for.
        parent: String,
    },
    /// The instance is not managed by the service (found on the host only).
    #[error("instance {uuid} is not managed by this service; adopt it first")]
    NotManaged {
        /// The UUID.
        uuid: String,
    },
    /// Writing the backend's file failed.
    #[error("cannot write {path}")]
    Write {
        /// Host path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl ScheduleError {
    /// The error class for the D-Bus error name.
    pub fn kind(&self) -> ErrorKind {
        let refusal = |refusal: Refusal| match refusal {
            Refusal::InvalidArgs => ErrorKind::InvalidArgs,
            Refusal::NoCapacity => ErrorKind::NoCapacity,
            Refusal::Busy => ErrorKind::Busy,
            Refusal::NotSupported => ErrorKind::NotSupported,
        };
        match self {
            Self::Engine(error) => error.kind(),
            Self::Settings(error) => refusal(error.refusal()),
            Self::Nvidia(error) => refusal(error.refusal()),
            Self::Amd(error) => refusal(error.refusal()),
            Self::Gvt(error) => refusal(error.refusal()),
            Self::Software(_) => ErrorKind::InvalidArgs,
            Self::UnknownParent { .. } => ErrorKind::NotFound,
            Self::NotManaged { .. } => ErrorKind::NotSupported,
            Self::Write { source, .. } => mdev_host::error::kind_of_io(source),
        }
    }
}

impl From<EngineError> for ScheduleError {
    fn from(error: EngineError) -> Self {
        Self::Engine(error)
    }
}

/// One instance's scheduling: its settings and what it gets.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceScheduleStatus {
    /// UUID.
    pub uuid: String,
    /// Parent name.
    pub parent: String,
    /// The settings in force (stored, or the defaults).
    pub settings: InstanceSchedule,
    /// The fields as stored (`None` = never set), from the same read as `settings`.
    pub stored: Scheduling,
    /// Whether the device exists now (only running instances are planned).
    pub active: bool,
    /// The plan's share for it.
    pub requested: Share,
    /// What the backend will give it.
    pub effective: Share,
    /// GPU time per period in µs (AMD: its GIM time slice).
    pub time_slice_us: u32,
    /// Whether the backend holds it to the request.
    pub enforced: bool,
    /// Why not, or how it is enforced.
    pub note: String,
}

/// One parent's scheduling.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParentScheduleStatus {
    /// Parent name.
    pub parent: String,
    /// The settings in force (stored, or the backend's default).
    pub schedule: ParentSchedule,
    /// Whether the settings were set through the service (else defaults).
    pub stored: bool,
    /// The scheduler behind it.
    pub backend: Backend,
    /// The knobs it enforces (`weight`, `min`, `max`, `runtime-change`, `requires-idle-gpu`).
    pub capabilities: Vec<&'static str>,
    /// What applying needs or what went wrong (e.g. "reload the nvidia module").
    pub note: String,
    /// Its managed instances, active or defined.
    pub instances: Vec<InstanceScheduleStatus>,
}

impl ParentScheduleStatus {
    /// The plan of its running instances (every one busy), for the timeline picture.
    pub fn plan(&self) -> Result<Plan, ModelError> {
        let running: Vec<InstanceSchedule> = self
            .instances
            .iter()
            .filter(|i| i.active)
            .map(|i| i.settings.clone())
            .collect();
        Plan::compute(&self.schedule, &running, Busy::All)
    }
}

/// A change of a parent's settings; `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParentScheduleChange {
    /// New policy.
    pub policy: Option<Policy>,
    /// New period in µs.
    pub period_us: Option<u32>,
    /// New time slice in µs; `Some(0)` returns to the backend's default.
    pub time_slice_us: Option<u32>,
}

/// The parent as discovery sees it.
struct ParentView<'a> {
    name: String,
    driver: Option<String>,
    mdev: Option<&'a MdevParent>,
    pf: Option<&'a SriovPf>,
}

impl ParentView<'_> {
    fn backend(&self) -> Backend {
        Backend::for_driver(self.driver.as_deref().unwrap_or(""))
    }
}

fn parent_views(inventory: &Inventory) -> Vec<ParentView<'_>> {
    let mut names: Vec<String> = inventory
        .mdev_parents
        .iter()
        .map(|p| p.name.clone())
        .chain(
            inventory
                .sriov_pfs
                .iter()
                .map(|p| p.function.address.to_string()),
        )
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let mdev = inventory.mdev_parents.iter().find(|p| p.name == name);
            let pf = inventory
                .sriov_pfs
                .iter()
                .find(|p| p.function.address.to_string() == name);
            let driver = mdev
                .and_then(|m| m.pci.as_ref())
                .or(pf.map(|p| &p.function))
                .and_then(|f| f.driver.clone());
            ParentView {
                name,
                driver,
                mdev,
                pf,
            }
        })
        .collect()
}

/// The stored settings of an instance as `vgpu-sched` settings; unset fields are defaults.
pub fn instance_settings(
    uuid: &str,
    scheduling: &Scheduling,
) -> Result<InstanceSchedule, ModelError> {
    InstanceSchedule::from_raw(
        uuid,
        scheduling
            .weight
            .unwrap_or(u32::from(vgpu_sched::Weight::DEFAULT)),
        scheduling.min_share.unwrap_or(0),
        scheduling.max_share.unwrap_or(0),
    )
}

/// What an evaluation of one parent gives: the statuses and the AMD writes to make.
struct Evaluation {
    status: ParentScheduleStatus,
    gim_writes: Vec<String>,
}

impl Engine {
    /// Every parent's scheduling, from a fresh discovery.
    pub fn schedule_overview(&self) -> Result<Vec<ParentScheduleStatus>, ScheduleError> {
        let inventory = self.inventory()?;
        Ok(self.schedule_overview_of(&inventory))
    }

    /// Every parent's scheduling for an inventory already read. A parent whose settings cannot
    /// be evaluated is listed with the reason in its note.
    pub fn schedule_overview_of(&self, inventory: &Inventory) -> Vec<ParentScheduleStatus> {
        let views = parent_views(inventory);
        let names: HashSet<&str> = views.iter().map(|view| view.name.as_str()).collect();
        let records = self.schedule_records_on(|parent| names.contains(parent));
        views
            .iter()
            .map(|view| {
                let (schedule, stored, mut note) = self.effective_parent_schedule(view);
                match self.evaluate(view, &schedule, &records) {
                    Ok(mut evaluation) => {
                        evaluation.status.stored = stored;
                        if !note.is_empty() {
                            evaluation.status.note = join_notes(&note, &evaluation.status.note);
                        }
                        evaluation.status
                    }
                    Err(error) => {
                        note = join_notes(&note, &chain(&error));
                        ParentScheduleStatus {
                            parent: view.name.clone(),
                            capabilities: view.backend().capabilities().knobs(),
                            backend: view.backend(),
                            schedule,
                            stored,
                            note,
                            instances: Vec::new(),
                        }
                    }
                }
            })
            .collect()
    }

    /// One parent's scheduling (reads that parent alone).
    pub fn parent_schedule_status(
        &self,
        parent: &str,
    ) -> Result<ParentScheduleStatus, ScheduleError> {
        let inventory = self.schedule_inventory(parent)?;
        self.schedule_overview_of(&inventory)
            .into_iter()
            .find(|status| status.parent == parent)
            .ok_or_else(|| ScheduleError::UnknownParent {
                parent: parent.to_owned(),
            })
    }

    /// One instance's scheduling.
    pub fn instance_schedule_status(
        &self,
        uuid: &str,
    ) -> Result<InstanceScheduleStatus, ScheduleError> {
        let record = self.managed_record(uuid)?;
        let status = self.parent_schedule_status(&record.parent)?;
        status
            .instances
            .into_iter()
            .find(|i| i.uuid == record.uuid.to_string())
            .ok_or(ScheduleError::NotManaged {
                uuid: record.uuid.to_string(),
            })
    }

    /// Sets an instance's weight (1..=10000), guarantee and cap (ppm, 0 = unset) after
    /// admission control on its parent, stores them and applies the parent's schedule.
    pub fn set_instance_schedule(
        &self,
        uuid: &str,
        weight: u32,
        min_share_ppm: u32,
        max_share_ppm: u32,
    ) -> Result<InstanceScheduleStatus, ScheduleError> {
        let key = mdev_host::discovery::names::parse_uuid(uuid)
            .map_err(EngineError::from)?
            .to_string();
        // A destroy of the instance waits for this change, or this finds it gone.
        let _held = self.instance_locks.hold(&key);
        let record = self.managed_record(&key)?;
        let candidate = InstanceSchedule::from_raw(
            record.uuid.to_string(),
            weight,
            min_share_ppm,
            max_share_ppm,
        )
        .map_err(ScheduleError::Settings)?;
        let parent_lock = self.parent_lock(&record.parent);
        let _serialized = lock(&parent_lock);
        let inventory = self.schedule_inventory(&record.parent)?;
        let view = parent_views(&inventory)
            .into_iter()
            .find(|v| v.name == record.parent);
        let (schedule, _, _) = match &view {
            Some(view) => self.effective_parent_schedule(view),
            None => (
                ParentSchedule::new(record.parent.as_str()),
                false,
                String::new(),
            ),
        };
        let mut records = self.schedule_records_on(|parent| parent == record.parent.as_str());
        let others: Vec<InstanceSchedule> = records
            .values()
            .filter(|r| r.parent == record.parent && r.uuid != record.uuid)
            .filter_map(|r| instance_settings(&r.uuid.to_string(), &r.scheduling).ok())
            .collect();
        admit(&schedule, &others, &candidate).map_err(ScheduleError::Settings)?;
        let scheduling = Scheduling {
            weight: Some(weight),
            min_share: (min_share_ppm > 0).then_some(min_share_ppm),
            max_share: (max_share_ppm > 0).then_some(max_share_ppm),
        };
        if let Some(stored) = records.get_mut(&record.uuid) {
            stored.scheduling = scheduling;
        }
        // Evaluate with the new settings before storing: a backend refusal (AMD budget)
        // changes nothing.
        let evaluation = match &view {
            Some(view) => Some(self.evaluate(view, &schedule, &records)?),
            None => None,
        };
        let key = record.uuid.to_string();
        self.update_state(|state| {
            if let Some(stored) = state.instance_mut(&key) {
                stored.scheduling = scheduling;
            }
        })?;
        if let Some(evaluation) = &evaluation {
            if let Err(error) = self.apply_gim(&record.parent, evaluation) {
                let previous = record.scheduling;
                let _ = self.update_state(|state| {
                    if let Some(stored) = state.instance_mut(&key) {
                        stored.scheduling = previous;
                    }
                });
                return Err(error);
            }
        }
        self.emit(EngineEvent::InstanceChanged { uuid: key.clone() });
        self.emit_parent_schedule_changed(&record.parent, &records);
        let status = evaluation
            .and_then(|e| e.status.instances.into_iter().find(|i| i.uuid == key))
            .unwrap_or(InstanceScheduleStatus {
                uuid: key.clone(),
                parent: record.parent.to_string(),
                settings: candidate,
                stored: scheduling,
                active: false,
                requested: Share::ZERO,
                effective: Share::ZERO,
                time_slice_us: 0,
                enforced: false,
                note: format!("parent {} is not on the host", record.parent),
            });
        Ok(status)
    }

    /// Changes a parent's policy, period or time slice, after checking the settings with its
    /// instances and the backend (NVIDIA refuses while vGPUs run), stores and applies them.
    pub fn set_parent_policy(
        &self,
        parent: &str,
        change: ParentScheduleChange,
    ) -> Result<ParentScheduleStatus, ScheduleError> {
        let name = ParentName::new(parent).map_err(EngineError::from)?;
        let parent_lock = self.parent_lock(parent);
        let _serialized = lock(&parent_lock);
        let inventory = self.schedule_inventory(parent)?;
        let views = parent_views(&inventory);
        let view = views.iter().find(|v| v.name == parent).ok_or_else(|| {
            ScheduleError::UnknownParent {
                parent: parent.to_owned(),
            }
        })?;
        let (current, _, _) = self.effective_parent_schedule(view);
        let mut requested = current.clone();
        if let Some(policy) = change.policy {
            requested.policy = policy;
        }
        if let Some(period) = change.period_us {
            requested.period_us = period;
        }
        match change.time_slice_us {
            Some(0) => requested.time_slice_us = None,
            Some(slice) => requested.time_slice_us = Some(slice),
            None => {}
        }
        requested.validate().map_err(ScheduleError::Settings)?;
        let records = self.schedule_records();
        let settings: Vec<InstanceSchedule> = records
            .values()
            .filter(|r| r.parent == parent)
            .filter_map(|r| instance_settings(&r.uuid.to_string(), &r.scheduling).ok())
            .collect();
        vgpu_sched::check_parent(&requested, &settings).map_err(ScheduleError::Settings)?;
        if view.backend() == Backend::Nvidia {
            let running = self.running_vgpus(&inventory, view);
            nvidia::check_change(&current, &requested, running).map_err(ScheduleError::Nvidia)?;
        }
        let mut evaluation = self.evaluate(view, &requested, &records)?;
        let value = serde_json::to_value(&requested).map_err(|source| {
            ScheduleError::Engine(EngineError::InvalidArgument {
                what: "parent schedule",
                value: parent.to_owned(),
                reason: source.to_string(),
            })
        })?;
        let previous = lock(&self.state)
            .parents
            .get(parent)
            .and_then(|p| p.schedule.clone());
        self.update_state(|state| {
            state.parents.entry(name.clone()).or_default().schedule = Some(value);
        })?;
        let applied = match view.backend() {
            Backend::Nvidia => self.write_nvidia_config(&views).map(Some),
            Backend::AmdGim => self.apply_gim(parent, &evaluation).map(|()| None),
            _ => Ok(None),
        };
        match applied {
            Ok(Some(note)) => evaluation.status.note = join_notes(&evaluation.status.note, &note),
            Ok(None) => {}
            Err(error) => {
                let _ = self.update_state(|state| {
                    state.parents.entry(name.clone()).or_default().schedule = previous;
                });
                return Err(error);
            }
        }
        evaluation.status.stored = true;
        self.emit_parent_schedule_changed(parent, &records);
        Ok(evaluation.status)
    }

    /// Re-applies every stored schedule (at start, after a reboot): rewrites the NVIDIA options
    /// file and GIM's time slices. Returns one line per action or problem.
    pub fn apply_schedules(&self) -> Vec<String> {
        match self.inventory() {
            Ok(inventory) => self.apply_schedules_in(&inventory),
            Err(error) => vec![format!("cannot re-apply schedules: {}", chain(&error))],
        }
    }

    /// [`Engine::apply_schedules`] on a discovery the caller has just made.
    pub fn apply_schedules_in(&self, inventory: &Inventory) -> Vec<String> {
        let records = self.schedule_records();
        let views = parent_views(inventory);
        let mut lines = Vec::new();
        let stored: HashSet<String> = lock(&self.state)
            .parents
            .iter()
            .filter(|(_, p)| p.schedule.is_some())
            .map(|(name, _)| name.to_string())
            .collect();
        if views
            .iter()
            .any(|v| v.backend() == Backend::Nvidia && stored.contains(&v.name))
        {
            match self.write_nvidia_config(&views) {
                Ok(note) => lines.push(note),
                Err(error) => lines.push(chain(&error)),
            }
        }
        for view in views.iter().filter(|v| v.backend() == Backend::AmdGim) {
            let has_settings = stored.contains(&view.name)
                || records
                    .values()
                    .any(|r| r.parent == view.name && r.scheduling != Scheduling::default());
            if !has_settings {
                continue;
            }
            let (schedule, _, _) = self.effective_parent_schedule(view);
            let result = self
                .evaluate(view, &schedule, &records)
                .and_then(|evaluation| {
                    self.apply_gim(&view.name, &evaluation)
                        .map(|()| evaluation.gim_writes.len())
                });
            match result {
                Ok(writes) => lines.push(format!(
                    "applied {writes} GIM time slice(s) on {}",
                    view.name
                )),
                Err(error) => lines.push(format!(
                    "could not apply the schedule of {}: {}",
                    view.name,
                    chain(&error)
                )),
            }
        }
        lines
    }

    /// Admission control for a new instance (called by create under the parent's lock): its
    /// guarantee, from the profile or the request, must fit beside the parent's others.
    pub(crate) fn admit_at_create(
        &self,
        parent: &str,
        uuid: &str,
        scheduling: &Scheduling,
    ) -> Result<(), EngineError> {
        if scheduling == &Scheduling::default() {
            return Ok(());
        }
        let refused = |error: ModelError| match error.refusal() {
            Refusal::NoCapacity => EngineError::NoCapacity {
                what: format!("a guarantee for new instance {uuid} on {parent}"),
                detail: error.to_string(),
            },
            _ => EngineError::InvalidArgument {
                what: "scheduling settings",
                value: uuid.to_owned(),
                reason: error.to_string(),
            },
        };
        let candidate = instance_settings(uuid, scheduling).map_err(refused)?;
        let own = Uuid::parse(uuid).ok();
        let others: Vec<InstanceSchedule> = lock(&self.state)
            .instances
            .values()
            .filter(|r| r.parent == parent && Some(r.uuid) != own)
            .filter_map(|r| instance_settings(&r.uuid.to_string(), &r.scheduling).ok())
            .collect();
        admit(&ParentSchedule::new(parent), &others, &candidate).map_err(refused)
    }

    /// After a VF instance on an AMD GIM GPU was created or removed: the slices depend on
    /// which VFs are managed, so they are computed and written again; a removed VF gets GIM's
    /// default slice back. Failures are logged, never fail the create or destroy.
    pub(crate) fn after_vf_change(&self, record: &InstanceRecord, removed: bool) {
        let (InstanceKind::Vf, Some(_)) = (record.kind, record.vf) else {
            return;
        };
        let Ok(pf) = record
            .parent
            .parse::<mdev_host::discovery::names::PciAddress>()
        else {
            return;
        };
        let driver = mdev_host::discovery::link_target_name(
            self.fs(),
            &mdev_host::discovery::layout::pci_device(&pf).join("driver"),
        );
        if Backend::for_driver(driver.as_deref().unwrap_or("")) != Backend::AmdGim {
            return;
        }
        let result = (|| -> Result<(), ScheduleError> {
            let inventory = self.schedule_inventory(&record.parent)?;
            let views = parent_views(&inventory);
            let Some(view) = views.iter().find(|v| v.name == record.parent) else {
                return Ok(());
            };
            let (schedule, _, _) = self.effective_parent_schedule(view);
            let records = self.schedule_records_on(|parent| parent == record.parent.as_str());
            let mut evaluation = self.evaluate(view, &schedule, &records)?;
            if removed {
                if let Some(vf) = view.pf.and_then(|pf| {
                    pf.vfs
                        .iter()
                        .find(|vf| Some(vf.function.address) == record.vf)
                }) {
                    evaluation
                        .gim_writes
                        .push(format!("{},{}", vf.index, amd::DEFAULT_SLICE_US));
                }
            }
            self.apply_gim(&record.parent, &evaluation)
        })();
        if let Err(error) = result {
            tracing::warn!(parent = %record.parent, error = %chain(&error), "cannot re-apply GIM time slices");
        }
    }

    // ---- internals ----

    /// What the scheduling of `parent` needs of the host: that parent as an mdev parent
    /// ([`Engine::parent_inventory`]) and as an SR-IOV PF, nothing of any other parent, so a
    /// call on one parent costs the same however many the host has. Empty when `parent` is
    /// neither (the callers then find no view of it, as in a whole discovery).
    fn schedule_inventory(&self, parent: &str) -> Result<Inventory, EngineError> {
        if let Some(inventory) = self.parent_inventory(parent)? {
            return Ok(inventory);
        }
        let pf = parent
            .parse::<mdev_host::discovery::names::PciAddress>()
            .ok()
            .and_then(|address| mdev_host::discovery::read_sriov_pf(self.fs(), address));
        Ok(Inventory {
            sriov_pfs: pf.into_iter().collect(),
            ..Inventory::default()
        })
    }

    fn managed_record(&self, uuid: &str) -> Result<InstanceRecord, ScheduleError> {
        let key = mdev_host::discovery::names::parse_uuid(uuid)
            .map_err(EngineError::from)?
            .to_string();
        if let Some(record) = lock(&self.state).instance(&key).cloned() {
            return Ok(record);
        }
        // Known to the host but not to us: say so rather than "not found".
        match self.instance(&key) {
            Ok(_) => Err(ScheduleError::NotManaged { uuid: key }),
            Err(error) => Err(error.into()),
        }
    }

    fn schedule_records(&self) -> BTreeMap<Uuid, InstanceRecord> {
        lock(&self.state).instances.clone()
    }

    /// The records of the instances on the parents `on` accepts (a copy of those alone: a call
    /// about one parent does not copy the whole host's records).
    fn schedule_records_on(&self, on: impl Fn(&str) -> bool) -> BTreeMap<Uuid, InstanceRecord> {
        lock(&self.state)
            .instances
            .iter()
            .filter(|(_, record)| on(record.parent.as_str()))
            .map(|(uuid, record)| (*uuid, record.clone()))
            .collect()
    }

    /// The parent's settings in force: stored ones, else the backend's default (NVIDIA's
    /// driver default is best effort; the others run the model's default, `weighted`).
    fn effective_parent_schedule(&self, view: &ParentView<'_>) -> (ParentSchedule, bool, String) {
        let stored = lock(&self.state)
            .parents
            .get(view.name.as_str())
            .and_then(|p| p.schedule.clone());
        let default = || {
            let schedule = ParentSchedule::new(view.name.as_str());
            if view.backend() == Backend::Nvidia {
                schedule.with_policy(Policy::BestEffort)
            } else {
                schedule
            }
        };
        // The engine's raw `set_parent_schedule` may store a value without the parent's name;
        // the slot's key is the name.
        let stored = stored.map(|mut value| {
            if let Some(object) = value.as_object_mut() {
                object
                    .entry("parent")
                    .or_insert_with(|| serde_json::Value::from(view.name.clone()));
            }
            value
        });
        match stored.map(serde_json::from_value::<ParentSchedule>) {
            Some(Ok(schedule)) if schedule.parent == view.name && schedule.validate().is_ok() => {
                (schedule, true, String::new())
            }
            Some(_) => (
                default(),
                false,
                format!(
                    "the stored schedule of {} is not valid; using the defaults",
                    view.name
                ),
            ),
            None => (default(), false, String::new()),
        }
    }

    /// vGPUs on a parent now, managed or not (the NVIDIA driver counts them all).
    fn running_vgpus(&self, inventory: &Inventory, view: &ParentView<'_>) -> usize {
        let mdevs = inventory
            .mdevs
            .iter()
            .filter(|m| m.parent == view.name)
            .count();
        let vf_vgpus = view.pf.map_or(0, |pf| {
            pf.vfs
                .iter()
                .filter(|vf| vf.nvidia.as_ref().is_some_and(|nv| nv.current_type != 0))
                .count()
        });
        mdevs + vf_vgpus
    }

    fn evaluate(
        &self,
        view: &ParentView<'_>,
        schedule: &ParentSchedule,
        records: &BTreeMap<Uuid, InstanceRecord>,
    ) -> Result<Evaluation, ScheduleError> {
        let backend = view.backend();
        let on_parent: Vec<&InstanceRecord> =
            records.values().filter(|r| r.parent == view.name).collect();
        let mut settings_notes: BTreeMap<Uuid, String> = BTreeMap::new();
        let settings_of = |record: &InstanceRecord, notes: &mut BTreeMap<Uuid, String>| {
            instance_settings(&record.uuid.to_string(), &record.scheduling).unwrap_or_else(
                |error| {
                    notes.insert(
                        record.uuid,
                        format!("stored settings are not valid ({error}); using the defaults"),
                    );
                    InstanceSchedule::new(record.uuid.to_string())
                },
            )
        };
        let mut running: Vec<(&InstanceRecord, InstanceSchedule)> = Vec::new();
        let mut stopped: Vec<(&InstanceRecord, InstanceSchedule)> = Vec::new();
        for record in on_parent {
            let settings = settings_of(record, &mut settings_notes);
            if self.is_active(record) {
                running.push((record, settings));
            } else {
                stopped.push((record, settings));
            }
        }
        let running_settings: Vec<InstanceSchedule> =
            running.iter().map(|(_, s)| s.clone()).collect();
        let plan = Plan::compute(schedule, &running_settings, Busy::All)
            .map_err(ScheduleError::Settings)?;
        let mut gim_writes = Vec::new();
        let mut parent_note = String::new();
        let reports: Vec<(InstanceReport, u32)> = match backend {
            Backend::Software => {
                let scheduler =
                    software::SoftwareScheduler::new(schedule.clone(), running_settings.clone())
                        .map_err(ScheduleError::Software)?;
                scheduler
                    .report()
                    .into_iter()
                    .zip(&scheduler.plan().instances)
                    .map(|(mut report, planned)| {
                        report.note = format!(
                            "software scheduler in virtual time: {} µs per {} µs period (the driver has no scheduler of its own)",
                            planned.slice_us, schedule.period_us
                        );
                        (report, planned.slice_us)
                    })
                    .collect()
            }
            Backend::Nvidia => {
                let vgpus: Vec<NvidiaVgpu> = running
                    .iter()
                    .map(|(record, settings)| {
                        let (type_name, max_instances) = nvidia_type_info(view, record);
                        NvidiaVgpu {
                            schedule: settings.clone(),
                            type_name,
                            max_instances,
                        }
                    })
                    .collect();
                parent_note = self.nvidia_parent_note(view, schedule);
                nvidia::report(schedule, &vgpus, Busy::All)
                    .map_err(ScheduleError::Nvidia)?
                    .into_iter()
                    .map(|report| {
                        let slice = per_period(report.effective, schedule.period_us);
                        (report, slice)
                    })
                    .collect()
            }
            Backend::AmdGim => {
                let pf = view.pf;
                let total_vfs = pf.map_or(0, |pf| pf.num_vfs);
                let vfs: Vec<amd::AmdVf> = running
                    .iter()
                    .filter_map(|(record, settings)| {
                        let index = pf?
                            .vfs
                            .iter()
                            .find(|vf| Some(vf.function.address) == record.vf)?
                            .index;
                        Some(amd::AmdVf {
                            schedule: settings.clone(),
                            vf_index: index,
                        })
                    })
                    .collect();
                if vfs.is_empty() {
                    Vec::new()
                } else {
                    let slices =
                        amd::time_slices(schedule, &vfs, total_vfs).map_err(ScheduleError::Amd)?;
                    gim_writes = slices.debugfs_writes();
                    if !self.fs().exists(&gim_timeslice_path(&view.name)) {
                        parent_note = format!(
                            "{} is missing (debugfs not mounted, or a GIM without per-VF slices): slices are not applied",
                            gim_timeslice_path(&view.name).display()
                        );
                    }
                    slices
                        .vfs
                        .into_iter()
                        .map(|vf| (vf.report, vf.time_slice_us.unwrap_or(0)))
                        .collect()
                }
            }
            Backend::IntelGvt => {
                let vgpus: Vec<gvt::GvtVgpu> = running
                    .iter()
                    .map(|(record, settings)| gvt::GvtVgpu {
                        schedule: settings.clone(),
                        type_weight: gvt_type_weight(view, record),
                    })
                    .collect();
                gvt::report(schedule, &vgpus, Busy::All)
                    .map_err(ScheduleError::Gvt)?
                    .into_iter()
                    .map(|report| {
                        let slice = per_period(report.effective, schedule.period_us);
                        (report, slice)
                    })
                    .collect()
            }
        };
        let gim_missing = backend == Backend::AmdGim && !parent_note.is_empty();
        let mut instances: Vec<InstanceScheduleStatus> = running
            .iter()
            .map(|(record, settings)| {
                let found = reports
                    .iter()
                    .find(|(r, _)| r.id.0 == record.uuid.to_string());
                let planned = plan.instance(&InstanceId::from(record.uuid.to_string()));
                let (mut enforced, mut note, effective, slice) = match found {
                    Some((report, slice)) => (
                        report.enforced,
                        report.note.clone(),
                        report.effective,
                        *slice,
                    ),
                    None => (
                        false,
                        "not scheduled by the backend (no VF index)".to_owned(),
                        Share::ZERO,
                        0,
                    ),
                };
                if gim_missing {
                    enforced = false;
                    note = join_notes(&note, "GIM debugfs file missing: not applied");
                }
                if let Some(extra) = settings_notes.get(&record.uuid) {
                    note = join_notes(extra, &note);
                }
                InstanceScheduleStatus {
                    uuid: record.uuid.to_string(),
                    parent: view.name.clone(),
                    settings: settings.clone(),
                    stored: record.scheduling,
                    active: true,
                    requested: planned.map_or(Share::ZERO, |p| p.share),
                    effective,
                    time_slice_us: slice,
                    enforced,
                    note,
                }
            })
            .collect();
        instances.extend(stopped.iter().map(|(record, settings)| {
            InstanceScheduleStatus {
                uuid: record.uuid.to_string(),
                parent: view.name.clone(),
                settings: settings.clone(),
                stored: record.scheduling,
                active: false,
                requested: Share::ZERO,
                effective: Share::ZERO,
                time_slice_us: 0,
                enforced: false,
                note: join_notes(
                    settings_notes
                        .get(&record.uuid)
                        .map(String::as_str)
                        .unwrap_or(""),
                    "not running: planned when it starts",
                ),
            }
        }));
        instances.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        Ok(Evaluation {
            status: ParentScheduleStatus {
                parent: view.name.clone(),
                schedule: schedule.clone(),
                stored: false,
                backend,
                capabilities: backend.capabilities().knobs(),
                note: parent_note,
                instances,
            },
            gim_writes,
        })
    }

    /// Writes GIM's per-VF slices, one write per VF as the debugfs file takes them.
    fn apply_gim(&self, parent: &str, evaluation: &Evaluation) -> Result<(), ScheduleError> {
        if evaluation.gim_writes.is_empty() {
            return Ok(());
        }
        let path = gim_timeslice_path(parent);
        if !self.fs().exists(&path) {
            // Reported in the status note; the settings stay stored for when it appears.
            return Ok(());
        }
        // GIM checks the budget on every write and its file cannot be read back, so the order
        // that keeps each step within budget is unknown: retry what was refused after the
        // others. A shrinking slice always fits, and once only growing ones are left each fits
        // on its own (the final set is within budget), so every pass makes progress unless a
        // write is refused for another reason.
        let mut pending: Vec<&String> = evaluation.gim_writes.iter().collect();
        loop {
            let mut refused = Vec::new();
            let mut last_error = None;
            for line in &pending {
                if let Err(error) = self.fs().write(&path, line.as_bytes()) {
                    refused.push(*line);
                    last_error = Some(error);
                }
            }
            match last_error {
                None => return Ok(()),
                Some(source) if refused.len() == pending.len() => {
                    return Err(ScheduleError::Write { path, source })
                }
                Some(_) => pending = refused,
            }
        }
    }

    /// Rewrites the NVIDIA options file from every NVIDIA parent's stored schedule. Returns a
    /// line saying whether the driver must be reloaded.
    fn write_nvidia_config(&self, views: &[ParentView<'_>]) -> Result<String, ScheduleError> {
        let stored: Vec<ParentSchedule> = views
            .iter()
            .filter(|v| v.backend() == Backend::Nvidia)
            .filter_map(|v| match self.effective_parent_schedule(v) {
                (schedule, true, _) => Some(schedule),
                _ => None,
            })
            .collect();
        let config = nvidia::modprobe_config(&stored).map_err(ScheduleError::Nvidia)?;
        let path = self.config.nvidia_modprobe_path.as_path();
        let installed = self
            .files
            .read(path)
            .map_err(|source| ScheduleError::Write {
                path: path.to_owned(),
                source,
            })?
            .map(|data| String::from_utf8_lossy(&data).into_owned());
        if !config.reload_needed(installed.as_deref()) {
            return Ok(format!("{} is up to date", path.display()));
        }
        self.files
            .write_atomic(path, config.text.as_bytes())
            .map_err(|source| ScheduleError::Write {
                path: path.to_owned(),
                source,
            })?;
        Ok(format!(
            "wrote {}: reload the nvidia module while no vGPU exists, or reboot, for it to take effect",
            path.display()
        ))
    }

    /// Whether the loaded driver runs this GPU's setting, as far as the host tells.
    fn nvidia_parent_note(&self, view: &ParentView<'_>, schedule: &ParentSchedule) -> String {
        let setting = match nvidia::NvidiaSetting::for_parent(schedule) {
            Ok(setting) => setting,
            Err(error) => return chain(&error),
        };
        let mut notes = setting.notes.clone();
        let wanted = setting
            .dword()
            .ok()
            .flatten()
            .map(|dword| format!("pci={};RmPVMRL={}", view.name, nvidia::format_dword(dword)));
        match self.fs().read(Path::new(NVIDIA_LOADED_PARAMETER)) {
            Ok(loaded) => {
                let runs = match &wanted {
                    Some(entry) => loaded.contains(entry.as_str()),
                    None => !loaded.contains(&format!("pci={};", view.name)),
                };
                if !runs {
                    notes.push(
                        "the loaded nvidia module runs another setting: reload it (no vGPUs) or reboot"
                            .to_owned(),
                    );
                }
            }
            Err(_) => {
                if wanted.is_some() {
                    notes.push(format!(
                        "set in {}; the driver reads it when the nvidia module loads",
                        self.config.nvidia_modprobe_path.display()
                    ));
                }
            }
        }
        notes.join("; ")
    }

    fn emit_parent_schedule_changed(&self, parent: &str, records: &BTreeMap<Uuid, InstanceRecord>) {
        // Every instance's effective share may move when one setting or the policy changes.
        for record in records.values().filter(|r| r.parent == parent) {
            self.emit(EngineEvent::InstanceChanged {
                uuid: record.uuid.to_string(),
            });
        }
        self.emit(EngineEvent::ParentChanged {
            parent: parent.to_owned(),
        });
    }
}

/// A type's name and how many of it fit on the GPU (fixed share gives 1 / that).
fn nvidia_type_info(view: &ParentView<'_>, record: &InstanceRecord) -> (String, u32) {
    if record.kind == InstanceKind::Mdev {
        if let Some(offered) = view
            .mdev
            .and_then(|m| m.types.iter().find(|t| t.id == record.type_id))
            .and_then(|t| t.offered.as_ref())
        {
            return (
                offered.name.clone(),
                offered
                    .max_instances
                    .unwrap_or(offered.available_instances.max(1)),
            );
        }
    }
    // SR-IOV vGPU: at most one per VF; the type's own limit is not in sysfs.
    let limit = view.pf.map_or(1, |pf| pf.total_vfs.max(1));
    (format!("type {}", record.type_id), limit)
}

fn gvt_type_weight(view: &ParentView<'_>, record: &InstanceRecord) -> u32 {
    let mdev_type = view
        .mdev
        .and_then(|m| m.types.iter().find(|t| t.id == record.type_id));
    mdev_type
        .and_then(|t| t.offered.as_ref().and_then(|o| o.weight))
        .or_else(|| {
            mdev_type
                .and_then(|t| t.description.as_deref())
                .and_then(gvt::type_weight_from_description)
        })
        .or_else(|| gvt::type_weight(&record.type_id).ok())
        .unwrap_or(gvt::MAX_TYPE_WEIGHT)
}

fn per_period(share: Share, period_us: u32) -> u32 {
    let us = u64::from(share.ppm()) * u64::from(period_us) / u64::from(Share::WHOLE.ppm());
    u32::try_from(us).unwrap_or(u32::MAX)
}

fn join_notes(first: &str, second: &str) -> String {
    match (first.is_empty(), second.is_empty()) {
        (true, _) => second.to_owned(),
        (_, true) => first.to_owned(),
        _ => format!("{first}; {second}"),
    }
}

/// `error: cause: cause` on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
