//! NVIDIA vGPU: the legacy mdev type `description`, vGPU type names, and the SR-IOV per-VF
//! `nvidia/creatable_vgpu_types` table.

use super::{excerpt, parse_decimal_u32, parse_decimal_u64, Format, ParseError, Resolution};
use super::{GIB, MIB};
use serde::{Deserialize, Serialize};
use std::fmt;

/// NVIDIA's type description:
/// `num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880, max_instance=16`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvidiaDescription {
    /// Display heads (`num_heads`).
    pub num_heads: Option<u32>,
    /// Frame-rate limiter in frames per second (`frl_config`).
    pub frl_config: Option<u32>,
    /// Framebuffer in bytes (`framebuffer`, e.g. `1024M`).
    pub framebuffer_bytes: u64,
    /// Maximum display resolution (`max_resolution`).
    pub max_resolution: Option<Resolution>,
    /// Maximum instances of this type per physical GPU (`max_instance`).
    pub max_instance: Option<u32>,
    /// Keys this parser does not interpret, in input order (newer drivers may add some).
    pub other: Vec<(String, String)>,
}

impl NvidiaDescription {
    /// Parses the comma-separated `key=value` description. `framebuffer` is required;
    /// unknown keys are kept in [`NvidiaDescription::other`].
    pub fn parse(text: &str) -> Result<NvidiaDescription, ParseError> {
        let format = Format::NvidiaDescription;
        let text = text.trim();
        if text.is_empty() {
            return Err(ParseError::Empty { format });
        }
        if text.contains('\n') {
            return Err(ParseError::Unexpected {
                format,
                line: 2,
                expected: "a single line of `key=value` pairs",
                found: excerpt(text.lines().nth(1).unwrap_or_default()),
            });
        }
        let mut num_heads = None;
        let mut frl_config = None;
        let mut framebuffer = None;
        let mut max_resolution = None;
        let mut max_instance = None;
        let mut other: Vec<(String, String)> = Vec::new();
        for pair in text.split(',') {
            let pair = pair.trim();
            let Some((key, value)) = pair.split_once('=') else {
                return Err(ParseError::Unexpected {
                    format,
                    line: 1,
                    expected: "`key=value`",
                    found: excerpt(pair),
                });
            };
            let (key, value) = (key.trim(), value.trim());
            let number = |expected| {
                parse_decimal_u32(value).ok_or_else(|| invalid(format, key, value, expected))
            };
            let seen = match key {
                "num_heads" => num_heads.replace(number("a decimal head count")?).is_some(),
                "frl_config" => frl_config.replace(number("frames per second")?).is_some(),
                "max_instance" => max_instance
                    .replace(number("a decimal instance count")?)
                    .is_some(),
                "framebuffer" => framebuffer
                    .replace(
                        parse_size(value)
                            .ok_or_else(|| invalid(format, key, value, "a size such as `1024M`"))?,
                    )
                    .is_some(),
                "max_resolution" => max_resolution
                    .replace(Resolution::parse(value).ok_or_else(|| {
                        invalid(format, key, value, "a resolution such as `5120x2880`")
                    })?)
                    .is_some(),
                _ => {
                    if key.is_empty() {
                        return Err(invalid(format, key, value, "a non-empty key"));
                    }
                    let seen = other.iter().any(|(k, _)| k == key);
                    other.push((key.to_owned(), value.to_owned()));
                    seen
                }
            };
            if seen {
                return Err(ParseError::Duplicate {
                    format,
                    key: key.to_owned(),
                });
            }
        }
        Ok(NvidiaDescription {
            num_heads,
            frl_config,
            framebuffer_bytes: framebuffer.ok_or(ParseError::MissingKey {
                format,
                key: "framebuffer",
            })?,
            max_resolution,
            max_instance,
            other,
        })
    }
}

/// Parses a size with an optional binary unit: `1024M`, `16G`, `512K`, or plain bytes.
fn parse_size(text: &str) -> Option<u64> {
    let (digits, multiplier) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1024),
        b'M' | b'm' => (&text[..text.len() - 1], MIB),
        b'G' | b'g' => (&text[..text.len() - 1], GIB),
        b'T' | b't' => (&text[..text.len() - 1], GIB * 1024),
        _ => (text, 1),
    };
    parse_decimal_u64(digits)?.checked_mul(multiplier)
}

fn invalid(format: Format, key: &str, value: &str, expected: &'static str) -> ParseError {
    ParseError::InvalidValue {
        format,
        key: key.to_owned(),
        value: excerpt(value),
        expected,
    }
}

/// The NVIDIA vGPU series, the letter after the framebuffer size in a type name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NvidiaSeries {
    /// `Q`: RTX Virtual Workstation (vWS).
    Q,
    /// `C`: Virtual Compute Server / AI Enterprise.
    C,
    /// `B`: Virtual PC (vPC).
    B,
    /// `A`: Virtual Applications (vApps).
    A,
}

