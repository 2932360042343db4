//! Resolution (one parent) and placement (all parents, batches) on realistic parents built
//! from real type names and descriptions.

use proptest::prelude::*;
use vgpu_profiles::placement::{
    consume, place, place_batch, ExistingInstance, NumaPreference, ParentRejection, ParentState,
    PlacementOptions, Policy,
};
use vgpu_profiles::profile::parse_profiles;
use vgpu_profiles::resolve::{resolve, TypeRejection};
use vgpu_profiles::vendor::{
    CreatableVgpuType, Isolation, MdevTypeAttributes, MdevTypeInfo, OfferedType, PciIdentity, GIB,
    MIB,
};
use vgpu_profiles::{Catalog, Profile};

fn profile(toml_body: &str) -> Profile {
    let text = format!("[[profile]]\nname = \"p\"\n{toml_body}");
    parse_profiles("test.toml", &text)
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
}

fn mdev(
    type_id: &str,
    name: Option<&str>,
    description: Option<&str>,
    available: u32,
) -> OfferedType {
    let available = available.to_string();
    let info = MdevTypeInfo::parse(&MdevTypeAttributes {
        type_id,
        name,
        description,
        available_instances: &available,
        device_api: "vfio-pci",
    })
    .unwrap();
    OfferedType::from_mdev(&info).unwrap()
}

/// An NVIDIA legacy mdev type as the driver describes C-series types.
fn nvidia(id: u32, name: &str, fb_mib: u64, max: u32, available: u32) -> OfferedType {
    let description = format!(
        "num_heads=1, frl_config=60, framebuffer={fb_mib}M, max_resolution=4096x2400, max_instance={max}"
    );
    mdev(
        &format!("nvidia-{id}"),
        Some(name),
        Some(&description),
        available,
    )
}

/// An empty H200 in time-sliced mode (interfaces.md 3.4: type:max).
fn h200_time_sliced() -> Vec<OfferedType> {
    [
        (141, 1),
        (70, 2),
        (35, 4),
        (28, 5),
        (17, 8),
        (14, 10),
        (8, 16),
        (7, 20),
        (4, 32),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(gb, max))| {
        nvidia(
            1100 + i as u32,
            &format!("NVIDIA H200-{gb}C"),
            gb * 1024,
            max,
            max,
        )
    })
    .collect()
}

/// The kernel sample parents as the 6.1 kernel shows them (vm-tier.md), mbochs count=64.
fn mbochs(pool_mib: u32) -> Vec<OfferedType> {
    [("small", 4), ("medium", 16), ("large", 64)]
        .iter()
        .map(|&(size, mib)| {
            let id = format!("mbochs-{size}");
            let description = format!("virtual display, {mib} MB video memory");
            mdev(&id, Some(&id), Some(&description), pool_mib / mib)
        })
        .collect()
}

fn mdpy() -> Vec<OfferedType> {
    [("vga", "640x480"), ("xga", "1024x768"), ("hd", "1920x1080")]
        .iter()
        .map(|&(size, res)| {
            let id = format!("mdpy-{size}");
            let description = format!("virtual display, {res} framebuffer");
            mdev(&id, Some(&id), Some(&description), 4)
        })
        .collect()
}

fn mtty() -> Vec<OfferedType> {
    vec![
        mdev("mtty-1", Some("Single port serial"), None, 24),
        mdev("mtty-2", Some("Dual port serial"), None, 12),
    ]
}

fn parent(address: &str, offered: Vec<OfferedType>) -> ParentState {
    ParentState {
        address: address.into(),
        numa_node: None,
        offered,
        instances: Vec::new(),
        nvidia_mixed_mode: false,
    }
}

