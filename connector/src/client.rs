//! Builds `google-cloud-pubsub` clients for a profile. Endpoint and credentials come from
//! [`crate::credentials::access`] (emulator: explicit endpoint and anonymous credentials,
//! as the crate ignores `PUBSUB_EMULATOR_HOST`; key file: read when the client is built;
//! otherwise application default credentials).

use google_cloud_pubsub::client::{
    Publisher, SchemaService, Subscriber, SubscriptionAdmin, TopicAdmin,
};
use pubsub_schema::{Authentication, PubSubProfile};

/// `projects/{project}/subscriptions/{id}`.
pub fn subscription_path(project: &str, id: &str) -> String {
    format!("projects/{project}/subscriptions/{id}")
}

/// `projects/{project}/topics/{id}`.
pub fn topic_path(project: &str, id: &str) -> String {
    format!("projects/{project}/topics/{id}")
}

/// Applies the profile's endpoint override and credentials to a client builder (the four
/// builders share the two methods but no trait). A key file that cannot be used fails here,
/// with a message that names the option and never the path or the file's content; a
/// [`pubsub_engine_spi::PermanentError`] unless the file could not be read for a cause that
/// may pass ([`crate::credentials::KeyFileError::Unreadable`]).
macro_rules! configured {
    ($builder:expr, $profile:expr) => {{
        let access = crate::credentials::access($profile).map_err(|e| {
            let permanent = !matches!(e, crate::credentials::KeyFileError::Unreadable(_));
            let e = anyhow::Error::new(e);
            if permanent {
                pubsub_engine_spi::PermanentError::wrap(e)
            } else {
                e
            }
        })?;
        let mut b = $builder;
        if let Some(endpoint) = access.endpoint {
            b = b.with_endpoint(endpoint);
        }
        if let Some(credentials) = access.credentials {
            b = b.with_credentials(credentials);
        }
        b
    }};
}

/// A StreamingPull client. Errors when credentials cannot be loaded.
pub async fn subscriber(profile: &PubSubProfile) -> anyhow::Result<Subscriber> {
    configured!(Subscriber::builder(), profile)
        .build()
        .await
        .map_err(|e| crate::diagnose::client_build_error(profile, e))
}

/// A batching publisher builder for `topic` (a full resource name), retrying on
/// [`publish_backoff`] without the client's retry throttler (see
/// [`PUBLISH_RETRY_MAX_DELAY`]). Errors when a key file cannot be used.
pub fn publisher(
    profile: &PubSubProfile,
    topic: &str,
) -> anyhow::Result<google_cloud_pubsub::builder::publisher::PublisherBuilder> {
    Ok(configured!(Publisher::builder(topic.to_string()), profile)
        .with_backoff_policy(publish_backoff(None, None, None)?)
        .with_retry_throttler(NeverThrottle))
}

/// The longest wait between two attempts of one publish request (unless
/// `sink.retry.max-delay` sets another for a sink): what bounds how soon a publisher
/// writes again once its endpoint is back, at most this plus one attempt after it
/// returned (decision 0032).
///
/// The client's own schedule is 100 ms growing 4x per attempt to 60 s, each wait drawn
/// uniformly below that (full jitter): after an outage of 45 s every request in flight
/// waited up to 60 s more, each on its own draw, so a sink resumed in steps 10 to 20 s
/// apart and needed 33 s to write what it held (issue 31). 2 s keeps the retries of an
/// outage at one per request in flight per second on average (the waits are drawn below
/// it), and a sink bounds the requests it has in flight (`sink.in-flight.*`).
pub const PUBLISH_RETRY_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(2);
/// The first wait between attempts of a publish request (the client's own).
pub const PUBLISH_RETRY_INITIAL_DELAY: std::time::Duration = std::time::Duration::from_millis(100);
/// The factor between successive waits (the client's own).
pub const PUBLISH_RETRY_MULTIPLIER: f64 = 4.0;

/// The backoff between attempts of a publish request: `initial` (default
/// [`PUBLISH_RETRY_INITIAL_DELAY`]) growing by `multiplier` (default
/// [`PUBLISH_RETRY_MULTIPLIER`]) up to `max` (default [`PUBLISH_RETRY_MAX_DELAY`], or
/// `initial` if that is longer), each wait drawn uniformly below it. Errors when the
/// values given are inconsistent (the sink's builder refuses those first).
pub fn publish_backoff(
    initial: Option<std::time::Duration>,
    max: Option<std::time::Duration>,
    multiplier: Option<f64>,
) -> anyhow::Result<google_cloud_gax::exponential_backoff::ExponentialBackoff> {
    let initial = initial.unwrap_or(PUBLISH_RETRY_INITIAL_DELAY);
    let max = max.unwrap_or(PUBLISH_RETRY_MAX_DELAY.max(initial));
    google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder::new()
        .with_initial_delay(initial)
        .with_maximum_delay(max)
        .with_scaling(multiplier.unwrap_or(PUBLISH_RETRY_MULTIPLIER))
        .build()
        .map_err(|e| anyhow::anyhow!("the publish retry backoff is inconsistent: {e}"))
}

/// A retry throttler that never skips a retry. The client's default (adaptive
/// throttling) counts every attempt since the publisher was built, with no time window,
/// and skips each retry with probability (attempts − 2 × successes) / (attempts + 1):
/// after an outage nearly every retry is skipped, and each skip waits another backoff,
/// until successes catch up, so the resume time had no bound a sink could state.
/// Publishers here bound their own load instead (a sink's in-flight caps,
/// [`PUBLISH_RETRY_MAX_DELAY`] between attempts).
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverThrottle;

impl google_cloud_gax::retry_throttler::RetryThrottler for NeverThrottle {
    fn throttle_retry_attempt(&self) -> bool {
        false
    }
    fn on_retry_failure(&mut self, _flow: &google_cloud_gax::retry_result::RetryResult) {}
    fn on_success(&mut self) {}
}

/// The topic admin client.
pub async fn topic_admin(profile: &PubSubProfile) -> anyhow::Result<TopicAdmin> {
    configured!(TopicAdmin::builder(), profile)
        .build()
        .await
        .map_err(|e| crate::diagnose::client_build_error(profile, e))
}

/// The subscription admin client.
pub async fn subscription_admin(profile: &PubSubProfile) -> anyhow::Result<SubscriptionAdmin> {
    configured!(SubscriptionAdmin::builder(), profile)
        .build()
        .await
        .map_err(|e| crate::diagnose::client_build_error(profile, e))
}

/// The schema service client (format `avro`).
pub async fn schema_service(profile: &PubSubProfile) -> anyhow::Result<SchemaService> {
    configured!(SchemaService::builder(), profile)
        .build()
        .await
        .map_err(|e| crate::diagnose::client_build_error(profile, e))
}

/// A profile for a local emulator.
pub fn emulator_profile(project: &str, endpoint: &str) -> PubSubProfile {
    PubSubProfile {
        project: project.to_string(),
        authentication: Authentication::Emulator {
            endpoint: endpoint.to_string(),
        },
    }
}
