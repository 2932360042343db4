//! What the typed option sets of `dbus_api::options` mean to the engine: the checks that span
//! several keys (placement, `wait-for-parent`) and the conversion into engine requests. Unknown
//! keys and wrong types are refused when the dict is read (`dbus_api::options::from_dict`).

use std::time::Duration;

use dbus_api::names::{option, placement};
use dbus_api::BusError;

use mdev_engine::{PlacementPolicy, PlacementRequest};

/// Longest `wait-for-parent` accepted, in seconds.
const MAX_WAIT_FOR_PARENT: u32 = 3600;

/// The placement keys `placement s` (`pack` | `spread`), `numa-node u` and `numa-strict b` as
/// a request; unset ones stay unset (the service's configured defaults apply). `numa-strict`
/// needs `numa-node`: strict about no node would mean nothing.
pub fn placement(
    method: &str,
    policy: Option<&str>,
    numa_node: Option<u32>,
    numa_strict: Option<bool>,
) -> Result<PlacementRequest, BusError> {
    let policy = policy
        .map(|value| {
            parse_policy(value).ok_or_else(|| {
                BusError::InvalidArgs(format!(
                    "{method}: option {} is '{value}'; expected {} or {}",
                    option::PLACEMENT,
                    placement::PACK,
                    placement::SPREAD
                ))
            })
        })
        .transpose()?;
    if numa_strict.is_some() && numa_node.is_none() {
        return Err(BusError::InvalidArgs(format!(
            "{method}: option {} needs option {} (the node to be strict about)",
            option::NUMA_STRICT,
            option::NUMA_NODE
        )));
    }
    Ok(PlacementRequest {
        policy,
        numa_node,
        numa_strict: numa_strict.unwrap_or(false),
    })
}

/// The `wait-for-parent u` option (seconds, 1..=3600) as a duration. `job` tells whether the
/// method runs as a Job: only a Job may wait, a plain call refuses the key.
pub fn wait_for_parent(
    method: &str,
    seconds: Option<u32>,
    job: bool,
) -> Result<Option<Duration>, BusError> {
    match seconds {
        None => Ok(None),
        Some(_) if !job => Err(BusError::InvalidArgs(format!(
            "{method}: unknown option {} (only the Start* twin waits for a parent)",
            option::WAIT_FOR_PARENT
        ))),
        Some(seconds @ 1..=MAX_WAIT_FOR_PARENT) => Ok(Some(Duration::from_secs(seconds.into()))),
        Some(seconds) => Err(BusError::InvalidArgs(format!(
            "{method}: option {} is {seconds} seconds; expected 1..={MAX_WAIT_FOR_PARENT}",
            option::WAIT_FOR_PARENT
        ))),
    }
}

/// `pack` or `spread` (the option's and the config key's values), exactly as written.
pub fn parse_policy(value: &str) -> Option<PlacementPolicy> {
    match value {
        placement::PACK => Some(PlacementPolicy::Pack),
        placement::SPREAD => Some(PlacementPolicy::Spread),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_options_parse_into_a_request() {
        assert_eq!(
            placement("CreateInstances", None, None, None).unwrap(),
            PlacementRequest::default()
        );
        let spread = placement("CreateInstances", Some("spread"), Some(1), Some(true)).unwrap();
        assert_eq!(
            spread,
            PlacementRequest {
                policy: Some(PlacementPolicy::Spread),
                numa_node: Some(1),
                numa_strict: true,
            }
        );
        let pack = placement("CreateInstances", Some("pack"), Some(0), None).unwrap();
        assert_eq!(pack.policy, Some(PlacementPolicy::Pack));
        assert_eq!(pack.numa_node, Some(0));
        assert!(!pack.numa_strict);
    }

    #[test]
    fn bad_placement_options_name_the_key_and_value() {
        for value in ["Spread", "spred", "", "pack "] {
            let error = placement("CreateInstances", Some(value), None, None).unwrap_err();
            assert_eq!(error.kind(), dbus_api::ErrorKind::InvalidArgs);
            let message = error.message();
            assert!(message.contains("placement"), "{message}");
            assert!(message.contains(&format!("'{value}'")), "{message}");
            assert!(message.contains("pack or spread"), "{message}");
        }
        let error = placement("CreateInstances", None, None, Some(true)).unwrap_err();
        assert_eq!(error.kind(), dbus_api::ErrorKind::InvalidArgs);
        assert!(
            error.message().contains("numa-strict"),
            "{}",
            error.message()
        );
        assert!(error.message().contains("numa-node"), "{}", error.message());
    }

    #[test]
    fn wait_for_parent_is_a_job_option_within_bounds() {
        assert_eq!(
            wait_for_parent("StartCreateInstances", None, true).unwrap(),
            None
        );
        assert_eq!(
            wait_for_parent("StartCreateInstances", Some(5), true).unwrap(),
            Some(Duration::from_secs(5))
        );
        for seconds in [0, MAX_WAIT_FOR_PARENT + 1] {
            let error = wait_for_parent("StartCreateInstances", Some(seconds), true).unwrap_err();
            assert!(
                error.message().contains("wait-for-parent"),
                "{}",
                error.message()
            );
        }
        let error = wait_for_parent("CreateInstances", Some(5), false).unwrap_err();
        assert_eq!(error.kind(), dbus_api::ErrorKind::InvalidArgs);
        assert!(
            error.message().contains("CreateInstances"),
            "{}",
            error.message()
        );
        assert!(
            error.message().contains("wait-for-parent"),
            "{}",
            error.message()
        );
    }
}
