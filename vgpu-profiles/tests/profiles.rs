//! Profiles in TOML, the built-in catalog, overrides, and the catalog golden files.

use std::path::PathBuf;
use vgpu_profiles::profile::{
    parse_profiles, ByteSize, NamePattern, PciAddress, ProfileOrigin, ValueError, Weight,
};
use vgpu_profiles::vendor::{Isolation, Vendor, GIB, MIB};
use vgpu_profiles::{Catalog, ProfileError, ProfileName};

const PATH: &str = "/etc/mdev-manager/profiles.d/site.toml";

fn invalid(text: &str) -> (usize, Option<String>, String) {
    match parse_profiles(PATH, text) {
        Err(ProfileError::Invalid {
            path,
            line,
            key,
            message,
        }) => {
            assert_eq!(path, PATH);
            (line, key, message)
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }
}

#[test]
fn builtin_catalog_parses() {
    Catalog::check_builtin().expect("every embedded catalog file parses");
    let catalog = Catalog::builtin();
    assert!(catalog.len() >= 50, "{} profiles", catalog.len());
    for name in [
        "nvidia-h200-35c",
        "nvidia-h200-1-18c",
        "nvidia-h200-1-18cme",
        "nvidia-h100-7-80c",
        "nvidia-t4-2q",
        "nvidia-a100-1-5c",
        "nvidia-l40s-12q",
        "gvt-v5-1",
        "gvt-v5-8",
        "amd-mxgpu-vf",
        "mbochs-small",
        "mbochs-medium",
        "mbochs-large",
        "mdpy-xga",
        "mtty",
    ] {
        let profile = catalog
            .get(name)
            .unwrap_or_else(|| panic!("built-in {name}"));
        assert!(matches!(profile.origin, ProfileOrigin::Builtin(_)));
        assert!(!profile.description.is_empty(), "{name}");
    }
    let mbochs: Vec<u64> = ["mbochs-small", "mbochs-medium", "mbochs-large"]
        .iter()
        .map(|n| catalog.get(n).unwrap().framebuffer_bytes())
        .collect();
    assert_eq!(mbochs, vec![4 * MIB, 16 * MIB, 64 * MIB]);
    let mig = catalog.get("nvidia-h200-1-18c").unwrap();
    assert_eq!(mig.isolation, Some(Isolation::Mig));
    assert_eq!(mig.framebuffer_bytes(), 18 * GIB);
    assert_eq!(
        catalog.get("amd-mxgpu-vf").unwrap().isolation,
        Some(Isolation::WholeVf)
    );
    // Stable order: names ascending.
    let names: Vec<&str> = catalog.iter().map(|p| p.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
}

const COMPLETE: &str = r#"
[[profile]]
name = "render-16g"
description = "Rendering seat: 16 GiB, at least a quarter of the GPU"
vendor = "nvidia"
framebuffer = "16GiB"
isolation = "time-sliced"

[profile.compute]
weight = 400
min_share = 25
max_share = 50

[profile.pin]
name_pattern = "*-16Q"

[profile.display]
heads = 2
max_resolution = "3840x2160"
ramfb = true
display = true

[[profile]]
name = "gpu-passthrough"
isolation = "passthrough"
[profile.device]
vendor_id = "10de"
class = "0302"
pci_address = "0000:3B:00.0"
"#;

#[test]
fn complete_profile_file() {
    let profiles = parse_profiles(PATH, COMPLETE).unwrap();
    assert_eq!(profiles.len(), 2);
    let p = &profiles[0];
    assert_eq!(p.name.as_str(), "render-16g");
    assert_eq!(p.vendor, Some(Vendor::Nvidia));
    assert_eq!(p.framebuffer_bytes(), 16 * GIB);
    assert_eq!(p.default_weight().get(), 400);
    assert_eq!(p.compute.min_share.map(|s| s.get()), Some(25));
    assert_eq!(p.compute.max_share.map(|s| s.get()), Some(50));
    assert!(p
        .pin
        .name_pattern
        .as_ref()
        .unwrap()
        .matches("NVIDIA A40-16Q"));
    assert_eq!(p.display.heads, Some(2));
    assert!(p.display.ramfb && p.display.display);
    assert_eq!(p.origin, ProfileOrigin::File(PATH.into()));

    let pt = &profiles[1];
    assert_eq!(pt.isolation, Some(Isolation::Passthrough));
    assert_eq!(pt.default_weight(), Weight::DEFAULT);
    assert!(pt.device.matches(0x10de, 0x2335, 0x030200, "0000:3b:00.0"));
    assert!(!pt.device.matches(0x10de, 0x2335, 0x030000, "0000:3b:00.0"));
    assert!(!pt.device.matches(0x1002, 0x2335, 0x030200, "0000:3b:00.0"));

    // to_toml writes the file format back.
    for profile in &profiles {
        let again = parse_profiles(PATH, &profile.to_toml()).unwrap();
        assert_eq!(&again[0], profile);
    }
}

#[test]
fn errors_name_file_line_and_key() {
    let cases: [(&str, usize, &str, &str); 11] = [
        (
            "[[profile]]\nname = \"ok\"\ncolour = \"red\"\n",
            3,
            "profile.colour",
            "unknown field `colour`",
        ),
        (
            "[[profile]]\nname = \"Bad Name\"\n",
            2,
            "profile.name",
            "invalid profile name",
        ),
        (
            "[[profile]]\nname = \"ok\"\n[profile.compute]\nweight = 0\n",
            4,
            "profile.compute.weight",
            "outside 1..=10000",
        ),
        (
            "[[profile]]\nname = \"ok\"\n[profile.compute]\nmin_share = 101\n",
            4,
            "profile.compute.min_share",
            "outside 1..=100",
        ),
        (
            "[[profile]]\nname = \"ok\"\nframebuffer = \"16\"\n",
            3,
            "profile.framebuffer",
            "invalid size",
        ),
        (
            "[[profile]]\nname = \"ok\"\nisolation = \"shared\"\n",
            3,
            "profile.isolation",
            "unknown variant `shared`",
        ),
        (
            "[[profile]]\nname = \"ok\"\n[profile.pin]\ntype = \"x\"\n",
            4,
            "profile.pin.type",
            "unknown field `type`",
        ),
        (
            "[[profile]]\nname = \"ok\"\n[profile.display]\nmax_resolution = \"big\"\n",
            4,
            "profile.display.max_resolution",
            "invalid resolution",
        ),
        (
            "[[profile]]\nname = \"pt\"\nisolation = \"passthrough\"\n[profile.device]\npci_address = \"0000:3b:00.9\"\n",
            5,
            "profile.device.pci_address",
            "invalid PCI address",
        ),
        (
            "[[profile]]\nname = \"ok\"\nframebuffer = 16\n",
            3,
            "profile.framebuffer",
            "invalid type",
        ),
        ("[[profile]\nname = \"ok\"\n", 1, "profile", ""),
    ];
    for (text, line, key, needle) in cases {
        let (got_line, got_key, message) = invalid(text);
        assert_eq!(got_line, line, "{text:?}: {message}");
        assert_eq!(got_key.as_deref(), Some(key), "{text:?}: {message}");
        assert!(message.contains(needle), "{text:?}: {message}");
    }
    // The Display form carries all three.
    let error = parse_profiles(PATH, "[[profile]]\nname = \"ok\"\ncolour = 1\n").unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "{PATH}, line 3, key `profile.colour`: unknown field"
        )),
        "{text}"
    );
}

