//! `Manager.StartApply`: the document parsed and checked before the Job starts (a bad file
//! fails the call naming file, line and key), polkit asked, then the plan and its application
//! in the Job (see `engine::apply`).

use std::collections::HashMap;

use dbus_api::names::{action, option};
use dbus_api::BusError;
use vgpu_profiles::desired::{self, DesiredState};
use zbus::message::Header;
use zbus::OwnedVariant;

use super::auth::AuthRequest;
use super::options::CallOptions;
use super::{JobOutcome, Service};
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
        let options = CallOptions::parse(
            METHOD,
            options,
            &[
                option::DRY_RUN,
                option::ASSERT,
                option::FORCE,
                option::FILE_NAME,
            ],
        )?;
        let file_name = options
            .string(option::FILE_NAME)?
            .unwrap_or_else(|| "<document>".to_owned());
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
            dry_run: options.boolean(option::DRY_RUN)?.unwrap_or(false),
            assert: options.boolean(option::ASSERT)?.unwrap_or(false),
            force: options.boolean(option::FORCE)?.unwrap_or(false),
            no_user_interaction: options.no_user_interaction()?,
        })
    }

    /// Asks polkit: manage-instances always, manage-persistent when an entry is autostart,
    /// force with `force` (a dry run or assert asks the same: the plan shows the host).
    pub async fn authorize(&self, service: &Service, header: &Header<'_>) -> Result<(), BusError> {
        let request = AuthRequest::new(action::MANAGE_INSTANCES, header, self.no_user_interaction)
            .detail("verb", "apply")
            .detail("file", self.file_name.clone());
        service.authorizer.check(request).await?;
        if self.desired.instances.iter().any(|entry| entry.autostart) {
            let request =
                AuthRequest::new(action::MANAGE_PERSISTENT, header, self.no_user_interaction)
                    .detail("verb", "apply-autostart")
                    .detail("file", self.file_name.clone());
            service.authorizer.check(request).await?;
        }
        if !self.desired.sriov.is_empty() {
            let request =
                AuthRequest::new(action::CONFIGURE_SRIOV, header, self.no_user_interaction)
                    .detail("verb", "apply-sriov")
                    .detail("file", self.file_name.clone());
            service.authorizer.check(request).await?;
        }
        if self.force {
            let request = AuthRequest::new(action::FORCE, header, self.no_user_interaction)
                .detail("verb", "apply-force")
                .detail("file", self.file_name.clone());
            service.authorizer.check(request).await?;
        }
        Ok(())
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
