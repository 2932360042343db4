//! NVIDIA vGPU: the scheduler is set per physical GPU through the `RmPVMRL` registry DWORD,
//! read when the `nvidia` module loads, and has no per-vGPU weight.
//!
//! Bit layout (the guide's examples are the reference; the header `nvrm_registry.h` gives
//! overlapping ranges for the frequency, bits 21:12, and the time slice, bits 23:16, so a value
//! carries one or the other, never both):
//!
//! | bits | field |
//! |---|---|
//! | 0 | 1 = PVMRL scheduler on (off = best effort) |
//! | 1 | 1 = adaptive round robin (ARR) off |
//! | 7:4 | policy: 0 equal share, 1 fixed share |
//! | 21:12 | ARR scheduling frequency, Hz (63..=960) |
//! | 23:16 | time slice, ms (1..=30) |
//! | 31:24 | ARR averaging factor (1..=60) |
//!
//! This reproduces every example in the guide: `0x01`, `0x00030001`, `0x00030003`, `0x11`,
//! `0x00180011`, `0x3c3c0001`, `0x3c3c0011` (see the tests).

use std::fmt::Write as _;

use serde::Serialize;

use crate::model::{InstanceSchedule, ModelError, ParentSchedule, Policy, Refusal};
use crate::plan::{Busy, Plan};
use crate::report::{meets, InstanceReport};
use crate::share::{Share, PPM_PER_WHOLE};

/// Where the service keeps the modprobe options it owns.
pub const MODPROBE_PATH: &str = "/etc/modprobe.d/mdev-manager-nvidia.conf";
/// Shortest time slice the driver takes, ms.
pub const MIN_TIME_SLICE_MS: u32 = 1;
/// Longest time slice the driver takes, ms.
pub const MAX_TIME_SLICE_MS: u32 = 30;
/// Lowest ARR frequency, Hz.
pub const MIN_FREQUENCY_HZ: u32 = 63;
/// Highest ARR frequency, Hz.
pub const MAX_FREQUENCY_HZ: u32 = 960;
/// Largest ARR averaging factor.
pub const MAX_AVERAGING_FACTOR: u8 = 60;

/// The driver's policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NvidiaPolicy {
    /// Round robin among vGPUs with work (the driver's default: no `RmPVMRL`).
    BestEffort,
    /// Equal share per running vGPU.
    EqualShare,
    /// 1 / max instances of the vGPU's type, running or not.
    FixedShare,
}

/// The fields of one `RmPVMRL` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RmPvmrl {
    /// Equal or fixed share (best effort has no `RmPVMRL`).
    pub fixed_share: bool,
    /// Turns adaptive round robin off (legacy strict time slices).
    pub arr_disabled: bool,
    /// Time slice in ms, 1..=30; `None` for the driver default.
    pub time_slice_ms: Option<u8>,
    /// ARR frequency in Hz, 63..=960; `None` for the driver default. Excludes `time_slice_ms`.
    pub frequency_hz: Option<u16>,
    /// ARR averaging factor, 1..=60; `None` for the driver default.
    pub averaging_factor: Option<u8>,
}

