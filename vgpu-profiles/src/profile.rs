//! Profiles: what an admin asks for, vendor-neutral, stored as TOML.
//!
//! A file holds any number of `[[profile]]` tables. Unknown keys and bad values are errors
//! that name the file, the line and the key. See `docs/profiles.md` for the format.

use crate::vendor::{Isolation, Resolution, Vendor, GIB, MIB};
use serde::{Deserialize, Serialize};
use std::fmt;
use toml::Spanned;
pub use vgpu_types::{PciAddress, Weight};

/// Why a profile or a profile file is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The file is not valid TOML or a value is invalid.
    #[error("{path}, line {line}{}: {message}", key.as_ref().map(|k| format!(", key `{k}`")).unwrap_or_default())]
    Invalid {
        /// The file (as the caller named it; `<built-in>/...` for the embedded catalog).
        path: String,
        /// 1-based line.
        line: usize,
        /// The dotted key, when the error is about one (`profile.compute.weight`).
        key: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// A file defines the same profile name twice.
    #[error("{path}, line {line}: profile `{name}` is already defined at line {first_line} of this file")]
    Duplicate {
        /// The file.
        path: String,
        /// Line of the second definition.
        line: usize,
        /// Line of the first definition.
        first_line: usize,
        /// The profile name.
        name: String,
    },
}

/// Why a value is not acceptable; the TOML loader adds file, line and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// The profile name does not match `[a-z0-9][a-z0-9._-]{0,62}`.
    #[error("invalid profile name {0:?}: use 1 to 63 characters from a-z, 0-9, `.`, `_`, `-`, starting with a letter or digit")]
    ProfileName(String),
    /// A size is not a number with a binary unit.
    #[error("invalid size {0:?}: use a whole number with a unit, e.g. `512MiB`, `18GiB`, `4M`")]
    Size(String),
    /// A share is outside 1..=100 percent.
    #[error("share {0} is outside 1..=100 percent")]
    Percent(u32),
    /// A resolution is not `WIDTHxHEIGHT`.
    #[error("invalid resolution {0:?}: use `WIDTHxHEIGHT`, e.g. `1920x1080`")]
    Resolution(String),
    /// A name pattern is empty or has characters outside a type name.
    #[error("invalid name pattern {0:?}: use type-name characters and `*` wildcards")]
    Pattern(String),
    /// A PCI id is not four hex digits.
    #[error("invalid PCI id {0:?}: use four hex digits, e.g. `10de`")]
    PciId(String),
    /// A PCI class is not 2, 4 or 6 hex digits.
    #[error("invalid PCI class {0:?}: use 2, 4 or 6 hex digits, e.g. `03` or `0302`")]
    PciClass(String),
}

/// A validated profile name: `[a-z0-9][a-z0-9._-]{0,62}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ProfileName(String);

