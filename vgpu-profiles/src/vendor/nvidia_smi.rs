//! `nvidia-smi vgpu -q`: per physical GPU, its running vGPUs with the VM they serve, the
//! framebuffer they use, their utilization and their licence state.
//!
//! The format is indentation-structured `Key : Value` lines: `GPU <bus id>` at column 0, the
//! GPU's fields at 4 spaces, each `vGPU ID : <n>` at 4 spaces opening a record whose fields sit
//! at 8, and sections (`FB Memory Usage`, `Utilization`, `PCI`, ...) at 8 whose fields sit at
//! 12. Fields this parser does not use are skipped, so trimmed captures and newer drivers'
//! extra fields parse alike; `N/A` values read as absent.

use serde::{Deserialize, Serialize};

use super::{excerpt, parse_decimal_u32, parse_decimal_u64, Format, ParseError};

const FORMAT: Format = Format::NvidiaSmiVgpuQuery;

/// One physical GPU of `nvidia-smi vgpu -q`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuQueryGpu {
    /// Its bus id as printed (`00000000:42:00.0`).
    pub bus_id: String,
    /// `Active vGPUs`, when printed.
    pub active_vgpus: Option<u32>,
    /// Its vGPUs, in output order.
    pub vgpus: Vec<VgpuQueryRecord>,
}

impl VgpuQueryGpu {
    /// The bus id as a sysfs PCI address (`0000:42:00.0`): the 8-digit domain cut to 4 and
    /// hex digits in lower case, as `/sys/bus/pci/devices` names it.
    pub fn pci_address(&self) -> String {
        sysfs_address(&self.bus_id)
    }
}

/// An nvidia-smi bus id (`00000000:8C:00.0`) as sysfs names the device (`0000:8c:00.0`): the
/// 8-digit domain cut to 4 and hex digits in lower case.
pub fn sysfs_address(bus_id: &str) -> String {
    let lower = bus_id.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() == 8 && domain.starts_with("0000") => {
            format!("{}:{rest}", &domain[4..])
        }
        _ => lower,
    }
}

/// One running vGPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuQueryRecord {
    /// `vGPU ID` (the driver's handle).
    pub vgpu_id: u64,
    /// `VM UUID`: the libvirt domain UUID.
    pub vm_uuid: Option<String>,
    /// `VM Name`.
    pub vm_name: Option<String>,
    /// `vGPU Name` (`NVIDIA RTX Pro 6000 Blackwell DC-6Q`, `GRID P40-6Q`).
    pub vgpu_name: Option<String>,
    /// `vGPU Type` (the numeric type id), when printed.
    pub vgpu_type: Option<u32>,
    /// `MDEV UUID` (legacy mdev vGPUs), when printed.
    pub mdev_uuid: Option<String>,
    /// `License Status` as printed (`Licensed (Expiry: ...)`, `Unlicensed ...`), `None` for
    /// `N/A` or when not printed.
    pub license_status: Option<String>,
    /// `FB Memory Usage` / `Total`, MiB.
    pub fb_total_mib: Option<u64>,
    /// `FB Memory Usage` / `Used`, MiB.
    pub fb_used_mib: Option<u64>,
    /// `Utilization` / `GPU` (or `Gpu`), percent; `None` when `N/A` (MIG-backed vGPUs).
    pub gpu_utilization_percent: Option<u32>,
    /// `Utilization` / `Memory`, percent.
    pub memory_utilization_percent: Option<u32>,
}

