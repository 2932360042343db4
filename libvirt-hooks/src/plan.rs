//! From a domain XML to the list of devices the hook asks the service to claim.
//!
//! A domain asks for a vGPU in three ways (docs/libvirt.md has a complete example):
//! * metadata in [`crate::NAMESPACE`] under `<metadata>`: `<vgpu:vgpus><vgpu:vgpu
//!   profile='...' uuid='...' weight='...' parent='...' kind='...' pci_address='...'
//!   force='yes|no' placement='pack|spread' numa_node='N' numa_strict='yes|no'/></vgpu:vgpus>`
//!   (a lone `<vgpu:vgpu>` directly under `<metadata>` works too). These are *declared*: the
//!   service creates them from their profile if they do not exist, placed as `placement`,
//!   `numa_node` and `numa_strict` say. `force='yes'` (pass-through only) takes the GPU's IOMMU
//!   group even if a member of it serves the host.
//! * `<hostdev mode='subsystem' type='mdev'>` naming a UUID: a *reference* to an instance that
//!   may be a persistent one the service knows; the service skips UUIDs it does not manage,
//!   because they may belong to mdevctl or to the admin.
//! * `<hostdev mode='subsystem' type='pci' managed='no'>`: a reference to a VF by address,
//!   under the same rule. A pass-through is attached the same way: the service binds the GPU's
//!   group to vfio-pci, so its hostdev must be `managed='no'` (with `managed='yes'` libvirt
//!   would rebind it behind the service's back); a pass-through entry paired with a managed
//!   hostdev is refused.
//!
//! A metadata entry and a hostdev that name the same UUID (or PCI address) are one device. A
//! metadata entry without a UUID (or address) takes the first hostdev of its kind that no entry
//! names, in document order, so `<vgpu:vgpu profile='...'/>` next to a plain `<hostdev>` is
//! enough.
//!
//! Input is untrusted: the size is bounded ([`crate::MAX_DOMAIN_XML_BYTES`]), DTDs are refused
//! (so no entity is ever defined or expanded; only XML's five predefined entities and
//! character references are decoded), and every refusal names the element and attribute.

use std::fmt;

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{Namespace, ResolveResult};
use quick_xml::NsReader;
use vgpu_types::Uuid;

use crate::bounded::{ShapeError, ShapeGuard};
use crate::pci::{PciAddress, PciAddressError};
use crate::{MAX_DOMAIN_XML_BYTES, NAMESPACE};

/// How a vGPU reaches the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// A VFIO mediated device, attached by UUID.
    Mdev,
    /// An SR-IOV virtual function, attached by PCI address.
    Vf,
    /// A whole device (GPU physical function) passed through by PCI address.
    Passthrough,
}

impl DeviceKind {
    /// The wire name (`kind` key of the device dict; `kind` attribute in the metadata).
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Mdev => "mdev",
            DeviceKind::Vf => "vf",
            DeviceKind::Passthrough => "passthrough",
        }
    }

    fn from_attribute(value: &str) -> Option<Self> {
        match value {
            "mdev" => Some(DeviceKind::Mdev),
            "vf" => Some(DeviceKind::Vf),
            "passthrough" => Some(DeviceKind::Passthrough),
            _ => None,
        }
    }

    fn is_pci(self) -> bool {
        !matches!(self, DeviceKind::Mdev)
    }
}

/// Where the plan learnt about a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSource {
    /// Only a `<hostdev>`: claimed if the service manages it, skipped otherwise.
    Hostdev,
    /// Only the project's metadata.
    Metadata,
    /// A metadata entry and the `<hostdev>` that attaches it.
    MetadataAndHostdev,
}

/// One device the domain needs from the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedDevice {
    /// mdev, VF or passthrough.
    pub kind: DeviceKind,
    /// The mdev UUID (mdev only).
    pub uuid: Option<Uuid>,
    /// The profile to create it from, if it does not exist yet.
    pub profile: Option<String>,
    /// The parent to place it on (PCI address, or a name such as `mtty` for sample drivers).
    pub parent: Option<String>,
    /// Scheduling weight.
    pub weight: Option<u32>,
    /// The PCI address (VF and passthrough).
    pub pci_address: Option<PciAddress>,
    /// Passthrough: take the GPU's IOMMU group even if a member serves the host
    /// (`force='yes'`).
    pub force: bool,
    /// `pack` or `spread`, for a device created from its profile.
    pub placement: Option<&'static str>,
    /// Prefer parents on this NUMA node.
    pub numa_node: Option<u32>,
    /// Only parents on `numa_node`.
    pub numa_strict: bool,
    /// Where it came from.
    pub source: DeviceSource,
}

impl ClaimedDevice {
    /// Whether the domain's metadata asks for this device, as opposed to a bare `<hostdev>`
    /// that may or may not be the service's.
    pub fn is_declared(&self) -> bool {
        self.source != DeviceSource::Hostdev
    }
}

impl fmt::Display for ClaimedDevice {
    /// `mdev 3eb9d718-0b31-11ee-91aa-2b17f51ee12d (profile 'nvidia-63')`, for messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.as_str())?;
        if let Some(uuid) = &self.uuid {
            write!(f, " {uuid}")?;
        }
        if let Some(address) = &self.pci_address {
            write!(f, " {address}")?;
        }
        match &self.profile {
            Some(profile) => write!(f, " (profile '{profile}')"),
            None => Ok(()),
        }
    }
}

/// Everything the hook needs from a domain XML.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimPlan {
    /// `<name>`.
    pub domain_name: Option<String>,
    /// `<uuid>`: the key of the claims and of a pending release.
    pub domain_uuid: Option<Uuid>,
    /// The devices, metadata entries first (in document order), then bare hostdevs.
    pub devices: Vec<ClaimedDevice>,
}

impl ClaimPlan {
    /// No device could be the service's: the hook has nothing to do.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Whether any device is declared in the metadata (so the domain cannot start without
    /// the service).
    pub fn declares_vgpus(&self) -> bool {
        self.devices.iter().any(ClaimedDevice::is_declared)
    }
}

