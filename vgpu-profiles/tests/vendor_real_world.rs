//! Every parser against real host output: the H200 fixture and every sample of its format
//! in `tests/fixtures/real-world/` (each parses, or fails with a clear error where it is an
//! excerpt or another format).

mod common;

use common::{fixture, samples};
use vgpu_profiles::vendor::{
    CreatableVgpuType, Format, GvtDescription, Isolation, MdevTypeAttributes, MdevTypeInfo,
    MigGpuInstance, MigGpuInstanceProfile, MigPlacements, MigProfileTable, NvidiaSeries,
    NvidiaTypeName, OfferedType, ParseError, TypeDescription, Vendor, GIB, MIB,
};

#[test]
fn h200_fixture_profiles_and_placements() {
    let text = fixture("h200/nvidia-smi-mig-lgip.txt");
    // The capture holds both -lgip and -lgipp; each parser takes its own lines.
    let table = MigProfileTable::parse(&text, &text).expect("H200 fixture parses");
    let summary: Vec<(String, u32, u32, u64, u32)> = table
        .profiles
        .iter()
        .map(|p| {
            (
                p.name.to_string(),
                p.id,
                p.instances_total,
                p.memory_mib,
                p.sm,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("1g.18gb".to_owned(), 19, 7, 16 * 1024, 16),
            ("1g.18gb+me".to_owned(), 20, 1, 16 * 1024, 16),
            ("1g.35gb".to_owned(), 15, 4, 33280, 26),
            ("2g.35gb".to_owned(), 14, 3, 33280, 32),
            ("3g.71gb".to_owned(), 9, 2, 71424, 60),
            ("4g.71gb".to_owned(), 5, 1, 71424, 64),
            ("7g.141gb".to_owned(), 0, 1, 140 * 1024, 132),
        ]
    );
    let seven = &table.profiles[6];
    assert_eq!((seven.ce, seven.jpeg, seven.ofa), (8, 7, 1));
    assert!(table.profiles.iter().all(|p| !p.p2p && p.gpu == 0));
    assert_eq!(table.profiles[1].name.attrs, vec!["me".to_owned()]);

    let placements: Vec<(u32, Vec<u8>, u8)> = table
        .placements
        .iter()
        .map(|p| (p.profile_id, p.starts.clone(), p.size))
        .collect();
    assert_eq!(
        placements,
        vec![
            (19, vec![0, 1, 2, 3, 4, 5, 6], 1),
            (20, vec![0, 1, 2, 3, 4, 5, 6], 1),
            (15, vec![0, 2, 4, 6], 2),
            (14, vec![0, 2, 4], 2),
            (9, vec![0, 4], 4),
            (5, vec![0], 4),
            (0, vec![0], 8),
        ]
    );
    assert_eq!(table.memory_slices(0), 8);
    assert_eq!(table.placements_of(0, 15).map(|p| p.size), Some(2));
}

/// What a sample of `mig.md` must give, keyed by its heading.
enum MigExpect {
    Profiles(usize),
    Placements(usize),
    Instances(usize),
    Fails(fn(&ParseError) -> bool),
}

fn mig_expectation(heading: &str) -> MigExpect {
    let expectations: [(&str, MigExpect); 14] = [
        ("-lgip — A100 40GB", MigExpect::Profiles(7)),
        (
            "-lgip — H100 NVL 94GB, all consumed",
            MigExpect::Profiles(7),
        ),
        (
            "-lci (harvester",
            MigExpect::Fails(
                |e| matches!(e, ParseError::WrongFormat { actual, .. } if actual.contains("-lci")),
            ),
        ),
        ("-lgip — GH200", MigExpect::Profiles(6)),
        ("-lgipp — A30", MigExpect::Placements(4)),
        ("-lgi — A30 mixed", MigExpect::Instances(3)),
        ("-lgi — A30", MigExpect::Instances(4)),
        ("-lgip — A30, driver 535", MigExpect::Profiles(5)),
        // The OpenNebula blocks are empty in the source page.
        (
            "all free (OpenNebula",
            MigExpect::Fails(|e| matches!(e, ParseError::Empty { .. })),
        ),
        (
            "-lgi + nvidia-smi -L",
            MigExpect::Fails(|e| matches!(e, ParseError::Empty { .. })),
        ),
        ("GB200", MigExpect::Profiles(4)),
        ("B200", MigExpect::Profiles(4)),
        // A middle excerpt that stops after the first line of a row.
        (
            "H200 141GB, multi-GPU",
            MigExpect::Fails(|e| e.to_string().contains("after `MIG 1g.35gb`")),
        ),
        ("RTX PRO 6000", MigExpect::Profiles(3)),
    ];
    for (key, expect) in expectations {
        if heading.contains(key) {
            return expect;
        }
    }
    panic!("no expectation for mig.md sample {heading:?}");
}

#[test]
fn every_mig_sample_parses_or_fails_clearly() {
    let all = samples("real-world/mig.md");
    assert_eq!(all.len(), 14, "sample count of mig.md changed");
    for sample in all {
        let heading = sample.heading.as_str();
        let is_lgipp = heading.contains("-lgipp");
        let is_lgi = !is_lgipp && heading.contains("-lgi ");
        match mig_expectation(heading) {
            MigExpect::Profiles(n) => {
                let profiles = MigGpuInstanceProfile::parse_table(&sample.text)
                    .unwrap_or_else(|e| panic!("{heading}: {e}"));
                assert_eq!(profiles.len(), n, "{heading}");
            }
            MigExpect::Placements(n) => {
                let placements = MigPlacements::parse_list(&sample.text)
                    .unwrap_or_else(|e| panic!("{heading}: {e}"));
                assert_eq!(placements.len(), n, "{heading}");
            }
            MigExpect::Instances(n) => {
                let instances = MigGpuInstance::parse_table(&sample.text)
                    .unwrap_or_else(|e| panic!("{heading}: {e}"));
                assert_eq!(instances.len(), n, "{heading}");
            }
            MigExpect::Fails(check) => {
                let error = if is_lgi {
                    MigGpuInstance::parse_table(&sample.text).unwrap_err()
                } else {
                    MigGpuInstanceProfile::parse_table(&sample.text).unwrap_err()
                };
                assert!(check(&error), "{heading}: unexpected error {error}");
                assert!(!error.to_string().is_empty());
            }
        }
    }
}

#[test]
fn mig_sample_details() {
    let all = samples("real-world/mig.md");
    let find = |key: &str| {
        all.iter()
            .find(|s| s.heading.contains(key))
            .unwrap_or_else(|| panic!("sample {key}"))
    };
    let a100 = MigGpuInstanceProfile::parse_table(&find("A100 40GB").text).unwrap();
    assert_eq!(a100[0].memory_mib, 4864); // 4.75 GiB
    assert_eq!(a100[4].memory_mib, 20091); // 19.62 GiB, rounded to MiB
    let h100 = MigGpuInstanceProfile::parse_table(&find("all consumed").text).unwrap();
    assert!(h100.iter().all(|p| p.instances_free == 0));
    let rtx = MigGpuInstanceProfile::parse_table(&find("RTX PRO 6000").text).unwrap();
    assert_eq!(rtx[2].name.attrs, vec!["gfx".to_owned()]);
    assert_eq!(rtx[2].id, 47);
    let a30 = MigPlacements::parse_list(&find("-lgipp — A30").text).unwrap();
    assert_eq!(a30[3].starts, vec![0]);
    assert_eq!(a30[3].size, 4);
    let mixed = MigGpuInstance::parse_table(&find("-lgi — A30 mixed").text).unwrap();
    assert_eq!(
        (mixed[2].name.to_string(), mixed[2].start, mixed[2].size),
        ("2g.12gb".to_owned(), 2, 2)
    );
    // The placements parser on a -lgi table names what it found instead.
    let error = MigPlacements::parse_list(&find("-lgi — A30 mixed").text).unwrap_err();
    assert!(matches!(
        error,
        ParseError::WrongFormat {
            format: Format::MigPlacements,
            ..
        }
    ));
}

/// Descriptions and names pulled out of the different layouts of `nvidia-mdev.md`:
/// `grep -H` over sysfs, `mdevctl types`, a shell loop, and `cat`.
fn nvidia_mdev_fields() -> (Vec<String>, Vec<String>) {
    let mut descriptions = Vec::new();
    let mut names = Vec::new();
    for sample in samples("real-world/nvidia-mdev.md") {
        let mut lines = sample.text.lines().peekable();
        while let Some(line) = lines.next() {
            let line = line.trim();
            if line.contains('$') {
                // The shell command that produced a listing, not its output.
                continue;
            }
            if let Some((_, d)) = line.split_once("/description:") {
                descriptions.push(d.to_owned());
            } else if let Some(d) = line.strip_prefix("Description: ") {
                descriptions.push(d.to_owned());
            } else if let Some((_, rest)) = line.split_once(" --- description: ") {
                let (d, n) = rest.split_once(" --- name: ").expect("loop layout");
                descriptions.push(d.to_owned());
                names.push(n.to_owned());
            } else if line.ends_with("/description") && line.contains("cat ") {
                descriptions.push(lines.next().unwrap_or_default().trim().to_owned());
            } else if line.ends_with("/name") && line.contains("cat ") {
                names.push(lines.next().unwrap_or_default().trim().to_owned());
            }
            if let Some((_, n)) = line.split_once("/name:") {
                names.push(n.to_owned());
            } else if let Some(n) = line.strip_prefix("Name: ") {
                names.push(n.to_owned());
            } else if let Some(rest) = line.strip_prefix("nvidia-").filter(|r| !r.contains('/')) {
                // `nvidia-555, NVIDIA A40-1B 1` (id, name, available_instances)
                if let Some((_, name_and_count)) = rest.split_once(", ") {
                    let (name, _count) = name_and_count.rsplit_once(' ').expect("count");
                    names.push(name.to_owned());
                }
            } else if let Some(rest) = line.strip_prefix("#nvidia-") {
                names.push(rest.split_once(' ').expect("id name").1.to_owned());
            }
        }
    }
    (descriptions, names)
}

#[test]
fn every_nvidia_mdev_description_and_name_parses() {
    let (descriptions, names) = nvidia_mdev_fields();
    assert!(descriptions.len() >= 60, "found {}", descriptions.len());
    assert!(names.len() >= 80, "found {}", names.len());
    for text in &descriptions {
        match TypeDescription::parse(Some(text)) {
            Ok(TypeDescription::Nvidia(d)) => {
                assert!(d.framebuffer_bytes >= 512 * MIB, "{text}");
                assert!(d.max_instance.is_some() && d.num_heads.is_some(), "{text}");
            }
            other => panic!("{text:?} gave {other:?}"),
        }
    }
    for name in &names {
        let parsed = NvidiaTypeName::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(parsed.to_string(), *name, "round trip");
    }
}

#[test]
fn nvidia_mdev_sample_details() {
    let m60 =
        "num_heads=2, frl_config=45, framebuffer=512M, max_resolution=2560x1600, max_instance=16";
    let TypeDescription::Nvidia(d) = TypeDescription::parse(Some(m60)).unwrap() else {
        panic!("NVIDIA description expected");
    };
    assert_eq!(d.framebuffer_bytes, 512 * MIB);
    assert_eq!(d.max_instance, Some(16));
    assert_eq!(d.num_heads, Some(2));
    assert_eq!(d.frl_config, Some(45));
    assert_eq!(
        d.max_resolution.map(|r| r.to_string()).as_deref(),
        Some("2560x1600")
    );

    let m60_0q = NvidiaTypeName::parse("GRID M60-0Q").unwrap();
    assert_eq!(m60_0q.framebuffer_bytes(), 512 * MIB);
    let b4 = NvidiaTypeName::parse("GRID P100-2B4").unwrap();
    assert_eq!(
        (b4.series, b4.series_variant),
        (Some(NvidiaSeries::B), Some(4))
    );
    let unlocked = NvidiaTypeName::parse("GRID RTX2070-1").unwrap();
    assert_eq!((unlocked.series, unlocked.framebuffer_gb), (None, 1));
    let me = NvidiaTypeName::parse("GRID A100D-1-10CME").unwrap();
    assert_eq!(me.board, "A100D");
    assert_eq!(me.gpu_slices, Some(1));
    assert!(me.is_mig_backed());

    // The `vfio-pci-575` directory of the A40 host is still an NVIDIA type.
    let info = MdevTypeInfo::parse(&MdevTypeAttributes {
        type_id: "vfio-pci-575",
        name: Some("NVIDIA A40-24A\n"),
        description: Some(
            "num_heads=1, frl_config=60, framebuffer=24576M, max_resolution=1280x1024, max_instance=2\n",
        ),
        available_instances: "1\n",
        device_api: "vfio-pci\n",
    })
    .unwrap();
    let offered = OfferedType::from_mdev(&info).unwrap();
    assert_eq!(offered.vendor, Vendor::Nvidia);
    assert_eq!(offered.framebuffer_bytes, Some(24 * GIB));
    assert_eq!(offered.short_name(), "A40-24A");
}

#[test]
fn every_gvt_description_parses() {
    let mut weights = Vec::new();
    for sample in samples("real-world/gvt-g.md") {
        for line in sample.text.lines() {
            if let Some(d) = line.trim().strip_prefix("Description: ") {
                let parsed = GvtDescription::parse(d).unwrap_or_else(|e| panic!("{d}: {e}"));
                weights.push((parsed.weight, parsed.low_gm_mib, parsed.high_gm_mib));
                // The same text through the shape dispatcher.
                assert!(matches!(
                    TypeDescription::parse(Some(d)),
                    Ok(TypeDescription::Gvt(_))
                ));
            }
        }
    }
    assert_eq!(
        weights,
        vec![(16, 512, 2048), (8, 256, 1024), (4, 128, 512), (2, 64, 384)]
    );
}

#[test]
fn every_creatable_list_parses() {
    let mut lists = Vec::new();
    for sample in samples("real-world/nvidia-sriov.md") {
        let mut lines = sample.text.lines();
        while let Some(line) = lines.next() {
            let starts_list = line.starts_with("==> creatable_vgpu_types <==")
                || line.ends_with("nvidia/creatable_vgpu_types");
            if !starts_list {
                continue;
            }
            let body: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.starts_with("==>"))
                .collect();
            lists.push(body.join("\n") + "\n");
        }
    }
    assert_eq!(lists.len(), 2);
    let l40s = CreatableVgpuType::parse_list(&lists[0]).unwrap();
    assert_eq!(l40s.len(), 23);
    assert_eq!(l40s[0].id, 1145);
    assert_eq!(l40s[22].name, "NVIDIA L40S-3B");
    let rtx = CreatableVgpuType::parse_list(&lists[1]).unwrap();
    assert_eq!(rtx.len(), 12);
    assert_eq!(rtx[11].name, "NVIDIA RTX Pro 6000 Blackwell DC-12A");
    for entry in l40s.iter().chain(&rtx) {
        let offered = OfferedType::from_creatable(entry);
        assert_eq!(offered.isolation, Isolation::TimeSliced);
        assert!(offered.framebuffer_bytes.is_some(), "{}", entry.name);
    }
    let dc12a = OfferedType::from_creatable(&rtx[11]);
    assert_eq!(dc12a.framebuffer_bytes, Some(12 * GIB));
    assert_eq!(
        dc12a.nvidia_name.as_ref().map(|n| n.board.as_str()),
        Some("DC")
    );
}