#[test]
fn missing_name_and_cross_key_rules() {
    let (line, _, message) = invalid("[[profile]]\ndescription = \"x\"\n");
    assert_eq!(line, 1);
    assert!(message.contains("missing field `name`"), "{message}");

    let rules: [(&str, &str, &str); 5] = [
        (
            "[[profile]]\nname = \"a\"\n[profile.compute]\nmin_share = 60\nmax_share = 50\n",
            "profile.compute.min_share",
            "above max_share",
        ),
        (
            "[[profile]]\nname = \"a\"\nisolation = \"passthrough\"\n",
            "profile.device",
            "needs a [profile.device]",
        ),
        (
            "[[profile]]\nname = \"a\"\n[profile.device]\nvendor_id = \"10de\"\n",
            "profile.device",
            "applies only to",
        ),
        (
            "[[profile]]\nname = \"a\"\nvendor = \"amd\"\nisolation = \"mig\"\n",
            "profile.isolation",
            "only on NVIDIA",
        ),
        (
            "[[profile]]\nname = \"a\"\nisolation = \"passthrough\"\n[profile.device]\nvendor_id = \"10de\"\n[profile.pin]\ntype_id = \"x\"\n",
            "profile.pin",
            "pins",
        ),
    ];
    for (text, key, needle) in rules {
        let (line, got_key, message) = invalid(text);
        assert_eq!(line, 1, "{text:?}");
        assert_eq!(got_key.as_deref(), Some(key), "{text:?}");
        assert!(message.contains(needle), "{text:?}: {message}");
        assert!(message.contains("profile `a`"), "{message}");
    }

    let duplicate = "[[profile]]\nname = \"a\"\n\n[[profile]]\nname = \"a\"\n";
    assert_eq!(
        parse_profiles(PATH, duplicate),
        Err(ProfileError::Duplicate {
            path: PATH.into(),
            line: 4,
            first_line: 1,
            name: "a".into()
        })
    );
    // An empty file is a valid file with no profiles.
    assert_eq!(parse_profiles(PATH, "# nothing yet\n"), Ok(vec![]));
}

