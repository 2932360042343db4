//! Counters of the operations the service serves: per operation a latency histogram (the
//! buckets of [`BUCKET_BOUNDS_SECONDS`]) and per operation and D-Bus error name a failure
//! count. Every D-Bus method body that can fail (all but `GetPermissions` and
//! `GetOperationStats`) runs through [`Service::metered`](super::Service::metered) and every
//! Job's work is recorded when it ends, so this is the one place they are counted.
//! `Manager.GetOperationStats` publishes a snapshot; the exporter turns it into Prometheus
//! metrics. Counts start at zero when the service starts (Prometheus counters may reset).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use dbus_api::operation_stats::{
    OperationEntry, OperationErrorEntry, OperationStats, BUCKET_BOUNDS_SECONDS,
};
use dbus_api::ErrorKind;

/// The counters; cheap to update (one short lock per call).
#[derive(Debug, Default)]
pub struct OperationMetrics {
    operations: Mutex<BTreeMap<String, OperationRecord>>,
}

#[derive(Debug, Default, Clone)]
struct OperationRecord {
    count: u64,
    sum_seconds: f64,
    /// Non-cumulative: `per_bucket[i]` counts calls in `(bound[i-1], bound[i]]`.
    per_bucket: [u64; BUCKET_BOUNDS_SECONDS.len()],
    errors: BTreeMap<ErrorKindName, u64>,
}

type ErrorKindName = String;

impl OperationMetrics {
    /// Records one finished call of `operation` that took `elapsed`, failed with `error` or not.
    pub fn record(&self, operation: &str, elapsed: Duration, error: Option<ErrorKind>) {
        let seconds = elapsed.as_secs_f64();
        let Ok(mut operations) = self.operations.lock() else {
            return;
        };
        let record = match operations.get_mut(operation) {
            Some(record) => record,
            None => operations.entry(operation.to_string()).or_default(),
        };
        record.count += 1;
        record.sum_seconds += seconds;
        if let Some(bucket) = BUCKET_BOUNDS_SECONDS
            .iter()
            .position(|bound| seconds <= *bound)
        {
            record.per_bucket[bucket] += 1;
        }
        if let Some(kind) = error {
            *record.errors.entry(kind.dbus_name()).or_default() += 1;
        }
    }

    /// The counters now, as `Manager.GetOperationStats` sends them.
    pub fn snapshot(&self, jobs_running: u32) -> OperationStats {
        let operations = self
            .operations
            .lock()
            .map(|operations| operations.clone())
            .unwrap_or_default();
        let mut stats = OperationStats {
            jobs_running,
            bucket_bounds: BUCKET_BOUNDS_SECONDS.to_vec(),
            ..OperationStats::default()
        };
        for (operation, record) in operations {
            let mut total = 0;
            let cumulative_buckets = record
                .per_bucket
                .iter()
                .map(|count| {
                    total += count;
                    total
                })
                .collect();
            for (error, count) in &record.errors {
                stats.errors.push(OperationErrorEntry {
                    operation: operation.clone(),
                    error: error.clone(),
                    count: *count,
                });
            }
            stats.operations.push(OperationEntry {
                operation,
                count: record.count,
                sum_seconds: record.sum_seconds,
                cumulative_buckets,
            });
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_lands_in_every_bucket_from_its_duration_up_and_errors_count_by_name() {
        let metrics = OperationMetrics::default();
        metrics.record("CreateInstances", Duration::from_millis(3), None);
        metrics.record(
            "CreateInstances",
            Duration::from_millis(30),
            Some(ErrorKind::NoCapacity),
        );
        metrics.record("Destroy", Duration::from_secs(120), Some(ErrorKind::InUse));
        let stats = metrics.snapshot(2);
        assert_eq!(stats.jobs_running, 2);
        assert_eq!(stats.bucket_bounds, BUCKET_BOUNDS_SECONDS.to_vec());
        let create = &stats.operations[0];
        assert_eq!(create.operation, "CreateInstances");
        assert_eq!(create.count, 2);
        assert!((create.sum_seconds - 0.033).abs() < 1e-9);
        let at = |bound: f64| {
            let index = BUCKET_BOUNDS_SECONDS
                .iter()
                .position(|b| *b == bound)
                .unwrap();
            create.cumulative_buckets[index]
        };
        assert_eq!(at(0.0025), 0);
        assert_eq!(at(0.005), 1);
        assert_eq!(at(0.025), 1);
        assert_eq!(at(0.05), 2);
        assert_eq!(at(60.0), 2);
        // Longer than the largest bound: only in +Inf (the count).
        let destroy = &stats.operations[1];
        assert_eq!(destroy.cumulative_buckets.last(), Some(&0));
        assert_eq!(destroy.count, 1);
        assert_eq!(
            stats.errors,
            vec![
                OperationErrorEntry {
                    operation: "CreateInstances".into(),
                    error: "org.mdevmanager.VGpu1.Error.NoCapacity".into(),
                    count: 1,
                },
                OperationErrorEntry {
                    operation: "Destroy".into(),
                    error: "org.mdevmanager.VGpu1.Error.InUse".into(),
                    count: 1,
                },
            ]
        );
    }
}