#[test]
fn smallest_fitting_framebuffer_wins() {
    let offered = h200_time_sliced();
    let p = profile("vendor = \"nvidia\"\nframebuffer = \"16GiB\"\nisolation = \"time-sliced\"\n");
    let chosen = resolve(&p, "0000:3b:00.0", &offered).unwrap();
    assert_eq!(chosen.short_name(), "H200-17C");
    let p = profile("framebuffer = \"35GiB\"\n");
    assert_eq!(
        resolve(&p, "0000:3b:00.0", &offered).unwrap().short_name(),
        "H200-35C"
    );
    // No framebuffer asked: the smallest type.
    let p = profile("vendor = \"nvidia\"\n");
    assert_eq!(
        resolve(&p, "0000:3b:00.0", &offered).unwrap().short_name(),
        "H200-4C"
    );
}

#[test]
fn framebuffer_miss_names_parent_and_closest_type() {
    // An H200 SXM VF whose creatable list offers MIG-backed types up to 18 GiB.
    let creatable = CreatableVgpuType::parse_list(
        "ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n1413  : NVIDIA H200X-1-18CME\n",
    )
    .unwrap();
    let offered: Vec<OfferedType> = creatable.iter().map(OfferedType::from_creatable).collect();
    let p = profile("framebuffer = \"20GiB\"\nisolation = \"mig\"\n");
    let error = resolve(&p, "0000:3b:00.0", &offered).unwrap_err();
    assert_eq!(
        error.reason,
        "needs 20 GiB; largest free type on 0000:3b:00.0 is H200X-1-18C (18 GiB)"
    );
    assert_eq!(
        error.to_string(),
        "profile `p` does not fit on 0000:3b:00.0: needs 20 GiB; largest free type on 0000:3b:00.0 is H200X-1-18C (18 GiB)"
    );
    assert_eq!(error.rejected.len(), 2);
    assert!(matches!(
        error.rejected[0].1,
        TypeRejection::Framebuffer {
            offered: Some(b)
        } if b == 18 * GIB
    ));
}

#[test]
fn misses_are_explained_by_the_furthest_check() {
    let offered = h200_time_sliced();
    let cases: [(&str, &str); 5] = [
        ("isolation = \"mig\"\n", "0000:3b:00.0 offers no mig types (only time-sliced)"),
        ("vendor = \"intel-gvt\"\n", "0000:3b:00.0 offers no intel-gvt types"),
        (
            "[profile.pin]\nname_pattern = \"*-16Q\"\n",
            "no type on 0000:3b:00.0 matches pin name_pattern=*-16Q",
        ),
        (
            "[profile.display]\nheads = 4\n",
            "no type on 0000:3b:00.0 meets the display request (closest: H200-141C: only 1 display heads)",
        ),
        (
            "framebuffer = \"200GiB\"\n",
            "needs 200 GiB; largest free type on 0000:3b:00.0 is H200-141C (141 GiB)",
        ),
    ];
    for (body, reason) in cases {
        let error = resolve(&profile(body), "0000:3b:00.0", &offered).unwrap_err();
        assert_eq!(error.reason, reason, "{body}");
    }
    let mut full = h200_time_sliced();
    for t in &mut full {
        t.available_instances = 0;
    }
    let error = resolve(&profile("framebuffer = \"70GiB\"\n"), "0000:3b:00.0", &full).unwrap_err();
    assert_eq!(
        error.reason,
        "every matching type on 0000:3b:00.0 is full (H200-141C, H200-70C)"
    );
    let error = resolve(&profile(""), "mbochs", &[]).unwrap_err();
    assert_eq!(error.reason, "mbochs offers no types");
}

#[test]
fn pins_by_type_id_name_and_pattern() {
    let offered = h200_time_sliced();
    let by_dir = profile("[profile.pin]\ntype_id = \"nvidia-1104\"\n");
    assert_eq!(
        resolve(&by_dir, "g", &offered).unwrap().short_name(),
        "H200-17C"
    );
    let by_number = profile("[profile.pin]\ntype_id = \"1104\"\n");
    assert_eq!(
        resolve(&by_number, "g", &offered).unwrap().id,
        "nvidia-1104"
    );
    let by_token = profile("[profile.pin]\ntype_name = \"H200-8C\"\n");
    assert_eq!(
        resolve(&by_token, "g", &offered).unwrap().short_name(),
        "H200-8C"
    );
    let by_full = profile("[profile.pin]\ntype_name = \"NVIDIA H200-8C\"\n");
    assert_eq!(
        resolve(&by_full, "g", &offered).unwrap().short_name(),
        "H200-8C"
    );
    // A pattern that matches several types: still the smallest that fits.
    let pattern = profile("framebuffer = \"9GiB\"\n[profile.pin]\nname_pattern = \"H200*\"\n");
    assert_eq!(
        resolve(&pattern, "g", &offered).unwrap().short_name(),
        "H200-14C"
    );
}

