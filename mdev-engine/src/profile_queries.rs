//! The engine's profiles: reloading the directory, listing them, and how many of each still fit
//! on the host.

use super::create::describe_target;
use super::{
    profiles, Engine, EngineError, EngineEvent, PlacementRequest, ProfileFit, ProfileSummary,
};

impl Engine {
    /// Re-reads the profiles directory. Returns how many profiles are loaded.
    pub fn reload_profiles(&self) -> Result<usize, EngineError> {
        let loaded =
            profiles::ProfileSet::load(self.files.as_ref(), &self.config.profiles_dir, true)?;
        let count = loaded.len();
        *self
            .profiles
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = loaded;
        self.emit(EngineEvent::ProfilesChanged);
        Ok(count)
    }

    /// The loaded profiles, sorted by name.
    pub fn profiles(&self) -> Vec<ProfileSummary> {
        self.profiles
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .summaries()
    }

    /// Every profile, sorted by name, with whether one instance of it would be placed on the
    /// host as it is now (default placement, free capacity counted) and where, or why not.
    /// Nothing is created or reserved.
    pub fn profile_fit(&self) -> Result<Vec<ProfileFit>, EngineError> {
        let inventory = self.inventory()?;
        let mut fits: Vec<ProfileFit> = self
            .profiles()
            .into_iter()
            .map(|summary| {
                match self.resolve_profile(
                    &summary.name,
                    None,
                    PlacementRequest::default(),
                    &inventory,
                ) {
                    Ok(resolved) => ProfileFit {
                        name: summary.name,
                        fits: true,
                        detail: describe_target(&resolved.target),
                    },
                    Err(error) => ProfileFit {
                        name: summary.name,
                        fits: false,
                        detail: error.to_string(),
                    },
                }
            })
            .collect();
        fits.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(fits)
    }
}
