//! Builds the client's batching publishers from the publisher options: thresholds, the
//! retry policy (RPC timeouts included) and its backoff, bounded by
//! [`crate::client::PUBLISH_RETRY_MAX_DELAY`] unless `sink.retry.max-delay` sets another.

use std::time::Duration;

use google_cloud_gax::backoff_policy::BackoffPolicy;
use google_cloud_gax::error::Error;
use google_cloud_gax::exponential_backoff::ExponentialBackoff;
use google_cloud_gax::retry_policy::{RetryPolicy, RetryPolicyArg, RetryPolicyExt};
use google_cloud_gax::retry_result::RetryResult;
use google_cloud_gax::retry_state::RetryState;
use google_cloud_gax::throttle_result::ThrottleResult;
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::retry_policy::RetryableErrors;
use pubsub_schema::{PubSubProfile, PublisherConfig, RetryConfig};

use crate::client;

/// The main publisher (batching by the options) and, when `solo`, one that sends every
/// message in a request of its own (to find which message of a refused request is bad).
pub async fn build(
    profile: &PubSubProfile,
    topic: &str,
    c: &PublisherConfig,
    solo: bool,
) -> anyhow::Result<Publisher> {
    let b = client::publisher(profile, topic)?
        .set_message_count_threshold(if solo {
            1
        } else {
            c.batching_element_count_threshold
        })
        .set_byte_threshold(c.batching_request_byte_threshold)
        .set_delay_threshold(Duration::from_millis(c.batching_delay_threshold_ms))
        .with_retry_policy(retry_policy(&c.retry, c.message_ordering))
        .with_backoff_policy(Traced {
            inner: backoff(&c.retry)?,
            topic: topic.to_string(),
        });
    Ok(b.build().await?)
}

/// The sink's backoff: [`client::publish_backoff`] with the `sink.retry.*` values set.
fn backoff(r: &RetryConfig) -> anyhow::Result<ExponentialBackoff> {
    client::publish_backoff(
        r.initial_delay_ms.map(Duration::from_millis),
        r.max_delay_ms.map(Duration::from_millis),
        r.delay_multiplier,
    )
    .map_err(|e| anyhow::anyhow!("the sink's retry backoff options are inconsistent: {e}"))
}

/// The backoff, logging each retry the client schedules at DEBUG (`RUST_LOG=
/// pubsub_connector_core::sink::publisher=debug`): which attempt of a request to which
/// topic failed and how long the client waits before the next. The client retries
/// inside a publish and tells the caller nothing until the request's retries end.
#[derive(Debug)]
struct Traced {
    inner: ExponentialBackoff,
    topic: String,
}

impl BackoffPolicy for Traced {
    fn on_failure(&self, state: &RetryState) -> Duration {
        let delay = self.inner.on_failure(state);
        tracing::debug!(
            topic = %self.topic,
            attempt = state.attempt_count,
            delay_ms = delay.as_millis() as u64,
            "publish attempt {} to {} failed; the next attempt, if the error is retryable, waits {delay:?}",
            state.attempt_count,
            self.topic
        );
        delay
    }
}

/// Pub/Sub's retryable codes, for the total timeout (default 600 s, the client's) and
/// the attempts given; with ordering, without a cap (the publish progress timeout bounds
/// it). RPC timeouts cap each attempt.
fn retry_policy(r: &RetryConfig, ordering: bool) -> RetryPolicyArg {
    let timeouts = RpcTimeouts {
        initial: r.initial_rpc_timeout_ms.map(Duration::from_millis),
        multiplier: r.rpc_timeout_multiplier.unwrap_or(1.0),
        max: r.max_rpc_timeout_ms.map(Duration::from_millis),
    };
    if ordering {
        return timeouts.wrap(RetryableErrors);
    }
    let total = Duration::from_millis(r.total_timeout_ms.unwrap_or(600_000));
    match r.max_attempts {
        Some(n) => timeouts.wrap(RetryableErrors.with_time_limit(total).with_attempt_limit(n)),
        None => timeouts.wrap(RetryableErrors.with_time_limit(total)),
    }
}

/// Per-attempt timeouts: the first `initial`, each next one `multiplier` times longer,
/// at most `max` (and never past the policy's own remaining time).
#[derive(Debug, Clone, Copy)]
struct RpcTimeouts {
    initial: Option<Duration>,
    multiplier: f64,
    max: Option<Duration>,
}