#[test]
fn builtin_profiles_on_kernel_sample_parents() {
    let catalog = Catalog::builtin();
    let get = |n: &str| catalog.get(n).unwrap();
    let mbochs = mbochs(64);
    for (name, expected) in [
        ("mbochs-small", "mbochs-small"),
        ("mbochs-medium", "mbochs-medium"),
        ("mbochs-large", "mbochs-large"),
    ] {
        assert_eq!(resolve(get(name), "mbochs", &mbochs).unwrap().id, expected);
    }
    for (name, expected) in [
        ("mdpy-vga", "mdpy-vga"),
        ("mdpy-xga", "mdpy-xga"),
        ("mdpy-hd", "mdpy-hd"),
    ] {
        assert_eq!(resolve(get(name), "mdpy", &mdpy()).unwrap().id, expected);
    }
    assert_eq!(resolve(get("mtty"), "mtty", &mtty()).unwrap().id, "mtty-1");
    assert_eq!(
        resolve(get("mtty-dual"), "mtty", &mtty()).unwrap().id,
        "mtty-2"
    );
    // Vendor mismatch across the sample parents.
    assert!(resolve(get("mbochs-small"), "mdpy", &mdpy()).is_err());
    // The real H200 catalog profiles on an H200.
    let h200 = h200_time_sliced();
    assert_eq!(
        resolve(get("nvidia-h200-35c"), "g", &h200)
            .unwrap()
            .short_name(),
        "H200-35C"
    );
    assert!(resolve(get("nvidia-h200-1-18c"), "g", &h200).is_err());
    // GVT-g: the profile pins the type id.
    let gvt = mdev(
        "i915-GVTg_V5_4",
        None,
        Some(
            "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n",
        ),
        5,
    );
    assert_eq!(
        resolve(get("gvt-v5-4"), "0000:00:02.0", std::slice::from_ref(&gvt))
            .unwrap()
            .id,
        gvt.id
    );
    assert!(resolve(get("gvt-v5-8"), "0000:00:02.0", &[gvt]).is_err());
}

#[test]
fn whole_functions_match_by_device() {
    let vf = |address: &str, free: bool| {
        OfferedType::whole_function(
            PciIdentity {
                address: address.into(),
                vendor_id: 0x1002,
                device_id: 0x74b5,
                class_code: 0x038000,
            },
            "AMD Instinct MI300X VF",
            Isolation::WholeVf,
            Some(192 * GIB),
            free,
        )
    };
    let catalog = Catalog::builtin();
    let amd = catalog.get("amd-mxgpu-vf").unwrap();
    let offered = vec![vf("0000:83:02.0", false), vf("0000:83:02.1", true)];
    assert_eq!(
        resolve(amd, "0000:83:00.0", &offered).unwrap().id,
        "0000:83:02.1"
    );

    let gpu = OfferedType::whole_function(
        PciIdentity {
            address: "0000:3b:00.0".into(),
            vendor_id: 0x10de,
            device_id: 0x2335,
            class_code: 0x030200,
        },
        "NVIDIA H200",
        Isolation::Passthrough,
        Some(141 * GIB),
        true,
    );
    let by_class = profile(
        "isolation = \"passthrough\"\n[profile.device]\nvendor_id = \"10de\"\nclass = \"0302\"\n",
    );
    assert!(resolve(&by_class, "0000:3b:00.0", std::slice::from_ref(&gpu)).is_ok());
    let by_address =
        profile("isolation = \"passthrough\"\n[profile.device]\npci_address = \"0000:5e:00.0\"\n");
    let error = resolve(&by_address, "0000:3b:00.0", &[gpu]).unwrap_err();
    assert_eq!(error.rejected[0].1, TypeRejection::Device);
}

