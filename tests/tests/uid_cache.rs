//! The service asks the bus for a caller's uid once per connection: the answer is kept by the
//! caller's unique name and dropped when that name leaves the bus.

use std::time::Duration;

use e2e_tests::bus::TestBus;
use mdev_manager::daemon::auth::Polkit;

#[tokio::test(flavor = "multi_thread")]
async fn a_callers_uid_is_kept_until_its_name_leaves_the_bus() {
    let bus = TestBus::start().expect("dbus-daemon");
    let service = bus.connect().await;
    let polkit = Polkit::new(service);
    let caller = bus.connect().await;
    let name = caller.unique_name().expect("a unique name").to_string();
    let other = bus.connect().await;
    let other_name = other.unique_name().expect("a unique name").to_string();

    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    assert_eq!(polkit.caller_uid(&name).await.unwrap(), uid);
    assert_eq!(polkit.caller_uid(&other_name).await.unwrap(), uid);
    assert_eq!(polkit.uid_cache().get(&name), Some(uid));
    assert_eq!(polkit.uid_cache().len(), 2);
    // Asked again: answered from the cache (still one entry per caller).
    assert_eq!(polkit.caller_uid(&name).await.unwrap(), uid);
    assert_eq!(polkit.uid_cache().len(), 2);

    drop(caller);
    let cache = polkit.uid_cache();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cache.get(&name).is_some() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        cache.get(&name),
        None,
        "the entry of a caller that left the bus is dropped"
    );
    assert_eq!(
        cache.get(&other_name),
        Some(uid),
        "a caller still on the bus keeps its entry"
    );

    // A name that is not on the bus is not cached: the bus's refusal is the answer.
    let gone = polkit.caller_uid(&name).await.unwrap_err();
    assert!(gone.message().contains(&name), "{gone:?}");
    assert_eq!(cache.get(&name), None);
}
