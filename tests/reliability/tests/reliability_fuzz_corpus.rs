//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the same entry points
//! the `cargo fuzz` targets call, so CI checks every seed and every committed regression input
//! without cargo-fuzz.

use std::collections::HashMap;
use std::path::PathBuf;

use mdev_engine::import::ImportedDefinition;
use reliability::fuzz_entry::{self, TARGETS};
use zbus::wire::serialized::{Context, Data};
use zbus::wire::{OwnedVariant, LE};

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("corpus entry").path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.display().to_string(), data)
        })
        .collect();
    inputs.sort();
    inputs
}

#[test]
fn every_corpus_input_passes_its_target() {
    for target in TARGETS {
        let inputs = corpus(target.name);
        assert!(
            inputs.len() >= 3,
            "corpus of {} has only {} inputs",
            target.name,
            inputs.len()
        );
        for (path, data) in inputs {
            let outcome = std::panic::catch_unwind(|| (target.run)(&data));
            assert!(outcome.is_ok(), "{} fails on {path}", target.name);
        }
    }
}

#[test]
fn dbus_seeds_are_real_wire_dictionaries() {
    // A seed that does not decode only exercises the decoder's error path; the committed
    // seeds must reach the option checks.
    for (path, data) in corpus("dbus_options") {
        let bytes = Data::new(&data[1..], Context::new(LE, 0));
        let decoded = bytes.deserialize::<HashMap<String, OwnedVariant>>();
        assert!(decoded.is_ok(), "{path} is no a{{sv}}: {:?}", decoded.err());
    }
}

#[test]
fn escaping_inputs_are_refused_by_the_parsers() {
    let escape = std::fs::read(corpus_dir("mdevctl_json").join("escape")).expect("escape seed");
    assert!(mdev_engine::import::parse_definition("escape", &escape).is_err());
    // A definition that parses runs clean through the entry point and its checks.
    fuzz_entry::mdevctl_json(br#"{"mdev_type": "nvidia-63", "start": "auto"}"#);
}

fn definition(type_id: &str, attributes: &[(&str, &str)]) -> ImportedDefinition {
    ImportedDefinition {
        type_id: type_id.to_owned(),
        autostart: true,
        attributes: attributes
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
    }
}

fn fires(check: impl FnOnce() + std::panic::UnwindSafe) -> bool {
    std::panic::catch_unwind(check).is_err()
}

#[test]
fn the_entry_points_checks_fire_on_an_accepted_unsafe_definition() {
    // The parser refuses all of these, so the fuzzer cannot show the checks work; a
    // definition built by hand, as if the parser had accepted it, must make them fire.
    let unsafe_definitions = [
        definition("../../x", &[]),
        definition("a/b", &[]),
        definition("..", &[]),
        definition(".", &[]),
        definition("", &[]),
        definition("nvidia-63\n", &[]),
        definition("nvidia\0-63", &[]),
        definition("nvidia-63", &[("../remove", "1")]),
        definition("nvidia-63", &[("a//b", "1")]),
        definition("nvidia-63", &[("a", "1\n2")]),
        definition("nvidia-63", &[("a", "1\r")]),
        definition("nvidia-63", &[("a", "1\0")]),
    ];
    for unsafe_definition in unsafe_definitions {
        assert!(
            fires(|| fuzz_entry::check_imported_definition(&unsafe_definition)),
            "no check fired on {unsafe_definition:?}"
        );
    }
    // The positive control: a safe definition passes the same checks.
    let safe = definition("nvidia-63", &[("vgpu/frl_config", "60")]);
    assert!(!fires(|| fuzz_entry::check_imported_definition(&safe)));
}

#[test]
fn the_sysfs_name_check_fires_on_every_unsafe_name() {
    for name in ["", ".", "..", "../x", "a/b", "a\nb", "a\0b"] {
        assert!(
            fires(|| fuzz_entry::assert_safe_name("parent", name)),
            "{name:?} passed the name check"
        );
    }
    assert!(!fires(|| fuzz_entry::assert_safe_name("parent", "mtty")));
}