#[test]
fn overrides_add_and_replace_by_name() {
    let first = "[[profile]]\nname = \"mbochs-small\"\ndescription = \"site small\"\nvendor = \"mbochs\"\nframebuffer = \"8MiB\"\n";
    let second = "[[profile]]\nname = \"site-extra\"\n\n[[profile]]\nname = \"mbochs-small\"\ndescription = \"later wins\"\nframebuffer = \"4MiB\"\n";
    let builtin = Catalog::builtin();
    let catalog =
        Catalog::with_overrides(&[("/etc/a.toml", first), ("/etc/b.toml", second)]).unwrap();
    assert_eq!(catalog.len(), builtin.len() + 1);
    let small = catalog.get("mbochs-small").unwrap();
    assert_eq!(small.description, "later wins");
    assert_eq!(small.origin, ProfileOrigin::File("/etc/b.toml".into()));
    assert!(catalog.get("site-extra").is_some());

    let bad = "[[profile]]\nname = \"x\"\nweight = 3\n";
    let error =
        Catalog::with_overrides(&[("/etc/a.toml", first), ("/etc/bad.toml", bad)]).unwrap_err();
    assert!(
        error.to_string().contains("/etc/bad.toml, line 3"),
        "{error}"
    );

    let (catalog, errors) =
        Catalog::with_overrides_skipping_errors(&[("/etc/bad.toml", bad), ("/etc/a.toml", first)]);
    assert_eq!(errors.len(), 1);
    assert_eq!(
        catalog.get("mbochs-small").unwrap().description,
        "site small"
    );
    assert!(catalog.get("x").is_none());
}

