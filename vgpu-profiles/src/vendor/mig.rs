//! `nvidia-smi mig` output: `-lgip` (GPU instance profiles), `-lgipp` (their legal
//! placements on the GPU's memory slices) and `-lgi` (existing GPU instances).
//!
//! Tables are read by whitespace-separated tokens, not columns: the column widths differ
//! between driver releases (79- and 81-character layouts) and shift with wide values.
//! Lines that are not part of the format (shell prompts, Markdown fences, the other
//! command's output in the same capture) are skipped.

use super::{excerpt, parse_decimal_u32, parse_decimal_u64, Format, ParseError};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A MIG GPU instance profile name without the `MIG ` prefix: `1g.18gb`, `1g.18gb+me`,
/// `1g.24gb+me.all`, `1g.24gb+gfx`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MigProfileName {
    /// Compute (GPU) slices, the `1` of `1g`.
    pub gpu_slices: u8,
    /// The memory label in GB, the `18` of `18gb` (a marketing figure; the table's memory
    /// column is exact).
    pub memory_gb: u32,
    /// Attributes after `+`, e.g. `me`, `me.all`, `gfx`.
    pub attrs: Vec<String>,
}

impl MigProfileName {
    /// Parses `1g.18gb+me`; `None` when the text has another shape.
    pub fn parse(text: &str) -> Option<MigProfileName> {
        let mut parts = text.split('+');
        let base = parts.next()?;
        let (slices, memory) = base.split_once('.')?;
        let gpu_slices = parse_decimal_u32(slices.strip_suffix('g')?)
            .and_then(|n| u8::try_from(n).ok())
            .filter(|&n| n > 0)?;
        let memory_gb = parse_decimal_u32(memory.strip_suffix("gb")?)?;
        let attrs: Vec<String> = parts.map(str::to_owned).collect();
        let attrs_valid = attrs.iter().all(|a| {
            !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.')
        });
        attrs_valid.then_some(MigProfileName {
            gpu_slices,
            memory_gb,
            attrs,
        })
    }
}

impl fmt::Display for MigProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}g.{}gb", self.gpu_slices, self.memory_gb)?;
        for attr in &self.attrs {
            write!(f, "+{attr}")?;
        }
        Ok(())
    }
}

/// One row of `nvidia-smi mig -lgip`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigGpuInstanceProfile {
    /// GPU index.
    pub gpu: u32,
    /// Profile name (`1g.18gb+me`).
    pub name: MigProfileName,
    /// Profile id (what `nvidia-smi mig -cgi` takes).
    pub id: u32,
    /// Instances of this profile still creatable.
    pub instances_free: u32,
    /// Instances of this profile on an empty GPU.
    pub instances_total: u32,
    /// Memory in MiB (the table's GiB figure, rounded to the nearest MiB).
    pub memory_mib: u64,
    /// Peer-to-peer support.
    pub p2p: bool,
    /// Streaming multiprocessors.
    pub sm: u32,
    /// Video decoders.
    pub dec: u32,
    /// Video encoders.
    pub enc: u32,
    /// Copy engines.
    pub ce: u32,
    /// JPEG decoders.
    pub jpeg: u32,
    /// Optical flow accelerators.
    pub ofa: u32,
}

/// One line of `nvidia-smi mig -lgipp`: where a profile may start, and how many memory
/// slices it spans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigPlacements {
    /// GPU index.
    pub gpu: u32,
    /// Profile id.
    pub profile_id: u32,
    /// Legal start slices, in the order printed.
    pub starts: Vec<u8>,
    /// Memory slices an instance of the profile spans.
    pub size: u8,
}

/// One row of `nvidia-smi mig -lgi`: an existing GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigGpuInstance {
    /// GPU index.
    pub gpu: u32,
    /// Profile name.
    pub name: MigProfileName,
    /// Profile id.
    pub profile_id: u32,
    /// GPU instance id.
    pub instance_id: u32,
    /// First memory slice.
    pub start: u8,
    /// Memory slices spanned.
    pub size: u8,
}

/// A GPU's MIG profiles with their placements: `-lgip` and `-lgipp` together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigProfileTable {
    /// Profiles, in the order printed.
    pub profiles: Vec<MigGpuInstanceProfile>,
    /// Placements, in the order printed.
    pub placements: Vec<MigPlacements>,
}

