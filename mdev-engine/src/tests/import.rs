//! Importing mdevctl definitions.

use super::*;

#[test]
fn mdevctl_definitions_import_as_adopted_persistent_instances() {
    let s = setup("samples");
    let dir = s.dir.path().join("etc/mdevctl.d/mtty");
    std::fs::create_dir_all(&dir).unwrap();
    // The format of mdevctl's README example, with mtty's type and attribute.
    std::fs::write(
        dir.join(UUID_A),
        r#"{"mdev_type":"mtty-2","start":"auto","attrs":[]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join(UUID_B),
        r#"{"mdev_type":"mtty-1","start":"manual","attrs":[{"a":"1"},{"b":"2"}]}"#,
    )
    .unwrap();
    std::fs::write(dir.join("not-a-uuid"), "{}").unwrap();
    std::fs::write(
        dir.join("11111111-2222-3333-4444-555555555555"),
        r#"{"mdev_type":"../x","start":"auto"}"#,
    )
    .unwrap();
    let report = s.engine.import_mdevctl().unwrap();
    assert_eq!(report.imported, [UUID_B, UUID_A]);
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    let a = s.engine.instance(UUID_A).unwrap();
    assert_eq!(
        (a.owner, a.persistent, a.autostart, a.active),
        (Some(Owner::Adopted), true, true, false)
    );
    assert_eq!(s.engine.import_mdevctl().unwrap().skipped, [UUID_B, UUID_A]);
    let recreated = s.engine.reconcile().unwrap();
    assert!(
        recreated.actions.contains(&ReconcileAction::Recreated {
            uuid: UUID_A.into()
        }),
        "{recreated:?}"
    );
    assert_eq!(s.sim.mdev_uuids(), [UUID_A]);
}
