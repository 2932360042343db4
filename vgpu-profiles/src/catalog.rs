//! The profile catalog: the built-in profiles plus the admin's files, by name.

use crate::profile::{parse_file, Profile, ProfileError};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The embedded catalog files, in load order (name, text).
const BUILTIN_FILES: [(&str, &str); 5] = [
    (
        "nvidia-hopper.toml",
        include_str!("catalog/nvidia-hopper.toml"),
    ),
    (
        "nvidia-examples.toml",
        include_str!("catalog/nvidia-examples.toml"),
    ),
    ("intel-gvt.toml", include_str!("catalog/intel-gvt.toml")),
    ("amd.toml", include_str!("catalog/amd.toml")),
    (
        "kernel-samples.toml",
        include_str!("catalog/kernel-samples.toml"),
    ),
];

/// Profiles by name, iterated in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    profiles: BTreeMap<String, Profile>,
}

impl Catalog {
    /// An empty catalog.
    pub fn empty() -> Catalog {
        Catalog::default()
    }

    /// The built-in profiles.
    pub fn builtin() -> Catalog {
        let mut catalog = Catalog::empty();
        for (name, text) in BUILTIN_FILES {
            // The embedded files are fixed at build time and parsed by the tests
            // (`builtin_catalog_parses`), so an error here cannot happen in a release.
            if let Ok(profiles) = parse_file(&format!("<built-in>/{name}"), text, true) {
                catalog.insert_all(profiles);
            }
        }
        catalog
    }

    /// Checks that every embedded catalog file parses (for tests and start-up checks).
    pub fn check_builtin() -> Result<(), ProfileError> {
        for (name, text) in BUILTIN_FILES {
            parse_file(&format!("<built-in>/{name}"), text, true)?;
        }
        Ok(())
    }

    /// The built-in profiles, then each file in order: a file adds profiles or replaces
    /// those of the same name. The first bad file stops the load.
    pub fn with_overrides(files: &[(&str, &str)]) -> Result<Catalog, ProfileError> {
        let mut catalog = Catalog::builtin();
        for (path, text) in files {
            catalog.insert_all(parse_file(path, text, false)?);
        }
        Ok(catalog)
    }

    /// Like [`Catalog::with_overrides`], but a bad file is skipped (none of its profiles
    /// apply) and reported, and the other files still load.
    pub fn with_overrides_skipping_errors(files: &[(&str, &str)]) -> (Catalog, Vec<ProfileError>) {
        let mut catalog = Catalog::builtin();
        let mut errors = Vec::new();
        for (path, text) in files {
            match parse_file(path, text, false) {
                Ok(profiles) => catalog.insert_all(profiles),
                Err(error) => errors.push(error),
            }
        }
        (catalog, errors)
    }

    /// Adds or replaces one profile.
    pub fn insert(&mut self, profile: Profile) {
        self.profiles.insert(profile.name.to_string(), profile);
    }

    fn insert_all(&mut self, profiles: Vec<Profile>) {
        for profile in profiles {
            self.insert(profile);
        }
    }

    /// The profile of this name.
    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.profiles.get(name)
    }

    /// Every profile, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Profile> {
        self.profiles.values()
    }

    /// How many profiles there are.
    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }

    /// A fixed-width table of the catalog, one profile a line, in name order.
    pub fn render_table(&self) -> String {
        let rows: Vec<[String; 7]> = self
            .iter()
            .map(|p| {
                [
                    p.name.to_string(),
                    p.isolation.map_or("any".into(), |i| i.to_string()),
                    p.vendor.map_or("any".into(), |v| v.to_string()),
                    p.framebuffer.map_or("-".into(), |f| f.to_string()),
                    p.compute.weight.get().to_string(),
                    pin_summary(p),
                    p.origin.to_string(),
                ]
            })
            .collect();
        let header = [
            "NAME",
            "ISOLATION",
            "VENDOR",
            "FRAMEBUFFER",
            "WEIGHT",
            "PIN / DEVICE",
            "ORIGIN",
        ];
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.len());
            }
        }
        let mut out = String::new();
        let mut line = |cells: Vec<&str>| {
            let mut text = String::new();
            for (cell, width) in cells.iter().zip(&widths) {
                let _ = write!(text, "{cell:<width$}  ");
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(header.to_vec());
        for row in &rows {
            line(row.iter().map(String::as_str).collect());
        }
        out
    }

    /// The whole catalog as TOML, in name order (a file in the profiles format).
    pub fn render_toml(&self) -> String {
        self.iter()
            .map(Profile::to_toml)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn pin_summary(profile: &Profile) -> String {
    let mut parts = Vec::new();
    if let Some(id) = &profile.pin.type_id {
        parts.push(format!("type_id={id}"));
    }
    if let Some(name) = &profile.pin.type_name {
        parts.push(format!("type_name={name}"));
    }
    if let Some(pattern) = &profile.pin.name_pattern {
        parts.push(format!("name={}", pattern.as_str()));
    }
    let device = &profile.device;
    if let Some(v) = device.vendor_id {
        parts.push(format!("vendor_id={:04x}", v.0));
    }
    if let Some(d) = device.device_id {
        parts.push(format!("device_id={:04x}", d.0));
    }
    if let Some(c) = &device.class {
        parts.push(format!("class={}", String::from(c.clone())));
    }
    if let Some(a) = &device.pci_address {
        parts.push(format!("pci={a}"));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}
