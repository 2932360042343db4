//! Feeding kernel device events into the engine, so changes made outside the service (a driver
//! loaded, an mdev removed by hand) are republished on the bus.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use mdev_engine::Engine;
use mdev_host::events::{HostEvents, UdevEvents};

use crate::simulated::SimHost;

/// Starts the engine's hotplug thread on the host's event source: the simulated host's channel,
/// or udev on a real host (`real_root` true: the service runs on `/`, so the kernel's events are
/// about the devices it manages). A re-rooted real host (tests) has no event source.
pub fn host_events(
    engine: &Arc<Engine>,
    sim: Option<&SimHost>,
    real_root: bool,
    stop: &Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    let source: Box<dyn HostEvents> = match sim {
        #[cfg(feature = "simulate")]
        Some(sim) => Box::new(mdev_sim::host_events::SimHostEvents::new(sim)),
        #[cfg(not(feature = "simulate"))]
        Some(sim) => match *sim {},
        None if real_root => match UdevEvents::new() {
            Ok(udev) => Box::new(udev),
            Err(error) => {
                tracing::warn!(%error, "no udev monitor: changes made outside the service show up on Rescan only");
                return None;
            }
        },
        None => return None,
    };
    Some(engine.spawn_hotplug(source, stop.clone()))
}
