//! Every option set vgpuctl sends is the struct the service reads that method's dict with
//! (`dbus_api::options`): each dict a command builds is parsed back by the service's parser
//! (`from_dict`) into the same options.

use std::fmt::Debug;

use dbus_api::options::{
    from_dict, ApplyOptions, AutostartOptions, CreateOptions, DeviceSpec, ForceOptions,
    ImportOptions, ListTypesOptions, NoOptions, PrepareOptions, SchedulerPolicyOptions,
};
use dbus_api::ErrorKind;
use serde::de::DeserializeOwned;
use serde::Serialize;
use zbus::wire::Type;

use super::{apply, attach, autostart, create, destroy, import, schedule, sriov, start_stop};
use crate::cli::Placement;
use crate::service::{list_types_options, Auth, Sent};

const ASKING: Auth = Auth { no_ask: false };
const NO_ASK: Auth = Auth { no_ask: true };

/// What the command would send, parsed by the service's parser for `method`: must come back as
/// `options`, unchanged. Returns the keys sent.
fn accepted<T>(method: &str, options: &T) -> Vec<String>
where
    T: Serialize + DeserializeOwned + Type + PartialEq + Debug,
{
    let dict = Sent::new(options).into_dict();
    let mut keys: Vec<String> = dict.keys().cloned().collect();
    keys.sort();
    let parsed: T = from_dict(method, dict)
        .unwrap_or_else(|error| panic!("{method} refused {options:?}: {}", error.message()));
    assert_eq!(&parsed, options, "{method}");
    keys
}

#[test]
fn create_sends_the_create_instances_options_the_service_reads() {
    let request = create::Request {
        profile: "nvidia-t4-2q",
        parent: Some("0000:3b:00.0"),
        uuid: Some("9a1e5d2c-1111-4222-8333-444455556666"),
        count: Some(1),
        autostart: true,
        weight: Some(300),
        placement: Some(Placement::Spread),
        numa_node: Some(1),
        numa_strict: true,
        force: true,
        wait_for_parent: Some(5),
        no_wait: false,
    };
    let keys = accepted("StartCreateInstances", &create::options(NO_ASK, &request));
    assert_eq!(
        keys,
        [
            "auth.no_user_interaction",
            "autostart",
            "count",
            "force",
            "numa-node",
            "numa-strict",
            "parent",
            "placement",
            "uuid",
            "wait-for-parent",
            "weight"
        ]
    );
    let plain = create::Request {
        parent: None,
        uuid: None,
        count: None,
        autostart: false,
        weight: None,
        placement: None,
        numa_node: None,
        numa_strict: false,
        force: false,
        wait_for_parent: None,
        ..request
    };
    let options: CreateOptions = create::options(ASKING, &plain);
    assert!(accepted("CreateInstances", &options).is_empty());
}

#[test]
fn destroy_stop_and_sriov_send_the_force_options_the_service_reads() {
    let forced: ForceOptions = destroy::options(NO_ASK, true);
    assert_eq!(
        accepted("DestroyInstances", &forced),
        ["auth.no_user_interaction", "force"]
    );
    assert!(accepted("Destroy", &destroy::options(ASKING, false)).is_empty());
    assert_eq!(
        accepted("SetNumVfs", &sriov::options(ASKING, true)),
        ["force"]
    );
    assert_eq!(
        accepted("Stop", &start_stop::stop_options(NO_ASK)),
        ["auth.no_user_interaction"]
    );
    assert_eq!(
        accepted("Destroy", &attach::destroy_options(ASKING)),
        ["force"]
    );
}

#[test]
fn autostart_sends_the_set_autostart_options_the_service_reads() {
    let options: AutostartOptions = autostart::options(NO_ASK);
    assert_eq!(
        accepted("SetAutostart", &options),
        ["auth.no_user_interaction"]
    );
}