impl RmPvmrl {
    /// The DWORD. Refuses fields outside the driver's ranges and a time slice together with a
    /// frequency (their bits overlap).
    pub fn dword(&self) -> Result<u32, NvidiaError> {
        let mut value: u32 = 1;
        if self.arr_disabled {
            value |= 1 << 1;
        }
        if self.fixed_share {
            value |= 1 << 4;
        }
        match (self.time_slice_ms, self.frequency_hz) {
            (Some(_), Some(_)) => return Err(NvidiaError::SliceAndFrequency),
            (Some(ms), None) => {
                if !(MIN_TIME_SLICE_MS..=MAX_TIME_SLICE_MS).contains(&u32::from(ms)) {
                    return Err(NvidiaError::Field {
                        field: "time slice (ms)",
                        value: ms.into(),
                    });
                }
                value |= u32::from(ms) << 16;
            }
            (None, Some(hz)) => {
                if !(MIN_FREQUENCY_HZ..=MAX_FREQUENCY_HZ).contains(&u32::from(hz)) {
                    return Err(NvidiaError::Field {
                        field: "frequency (Hz)",
                        value: hz.into(),
                    });
                }
                value |= u32::from(hz) << 12;
            }
            (None, None) => {}
        }
        if let Some(factor) = self.averaging_factor {
            if !(1..=MAX_AVERAGING_FACTOR).contains(&factor) {
                return Err(NvidiaError::Field {
                    field: "averaging factor",
                    value: factor.into(),
                });
            }
            value |= u32::from(factor) << 24;
        }
        Ok(value)
    }
}

/// Formats a DWORD the way the guide writes them: two digits when it fits, else eight.
pub fn format_dword(value: u32) -> String {
    if value <= 0xff {
        format!("0x{value:02x}")
    } else {
        format!("0x{value:08x}")
    }
}

/// What one GPU's settings become on NVIDIA.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvidiaSetting {
    /// The GPU's PCI address.
    pub pci: String,
    /// The policy the driver will run.
    pub policy: NvidiaPolicy,
    /// The registry value; `None` under best effort (the driver default, no entry).
    pub register: Option<RmPvmrl>,
    /// Where the settings could not be carried over as given.
    pub notes: Vec<String>,
}

impl NvidiaSetting {
    /// The closest setting the driver supports for a parent's schedule.
    pub fn for_parent(parent: &ParentSchedule) -> Result<Self, NvidiaError> {
        parent.validate().map_err(|source| NvidiaError::Settings {
            parent: parent.parent.clone(),
            source,
        })?;
        check_pci_address(&parent.parent)?;
        let mut notes = Vec::new();
        let policy = match parent.policy {
            Policy::BestEffort => NvidiaPolicy::BestEffort,
            Policy::EqualShare => NvidiaPolicy::EqualShare,
            Policy::FixedShare => NvidiaPolicy::FixedShare,
            Policy::Weighted => {
                notes.push(
                    "NVIDIA has no per-vGPU weight: weighted runs as equal-share, weights are advisory"
                        .to_owned(),
                );
                NvidiaPolicy::EqualShare
            }
        };
        if policy == NvidiaPolicy::BestEffort {
            if parent.time_slice_us.is_some() || parent.frequency_hz.is_some() {
                notes.push(
                    "time slice and frequency apply only to equal-share and fixed-share; ignored"
                        .to_owned(),
                );
            }
            return Ok(Self {
                pci: parent.parent.clone(),
                policy,
                register: None,
                notes,
            });
        }
        let time_slice_ms = parent.time_slice_us.map(|us| {
            // Nearest whole ms, within what the driver takes.
            let ms = ((us + 500) / 1000).clamp(MIN_TIME_SLICE_MS, MAX_TIME_SLICE_MS);
            if ms * 1000 != us {
                notes.push(format!(
                    "time slice {us} µs set as {ms} ms (the driver takes whole ms, 1-30)"
                ));
            }
            // Clamped to 1..=30 just above.
            u8::try_from(ms).unwrap_or(30)
        });
        let frequency_hz = match (parent.frequency_hz, time_slice_ms) {
            (Some(_), Some(_)) => {
                notes.push(
                    "frequency ignored: RmPVMRL carries a time slice or a frequency, not both"
                        .to_owned(),
                );
                None
            }
            (Some(hz), None) => {
                let set = hz.clamp(MIN_FREQUENCY_HZ, MAX_FREQUENCY_HZ);
                if set != hz {
                    notes.push(format!(
                        "frequency {hz} Hz set as {set} Hz (the driver takes 63-960)"
                    ));
                }
                // Clamped to 63..=960 just above.
                Some(u16::try_from(set).unwrap_or(960))
            }
            (None, _) => None,
        };
        Ok(Self {
            pci: parent.parent.clone(),
            policy,
            register: Some(RmPvmrl {
                fixed_share: policy == NvidiaPolicy::FixedShare,
                arr_disabled: false,
                time_slice_ms,
                frequency_hz,
                averaging_factor: None,
            }),
            notes,
        })
    }

