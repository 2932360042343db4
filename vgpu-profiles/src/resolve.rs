//! Resolution: which of one parent's offered types a profile gets.
//!
//! A type fits when it passes, in this order: vendor, isolation, device match (whole
//! functions), pins, framebuffer, display, free capacity. Among fitting types the one with
//! the smallest framebuffer wins (then the lowest resolution, then the id), so a profile
//! never takes more of the GPU than it asked for. When none fits, the error says how far
//! the best type got and names the closest one.

use crate::profile::Profile;
use crate::vendor::{OfferedType, Resolution, GIB, MIB};
use std::cmp::Ordering;
use std::fmt;

/// Why one offered type does not fit a profile, in checking order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TypeRejection {
    /// Another vendor's type.
    Vendor,
    /// Another isolation than the profile asks for.
    Isolation,
    /// A whole function that the profile's device match excludes (or a type where the
    /// profile wants a whole function).
    Device,
    /// A pin does not match; names the pin (`type_id=nvidia-256`).
    Pin(String),
    /// The framebuffer is smaller than asked, or unknown when the profile asks for one.
    Framebuffer {
        /// The type's framebuffer, when known.
        offered: Option<u64>,
    },
    /// Too few display heads, or unknown when the profile asks for some.
    Heads {
        /// The type's heads, when known.
        offered: Option<u32>,
    },
    /// Too low a resolution, or unknown when the profile asks for one.
    Resolution {
        /// The type's maximum resolution, when known.
        offered: Option<Resolution>,
    },
    /// No free instance.
    Full,
    /// NVIDIA time-sliced types on one GPU must all be the same type unless mixed mode is
    /// on; names the type in use.
    OtherTypeInUse(String),
}

impl TypeRejection {
    /// How far a type got through the checks (higher is closer to fitting).
    fn stage(&self) -> u8 {
        match self {
            TypeRejection::Vendor => 0,
            TypeRejection::Isolation => 1,
            TypeRejection::Device => 2,
            TypeRejection::Pin(_) => 3,
            TypeRejection::Framebuffer { .. } => 4,
            TypeRejection::Heads { .. } | TypeRejection::Resolution { .. } => 5,
            TypeRejection::Full | TypeRejection::OtherTypeInUse(_) => 6,
        }
    }
}

impl fmt::Display for TypeRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeRejection::Vendor => f.write_str("another vendor"),
            TypeRejection::Isolation => f.write_str("another isolation"),
            TypeRejection::Device => f.write_str("device does not match"),
            TypeRejection::Pin(pin) => write!(f, "pin {pin} does not match"),
            TypeRejection::Framebuffer { offered: Some(b) } => {
                write!(f, "framebuffer {} too small", human_bytes(*b))
            }
            TypeRejection::Framebuffer { offered: None } => f.write_str("framebuffer unknown"),
            TypeRejection::Heads { offered: Some(h) } => write!(f, "only {h} display heads"),
            TypeRejection::Heads { offered: None } => f.write_str("display heads unknown"),
            TypeRejection::Resolution { offered: Some(r) } => {
                write!(f, "resolution only {r}")
            }
            TypeRejection::Resolution { offered: None } => f.write_str("resolution unknown"),
            TypeRejection::Full => f.write_str("no free instance"),
            TypeRejection::OtherTypeInUse(other) => write!(
                f,
                "GPU already runs {other} (one time-sliced type per GPU without mixed mode)"
            ),
        }
    }
}

/// Formats bytes for people: `20 GiB`, `512 MiB`, `1.5 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    if bytes >= GIB {
        if bytes % GIB == 0 {
            format!("{} GiB", bytes / GIB)
        } else {
            format!("{:.1} GiB", bytes as f64 / GIB as f64)
        }
    } else if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// No offered type of a parent fits a profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile `{profile}` does not fit on {parent}: {reason}")]
pub struct NoFit {
    /// The profile name.
    pub profile: String,
    /// The parent (PCI address or device name).
    pub parent: String,
    /// The closest miss, in words ("needs 20 GiB; largest free type on ... is H200-18C").
    pub reason: String,
    /// Every type with why it was rejected (type id, rejection), in offered order.
    pub rejected: Vec<(String, TypeRejection)>,
}

