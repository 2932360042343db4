//! vgpu-device-manager configurations on simulated hosts: NVIDIA's own example files resolve
//! and plan where they fit, apply and re-plan empty, and refuse where they do not fit.

use std::sync::Arc;
use std::time::Duration;

use vgpu_profiles::vgpu_dm::{parse_all_configs, parse_vgpu_dm};

use super::*;
use crate::{DestroyOptions, DiskFiles, EngineConfig, ErrorKind, InstanceInfo, InstanceKind};
use mdev_sim::SimHost;

const CONFIG_EXAMPLE: &str =
    include_str!("../../vgpu-profiles/fixtures/vgpu-device-manager/config-example.yaml");
const CONFIG_T4: &str =
    include_str!("../../vgpu-profiles/fixtures/vgpu-device-manager/config-t4.yaml");
const README_ONE_OFF: &str =
    include_str!("../../vgpu-profiles/fixtures/vgpu-device-manager/readme-one-off.yaml");

const T4: &str = "0000:3b:00.0";
const SECOND_T4: &str = "0000:af:00.0";
const H200: &str = "0000:4b:00.0";

fn engine_on(topology: &str) -> (SimHost, Engine, tempfile::TempDir) {
    let sim = SimHost::builtin(topology).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(
        Arc::new(sim.clone()),
        Arc::new(DiskFiles::new(dir.path())),
        EngineConfig {
            readiness_timeout: Duration::from_millis(200),
            poll_interval: Duration::from_millis(10),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    (sim, engine, dir)
}

#[test]
fn nvidia_gpus_are_counted_in_pci_order_without_vfs_or_other_vendors() {
    let (_sim, engine, _dir) = engine_on("default");
    let gpus = nvidia_gpus(&engine.inventory().unwrap());
    let addresses: Vec<&str> = gpus.iter().map(|gpu| gpu.address.as_str()).collect();
    // The T4 and the H200 PF; not the Intel or AMD GPUs, not the H200's VFs.
    assert_eq!(addresses, [T4, "0000:4b:00.0"]);
    assert_eq!(gpus[0].device_id, 0x1eb8);
    assert_eq!(gpus[1].index, 1);
}

#[test]
fn every_example_configuration_that_fits_the_t4_pair_host_plans_and_the_others_say_why() {
    let (_sim, engine, _dir) = engine_on("t4-pair");
    let mut fitting = Vec::new();
    for (file, text) in [
        ("config-t4.yaml", CONFIG_T4),
        ("config-example.yaml", CONFIG_EXAMPLE),
    ] {
        let all = parse_all_configs(file, text).unwrap_or_else(|error| panic!("{error}"));
        assert!(all.len() >= 8, "{file}");
        for config in all {
            let name = &config.name;
            match engine.resolve_vgpu_dm(&config) {
                Ok(desired) => {
                    let plan = engine
                        .plan_apply(&desired, false)
                        .unwrap_or_else(|error| panic!("{file} -c {name}: {error}"));
                    let wanted: u32 = desired.instances.iter().map(|entry| entry.count).sum();
                    let planned: u32 = plan.creates.iter().map(|create| create.count).sum();
                    assert_eq!(planned, wanted, "{file} -c {name}: {}", plan.render());
                    fitting.push(format!("{file} -c {name}"));
                }
                Err(EngineError::Apply(ApplyError::VgpuDm {
                    file: named,
                    reason,
                    ..
                })) => {
                    assert_eq!(named, file);
                    assert!(
                        reason.contains("is not offered by GPU"),
                        "{file} -c {name}: {reason}"
                    );
                }
                Err(other) => panic!("{file} -c {name}: {other}"),
            }
        }
    }
    // All of config-t4.yaml (made for this node) and the T4 ones plus `default` of the
    // catalogue of every type.
    for expected in [
        "config-t4.yaml -c T4-1Q",
        "config-t4.yaml -c T4-small",
        "config-t4.yaml -c T4-large",
        "config-example.yaml -c T4-16C",
        "config-example.yaml -c T4-8Q",
        "config-example.yaml -c default",
    ] {
        assert!(
            fitting.iter().any(|name| name == expected),
            "{expected}: {fitting:?}"
        );
    }
    assert!(
        !fitting.iter().any(|name| name.contains("A100")),
        "{fitting:?}"
    );
}

#[test]
fn devices_by_index_pin_each_type_to_its_gpu() {
    let (_sim, engine, _dir) = engine_on("t4-pair");
    let config = parse_vgpu_dm("config-t4.yaml", CONFIG_T4, "T4-medium").unwrap();
    let desired = engine.resolve_vgpu_dm(&config).unwrap();
    let pinned: Vec<(Option<&str>, &str, u32)> = desired
        .instances
        .iter()
        .map(|entry| (entry.parent.as_deref(), entry.profile.as_str(), entry.count))
        .collect();
    assert_eq!(
        pinned,
        [(Some(T4), "T4-4Q", 4), (Some(SECOND_T4), "T4-8Q", 2)]
    );
    assert_eq!(desired.instances[0].type_id.as_deref(), Some("nvidia-232"));
}

#[test]
fn the_default_configuration_matches_each_gpu_by_its_device_filter_and_applies() {
    let (_sim, engine, _dir) = engine_on("default");
    let config = parse_vgpu_dm("config-example.yaml", CONFIG_EXAMPLE, "default").unwrap();
    // The H200 (10de:2335, SR-IOV vGPU) has an entry (H200X-70C) but no VFs yet.
    let error = engine.resolve_vgpu_dm(&config).unwrap_err().to_string();
    assert!(
        error.contains("GPU 1 (0000:4b:00.0) is an SR-IOV vGPU GPU whose VFs are not enabled; enable them first (vgpuctl sriov 0000:4b:00.0 --vfs 32)"),
        "{error}"
    );
    engine
        .set_num_vfs(H200, 32, DestroyOptions { force: false })
        .unwrap();
    let desired = engine.resolve_vgpu_dm(&config).unwrap();
    assert_eq!(desired.whole_parents, [T4, H200]);
    let wanted: Vec<(&str, &str, Option<&str>, u32)> = desired
        .instances
        .iter()
        .map(|entry| {
            (
                entry.parent.as_deref().unwrap(),
                entry.profile.as_str(),
                entry.type_id.as_deref(),
                entry.count,
            )
        })
        .collect();
    assert_eq!(
        wanted,
        [
            (T4, "T4-8Q", Some("nvidia-233"), 2),
            (H200, "H200X-70C", Some("1408"), 2)
        ]
    );
    let report = engine
        .apply_plan(&engine.plan_apply(&desired, false).unwrap())
        .unwrap();
    assert_eq!(report.created.len(), 4);
    let on_h200: Vec<InstanceInfo> = engine
        .instances()
        .unwrap()
        .into_iter()
        .filter(|info| info.parent == H200)
        .collect();
    assert_eq!(on_h200.len(), 2);
    assert!(on_h200
        .iter()
        .all(|info| info.kind == InstanceKind::NvidiaVf && info.type_id == "1408"));
    // Resolved again with the vGPUs in place, the host matches.
    let again = engine.resolve_vgpu_dm(&config).unwrap();
    assert!(engine.plan_apply(&again, false).unwrap().is_empty());
}

#[test]
fn a_type_the_matched_gpu_does_not_offer_is_refused_naming_file_line_and_gpu() {
    // `devices: all` on the default host also matches the H200, whose VFs are off.
    let (_sim, engine, _dir) = engine_on("default");
    let config = parse_vgpu_dm("<stdin>", README_ONE_OFF, "").unwrap();
    let error = engine.resolve_vgpu_dm(&config).unwrap_err().to_string();
    assert_eq!(
        error,
        "<stdin>: line 4: key vgpu-configs.T4-1Q[0]: GPU 1 (0000:4b:00.0) is an SR-IOV vGPU GPU whose VFs are not enabled; enable them first (vgpuctl sriov 0000:4b:00.0 --vfs 32)"
    );
    let text =
        "version: v1\nvgpu-configs:\n  a:\n  - devices: [0]\n    vgpu-devices:\n      A100-4C: 2\n";
    let config = parse_vgpu_dm("a.yaml", text, "").unwrap();
    let error = engine.resolve_vgpu_dm(&config).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotSupported);
    let error = error.to_string();
    assert!(
        error.starts_with("a.yaml: line 6: key vgpu-configs.a[0].vgpu-devices.A100-4C: vGPU type A100-4C is not offered by GPU 0 (0000:3b:00.0); it offers "),
        "{error}"
    );
    assert!(error.contains("T4-1Q"), "{error}");
}

#[test]
fn applying_a_configuration_then_planning_it_again_is_empty_and_a_smaller_one_removes_the_rest() {
    let (_sim, engine, _dir) = engine_on("t4-pair");
    let config = parse_vgpu_dm("config-t4.yaml", CONFIG_T4, "T4-small").unwrap();
    let desired = engine.resolve_vgpu_dm(&config).unwrap();
    let plan = engine.plan_apply(&desired, false).unwrap();
    let report = engine.apply_plan(&plan).unwrap();
    assert_eq!(report.created.len(), 16 + 8);
    let on_first = engine
        .instances()
        .unwrap()
        .into_iter()
        .filter(|info| info.parent == T4 && info.type_id == "nvidia-230")
        .count();
    assert_eq!(on_first, 16);
    assert!(engine.plan_apply(&desired, false).unwrap().is_empty());

    // T4-large wants 2 x T4-8Q on GPU 0: the 16 T4-1Q there go first.
    let config = parse_vgpu_dm("config-t4.yaml", CONFIG_T4, "T4-large").unwrap();
    let desired = engine.resolve_vgpu_dm(&config).unwrap();
    let plan = engine.plan_apply(&desired, false).unwrap();
    assert_eq!(plan.destroys.len(), 16 + 8, "{}", plan.render());
    engine.apply_plan(&plan).unwrap();
    assert!(engine.plan_apply(&desired, false).unwrap().is_empty());
}

#[test]
fn an_empty_vgpu_devices_clears_the_gpus_it_matches() {
    let (_sim, engine, _dir) = engine_on("t4-pair");
    let one_off = parse_vgpu_dm("<stdin>", README_ONE_OFF, "").unwrap();
    let desired = engine.resolve_vgpu_dm(&one_off).unwrap();
    engine
        .apply_plan(&engine.plan_apply(&desired, false).unwrap())
        .unwrap();
    let text = "version: v1\nvgpu-configs:\n  none:\n  - devices: [1]\n    vgpu-devices: {}\n";
    let config = parse_vgpu_dm("none.yaml", text, "").unwrap();
    let desired = engine.resolve_vgpu_dm(&config).unwrap();
    let plan = engine.plan_apply(&desired, false).unwrap();
    assert_eq!(plan.destroys.len(), 16);
    assert!(plan
        .destroys
        .iter()
        .all(|destroy| destroy.instance.parent == SECOND_T4));
}
