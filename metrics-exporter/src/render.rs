//! The Prometheus text exposition format (version 0.0.4) of one reading of the service: a
//! `# HELP` and `# TYPE` line before each metric family, label values escaped (`\\`, `\"`,
//! `\n`), histogram buckets cumulative with `le` and a `+Inf` bucket equal to `_count`.

use std::collections::BTreeMap;
use std::fmt::Write;

use dbus_api::operation_stats::OperationStats;

/// What one scrape read from the service.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// `Manager.Version`.
    pub service_version: String,
    /// Parents.
    pub parents: Vec<ParentSample>,
    /// mdev types.
    pub types: Vec<TypeSample>,
    /// Instances.
    pub instances: Vec<InstanceSample>,
    /// `Manager.GetOperationStats`.
    pub stats: OperationStats,
}

/// A parent as the metrics label it.
#[derive(Debug, Clone, Default)]
pub struct ParentSample {
    /// Sysfs name (PCI address).
    pub name: String,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// Bound driver.
    pub driver: String,
    /// NUMA node, -1 unknown.
    pub numa_node: i32,
    /// `mdev`, `sriov`.
    pub modes: Vec<String>,
}

/// An mdev type's free capacity.
#[derive(Debug, Clone, Default)]
pub struct TypeSample {
    /// Parent sysfs name.
    pub parent: String,
    /// Type id (`nvidia-558`).
    pub id: String,
    /// `AvailableInstances`.
    pub available_instances: u32,
}

/// An instance.
#[derive(Debug, Clone, Default)]
pub struct InstanceSample {
    /// UUID.
    pub uuid: String,
    /// Parent sysfs name.
    pub parent: String,
    /// Type id.
    pub mdev_type: String,
    /// `mdev`, `vf`, `nvidia-vf`, `passthrough`.
    pub kind: String,
    /// Exists in the kernel now.
    pub active: bool,
    /// Held by a domain.
    pub held: bool,
    /// Planned share in ppm of its GPU.
    pub requested_share_ppm: u32,
    /// Share the backend gives, ppm.
    pub effective_share_ppm: u32,
}

impl InstanceSample {
    /// The `state` label: `held` (a VM holds it), `active` (exists, free) or `stopped`
    /// (a persistent definition without a device).
    pub fn state(&self) -> &'static str {
        match (self.active, self.held) {
            (true, true) => "held",
            (true, false) => "active",
            (false, _) => "stopped",
        }
    }
}

