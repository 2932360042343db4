//! Concurrency: 32 D-Bus clients, each on its own connection to a real dbus-daemon, issue mixed
//! operations (create, destroy, autostart changes, domain prepare/release) against the real
//! `mdev-manager` daemon on the simulated host, all on the same GPU. Afterwards: no overcommit
//! (the type's capacity adds up), no lost update (every acknowledged create is there unless
//! its client destroyed it, every acknowledged domain claim holds), and every error is one of
//! the service's typed errors. Prints operations per second (`scripts/concurrency` runs a
//! longer version); nothing here asserts a speed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use dbus_api::names::{device_key, ERROR_PREFIX};
use dbus_api::path;
use dbus_api::proxy::{InstanceProxy, ManagerProxy};
use e2e_tests::bus::bus_with_service;
use zbus::{OwnedObjectPath, Variant};

const CLIENTS: usize = 32;
const T4: &str = "0000:3b:00.0";
const T4_TYPE: &str = "nvidia-231";
const PROFILE: &str = "nvidia-t4-2q";
/// Errors a contended call may legitimately get.
const EXPECTED_ERRORS: [&str; 5] = ["NoCapacity", "InUse", "Busy", "NotFound", "AlreadyExists"];

#[derive(Debug, Default)]
struct ClientLog {
    /// Instances this client created and did not destroy.
    alive: BTreeSet<String>,
    /// Domain UUID → instances claimed for it (acknowledged, not released).
    claims: BTreeMap<String, Vec<String>>,
    ops: u32,
    errors: BTreeMap<String, u32>,
    unexpected: Vec<String>,
}

fn error_name(error: &zbus::Error) -> String {
    match error {
        zbus::Error::MethodError(name, _, _) => name.to_string(),
        other => format!("transport: {other}"),
    }
}

fn note_error(log: &mut ClientLog, method: &str, error: zbus::Error) {
    let name = error_name(&error);
    let short = name
        .strip_prefix(ERROR_PREFIX)
        .and_then(|s| s.strip_prefix('.'))
        .unwrap_or("");
    if EXPECTED_ERRORS.contains(&short) {
        *log.errors.entry(short.to_string()).or_default() += 1;
    } else {
        log.unexpected.push(format!("{method}: {name}: {error}"));
    }
}

fn uuid_of(instance: &OwnedObjectPath) -> String {
    // The object path's last label is the UUID with '-' escaped; the Uuid property is the truth.
    instance
        .as_str()
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string()
}

async fn instance_proxy(
    connection: &zbus::Connection,
    instance: OwnedObjectPath,
) -> InstanceProxy<'static> {
    InstanceProxy::builder(connection)
        .path(instance)
        .build()
        .await
        .expect("instance proxy")
}