    /// The `RmPVMRL` DWORD, `None` under best effort.
    pub fn dword(&self) -> Result<Option<u32>, NvidiaError> {
        self.register.as_ref().map(RmPvmrl::dword).transpose()
    }
}

/// The modprobe options file for every NVIDIA GPU the service schedules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModprobeConfig {
    /// The whole file, for [`MODPROBE_PATH`].
    pub text: String,
    /// The `options nvidia ...` line, `None` when every GPU runs the default best effort.
    pub line: Option<String>,
    /// Each GPU's setting.
    pub settings: Vec<NvidiaSetting>,
}

impl ModprobeConfig {
    /// Whether the driver must be reloaded (or the host rebooted) to run this config, given the
    /// file as installed now (`None` if absent). The driver reads `RmPVMRL` only at module load.
    pub fn reload_needed(&self, installed: Option<&str>) -> bool {
        installed.unwrap_or("") != self.text
    }
}

/// Builds the modprobe options file for these GPUs (sorted by address, so the file is stable).
pub fn modprobe_config(parents: &[ParentSchedule]) -> Result<ModprobeConfig, NvidiaError> {
    let mut settings = parents
        .iter()
        .map(NvidiaSetting::for_parent)
        .collect::<Result<Vec<_>, _>>()?;
    settings.sort_by(|a, b| a.pci.cmp(&b.pci));
    if let Some(pair) = settings.windows(2).find(|pair| pair[0].pci == pair[1].pci) {
        return Err(NvidiaError::DuplicateParent {
            parent: pair[0].pci.clone(),
        });
    }
    let mut text = String::from(
        "# Written by mdev-manager: NVIDIA vGPU scheduler (RmPVMRL) per GPU. Do not edit.\n\
         # The driver reads this when the nvidia module loads: reboot, or reload the module\n\
         # while no vGPU exists, for a change to take effect.\n",
    );
    let mut entries = Vec::new();
    for setting in &settings {
        let dword = setting.dword()?;
        let _ = write!(text, "# {}: {}", setting.pci, policy_name(setting.policy));
        match dword {
            Some(value) => {
                let _ = writeln!(text, ", RmPVMRL={}", format_dword(value));
                entries.push(format!(
                    "pci={};RmPVMRL={}",
                    setting.pci,
                    format_dword(value)
                ));
            }
            None => text.push_str(" (driver default, no entry)\n"),
        }
        for note in &setting.notes {
            let _ = writeln!(text, "#   {note}");
        }
    }
    let line = (!entries.is_empty()).then(|| {
        format!(
            "options nvidia NVreg_RegistryDwordsPerDevice=\"{}\"",
            entries.join(";")
        )
    });
    if let Some(line) = &line {
        text.push_str(line);
        text.push('\n');
    }
    Ok(ModprobeConfig {
        text,
        line,
        settings,
    })
}

fn policy_name(policy: NvidiaPolicy) -> &'static str {
    match policy {
        NvidiaPolicy::BestEffort => "best-effort",
        NvidiaPolicy::EqualShare => "equal-share",
        NvidiaPolicy::FixedShare => "fixed-share",
    }
}

/// What applying a new schedule to a GPU takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyChange {
    /// The driver setting stays the same (e.g. only the period changed).
    Unchanged,
    /// Rewrite the modprobe file, then reload the module or reboot.
    ReloadRequired,
}

