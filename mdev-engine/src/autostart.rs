//! `Instance.SetAutostart`'s rule, in the engine so it reads the record it changes (under the
//! instance lock) rather than a published copy that may lag: autostart needs a definition, so
//! turning it on makes the instance persistent, an explicit `persistent: false` with autostart
//! on is refused, and without an explicit choice the instance keeps its current persistence.

use super::{Engine, EngineError, InstanceInfo};

impl Engine {
    /// Sets autostart of a known instance; `persistent` keeps (`Some(true)`) or drops
    /// (`Some(false)`) its definition explicitly, `None` keeps what it has (or makes it
    /// persistent when autostart is turned on). `InvalidArgs` for autostart without a
    /// definition, nothing changed.
    pub fn set_autostart(
        &self,
        uuid: &str,
        autostart: bool,
        persistent: Option<bool>,
    ) -> Result<InstanceInfo, EngineError> {
        if autostart && persistent == Some(false) {
            return Err(EngineError::InvalidArgument {
                what: "persistence",
                value: format!("instance {uuid}: persistent false with autostart"),
                reason: "autostart needs a definition".to_owned(),
            });
        }
        self.modify_record(uuid, |record| {
            let persistent = persistent.unwrap_or(record.persistent);
            record.autostart = autostart;
            record.persistent = persistent || autostart;
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::*;
    use mdev_sim::SimHost;

    const UUID: &str = "83b8f4f2-509f-382f-3c1e-e6bfe0fa5002";

    fn engine_with(persistent: bool) -> (Engine, tempfile::TempDir) {
        let sim = SimHost::builtin("samples").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::new(
            Arc::new(sim),
            Arc::new(DiskFiles::new(dir.path())),
            EngineConfig::default(),
        )
        .unwrap();
        engine
            .create(CreateRequest {
                uuid: Some(UUID.to_owned()),
                persistent,
                ..CreateRequest::new(CreateTarget::Mdev {
                    parent: "mtty".into(),
                    type_id: "mtty-2".into(),
                })
            })
            .unwrap();
        (engine, dir)
    }

    #[test]
    fn autostart_off_keeps_the_current_definition_unless_told() {
        let (engine, _dir) = engine_with(true);
        let info = engine.set_autostart(UUID, false, None).unwrap();
        assert!(info.persistent, "a defined instance stays defined");
        assert!(!info.autostart);
        let info = engine.set_autostart(UUID, false, Some(false)).unwrap();
        assert!(!info.persistent, "explicitly dropped");

        let (engine, _dir) = engine_with(false);
        let info = engine.set_autostart(UUID, false, None).unwrap();
        assert!(!info.persistent, "a transient instance stays transient");
    }

    #[test]
    fn autostart_on_makes_it_persistent_and_refuses_an_explicit_no_definition() {
        let (engine, _dir) = engine_with(false);
        let error = engine.set_autostart(UUID, true, Some(false)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error}");
        assert!(error.to_string().contains(UUID), "{error}");
        assert!(error.to_string().contains("autostart"), "{error}");
        let unchanged = engine.instance(UUID).unwrap();
        assert!(!unchanged.persistent && !unchanged.autostart);

        let info = engine.set_autostart(UUID, true, None).unwrap();
        assert!(info.persistent && info.autostart);
    }
}