#[test]
fn every_nvidia_sriov_type_name_parses() {
    let mut names = Vec::new();
    for sample in samples("real-world/nvidia-sriov.md") {
        for line in sample.text.lines() {
            let trimmed = line.trim();
            if let Some(n) = trimmed.strip_prefix("vGPU Name") {
                names.push(n.trim_start().trim_start_matches(':').trim().to_owned());
            } else if (trimmed.starts_with("GRID ") || trimmed.starts_with("NVIDIA RTX Pro"))
                && line.starts_with("    ")
            {
                names.push(trimmed.to_owned());
            }
        }
    }
    assert!(names.len() >= 40, "found {}", names.len());
    let mut mig_backed = 0;
    for name in &names {
        let parsed = NvidiaTypeName::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        mig_backed += usize::from(parsed.is_mig_backed());
    }
    assert!(mig_backed >= 29, "MIG-backed names found: {mig_backed}");
}

#[test]
fn type_ids_and_a_helper_script_listing() {
    // Type directories seen on real hosts, including the A40 anomaly.
    for (id, vendor) in [
        ("i915-GVTg_V5_4", Vendor::IntelGvt),
        ("i915-GVTg_V5_8", Vendor::IntelGvt),
        ("nvidia-1521", Vendor::Nvidia),
        ("vfio-pci-575", Vendor::Other),
        ("mtty-2", Vendor::Mtty),
    ] {
        assert_eq!(vgpu_profiles::vendor::parse_type_id(id).as_deref(), Ok(id));
        assert_eq!(Vendor::from_type_id(id), vendor, "{id}");
    }
    // The cubecos helper script prints a description-like `spec:` with empty values; it is
    // not driver output, and the NVIDIA parser says which value is wrong.
    let sample = samples("real-world/nvidia-sriov.md")
        .into_iter()
        .find(|s| s.heading.contains("helper-script listing"))
        .expect("cubecos helper listing");
    let mut checked = 0;
    for line in sample.text.lines() {
        let Some((_, spec)) = line.split_once(", spec: ") else {
            continue;
        };
        let error = TypeDescription::parse(Some(spec)).unwrap_err();
        assert!(
            matches!(&error, ParseError::InvalidValue { key, .. } if key == "max_resolution"),
            "{spec}: {error}"
        );
        checked += 1;
    }
    assert_eq!(checked, 8);
}