/// Checks one type against a profile, capacity included.
pub fn check_type(profile: &Profile, offered: &OfferedType) -> Result<(), TypeRejection> {
    check_type_ignoring_capacity(profile, offered)?;
    if offered.available_instances == 0 {
        return Err(TypeRejection::Full);
    }
    Ok(())
}

/// Checks one type against a profile, without looking at free capacity.
pub fn check_type_ignoring_capacity(
    profile: &Profile,
    offered: &OfferedType,
) -> Result<(), TypeRejection> {
    if profile.vendor.is_some_and(|v| v != offered.vendor) {
        return Err(TypeRejection::Vendor);
    }
    if profile.isolation.is_some_and(|i| i != offered.isolation) {
        return Err(TypeRejection::Isolation);
    }
    if !profile.device.is_empty() {
        let matches = offered.pci.as_ref().is_some_and(|pci| {
            profile
                .device
                .matches(pci.vendor_id, pci.device_id, pci.class_code, &pci.address)
        });
        if !matches {
            return Err(TypeRejection::Device);
        }
    }
    check_pins(profile, offered)?;
    let wanted = profile.framebuffer_bytes();
    if wanted > 0 && offered.framebuffer_bytes.is_none_or(|b| b < wanted) {
        return Err(TypeRejection::Framebuffer {
            offered: offered.framebuffer_bytes,
        });
    }
    if let Some(heads) = profile.display.heads {
        if offered.display.heads.is_none_or(|h| h < heads) {
            return Err(TypeRejection::Heads {
                offered: offered.display.heads,
            });
        }
    }
    if let Some(resolution) = profile.display.max_resolution {
        if offered
            .display
            .max_resolution
            .is_none_or(|r| !r.covers(&resolution.0))
        {
            return Err(TypeRejection::Resolution {
                offered: offered.display.max_resolution,
            });
        }
    }
    Ok(())
}

fn check_pins(profile: &Profile, offered: &OfferedType) -> Result<(), TypeRejection> {
    let pins = &profile.pin;
    if pins.is_empty() {
        return Ok(());
    }
    // The full name and its last token (`NVIDIA H200X-1-18C`, `H200X-1-18C`): the token
    // is what NVIDIA's own tools call the type.
    let last_token = offered
        .name
        .rsplit(char::is_whitespace)
        .next()
        .unwrap_or(&offered.name);
    let names = [offered.name.as_str(), last_token];
    if let Some(id) = &pins.type_id {
        let numeric = id.parse::<u32>().ok();
        let matches = *id == offered.id || (numeric.is_some() && numeric == offered.vendor_type_id);
        if !matches {
            return Err(TypeRejection::Pin(format!("type_id={id}")));
        }
    }
    if let Some(name) = &pins.type_name {
        let matches = names.iter().any(|n| n.eq_ignore_ascii_case(name));
        if !matches {
            return Err(TypeRejection::Pin(format!("type_name={name}")));
        }
    }
    if let Some(pattern) = &pins.name_pattern {
        let matches = names.iter().any(|n| pattern.matches(n));
        if !matches {
            return Err(TypeRejection::Pin(format!(
                "name_pattern={}",
                pattern.as_str()
            )));
        }
    }
    Ok(())
}

/// The preference order among fitting types: smallest framebuffer, then lowest
/// resolution, then id.
pub fn smaller_first(a: &OfferedType, b: &OfferedType) -> Ordering {
    let area = |t: &OfferedType| {
        t.display
            .max_resolution
            .map_or(0, |r| u64::from(r.width) * u64::from(r.height))
    };
    a.framebuffer_bytes
        .unwrap_or(0)
        .cmp(&b.framebuffer_bytes.unwrap_or(0))
        .then_with(|| area(a).cmp(&area(b)))
        .then_with(|| a.id.cmp(&b.id))
}

/// Chooses the type of `offered` (one parent's types, named `parent` in messages) for
/// `profile`: the smallest fitting type with a free instance.
pub fn resolve<'a>(
    profile: &Profile,
    parent: &str,
    offered: &'a [OfferedType],
) -> Result<&'a OfferedType, NoFit> {
    resolve_with(profile, parent, offered, |t| check_type(profile, t))
}

