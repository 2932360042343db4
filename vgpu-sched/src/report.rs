//! What a backend tells the user about one instance: what was asked, what the hardware gives,
//! and whether that is enforced.

use serde::Serialize;

use crate::model::InstanceId;
use crate::share::Share;

/// One instance's scheduling as a backend will carry it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceReport {
    /// The instance.
    pub id: InstanceId,
    /// The share the settings ask for (from the [`crate::Plan`]).
    pub requested: Share,
    /// The share the backend gives it.
    pub effective: Share,
    /// Whether the backend holds the instance to `effective` by itself, and `effective` meets
    /// the request.
    pub enforced: bool,
    /// Why not, or how: empty when there is nothing to say.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Shares closer than this (0.5 percentage points) count as meeting the request: vendor
/// granularity (whole ms, 100 µs, powers of two) cannot do better, and users think in percent.
pub const MATCH_TOLERANCE_PPM: u32 = 5_000;

/// Whether `effective` is within [`MATCH_TOLERANCE_PPM`] of `requested`.
pub fn meets(requested: Share, effective: Share) -> bool {
    requested.ppm().abs_diff(effective.ppm()) <= MATCH_TOLERANCE_PPM
}
