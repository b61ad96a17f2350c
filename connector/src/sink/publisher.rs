//! Builds the client's batching publishers from the publisher options: thresholds, the
//! retry policy (RPC timeouts included) and its backoff.

use std::time::Duration;

use google_cloud_gax::error::Error;
use google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder;
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
    let mut b = client::publisher(profile, topic)?
        .set_message_count_threshold(if solo {
            1
        } else {
            c.batching_element_count_threshold
        })
        .set_byte_threshold(c.batching_request_byte_threshold)
        .set_delay_threshold(Duration::from_millis(c.batching_delay_threshold_ms))
        .with_retry_policy(retry_policy(&c.retry, c.message_ordering));
    let r = &c.retry;
    if r.initial_delay_ms.is_some() || r.max_delay_ms.is_some() || r.delay_multiplier.is_some() {
        let mut backoff = ExponentialBackoffBuilder::new();
        if let Some(ms) = r.initial_delay_ms {
            backoff = backoff.with_initial_delay(Duration::from_millis(ms));
        }
        if let Some(ms) = r.max_delay_ms {
            backoff = backoff.with_maximum_delay(Duration::from_millis(ms));
        }
        if let Some(f) = r.delay_multiplier {
            backoff = backoff.with_scaling(f);
        }
        let backoff = backoff.build().map_err(|e| {
            anyhow::anyhow!("the sink's retry backoff options are inconsistent: {e}")
        })?;
        b = b.with_backoff_policy(backoff);
    }
    Ok(b.build().await?)
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
