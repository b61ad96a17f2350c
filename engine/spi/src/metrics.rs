//! Named counters shared by operators and the runtime. Counters are per operator subtask;
//! the runtime sums them by name for progress lines and the exit summary.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Messages a source received from its service (redeliveries included).
pub const MESSAGES_RECEIVED: &str = "messages_received";
/// Messages a source acknowledged after their checkpoint committed.
pub const MESSAGES_ACKED: &str = "messages_acked";
/// Messages a source released for redelivery (nack).
pub const MESSAGES_NACKED: &str = "messages_nacked";
/// Of [`MESSAGES_NACKED`], those whose nack the source could not confirm sent to the
/// service before its close ended (they come back only when their lease runs out).
pub const MESSAGES_NACK_UNSENT: &str = "messages_nack_unsent";
/// Rows a sink wrote and saw confirmed.
pub const ROWS_WRITTEN: &str = "rows_written";
/// Gauge: messages a source subtask holds unacknowledged (received, neither acknowledged
/// after the checkpoint covering them completed nor released). `--stop-when-idle` stops
/// only while every source subtask of the job reports 0 (or never reports it): idle means
/// caught up end to end, every row of every message received written by its sinks and
/// committed (decision 0032).
pub const PENDING_ACKS: &str = "pending_acks";

/// Gauge of an operator subtask (a sink): its input watermark, milliseconds since the Unix
/// epoch: the lowest watermark over the source subtasks upstream of it that are not idle
/// (0: none yet, or not every upstream subtask sent one). Never goes backwards.
pub const INPUT_WATERMARK_MS: &str = "input_watermark_ms";

/// Counter of a window operator subtask: rows dropped as late, their window having fired
/// already (for HOP, rows one of whose windows had fired).
pub const ROWS_LATE: &str = "rows_late";
/// Gauge of a window operator subtask: groups over its open windows (one per key per
/// window), what its state holds and its memory grows with.
pub const WINDOW_GROUPS: &str = "window_groups";
/// Gauge of a window operator subtask: the memory estimate of its open windows, bytes
/// (what `RuntimeConfig::max_window_state_bytes` limits).
pub const WINDOW_STATE_BYTES: &str = "window_state_bytes";

/// The operator id of the runtime's own metrics; their subtask is the process index.
pub const RUNTIME_OPERATOR: &str = "runtime";
/// Runtime counter: checkpoints whose commit reached this process.
pub const CHECKPOINTS_COMPLETED: &str = "checkpoints_completed";
/// Runtime gauge: the epoch of the last completed checkpoint (restored or new; 0: none).
pub const LAST_COMPLETED_EPOCH: &str = "last_completed_epoch";
/// Runtime gauge: milliseconds from the last completed checkpoint's barrier to its commit,
/// as seen by this process.
pub const CHECKPOINT_DURATION_MS: &str = "checkpoint_duration_ms";
/// Runtime gauge: rows this process holds now: emitted by its sources and not yet taken
/// by a sink or sent to another process, plus rows received from other processes and not
/// yet taken by a sink (bounded by `--max-inflight-rows`).
pub const INFLIGHT_ROWS: &str = "inflight_rows";
/// Runtime gauge: the highest [`INFLIGHT_ROWS`] of this process since it started.
pub const INFLIGHT_ROWS_PEAK: &str = "inflight_rows_peak";

/// One value of a registry at the time it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricSample {
    /// The metric name (e.g. `messages_received`).
    pub name: String,
    /// The operator id (e.g. `source-bids`, or [`RUNTIME_OPERATOR`]).
    pub operator_id: String,
    /// The subtask index (global across a cluster; the process index for the runtime).
    pub subtask: usize,
    /// One more label of the series, if it has one: (name, value), e.g.
    /// `("subscription", "projects/p/subscriptions/s")`.
    pub label: Option<(String, String)>,
    pub value: u64,
}

/// A monotonically increasing counter.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (pending acks, buffered bytes).
#[derive(Debug, Clone, Default)]
pub struct Gauge(Arc<AtomicU64>);

