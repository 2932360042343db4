//! Bad input is refused naming the value, and changes nothing.

use super::*;

#[test]
fn bad_input_is_refused_naming_the_value_and_changes_nothing() {
    let s = setup("samples");
    let before = s.sim.tree_listing();
    let cases: Vec<(CreateRequest, &str)> = vec![
        (mdev("mtty", "mtty-2", Some("not-a-uuid")), "not-a-uuid"),
        (
            mdev(
                "mtty",
                "mtty-2",
                Some("83b8f4f2-509f-382f-3c1e-e6bfe0fa100"),
            ),
            "83b8f4f2-509f-382f-3c1e-e6bfe0fa100",
        ),
        (mdev("../x", "mtty-2", None), "../x"),
        (mdev("mtty", "../../remove", None), "../../remove"),
        (mdev("mtty", "mtty-2\n", None), "mtty-2\\n"),
        (
            CreateRequest {
                attributes: vec![("vendor/x".into(), "a\nb".into())],
                ..mdev("mtty", "mtty-2", None)
            },
            "a\\nb",
        ),
        (
            CreateRequest {
                attributes: vec![("../remove".into(), "1".into())],
                ..mdev("mtty", "mtty-2", None)
            },
            "../remove",
        ),
        (
            CreateRequest::new(CreateTarget::Vf {
                pf: "0000:01:00".into(),
                vf: None,
            }),
            "0000:01:00",
        ),
        (
            CreateRequest {
                scheduling: Scheduling {
                    weight: Some(0),
                    ..Scheduling::default()
                },
                ..mdev("mtty", "mtty-2", None)
            },
            "weight",
        ),
    ];
    for (request, named) in cases {
        let error = s.engine.create(request).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgs, "{error}");
        assert!(
            error.to_string().contains(named),
            "{error:?} should name {named}"
        );
    }
    let error = s.engine.create(mdev("mtty", "mtty-9", None)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert!(error.to_string().contains("mtty-9"));
    let error = s
        .engine
        .create(CreateRequest::new(CreateTarget::Profile {
            profile: "no-such-profile".into(),
            parent: None,
        }))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert!(error.to_string().contains("no-such-profile"));
    let error = s
        .engine
        .set_num_vfs(NVME, 100_000, DestroyOptions::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgs);
    assert!(
        error.to_string().contains("100000") && error.to_string().contains(NVME),
        "{error}"
    );
    assert_eq!(
        s.engine
            .destroy("../../etc", DestroyOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgs
    );
    assert_eq!(
        s.engine
            .claim_domain(
                &DomainRef {
                    name: "vm".into(),
                    uuid: "x".into()
                },
                &[]
            )
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgs
    );
    assert_eq!(s.sim.tree_listing(), before);
    assert!(
        !s.dir
            .path()
            .join("var/lib/mdev-manager/state.json")
            .exists(),
        "no state was written"
    );
}
