//! Source policies that are pure logic: the bad-message policy's decisions and log
//! throttling, the default flow-control limit, and the retryable-status rule of a
//! streaming pull.

use std::time::Duration;

use google_cloud_gax::error::rpc::Code;
use pubsub_schema::DeserializationFailurePolicy;

/// Messages per second one StreamingPull stream is assumed to deliver when sizing the
/// default `scan.flow-control.max-outstanding-element-count`. The emulator serves
/// ~1,950 msg/s per stream; the real service far more, so 10,000 leaves headroom without
/// making the limit unbounded (the bytes limit, 100 MB by default, bounds memory).
pub const DEFAULT_RATE_PER_STREAM: u64 = 10_000;
/// Checkpoint intervals a message may be held: it is held from receipt until the commit
/// of the checkpoint after the next barrier, so up to ~2 intervals plus the commit.
pub const HELD_INTERVALS: f64 = 2.5;
/// The default limit never goes below this (the client's own default).
pub const MIN_DEFAULT_OUTSTANDING: u64 = 1000;

/// The effective held-messages limit per subtask: the explicit option if set, else
/// `DEFAULT_RATE_PER_STREAM x streams x 2.5 x checkpoint interval`, at least 1000.
/// Memory per held small message was measured at ~540 bytes of RSS besides its payload
/// (see the source's module docs), so 250,000 held messages (10 s interval, 1 stream)
/// cost ~135 MB at worst; the bytes limit caps payload memory independently.
pub fn effective_max_outstanding(
    explicit: Option<u64>,
    checkpoint_interval: Duration,
    streams: u32,
) -> u64 {
    if let Some(v) = explicit {
        return v;
    }
    let per_stream =
        DEFAULT_RATE_PER_STREAM as f64 * checkpoint_interval.as_secs_f64() * HELD_INTERVALS;
    let v = (per_stream * f64::from(streams.max(1))).min(u64::MAX as f64 / 2.0) as u64;
    v.max(MIN_DEFAULT_OUTSTANDING)
}

/// What to do with a message that failed to decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadMessageAction {
    /// Fail the job (the handle is released by close: nacked).
    Fail,
    /// Stage the message so it is acked with the next checkpoint; count it.
    Drop,
    /// Nack it now; count it.
    Nack,
    /// Offer it to the table's dead-letter queue, then stage it like `Drop`; the queue is
    /// flushed before the checkpoint that acks it is reported.
    DeadLetter,
}

pub fn bad_message_action(p: DeserializationFailurePolicy) -> BadMessageAction {
    match p {
        DeserializationFailurePolicy::Fail => BadMessageAction::Fail,
        DeserializationFailurePolicy::Drop => BadMessageAction::Drop,
        DeserializationFailurePolicy::Nack => BadMessageAction::Nack,
        DeserializationFailurePolicy::DeadLetter => BadMessageAction::DeadLetter,
    }
}

/// Whether the `n`-th bad message (1-based) is logged: the first 10, then only when `n`
/// is a power of two, so a flood of bad messages does not flood the log.
pub fn should_log_bad(n: u64) -> bool {
    n <= 10 || n.is_power_of_two()
}

/// `scan.max-consecutive-failures`: the messages of one subtask that failed in a row (did
/// not decode, or their rows failed in SQL), in the order they were decoded. A message
/// whose rows went out ends the run; a duplicate dropped by deduplication neither fails
/// nor ends it. A decoded message's fate is known only when its batch is emitted, so a
/// decode failure after messages of the open batch counts, until then, only the failures
/// since the last of them (a lower bound), and the emit settles the batch in order.
#[derive(Debug, Clone)]
pub struct FailureRun {
    /// `None`: no limit.
    max: Option<u64>,
    /// Failures in a row before the open batch's first message (all of them when the
    /// batch is empty).
    run: u64,
    /// Per message of the open batch, in order: the failures decoded right before it.
    before: std::collections::VecDeque<u64>,
    /// Failures decoded since the open batch's last message.
    trailing: u64,
}

impl FailureRun {
    /// `max`: the option's value (-1: no limit).
    pub fn new(max: i64) -> Self {
        FailureRun {
            max: u64::try_from(max).ok(),
            run: 0,
            before: Default::default(),
            trailing: 0,
        }
    }

    /// The bound (`None`: no limit).
    pub fn max(&self) -> Option<u64> {
        self.max
    }

    fn over(&self, run: u64) -> Option<u64> {
        self.max.filter(|m| run > *m).map(|_| run)
    }

    /// A message decoded into the open batch: its fate comes with [`Self::emitted`].
    pub fn decoded(&mut self) {
        self.before.push_back(std::mem::take(&mut self.trailing));
    }

    /// A message failed to decode. `Some(run)` when the failures in a row are now over
    /// the bound.
    pub fn decode_failed(&mut self) -> Option<u64> {
        if self.before.is_empty() {
            self.run += 1;
            self.over(self.run)
        } else {
            self.trailing += 1;
            self.over(self.trailing)
        }
    }

    /// The open batch's next message (in decode order) was emitted: its rows went out,
    /// or (`false`) they failed in SQL. `Some(run)` when the failures in a row are over
    /// the bound, counting the decode failures before it (and, for its batch's last
    /// message, after it).
    pub fn emitted(&mut self, went_out: bool) -> Option<u64> {
        let before = self
            .before
            .pop_front()
            .expect("emitted once per decoded message");
        self.run += before;
        if let Some(n) = self.over(self.run) {
            return Some(n);
        }
        if went_out {
            self.run = 0;
        } else {
            self.run += 1;
            if let Some(n) = self.over(self.run) {
                return Some(n);
            }
        }
        if self.before.is_empty() {
            self.run += std::mem::take(&mut self.trailing);
            return self.over(self.run);
        }
        None
    }

