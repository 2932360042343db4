//! The vendor-neutral view of a type a parent offers: what resolution and placement work
//! on, whatever driver it came from.

use super::{
    CreatableVgpuType, GvtDescription, MbochsDescription, MdevTypeInfo, MdpyDescription,
    NvidiaDescription, NvidiaTypeName, ParseError, Resolution, MIB,
};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A type description, recognised by its shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TypeDescription {
    /// The type has no description (mtty) or an empty one.
    Absent,
    /// NVIDIA `num_heads=..., framebuffer=..., ...`.
    Nvidia(NvidiaDescription),
    /// Intel GVT-g `low_gm_size: ...`.
    Gvt(GvtDescription),
    /// mbochs `virtual display, N MB video memory`.
    Mbochs(MbochsDescription),
    /// mdpy `virtual display, WxH framebuffer`.
    Mdpy(MdpyDescription),
    /// Text of no known shape, kept verbatim (trailing whitespace removed).
    Unrecognised(String),
}

impl TypeDescription {
    /// Recognises and parses a description. Text of a known shape that does not parse is an
    /// error; text of no known shape is [`TypeDescription::Unrecognised`].
    pub fn parse(text: Option<&str>) -> Result<TypeDescription, ParseError> {
        let Some(text) = text.map(str::trim_end).filter(|t| !t.trim().is_empty()) else {
            return Ok(TypeDescription::Absent);
        };
        let trimmed = text.trim_start();
        if trimmed.starts_with("num_heads=") || trimmed.contains("framebuffer=") {
            return NvidiaDescription::parse(text).map(TypeDescription::Nvidia);
        }
        if trimmed.starts_with("low_gm_size") {
            return GvtDescription::parse(text).map(TypeDescription::Gvt);
        }
        if trimmed.starts_with("virtual display, ") {
            if trimmed.ends_with("video memory") {
                return MbochsDescription::parse(trimmed).map(TypeDescription::Mbochs);
            }
            if trimmed.ends_with("framebuffer") {
                return MdpyDescription::parse(trimmed).map(TypeDescription::Mdpy);
            }
        }
        Ok(TypeDescription::Unrecognised(text.to_owned()))
    }
}

/// Whose driver offers a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Vendor {
    /// NVIDIA vGPU (mdev or SR-IOV vendor VFIO).
    Nvidia,
    /// Intel GVT-g.
    IntelGvt,
    /// AMD MxGPU (SR-IOV VFs).
    Amd,
    /// The kernel's mbochs sample driver.
    Mbochs,
    /// The kernel's mdpy sample driver.
    Mdpy,
    /// The kernel's mtty sample driver.
    Mtty,
    /// Anything else.
    Other,
}

impl Vendor {
    /// The lower-case name used in profiles and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::IntelGvt => "intel-gvt",
            Vendor::Amd => "amd",
            Vendor::Mbochs => "mbochs",
            Vendor::Mdpy => "mdpy",
            Vendor::Mtty => "mtty",
            Vendor::Other => "other",
        }
    }

    /// Guesses the vendor from an mdev type id's driver prefix (`nvidia-256` → NVIDIA).
    pub fn from_type_id(type_id: &str) -> Vendor {
        let prefixes = [
            ("nvidia-", Vendor::Nvidia),
            ("i915-", Vendor::IntelGvt),
            ("mbochs-", Vendor::Mbochs),
            ("mdpy-", Vendor::Mdpy),
            ("mtty-", Vendor::Mtty),
        ];
        prefixes
            .iter()
            .find(|(prefix, _)| type_id.starts_with(prefix))
            .map_or(Vendor::Other, |(_, vendor)| *vendor)
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an instance of a type shares the physical GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// Shares the engines in time slices (NVIDIA time-sliced, GVT-g, emulated samples).
    TimeSliced,
    /// Owns a spatial partition (an NVIDIA MIG GPU instance).
    Mig,
    /// Owns a whole SR-IOV virtual function (AMD MxGPU).
    WholeVf,
    /// Owns a whole physical GPU (PCI passthrough).
    Passthrough,
}