impl ProfileName {
    /// Validates a profile name.
    pub fn new(name: &str) -> Result<ProfileName, ValueError> {
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok = chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
        if first_ok && rest_ok && name.len() <= 63 {
            Ok(ProfileName(name.to_owned()))
        } else {
            Err(ValueError::ProfileName(name.to_owned()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ProfileName {
    type Error = ValueError;
    fn try_from(name: String) -> Result<Self, Self::Error> {
        ProfileName::new(&name)
    }
}

impl From<ProfileName> for String {
    fn from(name: ProfileName) -> String {
        name.0
    }
}

impl fmt::Display for ProfileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A byte size written with a binary unit (`512MiB`, `18GiB`, `4M`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses a whole number followed by `KiB`/`MiB`/`GiB`/`TiB` or `K`/`M`/`G`/`T` (all
    /// binary, as the kernel and NVIDIA use them); spaces between are allowed.
    pub fn parse(text: &str) -> Result<ByteSize, ValueError> {
        let fail = || ValueError::Size(text.to_owned());
        let trimmed = text.trim();
        let digits_end = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(fail)?;
        let (digits, unit) = trimmed.split_at(digits_end);
        let multiplier = match unit.trim() {
            "K" | "KiB" => 1024,
            "M" | "MiB" => MIB,
            "G" | "GiB" => GIB,
            "T" | "TiB" => GIB * 1024,
            _ => return Err(fail()),
        };
        let value: u64 = digits.parse().map_err(|_| fail())?;
        value
            .checked_mul(multiplier)
            .filter(|&b| b > 0)
            .map(ByteSize)
            .ok_or_else(fail)
    }
}

impl TryFrom<String> for ByteSize {
    type Error = ValueError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        ByteSize::parse(&text)
    }
}

impl From<ByteSize> for String {
    fn from(size: ByteSize) -> String {
        size.to_string()
    }
}

impl fmt::Display for ByteSize {
    /// The largest binary unit that divides the size exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [
            (GIB * 1024, "TiB"),
            (GIB, "GiB"),
            (MIB, "MiB"),
            (1024, "KiB"),
        ];
        for (size, unit) in units {
            if self.0 >= size && self.0 % size == 0 {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// A share of one GPU in percent, 1..=100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct Percent(u8);

impl Percent {
    /// Validates a percentage.
    pub fn new(percent: u32) -> Result<Percent, ValueError> {
        u8::try_from(percent)
            .ok()
            .filter(|p| (1..=100).contains(p))
            .map(Percent)
            .ok_or(ValueError::Percent(percent))
    }

    /// The percentage.
    pub fn get(self) -> u8 {
        self.0
    }
}

impl TryFrom<u32> for Percent {
    type Error = ValueError;
    fn try_from(percent: u32) -> Result<Self, Self::Error> {
        Percent::new(percent)
    }
}

impl From<Percent> for u32 {
    fn from(percent: Percent) -> u32 {
        u32::from(percent.0)
    }
}

/// A resolution written `WIDTHxHEIGHT` in profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ResolutionText(pub Resolution);

impl TryFrom<String> for ResolutionText {
    type Error = ValueError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Resolution::parse(&text)
            .map(ResolutionText)
            .ok_or(ValueError::Resolution(text))
    }
}

impl From<ResolutionText> for String {
    fn from(resolution: ResolutionText) -> String {
        resolution.0.to_string()
    }
}

/// A type-name pattern where `*` matches any run of characters (`*-18C`, `H200*-1-18C`).
/// Matching ignores ASCII case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NamePattern {
    text: String,
    /// The lower-cased pieces between `*`s (always at least one).
    pieces: Vec<String>,
}

impl NamePattern {
    /// Validates a pattern: non-empty printable text without control characters.
    pub fn new(pattern: &str) -> Result<NamePattern, ValueError> {
        let valid = !pattern.trim().is_empty()
            && pattern.len() <= 128
            && !pattern.chars().any(char::is_control);
        if valid {
            Ok(NamePattern {
                text: pattern.to_owned(),
                pieces: pattern
                    .to_ascii_lowercase()
                    .split('*')
                    .map(str::to_owned)
                    .collect(),
            })
        } else {
            Err(ValueError::Pattern(pattern.to_owned()))
        }
    }

    /// The pattern text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        let Some((first, rest_pieces)) = self.pieces.split_first() else {
            return false;
        };
        let Some(mut rest) = name.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest_pieces.split_last() else {
            return rest.is_empty();
        };
        for piece in middle {
            match rest.find(piece.as_str()) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last.as_str())
    }
}

impl TryFrom<String> for NamePattern {
    type Error = ValueError;
    fn try_from(pattern: String) -> Result<Self, Self::Error> {
        NamePattern::new(&pattern)
    }
}

impl From<NamePattern> for String {
    fn from(pattern: NamePattern) -> String {
        pattern.text
    }
}

/// A 16-bit PCI vendor or device id, written as four hex digits (`10de`, `0x10de`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PciId(pub u16);

impl TryFrom<String> for PciId {
    type Error = ValueError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        let digits = text.strip_prefix("0x").unwrap_or(&text);
        if digits.len() == 4 && digits.chars().all(|c| c.is_ascii_hexdigit()) {
            u16::from_str_radix(digits, 16)
                .map(PciId)
                .map_err(|_| ValueError::PciId(text.clone()))
        } else {
            Err(ValueError::PciId(text))
        }
    }
}

impl From<PciId> for String {
    fn from(id: PciId) -> String {
        format!("{:04x}", id.0)
    }
}

/// A PCI class prefix: 2 (class), 4 (+ subclass) or 6 (+ prog-if) hex digits, lower case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PciClass(String);

impl PciClass {
    /// Whether a device's 24-bit class code (sysfs `class`, e.g. `0x030200`) matches.
    pub fn matches(&self, class_code: u32) -> bool {
        format!("{:06x}", class_code & 0xff_ffff).starts_with(&self.0)
    }
}

impl TryFrom<String> for PciClass {
    type Error = ValueError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        let digits = text.strip_prefix("0x").unwrap_or(&text);
        if matches!(digits.len(), 2 | 4 | 6) && digits.chars().all(|c| c.is_ascii_hexdigit()) {
            Ok(PciClass(digits.to_ascii_lowercase()))
        } else {
            Err(ValueError::PciClass(text))
        }
    }
}

impl From<PciClass> for String {
    fn from(class: PciClass) -> String {
        class.0
    }
}

/// What compute a profile asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeRequest {
    /// Proportional weight among runnable instances on one GPU; also the default
    /// scheduling weight of instances made from the profile.
    #[serde(default = "default_weight")]
    pub weight: Weight,
    /// Guaranteed share of the GPU (admission-controlled: the sum per GPU stays ≤ 100%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_share: Option<Percent>,
    /// Cap on the share of the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_share: Option<Percent>,
}

