//! NVIDIA vgpu-device-manager's `version: v1` YAML (`nvidia-vgpu-dm apply -f FILE -c NAME`):
//! the file, its configuration selection and its checks.
//!
//! Contract: [`parse_vgpu_dm`] is pure. It refuses what NVIDIA's own parser refuses (a missing
//! or other `version`, unknown keys, an empty `vgpu-configs` or configuration, `devices` other
//! than `all` or a list of indices, a malformed vGPU type name or a count below 1, time-sliced
//! and MIG-backed types mixed in one entry) and selects the configuration by NVIDIA's rules:
//! the named one, or the only one when no name is given. Every error names the file, the line
//! and the key. Which GPUs an entry matches and which vendor types its names are is host
//! knowledge: the service resolves a [`VgpuDmConfig`] against the host (device index = PCI
//! bus order of the NVIDIA GPUs, as NVIDIA's tools count).

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::desired::DesiredError;

/// The `format` name of this file format on `Manager.StartApply`.
pub const FORMAT: &str = "nvidia-vgpu-dm";

/// The selected configuration of a vgpu-device-manager file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VgpuDmConfig {
    /// The file name given by the caller (for errors found while resolving on the host).
    pub file: String,
    /// The configuration's name (`-c NAME`, or the file's only one).
    pub name: String,
    /// Its entries, in file order.
    pub entries: Vec<VgpuDmEntry>,
}

/// One `{devices, device-filter, vgpu-devices}` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VgpuDmEntry {
    /// 1-based line of the entry.
    pub line: usize,
    /// Its key path (`vgpu-configs.NAME[0]`).
    pub key: String,
    /// Which GPUs, by index among the host's NVIDIA GPUs.
    pub devices: DeviceSelection,
    /// PCI ids the GPU must have (any of them); empty: any GPU.
    pub device_filter: Vec<DeviceFilter>,
    /// vGPU types and counts wanted on each matched GPU; empty: no vGPU (the GPU is cleared).
    pub vgpu_devices: Vec<VgpuCount>,
}

/// The `devices` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelection {
    /// `all`.
    All,
    /// `[0, 1]`: these indices.
    Indices(Vec<u32>),
}

impl DeviceSelection {
    /// Whether the GPU at `index` is selected.
    pub fn selects(&self, index: u32) -> bool {
        match self {
            Self::All => true,
            Self::Indices(indices) => indices.contains(&index),
        }
    }
}

/// One `device-filter` value, `0xDDDDVVVV` (device id, vendor id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFilter {
    /// PCI device id.
    pub device: u16,
    /// PCI vendor id.
    pub vendor: u16,
}

impl DeviceFilter {
    /// Whether a function with these ids matches.
    pub fn matches(&self, vendor: u16, device: u16) -> bool {
        self.vendor == vendor && self.device == device
    }
}

impl std::fmt::Display for DeviceFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{:04X}{:04X}", self.device, self.vendor)
    }
}

/// `"T4-1Q": 16` of `vgpu-devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VgpuCount {
    /// NVIDIA's vGPU type name (`T4-1Q`, `A100-1-5C`).
    pub type_name: String,
    /// How many on each matched GPU (at least 1).
    pub count: u32,
    /// 1-based line of the key.
    pub line: usize,
    /// Its key path (`vgpu-configs.NAME[0].vgpu-devices.T4-1Q`).
    pub key: String,
}

/// Whether `text` looks like a vgpu-device-manager file rather than this project's TOML: its
/// first line that is not blank, a comment or `---` starts with the YAML key `version:`
/// (TOML writes `version = 1`).
pub fn looks_like_vgpu_dm(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#') && *line != "---")
        .is_some_and(|line| line.starts_with("version:") || line.starts_with("vgpu-configs:"))
}

