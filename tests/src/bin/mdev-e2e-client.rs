//! Test helper: calls every mutating method of the service once, as whatever user runs it, and
//! prints one JSON object `{"Interface.Method": "<D-Bus error name>" | "ok"}`. The
//! authorization tests run it as an unprivileged user through `runuser`.
//!
//! Usage: `mdev-e2e-client INSTANCE_PATH SRIOV_PARENT_PATH [SECOND_INSTANCE_PATH]` (bus from
//! DBUS_SYSTEM_BUS_ADDRESS). `Instance.Destroy` removes the first instance, so a caller that
//! may destroy names a second one for `Instance.StartDestroy`.

use std::collections::{BTreeMap, HashMap};

use dbus_api::names::{interface, BUS_NAME};
use dbus_api::proxy::{InstanceProxy, ManagerProxy, SriovProxy};
use zbus::Variant;

fn outcome<T>(result: zbus::Result<T>) -> String {
    match result {
        Ok(_) => "ok".to_string(),
        Err(zbus::Error::MethodError(name, _, _)) => name.to_string(),
        Err(other) => format!("transport error: {other}"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (instance_path, parent_path, second_instance_path) = match args.as_slice() {
        [instance, parent] => (instance, parent, instance),
        [instance, parent, second] => (instance, parent, second),
        _ => {
            return Err(
                "usage: mdev-e2e-client INSTANCE_PATH SRIOV_PARENT_PATH [SECOND_INSTANCE_PATH]"
                    .into(),
            )
        }
    };
    let connection = zbus::Connection::system().await?;
    let manager = ManagerProxy::new(&connection).await?;
    let instance = InstanceProxy::builder(&connection)
        .path(instance_path.as_str())
        .build()
        .await?;
    let second_instance = InstanceProxy::builder(&connection)
        .path(second_instance_path.as_str())
        .build()
        .await?;
    let sriov = SriovProxy::builder(&connection)
        .path(parent_path.as_str())
        .build()
        .await?;
    let none = HashMap::<&str, Variant<'_>>::new;
    let domain_uuid = "6d1f0c4e-0000-4000-8000-000000000001";
    let device: HashMap<&str, Variant<'_>> = HashMap::from([
        ("kind", Variant::from("mdev")),
        ("profile", Variant::from("nvidia-t4-2q")),
    ]);

    let mut results = BTreeMap::new();
    results.insert("Manager.Rescan", outcome(manager.rescan(none()).await));
    // Not a dry run: the import needs `manage-persistent` (a dry run needs none).
    results.insert(
        "Manager.ImportMdevctl",
        outcome(manager.import_mdevctl(none()).await),
    );
    results.insert(
        "Manager.ReloadProfiles",
        outcome(manager.reload_profiles(none()).await),
    );
    results.insert(
        "Manager.CreateInstances",
        outcome(manager.create_instances("nvidia-t4-2q", none()).await),
    );
    results.insert(
        "Manager.PrepareDomain",
        outcome(
            manager
                .prepare_domain("e2e-vm", domain_uuid, vec![device], none())
                .await,
        ),
    );
    results.insert(
        "Manager.ReleaseDomain",
        outcome(manager.release_domain("e2e-vm", domain_uuid, none()).await),
    );
    results.insert(
        "Sriov.SetNumVfs",
        outcome(sriov.set_num_vfs(32, none()).await),
    );
    // The scheduling methods have no typed proxy; raw calls with their published signatures,
    // made before Destroy removes the instance.
    results.insert(
        "Instance.SetSchedule",
        outcome(
            connection
                .call_method(
                    Some(BUS_NAME),
                    instance_path.as_str(),
                    Some(interface::INSTANCE),
                    "SetSchedule",
                    &(2u32, 0u32, 0u32, none()),
                )
                .await,
        ),
    );
    results.insert(
        "Parent.SetSchedulerPolicy",
        outcome(
            connection
                .call_method(
                    Some(BUS_NAME),
                    parent_path.as_str(),
                    Some(interface::PARENT),
                    "SetSchedulerPolicy",
                    // Empty keeps the current policy: the call is valid, only authorization decides.
                    &("", none()),
                )
                .await,
        ),
    );
    results.insert("Instance.Stop", outcome(instance.stop(none()).await));
    results.insert("Instance.Start", outcome(instance.start(none()).await));
    results.insert(
        "Instance.SetAutostart",
        outcome(instance.set_autostart(true, none()).await),
    );
    results.insert(
        "Instance.SetAttributes",
        outcome(
            instance
                .set_attributes(&[("vendor/x".to_owned(), "1".to_owned())], none())
                .await,
        ),
    );
    results.insert("Instance.Destroy", outcome(instance.destroy(none()).await));
    // The Job twins check the same actions before any job starts.
    results.insert(
        "Manager.StartCreateInstances",
        outcome(manager.start_create_instances("nvidia-t4-2q", none()).await),
    );
    let device: HashMap<&str, Variant<'_>> = HashMap::from([
        ("kind", Variant::from("mdev")),
        ("profile", Variant::from("nvidia-t4-2q")),
    ]);
    results.insert(
        "Manager.StartPrepareDomain",
        outcome(
            manager
                .start_prepare_domain("e2e-vm", domain_uuid, vec![device], none())
                .await,
        ),
    );
    results.insert(
        "Manager.StartReleaseDomain",
        outcome(
            manager
                .start_release_domain("e2e-vm", domain_uuid, none())
                .await,
        ),
    );
    // A valid document with a dry run: only authorization decides, and nothing changes.
    let dry_run: HashMap<&str, Variant<'_>> = HashMap::from([("dry-run", Variant::from(true))]);
    results.insert(
        "Manager.StartApply",
        outcome(
            manager
                .start_apply("version = 1\n", "toml", "", dry_run)
                .await,
        ),
    );
    results.insert(
        "Instance.StartDestroy",
        outcome(second_instance.start_destroy(none()).await),
    );
    results.insert(
        "Manager.DestroyInstances",
        outcome(
            manager
                .destroy_instances(&["6d1f0c4e-0000-4000-8000-0000000000ff"], none())
                .await,
        ),
    );
    println!("{}", serde_json::to_string(&results)?);
    Ok(())
}