#[test]
fn import_sends_the_import_options_the_service_reads() {
    let options: ImportOptions = import::options(NO_ASK, true);
    assert_eq!(
        accepted("ImportMdevctl", &options),
        ["auth.no_user_interaction", "dry-run"]
    );
    assert!(accepted("ImportMdevctl", &import::options(ASKING, false)).is_empty());
}

#[test]
fn apply_and_assert_send_the_apply_options_the_service_reads() {
    let plan: ApplyOptions = apply::options(NO_ASK, "host.toml", true, apply::Mode::Apply, true);
    assert_eq!(
        accepted("StartApply", &plan),
        ["auth.no_user_interaction", "dry-run", "file-name", "force"]
    );
    let applying = apply::options(ASKING, "host.toml", false, apply::Mode::Apply, false);
    assert_eq!(accepted("StartApply", &applying), ["file-name"]);
    let assert = apply::options(ASKING, "<stdin>", false, apply::Mode::Assert, true);
    assert_eq!(accepted("StartApply", &assert), ["assert", "file-name"]);
    assert_eq!(assert.file_name.as_deref(), Some("<stdin>"));
}

#[test]
fn schedule_sends_the_scheduler_policy_options_the_service_reads() {
    let request = schedule::PolicyRequest {
        policy: Some("weighted"),
        period: Some("20ms"),
        slice: Some("default"),
    };
    let options: SchedulerPolicyOptions = schedule::policy_options(NO_ASK, &request).unwrap();
    assert_eq!(options.period, Some(20_000));
    assert_eq!(options.slice, Some(0));
    assert_eq!(
        accepted("SetSchedulerPolicy", &options),
        ["auth.no_user_interaction", "period", "slice"]
    );
    let bad = schedule::PolicyRequest {
        period: Some("soon"),
        ..request
    };
    let failure = schedule::policy_options(ASKING, &bad).unwrap_err();
    assert_eq!(failure.code, ErrorKind::InvalidArgs.exit_code());
    assert!(failure.message.contains("--period"), "{}", failure.message);
}

#[test]
fn attach_sends_the_prepare_options_and_device_spec_the_service_reads() {
    let options: PrepareOptions = attach::prepare_options(NO_ASK);
    assert_eq!(
        accepted("PrepareDomain", &options),
        ["auth.no_user_interaction"]
    );
    let device: DeviceSpec = attach::device("nvidia-t4-2q", "9a1e5d2c-1111-4222-8333-444455556666");
    assert_eq!(
        accepted("PrepareDomain device 0", &device),
        ["kind", "profile", "uuid"]
    );
    let claim: DeviceSpec = attach::claim("9a1e5d2c-1111-4222-8333-444455556666");
    assert_eq!(accepted("PrepareDomain device 0", &claim), ["kind", "uuid"]);
    let create: CreateOptions =
        attach::create_options(NO_ASK, "9a1e5d2c-1111-4222-8333-444455556666");
    assert_eq!(
        accepted("CreateInstances", &create),
        ["auth.no_user_interaction", "persistent", "uuid"]
    );
}

#[test]
fn types_sends_the_list_types_options_the_service_reads() {
    let options: ListTypesOptions = list_types_options(Some("0000:3b:00.0"));
    assert_eq!(accepted("ListTypes", &options), ["parent"]);
    assert!(accepted("ListTypes", &list_types_options(None)).is_empty());
}

/// Start, probe, weight (`SetSchedule`), `job cancel` and the listings take no options of their
/// own; an interrupt's cancel never asks for a password.
#[test]
fn the_calls_without_options_of_their_own_send_no_options_the_service_reads() {
    for method in ["Start", "Probe", "SetSchedule", "Cancel", "ListInstances"] {
        let options: NoOptions = NO_ASK.no_options();
        assert_eq!(accepted(method, &options), ["auth.no_user_interaction"]);
        assert!(accepted(method, &ASKING.no_options()).is_empty());
    }
    assert_eq!(
        accepted("Cancel", &crate::jobs::cancel_options()),
        ["auth.no_user_interaction"]
    );
}
