//! What a caller holds of a job run: the handle that stops it, the counts it reports when
//! it ends and the error it fails with (shared by the coordinator and the process loop).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use tokio::sync::Notify;

/// Asks a running job to stop: gracefully (final checkpoint, commit, exit 0) or, e.g. on
/// a second signal, at once (nothing more committed, every held message released).
#[derive(Clone, Default)]
pub struct StopHandle {
    pub(crate) stop: Arc<Notify>,
    pub(crate) abort: Arc<Notify>,
}

impl StopHandle {
    pub fn new() -> Self {
        Self::default()
    }
    /// Graceful stop. During start-up (before every source connected) it stops at once:
    /// nothing was read yet.
    pub fn stop(&self) {
        self.stop.notify_one();
    }
    /// Immediate stop: the job fails with an error saying so.
    pub fn abort(&self) {
        self.abort.notify_one();
    }
    /// Resolves when a stop (graceful or not) was requested before a job listened; for
    /// work done before the job starts (e.g. starting an emulator). Consumes the request.
    pub async fn stopped(&self) {
        tokio::select! {
            _ = self.stop.notified() => {}
            _ = self.abort.notified() => {}
        }
    }
}

/// Counts reported when a job ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSummary {
    pub messages_read: u64,
    pub rows_written: u64,
    pub checkpoints_completed: u64,
    pub messages_acked: u64,
    /// Messages released for redelivery whose nack was sent (the client finished the
    /// request before the source's close ended), on close, after a final barrier or
    /// while reading (e.g. a redelivered duplicate, a parked split).
    pub messages_released: u64,
    /// Messages nacked whose nack could not be confirmed sent before the close ended
    /// (e.g. the service was unreachable): they return when their lease runs out.
    pub messages_not_released: u64,
    /// Every other counter with a non-zero total (e.g. `messages_dropped`,
    /// `pull_reconnects`), by name.
    pub other_counters: BTreeMap<String, u64>,
    /// The checkpoint epoch the job restored from, if any.
    pub restored_epoch: Option<u64>,
    /// The last completed checkpoint epoch (restored or new).
    pub last_completed_epoch: Option<u64>,
    /// The lowest input watermark of this process's sink subtasks at the end (ms since
    /// the Unix epoch), when every one of them had one.
    pub watermark_ms: Option<u64>,
}

impl fmt::Display for JobSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "messages read: {}, rows written: {}, checkpoints completed: {}, messages acknowledged: {}, messages released: {}",
            self.messages_read, self.rows_written, self.checkpoints_completed, self.messages_acked, self.messages_released
        )?;
        if self.messages_not_released > 0 {
            write!(
                f,
                ", messages not released: {} (their nack was not sent; they return when their lease runs out)",
                self.messages_not_released
            )?;
        }
        for (name, n) in &self.other_counters {
            write!(f, ", {}: {n}", name.replace('_', " "))?;
        }
        if self.watermark_ms == Some((i64::MAX / 1_000_000) as u64) {
            // `--drain`: the end of time.
            write!(f, ", watermark: end of input (drained)")?;
        } else if let Some(ms) = self.watermark_ms {
            let at = i64::try_from(ms)
                .ok()
                .and_then(chrono::DateTime::from_timestamp_millis)
                .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
                .unwrap_or_default();
            write!(f, ", watermark: {ms} ms ({at})")?;
        }
        Ok(())
    }
}

/// A failed job with what it did before failing.
#[derive(Debug)]
pub struct JobError {
    pub error: anyhow::Error,
    pub summary: JobSummary,
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for JobError {}