/// Parses a whole `nvidia-smi vgpu -q` output (banner and timestamp lines before the first
/// GPU are skipped). A GPU without vGPUs has an empty list.
pub fn parse_vgpu_query(text: &str) -> Result<Vec<VgpuQueryGpu>, ParseError> {
    if text.trim().is_empty() {
        return Err(ParseError::Empty { format: FORMAT });
    }
    if text.contains("| GPU  Name") || text.lines().any(|l| l.trim_start().starts_with("+---")) {
        return Err(ParseError::WrongFormat {
            format: FORMAT,
            actual: "the `nvidia-smi vgpu` table",
        });
    }
    let mut gpus: Vec<VgpuQueryGpu> = Vec::new();
    let mut section = String::new();
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let content = line.trim_start();
        let (key, value) = match content.split_once(':') {
            Some((key, value)) if indent > 0 || !content.starts_with("GPU ") => {
                (key.trim(), Some(value.trim()))
            }
            _ => (content, None),
        };
        let unexpected = |expected: &'static str| ParseError::Unexpected {
            format: FORMAT,
            line: line_no,
            expected,
            found: excerpt(raw),
        };
        if indent == 0 {
            if let Some(bus_id) = content.strip_prefix("GPU ") {
                gpus.push(VgpuQueryGpu {
                    bus_id: bus_id.trim().to_owned(),
                    active_vgpus: None,
                    vgpus: Vec::new(),
                });
                section.clear();
                continue;
            }
            if gpus.is_empty() {
                // The banner, `Timestamp`, `Driver Version`, `Attached GPUs`.
                continue;
            }
            return Err(unexpected("`GPU <bus id>` or an indented field"));
        }
        let gpu = gpus
            .last_mut()
            .ok_or_else(|| unexpected("`GPU <bus id>` before any field"))?;
        match indent {
            4 => {
                section.clear();
                match (key, value) {
                    ("Active vGPUs", Some(value)) => gpu.active_vgpus = number_u32(key, value)?,
                    ("vGPU ID", Some(value)) => gpu.vgpus.push(VgpuQueryRecord {
                        vgpu_id: parse_decimal_u64(value)
                            .ok_or_else(|| invalid(key, value, "a decimal vGPU id"))?,
                        ..VgpuQueryRecord::default()
                    }),
                    _ => {}
                }
            }
            8 => {
                let Some(record) = gpu.vgpus.last_mut() else {
                    return Err(unexpected("`vGPU ID : <n>` before its fields"));
                };
                match value {
                    None => section = key.to_owned(),
                    Some(value) => {
                        section.clear();
                        let text = not_applicable(value).map(str::to_owned);
                        match key {
                            "VM UUID" => record.vm_uuid = text,
                            "VM Name" => record.vm_name = text,
                            "vGPU Name" => record.vgpu_name = text,
                            "vGPU Type" => record.vgpu_type = number_u32(key, value)?,
                            "MDEV UUID" => record.mdev_uuid = text,
                            "License Status" => {
                                record.license_status =
                                    text.filter(|status| !status.starts_with("N/A"))
                            }
                            _ => {}
                        }
                    }
                }
            }
            _ if indent > 8 => {
                let (Some(record), Some(value)) = (gpu.vgpus.last_mut(), value) else {
                    continue;
                };
                match (section.as_str(), key.to_ascii_lowercase().as_str()) {
                    ("FB Memory Usage", "total") => record.fb_total_mib = mib(key, value)?,
                    ("FB Memory Usage", "used") => record.fb_used_mib = mib(key, value)?,
                    ("Utilization", "gpu") => record.gpu_utilization_percent = percent(key, value)?,
                    ("Utilization", "memory") => {
                        record.memory_utilization_percent = percent(key, value)?
                    }
                    _ => {}
                }
            }
            _ => return Err(unexpected("fields indented by 4, 8 or 12 spaces")),
        }
    }
    if gpus.is_empty() {
        return Err(ParseError::MissingKey {
            format: FORMAT,
            key: "GPU <bus id>",
        });
    }
    Ok(gpus)
}

fn invalid(key: &str, value: &str, expected: &'static str) -> ParseError {
    ParseError::InvalidValue {
        format: FORMAT,
        key: key.to_owned(),
        value: excerpt(value),
        expected,
    }
}

/// `None` for `N/A`, the value otherwise.
fn not_applicable(value: &str) -> Option<&str> {
    (value != "N/A" && !value.is_empty()).then_some(value)
}

fn number_u32(key: &str, value: &str) -> Result<Option<u32>, ParseError> {
    not_applicable(value)
        .map(|v| parse_decimal_u32(v).ok_or_else(|| invalid(key, value, "a decimal number")))
        .transpose()
}

fn mib(key: &str, value: &str) -> Result<Option<u64>, ParseError> {
    not_applicable(value)
        .map(|v| {
            v.strip_suffix("MiB")
                .map(str::trim)
                .and_then(parse_decimal_u64)
                .ok_or_else(|| invalid(key, value, "`<n> MiB`"))
        })
        .transpose()
}

fn percent(key: &str, value: &str) -> Result<Option<u32>, ParseError> {
    not_applicable(value)
        .map(|v| {
            v.strip_suffix('%')
                .map(str::trim)
                .and_then(parse_decimal_u32)
                .filter(|p| *p <= 100)
                .ok_or_else(|| invalid(key, value, "`<0..100> %`"))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_name_the_key_and_value() {
        let text = "GPU 00000000:01:00.0\n    vGPU ID : 7\n        FB Memory Usage\n            Used : lots\n";
        let error = parse_vgpu_query(text).unwrap_err().to_string();
        assert!(error.contains("Used") && error.contains("lots"), "{error}");
        let error = parse_vgpu_query("GPU 00000000:01:00.0\n        VM UUID : x\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("line 2"), "{error}");
        assert!(matches!(
            parse_vgpu_query("  \n"),
            Err(ParseError::Empty { .. })
        ));
        assert!(matches!(
            parse_vgpu_query("Timestamp : now\n"),
            Err(ParseError::MissingKey { .. })
        ));
    }

    #[test]
    fn bus_ids_become_sysfs_addresses() {
        let gpu = VgpuQueryGpu {
            bus_id: "00000000:8C:00.0".into(),
            active_vgpus: None,
            vgpus: Vec::new(),
        };
        assert_eq!(gpu.pci_address(), "0000:8c:00.0");
    }
}