/// Every `nvidia-smi vgpu -q` sample parses into its GPUs and vGPUs; the other `nvidia-smi
/// vgpu` outputs of the same file are refused as another format, naming it.
#[test]
fn nvidia_smi_vgpu_query_samples_parse_with_vm_framebuffer_utilization_and_licence() {
    use vgpu_profiles::vendor::parse_vgpu_query;
    let all = samples("real-world/nvidia-sriov.md");
    let queries: Vec<_> = all
        .iter()
        .filter(|s| s.heading.starts_with("nvidia-smi vgpu -q"))
        .collect();
    assert_eq!(
        queries.len(),
        2,
        "{:?}",
        all.iter().map(|s| &s.heading).collect::<Vec<_>>()
    );

    // RTX PRO 6000 Blackwell (trimmed): a MIG-backed vGPU without utilization, two DC-6Q.
    let blackwell = queries
        .iter()
        .find(|s| s.heading.contains("Blackwell"))
        .unwrap();
    let gpus = parse_vgpu_query(&blackwell.text).expect("Blackwell sample parses");
    let summary: Vec<(String, Option<u32>, usize)> = gpus
        .iter()
        .map(|g| (g.pci_address(), g.active_vgpus, g.vgpus.len()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("0000:42:00.0".to_owned(), Some(1), 1),
            ("0000:8c:00.0".to_owned(), Some(2), 2)
        ]
    );
    let mig = &gpus[0].vgpus[0];
    assert_eq!(mig.vgpu_id, 3251637444);
    assert_eq!(
        mig.vm_uuid.as_deref(),
        Some("6939a743-b4d3-4b8f-b917-a8f7009744ee")
    );
    assert_eq!(
        mig.vgpu_name.as_deref(),
        Some("NVIDIA RTX Pro 6000 Blackwell DC-1-12Q")
    );
    assert_eq!(
        (mig.fb_total_mib, mig.fb_used_mib),
        (Some(12288), Some(784))
    );
    assert_eq!(
        (mig.gpu_utilization_percent, mig.memory_utilization_percent),
        (None, None),
        "MIG-backed: N/A"
    );
    let sliced = &gpus[1].vgpus[1];
    assert_eq!(sliced.vm_name.as_deref(), Some("instance-00000030"));
    assert_eq!(
        (sliced.fb_used_mib, sliced.gpu_utilization_percent),
        (Some(256), Some(0))
    );
    assert_eq!(sliced.license_status, None, "trimmed: not printed");

    // Tesla P10 (complete): two P40-6Q in one VM, type id, mdev UUID, licence N/A.
    let p10 = queries.iter().find(|s| s.heading.contains("P10")).unwrap();
    let gpus = parse_vgpu_query(&p10.text).expect("P10 sample parses");
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].pci_address(), "0000:82:00.0");
    let vgpus = &gpus[0].vgpus;
    assert_eq!(vgpus.len(), 2);
    assert!(vgpus.iter().all(|v| v.vm_uuid.as_deref()
        == Some("10a12241-1e83-4b70-bc59-a33d7c6d063c")
        && v.vgpu_type == Some(50)
        && v.license_status.is_none()
        && v.fb_total_mib == Some(6144)
        && v.gpu_utilization_percent == Some(0)));
    assert_eq!(
        vgpus[1].mdev_uuid.as_deref(),
        Some("33485650-079b-11ee-9fca-8f6415d2734c")
    );

    // The table form of `nvidia-smi vgpu` is another format, said so.
    for table in all.iter().filter(|s| {
        s.heading.starts_with("nvidia-smi vgpu (") || s.heading.starts_with("nvidia-smi vgpu —")
    }) {
        let error = parse_vgpu_query(&table.text).unwrap_err();
        assert!(
            matches!(
                error,
                ParseError::WrongFormat {
                    format: Format::NvidiaSmiVgpuQuery,
                    ..
                }
            ),
            "{}: {error}",
            table.heading
        );
    }
}

