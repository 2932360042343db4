//! `vgpuctl probe TARGET`: the service opens a device through VFIO the way QEMU does and
//! reports each step.

use dbus_api::proxy::ManagerProxy;
use dbus_api::ClientError;

use crate::failure::Failure;
use crate::output::print_json;
use crate::service::{Sent, Session};
use crate::table;

/// `vgpuctl probe TARGET`.
pub async fn probe(session: &Session, target: &str) -> Result<(), Failure> {
    let manager = ManagerProxy::new(&session.connection).await?;
    let sent = Sent::new(&session.auth.no_options());
    let report = manager
        .probe(target, sent.proxy())
        .await
        .map_err(ClientError::from)?;
    print_probe(target, &report, session.json)
}

/// Prints the service's probe report (JSON as received, or a table of steps); a failed step
/// makes the command fail with status 1 naming it.
fn print_probe(target: &str, report: &str, json: bool) -> Result<(), Failure> {
    let value: serde_json::Value = serde_json::from_str(report).map_err(|e| {
        Failure::new(
            format!("the service's probe report for {target} is not JSON: {e}"),
            1,
        )
    })?;
    let text = |value: &serde_json::Value| match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    let steps = value["steps"].as_array().cloned().unwrap_or_default();
    if json {
        print_json(&value)?;
    } else {
        table::print(
            &["STEP", "STATUS", "DETAIL"],
            steps.iter().map(|step| {
                vec![
                    text(&step["step"]),
                    text(&step["status"]),
                    text(&step["detail"]),
                ]
            }),
        );
    }
    if value["ok"] == serde_json::Value::Bool(true) {
        return Ok(());
    }
    let failed = steps
        .iter()
        .find(|step| step["status"] == "failed")
        .map(|step| text(&step["step"]))
        .unwrap_or_else(|| "a step".to_string());
    Err(Failure::new(
        format!("probe of {target}: {failed} failed"),
        1,
    ))
}

#[cfg(test)]
mod tests {
    use super::print_probe;

    /// A report with a failed step fails the command with status 1 naming the step; a passing
    /// report succeeds; a reply that is not JSON is a failure, not a panic.
    #[test]
    fn probe_status_follows_the_report() {
        let failed = r#"{"ok":false,"steps":[
            {"step":"resolve","status":"ok","detail":"found"},
            {"step":"group","status":"failed","detail":"no group file"},
            {"step":"container","status":"not_run","detail":"earlier step failed"}]}"#;
        let failure = print_probe("0000:3b:00.4", failed, false).unwrap_err();
        assert_eq!(failure.code, 1);
        assert!(
            failure.message.contains("group failed"),
            "{}",
            failure.message
        );
        assert!(
            failure.message.contains("0000:3b:00.4"),
            "{}",
            failure.message
        );

        let passed = r#"{"ok":true,"steps":[{"step":"resolve","status":"ok","detail":""}]}"#;
        assert!(print_probe("0000:3b:00.4", passed, true).is_ok());

        let failure = print_probe("0000:3b:00.4", "not json", false).unwrap_err();
        assert_eq!(failure.code, 1);
    }
}
