//! Scheduling on the bus: the scheduling properties of Instance and Parent objects (filled from
//! the engine's schedule overview) and the two setters, `Instance.SetSchedule` and
//! `Parent.SetSchedulerPolicy`, both behind polkit action `org.mdevmanager.vgpu1.set-weights`.

use std::collections::HashMap;
use std::sync::Arc;

use dbus_api::names::action;
use dbus_api::options::{from_dict, NoOptions, SchedulerPolicyOptions};
use dbus_api::schedule::{instance_property, parent_property};
use dbus_api::{path, BusError};
use zbus::message::Header;
use zbus::{Connection, OwnedVariant, Variant};

use super::action::Action;
use super::auth::AuthRequest;
use super::model::Model;
use super::Service;
use mdev_engine::schedule::{ParentScheduleChange, ParentScheduleStatus};
use mdev_engine::Engine;

/// The scheduling properties of an Instance object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceScheduleData {
    /// Guarantee, ppm (0 none).
    pub min_share: u32,
    /// Cap, ppm (0 none).
    pub max_share: u32,
    /// The plan's share, ppm.
    pub requested_share: u32,
    /// What the backend gives, ppm.
    pub effective_share: u32,
    /// GPU time per period, µs.
    pub time_slice_us: u32,
    /// Held to the request.
    pub enforced: bool,
    /// Why not, or how.
    pub note: String,
}

impl InstanceScheduleData {
    /// `(name, value)` in introspection order (after `Weight`).
    pub fn properties(&self) -> Vec<(&'static str, Variant<'static>)> {
        use instance_property as p;
        vec![
            (p::MIN_SHARE, Variant::from(self.min_share)),
            (p::MAX_SHARE, Variant::from(self.max_share)),
            (p::REQUESTED_SHARE, Variant::from(self.requested_share)),
            (p::EFFECTIVE_SHARE, Variant::from(self.effective_share)),
            (p::TIME_SLICE_US, Variant::from(self.time_slice_us)),
            (p::ENFORCED, Variant::from(self.enforced)),
            (p::SCHEDULING_NOTE, Variant::from(self.note.clone())),
        ]
    }
}

/// The scheduling properties of a Parent object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentScheduleData {
    /// Policy name.
    pub policy: String,
    /// Period, µs.
    pub period_us: u32,
    /// Time slice, µs (0 backend default).
    pub time_slice_us: u32,
    /// Backend name.
    pub backend: String,
    /// Knobs the backend enforces.
    pub capabilities: Vec<String>,
    /// What applying needs, or problems.
    pub note: String,
}

impl ParentScheduleData {
    /// `(name, value)` in introspection order.
    pub fn properties(&self) -> Vec<(&'static str, Variant<'static>)> {
        use parent_property as p;
        vec![
            (p::POLICY, Variant::from(self.policy.clone())),
            (p::PERIOD_US, Variant::from(self.period_us)),
            (p::TIME_SLICE_US, Variant::from(self.time_slice_us)),
            (p::SCHEDULER_BACKEND, Variant::from(self.backend.clone())),
            (
                p::SCHEDULER_CAPABILITIES,
                Variant::from(self.capabilities.clone()),
            ),
            (p::SCHEDULER_NOTE, Variant::from(self.note.clone())),
        ]
    }
}

/// A parent's scheduling properties from its schedule status.
pub fn parent_data(status: &ParentScheduleStatus) -> ParentScheduleData {
    ParentScheduleData {
        policy: status.schedule.policy.to_string(),
        period_us: status.schedule.period_us,
        time_slice_us: status.schedule.time_slice_us.unwrap_or(0),
        backend: status.backend.name().to_string(),
        capabilities: status
            .capabilities
            .iter()
            .map(|knob| knob.to_string())
            .collect(),
        note: status.note.clone(),
    }
}

