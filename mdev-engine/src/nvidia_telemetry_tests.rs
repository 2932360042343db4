//! NVIDIA vGPU telemetry read through `nvidia-smi vgpu -q` on the simulated host (which prints
//! it in the real layout), matched to the service's instances.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::nvidia_telemetry::{match_records, VgpuTelemetry, NVIDIA_SMI_PATH};
use super::*;
use mdev_sim::SimHost;

const T4: &str = "0000:3b:00.0";
const H200: &str = "0000:4b:00.0";

fn open_with(sim: &SimHost, dir: &Path, config: EngineConfig) -> Engine {
    Engine::new(Arc::new(sim.clone()), Arc::new(DiskFiles::new(dir)), config).unwrap()
}

fn t4_2q(engine: &Engine) -> InstanceInfo {
    engine
        .create(CreateRequest::new(CreateTarget::Mdev {
            parent: T4.into(),
            type_id: "nvidia-231".into(),
        }))
        .unwrap()
}

fn rows_of<'a>(rows: &'a [VgpuTelemetry], gpu: &str) -> Vec<&'a VgpuTelemetry> {
    rows.iter().filter(|row| row.gpu == gpu).collect()
}

#[test]
fn every_nvidia_vgpu_is_reported_with_its_instance() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open_with(&sim, dir.path(), EngineConfig::default());
    assert!(engine.vgpu_telemetry().unwrap().is_empty(), "no vGPU yet");

    let first = t4_2q(&engine);
    let second = t4_2q(&engine);
    engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    let vgpu = engine
        .create(CreateRequest::new(CreateTarget::NvidiaVf {
            pf: H200.into(),
            type_id: 1404,
            vf: None,
        }))
        .unwrap();

    let rows = engine.vgpu_telemetry().unwrap();
    let t4 = rows_of(&rows, T4);
    let mut uuids: Vec<_> = t4.iter().filter_map(|r| r.instance.clone()).collect();
    uuids.sort();
    let mut expected = vec![first.uuid.clone(), second.uuid.clone()];
    expected.sort();
    assert_eq!(uuids, expected, "{rows:#?}");
    for row in &t4 {
        assert_eq!(row.vgpu_name.as_deref(), Some("GRID T4-2Q"), "{row:?}");
        assert_eq!(row.fb_used_mib, Some(0), "{row:?}");
        assert_eq!(row.gpu_utilization_percent, Some(0), "{row:?}");
        assert_eq!(
            row.license_status.as_deref(),
            Some("Unlicensed (Unrestricted)"),
            "{row:?}"
        );
        assert_eq!(row.vm_uuid, None, "no VM runs on the simulated host");
    }
    // The VF vGPU is there; no VM holds it, so nothing names its instance.
    let h200 = rows_of(&rows, H200);
    assert_eq!(h200.len(), 1, "{rows:#?}");
    assert_eq!(h200[0].vgpu_name.as_deref(), Some("NVIDIA H200X-14C"));
    assert_eq!(h200[0].instance, None);

    // A destroy is seen at once, although the last answer is younger than its maximum age.
    engine
        .destroy(&first.uuid, DestroyOptions::default())
        .unwrap();
    engine
        .destroy(&vgpu.uuid, DestroyOptions::default())
        .unwrap();
    let rows = engine.vgpu_telemetry().unwrap();
    assert_eq!(
        rows.iter()
            .filter_map(|r| r.instance.clone())
            .collect::<Vec<_>>(),
        vec![second.uuid.clone()],
        "{rows:#?}"
    );
    assert!(rows_of(&rows, H200).is_empty(), "{rows:#?}");
}

