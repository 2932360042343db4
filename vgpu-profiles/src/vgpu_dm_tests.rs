use super::*;

const CONFIG_EXAMPLE: &str = include_str!("../fixtures/vgpu-device-manager/config-example.yaml");
const CONFIG_T4: &str = include_str!("../fixtures/vgpu-device-manager/config-t4.yaml");
const README_ONE_OFF: &str = include_str!("../fixtures/vgpu-device-manager/readme-one-off.yaml");

#[test]
fn every_configuration_of_nvidias_example_files_parses() {
    for (file, text) in [
        ("config-example.yaml", CONFIG_EXAMPLE),
        ("config-t4.yaml", CONFIG_T4),
    ] {
        let all = parse_all_configs(file, text).unwrap_or_else(|error| panic!("{error}"));
        assert!(all.len() > 1, "{file}");
        for config in &all {
            assert!(!config.entries.is_empty(), "{file} -c {}", config.name);
            assert_eq!(config.file, file);
        }
        let last = &all[all.len() - 1];
        assert_eq!(&parse_vgpu_dm(file, text, &last.name).unwrap(), last);
    }
}

#[test]
fn the_readme_one_off_file_selects_its_only_configuration_without_a_name() {
    let config = parse_vgpu_dm("<stdin>", README_ONE_OFF, "").unwrap();
    assert_eq!(config.name, "T4-1Q");
    assert_eq!(config.entries.len(), 1);
    assert_eq!(config.entries[0].devices, DeviceSelection::All);
    assert_eq!(
        config.entries[0].vgpu_devices,
        vec![VgpuCount {
            type_name: "T4-1Q".into(),
            count: 16,
            line: 6,
            key: "vgpu-configs.T4-1Q[0].vgpu-devices.T4-1Q".into(),
        }]
    );
}

#[test]
fn a_file_with_several_configurations_needs_a_name() {
    let error = parse_vgpu_dm("config-t4.yaml", CONFIG_T4, "")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("config-t4.yaml: the file has 8 configurations"),
        "{error}"
    );
    assert!(error.contains("T4-small"), "{error}");
    let error = parse_vgpu_dm("config-t4.yaml", CONFIG_T4, "T4-3Q")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("configuration \"T4-3Q\" is not in the file"),
        "{error}"
    );
}

#[test]
fn the_custom_t4_configurations_pick_devices_by_index() {
    let config = parse_vgpu_dm("config-t4.yaml", CONFIG_T4, "T4-small").unwrap();
    assert_eq!(config.entries[0].devices, DeviceSelection::Indices(vec![0]));
    assert_eq!(config.entries[1].devices, DeviceSelection::Indices(vec![1]));
    assert_eq!(config.entries[1].vgpu_devices[0].type_name, "T4-2Q");
    assert_eq!(config.entries[1].vgpu_devices[0].count, 8);
}

#[test]
fn the_default_configuration_filters_by_device_id() {
    let config = parse_vgpu_dm("config-example.yaml", CONFIG_EXAMPLE, "default").unwrap();
    let t4 = config
        .entries
        .iter()
        .find(|entry| {
            entry
                .device_filter
                .iter()
                .any(|f| f.matches(0x10de, 0x1eb8))
        })
        .expect("the T4 (10de:1eb8) has an entry");
    assert_eq!(t4.vgpu_devices[0].type_name, "T4-8Q");
    assert_eq!(t4.device_filter[0].to_string(), "0x1EB810DE");
}

#[test]
fn an_unknown_key_is_refused_naming_file_line_and_key() {
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: all\n    colour: red\n    vgpu-devices: {}\n";
    let error = parse_vgpu_dm("host.yaml", text, "")
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "host.yaml: line 5: key vgpu-configs.a[0].colour: unexpected field \"colour\" (expected devices, device-filter, vgpu-devices)"
    );
    let text = "version: v1\nmig-configs: {}\n";
    let error = parse_vgpu_dm("host.yaml", text, "")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("host.yaml: line 2: key mig-configs: unexpected field"),
        "{error}"
    );
}

#[test]
fn the_version_must_be_v1() {
    let error = parse_vgpu_dm("f", "version: v2\nvgpu-configs: {}\n", "")
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "f: line 1: key version: unknown version \"v2\" (v1 is supported)"
    );
    let error = parse_vgpu_dm(
        "f",
        "vgpu-configs:\n  a:\n  - devices: all\n    vgpu-devices: {}\n",
        "",
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("key version: missing field"), "{error}");
}

#[test]
fn a_malformed_type_name_or_count_names_its_line() {
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: all\n    vgpu-devices:\n      T4-1Q: 2\n      t4-2q: 1\n";
    let error = parse_vgpu_dm("f", text, "").unwrap_err().to_string();
    assert!(
        error.starts_with(
            "f: line 7: key vgpu-configs.a[0].vgpu-devices.t4-2q: malformed vGPU type name"
        ),
        "{error}"
    );
    let text =
        "version: v1\nvgpu-configs:\n  a:\n  - devices: all\n    vgpu-devices:\n      T4-1Q: 0\n";
    let error = parse_vgpu_dm("f", text, "").unwrap_err().to_string();
    assert_eq!(
        error,
        "f: line 6: key vgpu-configs.a[0].vgpu-devices.T4-1Q: count \"0\" is not a whole number of at least 1"
    );
}