async fn client(address: String, index: usize, rounds: u32) -> ClientLog {
    let mut log = ClientLog::default();
    let connection = zbus::connection::Builder::address(address.as_str())
        .build()
        .await
        .expect("connect");
    let manager = ManagerProxy::new(&connection).await.expect("manager proxy");
    let mut seed = 0x9E37_79B9u64 ^ (index as u64 * 7919);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let domain_uuid = format!("5a3b6f0e-1111-4c3d-8e9f-{index:012x}");
    let domain_name = format!("conc-{index}");
    let mut paths: BTreeMap<String, OwnedObjectPath> = BTreeMap::new();
    for _ in 0..rounds {
        log.ops += 1;
        match next() % 10 {
            0..=3 => {
                let options = HashMap::from([("parent", Variant::from(T4))]);
                match manager.create_instances(PROFILE, options).await {
                    Ok(created) => {
                        for instance in created {
                            let proxy = instance_proxy(&connection, instance.clone()).await;
                            let uuid = proxy.uuid().await.unwrap_or_else(|_| uuid_of(&instance));
                            log.alive.insert(uuid.clone());
                            paths.insert(uuid, instance);
                        }
                    }
                    Err(error) => note_error(&mut log, "CreateInstances", error),
                }
            }
            4..=5 => {
                let Some(uuid) = log.alive.iter().next().cloned() else {
                    continue;
                };
                let proxy = instance_proxy(&connection, paths[&uuid].clone()).await;
                match proxy.destroy(HashMap::new()).await {
                    Ok(()) => {
                        log.alive.remove(&uuid);
                    }
                    Err(error) => note_error(&mut log, "Destroy", error),
                }
            }
            6 => {
                let Some(uuid) = log.alive.iter().last().cloned() else {
                    continue;
                };
                let proxy = instance_proxy(&connection, paths[&uuid].clone()).await;
                if let Err(error) = proxy.set_autostart(next() % 2 == 0, HashMap::new()).await {
                    note_error(&mut log, "SetAutostart", error);
                }
            }
            7..=8 => {
                if log.claims.contains_key(&domain_uuid) {
                    continue;
                }
                let device = HashMap::from([
                    (device_key::KIND, Variant::from("mdev")),
                    (device_key::PROFILE, Variant::from(PROFILE)),
                    (device_key::PARENT, Variant::from(T4)),
                ]);
                match manager
                    .prepare_domain(&domain_name, &domain_uuid, vec![device], HashMap::new())
                    .await
                {
                    Ok(instances) => {
                        let mut uuids = Vec::new();
                        for instance in instances {
                            let proxy = instance_proxy(&connection, instance.clone()).await;
                            uuids.push(proxy.uuid().await.unwrap_or_else(|_| uuid_of(&instance)));
                        }
                        log.claims.insert(domain_uuid.clone(), uuids);
                    }
                    Err(error) => note_error(&mut log, "PrepareDomain", error),
                }
            }
            _ => match manager
                .release_domain(&domain_name, &domain_uuid, HashMap::new())
                .await
            {
                Ok(()) => {
                    log.claims.remove(&domain_uuid);
                }
                Err(error) => note_error(&mut log, "ReleaseDomain", error),
            },
        }
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_clients_on_one_gpu_never_overcommit_or_lose_an_update() {
    let rounds: u32 = std::env::var("CONCURRENCY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let (bus, _service) = bus_with_service();
    let observer = bus.connect().await;
    let type_path = path::mdev_type_path(T4, T4_TYPE);
    let available = |connection: zbus::Connection, type_path: OwnedObjectPath| async move {
        dbus_api::proxy::MdevTypeProxy::builder(&connection)
            .path(type_path)
            .build()
            .await
            .expect("type proxy")
            .available_instances()
            .await
            .expect("AvailableInstances")
    };
    let capacity = available(observer.clone(), type_path.clone()).await;
    assert!(
        capacity > 0 && (capacity as usize) < CLIENTS,
        "contention needs {capacity} < {CLIENTS}"
    );

    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|index| tokio::spawn(client(bus.address(), index, rounds)))
        .collect();
    let mut logs = Vec::new();
    for task in tasks {
        logs.push(task.await.expect("client task"));
    }
    let elapsed = started.elapsed();
    let ops: u32 = logs.iter().map(|l| l.ops).sum();
    let mut errors: BTreeMap<String, u32> = BTreeMap::new();
    for log in &logs {
        for (name, count) in &log.errors {
            *errors.entry(name.clone()).or_default() += count;
        }
    }
    println!(
        "concurrency: {CLIENTS} clients, {ops} operations in {:.2} s = {:.0} ops/s; typed errors: {errors:?}",
        elapsed.as_secs_f64(),
        f64::from(ops) / elapsed.as_secs_f64()
    );

    // Every error was a typed one a contended call may get.
    let unexpected: Vec<&String> = logs.iter().flat_map(|l| &l.unexpected).collect();
    assert!(unexpected.is_empty(), "unexpected errors: {unexpected:#?}");

    // What is on the host now, as the service reports it.
    let objects = zbus::fdo::ObjectManagerProxy::builder(&observer)
        .destination(dbus_api::names::BUS_NAME)
        .path(dbus_api::names::ROOT_PATH)
        .build()
        .await
        .expect("object manager")
        .get_managed_objects()
        .await
        .expect("GetManagedObjects");
    let mut live: BTreeMap<String, (String, String)> = BTreeMap::new();
    for interfaces in objects.values() {
        if let Some(props) = interfaces.get(dbus_api::names::interface::INSTANCE) {
            let text = |key: &str| {
                props
                    .get(key)
                    .and_then(|v| String::try_from(v.try_clone().ok()?).ok())
                    .unwrap_or_default()
            };
            live.insert(text("Uuid"), (text("Type"), text("HolderUuid")));
        }
    }
    let on_t4 = live.values().filter(|(t, _)| t == T4_TYPE).count() as u32;
    let left = available(observer.clone(), type_path).await;
    assert!(
        on_t4 <= capacity,
        "overcommit: {on_t4} instances, capacity {capacity}"
    );
    assert_eq!(
        left + on_t4,
        capacity,
        "capacity does not add up: {left} free + {on_t4} used"
    );

    // No lost update.
    for (index, log) in logs.iter().enumerate() {
        for uuid in &log.alive {
            assert!(
                live.contains_key(uuid),
                "client {index}: its instance {uuid} vanished"
            );
        }
        for (domain, uuids) in &log.claims {
            for uuid in uuids {
                let holder = live.get(uuid).map(|(_, h)| h.as_str());
                assert_eq!(
                    holder,
                    Some(domain.as_str()),
                    "client {index}: claim of {uuid} lost"
                );
            }
        }
    }
    let acknowledged: usize = logs
        .iter()
        .map(|l| l.alive.len() + l.claims.values().map(Vec::len).sum::<usize>())
        .sum();
    assert_eq!(
        acknowledged,
        live.len(),
        "instances nobody asked for (or lost ones): {live:?}"
    );
}