fn default_weight() -> Weight {
    Weight::DEFAULT
}

impl Default for ComputeRequest {
    fn default() -> Self {
        ComputeRequest {
            weight: Weight::DEFAULT,
            min_share: None,
            max_share: None,
        }
    }
}

/// Optional pins on the vendor type; every pin given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pins {
    /// The type id on the parent: an mdev type directory (`nvidia-256`) or a numeric
    /// vendor type id (`256`, SR-IOV `1414`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_id: Option<String>,
    /// The exact type name, full (`NVIDIA H200X-1-18C`) or its last token (`H200X-1-18C`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    /// A name pattern with `*` wildcards, matched against the full name and its last token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_pattern: Option<NamePattern>,
}

impl Pins {
    /// Whether no pin is set.
    pub fn is_empty(&self) -> bool {
        self.type_id.is_none() && self.type_name.is_none() && self.name_pattern.is_none()
    }
}

/// Which whole device a `passthrough` (or `whole-vf`) profile takes; every field given must
/// match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceMatch {
    /// PCI vendor id (`10de` NVIDIA, `1002` AMD, `8086` Intel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<PciId>,
    /// PCI device id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<PciId>,
    /// PCI class prefix (`03` any display controller, `0302` 3D controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<PciClass>,
    /// One specific function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<PciAddress>,
}

impl DeviceMatch {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.vendor_id.is_none()
            && self.device_id.is_none()
            && self.class.is_none()
            && self.pci_address.is_none()
    }

    /// Whether a device with these ids, class code and address matches.
    pub fn matches(&self, vendor_id: u16, device_id: u16, class_code: u32, address: &str) -> bool {
        self.vendor_id.is_none_or(|v| v.0 == vendor_id)
            && self.device_id.is_none_or(|d| d.0 == device_id)
            && self.class.as_ref().is_none_or(|c| c.matches(class_code))
            && self
                .pci_address
                .as_ref()
                .is_none_or(|a| PciAddress::parse(address).is_ok_and(|b| b == *a))
    }
}

/// Display options for the guest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisplayOptions {
    /// Display heads the type must offer at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<u32>,
    /// Resolution the type must reach at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_resolution: Option<ResolutionText>,
    /// Ask libvirt for a ramfb boot display (`<hostdev ... ramfb='on'>`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub ramfb: bool,
    /// Ask libvirt to use the device as the guest display (`display='on'`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub display: bool,
}

impl DisplayOptions {
    /// Whether nothing is asked for.
    pub fn is_default(&self) -> bool {
        *self == DisplayOptions::default()
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Where a profile was defined.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProfileOrigin {
    /// The built-in catalog (the embedded file's name).
    Builtin(String),
    /// A file the service read (its path).
    File(String),
}

impl fmt::Display for ProfileOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileOrigin::Builtin(file) => f.write_str(file),
            ProfileOrigin::File(path) => f.write_str(path),
        }
    }
}

/// One profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The name.
    pub name: ProfileName,
    /// Free text for people.
    #[serde(default)]
    pub description: String,
    /// Restrict to one vendor's types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<Vendor>,
    /// Framebuffer the instance needs at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framebuffer: Option<ByteSize>,
    /// How the instance must share the GPU; `None` accepts any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Compute request and default scheduling weight.
    #[serde(default)]
    pub compute: ComputeRequest,
    /// Pins on the vendor type.
    #[serde(default, skip_serializing_if = "Pins::is_empty")]
    pub pin: Pins,
    /// The whole device a `passthrough` / `whole-vf` profile takes.
    #[serde(default, skip_serializing_if = "DeviceMatch::is_empty")]
    pub device: DeviceMatch,
    /// Display options.
    #[serde(default, skip_serializing_if = "DisplayOptions::is_default")]
    pub display: DisplayOptions,
    /// Where the profile was defined (set by the loader, not written in files).
    #[serde(skip, default = "unknown_origin")]
    pub origin: ProfileOrigin,
}

fn unknown_origin() -> ProfileOrigin {
    ProfileOrigin::File(String::new())
}

impl Profile {
    /// The default scheduling weight of instances made from this profile.
    pub fn default_weight(&self) -> Weight {
        self.compute.weight
    }

    /// The framebuffer request in bytes (0 when the profile does not ask).
    pub fn framebuffer_bytes(&self) -> u64 {
        self.framebuffer.map_or(0, |s| s.0)
    }

