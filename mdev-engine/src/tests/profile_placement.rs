//! Profiles and placement: what a profile resolves to, profile files, placement policy and NUMA
//! preference, NVIDIA mixed-size mode.

use super::*;

#[test]
fn profiles_resolve_to_mdev_types_nvidia_vfs_and_whole_vfs() {
    let s = setup("samples");
    assert!(s
        .engine
        .profiles()
        .iter()
        .any(|p| p.name == "mbochs-medium"));
    let info = s.engine.create(profile("mbochs-medium")).unwrap();
    assert_eq!(
        (info.parent.as_str(), info.type_id.as_str()),
        ("mbochs", "mbochs-medium")
    );
    assert_eq!(info.profile.as_deref(), Some("mbochs-medium"));
    assert!(
        info.scheduling.weight.is_some(),
        "the profile's default weight is recorded"
    );
    // mbochs has 64 MB: after 16 MB, the large (64 MB) type no longer fits.
    let error = s.engine.create(profile("mbochs-large")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity);
    assert!(error.to_string().contains("mbochs-large"), "{error}");

    let d = setup("default");
    d.engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    let vgpu = d.engine.create(profile("nvidia-h200-35c")).unwrap();
    assert_eq!(
        (vgpu.kind, vgpu.parent.as_str()),
        (InstanceKind::NvidiaVf, H200)
    );
    let whole = d.engine.create(profile("amd-mxgpu-vf")).unwrap();
    assert_eq!(
        (whole.kind, whole.parent.as_str()),
        (InstanceKind::Vf, "0000:0c:00.0")
    );
    assert!(whole.active);
}

#[test]
fn a_vf_named_as_the_parent_takes_the_instance_itself() {
    let d = setup("default");
    d.engine
        .set_num_vfs(H200, 32, DestroyOptions::default())
        .unwrap();
    let second = virtfn(&d.sim, H200, 1);
    let vgpu = d
        .engine
        .create(profile_on("nvidia-h200-35c", &second))
        .unwrap();
    assert_eq!(
        (
            vgpu.kind,
            vgpu.parent.as_str(),
            vgpu.vf.map(|vf| vf.to_string())
        ),
        (InstanceKind::NvidiaVf, H200, Some(second.clone()))
    );
    // Taken now: refused naming the VF, and nothing else is created on another VF.
    let error = d
        .engine
        .create(profile_on("nvidia-h200-35c", &second))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");
    assert!(error.to_string().contains(&second), "{error}");
    assert!(error.to_string().contains("uses it"), "{error}");
    assert_eq!(d.engine.instances().unwrap().len(), 1);

    // A whole VF (AMD MxGPU) the same way, the second VF rather than the first free one.
    let amd = "0000:0c:00.0";
    let second_amd = virtfn(&d.sim, amd, 1);
    let whole = d
        .engine
        .create(profile_on("amd-mxgpu-vf", &second_amd))
        .unwrap();
    assert_eq!(
        (whole.kind, whole.vf.map(|vf| vf.to_string())),
        (InstanceKind::Vf, Some(second_amd))
    );
    // A profile that does not fit the named VF's device is refused, not placed elsewhere.
    let error = d
        .engine
        .create(profile_on("amd-mxgpu-vf", &virtfn(&d.sim, H200, 0)))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");
    assert_eq!(d.engine.instances().unwrap().len(), 2);
}

#[test]
fn profile_files_in_the_profiles_directory_add_profiles() {
    let s = setup("samples");
    let dir = s.dir.path().join("etc/mdev-manager/profiles.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("site.toml"),
        "[[profile]]\nname = \"site-serial\"\ndescription = \"one serial port\"\nvendor = \"mtty\"\nisolation = \"time-sliced\"\n",
    )
    .unwrap();
    let before = s.engine.profiles().len();
    assert_eq!(s.engine.reload_profiles().unwrap(), before + 1);
    let info = s.engine.create(profile("site-serial")).unwrap();
    assert_eq!(info.parent, "mtty");
    std::fs::write(
        dir.join("broken.toml"),
        "[[profile]]\nname = \"Bad Name\"\n",
    )
    .unwrap();
    let error = s.engine.reload_profiles().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgs);
    assert!(error.to_string().contains("broken.toml"), "{error}");
}

