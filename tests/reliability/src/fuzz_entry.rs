//! The fuzzing entry points, shared by the `cargo fuzz` targets in `fuzz/` and by the corpus
//! replay test (`tests/reliability_fuzz_corpus.rs`), so CI checks the committed corpora without
//! cargo-fuzz.
//!
//! Each entry point takes arbitrary bytes, feeds them to the code that parses untrusted input
//! on a host, and panics only when that code misbehaves: a panic inside the parser, or a
//! property that must hold for every accepted input (an accepted sysfs name never escapes its
//! directory, an accepted sysfs value never carries a second line).

use std::collections::HashMap;

use dbus_api::options::{from_dict, CreateOptions, DeviceSpec, ForceOptions, NoOptions};
use mdev_host::discovery::names;
use vgpu_profiles::vendor::{
    self, CreatableVgpuType, GvtDescription, MbochsDescription, MdevTypeAttributes, MdevTypeInfo,
    MdpyDescription, MigGpuInstance, MigGpuInstanceProfile, MigPlacements, MigProfileName,
    MigProfileTable, NvidiaDescription, NvidiaTypeName, OfferedType, TypeDescription,
};
use zbus::wire::serialized::{Context, Data};
use zbus::wire::{OwnedVariant, LE};

/// A fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` file and the
/// `fuzz/corpus/<name>/` directory) and its entry point.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Target name.
    pub name: &'static str,
    /// Entry point.
    pub run: fn(&[u8]),
}

/// Every fuzz target.
pub const TARGETS: [Target; 6] = [
    Target {
        name: "domain_xml",
        run: domain_xml,
    },
    Target {
        name: "profile_toml",
        run: profile_toml,
    },
    Target {
        name: "vendor_parsers",
        run: vendor_parsers,
    },
    Target {
        name: "mdevctl_json",
        run: mdevctl_json,
    },
    Target {
        name: "dbus_options",
        run: dbus_options,
    },
    Target {
        name: "engine_model",
        run: crate::engine_model::run,
    },
];

/// The libvirt hook's stdin: a domain XML into a claim plan.
pub fn domain_xml(data: &[u8]) {
    let _ = libvirt_hooks::scan::may_hold_vgpus(data);
    if let Ok(plan) = libvirt_hooks::plan::plan_from_xml(data) {
        let _ = plan.declares_vgpus();
        let _ = plan.is_empty();
        let _ = format!("{plan:?}");
    }
}

/// A profile file from `/etc/mdev-manager/profiles.d`, alone and as a catalog override. A
/// profile that parses must render to TOML that parses back to the same profile.
pub fn profile_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(profiles) = vgpu_profiles::profile::parse_profiles("fuzz.toml", text) else {
        return;
    };
    for profile in &profiles {
        let rendered = profile.to_toml();
        let reparsed = vgpu_profiles::profile::parse_profiles("rendered.toml", &rendered)
            .unwrap_or_else(|e| panic!("rendered profile does not parse: {e}\n{rendered}"));
        let mut back = reparsed
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("rendered profile vanished:\n{rendered}"));
        // Where a profile came from is not part of its TOML.
        back.origin = profile.origin.clone();
        assert_eq!(
            &back, profile,
            "profile changed through to_toml:\n{rendered}"
        );
    }
    // Only files that parse on their own go on to the merge into the built-in catalog, over
    // a copy of the catalog parsed once per process: `Catalog::with_overrides(_skipping_errors)`
    // would parse the catalog's files again for every input (most of the target's time), and
    // is that parse plus these inserts (its own tests cover it).
    static BUILTIN: std::sync::OnceLock<vgpu_profiles::Catalog> = std::sync::OnceLock::new();
    let mut catalog = BUILTIN.get_or_init(vgpu_profiles::Catalog::builtin).clone();
    for profile in profiles {
        catalog.insert(profile);
    }
    let _ = catalog.render_table();
}

/// Every parser of what vendor drivers show in sysfs and `nvidia-smi`. The first byte picks
/// the parser; the rest is the text (fields separated by NUL where a parser takes several).
pub fn vendor_parsers(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let text = text.as_ref();
    match selector % 14 {
        0 => {
            let _ = NvidiaDescription::parse(text);
        }
        1 => {
            let _ = GvtDescription::parse(text).map(|g| g.graphics_memory_bytes());
        }
        2 => {
            let _ = MbochsDescription::parse(text);
        }
        3 => {
            let _ = MdpyDescription::parse(text);
        }
        4 => {
            let _ = NvidiaTypeName::parse(text);
        }
        5 => {
            if let Ok(list) = CreatableVgpuType::parse_list(text) {
                for entry in &list {
                    let _ = OfferedType::from_creatable(entry);
                }
            }
        }
        6 => {
            let _ = MigGpuInstanceProfile::parse_table(text);
        }
        7 => {
            let _ = MigPlacements::parse_list(text);
        }
        8 => {
            let _ = MigGpuInstance::parse_table(text);
        }
        9 => {
            let (lgip, lgipp) = text.split_once('\0').unwrap_or((text, text));
            if let Ok(table) = MigProfileTable::parse(lgip, lgipp) {
                let _ = table.memory_slices(0);
                let _ = table.placements_of(0, 0);
            }
        }
        10 => {
            let _ = MigProfileName::parse(text);
            let _ = vendor::Resolution::parse(text);
        }
        11 => {
            let _ = TypeDescription::parse(Some(text));
        }
        12 => {
            let _ = vendor::parse_type_id(text);
            let _ = vendor::parse_type_name(text);
            let _ = vendor::parse_available_instances(text);
            let _ = vendor::parse_device_api(text);
        }
        _ => {
            // A whole type directory: id, name, description, available_instances, device_api.
            let mut fields = text.split('\0');
            let type_id = fields.next().unwrap_or("");
            let name = fields.next();
            let description = fields.next();
            let available_instances = fields.next().unwrap_or("1\n");
            let device_api = fields.next().unwrap_or("vfio-pci\n");
            let attrs = MdevTypeAttributes {
                type_id,
                name,
                description,
                available_instances,
                device_api,
            };
            if let Ok(info) = MdevTypeInfo::parse(&attrs) {
                assert!(
                    names::check_sysfs_name("mdev type", &info.type_id).is_ok(),
                    "parse_type_id accepted a type id that is no sysfs name: {:?}",
                    info.type_id
                );
                let _ = info.display_name();
                let _ = OfferedType::from_mdev(&info);
            }
        }
    }
}