impl Isolation {
    /// The kebab-case name used in profiles and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::TimeSliced => "time-sliced",
            Isolation::Mig => "mig",
            Isolation::WholeVf => "whole-vf",
            Isolation::Passthrough => "passthrough",
        }
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the host creates an instance of a type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TypeSource {
    /// Write a UUID to `mdev_supported_types/<type_id>/create`.
    Mdev {
        /// The type directory name.
        type_id: String,
    },
    /// Write the id to the VF's `nvidia/current_vgpu_type` (NVIDIA SR-IOV vendor VFIO).
    NvidiaVf {
        /// The numeric vGPU type id.
        type_id: u32,
    },
    /// Hand a whole SR-IOV VF to the guest (bind it to vfio-pci).
    WholeVf,
    /// Hand a whole PCI function to the guest (bind it to vfio-pci).
    WholeDevice,
}

/// Display capabilities of a type, where the vendor says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisplayCaps {
    /// Display heads.
    pub heads: Option<u32>,
    /// Maximum resolution.
    pub max_resolution: Option<Resolution>,
}

/// One type a parent offers, in vendor-neutral terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferedType {
    /// The key of the type on its parent: the mdev type id (`nvidia-256`), the NVIDIA
    /// SR-IOV type id in decimal (`1414`), or the function's own name for whole functions.
    pub id: String,
    /// The human name (`GRID T4-2Q`, `mbochs-small`, `Single port serial`).
    pub name: String,
    /// How to create an instance.
    pub source: TypeSource,
    /// Whose driver offers it.
    pub vendor: Vendor,
    /// How an instance shares the GPU.
    pub isolation: Isolation,
    /// Framebuffer (video / graphics memory) per instance in bytes, when known.
    pub framebuffer_bytes: Option<u64>,
    /// Most instances of this type one physical GPU can hold, when the vendor says.
    pub max_instances: Option<u32>,
    /// Instances creatable now.
    pub available_instances: u32,
    /// Display capabilities.
    pub display: DisplayCaps,
    /// The vendor's fixed scheduling weight (GVT-g), when it has one.
    pub weight: Option<u32>,
    /// The numeric vendor type id (`nvidia-256` → 256, SR-IOV `1414`), when there is one.
    pub vendor_type_id: Option<u32>,
    /// The parsed NVIDIA type name, for NVIDIA types whose name parses.
    pub nvidia_name: Option<NvidiaTypeName>,
    /// The parsed description.
    pub description: TypeDescription,
    /// The PCI identity of a whole function (passthrough / whole VF); `None` for types.
    pub pci: Option<PciIdentity>,
}

/// The PCI identity of a function offered whole.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PciIdentity {
    /// PCI address, `DDDD:BB:DD.F`.
    pub address: String,
    /// Vendor id (sysfs `vendor`).
    pub vendor_id: u16,
    /// Device id (sysfs `device`).
    pub device_id: u16,
    /// 24-bit class code (sysfs `class`, e.g. `0x030200`).
    pub class_code: u32,
}

impl OfferedType {
    /// Turns an mdev type (its name and description) into an offered type.
    pub fn from_mdev(info: &MdevTypeInfo) -> Result<OfferedType, ParseError> {
        let description = TypeDescription::parse(info.description.as_deref())?;
        let name = info.display_name().to_owned();
        let mut vendor = Vendor::from_type_id(&info.type_id);
        if matches!(description, TypeDescription::Nvidia(_)) {
            // Some NVIDIA hosts name type directories after another driver (`vfio-pci-575`).
            vendor = Vendor::Nvidia;
        } else if matches!(description, TypeDescription::Gvt(_)) {
            vendor = Vendor::IntelGvt;
        }
        let nvidia_name = if vendor == Vendor::Nvidia {
            NvidiaTypeName::parse(&name).ok()
        } else {
            None
        };
        let vendor_type_id = if vendor == Vendor::Nvidia {
            info.type_id
                .rsplit_once('-')
                .and_then(|(_, n)| super::parse_decimal_u32(n))
        } else {
            None
        };
        let mut offered = OfferedType {
            id: info.type_id.clone(),
            name,
            source: TypeSource::Mdev {
                type_id: info.type_id.clone(),
            },
            vendor,
            isolation: isolation_of(nvidia_name.as_ref()),
            framebuffer_bytes: nvidia_name.as_ref().map(NvidiaTypeName::framebuffer_bytes),
            max_instances: None,
            available_instances: info.available_instances,
            display: DisplayCaps::default(),
            weight: None,
            vendor_type_id,
            nvidia_name,
            description,
            pci: None,
        };
        offered.apply_description();
        Ok(offered)
    }

