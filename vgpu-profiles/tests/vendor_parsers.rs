//! Vendor parsers on the reference strings (interfaces.md §1, §3, §4, §6; vm-tier.md), on
//! malformed input, and on arbitrary input (never a panic).

use proptest::prelude::*;
use vgpu_profiles::vendor::{
    parse_available_instances, parse_device_api, parse_type_id, CreatableVgpuType, Format,
    GvtDescription, Isolation, MbochsDescription, MdevTypeAttributes, MdevTypeInfo,
    MdpyDescription, MigGpuInstance, MigGpuInstanceProfile, MigMediaAttr, MigPlacements,
    MigProfileTable, NvidiaDescription, NvidiaSeries, NvidiaTypeName, OfferedType, ParseError,
    Resolution, TypeDescription, TypeSource, Vendor, GIB, MIB,
};

fn attrs<'a>(
    type_id: &'a str,
    name: Option<&'a str>,
    description: Option<&'a str>,
    available: &'a str,
) -> MdevTypeAttributes<'a> {
    MdevTypeAttributes {
        type_id,
        name,
        description,
        available_instances: available,
        device_api: "vfio-pci\n",
    }
}

#[test]
fn mdev_type_attributes_of_the_sample_drivers() {
    // vm-tier.md: what the real 6.1 kernel shows for mtty, mbochs and mdpy.
    let mtty =
        MdevTypeInfo::parse(&attrs("mtty-2", Some("Dual port serial\n"), None, "12\n")).unwrap();
    assert_eq!(mtty.display_name(), "Dual port serial");
    assert_eq!(mtty.available_instances, 12);
    assert_eq!(mtty.device_api, "vfio-pci");
    let offered = OfferedType::from_mdev(&mtty).unwrap();
    assert_eq!(offered.vendor, Vendor::Mtty);
    assert_eq!(offered.framebuffer_bytes, None);
    assert_eq!(offered.description, TypeDescription::Absent);

    let small = MdevTypeInfo::parse(&attrs(
        "mbochs-small",
        Some("mbochs-small\n"),
        Some("virtual display, 4 MB video memory\n"),
        "16\n",
    ))
    .unwrap();
    let offered = OfferedType::from_mdev(&small).unwrap();
    assert_eq!(offered.vendor, Vendor::Mbochs);
    assert_eq!(offered.framebuffer_bytes, Some(4 * MIB));
    assert_eq!(offered.isolation, Isolation::TimeSliced);
    assert_eq!(
        offered.source,
        TypeSource::Mdev {
            type_id: "mbochs-small".into()
        }
    );

    let xga = MdevTypeInfo::parse(&attrs(
        "mdpy-xga",
        Some("mdpy-xga\n"),
        Some("virtual display, 1024x768 framebuffer\n"),
        "4\n",
    ))
    .unwrap();
    let offered = OfferedType::from_mdev(&xga).unwrap();
    assert_eq!(offered.vendor, Vendor::Mdpy);
    assert_eq!(
        offered.display.max_resolution,
        Some(Resolution {
            width: 1024,
            height: 768
        })
    );
}

