//! mdevctl 1.4's output formats for `list` and `types`, from plain records (no D-Bus here).
//!
//! Contract (what mdevctl prints for the same host):
//! - `list --dumpjson`: `[]` when nothing matches, else one outer object, parents in sorted
//!   order, each an array of `{ "<uuid>": {"mdev_type", "start", "attrs"} }` sorted by UUID;
//!   with `--uuid` and exactly one match, the bare `{"mdev_type", "start", "attrs"}` object
//!   (what a definition file holds). No trailing newline.
//! - `list`: one line `UUID PARENT TYPE auto|manual` per device, plus ` (defined)` for an
//!   active device that has a definition, ` (active)` for a defined device that is running;
//!   `--verbose` adds the attributes (`  Attrs:` then `    @{i}: {"name":"value"}`).
//! - `types --dumpjson`: `[]` or one outer object of parents, each an array of
//!   `{ "<type>": {available_instances, device_api, name?, description?} }` sorted by type id.
//! - `types`: `PARENT`, then per type `  TYPE`, `    Available instances: N`,
//!   `    Device API: API`, `    Name: N` and `    Description: D` when not empty.

use crate::json::Json;
use std::collections::BTreeMap;

/// One mdev as mdevctl lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Hyphenated lower-case UUID.
    pub uuid: String,
    /// Parent sysfs name.
    pub parent: String,
    /// mdev type id.
    pub mdev_type: String,
    /// Started when its parent appears (`auto`), else `manual`.
    pub autostart: bool,
    /// Attributes written at start, in order.
    pub attrs: Vec<(String, String)>,
    /// Exists in the kernel now.
    pub active: bool,
    /// Has a stored definition.
    pub defined: bool,
}

/// Which listing: running devices (`list`) or definitions (`list --defined`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Running devices.
    Active,
    /// Stored definitions.
    Defined,
}

/// One mdev type of a parent as mdevctl lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    /// Parent sysfs name.
    pub parent: String,
    /// Type id (the directory name).
    pub id: String,
    /// `available_instances`.
    pub available_instances: u32,
    /// `device_api`.
    pub device_api: String,
    /// `name`, empty when the type has none.
    pub name: String,
    /// `description` as mdevctl shows it (trimmed, line breaks as `, `).
    pub description: String,
}

impl Device {
    fn start_word(&self) -> &'static str {
        if self.autostart {
            "auto"
        } else {
            "manual"
        }
    }

    /// The `{"mdev_type", "start", "attrs"}` object of a definition file.
    pub fn config_json(&self) -> Json {
        Json::Obj(vec![
            ("mdev_type".into(), Json::Str(self.mdev_type.clone())),
            ("start".into(), Json::Str(self.start_word().into())),
            (
                "attrs".into(),
                Json::Arr(
                    self.attrs
                        .iter()
                        .map(|(name, value)| Json::single(name.clone(), Json::Str(value.clone())))
                        .collect(),
                ),
            ),
        ])
    }

    fn text(&self, listing: Listing, verbose: bool) -> String {
        let mut line = format!(
            "{} {} {} {}",
            self.uuid,
            self.parent,
            self.mdev_type,
            self.start_word()
        );
        match listing {
            Listing::Defined if self.active => line.push_str(" (active)"),
            Listing::Active if self.defined => line.push_str(" (defined)"),
            _ => {}
        }
        line.push('\n');
        if verbose && !self.attrs.is_empty() {
            line.push_str("  Attrs:\n");
            for (index, (name, value)) in self.attrs.iter().enumerate() {
                line.push_str(&format!("    @{{{index}}}: {{\"{name}\":\"{value}\"}}\n"));
            }
        }
        line
    }
}

/// `items` grouped by their parent (sorted), each group sorted by `order`: the order every
/// mdevctl listing prints in.
fn grouped<'a, T>(
    items: &'a [T],
    parent: impl Fn(&'a T) -> &'a str,
    order: impl Fn(&T, &T) -> std::cmp::Ordering,
) -> BTreeMap<&'a str, Vec<&'a T>> {
    let mut groups: BTreeMap<&str, Vec<&T>> = BTreeMap::new();
    for item in items {
        groups.entry(parent(item)).or_default().push(item);
    }
    for group in groups.values_mut() {
        group.sort_by(|a, b| order(a, b));
    }
    groups
}

