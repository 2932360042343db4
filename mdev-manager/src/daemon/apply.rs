//! `Manager.StartApply`: the document parsed and checked before the Job starts (a bad file
//! fails the call naming file, line and key), polkit asked, then the plan and its application
//! in the Job (see `mdev_engine::apply`). Formats: `toml` (this project's), `nvidia-vgpu-dm`
//! (NVIDIA vgpu-device-manager's YAML, resolved on the host in the Job, see
//! `mdev_engine::apply_vgpu_dm`) and `auto` (the latter when the text looks like it, else TOML).

use std::collections::HashMap;

use dbus_api::names::{action, option};
use dbus_api::BusError;
use vgpu_profiles::desired::{self, DesiredState};
use vgpu_profiles::vgpu_dm::{self, VgpuDmConfig};
use zbus::message::Header;
use zbus::OwnedVariant;

use super::auth::AuthRequest;
use super::options::CallOptions;
use super::{JobOutcome, Service};
use mdev_engine::apply::ApplyError;
use mdev_engine::{Engine, EngineError, OperationContext};

const METHOD: &str = "StartApply";

/// A parsed document: a desired state, or a vgpu-device-manager configuration that becomes
/// one on the host.
#[derive(Debug)]
enum Document {
    Desired(DesiredState),
    VgpuDm(VgpuDmConfig),
}

/// One checked `StartApply` call.
#[derive(Debug)]
pub struct ApplyCall {
    /// The document's name in messages (`file-name`, else `<document>`).
    pub file_name: String,
    document: Document,
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
        let format = match format {
            "auto" if vgpu_dm::looks_like_vgpu_dm(document) => vgpu_dm::FORMAT,
            "auto" => "toml",
            other => other,
        };
        let invalid = |error: desired::DesiredError| BusError::InvalidArgs(error.to_string());
        let document = match format {
            "toml" => Document::Desired(
                desired::parse_toml(&file_name, document, config_name).map_err(invalid)?,
            ),
            vgpu_dm::FORMAT => Document::VgpuDm(
                vgpu_dm::parse_vgpu_dm(&file_name, document, config_name).map_err(invalid)?,
            ),
            other => {
                return Err(BusError::InvalidArgs(format!(
                    "{METHOD}: format {other:?} of {file_name} is not supported (accepted: toml, {}, auto)",
                    vgpu_dm::FORMAT
                )))
            }
        };
        Ok(Self {
            file_name,
            document,
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
        let (autostart, sriov) = match &self.document {
            Document::Desired(desired) => (
                desired.instances.iter().any(|entry| entry.autostart),
                !desired.sriov.is_empty(),
            ),
            // vgpu-device-manager files make running, not persistent, vGPUs and no VF counts.
            Document::VgpuDm(_) => (false, false),
        };
        if autostart {
            let request =
                AuthRequest::new(action::MANAGE_PERSISTENT, header, self.no_user_interaction)
                    .detail("verb", "apply-autostart")
                    .detail("file", self.file_name.clone());
            service.authorizer.check(request).await?;
        }
        if sriov {
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
        let desired = match self.document {
            Document::Desired(desired) => desired,
            Document::VgpuDm(config) => engine.resolve_vgpu_dm(&config)?,
        };
        let plan = engine.plan_apply(&desired, self.force)?;
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