/// Checks a schedule change on one GPU: the driver takes scheduler changes only while the GPU
/// has no vGPU, so a change with `vgpus` running is refused.
pub fn check_change(
    current: &ParentSchedule,
    requested: &ParentSchedule,
    vgpus: usize,
) -> Result<PolicyChange, NvidiaError> {
    let now = NvidiaSetting::for_parent(current)?;
    let next = NvidiaSetting::for_parent(requested)?;
    if now.policy == next.policy && now.dword()? == next.dword()? {
        return Ok(PolicyChange::Unchanged);
    }
    if vgpus > 0 {
        return Err(NvidiaError::VgpusRunning {
            parent: requested.parent.clone(),
            count: vgpus,
        });
    }
    Ok(PolicyChange::ReloadRequired)
}

/// One NVIDIA vGPU as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaVgpu {
    /// Its settings.
    pub schedule: InstanceSchedule,
    /// Its type's name (`nvidia-558`, `GRID T4-4C`), for notes.
    pub type_name: String,
    /// How many vGPUs of its type fit on the GPU: fixed share gives each 1 / this.
    pub max_instances: u32,
}

/// What the driver will give each vGPU on one GPU, against what the settings ask for.
pub fn report(
    parent: &ParentSchedule,
    vgpus: &[NvidiaVgpu],
    busy: Busy<'_>,
) -> Result<Vec<InstanceReport>, NvidiaError> {
    let setting = NvidiaSetting::for_parent(parent)?;
    let schedules: Vec<InstanceSchedule> = vgpus.iter().map(|v| v.schedule.clone()).collect();
    let plan = Plan::compute(parent, &schedules, busy).map_err(|source| NvidiaError::Settings {
        parent: parent.parent.clone(),
        source,
    })?;
    let running = u32::try_from(vgpus.len()).unwrap_or(u32::MAX).max(1);
    let busy_count = u32::try_from(plan.instances.iter().filter(|i| i.busy).count())
        .unwrap_or(u32::MAX)
        .max(1);
    let same_weights = schedules.windows(2).all(|w| w[0].weight == w[1].weight);
    vgpus
        .iter()
        .zip(&plan.instances)
        .map(|(vgpu, planned)| {
            let mut notes: Vec<String> = Vec::new();
            let effective = match setting.policy {
                NvidiaPolicy::BestEffort if planned.busy => whole_over(busy_count),
                NvidiaPolicy::BestEffort => Share::ZERO,
                NvidiaPolicy::EqualShare => whole_over(running),
                NvidiaPolicy::FixedShare => {
                    if vgpu.max_instances == 0 {
                        return Err(NvidiaError::ZeroMaxInstances {
                            instance: vgpu.schedule.id.to_string(),
                            type_name: vgpu.type_name.clone(),
                        });
                    }
                    whole_over(vgpu.max_instances)
                }
            };
            let mut enforced = meets(planned.share, effective);
            // Equal weights everywhere are what equal share does anyway; only differing
            // weights ask for something the driver cannot do.
            if parent.policy.uses_weights() && !same_weights {
                notes.push(format!(
                    "per-vGPU weight {} is not enforceable on NVIDIA",
                    vgpu.schedule.weight
                ));
                enforced = false;
            }
            match setting.policy {
                NvidiaPolicy::BestEffort => {
                    if vgpu.schedule.max_share.is_some() {
                        notes.push(
                            "best-effort gives a lone busy vGPU the whole GPU: the cap is not held"
                                .to_owned(),
                        );
                        enforced = false;
                    }
                    if vgpu.schedule.min_share.is_some() {
                        notes.push(
                            "best-effort shares among busy vGPUs: the guarantee is not held"
                                .to_owned(),
                        );
                        enforced = false;
                    }
                }
                NvidiaPolicy::EqualShare => {
                    notes.push(format!("equal-share: 1/{running} per running vGPU"))
                }
                NvidiaPolicy::FixedShare => notes.push(format!(
                    "fixed-share: 1/{} for type {}",
                    vgpu.max_instances, vgpu.type_name
                )),
            }
            if vgpu.schedule.min_share.is_some_and(|min| effective < min) {
                notes.push(format!(
                    "below its guarantee of {}",
                    vgpu.schedule.guarantee()
                ));
                enforced = false;
            }
            if vgpu.schedule.max_share.is_some_and(|max| effective > max) {
                notes.push(format!("above its cap of {}", vgpu.schedule.cap()));
                enforced = false;
            }
            Ok(InstanceReport {
                id: planned.id.clone(),
                requested: planned.share,
                effective,
                enforced,
                note: notes.join("; "),
            })
        })
        .collect()
}