    /// Turns one line of an NVIDIA VF's `creatable_vgpu_types` into an offered type: the
    /// VF can host one instance of it now. Framebuffer comes from the name.
    pub fn from_creatable(entry: &CreatableVgpuType) -> OfferedType {
        let nvidia_name = NvidiaTypeName::parse(&entry.name).ok();
        OfferedType {
            id: entry.id.to_string(),
            name: entry.name.clone(),
            source: TypeSource::NvidiaVf { type_id: entry.id },
            vendor: Vendor::Nvidia,
            isolation: isolation_of(nvidia_name.as_ref()),
            framebuffer_bytes: nvidia_name.as_ref().map(NvidiaTypeName::framebuffer_bytes),
            max_instances: None,
            available_instances: 1,
            display: DisplayCaps::default(),
            weight: None,
            vendor_type_id: Some(entry.id),
            nvidia_name,
            description: TypeDescription::Absent,
            pci: None,
        }
    }

    /// A whole function handed to a guest: an SR-IOV VF ([`Isolation::WholeVf`]) or a
    /// whole GPU ([`Isolation::Passthrough`]). Its id is its PCI address; the vendor comes
    /// from the PCI vendor id. `available` is whether it is free.
    pub fn whole_function(
        pci: PciIdentity,
        name: &str,
        isolation: Isolation,
        framebuffer_bytes: Option<u64>,
        available: bool,
    ) -> OfferedType {
        let source = if isolation == Isolation::WholeVf {
            TypeSource::WholeVf
        } else {
            TypeSource::WholeDevice
        };
        let vendor = match pci.vendor_id {
            0x10de => Vendor::Nvidia,
            0x1002 => Vendor::Amd,
            _ => Vendor::Other,
        };
        OfferedType {
            id: pci.address.clone(),
            name: name.to_owned(),
            source,
            vendor,
            isolation,
            framebuffer_bytes,
            max_instances: Some(1),
            available_instances: u32::from(available),
            display: DisplayCaps::default(),
            weight: None,
            vendor_type_id: None,
            nvidia_name: None,
            description: TypeDescription::Absent,
            pci: Some(pci),
        }
    }

    fn apply_description(&mut self) {
        match &self.description {
            TypeDescription::Nvidia(d) => {
                self.framebuffer_bytes = Some(d.framebuffer_bytes);
                self.max_instances = d.max_instance;
                self.display = DisplayCaps {
                    heads: d.num_heads,
                    max_resolution: d.max_resolution,
                };
            }
            TypeDescription::Gvt(d) => {
                self.framebuffer_bytes = Some(d.graphics_memory_bytes());
                self.weight = Some(d.weight);
                self.display = DisplayCaps {
                    heads: None,
                    max_resolution: Some(d.resolution),
                };
            }
            TypeDescription::Mbochs(d) => {
                self.framebuffer_bytes = Some(u64::from(d.video_memory_mib) * MIB);
                self.display.heads = Some(1);
            }
            TypeDescription::Mdpy(d) => {
                self.display = DisplayCaps {
                    heads: Some(1),
                    max_resolution: Some(d.resolution),
                };
            }
            TypeDescription::Absent | TypeDescription::Unrecognised(_) => {}
        }
    }

    /// The short type token for messages: NVIDIA's `H200-18C`, else the name.
    pub fn short_name(&self) -> String {
        self.nvidia_name
            .as_ref()
            .map_or_else(|| self.name.clone(), NvidiaTypeName::token)
    }
}

fn isolation_of(nvidia_name: Option<&NvidiaTypeName>) -> Isolation {
    if nvidia_name.is_some_and(NvidiaTypeName::is_mig_backed) {
        Isolation::Mig
    } else {
        Isolation::TimeSliced
    }
}