#[test]
fn an_engine_opened_with_a_prepared_catalog_uses_it_and_reload_reads_the_directory_again() {
    let s = setup("samples");
    let dir = s.dir.path().join("etc/mdev-manager/profiles.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("site.toml"),
        "[[profile]]\nname = \"site-serial\"\ndescription = \"one serial port\"\nvendor = \"mtty\"\nisolation = \"time-sliced\"\n",
    )
    .unwrap();
    let files: Arc<dyn StateFiles> = Arc::new(DiskFiles::new(s.dir.path()));
    // What `new` loads: the built-in catalog plus the directory's file.
    let loaded = Engine::load_catalog(files.as_ref(), &config()).unwrap();
    assert!(loaded.get("site-serial").is_some());
    assert_eq!(loaded.len(), Catalog::builtin().len() + 1);
    let with_loaded = Engine::with_catalog(
        Arc::new(s.sim.clone()),
        Arc::clone(&files),
        config(),
        Arc::clone(&loaded),
    )
    .unwrap();
    let with_new = Engine::new(Arc::new(s.sim.clone()), Arc::clone(&files), config()).unwrap();
    assert_eq!(with_loaded.profiles(), with_new.profiles());
    // The catalog handed in is used as it is: the directory is not read at open.
    let engine = Engine::with_catalog(
        Arc::new(s.sim.clone()),
        Arc::clone(&files),
        config(),
        Arc::new(Catalog::builtin()),
    )
    .unwrap();
    let error = engine.create(profile("site-serial")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    assert!(error.to_string().contains("site-serial"), "{error}");
    assert_eq!(engine.reload_profiles().unwrap(), loaded.len());
    let info = engine.create(profile("site-serial")).unwrap();
    assert_eq!(info.parent, "mtty");
}

#[test]
fn placement_policy_and_numa_preference_come_from_the_request_or_the_config() {
    // Default (pack): the second instance joins the first on its parent.
    let s = scale_with_profile(PlacementRequest::default());
    let a = s
        .engine
        .create(sim_small(PlacementRequest::default()))
        .unwrap();
    let b = s
        .engine
        .create(sim_small(PlacementRequest::default()))
        .unwrap();
    assert_eq!(a.parent, b.parent);
    // A request asking to spread goes elsewhere.
    let spread = PlacementRequest {
        policy: Some(PlacementPolicy::Spread),
        ..PlacementRequest::default()
    };
    let c = s.engine.create(sim_small(spread)).unwrap();
    assert_ne!(c.parent, a.parent);
    // A strict NUMA preference lands on that node.
    let node1 = PlacementRequest {
        numa_node: Some(1),
        numa_strict: true,
        ..PlacementRequest::default()
    };
    let d = s.engine.create(sim_small(node1)).unwrap();
    assert_eq!(numa_of_parent(&s, &d.parent), Some(1), "{}", d.parent);
    let node7 = PlacementRequest {
        numa_node: Some(7),
        numa_strict: true,
        ..PlacementRequest::default()
    };
    let error = s.engine.create(sim_small(node7)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NoCapacity, "{error}");

    // The config's default applies when the request says nothing.
    let s = scale_with_profile(spread);
    let a = s
        .engine
        .create(sim_small(PlacementRequest::default()))
        .unwrap();
    let b = s
        .engine
        .create(sim_small(PlacementRequest::default()))
        .unwrap();
    assert_ne!(a.parent, b.parent);
    // ... and the request still wins.
    let pack = PlacementRequest {
        policy: Some(PlacementPolicy::Pack),
        ..PlacementRequest::default()
    };
    let c = s.engine.create(sim_small(pack)).unwrap();
    assert!(c.parent == a.parent || c.parent == b.parent, "{}", c.parent);
}

#[test]
fn nvidia_mixed_size_mode_comes_from_the_config_per_gpu() {
    // Driver default: one time-sliced vGPU size per GPU, so placement names the size in use.
    let s = setup("default");
    s.engine.create(profile("nvidia-t4-2q")).unwrap();
    let error = s.engine.create(profile("nvidia-t4-4q")).unwrap_err();
    assert!(error.to_string().contains("T4-2Q"), "{error}");

    // Mixed-size mode declared for the T4: placement no longer applies the one-size rule, so
    // what refuses the second size (if anything) is the parent's own capacity.
    let sim = SimHost::builtin("default").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::new(
        Arc::new(sim.clone()),
        Arc::new(DiskFiles::new(dir.path())),
        EngineConfig {
            nvidia_mixed_mode_parents: vec![T4.to_owned()],
            ..config()
        },
    )
    .unwrap();
    engine.create(profile("nvidia-t4-2q")).unwrap();
    match engine.create(profile("nvidia-t4-4q")) {
        Ok(info) => assert_eq!(info.parent, T4),
        Err(error) => assert!(!error.to_string().contains("T4-2Q"), "{error}"),
    }
}