/// Why a domain XML was refused. Each message names the element and attribute at fault.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Bigger than [`MAX_DOMAIN_XML_BYTES`].
    #[error("domain XML is {size} bytes, more than the {limit} bytes a domain can plausibly be")]
    TooLarge {
        /// Bytes received.
        size: usize,
        /// The bound.
        limit: usize,
    },
    /// Nested too deep, too many attributes on an element or too many namespaces: the
    /// bounds that keep reading linear ([`crate::bounded`]).
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// Not well-formed XML.
    #[error("domain XML is not well-formed near byte {position}")]
    Malformed {
        /// Byte offset of the error.
        position: u64,
        /// What the parser saw.
        #[source]
        source: quick_xml::Error,
    },
    /// A `<!DOCTYPE>`: libvirt never writes one, and it could define entities.
    #[error(
        "domain XML has a <!DOCTYPE> at byte {position}; DTDs and entity definitions are refused"
    )]
    DocType {
        /// Byte offset.
        position: u64,
    },
    /// The document ends inside an element.
    #[error("domain XML ends inside <{0}>")]
    Truncated(String),
    /// No root element at all.
    #[error("domain XML is empty (no <domain> element)")]
    Empty,
    /// The root is not `<domain>`, or there is more than one root.
    #[error("domain XML root is <{0}>, expected a single <domain>")]
    NotADomain(String),
    /// `<uuid>` or a `uuid` attribute is not a UUID.
    #[error("{element} holds '{value}', which is not a UUID")]
    BadUuid {
        /// Where it was, e.g. `<hostdev type='mdev'> #2 <source><address uuid>`.
        element: String,
        /// The text found.
        value: String,
    },
    /// A PCI address in a hostdev or in the metadata is malformed.
    #[error("{element} has a bad PCI address")]
    BadPciAddress {
        /// Where it was.
        element: String,
        /// What is wrong with it.
        #[source]
        source: PciAddressError,
    },
    /// An element of ours lacks an attribute it needs.
    #[error("{element} lacks the {attribute} attribute")]
    MissingAttribute {
        /// Where.
        element: String,
        /// Which one.
        attribute: &'static str,
    },
    /// An attribute of ours has a value outside what it accepts.
    #[error("{element} has {attribute}='{value}'; expected {expected}")]
    BadAttribute {
        /// Where.
        element: String,
        /// Which one.
        attribute: String,
        /// The text found.
        value: String,
        /// What would be accepted.
        expected: &'static str,
    },
    /// An element in the project's namespace that this version does not know.
    #[error("<{element}> in namespace {NAMESPACE} is not known (expected vgpus or vgpu)")]
    UnknownElement {
        /// Its local name.
        element: String,
    },
    /// Two devices name the same UUID or PCI address.
    #[error("{0} is named by two devices of the domain")]
    Duplicate(String),
    /// A metadata entry names neither UUID nor address and no hostdev is left to pair it with.
    #[error(
        "metadata vgpu #{index} (kind {kind}, profile '{profile}') names no {key} and the domain has no unpaired <hostdev> to attach it"
    )]
    Unpaired {
        /// 1-based position among the metadata entries.
        index: usize,
        /// Its kind.
        kind: &'static str,
        /// Its profile (empty if none).
        profile: String,
        /// `uuid` or `pci_address`.
        key: &'static str,
    },
    /// A pass-through entry whose `<hostdev>` is `managed='yes'`: libvirt would bind and
    /// unbind the device itself, behind the service that owns the group's binding.
    #[error(
        "metadata vgpu #{index} (kind passthrough) is attached by the <hostdev type='pci'> of {address}, which has managed='yes'; the service binds a pass-through GPU's IOMMU group itself, so the hostdev must say managed='no'"
    )]
    ManagedPassthrough {
        /// 1-based position among the metadata entries.
        index: usize,
        /// The hostdev's PCI address.
        address: PciAddress,
    },
}

/// Parses a domain XML into a claim plan. Pure; the fuzzing entry point.
pub fn plan_from_xml(domain_xml: &[u8]) -> Result<ClaimPlan, PlanError> {
    if domain_xml.len() > MAX_DOMAIN_XML_BYTES {
        return Err(PlanError::TooLarge {
            size: domain_xml.len(),
            limit: MAX_DOMAIN_XML_BYTES,
        });
    }
    let parsed = parse_document(domain_xml)?;
    pair(parsed)
}

/// A `<hostdev>` of a kind the plan cares about.
#[derive(Debug)]
enum HostdevRef {
    Mdev(Uuid),
    Pci { address: PciAddress, managed: bool },
}

/// A `<vgpu:vgpu>` entry as written.
#[derive(Debug)]
struct MetadataEntry {
    kind: DeviceKind,
    uuid: Option<Uuid>,
    profile: Option<String>,
    parent: Option<String>,
    weight: Option<u32>,
    pci_address: Option<PciAddress>,
    force: bool,
    placement: Option<&'static str>,
    numa_node: Option<u32>,
    numa_strict: Option<bool>,
}

#[derive(Debug, Default)]
struct ParsedDomain {
    name: Option<String>,
    uuid: Option<Uuid>,
    hostdevs: Vec<HostdevRef>,
    metadata: Vec<MetadataEntry>,
}