/// An mdevctl definition file (`/etc/mdevctl.d/<parent>/<uuid>`) as `vgpuctl import` reads it.
/// What it accepts becomes sysfs writes, so no accepted name may leave its directory and no
/// accepted value may carry a second line.
pub fn mdevctl_json(data: &[u8]) {
    let Ok(definition) = mdev_engine::import::parse_definition("fuzz.json", data) else {
        return;
    };
    check_imported_definition(&definition);
}

/// The properties every definition [`mdevctl_json`] sees accepted must have: a type id and
/// attribute names that stay inside their sysfs directory, values of one line. Panics naming
/// the first that does not hold. Public so the corpus test can show that each check fires on a
/// definition that breaks it (the parser never yields one, so the fuzzer alone cannot).
pub fn check_imported_definition(definition: &mdev_engine::import::ImportedDefinition) {
    assert_safe_name("mdev type", &definition.type_id);
    for (name, value) in &definition.attributes {
        for part in name.split('/') {
            assert_safe_name("attribute", part);
        }
        assert!(
            !value.bytes().any(|b| b == b'\n' || b == b'\r' || b == 0),
            "attribute {name} accepted with a multi-line value {value:?}"
        );
    }
}

/// The keys a D-Bus caller controls: an `a{sv}` as the bus delivers it (little-endian wire
/// format), checked as each mutating method checks its options, then the values validated
/// the way the engine validates names before any write.
pub fn dbus_options(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let bytes = Data::new(body, Context::new(LE, 0));
    let Ok((values, _)) = bytes.deserialize::<HashMap<String, OwnedVariant>>() else {
        return;
    };
    // The option sets of the daemon's methods (dbus_api::options), read as the methods read
    // them; every string a set accepts is then validated as the engine validates names.
    let strings: Vec<(&str, String)> = match selector % 4 {
        0 => match from_dict::<CreateOptions>("CreateInstances", values) {
            Ok(options) => [
                ("parent", options.parent),
                ("uuid", options.uuid),
                ("type", options.mdev_type),
                ("placement", options.placement),
            ]
            .into_iter()
            .filter_map(|(key, value)| Some((key, value?)))
            .collect(),
            Err(_) => return,
        },
        1 => match from_dict::<ForceOptions>("Destroy", values) {
            Ok(_) => Vec::new(),
            Err(_) => return,
        },
        2 => match from_dict::<DeviceSpec>("PrepareDomain device", values) {
            Ok(device) => [
                ("kind", device.kind),
                ("uuid", device.uuid),
                ("profile", device.profile),
                ("parent", device.parent),
                ("pci_address", device.pci_address),
                ("placement", device.placement),
            ]
            .into_iter()
            .filter_map(|(key, value)| Some((key, value?)))
            .collect(),
            Err(_) => return,
        },
        _ => match from_dict::<NoOptions>("Rescan", values) {
            Ok(_) => Vec::new(),
            Err(_) => return,
        },
    };
    for (key, value) in strings {
        if let Ok(uuid) = names::parse_uuid(&value) {
            assert_safe_name("uuid", &uuid.to_string());
        }
        if let Ok(address) = value.parse::<names::PciAddress>() {
            assert_safe_name("pci address", &address.to_string());
        }
        if let Ok(name) = names::check_sysfs_name("parent", &value) {
            assert_safe_name("parent", name);
        }
        if let Ok(value) = names::check_sysfs_value(key, &value) {
            assert!(!value.contains('\n'), "{key} accepted with a newline");
        }
    }
}

/// Panics unless `name` is a usable sysfs path component: not empty, not `.` or `..`, no `/`,
/// newline or NUL.
pub fn assert_safe_name(what: &str, name: &str) {
    assert!(
        !name.is_empty()
            && name != "."
            && name != ".."
            && !name.bytes().any(|b| b == b'/' || b == b'\n' || b == 0),
        "{what} {name:?} accepted but it would escape or break a sysfs path"
    );
}