#[test]
fn mdev_type_attribute_errors_name_the_attribute() {
    let cases: [(MdevTypeAttributes<'_>, &str); 6] = [
        (attrs("mtty-1", None, None, "many\n"), "available_instances"),
        (attrs("mtty-1", None, None, "-1\n"), "available_instances"),
        (attrs("mtty-1", None, None, ""), "available_instances"),
        (attrs("../etc", None, None, "1"), "type id"),
        (attrs("mtty 1", None, None, "1"), "type id"),
        (attrs("mtty-1", Some("\n"), None, "1"), "name"),
    ];
    for (case, needle) in cases {
        let error = MdevTypeInfo::parse(&case).unwrap_err();
        assert!(error.to_string().contains(needle), "{error}");
    }
    assert!(parse_device_api("vfio pci").is_err());
    assert!(parse_device_api("\n").is_err());
    assert_eq!(parse_available_instances("4294967295\n"), Ok(u32::MAX));
    assert!(parse_available_instances("4294967296").is_err());
    assert!(parse_type_id("..").is_err());
    assert_eq!(
        parse_type_id("i915-GVTg_V5_4").as_deref(),
        Ok("i915-GVTg_V5_4")
    );
}

#[test]
fn nvidia_description_reference_example() {
    let d = NvidiaDescription::parse(
        "num_heads=4, frl_config=60, framebuffer=1024M, max_resolution=5120x2880, max_instance=16\n",
    )
    .unwrap();
    assert_eq!(d.num_heads, Some(4));
    assert_eq!(d.frl_config, Some(60));
    assert_eq!(d.framebuffer_bytes, GIB);
    assert_eq!(d.max_resolution, Resolution::parse("5120x2880"));
    assert_eq!(d.max_instance, Some(16));
    assert!(d.other.is_empty());
}

#[test]
fn nvidia_description_keeps_unknown_keys_and_rejects_bad_ones() {
    let d = NvidiaDescription::parse("framebuffer=2G, new_key=7").unwrap();
    assert_eq!(d.framebuffer_bytes, 2 * GIB);
    assert_eq!(d.other, vec![("new_key".to_owned(), "7".to_owned())]);

    let bad: [(&str, &str); 8] = [
        ("", "empty"),
        ("num_heads=4", "missing `framebuffer`"),
        ("framebuffer=lots", "`framebuffer` has invalid value"),
        ("framebuffer=1024M, num_heads=x", "`num_heads`"),
        ("framebuffer=1024M, max_resolution=5120", "`max_resolution`"),
        ("framebuffer=1024M, framebuffer=2048M", "more than once"),
        (
            "framebuffer=1024M; max_instance=2",
            "`framebuffer` has invalid value",
        ),
        (
            "framebuffer=99999999999999999999M",
            "`framebuffer` has invalid value",
        ),
    ];
    for (text, needle) in bad {
        let error = NvidiaDescription::parse(text).unwrap_err();
        assert!(error.to_string().contains(needle), "{text:?}: {error}");
    }
    let error = NvidiaDescription::parse("framebuffer=1M\nframebuffer=2M").unwrap_err();
    assert!(
        matches!(error, ParseError::Unexpected { line: 2, .. }),
        "{error}"
    );
}

#[test]
fn gvt_description_reference_forms() {
    // interfaces.md §4: the kernel's multi-line format.
    let d = GvtDescription::parse(
        "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n",
    )
    .unwrap();
    assert_eq!(
        (d.low_gm_mib, d.high_gm_mib, d.fence, d.weight),
        (128, 512, 4, 4)
    );
    assert_eq!(d.graphics_memory_bytes(), 640 * MIB);
    let info = MdevTypeInfo::parse(&attrs(
        "i915-GVTg_V5_4",
        None,
        Some(
            "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1920x1200\nweight: 4\n",
        ),
        "5\n",
    ))
    .unwrap();
    let offered = OfferedType::from_mdev(&info).unwrap();
    assert_eq!(offered.vendor, Vendor::IntelGvt);
    assert_eq!(offered.weight, Some(4));
    assert_eq!(offered.name, "i915-GVTg_V5_4");

    let bad: [(&str, &str); 5] = [
        (
            "low_gm_size: 128\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1x1\nweight: 4",
            "`low_gm_size`",
        ),
        (
            "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1x1",
            "missing `weight`",
        ),
        (
            "low_gm_size: 128MB\nhigh_gm_size: 512MB\nfence: 4\nresolution: 1x1\nweight: 17",
            "1..=16",
        ),
        ("low_gm_size: 128MB\nlow_gm_size: 128MB", "more than once"),
        ("low_gm_size 128MB\nweight: 4", "line 1"),
    ];
    for (text, needle) in bad {
        let error = GvtDescription::parse(text).unwrap_err();
        assert!(error.to_string().contains(needle), "{text:?}: {error}");
    }
}

#[test]
fn sample_driver_descriptions() {
    assert_eq!(
        MbochsDescription::parse("virtual display, 64 MB video memory\n")
            .unwrap()
            .video_memory_mib,
        64
    );
    assert_eq!(
        MdpyDescription::parse("virtual display, 1920x1080 framebuffer")
            .unwrap()
            .resolution
            .to_string(),
        "1920x1080"
    );
    for bad in [
        "virtual display, MB video memory",
        "virtual display, 0 MB video memory",
        "virtual display, 16 GB video memory",
        "display, 16 MB video memory",
    ] {
        assert!(MbochsDescription::parse(bad).is_err(), "{bad}");
    }
    for bad in [
        "virtual display, 1024 framebuffer",
        "virtual display, 0x768 framebuffer",
        "virtual display, 1024x768",
    ] {
        assert!(MdpyDescription::parse(bad).is_err(), "{bad}");
    }
    // Unknown free-form text is kept, not rejected.
    assert_eq!(
        TypeDescription::parse(Some("Dual port serial\n")).unwrap(),
        TypeDescription::Unrecognised("Dual port serial".into())
    );
}

/// Name, prefix, board, GPU slices, framebuffer GB, series, attribute.
type NameCase = (
    &'static str,
    Option<&'static str>,
    &'static str,
    Option<u8>,
    u32,
    Option<NvidiaSeries>,
    Option<MigMediaAttr>,
);

#[test]
fn nvidia_type_names_from_the_brief() {
    let cases: [NameCase; 6] = [
        (
            "GRID T4-2Q",
            Some("GRID"),
            "T4",
            None,
            2,
            Some(NvidiaSeries::Q),
            None,
        ),
        (
            "NVIDIA A40-2Q",
            Some("NVIDIA"),
            "A40",
            None,
            2,
            Some(NvidiaSeries::Q),
            None,
        ),
        (
            "H200-35C",
            None,
            "H200",
            None,
            35,
            Some(NvidiaSeries::C),
            None,
        ),
        (
            "H200X-1-18C",
            None,
            "H200X",
            Some(1),
            18,
            Some(NvidiaSeries::C),
            None,
        ),
        (
            "A100-1-5CME",
            None,
            "A100",
            Some(1),
            5,
            Some(NvidiaSeries::C),
            Some(MigMediaAttr::Me),
        ),
        (
            "DC-1-24CGFX",
            None,
            "DC",
            Some(1),
            24,
            Some(NvidiaSeries::C),
            Some(MigMediaAttr::Gfx),
        ),
    ];
    for (text, prefix, board, slices, gb, series, attr) in cases {
        let n = NvidiaTypeName::parse(text).unwrap();
        assert_eq!(n.prefix.as_deref(), prefix, "{text}");
        assert_eq!(n.board, board, "{text}");
        assert_eq!(n.gpu_slices, slices, "{text}");
        assert_eq!(n.framebuffer_gb, gb, "{text}");
        assert_eq!(n.series, series, "{text}");
        assert_eq!(n.attr, attr, "{text}");
        assert_eq!(n.to_string(), text);
    }
    for bad in [
        "",
        "T4",
        "T4-",
        "T4-2X",
        "T4-QQ",
        "H200-9-18C",
        "H200-0-18C",
        "H200-1-18CXYZ",
        "A-B-C-D",
        "T$4-2Q",
    ] {
        let error = NvidiaTypeName::parse(bad).unwrap_err();
        assert!(
            matches!(
                error,
                ParseError::Empty {
                    format: Format::NvidiaTypeName
                } | ParseError::Unexpected {
                    format: Format::NvidiaTypeName,
                    ..
                } | ParseError::InvalidValue {
                    format: Format::NvidiaTypeName,
                    ..
                }
            ),
            "{bad}: {error}"
        );
    }
}

#[test]
fn creatable_vgpu_types_reference_and_full() {
    let list =
        CreatableVgpuType::parse_list("ID    : vGPU Name\n1414  : NVIDIA H200X-1-18C\n").unwrap();
    assert_eq!(
        list,
        vec![CreatableVgpuType {
            id: 1414,
            name: "NVIDIA H200X-1-18C".into()
        }]
    );
    let offered = OfferedType::from_creatable(&list[0]);
    assert_eq!(offered.isolation, Isolation::Mig);
    assert_eq!(offered.source, TypeSource::NvidiaVf { type_id: 1414 });
    assert_eq!(offered.framebuffer_bytes, Some(18 * GIB));
    assert_eq!(offered.vendor_type_id, Some(1414));
    // Header only: the VF can host nothing more.
    assert_eq!(
        CreatableVgpuType::parse_list("ID    : vGPU Name\n"),
        Ok(vec![])
    );

    let bad: [(&str, &str); 5] = [
        ("", "empty"),
        ("1414  : NVIDIA H200X-1-18C\n", "header"),
        ("ID    : vGPU Name\nabc : NVIDIA X-1Q\n", "line 2"),
        ("ID    : vGPU Name\n1414 :\n", "vGPU name"),
        ("ID    : vGPU Name\n1 : A-1Q\n1 : B-1Q\n", "more than once"),
    ];
    for (text, needle) in bad {
        let error = CreatableVgpuType::parse_list(text).unwrap_err();
        assert!(error.to_string().contains(needle), "{text:?}: {error}");
    }
}

#[test]
fn mig_tables_malformed() {
    let header = "+----+\n| GPU instance profiles: |\n";
    let bad_rows: [(&str, &str); 6] = [
        (
            "|   0  MIG 1g.18gb  19  7/7  16.00  No  16  1  |\n|  1 1 0 |\n",
            "profile row",
        ),
        (
            "|   0  MIG 1g.18gb  19  8/7  16.00  No  16  1  0 |\n|  1 1 0 |\n",
            "free not above total",
        ),
        (
            "|   0  MIG 1g.18gb  19  7/7  16.0.0  No  16  1  0 |\n|  1 1 0 |\n",
            "`Memory`",
        ),
        (
            "|   0  MIG 1g.18gb  19  7/7  16.00  Maybe  16  1  0 |\n|  1 1 0 |\n",
            "`P2P`",
        ),
        (
            "|   0  MIG 18gb  19  7/7  16.00  No  16  1  0 |\n|  1 1 0 |\n",
            "`Name`",
        ),
        (
            "|   0  MIG 1g.18gb  19  7/7  16.00  No  16  1  0 |\n|  1 1 |\n",
            "CE, JPEG, OFA",
        ),
    ];
    for (rows, needle) in bad_rows {
        let error = MigGpuInstanceProfile::parse_table(&format!("{header}{rows}")).unwrap_err();
        assert!(error.to_string().contains(needle), "{rows:?}: {error}");
    }
    let no_rows =
        MigGpuInstanceProfile::parse_table("No MIG-enabled devices found.\n").unwrap_err();
    assert!(
        matches!(no_rows, ParseError::WrongFormat { .. }),
        "{no_rows}"
    );

    for (text, needle) in [
        ("GPU  0 Profile ID 19 Placements: 0,1:1", "line 1"),
        ("GPU  0 Profile ID 19 Placements: {0,x}:1", "`Placements`"),
        ("GPU  0 Profile ID 19 Placements: {0}:0", "at least one"),
        ("GPU  0 Profile 19 Placements: {0}:1", "line 1"),
        (
            "GPU 0 Profile ID 1 Placements: {0}:1\nGPU 0 Profile ID 1 Placements: {0}:1",
            "more than once",
        ),
        ("nothing here", "no `GPU N Profile ID M Placements:` lines"),
    ] {
        let error = MigPlacements::parse_list(text).unwrap_err();
        assert!(error.to_string().contains(needle), "{text:?}: {error}");
    }
    assert_eq!(
        MigGpuInstance::parse_table("No GPU instances found: Not Found\n"),
        Ok(vec![])
    );

    // A placement for a profile the table does not list.
    let lgip = "|   0  MIG 1g.18gb  19  7/7  16.00  No  16  1  0 |\n|  1 1 0 |\n";
    let error = MigProfileTable::parse(lgip, "GPU 0 Profile ID 99 Placements: {0}:1").unwrap_err();
    assert!(error.to_string().contains("profile 99"), "{error}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic_on_arbitrary_text(text in "\\PC{0,200}") {
        let _ = NvidiaDescription::parse(&text);
        let _ = GvtDescription::parse(&text);
        let _ = MbochsDescription::parse(&text);
        let _ = MdpyDescription::parse(&text);
        let _ = NvidiaTypeName::parse(&text);
        let _ = CreatableVgpuType::parse_list(&text);
        let _ = MigGpuInstanceProfile::parse_table(&text);
        let _ = MigPlacements::parse_list(&text);
        let _ = MigGpuInstance::parse_table(&text);
        let _ = TypeDescription::parse(Some(&text));
        let _ = parse_available_instances(&text);
        let info = MdevTypeInfo::parse(&attrs(&text, Some(&text), Some(&text), &text));
        if let Ok(info) = info {
            let _ = OfferedType::from_mdev(&info);
        }
    }

    #[test]
    fn parsers_never_panic_on_format_shaped_text(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("|".to_owned()), Just("MIG".to_owned()), Just("1g.18gb".to_owned()),
                Just("+me".to_owned()), Just("7/7".to_owned()), Just("16.00".to_owned()),
                Just("No".to_owned()), Just("\n".to_owned()), Just("+---+\n".to_owned()),
                Just("GPU".to_owned()), Just("Profile ID".to_owned()), Just("Placements:".to_owned()),
                Just("{0,2}:2".to_owned()), Just("framebuffer=".to_owned()), Just("1024M".to_owned()),
                Just(", ".to_owned()), Just("=".to_owned()), Just("low_gm_size: ".to_owned()),
                Just("ID    : vGPU Name\n".to_owned()), Just(" : ".to_owned()), Just("-".to_owned()),
                "[0-9]{1,12}", "[A-Za-z]{1,6}", Just(" ".to_owned()),
            ],
            0..40,
        )
    ) {
        let text: String = parts.concat();
        let _ = NvidiaDescription::parse(&text);
        let _ = GvtDescription::parse(&text);
        let _ = NvidiaTypeName::parse(&text);
        let _ = CreatableVgpuType::parse_list(&text);
        let _ = MigProfileTable::parse(&text, &text);
        let _ = MigGpuInstance::parse_table(&text);
        let _ = TypeDescription::parse(Some(&text));
    }

    #[test]
    fn nvidia_type_names_round_trip(
        board in "[A-Z][A-Z0-9]{0,6}",
        slices in proptest::option::of(1u8..=8),
        gb in 0u32..200,
        series in proptest::option::of(prop_oneof![Just('Q'), Just('C'), Just('B'), Just('A')]),
    ) {
        let mut text = board.clone();
        if let Some(s) = slices { text.push_str(&format!("-{s}")); }
        text.push_str(&format!("-{gb}"));
        if let Some(c) = series { text.push(c); }
        let parsed = NvidiaTypeName::parse(&text).unwrap();
        prop_assert_eq!(parsed.to_string(), text);
        prop_assert_eq!(parsed.is_mig_backed(), slices.is_some());
    }
}