#[test]
fn value_types() {
    for good in [
        "a",
        "0",
        "mbochs-small",
        "nvidia-h200-1-18cme",
        "a.b_c-d",
        "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc",
    ] {
        assert!(ProfileName::new(good).is_ok(), "{good}");
    }
    for bad in [
        "",
        "-a",
        ".a",
        "_a",
        "A",
        "a b",
        "a/b",
        "é",
        "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd",
    ] {
        assert!(
            matches!(ProfileName::new(bad), Err(ValueError::ProfileName(_))),
            "{bad}"
        );
    }
    assert_eq!(ByteSize::parse("512MiB"), Ok(ByteSize(512 * MIB)));
    assert_eq!(ByteSize::parse("18 GiB"), Ok(ByteSize(18 * GIB)));
    assert_eq!(ByteSize::parse("4M"), Ok(ByteSize(4 * MIB)));
    for bad in [
        "",
        "GiB",
        "1.5GiB",
        "16",
        "16GB",
        "0MiB",
        "99999999999999999999TiB",
    ] {
        assert!(ByteSize::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(ByteSize(2560 * MIB).to_string(), "2560MiB");
    assert_eq!(ByteSize(18 * GIB).to_string(), "18GiB");

    let pattern = NamePattern::new("H200*-1-18C").unwrap();
    assert!(pattern.matches("H200X-1-18C"));
    assert!(pattern.matches("h200-1-18c"));
    assert!(!pattern.matches("H200X-1-18CME"));
    assert!(!pattern.matches("H100-1-18C"));
    assert!(NamePattern::new("*").unwrap().matches(""));
    assert!(NamePattern::new("a*b*c").unwrap().matches("aXbYc"));
    assert!(!NamePattern::new("a*b*c").unwrap().matches("acb"));
    assert!(!NamePattern::new("ab*ba").unwrap().matches("aba"));
    assert!(NamePattern::new(" ").is_err());

    assert!(PciAddress::parse("0000:3b:00.0").is_ok());
    for bad in [
        "0000:3b:00",
        "000:3b:00.0",
        "0000:3b:20.0",
        "0000:3b:00.8",
        "zzzz:3b:00.0",
    ] {
        assert!(PciAddress::parse(bad).is_err(), "{bad}");
    }
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "read {}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{} differs from the rendering; run `UPDATE_GOLDEN=1 cargo test -p vgpu-profiles` and review the diff\n--- actual ---\n{actual}",
        path.display()
    );
}

#[test]
fn catalog_golden_table() {
    golden("catalog.txt", &Catalog::builtin().render_table());
}

#[test]
fn catalog_golden_toml_and_round_trip() {
    let catalog = Catalog::builtin();
    let toml = catalog.render_toml();
    golden("catalog.toml", &toml);
    let reparsed = parse_profiles("catalog.toml", &toml).unwrap();
    assert_eq!(reparsed.len(), catalog.len());
    for (again, original) in reparsed.iter().zip(catalog.iter()) {
        assert_eq!(again.name, original.name);
        assert_eq!(again.to_toml(), original.to_toml());
    }
}

mod never_panics {
    use proptest::prelude::*;
    use vgpu_profiles::profile::{parse_profiles, ByteSize, NamePattern};
    use vgpu_profiles::{Catalog, ProfileName};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn on_arbitrary_text(text in "\\PC{0,300}") {
            let _ = parse_profiles("fuzz.toml", &text);
            let _ = ProfileName::new(&text);
            let _ = ByteSize::parse(&text);
            if let Ok(pattern) = NamePattern::new(&text) {
                let _ = pattern.matches(&text);
                let _ = pattern.matches("NVIDIA H200X-1-18C");
            }
        }

        #[test]
        fn on_profile_shaped_text(
            lines in proptest::collection::vec(
                prop_oneof![
                    Just("[[profile]]".to_owned()),
                    Just("[profile.compute]".to_owned()),
                    Just("[profile.pin]".to_owned()),
                    Just("[profile.device]".to_owned()),
                    Just("[profile.display]".to_owned()),
                    "(name|description|vendor|framebuffer|isolation|weight|min_share|max_share|type_id|name_pattern|vendor_id|class|pci_address|heads|max_resolution|ramfb|bogus) = (\"[a-z0-9*:. -]{0,12}\"|[0-9]{1,6}|true)",
                ],
                0..16,
            ),
            pattern in "[A-Za-z0-9*-]{1,12}",
            name in "[A-Za-z0-9 -]{0,16}",
        ) {
            let text = lines.join("\n");
            match parse_profiles("fuzz.toml", &text) {
                Ok(profiles) => {
                    // Whatever parses also loads as an override and renders back.
                    let catalog = Catalog::with_overrides(&[("fuzz.toml", &text)]).unwrap();
                    for p in &profiles {
                        prop_assert!(catalog.get(p.name.as_str()).is_some());
                        let again = parse_profiles("again.toml", &p.to_toml()).unwrap();
                        prop_assert_eq!(again[0].to_toml(), p.to_toml());
                    }
                }
                Err(error) => prop_assert!(error.to_string().starts_with("fuzz.toml, line ")),
            }
            if let Ok(p) = NamePattern::new(&pattern) {
                let _ = p.matches(&name);
            }
        }
    }
}