impl NvidiaSeries {
    fn from_char(c: char) -> Option<NvidiaSeries> {
        match c {
            'Q' => Some(NvidiaSeries::Q),
            'C' => Some(NvidiaSeries::C),
            'B' => Some(NvidiaSeries::B),
            'A' => Some(NvidiaSeries::A),
            _ => None,
        }
    }

    /// The letter as it appears in type names.
    pub fn letter(self) -> char {
        match self {
            NvidiaSeries::Q => 'Q',
            NvidiaSeries::C => 'C',
            NvidiaSeries::B => 'B',
            NvidiaSeries::A => 'A',
        }
    }
}

/// The attribute suffix of a MIG-backed type name (`A100-1-5CME`, `DC-1-24CGFX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MigMediaAttr {
    /// `ME`: the GPU instance includes the media extensions.
    Me,
    /// `NOME`: explicitly without media extensions.
    NoMe,
    /// `MEALL`: all media engines.
    MeAll,
    /// `GFX`: graphics-capable GPU instance (Blackwell).
    Gfx,
}

impl MigMediaAttr {
    /// The suffix as it appears in type names.
    pub fn suffix(self) -> &'static str {
        match self {
            MigMediaAttr::Me => "ME",
            MigMediaAttr::NoMe => "NOME",
            MigMediaAttr::MeAll => "MEALL",
            MigMediaAttr::Gfx => "GFX",
        }
    }
}

/// A parsed NVIDIA vGPU type name.
///
/// Time-sliced: `<board>-<GB><series>` (`T4-2Q`, `H200-35C`; `0` GB means 512 MiB).
/// MIG-backed: `<board>-<GPU slices>-<GB><series>[attr]` (`H200X-1-18C`, `A100-1-5CME`).
/// Older and unlocked drivers also show a digit after the series (`P100-2B4`) or no series
/// at all (`RTX2070-1`); both are accepted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NvidiaTypeName {
    /// Everything before the type token, e.g. `GRID`, `NVIDIA`,
    /// `NVIDIA RTX Pro 6000 Blackwell`; `None` when the name is just the token.
    pub prefix: Option<String>,
    /// The board, e.g. `T4`, `H200X`, `A100D`, `DC`.
    pub board: String,
    /// GPU (compute) slices of the MIG GPU instance; `None` for time-sliced types.
    pub gpu_slices: Option<u8>,
    /// The framebuffer figure of the name in GB (`0` means 512 MiB).
    pub framebuffer_gb: u32,
    /// The series letter, if any.
    pub series: Option<NvidiaSeries>,
    /// The digit(s) after the series in older names (`2B4` → 4).
    pub series_variant: Option<u32>,
    /// The MIG attribute suffix, if any.
    pub attr: Option<MigMediaAttr>,
}