fn h200_parent(address: &str, numa: u32) -> ParentState {
    ParentState {
        numa_node: Some(numa),
        ..parent(address, h200_time_sliced())
    }
}

#[test]
fn nvidia_one_time_sliced_type_per_gpu() {
    let mut busy = h200_parent("0000:3b:00.0", 0);
    busy.instances.push(ExistingInstance {
        type_id: "nvidia-1102".into(), // H200-35C
        type_name: Some("NVIDIA H200-35C".into()),
    });
    let idle = h200_parent("0000:5e:00.0", 0);
    let p = profile("[profile.pin]\nname_pattern = \"*-17C\"\n");
    let parents = vec![busy.clone(), idle.clone()];
    let placement = place(&p, &parents, &PlacementOptions::default()).unwrap();
    assert_eq!(placement.parent, "0000:5e:00.0");
    assert_eq!(placement.offered.short_name(), "H200-17C");
    assert_eq!(
        placement.rejected,
        vec![(
            "0000:3b:00.0".to_owned(),
            ParentRejection::NoFit(
                "0000:3b:00.0 already runs H200-35C; H200-17C needs another time-sliced type and mixed mode is off".into()
            )
        )]
    );
    // The kernel shows the other types of a homogeneous GPU as full; the reason given is
    // still the one-type rule.
    let mut homogeneous = busy.clone();
    for t in &mut homogeneous.offered {
        if t.id != "nvidia-1102" {
            t.available_instances = 0;
        }
    }
    let error = place(&p, &[homogeneous], &PlacementOptions::default()).unwrap_err();
    assert!(
        error.to_string().contains("already runs H200-35C"),
        "{error}"
    );
    // An unpinned 17 GiB request fits the busy GPU with the type it already runs (35C),
    // and pack prefers the busy GPU; spread takes the idle one with the exact 17C.
    let loose = profile("framebuffer = \"17GiB\"\n");
    let packed = place(&loose, &parents, &PlacementOptions::default()).unwrap();
    assert_eq!(
        (packed.parent.as_str(), packed.offered.short_name().as_str()),
        ("0000:3b:00.0", "H200-35C")
    );
    let spread = PlacementOptions {
        policy: Policy::Spread,
        ..PlacementOptions::default()
    };
    let spread = place(&loose, &parents, &spread).unwrap();
    assert_eq!(
        (spread.parent.as_str(), spread.offered.short_name().as_str()),
        ("0000:5e:00.0", "H200-17C")
    );
    // Mixed mode lifts the rule; pack then prefers the busier GPU.
    busy.nvidia_mixed_mode = true;
    let placement = place(&p, &[busy, idle], &PlacementOptions::default()).unwrap();
    assert_eq!(placement.parent, "0000:3b:00.0");
}

