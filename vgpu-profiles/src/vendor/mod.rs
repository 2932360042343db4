//! Parsers for what vendor drivers show on a host: mdev type directories, NVIDIA, Intel
//! GVT-g and kernel-sample type descriptions, NVIDIA vGPU type names, NVIDIA SR-IOV
//! `creatable_vgpu_types`, `nvidia-smi mig` tables and `nvidia-smi vgpu -q`.
//!
//! Every parser takes the text the service read and returns a typed [`ParseError`] on
//! malformed input; none panics. The service adds the path it read from when it reports an
//! error, so messages here name the format, the line and the offending text.

mod gvt;
mod mdev;
mod mig;
mod nvidia;
mod nvidia_smi;
mod nvidia_smi_q;
mod offered;
mod samples;

pub use gvt::GvtDescription;
pub use mdev::{
    parse_available_instances, parse_device_api, parse_type_id, parse_type_name,
    MdevTypeAttributes, MdevTypeInfo,
};
pub use mig::{
    MigGpuInstance, MigGpuInstanceProfile, MigPlacements, MigProfileName, MigProfileTable,
};
pub use nvidia::{
    CreatableVgpuType, MigMediaAttr, NvidiaDescription, NvidiaSeries, NvidiaTypeName,
};
pub use nvidia_smi::{parse_vgpu_query, VgpuQueryGpu, VgpuQueryRecord};
pub use nvidia_smi_q::{parse_mig_modes, GpuMigMode};
pub use offered::{
    DisplayCaps, Isolation, OfferedType, PciIdentity, TypeDescription, TypeSource, Vendor,
};
pub use samples::{MbochsDescription, MdpyDescription};

use serde::{Deserialize, Serialize};
use std::fmt;

/// The text formats this module parses; named in every [`ParseError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// An mdev type directory's `name` attribute.
    MdevTypeName,
    /// An mdev type directory's name (the type id, e.g. `nvidia-256`).
    MdevTypeId,
    /// An mdev type directory's `available_instances` attribute.
    AvailableInstances,
    /// An mdev type directory's `device_api` attribute.
    DeviceApi,
    /// NVIDIA's `num_heads=4, frl_config=60, ...` type description.
    NvidiaDescription,
    /// Intel GVT-g's `low_gm_size: ...` type description.
    GvtDescription,
    /// The mbochs sample driver's `virtual display, N MB video memory` description.
    MbochsDescription,
    /// The mdpy sample driver's `virtual display, WxH framebuffer` description.
    MdpyDescription,
    /// An NVIDIA vGPU type name such as `GRID T4-2Q` or `H200X-1-18C`.
    NvidiaTypeName,
    /// NVIDIA SR-IOV per-VF `nvidia/creatable_vgpu_types`.
    CreatableVgpuTypes,
    /// `nvidia-smi mig -lgip` (GPU instance profiles table).
    MigProfiles,
    /// `nvidia-smi mig -lgipp` (GPU instance profile placements).
    MigPlacements,
    /// `nvidia-smi mig -lgi` (existing GPU instances table).
    MigInstances,
    /// `nvidia-smi vgpu -q` (running vGPUs per GPU).
    NvidiaSmiVgpuQuery,
    /// `nvidia-smi -q` (per GPU; read for its MIG mode).
    NvidiaSmiQuery,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::MdevTypeName => "mdev type `name`",
            Format::MdevTypeId => "mdev type id",
            Format::AvailableInstances => "mdev type `available_instances`",
            Format::DeviceApi => "mdev type `device_api`",
            Format::NvidiaDescription => "NVIDIA vGPU type description",
            Format::GvtDescription => "GVT-g type description",
            Format::MbochsDescription => "mbochs type description",
            Format::MdpyDescription => "mdpy type description",
            Format::NvidiaTypeName => "NVIDIA vGPU type name",
            Format::CreatableVgpuTypes => "NVIDIA `creatable_vgpu_types`",
            Format::MigProfiles => "`nvidia-smi mig -lgip` output",
            Format::MigPlacements => "`nvidia-smi mig -lgipp` output",
            Format::MigInstances => "`nvidia-smi mig -lgi` output",
            Format::NvidiaSmiQuery => "`nvidia-smi -q` output",
            Format::NvidiaSmiVgpuQuery => "`nvidia-smi vgpu -q` output",
        })
    }
}

/// Why a vendor text could not be parsed. Messages name the format, the line (1-based) and
/// an excerpt of the offending text; the caller adds the path it read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The text is empty or only whitespace.
    #[error("{format} is empty")]
    Empty {
        /// What was being parsed.
        format: Format,
    },
    /// A line does not have the expected shape.
    #[error("{format}, line {line}: expected {expected}, found {found:?}")]
    Unexpected {
        /// What was being parsed.
        format: Format,
        /// 1-based line number in the text given to the parser.
        line: usize,
        /// What the parser was looking for.
        expected: &'static str,
        /// An excerpt of what it found.
        found: String,
    },
    /// A known key has a value that does not parse or is out of range.
    #[error("{format}: `{key}` has invalid value {value:?} (expected {expected})")]
    InvalidValue {
        /// What was being parsed.
        format: Format,
        /// The key or column.
        key: String,
        /// An excerpt of the value.
        value: String,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// A required key is absent.
    #[error("{format}: missing `{key}`")]
    MissingKey {
        /// What was being parsed.
        format: Format,
        /// The key that is missing.
        key: &'static str,
    },
    /// A key or id appears twice.
    #[error("{format}: `{key}` appears more than once")]
    Duplicate {
        /// What was being parsed.
        format: Format,
        /// The repeated key or id.
        key: String,
    },
    /// The text is another known format than the one asked for.
    #[error("{format}: this text is {actual}, not {format}")]
    WrongFormat {
        /// What was being parsed.
        format: Format,
        /// What the text looks like instead.
        actual: &'static str,
    },
}

/// Longest excerpt of input quoted in an error: enough to recognise the line, short enough
/// that arbitrary input cannot make huge messages.
const EXCERPT_CHARS: usize = 80;

/// A bounded, char-boundary-safe excerpt of `text` for error messages.
pub(crate) fn excerpt(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        format!("{head}...")
    } else {
        head
    }
}

/// A display resolution, `WIDTHxHEIGHT` in sysfs text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Resolution {
    /// Horizontal pixels.
    pub width: u32,
    /// Vertical pixels.
    pub height: u32,
}

impl Resolution {
    /// Parses `1920x1200`; both sides must be non-zero decimal numbers.
    pub fn parse(text: &str) -> Option<Resolution> {
        let (w, h) = text.trim().split_once('x')?;
        let width = parse_decimal_u32(w)?;
        let height = parse_decimal_u32(h)?;
        (width > 0 && height > 0).then_some(Resolution { width, height })
    }

    /// Whether this resolution is at least as large as `other` in both directions.
    pub fn covers(&self, other: &Resolution) -> bool {
        self.width >= other.width && self.height >= other.height
    }
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// Parses a plain decimal `u32` (digits only, no sign, no spaces).
pub(crate) fn parse_decimal_u32(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Parses a plain decimal `u64` (digits only, no sign, no spaces).
pub(crate) fn parse_decimal_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Bytes in one MiB.
pub const MIB: u64 = 1024 * 1024;
/// Bytes in one GiB.
pub const GIB: u64 = 1024 * MIB;
