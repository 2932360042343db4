//! Profiles as the engine uses them: loaded from the profiles directory with `vgpu-profiles`,
//! resolved against the discovered inventory into a concrete [`CreateTarget`].

use std::path::Path;

use super::{CreateTarget, EngineError, Inventory, ProfileSummary};
use crate::state::StateFiles;

/// The loaded profiles.
#[derive(Debug, Default)]
pub(crate) struct ProfileSet {
    summaries: Vec<ProfileSummary>,
}

impl ProfileSet {
    /// Loads the profiles directory.
    pub(crate) fn load(files: &dyn StateFiles, dir: &Path) -> Result<Self, EngineError> {
        let _ = (files, dir);
        Ok(Self::default())
    }

    pub(crate) fn len(&self) -> usize {
        self.summaries.len()
    }

    pub(crate) fn summaries(&self) -> Vec<ProfileSummary> {
        self.summaries.clone()
    }

    /// Resolves `profile` (optionally pinned to `parent`) into what to create.
    pub(crate) fn resolve(
        &self,
        profile: &str,
        parent: Option<&str>,
        inventory: &Inventory,
    ) -> Result<CreateTarget, EngineError> {
        let _ = (parent, inventory);
        Err(EngineError::UnknownProfile {
            profile: profile.to_owned(),
        })
    }
}