/// The NVIDIA policy whose shares come closest to what the settings ask for with every vGPU
/// busy (smallest worst gap, ties to equal share), with that gap: a suggestion for a
/// `weighted` GPU, which the driver cannot run as such.
pub fn closest_policy(
    parent: &ParentSchedule,
    vgpus: &[NvidiaVgpu],
) -> Result<(Policy, Share), NvidiaError> {
    let schedules: Vec<InstanceSchedule> = vgpus.iter().map(|v| v.schedule.clone()).collect();
    let plan =
        Plan::compute(parent, &schedules, Busy::All).map_err(|source| NvidiaError::Settings {
            parent: parent.parent.clone(),
            source,
        })?;
    let running = u32::try_from(vgpus.len()).unwrap_or(u32::MAX);
    let worst_gap = |effective: &dyn Fn(&NvidiaVgpu) -> Share| {
        vgpus
            .iter()
            .zip(&plan.instances)
            .map(|(vgpu, planned)| planned.share.ppm().abs_diff(effective(vgpu).ppm()))
            .max()
            .unwrap_or(0)
    };
    let equal = worst_gap(&|_| whole_over(running));
    let fixed = worst_gap(&|vgpu| whole_over(vgpu.max_instances));
    let (policy, gap) = if fixed < equal {
        (Policy::FixedShare, fixed)
    } else {
        (Policy::EqualShare, equal)
    };
    // A gap between two shares is itself at most 100%.
    Ok((policy, Share::from_ppm(gap).unwrap_or(Share::WHOLE)))
}

fn whole_over(count: u32) -> Share {
    // At most 100% for any count of at least one.
    Share::from_ppm(PPM_PER_WHOLE / count.max(1)).unwrap_or(Share::WHOLE)
}

/// Checks `dddd:bb:dd.f` in the kernel's lower-case spelling (the workspace's one
/// [`vgpu_types::PciAddress`] rule): the address ends up inside a quoted modprobe option, so
/// nothing else may get through.
fn check_pci_address(text: &str) -> Result<(), NvidiaError> {
    match vgpu_types::PciAddress::parse(text) {
        Ok(address) if address.to_string() == text => Ok(()),
        _ => Err(NvidiaError::NotAPciAddress {
            parent: text.to_owned(),
        }),
    }
}

/// Refusals of the NVIDIA backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvidiaError {
    /// The settings fail admission control.
    #[error("cannot schedule NVIDIA GPU {parent}")]
    Settings {
        /// The GPU.
        parent: String,
        /// Why.
        #[source]
        source: ModelError,
    },
    /// A parent name that is not a PCI address.
    #[error("{parent:?} is not a PCI address (dddd:bb:dd.f, lowercase hex)")]
    NotAPciAddress {
        /// The name given.
        parent: String,
    },
    /// The same GPU twice.
    #[error("NVIDIA GPU {parent} is listed twice")]
    DuplicateParent {
        /// The GPU.
        parent: String,
    },
    /// A change while vGPUs exist.
    #[error("NVIDIA GPU {parent} has {count} vGPU(s); the driver takes scheduler changes only with none")]
    VgpusRunning {
        /// The GPU.
        parent: String,
        /// How many vGPUs it has.
        count: usize,
    },
    /// A register field out of the driver's range.
    #[error("RmPVMRL {field} {value} is outside the driver's range")]
    Field {
        /// Which field.
        field: &'static str,
        /// The value given.
        value: u32,
    },
    /// Both a time slice and a frequency in one register.
    #[error("RmPVMRL cannot carry a time slice and a frequency together (their bits overlap)")]
    SliceAndFrequency,
    /// A type said to fit zero times.
    #[error("vGPU {instance} has type {type_name} with max_instances 0")]
    ZeroMaxInstances {
        /// The vGPU.
        instance: String,
        /// Its type.
        type_name: String,
    },
}

