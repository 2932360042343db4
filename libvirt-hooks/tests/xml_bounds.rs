//! The shape bounds of the domain XML (src/bounded.rs): a document at each bound is read, one
//! past it is refused, by the parser and by the hook binary, with one line naming the bound.
//! How long reading takes is a benchmark, not a test: bench/hook/xml-shapes.py.

mod common;

use common::{run_hook, stderr_of};
use libvirt_hooks::bounded::{MAX_ATTRIBUTES, MAX_DEPTH, MAX_NAMESPACE_DECLARATIONS};
use libvirt_hooks::plan::{plan_from_xml, PlanError};

const DOMAIN_UUID: &str = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0";

/// A domain whose `<hostdev>` (a USB device: never ours) makes the hook parse it, with `inner`
/// inside `<metadata>` and `hostdev_attributes` extra attributes on the hostdev.
fn domain(inner: &str, hostdev_attributes: usize) -> String {
    let extra: String = (0..hostdev_attributes)
        .map(|i| format!(" a{i}=''"))
        .collect();
    format!(
        "<domain type='kvm'><name>shaped</name><uuid>{DOMAIN_UUID}</uuid><metadata>{inner}</metadata>\
         <devices><hostdev mode='subsystem' type='usb'{extra}><source><vendor id='0x1'/></source></hostdev></devices></domain>"
    )
}

/// `levels` nested elements (inside `<domain><metadata>`, which are 2 levels).
fn nested(levels: usize) -> String {
    format!(
        "<n:x xmlns:n='urn:deep'>{}{}",
        "<n:x>".repeat(levels - 1),
        "</n:x>".repeat(levels)
    )
}

/// `count` sibling elements, each declaring a namespace of its own.
fn namespaces(count: usize) -> String {
    (0..count)
        .map(|i| format!("<p{i}:m xmlns:p{i}='urn:app:{i}'/>"))
        .collect()
}

/// The documents exactly at each bound and one past it, with the words the refusal must hold.
fn at_and_past_each_bound() -> Vec<(&'static str, String, String, String)> {
    vec![
        (
            "depth",
            domain(&nested(MAX_DEPTH - 2), 0),
            domain(&nested(MAX_DEPTH - 1), 0),
            format!("more than {MAX_DEPTH} levels deep"),
        ),
        (
            "attributes",
            // mode and type are two of them.
            domain("", MAX_ATTRIBUTES - 2),
            domain("", MAX_ATTRIBUTES - 1),
            "<hostdev> at byte".to_owned(),
        ),
        (
            "namespaces",
            domain(&namespaces(MAX_NAMESPACE_DECLARATIONS), 0),
            domain(&namespaces(MAX_NAMESPACE_DECLARATIONS + 1), 0),
            format!("more than {MAX_NAMESPACE_DECLARATIONS} XML namespaces"),
        ),
    ]
}

#[test]
fn the_parser_reads_documents_at_each_bound_and_refuses_one_past_it() {
    for (bound, at, past, words) in at_and_past_each_bound() {
        let plan = plan_from_xml(at.as_bytes())
            .unwrap_or_else(|error| panic!("{bound}: at the bound: {error}"));
        assert!(plan.is_empty(), "{bound}: a USB hostdev is not ours");
        let error = plan_from_xml(past.as_bytes()).expect_err(bound);
        assert!(matches!(error, PlanError::Shape(_)), "{bound}: {error:?}");
        assert!(error.to_string().contains(&words), "{bound}: {error}");
    }
    // The attribute message names its bound too.
    let (_, _, past, _) = &at_and_past_each_bound()[1];
    assert!(plan_from_xml(past.as_bytes())
        .unwrap_err()
        .to_string()
        .contains(&format!("more than {MAX_ATTRIBUTES} attributes")));
}

#[test]
fn the_attribute_bound_holds_on_every_element_not_only_hostdevs() {
    let many: String = (0..=MAX_ATTRIBUTES).map(|i| format!(" k{i}='v'")).collect();
    let xml = domain(&format!("<app:data xmlns:app='urn:app'{many}/>"), 0);
    let error = plan_from_xml(xml.as_bytes()).unwrap_err();
    assert!(
        error.to_string().contains("<app:data>"),
        "names the element: {error}"
    );
}

#[test]
fn a_repeated_attribute_is_refused_naming_it() {
    let xml = domain("", 0).replace("type='usb'", "type='usb' mode='x'");
    let error = plan_from_xml(xml.as_bytes()).unwrap_err();
    assert!(
        error.to_string().contains("has the attribute mode twice"),
        "{error}"
    );
}

#[test]
fn the_hook_refuses_a_document_past_a_bound_with_exit_1_and_one_line_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let root_text = root.path().display().to_string();
    let no_bus = format!("unix:path={root_text}/no-bus");
    let env = [
        ("DBUS_SYSTEM_BUS_ADDRESS", no_bus.as_str()),
        ("MDEV_MANAGER_ROOT", root_text.as_str()),
    ];
    for (bound, at, past, words) in at_and_past_each_bound() {
        let output = run_hook(["shaped", "prepare", "begin", "-"], at.as_bytes(), &env);
        assert!(
            output.status.success(),
            "{bound}: at the bound: {}",
            stderr_of(&output)
        );
        for (operation, sub, status) in [
            ("prepare", "begin", 1),
            ("migrate", "begin", 1),
            ("release", "end", 1),
            // A failed reconnect would make libvirt kill the guest: noted, exit 0.
            ("reconnect", "begin", 0),
        ] {
            let output = run_hook(["shaped", operation, sub, "-"], past.as_bytes(), &env);
            assert_eq!(output.status.code(), Some(status), "{bound} {operation}");
            let stderr = stderr_of(&output);
            assert_eq!(stderr.lines().count(), 1, "{bound} {operation}: {stderr}");
            assert!(
                stderr.starts_with(&format!(
                    "mdev-manager-hook: {operation} of domain 'shaped': cannot read the domain XML: domain XML"
                )) && stderr.contains(&words),
                "{bound} {operation}: {stderr}"
            );
            assert!(output.stdout.is_empty());
        }
    }
}