/// `nvidia-smi -q` of real hosts: the H200's MIG mode is read as off, the Pascal P10's `N/A`
/// as no MIG, and the T4 excerpt (595 driver, separator at column 55, a driver-wide section
/// before the GPUs) as a GPU without the section.
#[test]
fn nvidia_smi_query_samples_give_each_gpu_its_mig_mode() {
    use vgpu_profiles::vendor::parse_mig_modes;
    let h200 = parse_mig_modes(&fixture("h200/nvidia-smi-q.txt")).expect("H200 fixture parses");
    assert_eq!(h200.len(), 1);
    assert_eq!(h200[0].pci_address(), "0000:00:06.0");
    assert_eq!(
        (h200[0].current, h200[0].pending),
        (Some(false), Some(false))
    );

    let all = samples("real-world/nvidia-mdev.md");
    let p10 = all
        .iter()
        .find(|s| s.heading.starts_with("Tesla P10") && s.heading.contains("nvidia-smi -q"))
        .expect("the P10 sample");
    let gpus = parse_mig_modes(&p10.text).expect("P10 sample parses");
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].pci_address(), "0000:82:00.0");
    assert_eq!((gpus[0].current, gpus[0].pending), (None, None));

    let t4 = all
        .iter()
        .find(|s| s.heading.starts_with("nvidia-smi -q head") && s.heading.contains("T4"))
        .expect("the T4 sample");
    let gpus = parse_mig_modes(&t4.text).expect("T4 sample parses");
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].pci_address(), "0000:41:00.0");
    assert_eq!(gpus[0].current, None);
}