#[test]
fn without_nvidia_smi_telemetry_is_not_supported_naming_the_tool() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open_with(
        &sim,
        dir.path(),
        EngineConfig {
            nvidia_smi: "/opt/nvidia/bin/nvidia-smi".into(),
            ..EngineConfig::default()
        },
    );
    let error = engine.vgpu_telemetry().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotSupported, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("/opt/nvidia/bin/nvidia-smi is not installed"),
        "{text}"
    );

    // The real H200 host has no vendor tools at all.
    let sim = SimHost::builtin("h200-real").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = open_with(&sim, dir.path(), EngineConfig::default());
    let error = engine.vgpu_telemetry().unwrap_err();
    assert!(error.to_string().contains(NVIDIA_SMI_PATH), "{error}");
}

/// The real layout (two records of one VM on an SR-IOV GPU, the fixture's fields), matched
/// by VM UUID to the instances that domain holds on that GPU: one each is matched, two of
/// one domain on one GPU are not guessed.
#[test]
fn sriov_records_match_the_instance_their_vm_holds() {
    let text = "GPU 00000000:8C:00.0
    Active vGPUs                          : 2
    vGPU ID                               : 3251642357
        VM UUID                           : 43f26719-90d9-4b25-80eb-040b44132eb8
        VM Name                           : instance-0000002f
        vGPU Name                         : NVIDIA RTX Pro 6000 Blackwell DC-6Q
        License Status                    : Licensed (Expiry: 2026-12-31 0:0:0 GMT)
        FB Memory Usage
            Total                         : 6144 MiB
            Used                          : 256 MiB
            Free                          : 5888 MiB
        Utilization
            GPU                           : 7 %
            Memory                        : 3 %
    vGPU ID                               : 3251642411
        VM UUID                           : e011a1e1-0775-4cd5-9543-a635fb705e81
        VM Name                           : instance-00000030
        vGPU Name                         : NVIDIA RTX Pro 6000 Blackwell DC-6Q
";
    let gpus = vgpu_profiles::vendor::parse_vgpu_query(text).unwrap();
    let instance = |uuid: &str, domain: &str| InstanceInfo {
        uuid: uuid.into(),
        kind: InstanceKind::NvidiaVf,
        parent: "0000:8c:00.0".into(),
        type_id: "1523".into(),
        profile: None,
        owner: None,
        active: true,
        persistent: false,
        autostart: false,
        claim: Some(Claim {
            domain_name: "vm".into(),
            domain_uuid: domain.parse().unwrap(),
            transient: false,
            started_by_claim: false,
        }),
        scheduling: Scheduling::default(),
        vf: None,
        iommu_group: None,
        sysfs_path: PathBuf::new(),
    };
    let mine = "11111111-2222-3333-4444-555555555555";
    let theirs_a = "66666666-2222-3333-4444-555555555555";
    let theirs_b = "77777777-2222-3333-4444-555555555555";
    let instances = vec![
        instance(mine, "43f26719-90d9-4b25-80eb-040b44132eb8"),
        instance(theirs_a, "e011a1e1-0775-4cd5-9543-a635fb705e81"),
        instance(theirs_b, "e011a1e1-0775-4cd5-9543-a635fb705e81"),
    ];
    let rows = match_records(&gpus, &instances);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].gpu, "0000:8c:00.0");
    assert_eq!(rows[0].instance.as_deref(), Some(mine));
    assert_eq!(rows[0].fb_used_mib, Some(256));
    assert_eq!(rows[0].fb_total_mib, Some(6144));
    assert_eq!(rows[0].gpu_utilization_percent, Some(7));
    assert_eq!(rows[0].memory_utilization_percent, Some(3));
    assert_eq!(
        rows[0].license_status.as_deref(),
        Some("Licensed (Expiry: 2026-12-31 0:0:0 GMT)")
    );
    assert_eq!(rows[0].vm_name.as_deref(), Some("instance-0000002f"));
    // Two instances of that domain on this GPU: which one is which cannot be told.
    assert_eq!(rows[1].instance, None, "{:?}", rows[1]);
    // With one of them alone on the GPU, it is matched.
    let rows = match_records(&gpus, &instances[..2]);
    assert_eq!(rows[1].instance.as_deref(), Some(theirs_a));
}
