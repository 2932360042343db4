//! Intel GVT-g's type description (`kvmgt.c: intel_vgpu_show_description`):
//! `low_gm_size: %dMB\nhigh_gm_size: %dMB\nfence: %d\nresolution: %s\nweight: %d\n`.
//! `mdevctl types` prints the same fields joined by `, `; both forms are accepted.

use super::{excerpt, parse_decimal_u32, Format, ParseError, Resolution, MIB};
use serde::{Deserialize, Serialize};

/// A GVT-g type's resources and fixed scheduling weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GvtDescription {
    /// Low (CPU-mappable aperture) graphics memory in MiB.
    pub low_gm_mib: u32,
    /// High (hidden) graphics memory in MiB.
    pub high_gm_mib: u32,
    /// Fence registers.
    pub fence: u32,
    /// Maximum display resolution.
    pub resolution: Resolution,
    /// Fixed scheduler weight (1..=16; the kernel's types use 2, 4, 8, 16).
    pub weight: u32,
}

/// GVT-g's `VGPU_MAX_WEIGHT`.
pub const GVT_MAX_WEIGHT: u32 = 16;

impl GvtDescription {
    /// Parses the multi-line description, or its `, `-joined form from `mdevctl types`.
    pub fn parse(text: &str) -> Result<GvtDescription, ParseError> {
        let format = Format::GvtDescription;
        if text.trim().is_empty() {
            return Err(ParseError::Empty { format });
        }
        let mut low = None;
        let mut high = None;
        let mut fence = None;
        let mut resolution = None;
        let mut weight = None;
        let multi_line = text.trim_end().contains('\n');
        for (index, line) in text.lines().enumerate() {
            let fields: Vec<&str> = if multi_line {
                vec![line]
            } else {
                line.split(", ").collect()
            };
            for field in fields {
                let field = field.trim();
                if field.is_empty() {
                    continue;
                }
                let Some((key, value)) = field.split_once(':') else {
                    return Err(ParseError::Unexpected {
                        format,
                        line: index + 1,
                        expected: "`key: value`",
                        found: excerpt(field),
                    });
                };
                let value = value.trim();
                let slot: &mut Option<u32> = match key.trim() {
                    "low_gm_size" => &mut low,
                    "high_gm_size" => &mut high,
                    "fence" => &mut fence,
                    "weight" => &mut weight,
                    "resolution" => {
                        if resolution.is_some() {
                            return Err(duplicate(format, "resolution"));
                        }
                        resolution = Some(Resolution::parse(value).ok_or_else(|| {
                            invalid(format, "resolution", value, "a resolution like `1920x1200`")
                        })?);
                        continue;
                    }
                    // Newer kernels may add fields; they do not change what we use.
                    _ => continue,
                };
                let key = key.trim();
                if slot.is_some() {
                    return Err(duplicate(format, key));
                }
                let number = if key.ends_with("_gm_size") {
                    value
                        .strip_suffix("MB")
                        .and_then(|n| parse_decimal_u32(n.trim()))
                        .ok_or_else(|| invalid(format, key, value, "a size like `128MB`"))?
                } else {
                    parse_decimal_u32(value)
                        .ok_or_else(|| invalid(format, key, value, "a decimal number"))?
                };
                *slot = Some(number);
            }
        }
        let weight = weight.ok_or(missing(format, "weight"))?;
        if weight == 0 || weight > GVT_MAX_WEIGHT {
            return Err(invalid(
                format,
                "weight",
                &weight.to_string(),
                "a weight in 1..=16",
            ));
        }
        Ok(GvtDescription {
            low_gm_mib: low.ok_or(missing(format, "low_gm_size"))?,
            high_gm_mib: high.ok_or(missing(format, "high_gm_size"))?,
            fence: fence.ok_or(missing(format, "fence"))?,
            resolution: resolution.ok_or(missing(format, "resolution"))?,
            weight,
        })
    }

    /// Total graphics memory of one vGPU of this type (low + high GM), in bytes.
    pub fn graphics_memory_bytes(&self) -> u64 {
        (u64::from(self.low_gm_mib) + u64::from(self.high_gm_mib)) * MIB
    }
}

fn invalid(format: Format, key: &str, value: &str, expected: &'static str) -> ParseError {
    ParseError::InvalidValue {
        format,
        key: key.to_owned(),
        value: excerpt(value),
        expected,
    }
}

fn duplicate(format: Format, key: &str) -> ParseError {
    ParseError::Duplicate {
        format,
        key: key.to_owned(),
    }
}

fn missing(format: Format, key: &'static str) -> ParseError {
    ParseError::MissingKey { format, key }
}
