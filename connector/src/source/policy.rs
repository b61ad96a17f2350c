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
