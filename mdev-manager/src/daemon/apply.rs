//! `Manager.StartApply`: the document parsed and checked before the Job starts (a bad file
//! fails the call naming file, line and key), polkit asked, then the plan and its application
//! in the Job (see `engine::apply`).

use std::collections::HashMap;

use dbus_api::names::action;
use dbus_api::options::{from_dict, ApplyOptions};
use dbus_api::BusError;
use vgpu_profiles::desired::{self, DesiredState};
use zbus::message::Header;
use zbus::OwnedVariant;

use super::action::Action;
use super::auth::AuthRequest;
use super::JobOutcome;
use mdev_engine::apply::ApplyError;
use mdev_engine::{Engine, EngineError, OperationContext};

const METHOD: &str = "StartApply";

/// One checked `StartApply` call.
#[derive(Debug)]
pub struct ApplyCall {
    /// The document's name in messages (`file-name`, else `<document>`).
    pub file_name: String,
    desired: DesiredState,
    dry_run: bool,
    assert: bool,
    force: bool,
    no_user_interaction: bool,
}

impl ApplyCall {
    /// Checks the options and parses the document.
    pub fn parse(
        document: &str,
        format: &str,
        config_name: &str,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<Self, BusError> {
        let options: ApplyOptions = from_dict(METHOD, options)?;
        let file_name = options.file_name.unwrap_or_else(|| "<document>".to_owned());
        let desired = match format {
            "toml" => desired::parse_toml(&file_name, document, config_name)
                .map_err(|error| BusError::InvalidArgs(error.to_string()))?,
            other => {
                return Err(BusError::InvalidArgs(format!(
                    "{METHOD}: format {other:?} of {file_name} is not supported (accepted: toml)"
                )))
            }
        };
        Ok(Self {
            file_name,
            desired,
            dry_run: options.dry_run.unwrap_or(false),
            assert: options.assert.unwrap_or(false),
            force: options.force.unwrap_or(false),
            no_user_interaction: options.no_user_interaction.unwrap_or(false),
        })
    }

    /// The call as an [`Action`]: polkit manage-instances always, manage-persistent when an
    /// entry is autostart, configure-sriov for VF counts, force with `force` (a dry run or
    /// assert asks the same: the plan shows the host); the work is [`ApplyCall::run`].
    pub fn into_action(self, header: &Header<'_>) -> Action<JobOutcome> {
        let ask = |action, verb: &str| {
            AuthRequest::new(action, header, self.no_user_interaction)
                .detail("verb", verb)
                .detail("file", self.file_name.clone())
        };
        let manage = ask(action::MANAGE_INSTANCES, "apply");
        let autostart = self.desired.instances.iter().any(|entry| entry.autostart);
        let persistent = ask(action::MANAGE_PERSISTENT, "apply-autostart");
        let sriov = !self.desired.sriov.is_empty();
        let configure = ask(action::CONFIGURE_SRIOV, "apply-sriov");
        let force = ask(action::FORCE, "apply-force");
        let forced = self.force;
        Action::new(move |engine, token| self.run(engine, token))
            .authorized_by(manage)
            .authorized_by_if(autostart, || persistent)
            .authorized_by_if(sriov, || configure)
            .authorized_by_if(forced, || force)
    }

    /// The Job: plans, then (unless a dry run or assert) applies; the message is the plan.
    pub fn run(self, engine: &Engine, ctx: &OperationContext) -> Result<JobOutcome, EngineError> {
        let plan = engine.plan_apply(&self.desired, self.force)?;
        let rendered = plan.render();
        if self.assert {
            if plan.is_empty() {
                return Ok(JobOutcome::message(rendered));
            }
            return Err(ApplyError::Differs {
                difference: rendered,
            }
            .into());
        }
        if self.dry_run || plan.is_empty() {
            return Ok(JobOutcome::message(rendered));
        }
        let report = engine.apply_plan_with(ctx, &plan)?;
        Ok(JobOutcome {
            message: format!(
                "{rendered}applied: {} created, {} destroyed, {} updated, {} VF counts changed",
                report.created.len(),
                report.destroyed.len(),
                report.updated.len(),
                report.vf_counts.len()
            ),
            objects: report
                .created
                .iter()
                .map(|uuid| dbus_api::path::mdev_instance_path(uuid))
                .collect(),
        })
    }
}