    /// Failures in a row so far, as far as they are known.
    pub fn current(&self) -> u64 {
        if self.before.is_empty() {
            self.run
        } else {
            self.trailing
        }
    }
}

/// Whether a status ending a streaming pull is retryable (reopen the stream) or fails
/// the job. NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT and UNAUTHENTICATED mean the
/// configuration is wrong and retrying cannot help. FAILED_PRECONDITION is permanent too:
/// Pub/Sub returns it for a subscription whose topic was deleted or that is detached.
/// Everything else (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, ABORTED, RESOURCE_EXHAUSTED,
/// CANCELLED, UNKNOWN, transport errors, a stream that simply ended) is retried.
pub fn is_retryable(code: Option<Code>) -> bool {
    !matches!(
        code,
        Some(
            Code::NotFound
                | Code::PermissionDenied
                | Code::InvalidArgument
                | Code::Unauthenticated
                | Code::FailedPrecondition
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_message_logging_is_throttled() {
        let logged: Vec<u64> = (1..=300).filter(|n| should_log_bad(*n)).collect();
        assert_eq!(
            logged,
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 32, 64, 128, 256]
        );
    }

    /// `F`: a decode failure, `o`/`x`: a message decoded into the batch whose rows went
    /// out / failed in SQL, `|`: the batch is emitted. Returns the first run over the bound,
    /// and at which event.
    fn run_of(max: i64, events: &str) -> Option<(usize, u64)> {
        let mut r = FailureRun::new(max);
        let mut batch = Vec::new();
        for (i, e) in events.chars().enumerate() {
            let over = match e {
                'F' => r.decode_failed(),
                'o' | 'x' => {
                    r.decoded();
                    batch.push(e == 'o');
                    None
                }
                '|' => batch.drain(..).find_map(|went_out| r.emitted(went_out)),
                _ => unreachable!("{e}"),
            };
            if let Some(n) = over {
                return Some((i, n));
            }
        }
        None
    }

    #[test]
    fn failures_count_in_a_row_in_decode_order() {
        // Decode failures alone: the third one over a bound of 2.
        assert_eq!(run_of(2, "FFF"), Some((2, 3)));
        assert_eq!(run_of(3, "FFF"), None);
        assert_eq!(run_of(-1, &"F".repeat(10_000)), None);
        // A message whose rows went out ends the run, once its batch is emitted.
        assert_eq!(run_of(2, "FFo|FF"), None);
        assert_eq!(run_of(2, "FFo|FFF"), Some((6, 3)));
        // Before the emit, a failure after a decoded message counts only the failures since
        // it (it may yet go out)...
        assert_eq!(run_of(2, "FFoFF"), None);
        assert_eq!(run_of(2, "FFoFFF"), Some((5, 3)));
        // ...and the emit settles the batch in order: rows failed in SQL join the run.
        assert_eq!(run_of(2, "FFxFF|"), Some((5, 3)));
        assert_eq!(run_of(4, "FFxF|"), None);
        assert_eq!(run_of(4, "FFxF|F"), Some((5, 5)));
        assert_eq!(run_of(2, "xxx|"), Some((3, 3)));
        assert_eq!(run_of(2, "xxox|x|"), None);
        assert_eq!(run_of(2, "xxox|xx|"), Some((7, 3)));
        // Interleaved: never more than the bound in a row, however many fail in all.
        assert_eq!(run_of(2, &"FFo|".repeat(1000)), None);
        assert_eq!(run_of(3, &"FxFo|".repeat(1000)), None);
        assert_eq!(run_of(2, "FxFo|"), Some((4, 3)));
        // A run spans batches.
        assert_eq!(run_of(3, "x|x|x|x|"), Some((7, 4)));
    }

    #[test]
    fn policy_maps_to_action() {
        assert_eq!(
            bad_message_action(DeserializationFailurePolicy::Fail),
            BadMessageAction::Fail
        );
        assert_eq!(
            bad_message_action(DeserializationFailurePolicy::Drop),
            BadMessageAction::Drop
        );
        assert_eq!(
            bad_message_action(DeserializationFailurePolicy::Nack),
            BadMessageAction::Nack
        );
        assert_eq!(
            bad_message_action(DeserializationFailurePolicy::DeadLetter),
            BadMessageAction::DeadLetter
        );
    }

    #[test]
    fn default_outstanding_scales_with_interval_and_streams() {
        let s = Duration::from_secs;
        assert_eq!(effective_max_outstanding(Some(5), s(10), 4), 5);
        assert_eq!(effective_max_outstanding(None, s(10), 1), 250_000);
        assert_eq!(effective_max_outstanding(None, s(10), 2), 500_000);
        assert_eq!(effective_max_outstanding(None, s(1), 1), 25_000);
        assert_eq!(
            effective_max_outstanding(None, Duration::from_millis(10), 1),
            1000
        );
    }

    #[test]
    fn permanent_statuses_fail_the_job() {
        for c in [
            Code::NotFound,
            Code::PermissionDenied,
            Code::InvalidArgument,
            Code::Unauthenticated,
            Code::FailedPrecondition,
        ] {
            assert!(!is_retryable(Some(c)), "{c:?}");
        }
        for c in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Internal,
            Code::Aborted,
            Code::ResourceExhausted,
            Code::Cancelled,
            Code::Unknown,
        ] {
            assert!(is_retryable(Some(c)), "{c:?}");
        }
        assert!(is_retryable(None));
    }
}