/// [`resolve`] with a custom check (placement adds the NVIDIA one-type rule).
pub(crate) fn resolve_with<'a>(
    profile: &Profile,
    parent: &str,
    offered: &'a [OfferedType],
    check: impl Fn(&OfferedType) -> Result<(), TypeRejection>,
) -> Result<&'a OfferedType, NoFit> {
    let mut fitting: Vec<&OfferedType> = Vec::new();
    let mut rejected = Vec::new();
    for t in offered {
        match check(t) {
            Ok(()) => fitting.push(t),
            Err(why) => rejected.push((t.id.clone(), why)),
        }
    }
    if let Some(best) = fitting.into_iter().min_by(|a, b| smaller_first(a, b)) {
        return Ok(best);
    }
    let reason = explain(profile, parent, offered, &rejected);
    Err(NoFit {
        profile: profile.name.to_string(),
        parent: parent.to_owned(),
        reason,
        rejected,
    })
}

/// Words for the closest miss.
fn explain(
    profile: &Profile,
    parent: &str,
    offered: &[OfferedType],
    rejected: &[(String, TypeRejection)],
) -> String {
    if offered.is_empty() {
        return format!("{parent} offers no types");
    }
    let best_stage = rejected.iter().map(|(_, r)| r.stage()).max().unwrap_or(0);
    let at_stage: Vec<(&OfferedType, &TypeRejection)> = rejected
        .iter()
        .filter(|(_, r)| r.stage() == best_stage)
        .filter_map(|(id, r)| offered.iter().find(|t| t.id == *id).map(|t| (t, r)))
        .collect();
    let Some((first, first_reason)) = at_stage.first().copied() else {
        return format!("no type on {parent} fits");
    };
    match first_reason {
        TypeRejection::Vendor => {
            let wanted = profile.vendor.map_or("?", |v| v.as_str());
            format!("{parent} offers no {wanted} types")
        }
        TypeRejection::Isolation => {
            let wanted = profile.isolation.map_or("?", |i| i.as_str());
            let mut have: Vec<&str> = at_stage.iter().map(|(t, _)| t.isolation.as_str()).collect();
            have.sort_unstable();
            have.dedup();
            format!(
                "{parent} offers no {wanted} types (only {})",
                have.join(", ")
            )
        }
        TypeRejection::Device => format!("no whole function on {parent} matches the device match"),
        TypeRejection::Pin(pin) => format!("no type on {parent} matches pin {pin}"),
        TypeRejection::Framebuffer { .. } => {
            let wanted = human_bytes(profile.framebuffer_bytes());
            // The largest type; on a tie the one listed first.
            let largest = |free_only: bool| {
                at_stage
                    .iter()
                    .filter(|(t, _)| !free_only || t.available_instances > 0)
                    .filter_map(|(t, _)| t.framebuffer_bytes.map(|b| (b, *t)))
                    .fold(None, |best: Option<(u64, &OfferedType)>, candidate| match best {
                        Some(b) if b.0 >= candidate.0 => Some(b),
                        _ => Some(candidate),
                    })
            };
            match (largest(true), largest(false)) {
                (Some((bytes, t)), _) => format!(
                    "needs {wanted}; largest free type on {parent} is {} ({})",
                    t.short_name(),
                    human_bytes(bytes)
                ),
                (None, Some((bytes, t))) => format!(
                    "needs {wanted}; largest type on {parent} is {} ({}) and none is free",
                    t.short_name(),
                    human_bytes(bytes)
                ),
                (None, None) => format!(
                    "needs {wanted}; no type on {parent} states its framebuffer (closest: {})",
                    first.short_name()
                ),
            }
        }
        TypeRejection::Heads { .. } | TypeRejection::Resolution { .. } => format!(
            "no type on {parent} meets the display request (closest: {}: {first_reason})",
            first.short_name()
        ),
        TypeRejection::Full => {
            let names: Vec<String> = at_stage.iter().map(|(t, _)| t.short_name()).collect();
            format!(
                "every matching type on {parent} is full ({})",
                names.join(", ")
            )
        }
        TypeRejection::OtherTypeInUse(other) => format!(
            "{parent} already runs {other}; {} needs another time-sliced type and mixed mode is off",
            first.short_name()
        ),
    }
}