/// Devices grouped by parent (sorted), each group sorted by UUID.
fn grouped_devices(devices: &[Device]) -> BTreeMap<&str, Vec<&Device>> {
    grouped(devices, |d| &d.parent, |a, b| a.uuid.cmp(&b.uuid))
}

/// `mdevctl list --dumpjson` of `devices` (already filtered); `by_uuid` when `--uuid` was
/// given.
pub fn list_json(devices: &[Device], by_uuid: bool) -> String {
    let groups = grouped_devices(devices);
    if by_uuid && devices.len() <= 1 {
        return match groups.values().next().and_then(|group| group.first()) {
            Some(device) => device.config_json().pretty(),
            None => Json::Arr(vec![]).pretty(),
        };
    }
    if groups.is_empty() {
        return Json::Arr(vec![]).pretty();
    }
    let parents = groups
        .into_iter()
        .map(|(parent, group)| {
            let children = group
                .into_iter()
                .map(|device| Json::single(device.uuid.clone(), device.config_json()))
                .collect();
            (parent.to_string(), Json::Arr(children))
        })
        .collect();
    Json::Arr(vec![Json::Obj(parents)]).pretty()
}

/// `mdevctl list [--defined] [--verbose]` of `devices` (already filtered).
pub fn list_text(devices: &[Device], listing: Listing, verbose: bool) -> String {
    grouped_devices(devices)
        .values()
        .flatten()
        .map(|device| device.text(listing, verbose))
        .collect()
}

/// Types grouped by parent (sorted), each group sorted by type id.
fn grouped_types(types: &[TypeInfo]) -> BTreeMap<&str, Vec<&TypeInfo>> {
    grouped(types, |t| &t.parent, |a, b| a.id.cmp(&b.id))
}

/// `mdevctl types --dumpjson`.
pub fn types_json(types: &[TypeInfo]) -> String {
    let groups = grouped_types(types);
    if groups.is_empty() {
        return Json::Arr(vec![]).pretty();
    }
    let parents = groups
        .into_iter()
        .map(|(parent, group)| {
            let children = group
                .into_iter()
                .map(|info| {
                    let mut fields = vec![
                        (
                            "available_instances".to_string(),
                            Json::Num(info.available_instances.into()),
                        ),
                        ("device_api".to_string(), Json::Str(info.device_api.clone())),
                    ];
                    if !info.name.is_empty() {
                        fields.push(("name".into(), Json::Str(info.name.clone())));
                    }
                    if !info.description.is_empty() {
                        fields.push(("description".into(), Json::Str(info.description.clone())));
                    }
                    Json::single(info.id.clone(), Json::Obj(fields))
                })
                .collect();
            (parent.to_string(), Json::Arr(children))
        })
        .collect();
    Json::Arr(vec![Json::Obj(parents)]).pretty()
}

/// `mdevctl types`.
pub fn types_text(types: &[TypeInfo]) -> String {
    let mut text = String::new();
    for (parent, group) in grouped_types(types) {
        text.push_str(&format!("{parent}\n"));
        for info in group {
            text.push_str(&format!("  {}\n", info.id));
            text.push_str(&format!(
                "    Available instances: {}\n",
                info.available_instances
            ));
            text.push_str(&format!("    Device API: {}\n", info.device_api));
            if !info.name.is_empty() {
                text.push_str(&format!("    Name: {}\n", info.name));
            }
            if !info.description.is_empty() {
                text.push_str(&format!("    Description: {}\n", info.description));
            }
        }
    }
    text
}

