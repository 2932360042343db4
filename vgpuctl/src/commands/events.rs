//! `vgpuctl events`: the service's signals, live, in the order the bus delivers them.

use std::collections::HashMap;

use dbus_api::names::{BUS_NAME, ROOT_PATH};
use futures_util::StreamExt;
use serde_json::{json, Value};
use zbus::message::Type;
use zbus::{MatchRule, MessageStream, OwnedObjectPath, OwnedVariant, Variant};

use crate::failure::Failure;
use crate::service::Session;

/// A D-Bus value as JSON: numbers, strings, booleans, paths and arrays of them; anything else
/// as its D-Bus text form.
fn to_json(value: &Variant<'_>) -> Value {
    match value {
        Variant::Bool(b) => json!(b),
        Variant::U8(n) => json!(n),
        Variant::I16(n) => json!(n),
        Variant::U16(n) => json!(n),
        Variant::I32(n) => json!(n),
        Variant::U32(n) => json!(n),
        Variant::I64(n) => json!(n),
        Variant::U64(n) => json!(n),
        Variant::F64(n) => json!(n),
        Variant::Str(s) => json!(s.as_str()),
        Variant::ObjectPath(p) => json!(p.as_str()),
        Variant::Array(array) => Value::Array(array.iter().map(to_json).collect()),
        other => json!(other.to_string()),
    }
}

fn event_json(message: &zbus::Message) -> Option<Value> {
    let header = message.header();
    let member = header.member()?.as_str().to_string();
    let interface = header.interface()?.as_str().to_string();
    let path = header.path()?.as_str().to_string();
    let body = message.body();
    match (interface.as_str(), member.as_str()) {
        ("org.freedesktop.DBus.ObjectManager", "InterfacesAdded") => {
            let (object, interfaces): (
                OwnedObjectPath,
                HashMap<String, HashMap<String, OwnedVariant>>,
            ) = body.deserialize().ok()?;
            let mut names: Vec<&String> = interfaces.keys().collect();
            names.sort();
            Some(json!({"event": "added", "object": object.as_str(), "interfaces": names}))
        }
        ("org.freedesktop.DBus.ObjectManager", "InterfacesRemoved") => {
            let (object, interfaces): (OwnedObjectPath, Vec<String>) = body.deserialize().ok()?;
            Some(json!({"event": "removed", "object": object.as_str(), "interfaces": interfaces}))
        }
        ("org.freedesktop.DBus.Properties", "PropertiesChanged") => {
            let (iface, changed, _invalidated): (
                String,
                HashMap<String, OwnedVariant>,
                Vec<String>,
            ) = body.deserialize().ok()?;
            let properties: serde_json::Map<String, Value> = changed
                .iter()
                .map(|(name, value)| {
                    let value = value.try_clone().ok().map(Variant::from);
                    (
                        name.clone(),
                        value.as_ref().map(to_json).unwrap_or(Value::Null),
                    )
                })
                .collect();
            Some(
                json!({"event": "changed", "object": path, "interface": iface, "properties": properties}),
            )
        }
        ("org.mdevmanager.VGpu1.Manager", "JobNew") => {
            let (job, operation): (OwnedObjectPath, String) = body.deserialize().ok()?;
            Some(json!({"event": "job-new", "job": job.as_str(), "operation": operation}))
        }
        ("org.mdevmanager.VGpu1.Manager", "JobRemoved") => {
            let (job, result, message): (OwnedObjectPath, String, String) =
                body.deserialize().ok()?;
            Some(
                json!({"event": "job-removed", "job": job.as_str(), "result": result, "message": message}),
            )
        }
        _ => Some(
            json!({"event": "signal", "object": path, "interface": interface, "member": member}),
        ),
    }
}

fn human(event: &Value) -> String {
    let text = |key: &str| {
        event
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match event
        .get("event")
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "added" | "removed" => {
            let interfaces: Vec<String> = event["interfaces"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| {
                            v.as_str()
                                .map(|s| s.rsplit('.').next().unwrap_or(s).to_string())
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "{:<8} {} [{}]",
                text("event"),
                text("object"),
                interfaces.join(",")
            )
        }
        "changed" => {
            let properties: Vec<String> = event["properties"]
                .as_object()
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            format!("changed  {} {}", text("object"), properties.join(" "))
        }
        "job-new" => format!("job-new  {} {}", text("job"), text("operation")),
        "job-removed" => format!(
            "job-end  {} {}: {}",
            text("job"),
            text("result"),
            text("message")
        ),
        _ => format!(
            "signal   {} {}.{}",
            text("object"),
            text("interface"),
            text("member")
        ),
    }
}

/// Prints the service's signals until interrupted (or `count` events).
pub async fn follow(session: &Session, count: Option<usize>) -> Result<(), Failure> {
    let rule = MatchRule::builder()
        .msg_type(Type::Signal)
        .sender(BUS_NAME)
        .path_namespace(ROOT_PATH)
        .build()?;
    let mut stream = MessageStream::for_match_rule(rule, &session.connection, None).await?;
    // Tell whoever waits for us (people, scripts, tests) that the subscription is in place:
    // nothing the service sends from now on is missed. On stderr, so JSON output stays clean.
    eprintln!("following {BUS_NAME} signals (Ctrl-C to stop)");
    let mut seen = 0;
    while let Some(message) = stream.next().await {
        let message = message?;
        let Some(event) = event_json(&message) else {
            continue;
        };
        if session.json {
            outln!("{event}");
        } else {
            outln!("{}", human(&event));
        }
        seen += 1;
        if count.is_some_and(|limit| seen >= limit) {
            break;
        }
    }
    Ok(())
}