/// Every configuration of a vgpu-device-manager file, in file order, each checked.
pub fn parse_all_configs(file: &str, text: &str) -> Result<Vec<VgpuDmConfig>, DesiredError> {
    let refuse = |line: usize, key: &str, reason: String| DesiredError::Value {
        file: file.to_owned(),
        line,
        key: key.to_owned(),
        reason,
    };
    let Some(root) = load(file, text)? else {
        return Err(refuse(1, "version", "the file is empty".to_owned()));
    };
    let top = root.mapping("", file)?;
    let mut version = None;
    let mut configs = None;
    for (key, value) in top {
        match key.as_str() {
            "version" => version = Some(value),
            "vgpu-configs" => configs = Some(value),
            other => {
                return Err(refuse(
                    key.line,
                    other,
                    format!("unexpected field {other:?} (expected version, vgpu-configs)"),
                ))
            }
        }
    }
    let Some(version) = version else {
        return Err(refuse(root.line, "version", "missing field".to_owned()));
    };
    match &version.value {
        Value::Scalar(text, _) if text == "v1" => {}
        _ => {
            return Err(refuse(
                version.line,
                "version",
                format!("unknown version {} (v1 is supported)", version.show()),
            ))
        }
    }
    let Some(configs) = configs else {
        return Err(refuse(
            root.line,
            "vgpu-configs",
            "missing field (at least one configuration is required)".to_owned(),
        ));
    };
    let listed = configs.mapping("vgpu-configs", file)?;
    if listed.is_empty() {
        return Err(refuse(
            configs.line,
            "vgpu-configs",
            "at least one configuration is required".to_owned(),
        ));
    }
    listed
        .iter()
        .map(|(key, value)| {
            Ok(VgpuDmConfig {
                file: file.to_owned(),
                name: key.as_str().to_owned(),
                entries: parse_config(file, key.as_str(), value)?,
            })
        })
        .collect()
}

