//! Which scheduler a parent has, and which knobs it can enforce (the D-Bus `SchedulerBackend`
//! and `Capabilities` properties).

use std::fmt;

use serde::Serialize;

use crate::model::Policy;

/// The scheduler behind a parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// No hardware scheduler (sample mdev drivers, simulated host): [`crate::software`].
    Software,
    /// NVIDIA vGPU manager: [`crate::nvidia`].
    Nvidia,
    /// AMD GIM: [`crate::amd`].
    AmdGim,
    /// Intel GVT-g: [`crate::gvt`].
    IntelGvt,
}

/// What a backend can hold instances to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Per-instance weights change what instances get.
    pub weight: bool,
    /// Guarantees are held.
    pub min_share: bool,
    /// Caps are held.
    pub max_share: bool,
    /// Settings take effect without reloading the driver.
    pub runtime_change: bool,
    /// Policy changes need a GPU without vGPUs.
    pub requires_idle_gpu: bool,
    /// Policies it runs as named (others are mapped to the closest and reported).
    pub policies: Vec<Policy>,
}

impl Capabilities {
    /// The knob names of the D-Bus `Capabilities` property: `weight`, `min`, `max`,
    /// `runtime-change`, `requires-idle-gpu`.
    pub fn knobs(&self) -> Vec<&'static str> {
        [
            (self.weight, "weight"),
            (self.min_share, "min"),
            (self.max_share, "max"),
            (self.runtime_change, "runtime-change"),
            (self.requires_idle_gpu, "requires-idle-gpu"),
        ]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
        .collect()
    }
}

impl Backend {
    /// The backend for a parent bound to kernel driver `driver` (the name of
    /// `/sys/bus/pci/devices/<bdf>/driver`, or the sample driver's name).
    pub fn for_driver(driver: &str) -> Backend {
        match driver {
            "nvidia" => Backend::Nvidia,
            "i915" => Backend::IntelGvt,
            "gim" => Backend::AmdGim,
            _ => Backend::Software,
        }
    }

    /// The name used on D-Bus and in `vgpuctl schedule show`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Software => "software",
            Backend::Nvidia => "nvidia",
            Backend::AmdGim => "amd-gim",
            Backend::IntelGvt => "intel-gvt",
        }
    }

    /// What it can enforce.
    pub fn capabilities(self) -> Capabilities {
        match self {
            Backend::Software => Capabilities {
                weight: true,
                min_share: true,
                max_share: true,
                runtime_change: true,
                requires_idle_gpu: false,
                policies: Policy::ALL.to_vec(),
            },
            // Per-GPU policy only, from the module's registry at load time.
            Backend::Nvidia => Capabilities {
                weight: false,
                min_share: false,
                max_share: false,
                runtime_change: false,
                requires_idle_gpu: true,
                policies: vec![Policy::BestEffort, Policy::EqualShare, Policy::FixedShare],
            },
            // Per-VF slices reserve time (guarantees); nothing stops a VF from running on when
            // the others are idle (no caps). debugfs takes changes at run time.
            Backend::AmdGim => Capabilities {
                weight: true,
                min_share: true,
                max_share: false,
                runtime_change: true,
                requires_idle_gpu: false,
                policies: vec![Policy::FixedShare, Policy::EqualShare],
            },
            // Weights fixed by type; nothing is settable.
            Backend::IntelGvt => Capabilities {
                weight: false,
                min_share: false,
                max_share: false,
                runtime_change: false,
                requires_idle_gpu: false,
                policies: vec![Policy::Weighted],
            },
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drivers_pick_their_backend() {
        assert_eq!(Backend::for_driver("nvidia"), Backend::Nvidia);
        assert_eq!(Backend::for_driver("i915"), Backend::IntelGvt);
        assert_eq!(Backend::for_driver("gim"), Backend::AmdGim);
        assert_eq!(Backend::for_driver("mtty"), Backend::Software);
        assert_eq!(Backend::for_driver("vfio-pci"), Backend::Software);
    }

    #[test]
    fn knobs_match_the_dbus_model() {
        assert_eq!(
            Backend::Software.capabilities().knobs(),
            ["weight", "min", "max", "runtime-change"]
        );
        assert_eq!(
            Backend::Nvidia.capabilities().knobs(),
            ["requires-idle-gpu"]
        );
        assert_eq!(
            Backend::AmdGim.capabilities().knobs(),
            ["weight", "min", "runtime-change"]
        );
        assert!(Backend::IntelGvt.capabilities().knobs().is_empty());
    }
}