/// `s` as a label value: backslash, double quote and line feed escaped.
pub fn escape_label_value(s: &str) -> String {
    let mut escaped = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// A float as the format writes it (`+Inf`, `NaN`, shortest round-trip decimal otherwise).
fn number(value: f64) -> String {
    if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else if value.is_nan() {
        "NaN".to_string()
    } else {
        format!("{value}")
    }
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape_label_value(value)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    // HELP text escapes only backslash and line feed.
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The whole exposition of `reading`.
pub fn render(reading: &Reading) -> String {
    let mut out = String::with_capacity(256 + 160 * reading.instances.len());

    family(
        &mut out,
        "mdev_manager_build_info",
        "gauge",
        "Versions of the mdev-manager service and of this exporter; always 1.",
    );
    let _ = writeln!(
        out,
        "mdev_manager_build_info{} 1",
        labels(&[
            ("version", &reading.service_version),
            ("exporter_version", env!("CARGO_PKG_VERSION")),
        ])
    );

    family(
        &mut out,
        "mdev_manager_parent_info",
        "gauge",
        "A GPU the service manages (mdev parent or SR-IOV PF); always 1.",
    );
    for parent in &reading.parents {
        let vendor = format!("0x{:04x}", parent.vendor_id);
        let numa = parent.numa_node.to_string();
        let mode = parent.modes.join(",");
        let _ = writeln!(
            out,
            "mdev_manager_parent_info{} 1",
            labels(&[
                ("parent", &parent.name),
                ("vendor", &vendor),
                ("driver", &parent.driver),
                ("numa_node", &numa),
                ("mode", &mode),
            ])
        );
    }

    family(
        &mut out,
        "mdev_manager_instances",
        "gauge",
        "vGPU instances by parent, type, kind and state (active, held by a VM, stopped).",
    );
    let mut counts: BTreeMap<(&str, &str, &str, &str), u64> = BTreeMap::new();
    for instance in &reading.instances {
        *counts
            .entry((
                &instance.parent,
                &instance.mdev_type,
                &instance.kind,
                instance.state(),
            ))
            .or_default() += 1;
    }
    for ((parent, mdev_type, kind, state), count) in counts {
        let _ = writeln!(
            out,
            "mdev_manager_instances{} {count}",
            labels(&[
                ("parent", parent),
                ("type", mdev_type),
                ("kind", kind),
                ("state", state),
            ])
        );
    }

    family(
        &mut out,
        "mdev_manager_type_available_instances",
        "gauge",
        "How many more instances of an mdev type its parent can create now.",
    );
    for mdev_type in &reading.types {
        let _ = writeln!(
            out,
            "mdev_manager_type_available_instances{} {}",
            labels(&[("parent", &mdev_type.parent), ("type", &mdev_type.id)]),
            mdev_type.available_instances
        );
    }

    family(
        &mut out,
        "mdev_manager_instance_share_ratio",
        "gauge",
        "An instance's share of its GPU's time (0..1): requested by the plan, effective as the driver applies it.",
    );
    for instance in &reading.instances {
        for (kind, ppm) in [
            ("requested", instance.requested_share_ppm),
            ("effective", instance.effective_share_ppm),
        ] {
            let _ = writeln!(
                out,
                "mdev_manager_instance_share_ratio{} {}",
                labels(&[
                    ("uuid", &instance.uuid),
                    ("parent", &instance.parent),
                    ("kind", kind)
                ]),
                number(f64::from(ppm) / 1_000_000.0)
            );
        }
    }

    let stats = &reading.stats;
    family(
        &mut out,
        "mdev_manager_operation_duration_seconds",
        "histogram",
        "Duration of the operations the service served (D-Bus methods; job:NAME for a Job's work).",
    );
    for operation in &stats.operations {
        for (bound, count) in stats
            .bucket_bounds
            .iter()
            .zip(&operation.cumulative_buckets)
        {
            let le = number(*bound);
            let _ = writeln!(
                out,
                "mdev_manager_operation_duration_seconds_bucket{} {count}",
                labels(&[("operation", &operation.operation), ("le", &le)])
            );
        }
        let _ = writeln!(
            out,
            "mdev_manager_operation_duration_seconds_bucket{} {}",
            labels(&[("operation", &operation.operation), ("le", "+Inf")]),
            operation.count
        );
        let _ = writeln!(
            out,
            "mdev_manager_operation_duration_seconds_sum{} {}",
            labels(&[("operation", &operation.operation)]),
            number(operation.sum_seconds)
        );
        let _ = writeln!(
            out,
            "mdev_manager_operation_duration_seconds_count{} {}",
            labels(&[("operation", &operation.operation)]),
            operation.count
        );
    }

    family(
        &mut out,
        "mdev_manager_operation_errors_total",
        "counter",
        "Operations that failed, by operation and D-Bus error name.",
    );
    for error in &stats.errors {
        let _ = writeln!(
            out,
            "mdev_manager_operation_errors_total{} {}",
            labels(&[("operation", &error.operation), ("error", &error.error)]),
            error.count
        );
    }

    family(
        &mut out,
        "mdev_manager_jobs_running",
        "gauge",
        "Jobs (cancelable long operations) running in the service now.",
    );
    let _ = writeln!(out, "mdev_manager_jobs_running {}", stats.jobs_running);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dbus_api::operation_stats::{OperationEntry, OperationErrorEntry};

    #[test]
    fn label_values_escape_backslash_quote_and_newline() {
        assert_eq!(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(escape_label_value("0000:3b:00.0"), "0000:3b:00.0");
    }

    #[test]
    fn instances_are_counted_per_parent_type_kind_and_state() {
        let instance = |uuid: &str, active, held| InstanceSample {
            uuid: uuid.into(),
            parent: "0000:3b:00.0".into(),
            mdev_type: "nvidia-223".into(),
            kind: "mdev".into(),
            active,
            held,
            requested_share_ppm: 250_000,
            effective_share_ppm: 500_000,
        };
        let reading = Reading {
            service_version: "0.1.0".into(),
            instances: vec![
                instance("a", true, false),
                instance("b", true, false),
                instance("c", true, true),
                instance("d", false, false),
            ],
            ..Reading::default()
        };
        let text = render(&reading);
        let base = "parent=\"0000:3b:00.0\",type=\"nvidia-223\",kind=\"mdev\"";
        assert!(text.contains(&format!(
            "mdev_manager_instances{{{base},state=\"active\"}} 2\n"
        )));
        assert!(text.contains(&format!(
            "mdev_manager_instances{{{base},state=\"held\"}} 1\n"
        )));
        assert!(text.contains(&format!(
            "mdev_manager_instances{{{base},state=\"stopped\"}} 1\n"
        )));
        assert!(text.contains(
            "mdev_manager_instance_share_ratio{uuid=\"a\",parent=\"0000:3b:00.0\",kind=\"requested\"} 0.25\n"
        ));
        assert!(text.contains(
            "mdev_manager_instance_share_ratio{uuid=\"a\",parent=\"0000:3b:00.0\",kind=\"effective\"} 0.5\n"
        ));
    }

    #[test]
    fn a_histogram_ends_in_an_inf_bucket_equal_to_its_count() {
        let reading = Reading {
            stats: OperationStats {
                jobs_running: 3,
                bucket_bounds: vec![0.01, 1.0],
                operations: vec![OperationEntry {
                    operation: "Destroy".into(),
                    count: 5,
                    sum_seconds: 7.5,
                    cumulative_buckets: vec![1, 4],
                }],
                errors: vec![OperationErrorEntry {
                    operation: "Destroy".into(),
                    error: "org.mdevmanager.VGpu1.Error.InUse".into(),
                    count: 2,
                }],
            },
            ..Reading::default()
        };
        let text = render(&reading);
        let expected =
            "mdev_manager_operation_duration_seconds_bucket{operation=\"Destroy\",le=\"0.01\"} 1\n\
             mdev_manager_operation_duration_seconds_bucket{operation=\"Destroy\",le=\"1\"} 4\n\
             mdev_manager_operation_duration_seconds_bucket{operation=\"Destroy\",le=\"+Inf\"} 5\n\
             mdev_manager_operation_duration_seconds_sum{operation=\"Destroy\"} 7.5\n\
             mdev_manager_operation_duration_seconds_count{operation=\"Destroy\"} 5\n";
        assert!(text.contains(expected), "{text}");
        assert!(text.contains("mdev_manager_operation_errors_total{operation=\"Destroy\",error=\"org.mdevmanager.VGpu1.Error.InUse\"} 2\n"));
        assert!(text.contains("mdev_manager_jobs_running 3\n"));
        // Every family is introduced by HELP then TYPE.
        for name in [
            "mdev_manager_build_info",
            "mdev_manager_operation_duration_seconds",
            "mdev_manager_jobs_running",
        ] {
            assert!(text.contains(&format!("# HELP {name} ")));
            assert!(text.contains(&format!("# TYPE {name} ")));
        }
    }
}
