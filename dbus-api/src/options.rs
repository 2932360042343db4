//! The typed `options a{sv}` dictionaries of the API, one struct per option set, shared by
//! the service (which reads them) and the clients (`vgpuctl`, mdevctl-compat, the hook, which
//! write them). On the wire each is still `a{sv}`; a key a struct does not name is refused
//! (`InvalidArgs` naming the key and the method), so a typo never silently changes a call.
//!
//! Every set except [`DeviceSpec`] accepts `auth.no_user_interaction` (udisks' key).

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde::Serialize;
use zbus::wire::serialized::Context;
use zbus::wire::{DeserializeDict, SerializeDict, Type, LE};
use zbus::OwnedVariant;

use crate::BusError;

/// Options of a call that takes none of its own (`Rescan`, `Start`, `Cancel`, reads ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct NoOptions {
    /// `auth.no_user_interaction b`: never ask the caller to authenticate interactively.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// Options of `CreateInstances` and `StartCreateInstances` (`wait-for-parent` only there).
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct CreateOptions {
    /// `parent s`: PCI address of the parent to place the instances on.
    pub parent: Option<String>,
    /// `uuid s`: UUID of the new instance (only with `count` 1).
    pub uuid: Option<String>,
    /// `count u`: how many instances (default 1).
    pub count: Option<u32>,
    /// `autostart b`: create it at boot (implies `persistent`).
    pub autostart: Option<bool>,
    /// `weight u`: scheduling weight.
    pub weight: Option<u32>,
    /// `placement s`: `pack` or `spread`.
    pub placement: Option<String>,
    /// `numa-node u`: prefer parents on this NUMA node.
    #[zbus(rename = "numa-node")]
    pub numa_node: Option<u32>,
    /// `numa-strict b`: only parents on `numa-node`.
    #[zbus(rename = "numa-strict")]
    pub numa_strict: Option<bool>,
    /// `force b`: a pass-through profile takes its GPU's group although a member serves the
    /// host (polkit action `force`).
    pub force: Option<bool>,
    /// `type s`: an mdev type id on `parent` instead of a profile.
    #[zbus(rename = "type")]
    pub mdev_type: Option<String>,
    /// `persistent b`: keep a definition (default: `autostart`).
    pub persistent: Option<bool>,
    /// `attributes a(ss)`: mdev vendor attributes `(name, value)`, written in this order after
    /// the device is created (needs `type`).
    pub attributes: Option<Vec<(String, String)>>,
    /// `start b`: `false` records a stopped definition (needs `type`, `parent` and
    /// `persistent` or `autostart`; one instance) without creating the device.
    pub start: Option<bool>,
    /// `wait-for-parent u`: seconds the Job waits for its parent (`StartCreateInstances`).
    #[zbus(rename = "wait-for-parent")]
    pub wait_for_parent: Option<u32>,
    /// `auth.no_user_interaction b`.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// Options of the removals: `Destroy`, `StartDestroy`, `DestroyInstances`, `Stop`,
/// `Sriov.SetNumVfs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct ForceOptions {
    /// `force b`: also when a domain holds it or the service did not create it.
    pub force: Option<bool>,
    /// `auth.no_user_interaction b`.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// Options of `PrepareDomain` and `StartPrepareDomain` (`wait-for-parent` only there).
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct PrepareOptions {
    /// `wait-for-parent u`: seconds the Job waits for a parent (`StartPrepareDomain`).
    #[zbus(rename = "wait-for-parent")]
    pub wait_for_parent: Option<u32>,
    /// `auth.no_user_interaction b`.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// Options of `ImportMdevctl`.
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct ImportOptions {
    /// `dry-run b`: the report only, nothing changed.
    #[zbus(rename = "dry-run")]
    pub dry_run: Option<bool>,
    /// `auth.no_user_interaction b`.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// Options of `Instance.SetAutostart`.
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct AutostartOptions {
    /// `persistent b`: keep or drop the definition explicitly.
    pub persistent: Option<bool>,
    /// `auth.no_user_interaction b`.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// Options of `ListTypes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct ListTypesOptions {
    /// `parent s`: only this parent's types.
    pub parent: Option<String>,
    /// `auth.no_user_interaction b`.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// Options of `StartApply`.
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct ApplyOptions {
    /// `dry-run b`: plan only.
    #[zbus(rename = "dry-run")]
    pub dry_run: Option<bool>,
    /// `assert b`: plan only; the Job fails unless the host matches.
    pub assert: Option<bool>,
    /// `force b`: remove instances a VM holds or the service did not create.
    pub force: Option<bool>,
    /// `file-name s`: the document's name in messages.
    #[zbus(rename = "file-name")]
    pub file_name: Option<String>,
    /// `auth.no_user_interaction b`.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// Options of `Parent.SetSchedulerPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct SchedulerPolicyOptions {
    /// `period u`: scheduling period in µs.
    pub period: Option<u32>,
    /// `slice u`: time slice in µs (0 = the backend's default).
    pub slice: Option<u32>,
    /// `auth.no_user_interaction b`.
    #[zbus(rename = "auth.no_user_interaction")]
    pub no_user_interaction: Option<bool>,
}

/// One device dict of `PrepareDomain` / `VerifyDomain` (keys: `names::device_key`).
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zbus(signature = "a{sv}", deny_unknown_fields)]
pub struct DeviceSpec {
    /// `kind s`: `mdev`, `vf` or `passthrough` (required).
    pub kind: Option<String>,
    /// `uuid s`: the mdev UUID the domain XML names.
    pub uuid: Option<String>,
    /// `profile s`: the profile to create it from.
    pub profile: Option<String>,
    /// `parent s`: parent PCI address.
    pub parent: Option<String>,
    /// `weight u`: scheduling weight.
    pub weight: Option<u32>,
    /// `pci_address s`: VF or pass-through device.
    #[zbus(rename = "pci_address")]
    pub pci_address: Option<String>,
    /// `force b`: pass-through only (action `force`).
    pub force: Option<bool>,
    /// `placement s`: `pack` or `spread`.
    pub placement: Option<String>,
    /// `numa-node u`.
    #[zbus(rename = "numa-node")]
    pub numa_node: Option<u32>,
    /// `numa-strict b`.
    #[zbus(rename = "numa-strict")]
    pub numa_strict: Option<bool>,
}

/// Reads `dict` (what a method received as `a{sv}`) as the option set `T`. An unknown key or
/// a value of the wrong type is `InvalidArgs` naming `method` and the key.
pub fn from_dict<T: DeserializeOwned + Type>(
    method: &str,
    dict: HashMap<String, OwnedVariant>,
) -> Result<T, BusError> {
    match decode::<T>(&dict) {
        Ok(parsed) => Ok(parsed),
        Err(whole) => {
            // serde names an unknown key but not the key of a mistyped value: try each key
            // alone (every field is optional) to find the one that is refused.
            let mut keys: Vec<&String> = dict.keys().collect();
            keys.sort();
            for key in keys {
                let single: HashMap<String, OwnedVariant> = dict
                    .get_key_value(key)
                    .and_then(|(k, v)| Some((k.clone(), v.try_clone().ok()?)))
                    .into_iter()
                    .collect();
                if let Err(error) = decode::<T>(&single) {
                    let found = dict
                        .get(key)
                        .map(|value| value.value_signature().to_string())
                        .unwrap_or_default();
                    return Err(BusError::InvalidArgs(format!(
                        "{method}: option {key} (type '{found}'): {error}"
                    )));
                }
            }
            Err(BusError::InvalidArgs(format!("{method}: options: {whole}")))
        }
    }
}

/// The `a{sv}` a client sends for `options`.
pub fn to_dict<T: Serialize + Type>(options: &T) -> HashMap<String, OwnedVariant> {
    let ctxt = Context::new(LE, 0);
    zbus::wire::to_bytes(ctxt, options)
        .ok()
        .and_then(|data| data.deserialize::<HashMap<String, OwnedVariant>>().ok())
        .map(|(dict, _)| dict)
        .unwrap_or_default()
}

/// `dict` as the proxies take it (`crate::proxy::Options`), borrowing its keys and values.
pub fn as_proxy_options(dict: &HashMap<String, OwnedVariant>) -> crate::proxy::Options<'_> {
    dict.iter()
        .filter_map(|(key, value)| Some((key.as_str(), zbus::Variant::try_clone(value).ok()?)))
        .collect()
}

fn decode<T: DeserializeOwned + Type>(dict: &HashMap<String, OwnedVariant>) -> Result<T, String> {
    let ctxt = Context::new(LE, 0);
    let data = zbus::wire::to_bytes(ctxt, dict).map_err(|e| e.to_string())?;
    data.deserialize::<T>()
        .map(|(parsed, _)| parsed)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::Variant;

    fn dict(pairs: &[(&str, Variant<'static>)]) -> HashMap<String, OwnedVariant> {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    OwnedVariant::try_from(v.try_clone().unwrap()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn unknown_keys_are_invalid_args_naming_the_key_and_method() {
        let error = from_dict::<ForceOptions>("Destroy", dict(&[("forse", Variant::from(true))]))
            .unwrap_err();
        assert_eq!(error.kind(), crate::ErrorKind::InvalidArgs);
        assert!(error.message().contains("Destroy"), "{}", error.message());
        assert!(error.message().contains("forse"), "{}", error.message());
    }

    /// Every option set refuses a key it does not name, before anything is done: `InvalidArgs`
    /// naming the method and the key, also next to keys it knows.
    #[test]
    fn every_option_set_refuses_an_unknown_key_naming_it() {
        fn refused<T: DeserializeOwned + Type + std::fmt::Debug>(method: &str) {
            // A key the set knows: every set but the device dict takes the polkit one.
            let known = if method.contains("device") {
                ("kind", Variant::from("mdev"))
            } else {
                ("auth.no_user_interaction", Variant::from(true))
            };
            for pairs in [
                vec![("dryrun", Variant::from(true))],
                vec![known, ("dryrun", Variant::from(true))],
            ] {
                let error = from_dict::<T>(method, dict(&pairs)).unwrap_err();
                assert_eq!(error.kind(), crate::ErrorKind::InvalidArgs, "{method}");
                assert!(error.message().contains("dryrun"), "{}", error.message());
                assert!(error.message().contains(method), "{}", error.message());
            }
        }
        refused::<NoOptions>("Start");
        refused::<CreateOptions>("CreateInstances");
        refused::<ForceOptions>("Destroy");
        refused::<PrepareOptions>("PrepareDomain");
        refused::<ImportOptions>("ImportMdevctl");
        refused::<AutostartOptions>("SetAutostart");
        refused::<ListTypesOptions>("ListTypes");
        refused::<ApplyOptions>("StartApply");
        refused::<SchedulerPolicyOptions>("SetSchedulerPolicy");
        refused::<DeviceSpec>("PrepareDomain device 0");
    }

    #[test]
    fn wrong_types_are_invalid_args_naming_the_key_and_right_types_parse() {
        let parsed: CreateOptions = from_dict(
            "CreateInstances",
            dict(&[
                ("count", Variant::from(3u32)),
                ("parent", Variant::from("0000:3b:00.0")),
                ("numa-node", Variant::from(1u32)),
                ("auth.no_user_interaction", Variant::from(true)),
            ]),
        )
        .unwrap();
        assert_eq!(parsed.count, Some(3));
        assert_eq!(parsed.parent.as_deref(), Some("0000:3b:00.0"));
        assert_eq!(parsed.numa_node, Some(1));
        assert_eq!(parsed.no_user_interaction, Some(true));
        assert_eq!(parsed.uuid, None);
        for (key, value) in [
            ("count", Variant::from("3")),
            ("numa-node", Variant::from(-1i32)),
            ("numa-strict", Variant::from("yes")),
        ] {
            let error =
                from_dict::<CreateOptions>("CreateInstances", dict(&[(key, value)])).unwrap_err();
            assert_eq!(error.kind(), crate::ErrorKind::InvalidArgs);
            assert!(error.message().contains(key), "{}", error.message());
            assert!(
                error.message().contains("CreateInstances"),
                "{}",
                error.message()
            );
        }
    }

    #[test]
    fn a_client_dict_round_trips_to_the_same_options() {
        let options = CreateOptions {
            parent: Some("0000:3b:00.0".into()),
            count: Some(2),
            numa_strict: Some(false),
            mdev_type: Some("nvidia-558".into()),
            no_user_interaction: Some(true),
            ..CreateOptions::default()
        };
        let sent = to_dict(&options);
        assert!(sent.contains_key("type"), "{sent:?}");
        assert!(sent.contains_key("numa-strict"), "{sent:?}");
        assert!(sent.contains_key("auth.no_user_interaction"), "{sent:?}");
        assert!(
            !sent.contains_key("uuid"),
            "unset keys are left out: {sent:?}"
        );
        assert_eq!(from_dict::<CreateOptions>("x", sent).unwrap(), options);
    }
}
