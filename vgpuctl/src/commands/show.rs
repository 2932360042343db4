//! `vgpuctl show UUID`: one instance, a field per line.

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{find_instance, snapshot, Session};

/// `vgpuctl show UUID`.
pub async fn show(session: &Session, uuid: &str) -> Result<(), Failure> {
    let snapshot = snapshot(&session.connection).await?;
    let record = find_instance(&snapshot, uuid)?;
    if session.json {
        return print_json(record);
    }
    let value = serde_json::to_value(record).unwrap_or_default();
    if let serde_json::Value::Object(map) = value {
        for (key, value) in map {
            let text = match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            outln!("{key:>12}: {text}");
        }
    }
    Ok(())
}
