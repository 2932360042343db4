//! What kind of device an instance is: the one spelling the state file, the engine and the
//! daemon share (`mdev`, `vf`, `nvidia-vf`, `passthrough`).

/// What kind of device an instance is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceKind {
    /// A VFIO mediated device.
    Mdev,
    /// An SR-IOV VF bound to `vfio-pci`.
    Vf,
    /// An NVIDIA SR-IOV vGPU: a VF with a type written to `nvidia/current_vgpu_type`.
    NvidiaVf,
    /// A whole GPU and the rest of its IOMMU group bound to `vfio-pci` (mdev-engine's
    /// `passthrough`).
    Passthrough,
}

impl std::fmt::Display for InstanceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Mdev => "mdev",
            Self::Vf => "vf",
            Self::NvidiaVf => "nvidia-vf",
            Self::Passthrough => "passthrough",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_prints_as_it_is_stored() {
        for kind in [
            InstanceKind::Mdev,
            InstanceKind::Vf,
            InstanceKind::NvidiaVf,
            InstanceKind::Passthrough,
        ] {
            let stored = serde_json::to_string(&kind).unwrap();
            assert_eq!(stored, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<InstanceKind>(&stored).unwrap(), kind);
        }
    }
}