/// Parses a vgpu-device-manager file and selects configuration `config` by NVIDIA's rules:
/// the named one, or with an empty name the file's only one. Every configuration is checked,
/// as NVIDIA's parser does, not only the selected one.
pub fn parse_vgpu_dm(file: &str, text: &str, config: &str) -> Result<VgpuDmConfig, DesiredError> {
    let mut all = parse_all_configs(file, text)?;
    let names = || {
        all.iter()
            .map(|listed| listed.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if config.is_empty() {
        if all.len() > 1 {
            return Err(DesiredError::Config {
                file: file.to_owned(),
                reason: format!(
                    "the file has {} configurations ({}): name one (-c NAME)",
                    all.len(),
                    names()
                ),
            });
        }
        return Ok(all.remove(0));
    }
    match all.iter().position(|listed| listed.name == config) {
        Some(position) => Ok(all.swap_remove(position)),
        None => Err(DesiredError::Config {
            file: file.to_owned(),
            reason: format!(
                "configuration {config:?} is not in the file (it has: {})",
                names()
            ),
        }),
    }
}

fn parse_config(file: &str, name: &str, node: &Node) -> Result<Vec<VgpuDmEntry>, DesiredError> {
    let path = format!("vgpu-configs.{name}");
    let items = node.sequence(&path, file)?;
    if items.is_empty() {
        return Err(DesiredError::Value {
            file: file.to_owned(),
            line: node.line,
            key: path,
            reason: "at least one entry is required".to_owned(),
        });
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| parse_entry(file, &format!("{path}[{index}]"), item))
        .collect()
}

fn parse_entry(file: &str, path: &str, node: &Node) -> Result<VgpuDmEntry, DesiredError> {
    let refuse = |line: usize, key: String, reason: String| DesiredError::Value {
        file: file.to_owned(),
        line,
        key,
        reason,
    };
    let mut devices = None;
    let mut device_filter = Vec::new();
    let mut vgpu_devices = None;
    for (key, value) in node.mapping(path, file)? {
        let key_path = format!("{path}.{}", key.as_str());
        match key.as_str() {
            "devices" => devices = Some(parse_devices(file, &key_path, value)?),
            "device-filter" => device_filter = parse_filters(file, &key_path, value)?,
            "vgpu-devices" => vgpu_devices = Some(parse_vgpu_devices(file, &key_path, value)?),
            other => {
                return Err(refuse(
                    key.line,
                    key_path.clone(),
                    format!(
                        "unexpected field {other:?} (expected devices, device-filter, vgpu-devices)"
                    ),
                ))
            }
        }
    }
    let Some(devices) = devices else {
        return Err(refuse(
            node.line,
            format!("{path}.devices"),
            "missing required field".to_owned(),
        ));
    };
    let Some(vgpu_devices) = vgpu_devices else {
        return Err(refuse(
            node.line,
            format!("{path}.vgpu-devices"),
            "missing required field".to_owned(),
        ));
    };
    Ok(VgpuDmEntry {
        line: node.line,
        key: path.to_owned(),
        devices,
        device_filter,
        vgpu_devices,
    })
}

fn parse_devices(file: &str, path: &str, node: &Node) -> Result<DeviceSelection, DesiredError> {
    let refuse = |line: usize, reason: String| DesiredError::Value {
        file: file.to_owned(),
        line,
        key: path.to_owned(),
        reason,
    };
    match &node.value {
        Value::Scalar(text, _) if text == "all" => Ok(DeviceSelection::All),
        Value::Sequence(items) => items
            .iter()
            .map(|item| match &item.value {
                Value::Scalar(text, true) => text
                    .parse::<u32>()
                    .map_err(|_| refuse(item.line, format!("{text:?} is not a device index"))),
                _ => Err(refuse(
                    item.line,
                    format!("{} is not a device index", item.show()),
                )),
            })
            .collect::<Result<Vec<u32>, _>>()
            .map(DeviceSelection::Indices),
        _ => Err(refuse(
            node.line,
            format!(
                "{} is neither \"all\" nor a list of device indices",
                node.show()
            ),
        )),
    }
}

fn parse_filters(file: &str, path: &str, node: &Node) -> Result<Vec<DeviceFilter>, DesiredError> {
    let one = |item: &Node| -> Result<DeviceFilter, DesiredError> {
        let refuse = |reason: String| DesiredError::Value {
            file: file.to_owned(),
            line: item.line,
            key: path.to_owned(),
            reason,
        };
        let Value::Scalar(text, _) = &item.value else {
            return Err(refuse(format!("{} is not a device id", item.show())));
        };
        if text.contains(':') {
            return Err(refuse(format!(
                "{text:?}: subsystem filters (<devicevendor>:<subdevicevendor>) are not supported; filter by 0xDDDDVVVV"
            )));
        }
        let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => text.parse::<u32>(),
        };
        let raw = parsed.map_err(|_| {
            refuse(format!(
                "{text:?} is not a device id (0xDDDDVVVV: device, then vendor)"
            ))
        })?;
        Ok(DeviceFilter {
            device: (raw >> 16) as u16,
            vendor: (raw & 0xffff) as u16,
        })
    };
    match &node.value {
        Value::Sequence(items) => items.iter().map(one).collect(),
        _ => Ok(vec![one(node)?]),
    }
}

fn parse_vgpu_devices(file: &str, path: &str, node: &Node) -> Result<Vec<VgpuCount>, DesiredError> {
    let mut counts = Vec::new();
    let mut mig_backed_seen: Option<(bool, String)> = None;
    for (key, value) in node.mapping(path, file)? {
        let type_name = key.as_str();
        let key_path = format!("{path}.{type_name}");
        let refuse = |line: usize, reason: String| DesiredError::Value {
            file: file.to_owned(),
            line,
            key: key_path.clone(),
            reason,
        };
        let Some(mig_backed) = vgpu_type_kind(type_name) else {
            return Err(refuse(
                key.line,
                format!(
                    "malformed vGPU type name {type_name:?} (expected <gpu>-<gb><series> or <gpu>-<g>-<gb><series>[attr], e.g. T4-1Q, A100-1-5C)"
                ),
            ));
        };
        if let Some((seen, other)) = &mig_backed_seen {
            if *seen != mig_backed {
                return Err(refuse(
                    key.line,
                    format!("cannot mix time-sliced and MIG-backed vGPU types on one GPU ({other} and {type_name})"),
                ));
            }
        }
        mig_backed_seen = Some((mig_backed, type_name.to_owned()));
        let count = match &value.value {
            Value::Scalar(text, true) => text.parse::<u32>().ok().filter(|count| *count >= 1),
            _ => None,
        };
        let Some(count) = count else {
            return Err(refuse(
                value.line,
                format!("count {} is not a whole number of at least 1", value.show()),
            ));
        };
        counts.push(VgpuCount {
            type_name: type_name.to_owned(),
            count,
            line: key.line,
            key: key_path.clone(),
        });
    }
    Ok(counts)
}

/// `Some(false)` for a time-sliced vGPU type name (`T4-1Q`, `RTX6000-Ada-4Q`, `M60-0B`),
/// `Some(true)` for a MIG-backed one (`A100-1-5C`, `A100-1-5CME`, `DC-1-24CGFX`), `None` for
/// a malformed name (NVIDIA's naming: GPU, optional letter words, then framebuffer GB and
/// series A/B/C/Q; MIG-backed ones add the GPU instance slice count and an attribute).
pub fn vgpu_type_kind(name: &str) -> Option<bool> {
    let parts: Vec<&str> = name.split('-').collect();
    let gpu_ok = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    };
    // `<gb><series>` with any of `attributes` after it.
    let size_ok = |part: &str, attributes: &[&str]| {
        let digits = part.chars().take_while(char::is_ascii_digit).count();
        let (gb, rest) = part.split_at(digits);
        let gb_ok = gb == "0" || (!gb.is_empty() && !gb.starts_with('0'));
        let mut rest = rest.chars();
        let series_ok = matches!(rest.next(), Some('A' | 'B' | 'C' | 'Q'));
        let attribute = rest.as_str();
        gb_ok && series_ok && (attribute.is_empty() || attributes.contains(&attribute))
    };
    if parts.len() >= 2
        && gpu_ok(parts[0])
        && parts[1..parts.len() - 1]
            .iter()
            .all(|word| !word.is_empty() && word.chars().all(|c| c.is_ascii_alphabetic()))
        && size_ok(parts[parts.len() - 1], &[])
    {
        return Some(false);
    }
    let slices_ok = |part: &str| part.len() == 1 && matches!(part.as_bytes()[0], b'1'..=b'9');
    if parts.len() == 3
        && gpu_ok(parts[0])
        && slices_ok(parts[1])
        && size_ok(parts[2], &["ME", "NOME", "MEALL", "GFX"])
    {
        return Some(true);
    }
    None
}