#[test]
fn pack_spread_numa_and_named_parent() {
    let mut a = parent("mbochs-a", mbochs(64));
    a.numa_node = Some(1);
    let mut b = parent("mbochs-b", mbochs(64));
    b.numa_node = Some(0);
    consume(&mut b, "mbochs-small");
    let parents = vec![a.clone(), b.clone()];
    let small = Catalog::builtin().get("mbochs-small").unwrap().clone();
    let with = |policy, numa, parent: Option<&str>| PlacementOptions {
        policy,
        numa,
        parent: parent.map(str::to_owned),
    };
    assert_eq!(
        place(&small, &parents, &with(Policy::Pack, None, None))
            .unwrap()
            .parent,
        "mbochs-b"
    );
    assert_eq!(
        place(&small, &parents, &with(Policy::Spread, None, None))
            .unwrap()
            .parent,
        "mbochs-a"
    );
    // NUMA preference beats the policy; strict excludes other nodes.
    let prefer0 = Some(NumaPreference {
        node: 0,
        strict: false,
    });
    assert_eq!(
        place(&small, &parents, &with(Policy::Spread, prefer0, None))
            .unwrap()
            .parent,
        "mbochs-b"
    );
    let strict2 = Some(NumaPreference {
        node: 2,
        strict: true,
    });
    let error = place(&small, &parents, &with(Policy::Pack, strict2, None)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "no parent can host profile `mbochs-small`: mbochs-a: on NUMA node 1, not the required node 2; mbochs-b: on NUMA node 0, not the required node 2"
    );
    let named = place(
        &small,
        &parents,
        &with(Policy::Pack, None, Some("mbochs-a")),
    )
    .unwrap();
    assert_eq!(named.parent, "mbochs-a");
    assert_eq!(
        named.rejected,
        vec![("mbochs-b".to_owned(), ParentRejection::NotRequested)]
    );
    // Ties break on the address, whatever the input order.
    let twins = vec![
        parent("z", mbochs(64)),
        parent("m", mbochs(64)),
        parent("q", mbochs(64)),
    ];
    for policy in [Policy::Pack, Policy::Spread] {
        let mut reversed = twins.clone();
        reversed.reverse();
        let x = place(&small, &twins, &with(policy, None, None)).unwrap();
        let y = place(&small, &reversed, &with(policy, None, None)).unwrap();
        assert_eq!((x.parent.as_str(), y.parent.as_str()), ("m", "m"));
    }
}

#[test]
fn every_parent_gets_a_reason() {
    let parents = vec![
        parent("0000:3b:00.0", h200_time_sliced()),
        parent("mbochs", mbochs(64)),
        parent("mtty", mtty()),
    ];
    let p = profile("framebuffer = \"256GiB\"\n");
    let error = place(&p, &parents, &PlacementOptions::default()).unwrap_err();
    assert_eq!(error.rejected.len(), 3);
    assert_eq!(
        error.to_string(),
        "no parent can host profile `p`: needs 256 GiB; largest free type on 0000:3b:00.0 is H200-141C (141 GiB); \
needs 256 GiB; largest free type on mbochs is mbochs-large (64 MiB); \
needs 256 GiB; no type on mtty states its framebuffer (closest: Single port serial)"
    );
}

#[test]
fn batch_consumes_capacity_all_or_nothing() {
    let catalog = Catalog::builtin();
    let large = catalog.get("mbochs-large").unwrap();
    let small = catalog.get("mbochs-small").unwrap();
    let parents = vec![
        parent("mbochs-a", mbochs(128)),
        parent("mbochs-b", mbochs(64)),
    ];
    let opts = PlacementOptions::default();
    let three = [
        (large, opts.clone()),
        (large, opts.clone()),
        (large, opts.clone()),
    ];
    let placed = place_batch(&three, &parents).unwrap();
    let on: Vec<&str> = placed.iter().map(|p| p.parent.as_str()).collect();
    // Pack fills the parent with the least room first.
    assert_eq!(on, vec!["mbochs-b", "mbochs-a", "mbochs-a"]);
    let four = [
        (large, opts.clone()),
        (large, opts.clone()),
        (large, opts.clone()),
        (small, opts.clone()),
    ];
    let error = place_batch(&four, &parents).unwrap_err();
    assert_eq!(error.index, 3);
    assert!(
        error
            .to_string()
            .starts_with("instance 3 of the batch: no parent can host profile `mbochs-small`"),
        "{error}"
    );

    // mtty: sizes unknown, inferred from the free counts (24 single / 12 dual ports).
    let mut serial = parent("mtty", mtty());
    consume(&mut serial, "mtty-2");
    let free: Vec<u32> = serial
        .offered
        .iter()
        .map(|t| t.available_instances)
        .collect();
    assert_eq!(free, vec![22, 11]);
}

/// A parent whose types share one framebuffer pool, as mbochs and NVIDIA mixed mode do.
#[derive(Debug, Clone)]
struct PoolParent {
    pool_mib: u64,
    sizes_mib: Vec<u64>,
    used_mib: u64,
}

