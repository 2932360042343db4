//! `nvidia-smi -q`: per physical GPU, whether MIG mode is on (`MIG Mode` / `Current`).
//!
//! Sysfs has no file for the mode; this is where NVIDIA's tools show it. A GPU in MIG mode
//! hosts only MIG-backed vGPUs (one per GPU instance), no time-sliced ones. The format is
//! indentation-structured `Key : Value` lines: the banner and driver fields at column 0,
//! `GPU <bus id>` at column 0, the GPU's fields at 4 spaces, and a section's fields (`MIG
//! Mode` → `Current`, `Pending`) at 8. The separator column differs between driver releases
//! (42 on 510, 55 on 580 and 595); only the `:` matters. Every other field is skipped, so
//! excerpts (`-d` selections) and newer drivers parse alike.

use serde::{Deserialize, Serialize};

use super::{excerpt, Format, ParseError};

const FORMAT: Format = Format::NvidiaSmiQuery;

/// One physical GPU of `nvidia-smi -q` and its MIG mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuMigMode {
    /// Its bus id as printed (`00000000:00:06.0`).
    pub bus_id: String,
    /// `MIG Mode` / `Current`: `Some(true)` for `Enabled`, `Some(false)` for `Disabled`,
    /// `None` for `N/A` (a GPU without MIG, such as Turing or Pascal) or when not printed.
    pub current: Option<bool>,
    /// `MIG Mode` / `Pending` (what a GPU reset makes current), read like `current`.
    pub pending: Option<bool>,
}

impl GpuMigMode {
    /// The bus id as a sysfs PCI address (`0000:00:06.0`).
    pub fn pci_address(&self) -> String {
        super::nvidia_smi::sysfs_address(&self.bus_id)
    }
}

/// Parses a whole `nvidia-smi -q` output (or an excerpt holding the GPUs' lines): every GPU
/// with its MIG mode, in output order.
pub fn parse_mig_modes(text: &str) -> Result<Vec<GpuMigMode>, ParseError> {
    if text.trim().is_empty() {
        return Err(ParseError::Empty { format: FORMAT });
    }
    let mut gpus: Vec<GpuMigMode> = Vec::new();
    let mut in_mig_section = false;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let content = line.trim_start();
        if indent == 0 {
            in_mig_section = false;
            if let Some(bus_id) = content.strip_prefix("GPU ") {
                gpus.push(GpuMigMode {
                    bus_id: bus_id.trim().to_owned(),
                    current: None,
                    pending: None,
                });
            } else if !gpus.is_empty() {
                return Err(ParseError::Unexpected {
                    format: FORMAT,
                    line: index + 1,
                    expected: "`GPU <bus id>` or an indented field",
                    found: excerpt(raw),
                });
            }
            // Before the first GPU: the banner, `Timestamp`, `Driver Version`, ...
            continue;
        }
        let Some(gpu) = gpus.last_mut() else {
            // A driver-wide section before the GPUs (`vGPU Driver Capability`).
            continue;
        };
        let (key, value) = match content.split_once(':') {
            Some((key, value)) => (key.trim(), Some(value.trim())),
            None => (content, None),
        };
        if indent <= 4 {
            in_mig_section = key == "MIG Mode" && value.is_none();
            continue;
        }
        if !in_mig_section || indent > 8 {
            continue;
        }
        let Some(value) = value else { continue };
        let mode = match value {
            "Enabled" => Some(true),
            "Disabled" => Some(false),
            "N/A" => None,
            _ => {
                return Err(ParseError::InvalidValue {
                    format: FORMAT,
                    key: format!("MIG Mode {key}"),
                    value: excerpt(value),
                    expected: "`Enabled`, `Disabled` or `N/A`",
                })
            }
        };
        match key {
            "Current" => gpu.current = mode,
            "Pending" => gpu.pending = mode,
            _ => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enabled_mode_is_read_and_a_bad_value_names_it() {
        let text = "Attached GPUs : 2\nGPU 00000000:4B:00.0\n    MIG Mode\n        Current : Enabled\n        Pending : Disabled\n    Accounting Mode : Disabled\nGPU 00000000:4C:00.0\n    Product Name : X\n";
        let gpus = parse_mig_modes(text).unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].pci_address(), "0000:4b:00.0");
        assert_eq!(
            (gpus[0].current, gpus[0].pending),
            (Some(true), Some(false))
        );
        assert_eq!((gpus[1].current, gpus[1].pending), (None, None));
        let error =
            parse_mig_modes("GPU 00000000:01:00.0\n    MIG Mode\n        Current : Maybe\n")
                .unwrap_err()
                .to_string();
        assert!(
            error.contains("MIG Mode Current") && error.contains("Maybe"),
            "{error}"
        );
        assert!(matches!(
            parse_mig_modes("Timestamp : now\n"),
            Err(ParseError::MissingKey { .. })
        ));
    }
}