/// A `<hostdev>` being read.
#[derive(Debug)]
struct HostdevDraft {
    kind: HostdevKind,
    managed: bool,
    index: usize,
    found: Option<HostdevRef>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostdevKind {
    Mdev,
    Pci,
    /// USB, SCSI, capabilities mode, ...: not ours.
    Other,
}

/// One open element: its local name and whether it is in our namespace.
#[derive(Debug)]
struct Open {
    name: Vec<u8>,
    ours: bool,
}

fn parse_document(xml: &[u8]) -> Result<ParsedDomain, PlanError> {
    let mut reader = NsReader::from_reader(xml);
    // Empty elements come as Start+End, so there is one code path for `<a/>` and `<a></a>`.
    reader.config_mut().expand_empty_elements = true;
    reader.config_mut().check_end_names = true;

    let mut domain = ParsedDomain::default();
    let mut stack: Vec<Open> = Vec::new();
    let mut seen_root = false;
    let mut hostdev: Option<HostdevDraft> = None;
    let mut hostdev_count = 0usize;
    let mut text = String::new();
    let mut shape = ShapeGuard::default();

    loop {
        let position = reader.buffer_position();
        let malformed = |source| PlanError::Malformed { position, source };
        let (namespace, event) = match reader.read_resolved_event() {
            Ok(resolved) => resolved,
            Err(source) => {
                return Err(PlanError::Malformed {
                    position: reader.error_position(),
                    source,
                })
            }
        };
        let in_our_namespace = matches!(namespace, ResolveResult::Bound(Namespace(uri)) if uri == NAMESPACE.as_bytes());
        let unbound = matches!(namespace, ResolveResult::Unbound);
        match event {
            Event::Start(start) => {
                // First, before any work that grows with the tag or the depth.
                shape.enter(&start, position)?;
                let local = start.local_name().as_ref().to_vec();
                if stack.is_empty() {
                    if seen_root || in_our_namespace || local != b"domain" {
                        return Err(PlanError::NotADomain(lossy(&local)));
                    }
                    seen_root = true;
                }
                // The names of the (at most) four outermost open elements and the depth are
                // all the rules below look at; a copy of the whole path per element would make
                // deep documents quadratic.
                let mut outer: [&[u8]; 4] = [b""; 4];
                for (slot, open) in outer.iter_mut().zip(&stack) {
                    *slot = open.name.as_slice();
                }
                let depth = stack.len();
                let path = &outer[..depth.min(outer.len())];
                let parent_ours = stack.last().is_some_and(|open| open.ours);
                // `virsh metadata --set` puts the namespace on the top element only, so the
                // unprefixed children of our element are ours too.
                let ours = in_our_namespace || (parent_ours && unbound);
                match (path, ours) {
                    ([b"domain", b"metadata"], true) if depth == 2 => match local.as_slice() {
                        b"vgpus" => check_no_attributes(&reader, &start, "<vgpu:vgpus>")?,
                        b"vgpu" => domain.metadata.push(metadata_entry(
                            &reader,
                            &start,
                            domain.metadata.len() + 1,
                        )?),
                        _ => {
                            return Err(PlanError::UnknownElement {
                                element: lossy(&local),
                            })
                        }
                    },
                    ([b"domain", b"metadata", ..], true) if parent_ours => {
                        if local != b"vgpu" || depth != 3 || path[2] != b"vgpus" {
                            return Err(PlanError::UnknownElement {
                                element: lossy(&local),
                            });
                        }
                        domain.metadata.push(metadata_entry(
                            &reader,
                            &start,
                            domain.metadata.len() + 1,
                        )?);
                    }
                    ([b"domain", b"devices"], false) if depth == 2 && local == b"hostdev" => {
                        hostdev_count += 1;
                        hostdev = Some(hostdev_draft(&start, hostdev_count).map_err(malformed)?);
                    }
                    ([b"domain", b"devices", b"hostdev", b"source"], false)
                        if depth == 4 && local == b"address" =>
                    {
                        if let Some(draft) = hostdev.as_mut() {
                            draft.found = hostdev_source(&start, draft, position)?;
                        }
                    }
                    _ => {}
                }
                text.clear();
                stack.push(Open { name: local, ours });
            }
            Event::End(_) => {
                shape.leave();
                let Some(open) = stack.pop() else {
                    // check_end_names makes quick-xml refuse a stray end tag first.
                    continue;
                };
                let depth = stack.len();
                match (depth, open.ours, open.name.as_slice()) {
                    (1, false, b"name") => domain.name = Some(text.trim().to_owned()),
                    (1, false, b"uuid") => {
                        let value = text.trim();
                        domain.uuid = Some(Uuid::parse_any_spelling(value).map_err(|_| {
                            PlanError::BadUuid {
                                element: "<domain><uuid>".to_owned(),
                                value: value.to_owned(),
                            }
                        })?);
                    }
                    (2, false, b"hostdev") => {
                        if let Some(draft) = hostdev.take() {
                            let element = draft_label(&draft);
                            match (draft.kind, draft.found) {
                                (HostdevKind::Other, _) => {}
                                (_, Some(found)) => domain.hostdevs.push(found),
                                (HostdevKind::Mdev, None) => {
                                    return Err(PlanError::MissingAttribute {
                                        element: format!("{element} <source><address>"),
                                        attribute: "uuid",
                                    })
                                }
                                (HostdevKind::Pci, None) => {
                                    return Err(PlanError::MissingAttribute {
                                        element: format!("{element} <source><address>"),
                                        attribute: "bus/slot/function",
                                    })
                                }
                            }
                        }
                    }
                    _ => {}
                }
                text.clear();
            }
            Event::Text(chunk) => {
                // Only <name> and <uuid> text matters; keep it short-lived.
                if stack.len() == 2
                    && !stack[1].ours
                    && matches!(stack[1].name.as_slice(), b"name" | b"uuid")
                {
                    text.push_str(&chunk.unescape().map_err(malformed)?);
                }
            }
            Event::CData(chunk) => {
                if stack.len() == 2
                    && !stack[1].ours
                    && matches!(stack[1].name.as_slice(), b"name" | b"uuid")
                {
                    text.push_str(&String::from_utf8_lossy(&chunk));
                }
            }
            Event::DocType(_) => return Err(PlanError::DocType { position }),
            Event::Eof => break,
            Event::Empty(_) | Event::Comment(_) | Event::Decl(_) | Event::PI(_) => {}
        }
    }
    if let Some(open) = stack.last() {
        return Err(PlanError::Truncated(lossy(&open.name)));
    }
    if !seen_root {
        return Err(PlanError::Empty);
    }
    Ok(domain)
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn draft_label(draft: &HostdevDraft) -> String {
    let kind = match draft.kind {
        HostdevKind::Mdev => "mdev",
        HostdevKind::Pci => "pci",
        HostdevKind::Other => "other",
    };
    format!("<hostdev type='{kind}'> #{}", draft.index)
}

/// Reads a `<hostdev>` start tag: only `mode='subsystem'` mdev and PCI hostdevs can be ours.
fn hostdev_draft(start: &BytesStart<'_>, index: usize) -> Result<HostdevDraft, quick_xml::Error> {
    let mut mode = None;
    let mut kind = None;
    let mut managed = false;
    for attribute in start.attributes().with_checks(false) {
        let attribute = attribute.map_err(quick_xml::Error::from)?;
        let value = attribute.unescape_value()?;
        match attribute.key.as_ref() {
            b"mode" => mode = Some(value.into_owned()),
            b"type" => kind = Some(value.into_owned()),
            b"managed" => managed = value == "yes",
            _ => {}
        }
    }
    // libvirt's default mode is subsystem.
    let subsystem = mode.as_deref().is_none_or(|mode| mode == "subsystem");
    let kind = match (subsystem, kind.as_deref()) {
        (true, Some("mdev")) => HostdevKind::Mdev,
        (true, Some("pci")) => HostdevKind::Pci,
        _ => HostdevKind::Other,
    };
    Ok(HostdevDraft {
        kind,
        managed,
        index,
        found: None,
    })
}

/// Reads `<hostdev><source><address .../>`.
fn hostdev_source(
    start: &BytesStart<'_>,
    draft: &HostdevDraft,
    position: u64,
) -> Result<Option<HostdevRef>, PlanError> {
    let element = || format!("{} <source><address>", draft_label(draft));
    let mut values: Vec<(Vec<u8>, String)> = Vec::new();
    for attribute in start.attributes().with_checks(false) {
        let attribute = attribute.map_err(|source| PlanError::Malformed {
            position,
            source: source.into(),
        })?;
        let value = attribute
            .unescape_value()
            .map_err(|source| PlanError::Malformed { position, source })?;
        values.push((attribute.key.as_ref().to_vec(), value.into_owned()));
    }
    let get = |key: &[u8]| {
        values
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    match draft.kind {
        HostdevKind::Other => Ok(None),
        HostdevKind::Mdev => match get(b"uuid") {
            None => Ok(None),
            Some(value) => Uuid::parse_any_spelling(value.trim())
                .map(|uuid| Some(HostdevRef::Mdev(uuid)))
                .map_err(|_| PlanError::BadUuid {
                    element: format!("{} uuid", element()),
                    value: value.to_owned(),
                }),
        },
        HostdevKind::Pci => match (get(b"bus"), get(b"slot"), get(b"function")) {
            (Some(bus), Some(slot), Some(function)) => {
                crate::pci::from_libvirt_attributes(get(b"domain"), bus, slot, function)
                    .map(|address| {
                        Some(HostdevRef::Pci {
                            address,
                            managed: draft.managed,
                        })
                    })
                    .map_err(|source| PlanError::BadPciAddress {
                        element: element(),
                        source,
                    })
            }
            _ => Ok(None),
        },
    }
}

/// Attribute keys that declare namespaces, which every element may carry.
fn is_namespace_declaration(key: &[u8]) -> bool {
    key == b"xmlns" || key.starts_with(b"xmlns:")
}

fn check_no_attributes(
    reader: &NsReader<&[u8]>,
    start: &BytesStart<'_>,
    element: &str,
) -> Result<(), PlanError> {
    for attribute in start.attributes().with_checks(false) {
        let attribute = attribute.map_err(|source| PlanError::Malformed {
            position: reader.buffer_position(),
            source: source.into(),
        })?;
        let key = attribute.key.as_ref();
        if !is_namespace_declaration(key) {
            return Err(PlanError::BadAttribute {
                element: element.to_owned(),
                attribute: lossy(key),
                value: lossy(&attribute.value),
                expected: "no attributes",
            });
        }
    }
    Ok(())
}

/// Reads one `<vgpu:vgpu .../>` entry; `index` is 1-based for messages.
fn metadata_entry(
    reader: &NsReader<&[u8]>,
    start: &BytesStart<'_>,
    index: usize,
) -> Result<MetadataEntry, PlanError> {
    let element = format!("metadata vgpu #{index}");
    let mut kind = None;
    let mut entry = MetadataEntry {
        kind: DeviceKind::Mdev,
        uuid: None,
        profile: None,
        parent: None,
        weight: None,
        pci_address: None,
        force: false,
        placement: None,
        numa_node: None,
        numa_strict: None,
    };
    for attribute in start.attributes().with_checks(false) {
        let attribute = attribute.map_err(|source| PlanError::Malformed {
            position: reader.buffer_position(),
            source: source.into(),
        })?;
        let key = attribute.key.as_ref();
        if is_namespace_declaration(key) {
            continue;
        }
        let value = attribute
            .unescape_value()
            .map_err(|source| PlanError::Malformed {
                position: reader.buffer_position(),
                source,
            })?
            .into_owned();
        let bad = |attribute: &str, expected| PlanError::BadAttribute {
            element: element.clone(),
            attribute: attribute.to_owned(),
            value: value.clone(),
            expected,
        };
        match key {
            b"kind" => {
                kind = Some(
                    DeviceKind::from_attribute(&value)
                        .ok_or_else(|| bad("kind", "mdev, vf or passthrough"))?,
                )
            }
            b"profile" => {
                if !is_plain_name(&value) {
                    return Err(bad(
                        "profile",
                        "a profile name (1-128 printable characters, no spaces)",
                    ));
                }
                entry.profile = Some(value);
            }
            b"parent" => {
                if !is_plain_name(&value) || value.contains('/') {
                    return Err(bad(
                        "parent",
                        "a parent PCI address such as 0000:3b:00.0, or a parent name",
                    ));
                }
                entry.parent = Some(value);
            }
            b"uuid" => {
                entry.uuid =
                    Some(
                        Uuid::parse_any_spelling(value.trim()).map_err(|_| PlanError::BadUuid {
                            element: format!("{element} uuid"),
                            value: value.clone(),
                        })?,
                    )
            }
            b"weight" => {
                entry.weight = Some(
                    value
                        .trim()
                        .parse::<u32>()
                        .map_err(|_| bad("weight", "a whole number"))?,
                )
            }
            b"pci_address" => {
                entry.pci_address = Some(value.trim().parse::<PciAddress>().map_err(|source| {
                    PlanError::BadPciAddress {
                        element: format!("{element} pci_address"),
                        source: source.into(),
                    }
                })?)
            }
            b"force" => {
                entry.force = match value.trim() {
                    "yes" => true,
                    "no" => false,
                    _ => return Err(bad("force", "yes or no")),
                }
            }
            b"placement" => {
                entry.placement = Some(match value.trim() {
                    "pack" => "pack",
                    "spread" => "spread",
                    _ => return Err(bad("placement", "pack or spread")),
                })
            }
            b"numa_node" => {
                entry.numa_node = Some(
                    value
                        .trim()
                        .parse::<u32>()
                        .map_err(|_| bad("numa_node", "a NUMA node number (0 or more)"))?,
                )
            }
            b"numa_strict" => {
                entry.numa_strict = Some(match value.trim() {
                    "yes" => true,
                    "no" => false,
                    _ => return Err(bad("numa_strict", "yes or no")),
                })
            }
            other => {
                return Err(PlanError::BadAttribute {
                    element,
                    attribute: lossy(other),
                    value,
                    expected: "one of kind, profile, uuid, weight, parent, pci_address, force, placement, numa_node, numa_strict",
                })
            }
        }
    }
    entry.kind = kind.unwrap_or(DeviceKind::Mdev);
    if entry.kind == DeviceKind::Mdev && entry.pci_address.is_some() {
        return Err(PlanError::BadAttribute {
            element,
            attribute: "pci_address".to_owned(),
            value: entry.pci_address.map(|a| a.to_string()).unwrap_or_default(),
            expected: "no pci_address on kind mdev (an mdev is named by uuid)",
        });
    }
    if entry.kind.is_pci() {
        if let Some(uuid) = entry.uuid {
            return Err(PlanError::BadAttribute {
                element,
                attribute: "uuid".to_owned(),
                value: uuid.to_string(),
                expected: "no uuid on kind vf or passthrough (they are named by pci_address)",
            });
        }
    }
    if let (Some(strict), None) = (entry.numa_strict, entry.numa_node) {
        return Err(PlanError::BadAttribute {
            element,
            attribute: "numa_strict".to_owned(),
            value: if strict { "yes" } else { "no" }.to_owned(),
            expected: "numa_strict only together with numa_node",
        });
    }
    if entry.force && entry.kind != DeviceKind::Passthrough {
        return Err(PlanError::BadAttribute {
            element,
            attribute: "force".to_owned(),
            value: "yes".to_owned(),
            expected: "force only on kind passthrough",
        });
    }
    if entry.kind == DeviceKind::Passthrough
        && entry.profile.is_some()
        && entry.pci_address.is_none()
    {
        // A passthrough is a specific device; a profile alone cannot choose one for libvirt.
        return Err(PlanError::MissingAttribute {
            element,
            attribute: "pci_address",
        });
    }
    Ok(entry)
}

/// Names we pass on to the service: printable ASCII-ish, no whitespace, bounded.
fn is_plain_name(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 128
        && value.chars().all(|c| !c.is_control() && !c.is_whitespace())
}

/// Joins metadata entries with their hostdevs (see the module docs for the rules).
fn pair(parsed: ParsedDomain) -> Result<ClaimPlan, PlanError> {
    // Duplicates are refused up front so each name maps to at most one device.
    let mut names: Vec<String> = Vec::new();
    let mut note = |name: String| -> Result<(), PlanError> {
        if names.contains(&name) {
            return Err(PlanError::Duplicate(name));
        }
        names.push(name);
        Ok(())
    };
    for hostdev in &parsed.hostdevs {
        match hostdev {
            HostdevRef::Mdev(uuid) => note(format!("mdev UUID {uuid}"))?,
            HostdevRef::Pci { address, .. } => note(format!("PCI address {address}"))?,
        }
    }
    let mut metadata_names: Vec<String> = Vec::new();
    for entry in &parsed.metadata {
        let name = match (entry.uuid, entry.pci_address) {
            (Some(uuid), _) => format!("mdev UUID {uuid}"),
            (None, Some(address)) => format!("PCI address {address}"),
            (None, None) => continue,
        };
        if metadata_names.contains(&name) {
            return Err(PlanError::Duplicate(name));
        }
        metadata_names.push(name);
    }

    let mut used = vec![false; parsed.hostdevs.len()];
    let mut devices = Vec::with_capacity(parsed.metadata.len() + parsed.hostdevs.len());
    // First the entries that name their device, so the unnamed ones only take what is left.
    let mut slots: Vec<Option<ClaimedDevice>> = vec![None; parsed.metadata.len()];
    for (position, entry) in parsed.metadata.iter().enumerate() {
        let found = match (entry.uuid, entry.pci_address) {
            (Some(uuid), _) => parsed
                .hostdevs
                .iter()
                .position(|h| matches!(h, HostdevRef::Mdev(u) if *u == uuid)),
            (None, Some(address)) => parsed
                .hostdevs
                .iter()
                .position(|h| matches!(h, HostdevRef::Pci { address: a, .. } if *a == address)),
            (None, None) => continue,
        };
        let source = match found {
            Some(index) => {
                check_passthrough_unmanaged(position, entry, &parsed.hostdevs[index])?;
                used[index] = true;
                DeviceSource::MetadataAndHostdev
            }
            None => DeviceSource::Metadata,
        };
        slots[position] = Some(device_from_entry(
            entry,
            entry.uuid,
            entry.pci_address,
            source,
        ));
    }
    for (position, entry) in parsed.metadata.iter().enumerate() {
        if slots[position].is_some() {
            continue;
        }
        let candidate = parsed.hostdevs.iter().enumerate().position(|(index, h)| {
            !used[index]
                && match (entry.kind, h) {
                    (DeviceKind::Mdev, HostdevRef::Mdev(_)) => true,
                    (DeviceKind::Vf | DeviceKind::Passthrough, HostdevRef::Pci { managed, .. }) => {
                        !managed
                    }
                    _ => false,
                }
        });
        // A pass-through with only a managed PCI hostdev left: say what is wrong with it
        // rather than that nothing could be paired.
        let candidate = candidate.or_else(|| {
            (entry.kind == DeviceKind::Passthrough)
                .then(|| {
                    parsed.hostdevs.iter().enumerate().position(|(index, h)| {
                        !used[index] && matches!(h, HostdevRef::Pci { managed: true, .. })
                    })
                })
                .flatten()
        });
        if let Some(index) = candidate {
            check_passthrough_unmanaged(position, entry, &parsed.hostdevs[index])?;
        }
        let Some(index) = candidate else {
            return Err(PlanError::Unpaired {
                index: position + 1,
                kind: entry.kind.as_str(),
                profile: entry.profile.clone().unwrap_or_default(),
                key: if entry.kind.is_pci() {
                    "pci_address"
                } else {
                    "uuid"
                },
            });
        };
        used[index] = true;
        let (uuid, address) = match &parsed.hostdevs[index] {
            HostdevRef::Mdev(uuid) => (Some(*uuid), None),
            HostdevRef::Pci { address, .. } => (None, Some(*address)),
        };
        slots[position] = Some(device_from_entry(
            entry,
            uuid,
            address,
            DeviceSource::MetadataAndHostdev,
        ));
    }
    devices.extend(slots.into_iter().flatten());
    for (index, hostdev) in parsed.hostdevs.iter().enumerate() {
        if used[index] {
            continue;
        }
        let device = match hostdev {
            HostdevRef::Mdev(uuid) => ClaimedDevice {
                kind: DeviceKind::Mdev,
                uuid: Some(*uuid),
                profile: None,
                parent: None,
                weight: None,
                pci_address: None,
                force: false,
                placement: None,
                numa_node: None,
                numa_strict: false,
                source: DeviceSource::Hostdev,
            },
            // A managed PCI hostdev is libvirt's to bind and unbind; only unmanaged ones can be
            // VFs the service prepared.
            HostdevRef::Pci { managed: true, .. } => continue,
            HostdevRef::Pci {
                address,
                managed: false,
            } => ClaimedDevice {
                kind: DeviceKind::Vf,
                uuid: None,
                profile: None,
                parent: None,
                weight: None,
                pci_address: Some(*address),
                force: false,
                placement: None,
                numa_node: None,
                numa_strict: false,
                source: DeviceSource::Hostdev,
            },
        };
        devices.push(device);
    }
    Ok(ClaimPlan {
        domain_name: parsed.name,
        domain_uuid: parsed.uuid,
        devices,
    })
}

/// A pass-through entry must be attached by an unmanaged PCI hostdev (the service binds it).
fn check_passthrough_unmanaged(
    position: usize,
    entry: &MetadataEntry,
    hostdev: &HostdevRef,
) -> Result<(), PlanError> {
    match (entry.kind, hostdev) {
        (
            DeviceKind::Passthrough,
            HostdevRef::Pci {
                address,
                managed: true,
            },
        ) => Err(PlanError::ManagedPassthrough {
            index: position + 1,
            address: *address,
        }),
        _ => Ok(()),
    }
}

fn device_from_entry(
    entry: &MetadataEntry,
    uuid: Option<Uuid>,
    pci_address: Option<PciAddress>,
    source: DeviceSource,
) -> ClaimedDevice {
    ClaimedDevice {
        kind: entry.kind,
        uuid,
        profile: entry.profile.clone(),
        parent: entry.parent.clone(),
        weight: entry.weight,
        pci_address,
        force: entry.force,
        placement: entry.placement,
        numa_node: entry.numa_node,
        numa_strict: entry.numa_strict.unwrap_or(false),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn uuid(text: &str) -> Uuid {
        Uuid::parse(text).unwrap()
    }

    fn address(text: &str) -> PciAddress {
        text.parse().unwrap()
    }

    /// Wraps a real `<hostdev>` fragment in a minimal domain.
    fn domain_around(fragment: &[u8]) -> Vec<u8> {
        let mut xml = b"<domain type='kvm'><name>wrapped</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid><devices>\n".to_vec();
        xml.extend_from_slice(fragment);
        xml.extend_from_slice(b"</devices></domain>\n");
        xml
    }

    #[test]
    fn plain_domain_has_an_empty_plan() {
        let xml = fixture("domains/plain.xml");
        assert!(!crate::scan::may_hold_vgpus(&xml));
        let plan = plan_from_xml(&xml).unwrap();
        assert!(plan.is_empty());
        assert_eq!(plan.domain_name.as_deref(), Some("web-frontend"));
        assert_eq!(
            plan.domain_uuid,
            Some(uuid("9f6b1a36-5d2e-4c7a-8a0e-2b7f4f0a6c11"))
        );
    }

    #[test]
    fn managed_pci_and_usb_hostdevs_are_libvirts_not_ours() {
        let xml = fixture("domains/nic-passthrough.xml");
        assert!(
            crate::scan::may_hold_vgpus(&xml),
            "a <hostdev> must force the full parse"
        );
        assert!(plan_from_xml(&xml).unwrap().is_empty());
    }

    #[test]
    fn several_metadata_vgpus_pair_with_their_hostdevs() {
        let plan = plan_from_xml(&fixture("domains/metadata-several.xml")).unwrap();
        assert_eq!(
            plan.domain_uuid,
            Some(uuid("4dea22b3-1d52-d8f3-2516-782e98ab3fa0"))
        );
        assert!(plan.declares_vgpus());
        assert_eq!(
            plan.devices,
            vec![
                ClaimedDevice {
                    kind: DeviceKind::Mdev,
                    uuid: Some(uuid("c2177883-f1bb-47f0-914d-32a22e3a8804")),
                    profile: Some("nvidia-a16-4q".into()),
                    parent: Some("0000:3b:00.0".into()),
                    weight: Some(200),
                    pci_address: None,
                    force: false,
                    placement: None,
                    numa_node: None,
                    numa_strict: false,
                    source: DeviceSource::MetadataAndHostdev,
                },
                // No uuid in the metadata: takes the hostdev no entry names.
                ClaimedDevice {
                    kind: DeviceKind::Mdev,
                    uuid: Some(uuid("8a4e1c5f-2b6d-4e9a-a1f3-7c0d2e5b9f41")),
                    profile: Some("nvidia-a16-2q".into()),
                    parent: None,
                    weight: None,
                    pci_address: None,
                    force: false,
                    placement: None,
                    numa_node: None,
                    numa_strict: false,
                    source: DeviceSource::MetadataAndHostdev,
                },
                ClaimedDevice {
                    kind: DeviceKind::Vf,
                    uuid: None,
                    profile: Some("l40s-12q".into()),
                    parent: None,
                    weight: None,
                    pci_address: Some(address("0000:3b:00.4")),
                    force: false,
                    placement: None,
                    numa_node: None,
                    numa_strict: false,
                    source: DeviceSource::MetadataAndHostdev,
                },
            ]
        );
    }

    #[test]
    fn default_namespace_metadata_is_recognised_and_foreign_metadata_ignored() {
        let plan = plan_from_xml(&fixture("domains/metadata-default-namespace.xml")).unwrap();
        assert_eq!(plan.devices.len(), 1);
        assert_eq!(plan.devices[0].profile.as_deref(), Some("gvt-g-v5-4"));
        assert_eq!(plan.devices[0].source, DeviceSource::MetadataAndHostdev);
    }

    #[test]
    fn a_lone_vgpu_element_with_any_prefix_works() {
        let plan = plan_from_xml(&fixture("domains/metadata-lone-vgpu.xml")).unwrap();
        assert_eq!(plan.devices.len(), 1);
        let device = &plan.devices[0];
        assert_eq!(device.profile.as_deref(), Some("mtty-2"));
        assert_eq!(device.parent.as_deref(), Some("mtty"));
        assert_eq!(
            device.uuid,
            Some(uuid("b7c1e8a2-44f0-4d3b-9e6a-5f2d8c1a0b93"))
        );
    }

    #[test]
    fn unprefixed_children_of_our_element_are_ours_as_virsh_metadata_writes_them() {
        let plan = plan_from_xml(&fixture("domains/metadata-virsh-set.xml")).unwrap();
        let described: Vec<String> = plan.devices.iter().map(ToString::to_string).collect();
        assert_eq!(
            described,
            vec![
                "mdev 9d3c7b1a-5e2f-4a8b-8c6d-0f1e2a3b4c5d (profile 'mtty-1')",
                "mdev 2b4d6f8a-0c1e-4a3b-9d5f-7e9a1c3b5d7f (profile 'mtty-1')",
            ]
        );
        assert_eq!(plan.devices[0].weight, Some(50));
        assert!(plan.devices.iter().all(ClaimedDevice::is_declared));
    }

    #[test]
    fn vgpu_nested_in_a_vgpu_is_refused() {
        let xml = format!(
            "<domain><metadata><v:vgpu xmlns:v='{NAMESPACE}' profile='a'><v:vgpu profile='b'/></v:vgpu></metadata></domain>"
        );
        assert!(matches!(
            plan_from_xml(xml.as_bytes()).unwrap_err(),
            PlanError::UnknownElement { .. }
        ));
    }

    #[test]
    fn unmanaged_pci_hostdev_is_a_vf_reference_and_managed_one_is_skipped() {
        let plan = plan_from_xml(&fixture("domains/vf-hostdev.xml")).unwrap();
        assert_eq!(plan.devices.len(), 1);
        assert_eq!(plan.devices[0].kind, DeviceKind::Vf);
        assert_eq!(plan.devices[0].pci_address, Some(address("0000:3b:01.2")));
        assert!(!plan.declares_vgpus());
    }

    #[test]
    fn passthrough_metadata_claims_an_unmanaged_hostdev_by_address() {
        let plan = plan_from_xml(&fixture("domains/passthrough.xml")).unwrap();
        assert_eq!(plan.devices.len(), 1);
        assert_eq!(plan.devices[0].kind, DeviceKind::Passthrough);
        assert_eq!(plan.devices[0].pci_address, Some(address("0000:65:00.0")));
        assert_eq!(plan.devices[0].source, DeviceSource::MetadataAndHostdev);
        assert!(!plan.devices[0].force);
    }

    const GPU_HOSTDEV_MANAGED: &str = "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x65' slot='0x00' function='0x0'/></source></hostdev>";

    #[test]
    fn passthrough_with_a_managed_hostdev_is_refused_naming_entry_and_address() {
        // Named by address, and paired by position: the same refusal.
        for entry in [
            "<vgpu:vgpu kind='passthrough' pci_address='0000:65:00.0'/>",
            "<vgpu:vgpu kind='passthrough'/>",
        ] {
            let error = plan_from_xml(&with_metadata(entry, GPU_HOSTDEV_MANAGED)).unwrap_err();
            assert!(
                matches!(error, PlanError::ManagedPassthrough { index: 1, .. }),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(message.contains("0000:65:00.0"), "{message}");
            assert!(message.contains("managed='no'"), "{message}");
        }
        // A managed NIC next to the GPU's unmanaged hostdev: the entry takes the GPU's.
        let unmanaged = GPU_HOSTDEV_MANAGED
            .replace("managed='yes'", "managed='no'")
            .replace("bus='0x65'", "bus='0x66'");
        let nic = GPU_HOSTDEV_MANAGED.replace("bus='0x65'", "bus='0x02'");
        let plan = plan_from_xml(&with_metadata(
            "<vgpu:vgpu kind='passthrough'/>",
            &format!("{nic}{unmanaged}"),
        ))
        .unwrap();
        assert_eq!(plan.devices.len(), 1);
        assert_eq!(plan.devices[0].pci_address, Some(address("0000:66:00.0")));
    }

    #[test]
    fn placement_attributes_are_checked_and_carried() {
        let plan = plan_from_xml(&with_metadata(
            "<vgpu:vgpu profile='a' placement='spread' numa_node='1' numa_strict='yes'/>",
            MDEV_HOSTDEV,
        ))
        .unwrap();
        assert_eq!(plan.devices[0].placement, Some("spread"));
        assert_eq!(plan.devices[0].numa_node, Some(1));
        assert!(plan.devices[0].numa_strict);
        let cases = [
            (
                "<vgpu:vgpu profile='a' placement='Spread'/>",
                "metadata vgpu #1 has placement='Spread'; expected pack or spread",
            ),
            (
                "<vgpu:vgpu profile='a' numa_node='-1'/>",
                "metadata vgpu #1 has numa_node='-1'; expected a NUMA node number (0 or more)",
            ),
            (
                "<vgpu:vgpu profile='a' numa_node='0' numa_strict='1'/>",
                "metadata vgpu #1 has numa_strict='1'; expected yes or no",
            ),
            (
                "<vgpu:vgpu profile='a' numa_strict='yes'/>",
                "metadata vgpu #1 has numa_strict='yes'; expected numa_strict only together with numa_node",
            ),
        ];
        for (entry, expected) in cases {
            let error = plan_from_xml(&with_metadata(entry, MDEV_HOSTDEV)).unwrap_err();
            assert_eq!(error.to_string(), expected, "{entry}");
        }
    }

    #[test]
    fn force_attribute_is_yes_or_no_and_passthrough_only() {
        let unmanaged = GPU_HOSTDEV_MANAGED.replace("managed='yes'", "managed='no'");
        let plan = plan_from_xml(&with_metadata(
            "<vgpu:vgpu kind='passthrough' pci_address='0000:65:00.0' force='yes'/>",
            &unmanaged,
        ))
        .unwrap();
        assert!(plan.devices[0].force);
        let error = plan_from_xml(&with_metadata(
            "<vgpu:vgpu kind='passthrough' force='true'/>",
            &unmanaged,
        ))
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "metadata vgpu #1 has force='true'; expected yes or no"
        );
        let error = plan_from_xml(&with_metadata(
            "<vgpu:vgpu profile='a' force='yes'/>",
            MDEV_HOSTDEV,
        ))
        .unwrap_err();
        assert!(
            error.to_string().contains("force only on kind passthrough"),
            "{error}"
        );
    }

    #[test]
    fn real_hostdev_samples_become_mdev_references() {
        let samples = [
            (
                "real-world/tesla-p10-minimal.xml",
                "3eb9d718-0b31-11ee-91aa-2b17f51ee12d",
            ),
            (
                "real-world/gvt-g-rom-bar.xml",
                "5bfcd486-c5eb-43e4-a5ee-97366690106f",
            ),
            (
                "real-world/gvt-g-virt-manager.xml",
                "ae6411d7-151d-485d-98e7-fa377c478da0",
            ),
            (
                "real-world/gvt-g-display-on.xml",
                "ae6411d7-151d-485d-98e7-fa377c478da0",
            ),
        ];
        for (name, expected) in samples {
            let xml = domain_around(&fixture(name));
            assert!(crate::scan::may_hold_vgpus(&xml), "{name}");
            let plan = plan_from_xml(&xml).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(plan.devices.len(), 1, "{name}");
            let device = &plan.devices[0];
            assert_eq!(device.kind, DeviceKind::Mdev, "{name}");
            assert_eq!(device.uuid, Some(uuid(expected)), "{name}");
            // The guest-side <address type='pci'> of the GVT-g sample is not a VF reference.
            assert_eq!(device.pci_address, None, "{name}");
            assert_eq!(device.source, DeviceSource::Hostdev, "{name}");
        }
    }

    #[test]
    fn malformed_xml_is_refused_with_a_position() {
        let error = plan_from_xml(&fixture("domains/malformed.xml")).unwrap_err();
        assert!(matches!(error, PlanError::Malformed { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with("domain XML is not well-formed near byte "),
            "{error}"
        );
    }

    #[test]
    fn truncated_and_empty_documents_are_refused() {
        let xml = fixture("domains/metadata-several.xml");
        let cut = &xml[..xml.len() / 2];
        let error = plan_from_xml(cut).unwrap_err();
        assert!(
            matches!(error, PlanError::Truncated(_) | PlanError::Malformed { .. }),
            "{error:?}"
        );
        assert!(matches!(plan_from_xml(b"").unwrap_err(), PlanError::Empty));
        assert!(matches!(
            plan_from_xml(b"  <!-- only a comment -->\n").unwrap_err(),
            PlanError::Empty
        ));
    }

    #[test]
    fn dtds_and_entities_are_refused_not_expanded() {
        let error = plan_from_xml(&fixture("domains/entities.xml")).unwrap_err();
        assert!(matches!(error, PlanError::DocType { .. }), "{error:?}");
        // An undefined entity reference without a DTD is refused too, not passed through.
        let xml = b"<domain><name>&boom;</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid></domain>";
        assert!(matches!(
            plan_from_xml(xml).unwrap_err(),
            PlanError::Malformed { .. }
        ));
        // The five predefined ones are decoded.
        let xml = b"<domain><name>a&amp;b</name></domain>";
        assert_eq!(
            plan_from_xml(xml).unwrap().domain_name.as_deref(),
            Some("a&b")
        );
    }

    #[test]
    fn huge_input_is_refused_before_parsing() {
        let mut xml = b"<domain><name>big</name><description>".to_vec();
        xml.resize(MAX_DOMAIN_XML_BYTES + 1, b'x');
        let error = plan_from_xml(&xml).unwrap_err();
        assert!(
            matches!(error, PlanError::TooLarge { size, .. } if size == MAX_DOMAIN_XML_BYTES + 1)
        );
    }

    #[test]
    fn wrong_root_is_refused() {
        let error = plan_from_xml(b"<network><name>default</name></network>").unwrap_err();
        assert_eq!(
            error.to_string(),
            "domain XML root is <network>, expected a single <domain>"
        );
        let error = plan_from_xml(b"<domain/><domain/>").unwrap_err();
        assert!(
            matches!(
                error,
                PlanError::NotADomain(_) | PlanError::Malformed { .. }
            ),
            "{error:?}"
        );
    }

    fn with_metadata(entries: &str, devices: &str) -> Vec<u8> {
        format!(
            "<domain type='kvm'><name>t</name><uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid><metadata><vgpu:vgpus xmlns:vgpu='{NAMESPACE}'>{entries}</vgpu:vgpus></metadata><devices>{devices}</devices></domain>"
        )
        .into_bytes()
    }

    const MDEV_HOSTDEV: &str = "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source></hostdev>";

    #[test]
    fn bad_metadata_is_refused_naming_the_entry_and_attribute() {
        let cases: [(&str, &str); 8] = [
            ("<vgpu:vgpu profle='a'/>", "metadata vgpu #1 has profle='a'; expected one of kind, profile, uuid, weight, parent, pci_address, force, placement, numa_node, numa_strict"),
            ("<vgpu:vgpu profile='a' weight='heavy'/>", "metadata vgpu #1 has weight='heavy'; expected a whole number"),
            ("<vgpu:vgpu profile='a' kind='gpu'/>", "metadata vgpu #1 has kind='gpu'; expected mdev, vf or passthrough"),
            ("<vgpu:vgpu profile='a' uuid='not-a-uuid'/>", "metadata vgpu #1 uuid holds 'not-a-uuid', which is not a UUID"),
            ("<vgpu:vgpu profile='a' uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/><vgpu:vgpu profile='b' kind='vf' pci_address='3b:00.4'/>", "metadata vgpu #2 pci_address has a bad PCI address"),
            ("<vgpu:vgpu profile='two words'/>", "metadata vgpu #1 has profile='two words'; expected a profile name (1-128 printable characters, no spaces)"),
            ("<vgpu:gpu profile='a'/>", "<gpu> in namespace https://mdev-manager.org/xmlns/vgpu/1 is not known (expected vgpus or vgpu)"),
            ("<vgpu:vgpu profile='a' kind='vf' uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/>", "metadata vgpu #1 has uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'; expected no uuid on kind vf or passthrough (they are named by pci_address)"),
        ];
        for (entries, expected) in cases {
            let error = plan_from_xml(&with_metadata(entries, MDEV_HOSTDEV)).unwrap_err();
            assert_eq!(error.to_string(), expected, "{entries}");
        }
    }

    #[test]
    fn unpaired_metadata_entry_is_refused() {
        let entries = "<vgpu:vgpu profile='a'/><vgpu:vgpu profile='b'/>";
        let error = plan_from_xml(&with_metadata(entries, MDEV_HOSTDEV)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "metadata vgpu #2 (kind mdev, profile 'b') names no uuid and the domain has no unpaired <hostdev> to attach it"
        );
    }

    #[test]
    fn metadata_entry_naming_a_uuid_without_hostdev_is_still_claimed() {
        let entries = "<vgpu:vgpu profile='a' uuid='0b7ab3b6-6a0e-4c1b-9d59-8c1e5f2a7d30'/>";
        let plan = plan_from_xml(&with_metadata(entries, MDEV_HOSTDEV)).unwrap();
        assert_eq!(plan.devices.len(), 2);
        assert_eq!(plan.devices[0].source, DeviceSource::Metadata);
        assert_eq!(plan.devices[1].source, DeviceSource::Hostdev);
    }

    #[test]
    fn duplicate_uuids_are_refused() {
        let devices = format!("{MDEV_HOSTDEV}{MDEV_HOSTDEV}");
        let error = plan_from_xml(&with_metadata("", &devices)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "mdev UUID c2177883-f1bb-47f0-914d-32a22e3a8804 is named by two devices of the domain"
        );
    }

    #[test]
    fn hostdev_without_source_uuid_is_refused() {
        let devices = "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source/></hostdev>";
        let error = plan_from_xml(&with_metadata("", devices)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "<hostdev type='mdev'> #1 <source><address> lacks the uuid attribute"
        );
    }

    #[test]
    fn bad_hostdev_uuid_is_named() {
        let devices =
            "<hostdev mode='subsystem' type='mdev'><source><address uuid='zz'/></source></hostdev>";
        let error = plan_from_xml(&with_metadata("", devices)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "<hostdev type='mdev'> #1 <source><address> uuid holds 'zz', which is not a UUID"
        );
    }

    #[test]
    fn bad_domain_uuid_is_named() {
        let xml = b"<domain><name>x</name><uuid>1234</uuid></domain>";
        assert_eq!(
            plan_from_xml(xml).unwrap_err().to_string(),
            "<domain><uuid> holds '1234', which is not a UUID"
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap stand-in until the fuzzer (issue #9) runs: every prefix and a few mutations of
        // a real fixture must give Ok or a typed error.
        let xml = fixture("domains/metadata-several.xml");
        for end in 0..xml.len() {
            let _ = plan_from_xml(&xml[..end]);
        }
        for (index, replacement) in [b'<', b'>', b'\'', b'&', 0u8, 0xff]
            .into_iter()
            .cycle()
            .take(600)
            .enumerate()
        {
            let mut mutated = xml.clone();
            let at = (index * 7919) % mutated.len();
            mutated[at] = replacement;
            let _ = plan_from_xml(&mutated);
        }
    }
}