/// A type's description as mdevctl shows it: trimmed, inner line breaks as `, `.
pub fn description_line(description: &str) -> String {
    description.trim().replace('\n', ", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(uuid: &str, parent: &str, autostart: bool, active: bool, defined: bool) -> Device {
        Device {
            uuid: uuid.into(),
            parent: parent.into(),
            mdev_type: "i915-GVTg_V5_8".into(),
            autostart,
            attrs: vec![],
            active,
            defined,
        }
    }

    const A: &str = "4a0a190f-dcf3-4def-9342-c48768f0c940";
    const B: &str = "9f579710-6ffc-4201-987a-4ffa0fb1f3a5";

    #[test]
    fn defined_listing_json_groups_by_parent_and_sorts_by_uuid() {
        let mut second = device(B, "0000:00:02.0", false, false, true);
        second.attrs = vec![("assign_adapter".into(), "5".into())];
        let devices = [second, device(A, "0000:00:02.0", true, true, true)];
        assert_eq!(
            list_json(&devices, false),
            r#"[
  {
    "0000:00:02.0": [
      {
        "4a0a190f-dcf3-4def-9342-c48768f0c940": {
          "mdev_type": "i915-GVTg_V5_8",
          "start": "auto",
          "attrs": []
        }
      },
      {
        "9f579710-6ffc-4201-987a-4ffa0fb1f3a5": {
          "mdev_type": "i915-GVTg_V5_8",
          "start": "manual",
          "attrs": [
            {
              "assign_adapter": "5"
            }
          ]
        }
      }
    ]
  }
]"#
        );
        assert_eq!(
            list_text(&devices, Listing::Defined, true),
            format!(
                "{A} 0000:00:02.0 i915-GVTg_V5_8 auto (active)\n\
                 {B} 0000:00:02.0 i915-GVTg_V5_8 manual\n  Attrs:\n    @{{0}}: {{\"assign_adapter\":\"5\"}}\n"
            )
        );
    }

    #[test]
    fn a_uuid_listing_with_one_match_prints_the_bare_definition_and_none_prints_an_empty_array() {
        let devices = [device(A, "0000:00:02.0", false, true, false)];
        assert_eq!(
            list_json(&devices, true),
            "{\n  \"mdev_type\": \"i915-GVTg_V5_8\",\n  \"start\": \"manual\",\n  \"attrs\": []\n}"
        );
        assert_eq!(list_json(&[], true), "[]");
        assert_eq!(list_json(&[], false), "[]");
        assert_eq!(list_text(&[], Listing::Active, false), "");
    }

    #[test]
    fn active_listing_marks_devices_that_have_a_definition() {
        let devices = [
            device(B, "0000:00:03.0", true, true, true),
            device(A, "0000:00:02.0", false, true, false),
        ];
        assert_eq!(
            list_text(&devices, Listing::Active, false),
            format!(
                "{A} 0000:00:02.0 i915-GVTg_V5_8 manual\n{B} 0000:00:03.0 i915-GVTg_V5_8 auto (defined)\n"
            )
        );
    }

    #[test]
    fn types_print_name_and_description_only_when_present() {
        let types = [
            TypeInfo {
                parent: "0000:00:02.0".into(),
                id: "mdev_type2".into(),
                available_instances: 16,
                device_api: "vfio-pci".into(),
                name: "name2".into(),
                description: String::new(),
            },
            TypeInfo {
                parent: "0.0.26ab".into(),
                id: "vfio_ccw-io".into(),
                available_instances: 4,
                device_api: "vfio_mdev".into(),
                name: "name".into(),
                description: "description".into(),
            },
        ];
        assert_eq!(
            types_json(&types),
            r#"[
  {
    "0.0.26ab": [
      {
        "vfio_ccw-io": {
          "available_instances": 4,
          "device_api": "vfio_mdev",
          "name": "name",
          "description": "description"
        }
      }
    ],
    "0000:00:02.0": [
      {
        "mdev_type2": {
          "available_instances": 16,
          "device_api": "vfio-pci",
          "name": "name2"
        }
      }
    ]
  }
]"#
        );
        assert_eq!(
            types_text(&types),
            "0.0.26ab\n  vfio_ccw-io\n    Available instances: 4\n    Device API: vfio_mdev\n    Name: name\n    Description: description\n\
             0000:00:02.0\n  mdev_type2\n    Available instances: 16\n    Device API: vfio-pci\n    Name: name2\n"
        );
        assert_eq!(types_json(&[]), "[]");
        assert_eq!(description_line(" a\nb \n"), "a, b");
    }
}