impl NvidiaError {
    /// Which D-Bus error this refusal maps to.
    pub fn refusal(&self) -> Refusal {
        match self {
            NvidiaError::Settings { source, .. } => source.refusal(),
            NvidiaError::VgpusRunning { .. } => Refusal::Busy,
            _ => Refusal::InvalidArgs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::Weight;

    fn register(
        fixed: bool,
        arr_off: bool,
        ms: Option<u8>,
        hz: Option<u16>,
        avg: Option<u8>,
    ) -> u32 {
        RmPvmrl {
            fixed_share: fixed,
            arr_disabled: arr_off,
            time_slice_ms: ms,
            frequency_hz: hz,
            averaging_factor: avg,
        }
        .dword()
        .unwrap()
    }

    #[test]
    fn reproduces_the_guides_examples() {
        assert_eq!(
            format_dword(register(false, false, None, None, None)),
            "0x01"
        );
        assert_eq!(
            format_dword(register(false, false, Some(3), None, None)),
            "0x00030001"
        );
        assert_eq!(
            format_dword(register(false, true, Some(3), None, None)),
            "0x00030003"
        );
        assert_eq!(
            format_dword(register(true, false, None, None, None)),
            "0x11"
        );
        assert_eq!(
            format_dword(register(true, false, Some(24), None, None)),
            "0x00180011"
        );
        assert_eq!(
            format_dword(register(false, false, None, Some(960), Some(60))),
            "0x3c3c0001"
        );
        assert_eq!(
            format_dword(register(true, false, None, Some(960), Some(60))),
            "0x3c3c0011"
        );
    }

    #[test]
    fn refuses_fields_the_driver_does_not_take() {
        let base = RmPvmrl {
            fixed_share: false,
            arr_disabled: false,
            time_slice_ms: None,
            frequency_hz: None,
            averaging_factor: None,
        };
        let both = RmPvmrl {
            time_slice_ms: Some(3),
            frequency_hz: Some(480),
            ..base
        };
        assert_eq!(both.dword(), Err(NvidiaError::SliceAndFrequency));
        assert!(RmPvmrl {
            time_slice_ms: Some(31),
            ..base
        }
        .dword()
        .is_err());
        assert!(RmPvmrl {
            time_slice_ms: Some(0),
            ..base
        }
        .dword()
        .is_err());
        assert!(RmPvmrl {
            frequency_hz: Some(62),
            ..base
        }
        .dword()
        .is_err());
        assert!(RmPvmrl {
            frequency_hz: Some(961),
            ..base
        }
        .dword()
        .is_err());
        assert!(RmPvmrl {
            averaging_factor: Some(61),
            ..base
        }
        .dword()
        .is_err());
    }

    #[test]
    fn maps_to_the_closest_supported_setting() {
        let parent = ParentSchedule::new("0000:3b:00.0")
            .with_policy(Policy::EqualShare)
            .with_time_slice_us(45_000);
        let setting = NvidiaSetting::for_parent(&parent).unwrap();
        assert_eq!(setting.dword().unwrap(), Some(0x001e_0001));
        assert!(setting.notes[0].contains("45000 µs set as 30 ms"));

        let mut fast = ParentSchedule::new("0000:3b:00.0").with_policy(Policy::FixedShare);
        fast.frequency_hz = Some(2_000);
        let setting = NvidiaSetting::for_parent(&fast).unwrap();
        assert_eq!(setting.dword().unwrap(), Some(0x003c_0011));
        assert!(setting.notes[0].contains("2000 Hz set as 960 Hz"));

        let weighted = ParentSchedule::new("0000:3b:00.0");
        let setting = NvidiaSetting::for_parent(&weighted).unwrap();
        assert_eq!(setting.policy, NvidiaPolicy::EqualShare);
        assert!(setting.notes[0].contains("no per-vGPU weight"));

        let best = ParentSchedule::new("0000:3b:00.0").with_policy(Policy::BestEffort);
        assert_eq!(
            NvidiaSetting::for_parent(&best).unwrap().dword().unwrap(),
            None
        );
    }

    #[test]
    fn refuses_what_is_not_a_pci_address() {
        for bad in [
            "mtty",
            "0000:3b:00.0;RmPVMRL=0x0",
            "0000:3B:00.0",
            "0000:3b:00.8",
            "0000:3b:20.0",
            "0000:3b:00.0\"",
            "",
        ] {
            let parent = ParentSchedule::new(bad).with_policy(Policy::EqualShare);
            assert_eq!(
                NvidiaSetting::for_parent(&parent).unwrap_err(),
                NvidiaError::NotAPciAddress {
                    parent: bad.to_owned()
                }
            );
        }
        check_pci_address("0000:3b:1f.7").unwrap();
    }

    #[test]
    fn config_needs_a_reload_and_lists_every_gpu() {
        let parents = [
            ParentSchedule::new("0000:86:00.0").with_policy(Policy::FixedShare),
            ParentSchedule::new("0000:3b:00.0")
                .with_policy(Policy::EqualShare)
                .with_time_slice_us(3_000),
        ];
        let config = modprobe_config(&parents).unwrap();
        assert_eq!(
            config.line.as_deref(),
            Some("options nvidia NVreg_RegistryDwordsPerDevice=\"pci=0000:3b:00.0;RmPVMRL=0x00030001;pci=0000:86:00.0;RmPVMRL=0x11\"")
        );
        assert!(config.reload_needed(None));
        assert!(!config.reload_needed(Some(&config.text)));
        let dup = [parents[0].clone(), parents[0].clone()];
        assert!(matches!(
            modprobe_config(&dup),
            Err(NvidiaError::DuplicateParent { .. })
        ));
        let best =
            modprobe_config(&[ParentSchedule::new("0000:3b:00.0").with_policy(Policy::BestEffort)])
                .unwrap();
        assert_eq!(best.line, None);
        assert!(!best.text.contains("options"));
    }

    #[test]
    fn refuses_changes_while_vgpus_run() {
        let now = ParentSchedule::new("0000:3b:00.0").with_policy(Policy::BestEffort);
        let next = ParentSchedule::new("0000:3b:00.0").with_policy(Policy::FixedShare);
        let err = check_change(&now, &next, 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "NVIDIA GPU 0000:3b:00.0 has 2 vGPU(s); the driver takes scheduler changes only with none"
        );
        assert_eq!(err.refusal(), Refusal::Busy);
        assert_eq!(
            check_change(&now, &next, 0).unwrap(),
            PolicyChange::ReloadRequired
        );
        // The period is ours alone: the driver does not see it.
        let longer = now.clone().with_period_us(200_000);
        assert_eq!(
            check_change(&now, &longer, 3).unwrap(),
            PolicyChange::Unchanged
        );
    }

    fn vgpu(id: &str, weight: u32, max_instances: u32) -> NvidiaVgpu {
        NvidiaVgpu {
            schedule: InstanceSchedule::new(id).with_weight(Weight::new(weight).unwrap()),
            type_name: "GRID T4-4C".to_owned(),
            max_instances,
        }
    }

    #[test]
    fn weights_are_reported_as_not_enforced() {
        let parent = ParentSchedule::new("0000:3b:00.0");
        let reports = report(&parent, &[vgpu("a", 100, 4), vgpu("b", 300, 4)], Busy::All).unwrap();
        assert_eq!(reports[0].requested, Share::from_percent(25).unwrap());
        assert_eq!(reports[0].effective, Share::from_percent(50).unwrap());
        assert!(!reports[0].enforced);
        assert!(reports[1]
            .note
            .contains("per-vGPU weight 300 is not enforceable"));
    }

    #[test]
    fn equal_weights_under_weighted_are_what_equal_share_does() {
        let parent = ParentSchedule::new("0000:3b:00.0");
        let reports = report(&parent, &[vgpu("a", 300, 4), vgpu("b", 300, 4)], Busy::All).unwrap();
        assert!(reports.iter().all(|r| r.enforced), "{reports:?}");
        assert!(!reports[0].note.contains("not enforceable"));
    }

    #[test]
    fn suggests_the_closest_policy() {
        let parent = ParentSchedule::new("0000:3b:00.0");
        // Two vGPUs of a 4-per-GPU type asking for 25% each (the rest capped away): fixed share.
        let mut a = vgpu("a", 100, 4);
        a.schedule.max_share = Some(Share::from_percent(25).unwrap());
        let mut b = vgpu("b", 100, 4);
        b.schedule.max_share = Some(Share::from_percent(25).unwrap());
        let (policy, gap) = closest_policy(&parent, &[a, b]).unwrap();
        assert_eq!((policy, gap), (Policy::FixedShare, Share::ZERO));
        // Weights 1:3 on two vGPUs of a 2-per-GPU type: both policies give 50%, equal wins ties.
        let (policy, gap) =
            closest_policy(&parent, &[vgpu("a", 100, 2), vgpu("b", 300, 2)]).unwrap();
        assert_eq!(
            (policy, gap),
            (Policy::EqualShare, Share::from_percent(25).unwrap())
        );
    }

    #[test]
    fn fixed_share_comes_from_the_type() {
        let parent = ParentSchedule::new("0000:3b:00.0").with_policy(Policy::FixedShare);
        let reports = report(&parent, &[vgpu("a", 100, 4), vgpu("b", 100, 4)], Busy::All).unwrap();
        assert_eq!(reports[0].effective, Share::from_percent(25).unwrap());
        assert_eq!(reports[0].requested, Share::from_percent(50).unwrap());
        assert!(!reports[0].enforced);
        let four: Vec<NvidiaVgpu> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| vgpu(id, 100, 4))
            .collect();
        let reports = report(&parent, &four, Busy::All).unwrap();
        assert!(reports.iter().all(|r| r.enforced), "{reports:?}");
        assert!(matches!(
            report(&parent, &[vgpu("a", 100, 0)], Busy::All),
            Err(NvidiaError::ZeroMaxInstances { .. })
        ));
    }

    #[test]
    fn equal_share_with_default_weights_is_enforced() {
        let parent = ParentSchedule::new("0000:3b:00.0").with_policy(Policy::EqualShare);
        let reports = report(
            &parent,
            &[vgpu("a", 100, 4), vgpu("b", 100, 4), vgpu("c", 100, 4)],
            Busy::All,
        )
        .unwrap();
        assert!(reports.iter().all(|r| r.enforced));
        assert_eq!(reports[0].effective.ppm(), 333_333);
    }

    #[test]
    fn best_effort_cannot_hold_caps() {
        let parent = ParentSchedule::new("0000:3b:00.0").with_policy(Policy::BestEffort);
        let mut capped = vgpu("a", 100, 4);
        capped.schedule.max_share = Some(Share::from_percent(30).unwrap());
        let reports = report(&parent, &[capped, vgpu("b", 100, 4)], Busy::All).unwrap();
        assert!(!reports[0].enforced);
        assert!(reports[0].note.contains("cap is not held"));
    }
}
