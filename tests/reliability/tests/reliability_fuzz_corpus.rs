//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) through the same entry points
//! the `cargo fuzz` targets call, so CI checks every seed and every committed regression input
//! without cargo-fuzz.

use std::collections::HashMap;
use std::path::PathBuf;

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
    assert!(mdev_manager::import::parse_definition("escape", &escape).is_err());
    // The entry point's own property checks must fire on an accepted unsafe name: feed a
    // definition that parses and check the entry point runs clean on it.
    fuzz_entry::mdevctl_json(br#"{"mdev_type": "nvidia-63", "start": "auto"}"#);
}