// --- A small YAML tree with line numbers, built from yaml-rust2's marked events. ---

#[derive(Debug, Clone)]
struct Node {
    value: Value,
    line: usize,
}

#[derive(Debug, Clone)]
enum Value {
    /// The text and whether it was a plain (unquoted) scalar.
    Scalar(String, bool),
    Sequence(Vec<Node>),
    Mapping(Vec<(Key, Node)>),
}

#[derive(Debug, Clone)]
struct Key {
    text: String,
    line: usize,
}

impl Key {
    fn as_str(&self) -> &str {
        &self.text
    }
}

impl Node {
    fn show(&self) -> String {
        match &self.value {
            Value::Scalar(text, _) => format!("{text:?}"),
            Value::Sequence(_) => "a list".to_owned(),
            Value::Mapping(_) => "a mapping".to_owned(),
        }
    }

    fn mapping(&self, path: &str, file: &str) -> Result<&[(Key, Node)], DesiredError> {
        match &self.value {
            Value::Mapping(pairs) => Ok(pairs),
            // An empty value (`vgpu-devices:` with nothing) is an empty mapping, as in Go.
            Value::Scalar(text, true) if text.is_empty() || text == "~" || text == "null" => {
                Ok(&[])
            }
            _ => Err(DesiredError::Value {
                file: file.to_owned(),
                line: self.line,
                key: if path.is_empty() { "(document)" } else { path }.to_owned(),
                reason: format!("expected a mapping, found {}", self.show()),
            }),
        }
    }