/// Fills the scheduling properties of the model's parents and instances from the engine
/// (blocking: called from `Model::read`).
pub fn fill(model: &mut Model, engine: &Engine, inventory: &mdev_engine::Inventory) {
    for status in engine.schedule_overview_of(inventory) {
        if let Some(parent) = model.parents.get_mut(&path::parent_path(&status.parent)) {
            parent.schedule = parent_data(&status);
        }
        for instance in &status.instances {
            let Some(data) = model
                .instances
                .get_mut(&path::mdev_instance_path(&instance.uuid))
            else {
                continue;
            };
            // From the same read of the state as the other scheduling properties, so one
            // change is announced in one PropertiesChanged.
            (data.weight, data.schedule) = instance_schedule(instance);
        }
    }
}

/// An instance's `Weight` and other scheduling properties from its parent's schedule status.
pub fn instance_schedule(
    instance: &mdev_engine::schedule::InstanceScheduleStatus,
) -> (u32, InstanceScheduleData) {
    (
        instance.stored.weight.unwrap_or(0),
        InstanceScheduleData {
            min_share: instance.settings.min_share.map_or(0, |s| s.ppm()),
            max_share: instance.settings.max_share.map_or(0, |s| s.ppm()),
            requested_share: instance.requested.ppm(),
            effective_share: instance.effective.ppm(),
            time_slice_us: instance.time_slice_us,
            enforced: instance.enforced,
            note: instance.note.clone(),
        },
    )
}

/// What `Instance.SetSchedule` was asked.
#[derive(Debug, Clone)]
pub struct SetSchedule {
    /// Instance UUID.
    pub uuid: String,
    /// Its parent (for the polkit details).
    pub parent: String,
    /// Weight 1..=10000.
    pub weight: u32,
    /// Guarantee, ppm (0 none).
    pub min_share: u32,
    /// Cap, ppm (0 none).
    pub max_share: u32,
}

/// `Instance.SetSchedule(u weight, u min_share, u max_share, a{sv} options)`.
pub async fn set_schedule(
    service: &Arc<Service>,
    connection: &Connection,
    header: &Header<'_>,
    request: SetSchedule,
    options: HashMap<String, OwnedVariant>,
) -> Result<(), BusError> {
    let options: NoOptions = from_dict("SetSchedule", options)?;
    let auth = AuthRequest::new(
        action::SET_WEIGHTS,
        header,
        options.no_user_interaction.unwrap_or(false),
    )
    .detail("verb", "set-schedule")
    .detail("uuid", request.uuid.clone())
    .detail("parent", request.parent.clone())
    .detail("weight", request.weight.to_string())
    .detail("min_share_ppm", request.min_share.to_string())
    .detail("max_share_ppm", request.max_share.to_string());
    let action = Action::new(move |engine, _| {
        engine.set_instance_schedule(
            &request.uuid,
            request.weight,
            request.min_share,
            request.max_share,
        )
    })
    .authorized_by(auth);
    service.perform(connection, action).await?;
    Ok(())
}

/// `Parent.SetSchedulerPolicy(s policy, a{sv} options)`: `policy` empty keeps the current one;
/// options `period u` (µs) and `slice u` (µs, 0 = the backend's default).
pub async fn set_scheduler_policy(
    service: &Arc<Service>,
    connection: &Connection,
    header: &Header<'_>,
    parent: String,
    policy: String,
    options: HashMap<String, OwnedVariant>,
) -> Result<(), BusError> {
    let options: SchedulerPolicyOptions = from_dict("SetSchedulerPolicy", options)?;
    let change = ParentScheduleChange {
        policy: if policy.is_empty() {
            None
        } else {
            Some(policy.parse().map_err(|e: vgpu_sched::ModelError| {
                BusError::InvalidArgs(format!("SetSchedulerPolicy on {parent}: {e}"))
            })?)
        },
        period_us: options.period,
        time_slice_us: options.slice,
    };
    let auth = AuthRequest::new(
        action::SET_WEIGHTS,
        header,
        options.no_user_interaction.unwrap_or(false),
    )
    .detail("verb", "set-scheduler-policy")
    .detail("parent", parent.clone())
    .detail("policy", policy);
    let action =
        Action::new(move |engine, _| engine.set_parent_policy(&parent, change)).authorized_by(auth);
    service.perform(connection, action).await?;
    Ok(())
}