impl MigProfileTable {
    /// Parses `-lgip` and `-lgipp` output (they may also be the same text: each parser
    /// skips the other's lines). Every placement must name a profile of the table.
    pub fn parse(lgip: &str, lgipp: &str) -> Result<MigProfileTable, ParseError> {
        let profiles = MigGpuInstanceProfile::parse_table(lgip)?;
        let placements = MigPlacements::parse_list(lgipp)?;
        for placement in &placements {
            let known = profiles
                .iter()
                .any(|p| p.gpu == placement.gpu && p.id == placement.profile_id);
            if !known {
                return Err(ParseError::InvalidValue {
                    format: Format::MigPlacements,
                    key: "Profile ID".into(),
                    value: format!("GPU {} profile {}", placement.gpu, placement.profile_id),
                    expected: "a profile listed by `nvidia-smi mig -lgip`",
                });
            }
        }
        Ok(MigProfileTable {
            profiles,
            placements,
        })
    }

    /// The placements of one profile on one GPU.
    pub fn placements_of(&self, gpu: u32, profile_id: u32) -> Option<&MigPlacements> {
        self.placements
            .iter()
            .find(|p| p.gpu == gpu && p.profile_id == profile_id)
    }

    /// Memory slices of one GPU: the end of the furthest placement.
    pub fn memory_slices(&self, gpu: u32) -> u8 {
        self.placements
            .iter()
            .filter(|p| p.gpu == gpu)
            .flat_map(|p| p.starts.iter().map(move |s| s.saturating_add(p.size)))
            .max()
            .unwrap_or(0)
    }
}

/// What a table line is, after stripping its `|` frame.
enum TableLine<'a> {
    /// Borders, headers, fences, prompts: nothing to parse.
    Skip,
    /// A data line's whitespace-separated tokens.
    Data(Vec<&'a str>),
}

/// Classifies one line of an `nvidia-smi mig` box table.
fn table_line(line: &str) -> TableLine<'_> {
    let line = line.trim();
    let Some(inner) = line.strip_prefix('|') else {
        return TableLine::Skip;
    };
    let inner = inner.strip_suffix('|').unwrap_or(inner).trim();
    let is_header = inner.is_empty()
        || inner.chars().all(|c| c == '=')
        || inner.ends_with(':')
        || inner.starts_with("GPU ")
        || inner.contains("Free/Total")
        || inner.contains("Start:Size")
        || inner == "ID";
    if is_header {
        TableLine::Skip
    } else {
        TableLine::Data(inner.split_whitespace().collect())
    }
}

/// Rejects text that is another `nvidia-smi mig` listing than the one asked for. A
/// `-lgipp` parse accepts a capture that also holds the `-lgip` table.
fn reject_other_tables(text: &str, format: Format) -> Result<(), ParseError> {
    let markers: [(&str, Option<Format>, &'static str); 3] = [
        (
            "GPU instance profiles:",
            Some(Format::MigProfiles),
            "`nvidia-smi mig -lgip` output (GPU instance profiles)",
        ),
        (
            "GPU instances:",
            Some(Format::MigInstances),
            "`nvidia-smi mig -lgi` output (GPU instances)",
        ),
        (
            "Compute instances:",
            None,
            "`nvidia-smi mig -lci` output (compute instances)",
        ),
    ];
    for (marker, owner, actual) in markers {
        let tolerated = owner == Some(format)
            || (format == Format::MigPlacements && owner == Some(Format::MigProfiles));
        if !tolerated && text.contains(marker) {
            return Err(ParseError::WrongFormat { format, actual });
        }
    }
    Ok(())
}

fn unexpected(format: Format, line: usize, expected: &'static str, found: &str) -> ParseError {
    ParseError::Unexpected {
        format,
        line,
        expected,
        found: excerpt(found),
    }
}

fn number(format: Format, key: &str, token: &str) -> Result<u32, ParseError> {
    parse_decimal_u32(token).ok_or_else(|| ParseError::InvalidValue {
        format,
        key: key.to_owned(),
        value: excerpt(token),
        expected: "a decimal number",
    })
}

fn slice(format: Format, key: &str, token: &str) -> Result<u8, ParseError> {
    parse_decimal_u32(token)
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| ParseError::InvalidValue {
            format,
            key: key.to_owned(),
            value: excerpt(token),
            expected: "a memory slice index (0..=255)",
        })
}

fn profile_name(format: Format, token: &str) -> Result<MigProfileName, ParseError> {
    MigProfileName::parse(token).ok_or_else(|| ParseError::InvalidValue {
        format,
        key: "Name".into(),
        value: excerpt(token),
        expected: "a profile name such as `MIG 1g.18gb+me`",
    })
}

