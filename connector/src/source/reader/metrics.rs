//! The subtask's counters and gauges (SPEC 8): created at start, the gauges refreshed by
//! the run loop.

use super::*;

pub(super) struct Counters {
    pub(super) received: Counter,
    pub(super) acked: Counter,
    pub(super) nacked: Counter,
    pub(super) nack_unsent: Counter,
    pub(super) dropped: Counter,
    pub(super) nacked_bad: Counter,
    pub(super) rejected: Counter,
    pub(super) skipped: Counter,
    pub(super) in_error: Counter,
    pub(super) fetches: Counter,
    pub(super) confirmed: Counter,
    pub(super) reconnects: Counter,
    pub(super) parked: Counter,
    pub(super) pending_acks: Gauge,
    pub(super) buffered_bytes: Gauge,
    pub(super) pending_checkpoints: Gauge,
    pub(super) checkpoint_lag_ms: Gauge,
    pub(super) behind_watermark: Counter,
    pub(super) watermark_ms: Gauge,
    pub(super) watermark_lag_ms: Gauge,
    pub(super) idle: Gauge,
    pub(super) replayed: Counter,
    pub(super) paused_for_alignment: Gauge,
    pub(super) alignment_pauses: Counter,
}

/// Milliseconds since the Unix epoch, by this machine's clock.
fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A gauge of this subtask labelled with one of its subscriptions.
pub(super) fn subscription_gauge(ctx: &SourceContext, name: &str, subscription: &str) -> Gauge {
    ctx.metrics.labelled_gauge(
        name,
        &ctx.task_info.operator_id,
        ctx.task_info.task_index,
        ("subscription", subscription),
    )
}

impl Counters {
    /// The subtask's counters and gauges, registered with the job's metrics.
    pub(super) fn new(ctx: &SourceContext) -> Counters {
        let counter = |n| ctx.counter(n);
        let gauge = |n| {
            ctx.metrics
                .gauge(n, &ctx.task_info.operator_id, ctx.task_info.task_index)
        };
        Counters {
            received: counter(MESSAGES_RECEIVED),
            acked: counter(MESSAGES_ACKED),
            nacked: counter(MESSAGES_NACKED),
            nack_unsent: counter(MESSAGES_NACK_UNSENT),
            dropped: counter(MESSAGES_DROPPED),
            nacked_bad: counter(MESSAGES_NACKED_BAD),
            rejected: counter(MESSAGES_REJECTED),
            skipped: counter(RECORDS_SKIPPED),
            in_error: counter(RECORDS_IN_ERROR),
            fetches: counter(FETCHES),
            confirmed: counter(ACKS_CONFIRMED),
            reconnects: counter(PULL_RECONNECTS),
            parked: counter(SPLITS_PARKED),
            pending_acks: gauge(PENDING_ACKS),
            buffered_bytes: gauge(BUFFERED_BYTES),
            pending_checkpoints: gauge(PENDING_CHECKPOINTS),
            checkpoint_lag_ms: gauge(CHECKPOINT_LAG_MS),
            behind_watermark: counter(MESSAGES_BEHIND_WATERMARK),
            watermark_ms: gauge(WATERMARK_MS),
            watermark_lag_ms: gauge(WATERMARK_LAG_MS),
            idle: gauge(SOURCE_IDLE),
            replayed: counter(MESSAGES_REPLAYED),
            paused_for_alignment: gauge(SPLITS_PAUSED_FOR_ALIGNMENT),
            alignment_pauses: counter(ALIGNMENT_PAUSES),
        }
    }
}

/// The ages in ms at `now_ms` of the oldest and newest held message, from their publish
/// times (ms since the Unix epoch); 0 with nothing held. Publish times are the service's
/// clock: a local clock behind it reads as 0, never as a negative age.
fn ages(now_ms: i64, range: Option<(i64, i64)>) -> (u64, u64) {
    let (oldest, newest) = range.unwrap_or((now_ms, now_ms));
    let age = |t: i64| now_ms.saturating_sub(t).max(0) as u64;
    (age(oldest), age(newest))
}

impl SourceReader {
    pub(super) fn counters(&self) -> &Counters {
        self.counters
            .as_ref()
            .expect("counters are set in on_start")
    }

    /// What the streams count into, and the subtask's lease loops.
    pub(super) fn stream_shared(&self) -> StreamShared {
        let c = self.counters();
        StreamShared {
            reconnects: c.reconnects.clone(),
            received: c.received.clone(),
            nacked: c.nacked.clone(),
            leases: self.leases.clone(),
        }
    }

    pub(super) fn update_gauges(&mut self) {
        let (m, b) = self.held();
        let c = self.counters();
        c.pending_acks.set(m);
        c.buffered_bytes.set(b);
        c.pending_checkpoints.set(
            self.splits
                .iter()
                .map(|s| s.tracker.pending_checkpoints() as u64)
                .max()
                .unwrap_or(0),
        );
        // One monotonic clock read per refresh, shared with the watermark's.
        let now = Instant::now();
        c.checkpoint_lag_ms
            .set(now.saturating_duration_since(self.last_commit).as_millis() as u64);
        let now_ms = unix_ms_now();
        for s in &self.splits {
            let (oldest, newest) = ages(now_ms, s.tracker.publish_time_range());
            s.age.0.set(oldest);
            s.age.1.set(newest);
        }
        self.advance_watermark(now, now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::ages;

    #[test]
    fn message_ages_are_zero_when_nothing_is_held_or_the_local_clock_is_behind() {
        assert_eq!(ages(10_000, Some((4_000, 9_000))), (6_000, 1_000));
        assert_eq!(ages(10_000, None), (0, 0));
        assert_eq!(ages(10_000, Some((9_000, 12_000))), (1_000, 0));
        assert_eq!(ages(0, Some((i64::MIN, 0))), (i64::MAX as u64, 0));
    }
}
