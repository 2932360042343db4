//! NVIDIA vGPU telemetry: what `nvidia-smi vgpu -q` says about each running vGPU (the VM it
//! serves, framebuffer used, utilization, licence state), matched to the service's instances.
//!
//! Contract: read on demand, never polled. [`Engine::vgpu_telemetry`] runs
//! [`super::EngineConfig::nvidia_smi`] `vgpu -q` through the host-command seam
//! ([`mdev_host::command`]) with the vendor-command timeout and the call's cancel token,
//! parses it (`vgpu_profiles::vendor::parse_vgpu_query`) and keeps the answer for
//! [`TELEMETRY_MAX_AGE`], so a burst of callers (a UI refreshing, an exporter scraping) costs
//! one run; callers during a run wait for it instead of starting another. Any engine event
//! (an instance or parent changed) drops the kept answer, so a caller never sees a vGPU it
//! saw destroyed. A host without the
//! tool is `NotSupported` naming it; a run that fails, times out or prints what the parser does
//! not accept fails naming the command line with its output.
//!
//! Matching: a record names its service instance by `MDEV UUID` (mdev vGPUs); an SR-IOV vGPU
//! record has no device address, so it names the instance whose claim's domain UUID is its
//! `VM UUID`, when exactly one instance that domain holds sits on that GPU or its VFs and no
//! other record took it. Records that match nothing (a VM the service did not set up) are
//! listed with an empty instance.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vgpu_profiles::vendor::{parse_vgpu_query, VgpuQueryGpu};

use super::{lock, Engine, EngineError, InstanceInfo};
use mdev_host::command::{command_line, run_checked, RunLimits};

/// Where NVIDIA's driver packages install `nvidia-smi` (the default of
/// [`super::EngineConfig::nvidia_smi`]).
pub const NVIDIA_SMI_PATH: &str = "/usr/bin/nvidia-smi";

/// What ships `nvidia-smi`, named when it is missing.
pub const NVIDIA_SMI_PACKAGE: &str = "NVIDIA's driver (on a vGPU host: the NVIDIA vGPU \
     manager package for KVM)";

/// How long one `nvidia-smi vgpu -q` answer is served again before the tool runs anew.
pub const TELEMETRY_MAX_AGE: Duration = Duration::from_secs(2);

/// One vGPU as `nvidia-smi vgpu -q` reports it. `None` where the tool prints `N/A` or
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VgpuTelemetry {
    /// The physical GPU's PCI address (`0000:4b:00.0`).
    pub gpu: String,
    /// The driver's vGPU id.
    pub vgpu_id: u64,
    /// The service's instance this vGPU is (UUID), when one matches.
    pub instance: Option<String>,
    /// The VM's UUID (the libvirt domain UUID).
    pub vm_uuid: Option<String>,
    /// The VM's name.
    pub vm_name: Option<String>,
    /// The vGPU type's name (`NVIDIA H200X-35C`, `GRID T4-2Q`).
    pub vgpu_name: Option<String>,
    /// Framebuffer used, MiB.
    pub fb_used_mib: Option<u64>,
    /// Framebuffer size, MiB.
    pub fb_total_mib: Option<u64>,
    /// GPU utilization, percent (`None` for MIG-backed vGPUs).
    pub gpu_utilization_percent: Option<u32>,
    /// Memory utilization, percent.
    pub memory_utilization_percent: Option<u32>,
    /// Licence state as printed (`Licensed (Expiry: ...)`, `Unlicensed (Unrestricted)`).
    pub license_status: Option<String>,
}

/// The last answer and when it was read.
#[derive(Debug, Default)]
pub(crate) struct TelemetryCache(Mutex<Option<CachedTelemetry>>);

#[derive(Debug)]
struct CachedTelemetry {
    read_at: Instant,
    /// [`Engine::event_generation`] when it was read.
    generation: u64,
    rows: Vec<VgpuTelemetry>,
}

impl Engine {
    /// Every vGPU `nvidia-smi vgpu -q` reports, by GPU then in its order, matched to the
    /// service's instances; at most [`TELEMETRY_MAX_AGE`] old.
    pub fn vgpu_telemetry(&self) -> Result<Vec<VgpuTelemetry>, EngineError> {
        let mut cache = lock(&self.telemetry_cache.0);
        let generation = self.event_generation();
        if let Some(cached) = cache.as_ref() {
            if cached.generation == generation && cached.read_at.elapsed() < TELEMETRY_MAX_AGE {
                return Ok(cached.rows.clone());
            }
        }
        let tool = self.config.nvidia_smi.clone();
        if !self.fs().commands().installed(&tool) {
            return Err(EngineError::NotSupported {
                what: "NVIDIA vGPU telemetry".to_owned(),
                reason: format!(
                    "{} is not installed; it ships with {NVIDIA_SMI_PACKAGE}",
                    tool.display()
                ),
            });
        }
        // A read the daemon answers at once, never run as a job: nothing cancels it.
        let cancelled = || false;
        let limits = RunLimits {
            timeout: self.config.vendor_command_timeout,
            cancelled: &cancelled,
        };
        let args = ["vgpu".to_owned(), "-q".to_owned()];
        let output = run_checked(self.fs().commands(), &tool, &args, &limits)?;
        let gpus = parse_vgpu_query(&output.stdout).map_err(|error| EngineError::VendorTool {
            command: command_line(&tool, &args),
            problem: format!("cannot read its output: {error} ({})", output.summary()),
        })?;
        let rows = match_records(&gpus, &self.instances()?);
        *cache = Some(CachedTelemetry {
            read_at: Instant::now(),
            generation,
            rows: rows.clone(),
        });
        Ok(rows)
    }
}

/// The records of `gpus` as rows, each matched to an instance of `instances` as the module
/// header says. Pure.
pub fn match_records(gpus: &[VgpuQueryGpu], instances: &[InstanceInfo]) -> Vec<VgpuTelemetry> {
    let mut taken: Vec<&str> = Vec::new();
    let mut rows = Vec::new();
    for gpu in gpus {
        let address = gpu.pci_address();
        for record in &gpu.vgpus {
            let by_mdev = record.mdev_uuid.as_deref().and_then(|uuid| {
                instances
                    .iter()
                    .find(|i| i.uuid.eq_ignore_ascii_case(uuid))
                    .map(|i| i.uuid.as_str())
            });
            let instance = by_mdev.or_else(|| {
                let vm = record.vm_uuid.as_deref()?;
                let mut held = instances.iter().filter(|i| {
                    i.parent == address
                        && !taken.contains(&i.uuid.as_str())
                        && i.claim.as_ref().is_some_and(|claim| {
                            claim.domain_uuid.to_string().eq_ignore_ascii_case(vm)
                        })
                });
                match (held.next(), held.next()) {
                    (Some(only), None) => Some(only.uuid.as_str()),
                    _ => None,
                }
            });
            if let Some(uuid) = instance {
                taken.push(uuid);
            }
            rows.push(VgpuTelemetry {
                gpu: address.clone(),
                vgpu_id: record.vgpu_id,
                instance: instance.map(str::to_owned),
                vm_uuid: record.vm_uuid.clone(),
                vm_name: record.vm_name.clone(),
                vgpu_name: record.vgpu_name.clone(),
                fb_used_mib: record.fb_used_mib,
                fb_total_mib: record.fb_total_mib,
                gpu_utilization_percent: record.gpu_utilization_percent,
                memory_utilization_percent: record.memory_utilization_percent,
                license_status: record.license_status.clone(),
            });
        }
    }
    rows
}