    /// Checks the rules that span several keys; returns the offending key and message.
    fn check(&self) -> Result<(), (&'static str, String)> {
        if let (Some(min), Some(max)) = (self.compute.min_share, self.compute.max_share) {
            if min > max {
                return Err((
                    "compute.min_share",
                    format!("min_share {}% is above max_share {}%", min.get(), max.get()),
                ));
            }
        }
        let whole = matches!(
            self.isolation,
            Some(Isolation::Passthrough | Isolation::WholeVf)
        );
        if self.isolation == Some(Isolation::Passthrough) {
            if self.device.is_empty() {
                return Err((
                    "device",
                    "a passthrough profile needs a [profile.device] match (vendor_id, device_id, class or pci_address)".into(),
                ));
            }
            if !self.pin.is_empty() {
                return Err((
                    "pin",
                    "a passthrough profile takes a whole device; pins on vendor types do not apply"
                        .into(),
                ));
            }
        }
        if !whole && !self.device.is_empty() {
            return Err((
                "device",
                "[profile.device] applies only to isolation \"passthrough\" or \"whole-vf\"".into(),
            ));
        }
        if self.isolation == Some(Isolation::Mig)
            && self.vendor.is_some_and(|v| v != Vendor::Nvidia)
        {
            return Err((
                "isolation",
                "MIG isolation exists only on NVIDIA GPUs".into(),
            ));
        }
        if self.display.heads == Some(0) {
            return Err(("display.heads", "heads must be at least 1".into()));
        }
        Ok(())
    }

    /// The profile as a `[[profile]]` TOML table (the format files use).
    pub fn to_toml(&self) -> String {
        #[derive(Serialize)]
        struct One<'a> {
            profile: [&'a Profile; 1],
        }
        // Serialising plain data with string keys cannot fail.
        toml::to_string(&One { profile: [self] }).unwrap_or_default()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    #[serde(default)]
    profile: Vec<Spanned<Profile>>,
}

/// Parses one profile file. `path` is used in errors and in each profile's origin;
/// `builtin` marks the embedded catalog.
pub(crate) fn parse_file(
    path: &str,
    text: &str,
    builtin: bool,
) -> Result<Vec<Profile>, ProfileError> {
    let file: ProfileFile = toml::from_str(text).map_err(|error| {
        let (line, key) = error
            .span()
            .map_or((1, None), |span| locate(text, span.start));
        ProfileError::Invalid {
            path: path.to_owned(),
            line,
            key,
            message: error.message().to_owned(),
        }
    })?;
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut profiles = Vec::with_capacity(file.profile.len());
    for spanned in file.profile {
        let line = line_of(text, spanned.span().start);
        let mut profile = spanned.into_inner();
        let name = profile.name.to_string();
        if let Some((_, first_line)) = seen.iter().find(|(n, _)| *n == name) {
            return Err(ProfileError::Duplicate {
                path: path.to_owned(),
                line,
                first_line: *first_line,
                name,
            });
        }
        profile
            .check()
            .map_err(|(key, message)| ProfileError::Invalid {
                path: path.to_owned(),
                line,
                key: Some(format!("profile.{key}")),
                message: format!("profile `{name}`: {message}"),
            })?;
        profile.origin = if builtin {
            ProfileOrigin::Builtin(path.to_owned())
        } else {
            ProfileOrigin::File(path.to_owned())
        };
        seen.push((name, line));
        profiles.push(profile);
    }
    Ok(profiles)
}

/// Parses the profiles of one file (for tools that check a file alone).
pub fn parse_profiles(path: &str, text: &str) -> Result<Vec<Profile>, ProfileError> {
    parse_file(path, text, false)
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line of a byte offset and the dotted key written there (the last table header above
/// it, plus the key on the line itself).
fn locate(text: &str, offset: usize) -> (usize, Option<String>) {
    let line = line_of(text, offset);
    let lines: Vec<&str> = text.lines().collect();
    let Some(current) = lines.get(line - 1) else {
        return (line, None);
    };
    let header_of = |l: &str| {
        let t = l.trim();
        t.starts_with('[')
            .then(|| t.trim_matches(|c| c == '[' || c == ']').trim().to_owned())
    };
    if let Some(header) = header_of(current) {
        return (line, Some(header));
    }
    let key = current
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_owned())
        .filter(|k| !k.is_empty());
    let header = lines[..line - 1].iter().rev().find_map(|l| header_of(l));
    let full = match (header, key) {
        (Some(h), Some(k)) => Some(format!("{h}.{k}")),
        (None, Some(k)) => Some(k),
        (Some(h), None) => Some(h),
        (None, None) => None,
    };
    (line, full)
}
