//! The service running inside the test process, on a [`TestBus`]: for tests that must hold
//! the simulated host while the service works (inject a fault, block a sysfs write mid-bind).
//! The bus, the client connection and the wire are real; the authorizer is the production
//! polkit one (without polkitd on the bus only root passes), and the simulated host's own
//! events reach the engine as udev's would.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mdev_engine::{DiskFiles, Engine, EngineConfig};
use mdev_manager::daemon::auth::Polkit;
use mdev_manager::daemon::Service;
use mdev_sim::SimHost;
use zbus::Connection;

use crate::bus::TestBus;

/// The running service and what a test drives it with. On drop the simulated host's faults
/// are cleared (a blocked write is let go) and the host-event thread is told to stop.
#[derive(Debug)]
pub struct InProcessService {
    /// The private bus.
    pub bus: TestBus,
    /// The simulated host the service works on.
    pub sim: SimHost,
    /// A client connection to the bus.
    pub client: Connection,
    _service: Connection,
    stop: Arc<AtomicBool>,
    _state: tempfile::TempDir,
}

impl InProcessService {
    /// Starts the service on the simulated host of the topology file `topology`, with the
    /// engine settings `config` and its state in a fresh directory; returns once the service
    /// owns its bus name.
    pub async fn start(topology: &Path, config: EngineConfig) -> Self {
        let bus = TestBus::start().expect("dbus-daemon");
        let text = std::fs::read_to_string(topology).expect("topology");
        let sim = SimHost::from_topology_str(&text).expect("topology parses");
        let state = tempfile::tempdir().expect("state dir");
        let engine = Arc::new(
            Engine::new(
                Arc::new(sim.clone()),
                Arc::new(DiskFiles::new(state.path())),
                config,
            )
            .expect("engine"),
        );
        let address = bus.address();
        let polkit_connection = zbus::connection::Builder::address(address.as_str())
            .build()
            .await
            .expect("polkit connection");
        let service = Service::new(
            engine.clone(),
            Arc::new(Polkit::new(polkit_connection)),
            vec!["simulated".into()],
        );
        let connection = service
            .serve(zbus::connection::Builder::address(address.as_str()), false)
            .await
            .expect("serve");
        let stop = Arc::new(AtomicBool::new(false));
        mdev_manager::daemon::host_events(&engine, Some(&sim), false, &stop);
        Service::request_name(&connection).await.expect("bus name");
        let client = bus.connect().await;
        Self {
            bus,
            sim,
            client,
            _service: connection,
            stop,
            _state: state,
        }
    }
}

impl Drop for InProcessService {
    fn drop(&mut self) {
        self.sim.clear_faults();
        self.stop.store(true, Ordering::SeqCst);
    }
}
