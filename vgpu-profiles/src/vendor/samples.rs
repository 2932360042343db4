//! Descriptions of the kernel's sample mdev drivers (`samples/vfio-mdev/`): mbochs prints
//! `virtual display, %d MB video memory`, mdpy prints `virtual display, %dx%d framebuffer`.
//! mtty has no description.

use super::{excerpt, parse_decimal_u32, Format, ParseError, Resolution};
use serde::{Deserialize, Serialize};

const DISPLAY_PREFIX: &str = "virtual display, ";

/// The mbochs description: the type's video memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MbochsDescription {
    /// Video memory in MiB (the driver's "MB" are `<< 20`).
    pub video_memory_mib: u32,
}

impl MbochsDescription {
    /// Parses `virtual display, 16 MB video memory`.
    pub fn parse(text: &str) -> Result<MbochsDescription, ParseError> {
        let format = Format::MbochsDescription;
        let body = body(text, format)?;
        let mib = body
            .strip_suffix(" MB video memory")
            .ok_or_else(|| unexpected(format, "`N MB video memory`", body))?;
        let video_memory_mib =
            parse_decimal_u32(mib)
                .filter(|&m| m > 0)
                .ok_or_else(|| ParseError::InvalidValue {
                    format,
                    key: "video memory".into(),
                    value: excerpt(mib),
                    expected: "a positive number of MB",
                })?;
        Ok(MbochsDescription { video_memory_mib })
    }
}

/// The mdpy description: the type's fixed framebuffer resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdpyDescription {
    /// The framebuffer resolution.
    pub resolution: Resolution,
}

impl MdpyDescription {
    /// Parses `virtual display, 1024x768 framebuffer`.
    pub fn parse(text: &str) -> Result<MdpyDescription, ParseError> {
        let format = Format::MdpyDescription;
        let body = body(text, format)?;
        let res = body
            .strip_suffix(" framebuffer")
            .ok_or_else(|| unexpected(format, "`WxH framebuffer`", body))?;
        let resolution = Resolution::parse(res).ok_or_else(|| ParseError::InvalidValue {
            format,
            key: "framebuffer".into(),
            value: excerpt(res),
            expected: "a resolution such as `1024x768`",
        })?;
        Ok(MdpyDescription { resolution })
    }
}

fn body(text: &str, format: Format) -> Result<&str, ParseError> {
    let text = text.trim_end();
    if text.trim().is_empty() {
        return Err(ParseError::Empty { format });
    }
    text.strip_prefix(DISPLAY_PREFIX)
        .ok_or_else(|| unexpected(format, "`virtual display, ...`", text))
}

fn unexpected(format: Format, expected: &'static str, found: &str) -> ParseError {
    ParseError::Unexpected {
        format,
        line: 1,
        expected,
        found: excerpt(found),
    }
}