impl RpcTimeouts {
    fn wrap<P: RetryPolicy + 'static>(self, inner: P) -> RetryPolicyArg {
        if self.initial.is_none() && self.max.is_none() {
            return inner.into();
        }
        WithRpcTimeouts {
            inner,
            timeouts: self,
        }
        .into()
    }

    /// The timeout of attempt `n` (0-based).
    fn attempt(&self, n: u32) -> Option<Duration> {
        let base = self.initial.or(self.max)?;
        let scaled = base.mul_f64(self.multiplier.powi(n.min(64) as i32));
        Some(match self.max {
            Some(max) => scaled.min(max),
            None => scaled,
        })
    }
}

#[derive(Debug)]
struct WithRpcTimeouts<P> {
    inner: P,
    timeouts: RpcTimeouts,
}

impl<P: RetryPolicy> RetryPolicy for WithRpcTimeouts<P> {
    fn on_error(&self, state: &RetryState, error: Error) -> RetryResult {
        self.inner.on_error(state, error)
    }

    fn on_throttle(&self, state: &RetryState, error: Error) -> ThrottleResult {
        self.inner.on_throttle(state, error)
    }

    fn remaining_time(&self, state: &RetryState) -> Option<Duration> {
        let attempt = self.timeouts.attempt(state.attempt_count);
        match (self.inner.remaining_time(state), attempt) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_gax::retry_throttler::{AdaptiveThrottler, RetryThrottler};

    /// The longest of `draws` waits before attempt `attempt + 1` (jitter is random).
    fn longest_wait(b: &impl BackoffPolicy, attempt: u32, draws: usize) -> Duration {
        let state = RetryState::new(true).set_attempt_count(attempt);
        (0..draws).map(|_| b.on_failure(&state)).max().unwrap()
    }

    #[test]
    fn every_wait_between_attempts_is_within_the_resume_bound_unless_an_option_sets_another() {
        let b = backoff(&RetryConfig::default()).unwrap();
        for attempt in 1..=64 {
            let w = longest_wait(&b, attempt, 200);
            assert!(
                w <= client::PUBLISH_RETRY_MAX_DELAY,
                "attempt {attempt}: {w:?}"
            );
        }
        // The waits grow from the first: 100 ms, then 400 ms, at most.
        assert!(longest_wait(&b, 1, 200) <= Duration::from_millis(100));
        assert!(longest_wait(&b, 2, 200) <= Duration::from_millis(400));
        // An initial delay above the bound raises the cap to it instead of failing.
        let r = RetryConfig {
            initial_delay_ms: Some(5_000),
            ..RetryConfig::default()
        };
        let w = longest_wait(&backoff(&r).unwrap(), 30, 200);
        assert!(w <= Duration::from_secs(5), "{w:?}");
        // 'sink.retry.max-delay' is the bound when set.
        let r = RetryConfig {
            max_delay_ms: Some(60_000),
            ..RetryConfig::default()
        };
        let w = longest_wait(&backoff(&r).unwrap(), 30, 200);
        assert!(w > client::PUBLISH_RETRY_MAX_DELAY, "{w:?}");
        assert!(w <= Duration::from_secs(60), "{w:?}");
    }

    /// The cause behind the slow resume (issue 31), measured on the client's default
    /// throttler: after 100 failed attempts and no success (an outage), it skips nearly
    /// every retry (probability 100/101), and a skipped retry waits another backoff.
    /// Publishers here never skip one.
    #[test]
    fn after_an_outage_the_clients_throttler_skips_nearly_every_retry_and_ours_none() {
        let failed = RetryResult::Continue(Error::io("connection refused"));
        let mut theirs = AdaptiveThrottler::default();
        let mut ours = client::NeverThrottle;
        for _ in 0..100 {
            theirs.on_retry_failure(&failed);
            ours.on_retry_failure(&failed);
        }
        let skipped = (0..1000)
            .filter(|_| theirs.throttle_retry_attempt())
            .count();
        assert!(skipped > 900, "{skipped} of 1000 retries skipped");
        assert!((0..1000).all(|_| !ours.throttle_retry_attempt()));
    }

    #[test]
    fn rpc_timeouts_grow_by_the_multiplier_up_to_the_max() {
        let t = RpcTimeouts {
            initial: Some(Duration::from_secs(5)),
            multiplier: 2.0,
            max: Some(Duration::from_secs(30)),
        };
        assert_eq!(t.attempt(0), Some(Duration::from_secs(5)));
        assert_eq!(t.attempt(1), Some(Duration::from_secs(10)));
        assert_eq!(t.attempt(3), Some(Duration::from_secs(30)));
        let none = RpcTimeouts {
            initial: None,
            multiplier: 1.0,
            max: None,
        };
        assert_eq!(none.attempt(2), None);
    }
}
