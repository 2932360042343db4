//! Shared set-up of the integration tests that run the real service code in this process, on a
//! real dbus-daemon and a simulated host (so a test can inject faults and claim instances).

use std::sync::Arc;
use std::time::Duration;

use e2e_tests::bus::TestBus;
use mdev_engine::{DiskFiles, Engine, EngineConfig};
use mdev_manager::daemon::auth::AllowAll;
use mdev_manager::daemon::Service;
use mdev_sim::SimHost;
use zbus::Connection;

/// The service serving a simulated host on a private bus; everything lives as long as it.
pub struct ServedSim {
    /// The simulated host (faults, claims, sysfs reads).
    pub sim: SimHost,
    /// The engine the service runs on.
    pub engine: Arc<Engine>,
    /// The private bus.
    pub bus: TestBus,
    /// The service's connection (kept open for the bus name).
    pub _service: Connection,
    /// The state directory.
    pub state: tempfile::TempDir,
}

/// Serves the built-in `topology` with short readiness waits, the bus name owned, every caller
/// let through (polkit is tested elsewhere).
pub async fn serve_sim(topology: &str) -> ServedSim {
    let bus = TestBus::start().expect("dbus-daemon");
    let state = tempfile::tempdir().expect("temp dir");
    let sim = SimHost::builtin(topology).expect("topology");
    let engine = Arc::new(
        Engine::new(
            Arc::new(sim.clone()),
            Arc::new(DiskFiles::new(state.path())),
            EngineConfig {
                readiness_timeout: Duration::from_secs(2),
                poll_interval: Duration::from_millis(10),
                ..EngineConfig::default()
            },
        )
        .expect("engine"),
    );
    let service = Service::new(engine.clone(), Arc::new(AllowAll), vec!["simulated".into()]);
    let builder = zbus::connection::Builder::address(bus.address().as_str());
    let connection = service.serve(builder, true).await.expect("serve");
    Service::request_name(&connection).await.expect("bus name");
    ServedSim {
        sim,
        engine,
        bus,
        _service: connection,
        state,
    }
}