impl NvidiaTypeName {
    /// Parses a full type name (`GRID T4-2Q`, `NVIDIA H200X-1-18C`) or a bare token
    /// (`H200-35C`). The last space-separated token is the type (as NVIDIA's own tools do).
    pub fn parse(text: &str) -> Result<NvidiaTypeName, ParseError> {
        let format = Format::NvidiaTypeName;
        let text = text.trim();
        if text.is_empty() {
            return Err(ParseError::Empty { format });
        }
        let (prefix, token) = match text.rsplit_once(char::is_whitespace) {
            Some((prefix, token)) => (Some(prefix.trim_end().to_owned()), token),
            None => (None, text),
        };
        let fail = |expected| ParseError::Unexpected {
            format,
            line: 1,
            expected,
            found: excerpt(token),
        };
        let parts: Vec<&str> = token.split('-').collect();
        let (board, slices, sized) = match parts.as_slice() {
            [board, sized] => (*board, None, *sized),
            [board, slices, sized] => (*board, Some(*slices), *sized),
            _ => {
                return Err(fail(
                    "`<board>-<GB><series>` or `<board>-<slices>-<GB><series>`",
                ))
            }
        };
        if board.is_empty() || !board.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(fail("an alphanumeric board name before the first `-`"));
        }
        let gpu_slices = match slices {
            None => None,
            Some(s) => Some(
                parse_decimal_u32(s)
                    .and_then(|n| u8::try_from(n).ok())
                    .filter(|n| (1..=8).contains(n))
                    .ok_or_else(|| invalid(format, "GPU slices", s, "a slice count in 1..=8"))?,
            ),
        };
        let digits_end = sized
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(sized.len());
        let framebuffer_gb = parse_decimal_u32(&sized[..digits_end]).ok_or_else(|| {
            invalid(
                format,
                "framebuffer",
                sized,
                "a GB figure such as `2` in `2Q`",
            )
        })?;
        let rest = &sized[digits_end..];
        let mut chars = rest.chars();
        let series =
            match chars.next() {
                None => None,
                Some(c) => Some(NvidiaSeries::from_char(c).ok_or_else(|| {
                    invalid(format, "series", rest, "a series letter Q, C, B or A")
                })?),
            };
        let after = chars.as_str();
        let (series_variant, attr) = if after.is_empty() {
            (None, None)
        } else if let Some(variant) = parse_decimal_u32(after) {
            (Some(variant), None)
        } else {
            let attr = match after {
                "ME" => MigMediaAttr::Me,
                "NOME" => MigMediaAttr::NoMe,
                "MEALL" => MigMediaAttr::MeAll,
                "GFX" => MigMediaAttr::Gfx,
                _ => {
                    return Err(invalid(
                        format,
                        "suffix",
                        after,
                        "a digit or ME, NOME, MEALL, GFX",
                    ))
                }
            };
            (None, Some(attr))
        };
        Ok(NvidiaTypeName {
            prefix,
            board: board.to_owned(),
            gpu_slices,
            framebuffer_gb,
            series,
            series_variant,
            attr,
        })
    }

    /// Whether this type runs on a MIG GPU instance (spatial isolation).
    pub fn is_mig_backed(&self) -> bool {
        self.gpu_slices.is_some()
    }

    /// The framebuffer the name promises, in bytes (`0` GB is 512 MiB). Descriptions,
    /// when present, are more exact.
    pub fn framebuffer_bytes(&self) -> u64 {
        if self.framebuffer_gb == 0 {
            512 * MIB
        } else {
            u64::from(self.framebuffer_gb) * GIB
        }
    }

    /// The type token without prefix, e.g. `H200X-1-18C`.
    pub fn token(&self) -> String {
        let mut out = self.board.clone();
        if let Some(slices) = self.gpu_slices {
            out.push_str(&format!("-{slices}"));
        }
        out.push_str(&format!("-{}", self.framebuffer_gb));
        if let Some(series) = self.series {
            out.push(series.letter());
        }
        if let Some(variant) = self.series_variant {
            out.push_str(&variant.to_string());
        }
        if let Some(attr) = self.attr {
            out.push_str(attr.suffix());
        }
        out
    }
}

impl fmt::Display for NvidiaTypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(prefix) = &self.prefix {
            write!(f, "{prefix} ")?;
        }
        f.write_str(&self.token())
    }
}

/// One line of `nvidia/creatable_vgpu_types`: a numeric type id and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CreatableVgpuType {
    /// The type id to write to `current_vgpu_type` (unique per card model).
    pub id: u32,
    /// The type name, e.g. `NVIDIA H200X-1-18C`.
    pub name: String,
}

impl CreatableVgpuType {
    /// Parses the whole file: the `ID    : vGPU Name` header, then one `<id>  : <name>`
    /// line per type. A header with no lines means the VF can host nothing more.
    pub fn parse_list(text: &str) -> Result<Vec<CreatableVgpuType>, ParseError> {
        let format = Format::CreatableVgpuTypes;
        if text.trim().is_empty() {
            return Err(ParseError::Empty { format });
        }
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty());
        if let Some((index, header)) = lines.next() {
            let is_header = header
                .split_once(':')
                .is_some_and(|(id, name)| id.trim() == "ID" && name.trim() == "vGPU Name");
            if !is_header {
                return Err(ParseError::Unexpected {
                    format,
                    line: index + 1,
                    expected: "the header `ID    : vGPU Name`",
                    found: excerpt(header),
                });
            }
        }
        let mut types: Vec<CreatableVgpuType> = Vec::new();
        for (index, line) in lines {
            let Some((id, name)) = line.split_once(':') else {
                return Err(ParseError::Unexpected {
                    format,
                    line: index + 1,
                    expected: "`<id> : <vGPU name>`",
                    found: excerpt(line),
                });
            };
            let (id_text, name) = (id.trim(), name.trim());
            let id = parse_decimal_u32(id_text).ok_or_else(|| ParseError::Unexpected {
                format,
                line: index + 1,
                expected: "a decimal type id before `:`",
                found: excerpt(line),
            })?;
            if name.is_empty() {
                return Err(ParseError::Unexpected {
                    format,
                    line: index + 1,
                    expected: "a vGPU name after `:`",
                    found: excerpt(line),
                });
            }
            if types.iter().any(|t| t.id == id) {
                return Err(ParseError::Duplicate {
                    format,
                    key: id_text.to_owned(),
                });
            }
            types.push(CreatableVgpuType {
                id,
                name: name.to_owned(),
            });
        }
        Ok(types)
    }
}
