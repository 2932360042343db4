//! `Manager.GetOperationStats`: the service's own counters of the D-Bus operations it served,
//! the shape a Prometheus exporter turns into `mdev_manager_operation_duration_seconds`
//! (a histogram) and `mdev_manager_operation_errors_total`.
//!
//! D-Bus signature of the reply: `(uada(stdat)a(sst))`.

/// The upper bounds (seconds) of the latency buckets, smallest first; the implicit last bucket
/// is `+Inf`. Fixed so scrapes of different service versions line up.
pub const BUCKET_BOUNDS_SECONDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// Everything `Manager.GetOperationStats` returns.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, zbus::Type)]
pub struct OperationStats {
    /// Jobs running now (exported Job objects that have not finished).
    pub jobs_running: u32,
    /// Upper bounds of the latency buckets in seconds ([`BUCKET_BOUNDS_SECONDS`]).
    pub bucket_bounds: Vec<f64>,
    /// One entry per operation served at least once since the service started, sorted by name.
    pub operations: Vec<OperationEntry>,
    /// One entry per operation and error name that occurred, sorted.
    pub errors: Vec<OperationErrorEntry>,
}

/// Latency of one operation since the service started, D-Bus signature `(stdat)`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, zbus::Type)]
pub struct OperationEntry {
    /// The D-Bus method (`CreateInstances`) or, for the work of a Job, `job:` and the Job's
    /// `Operation` (`job:sriov-set-numvfs`).
    pub operation: String,
    /// How many calls finished (successful or not).
    pub count: u64,
    /// Their total duration in seconds.
    pub sum_seconds: f64,
    /// Cumulative counts: element `i` counts the calls that took at most `bucket_bounds[i]`.
    pub cumulative_buckets: Vec<u64>,
}

/// Failures of one operation with one error name, D-Bus signature `(sst)`.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, zbus::Type,
)]
pub struct OperationErrorEntry {
    /// The operation, as in [`OperationEntry::operation`].
    pub operation: String,
    /// The D-Bus error name (`org.mdevmanager.VGpu1.Error.NotFound`).
    pub error: String,
    /// How many times.
    pub count: u64,
}