fn pool_parent_state(index: usize, pool: &PoolParent) -> ParentState {
    let offered = pool
        .sizes_mib
        .iter()
        .map(|&mib| {
            let id = format!("pool-{mib}");
            let free = (pool.pool_mib - pool.used_mib) / mib;
            let description = format!("virtual display, {mib} MB video memory");
            mdev(&id, Some(&id), Some(&description), free as u32)
        })
        .collect();
    ParentState {
        numa_node: Some((index % 2) as u32),
        ..parent(&format!("parent-{index}"), offered)
    }
}

fn pool_strategy() -> impl Strategy<Value = PoolParent> {
    (
        16u64..=256,
        proptest::collection::btree_set(1u64..=64, 0..4),
        0u64..=64,
    )
        .prop_map(|(pool_mib, mut sizes, used)| {
            // Every parent offers a 16 MiB type, so most requests fit somewhere and the
            // pools, not missing sizes, decide.
            sizes.insert(16);
            PoolParent {
                pool_mib,
                sizes_mib: sizes.into_iter().collect(),
                used_mib: used.min(pool_mib),
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn batch_placement_never_exceeds_capacity(
        pools in proptest::collection::vec(pool_strategy(), 1..4),
        wanted in proptest::collection::vec((1u64..=16, any::<bool>(), proptest::option::of(0u32..2)), 1..16),
    ) {
        let parents: Vec<ParentState> =
            pools.iter().enumerate().map(|(i, p)| pool_parent_state(i, p)).collect();
        let profiles: Vec<Profile> = wanted
            .iter()
            .map(|(mib, _, _)| profile(&format!("framebuffer = \"{mib}MiB\"\n")))
            .collect();
        let requests: Vec<(&Profile, PlacementOptions)> = profiles
            .iter()
            .zip(&wanted)
            .map(|(p, (_, spread, numa))| {
                let policy = if *spread { Policy::Spread } else { Policy::Pack };
                let numa = numa.map(|node| NumaPreference { node, strict: false });
                (p, PlacementOptions { policy, numa, parent: None })
            })
            .collect();
        let first = place_batch(&requests, &parents);
        // Deterministic.
        prop_assert_eq!(&first, &place_batch(&requests, &parents));
        if let Ok(placements) = first {
            let mut used: Vec<u64> = pools.iter().map(|p| p.used_mib).collect();
            for (placement, (mib, _, _)) in placements.iter().zip(&wanted) {
                let index: usize = placement.parent["parent-".len()..].parse().unwrap();
                let fb = placement.offered.framebuffer_bytes.unwrap() / MIB;
                prop_assert!(fb >= *mib, "type smaller than asked");
                used[index] += fb;
                prop_assert!(used[index] <= pools[index].pool_mib, "pool of parent-{} exceeded", index);
            }
        }
    }

    #[test]
    fn single_placement_respects_capacity_and_nvidia_rule(
        in_use in proptest::option::of(0usize..9),
        mixed in any::<bool>(),
        gb in 1u64..=141,
        emptied in proptest::collection::vec(any::<bool>(), 9),
    ) {
        let mut gpu = h200_parent("0000:3b:00.0", 0);
        for (t, empty) in gpu.offered.iter_mut().zip(&emptied) {
            if *empty { t.available_instances = 0; }
        }
        if let Some(i) = in_use {
            gpu.instances.push(ExistingInstance { type_id: gpu.offered[i].id.clone(), type_name: None });
        }
        gpu.nvidia_mixed_mode = mixed;
        let p = profile(&format!("framebuffer = \"{gb}GiB\"\n"));
        if let Ok(placement) = place(&p, std::slice::from_ref(&gpu), &PlacementOptions::default()) {
            prop_assert!(placement.offered.available_instances > 0);
            prop_assert!(placement.offered.framebuffer_bytes.unwrap() >= gb * GIB);
            if let (Some(i), false) = (in_use, mixed) {
                prop_assert_eq!(&placement.offered.id, &gpu.offered[i].id);
            }
        }
    }
}