/// Parses a GiB figure with decimals (`16.00`, `10.62`, `139.75`) into MiB, rounded.
fn gib_to_mib(token: &str) -> Option<u64> {
    let (whole, fraction) = token.split_once('.').unwrap_or((token, ""));
    if fraction.len() > 6 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scale = 10u64.pow(fraction.len() as u32);
    let fraction_value = if fraction.is_empty() {
        0
    } else {
        parse_decimal_u64(fraction)?
    };
    let scaled = parse_decimal_u64(whole)?
        .checked_mul(scale)?
        .checked_add(fraction_value)?;
    let mib_times_scale = scaled.checked_mul(1024)?;
    Some((mib_times_scale + scale / 2) / scale)
}

impl MigGpuInstanceProfile {
    /// Parses the `nvidia-smi mig -lgip` table. Each profile is two lines (SM/DEC/ENC, then
    /// CE/JPEG/OFA). Several GPUs' rows may appear; a table without its header (an
    /// excerpt) is accepted.
    pub fn parse_table(text: &str) -> Result<Vec<MigGpuInstanceProfile>, ParseError> {
        let format = Format::MigProfiles;
        if text.trim().is_empty() {
            return Err(ParseError::Empty { format });
        }
        reject_other_tables(text, format)?;
        let mut profiles = Vec::new();
        let mut pending: Option<(usize, MigGpuInstanceProfile)> = None;
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            if line.trim_start().starts_with('+') {
                if let Some((first_line, profile)) = &pending {
                    return Err(unexpected(
                        format,
                        *first_line + 1,
                        "the CE/JPEG/OFA line of the profile row",
                        &format!("a border after `MIG {}`", profile.name),
                    ));
                }
                continue;
            }
            let TableLine::Data(tokens) = table_line(line) else {
                continue;
            };
            match pending.take() {
                None => {
                    let profile = Self::first_row(format, line_no, line, &tokens)?;
                    pending = Some((line_no, profile));
                }
                Some((_, mut profile)) => {
                    let [ce, jpeg, ofa] = tokens.as_slice() else {
                        return Err(unexpected(
                            format,
                            line_no,
                            "three numbers (CE, JPEG, OFA)",
                            line.trim(),
                        ));
                    };
                    profile.ce = number(format, "CE", ce)?;
                    profile.jpeg = number(format, "JPEG", jpeg)?;
                    profile.ofa = number(format, "OFA", ofa)?;
                    profiles.push(profile);
                }
            }
        }
        if let Some((line, profile)) = pending {
            return Err(unexpected(
                format,
                line + 1,
                "the CE/JPEG/OFA line of the profile row",
                &format!("end of input after `MIG {}`", profile.name),
            ));
        }
        if profiles.is_empty() {
            let actual = if text.contains("Placement") {
                "`nvidia-smi mig -lgipp` output (placements)"
            } else {
                "no GPU instance profile rows"
            };
            return Err(ParseError::WrongFormat { format, actual });
        }
        Ok(profiles)
    }

    fn first_row(
        format: Format,
        line_no: usize,
        line: &str,
        tokens: &[&str],
    ) -> Result<MigGpuInstanceProfile, ParseError> {
        let [gpu, "MIG", name, id, instances, memory, p2p, sm, dec, enc] = tokens else {
            return Err(unexpected(
                format,
                line_no,
                "a profile row `GPU MIG <name> <ID> <free>/<total> <GiB> <P2P> <SM> <DEC> <ENC>`",
                line.trim(),
            ));
        };
        let (free, total) = instances
            .split_once('/')
            .ok_or_else(|| ParseError::InvalidValue {
                format,
                key: "Instances".into(),
                value: excerpt(instances),
                expected: "`free/total`",
            })?;
        let memory_mib = gib_to_mib(memory).ok_or_else(|| ParseError::InvalidValue {
            format,
            key: "Memory".into(),
            value: excerpt(memory),
            expected: "GiB such as `16.00`",
        })?;
        let p2p = match *p2p {
            "Yes" => true,
            "No" => false,
            other => {
                return Err(ParseError::InvalidValue {
                    format,
                    key: "P2P".into(),
                    value: excerpt(other),
                    expected: "`Yes` or `No`",
                })
            }
        };
        let instances_free = number(format, "Instances free", free)?;
        let instances_total = number(format, "Instances total", total)?;
        if instances_free > instances_total {
            return Err(ParseError::InvalidValue {
                format,
                key: "Instances".into(),
                value: excerpt(instances),
                expected: "free not above total",
            });
        }
        Ok(MigGpuInstanceProfile {
            gpu: number(format, "GPU", gpu)?,
            name: profile_name(format, name)?,
            id: number(format, "ID", id)?,
            instances_free,
            instances_total,
            memory_mib,
            p2p,
            sm: number(format, "SM", sm)?,
            dec: number(format, "DEC", dec)?,
            enc: number(format, "ENC", enc)?,
            ce: 0,
            jpeg: 0,
            ofa: 0,
        })
    }
}