#[test]
fn time_sliced_and_mig_backed_types_do_not_mix_in_one_entry() {
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: all\n    vgpu-devices:\n      A100-4C: 1\n      A100-1-5C: 2\n";
    let error = parse_vgpu_dm("f", text, "").unwrap_err().to_string();
    assert!(error.contains("line 7"), "{error}");
    assert!(
        error.contains("cannot mix time-sliced and MIG-backed"),
        "{error}"
    );
}

#[test]
fn devices_is_all_or_a_list_of_indices() {
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: some\n    vgpu-devices: {}\n";
    let error = parse_vgpu_dm("f", text, "").unwrap_err().to_string();
    assert!(
        error.starts_with("f: line 4: key vgpu-configs.a[0].devices: \"some\" is neither"),
        "{error}"
    );
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: [0, x]\n    vgpu-devices: {}\n";
    let error = parse_vgpu_dm("f", text, "").unwrap_err().to_string();
    assert!(error.contains("\"x\" is not a device index"), "{error}");
    let text = "version: v1\nvgpu-configs:\n  a:\n  - vgpu-devices: {}\n";
    let error = parse_vgpu_dm("f", text, "").unwrap_err().to_string();
    assert!(
        error.contains("key vgpu-configs.a[0].devices: missing required field"),
        "{error}"
    );
}

#[test]
fn an_empty_vgpu_devices_mapping_clears_the_gpu() {
    let text = "version: v1\nvgpu-configs:\n  none:\n  - devices: all\n    vgpu-devices: {}\n";
    let config = parse_vgpu_dm("f", text, "none").unwrap();
    assert!(config.entries[0].vgpu_devices.is_empty());
}

#[test]
fn device_filters_parse_as_one_value_or_a_list() {
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: all\n    device-filter: [\"0x1EB810DE\", \"0x25B610DE\"]\n    vgpu-devices: {}\n";
    let config = parse_vgpu_dm("f", text, "").unwrap();
    let filters = &config.entries[0].device_filter;
    assert_eq!(filters.len(), 2);
    assert!(filters[1].matches(0x10de, 0x25b6));
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: all\n    device-filter: \"0x1EB8\"\n    vgpu-devices: {}\n";
    let config = parse_vgpu_dm("f", text, "").unwrap();
    assert!(!config.entries[0].device_filter[0].matches(0x10de, 0x1eb8));
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: all\n    device-filter: \"T4\"\n    vgpu-devices: {}\n";
    let error = parse_vgpu_dm("f", text, "").unwrap_err().to_string();
    assert!(
        error.starts_with("f: line 5: key vgpu-configs.a[0].device-filter:"),
        "{error}"
    );
}

#[test]
fn a_yaml_syntax_error_names_the_file_and_line() {
    let text = "version: v1\nvgpu-configs:\n  a: [\n";
    let error = parse_vgpu_dm("bad.yaml", text, "").unwrap_err().to_string();
    assert!(error.starts_with("bad.yaml: YAML: "), "{error}");
    assert!(error.contains("line"), "{error}");
}

#[test]
fn a_key_given_twice_is_refused() {
    let text = "version: v1\nvgpu-configs:\n  a:\n  - devices: all\n    vgpu-devices: {T4-1Q: 1, T4-1Q: 2}\n";
    let error = parse_vgpu_dm("f", text, "").unwrap_err().to_string();
    assert!(error.contains("appears twice"), "{error}");
}

#[test]
fn vgpu_type_names_follow_nvidias_naming() {
    for time_sliced in [
        "T4-1Q",
        "M60-0B",
        "A100D-80C",
        "RTX6000-Ada-4Q",
        "6000D-84Q",
    ] {
        assert_eq!(vgpu_type_kind(time_sliced), Some(false), "{time_sliced}");
    }
    for mig_backed in ["A100-1-5C", "A100-1-5CME", "DC-1-24CGFX", "6000D-1-42Q"] {
        assert_eq!(vgpu_type_kind(mig_backed), Some(true), "{mig_backed}");
    }
    for malformed in [
        "",
        "T4",
        "T4-1",
        "T4-01Q",
        "t4-1Q",
        "T4-1X",
        "A100-0-5C",
        "A100-1-5CXX",
    ] {
        assert_eq!(vgpu_type_kind(malformed), None, "{malformed}");
    }
}

#[test]
fn detection_tells_vgpu_dm_yaml_from_toml() {
    assert!(looks_like_vgpu_dm(CONFIG_T4));
    assert!(looks_like_vgpu_dm("# comment\n---\nversion: v1\n"));
    assert!(!looks_like_vgpu_dm("version = 1\n[[instances]]\n"));
    assert!(!looks_like_vgpu_dm("# only a comment\n"));
}
