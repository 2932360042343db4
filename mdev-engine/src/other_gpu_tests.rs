//! A host whose only GPU cannot host vGPUs (the real H200 of the `h200-real` topology): every
//! create aimed at it fails with why, naming its PCI address, and nothing changes.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use mdev_sim::SimHost;

const GPU: &str = "0000:00:06.0";
const WHY: &str = "nvidia driver without vGPU support loaded (no mdev types, no SR-IOV VFs); \
                   IOMMU off: no IOMMU group, so no pass-through";

fn h200_real() -> (SimHost, Engine, tempfile::TempDir) {
    let sim = SimHost::builtin("h200-real").unwrap();
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

fn profile_on(profile: &str, parent: Option<&str>) -> CreateRequest {
    CreateRequest::new(CreateTarget::Profile {
        profile: profile.into(),
        parent: parent.map(str::to_owned),
    })
}

#[test]
fn a_profile_pinned_to_a_gpu_without_vgpu_support_is_not_supported_with_why() {
    let (sim, engine, _dir) = h200_real();
    let before = sim.tree_listing();
    let error = engine
        .create(profile_on("nvidia-h200-35c", Some(GPU)))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotSupported, "{error}");
    let text = error.to_string();
    assert!(text.contains(GPU) && text.contains(WHY), "{text}");
    assert_eq!(sim.tree_listing(), before, "nothing changed");
    assert!(engine.instances().unwrap().is_empty());
}

#[test]
fn an_unpinned_profile_that_fits_nowhere_names_the_gpu_and_why() {
    let (_sim, engine, _dir) = h200_real();
    let error = engine
        .create(profile_on("nvidia-h200-35c", None))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");
    let text = error.to_string();
    assert!(
        text.contains(&format!("GPU {GPU} hosts no vGPU: {WHY}")),
        "{text}"
    );
}

#[test]
fn vf_and_nvidia_vf_targets_on_a_gpu_without_sr_iov_say_why() {
    let (_sim, engine, _dir) = h200_real();
    for target in [
        CreateTarget::NvidiaVf {
            pf: GPU.into(),
            type_id: 1414,
            vf: None,
        },
        CreateTarget::Vf {
            pf: GPU.into(),
            vf: None,
        },
    ] {
        let error = engine.create(CreateRequest::new(target)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::NotSupported, "{error}");
        let text = error.to_string();
        assert!(text.contains(GPU) && text.contains(WHY), "{text}");
    }
    let error = engine
        .set_num_vfs(GPU, 4, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotSupported, "{error}");
    assert!(error.to_string().contains(WHY), "{error}");
}

#[test]
fn profile_fit_says_no_profile_fits_the_real_h200_and_why() {
    let (_sim, engine, _dir) = h200_real();
    let fits = engine.profile_fit().unwrap();
    assert_eq!(fits.len(), engine.profiles().len());
    let names: Vec<&str> = fits.iter().map(|f| f.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "sorted by name");
    for fit in &fits {
        assert!(!fit.fits, "{fit:?}");
        assert!(fit.detail.contains(GPU), "{fit:?}");
    }
    let h200 = fits.iter().find(|f| f.name == "nvidia-h200-35c").unwrap();
    assert!(h200.detail.contains(WHY), "{h200:?}");
}

#[test]
fn profile_fit_on_the_default_host_names_where_each_fitting_profile_goes() {
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(
        Arc::new(sim),
        Arc::new(DiskFiles::new(dir.path())),
        EngineConfig::default(),
    )
    .unwrap();
    let fits = engine.profile_fit().unwrap();
    let t4 = fits.iter().find(|f| f.name == "nvidia-t4-2q").unwrap();
    assert!(t4.fits, "{t4:?}");
    assert!(t4.detail.contains("0000:3b:00.0"), "{t4:?}");
    assert!(
        fits.iter().any(|f| !f.fits),
        "some profiles need other GPUs"
    );
    assert!(
        engine.instances().unwrap().is_empty(),
        "nothing was created"
    );
}