impl MigPlacements {
    /// Parses `nvidia-smi mig -lgipp`: lines like
    /// `GPU  0 Profile ID 15 Placements: {0,2,4,6}:2` or `GPU  0 Profile ID  0 Placement : {0}:8`.
    pub fn parse_list(text: &str) -> Result<Vec<MigPlacements>, ParseError> {
        let format = Format::MigPlacements;
        if text.trim().is_empty() {
            return Err(ParseError::Empty { format });
        }
        reject_other_tables(text, format)?;
        let mut placements: Vec<MigPlacements> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            let Some(rest) = trimmed.strip_prefix("GPU") else {
                continue;
            };
            let placement = Self::parse_line(format, index + 1, trimmed, rest)?;
            if placements
                .iter()
                .any(|p| p.gpu == placement.gpu && p.profile_id == placement.profile_id)
            {
                return Err(ParseError::Duplicate {
                    format,
                    key: format!("GPU {} Profile ID {}", placement.gpu, placement.profile_id),
                });
            }
            placements.push(placement);
        }
        if placements.is_empty() {
            return Err(ParseError::WrongFormat {
                format,
                actual: "no `GPU N Profile ID M Placements:` lines",
            });
        }
        Ok(placements)
    }

    fn parse_line(
        format: Format,
        line_no: usize,
        line: &str,
        rest: &str,
    ) -> Result<MigPlacements, ParseError> {
        let shape = "`GPU <n> Profile ID <id> Placements: {<starts>}:<size>`";
        let tokens: Vec<&str> = rest.split_whitespace().collect();
        let [gpu, "Profile", "ID", id, tail @ ..] = tokens.as_slice() else {
            return Err(unexpected(format, line_no, shape, line));
        };
        let joined: String = tail.concat();
        let set = joined
            .strip_prefix("Placements:")
            .or_else(|| joined.strip_prefix("Placement:"))
            .ok_or_else(|| unexpected(format, line_no, shape, line))?;
        let (starts, size) = set
            .strip_prefix('{')
            .and_then(|s| s.split_once("}:"))
            .ok_or_else(|| unexpected(format, line_no, shape, line))?;
        let starts = if starts.is_empty() {
            Vec::new()
        } else {
            starts
                .split(',')
                .map(|s| slice(format, "Placements", s))
                .collect::<Result<Vec<u8>, _>>()?
        };
        let size = slice(format, "Placement size", size)?;
        if size == 0 {
            return Err(ParseError::InvalidValue {
                format,
                key: "Placement size".into(),
                value: "0".into(),
                expected: "a size of at least one memory slice",
            });
        }
        Ok(MigPlacements {
            gpu: number(format, "GPU", gpu)?,
            profile_id: number(format, "Profile ID", id)?,
            starts,
            size,
        })
    }
}

impl MigGpuInstance {
    /// Parses `nvidia-smi mig -lgi`. `No GPU instances found` gives an empty list.
    pub fn parse_table(text: &str) -> Result<Vec<MigGpuInstance>, ParseError> {
        let format = Format::MigInstances;
        if text.trim().is_empty() {
            return Err(ParseError::Empty { format });
        }
        if text.contains("No GPU instances found") {
            return Ok(Vec::new());
        }
        reject_other_tables(text, format)?;
        if !text.contains("GPU instances:") {
            return Err(ParseError::WrongFormat {
                format,
                actual: "text without a `GPU instances:` table",
            });
        }
        let mut instances = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let TableLine::Data(tokens) = table_line(line) else {
                continue;
            };
            let [gpu, "MIG", name, profile_id, instance_id, placement] = tokens.as_slice() else {
                return Err(unexpected(
                    format,
                    index + 1,
                    "a row `GPU MIG <name> <profile ID> <instance ID> <start>:<size>`",
                    line.trim(),
                ));
            };
            let (start, size) =
                placement
                    .split_once(':')
                    .ok_or_else(|| ParseError::InvalidValue {
                        format,
                        key: "Placement".into(),
                        value: excerpt(placement),
                        expected: "`start:size`",
                    })?;
            instances.push(MigGpuInstance {
                gpu: number(format, "GPU", gpu)?,
                name: profile_name(format, name)?,
                profile_id: number(format, "Profile ID", profile_id)?,
                instance_id: number(format, "Instance ID", instance_id)?,
                start: slice(format, "Placement start", start)?,
                size: slice(format, "Placement size", size)?,
            });
        }
        Ok(instances)
    }
}