impl Gauge {
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Adds `n`; returns the new value.
    pub fn add(&self, n: u64) -> u64 {
        self.0.fetch_add(n, Ordering::Relaxed) + n
    }
    /// Subtracts `n` (which an earlier `add` added).
    pub fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Ordering::Relaxed);
    }
    /// Raises the value to `v` if it is lower (a high-water mark).
    pub fn raise_to(&self, v: u64) {
        self.0.fetch_max(v, Ordering::Relaxed);
    }
}

/// A series: (metric name, operator id, subtask, optional extra label (name, value)).
type Key = (String, String, usize, Option<(String, String)>);

/// Registry of all counters and gauges of a job, keyed by (metric name, operator id,
/// subtask) and, for a gauge per subscription, one extra label.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    counters: Arc<Mutex<BTreeMap<Key, Counter>>>,
    gauges: Arc<Mutex<BTreeMap<Key, Gauge>>>,
}

impl Metrics {
    /// The counter `name` of one operator subtask, created on first use.
    pub fn counter(&self, name: &str, operator_id: &str, subtask: usize) -> Counter {
        let mut map = self.counters.lock().expect("metrics lock");
        map.entry((name.to_string(), operator_id.to_string(), subtask, None))
            .or_default()
            .clone()
    }

    /// The gauge `name` of one operator subtask, created on first use.
    pub fn gauge(&self, name: &str, operator_id: &str, subtask: usize) -> Gauge {
        let mut map = self.gauges.lock().expect("metrics lock");
        map.entry((name.to_string(), operator_id.to_string(), subtask, None))
            .or_default()
            .clone()
    }

    /// The gauge `name` of one operator subtask and one value of an extra label (e.g.
    /// `("subscription", path)` for a gauge per subscription), created on first use.
    pub fn labelled_gauge(
        &self,
        name: &str,
        operator_id: &str,
        subtask: usize,
        (label, value): (&str, &str),
    ) -> Gauge {
        let mut map = self.gauges.lock().expect("metrics lock");
        let label = Some((label.to_string(), value.to_string()));
        map.entry((name.to_string(), operator_id.to_string(), subtask, label))
            .or_default()
            .clone()
    }

    /// Sum of counter `name` over every operator and subtask.
    pub fn total(&self, name: &str) -> u64 {
        let map = self.counters.lock().expect("metrics lock");
        map.iter()
            .filter(|((n, ..), _)| n == name)
            .map(|(_, c)| c.get())
            .sum()
    }

    /// The names of every counter, sorted, without repeats.
    pub fn counter_names(&self) -> Vec<String> {
        let map = self.counters.lock().expect("metrics lock");
        let mut names: Vec<String> = map.keys().map(|(n, ..)| n.clone()).collect();
        names.dedup();
        names
    }

    /// Every counter's current value, ordered by (name, operator id, subtask).
    pub fn counter_samples(&self) -> Vec<MetricSample> {
        let map = self.counters.lock().expect("metrics lock");
        map.iter().map(|(k, c)| sample(k, c.get())).collect()
    }

    /// Every gauge's current value, ordered by (name, operator id, subtask).
    pub fn gauge_samples(&self) -> Vec<MetricSample> {
        let map = self.gauges.lock().expect("metrics lock");
        map.iter().map(|(k, g)| sample(k, g.get())).collect()
    }

    /// Sum of gauge `name` over every operator and subtask.
    pub fn gauge_total(&self, name: &str) -> u64 {
        let map = self.gauges.lock().expect("metrics lock");
        map.iter()
            .filter(|((n, ..), _)| n == name)
            .map(|(_, g)| g.get())
            .sum()
    }

    /// The highest value of gauge `name` over every operator, subtask and label (0 when
    /// there is none), e.g. the oldest message age of a whole job.
    pub fn gauge_max(&self, name: &str) -> u64 {
        let map = self.gauges.lock().expect("metrics lock");
        map.iter()
            .filter(|((n, ..), _)| n == name)
            .map(|(_, g)| g.get())
            .max()
            .unwrap_or(0)
    }
}

fn sample((name, operator_id, subtask, label): &Key, value: u64) -> MetricSample {
    MetricSample {
        name: name.clone(),
        operator_id: operator_id.clone(),
        subtask: *subtask,
        label: label.clone(),
        value,
    }
}