    fn sequence(&self, path: &str, file: &str) -> Result<&[Node], DesiredError> {
        match &self.value {
            Value::Sequence(items) => Ok(items),
            Value::Scalar(text, true) if text.is_empty() || text == "~" || text == "null" => {
                Ok(&[])
            }
            _ => Err(DesiredError::Value {
                file: file.to_owned(),
                line: self.line,
                key: path.to_owned(),
                reason: format!("expected a list of entries, found {}", self.show()),
            }),
        }
    }
}

enum Open {
    Sequence(Vec<Node>, usize, usize),
    Mapping(Vec<(Key, Node)>, Option<Key>, usize, usize),
}

#[derive(Default)]
struct Builder {
    open: Vec<Open>,
    anchors: HashMap<usize, Node>,
    documents: Vec<Node>,
    error: Option<String>,
}

impl Builder {
    fn finish(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.open.last_mut() {
            None => self.documents.push(node),
            Some(Open::Sequence(items, _, _)) => items.push(node),
            Some(Open::Mapping(pairs, pending, _, _)) => match pending.take() {
                Some(key) => {
                    if pairs.iter().any(|(seen, _)| seen.text == key.text) {
                        self.error.get_or_insert(format!(
                            "line {}: key {:?} appears twice in one mapping",
                            key.line, key.text
                        ));
                    }
                    pairs.push((key, node));
                }
                None => match node.value {
                    Value::Scalar(text, _) => {
                        *pending = Some(Key {
                            text,
                            line: node.line,
                        })
                    }
                    _ => {
                        self.error.get_or_insert(format!(
                            "line {}: a mapping key must be a plain value",
                            node.line
                        ));
                        *pending = Some(Key {
                            text: String::new(),
                            line: node.line,
                        });
                    }
                },
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        let line = mark.line();
        match event {
            Event::Scalar(text, style, anchor, _) => self.finish(
                Node {
                    value: Value::Scalar(text, style == TScalarStyle::Plain),
                    line,
                },
                anchor,
            ),
            Event::SequenceStart(anchor, _) => {
                self.open.push(Open::Sequence(Vec::new(), anchor, line))
            }
            Event::MappingStart(anchor, _) => {
                self.open
                    .push(Open::Mapping(Vec::new(), None, anchor, line))
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match self.open.pop() {
                    Some(Open::Sequence(items, anchor, line)) => (
                        Node {
                            value: Value::Sequence(items),
                            line,
                        },
                        anchor,
                    ),
                    Some(Open::Mapping(pairs, _, anchor, line)) => (
                        Node {
                            value: Value::Mapping(pairs),
                            line,
                        },
                        anchor,
                    ),
                    None => return,
                };
                self.finish(node, anchor);
            }
            Event::Alias(anchor) => {
                let node = self.anchors.get(&anchor).cloned().unwrap_or(Node {
                    value: Value::Scalar(String::new(), true),
                    line,
                });
                self.finish(node, 0);
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// The document's root node (`None` for an empty file).
fn load(file: &str, text: &str) -> Result<Option<Node>, DesiredError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser
        .load(&mut builder, true)
        .map_err(|error| DesiredError::Syntax {
            file: file.to_owned(),
            message: format!("YAML: {error}"),
        })?;
    if let Some(message) = builder.error {
        return Err(DesiredError::Syntax {
            file: file.to_owned(),
            message,
        });
    }
    if builder.documents.len() > 1 {
        return Err(DesiredError::Syntax {
            file: file.to_owned(),
            message: format!(
                "the file holds {} YAML documents; one is expected",
                builder.documents.len()
            ),
        });
    }
    Ok(builder.documents.pop())
}

#[cfg(test)]
#[path = "vgpu_dm_tests.rs"]
mod tests;
