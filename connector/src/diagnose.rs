//! Start-up checks of source and sink: one bounded admin call (the source's
//! `get_subscription`, the sink's `get_topic`) whose failure is classified into a message
//! naming the cause and the fix (issue "never silently wrong": fail fast, name the cause).
//! Never prints credentials, key contents or tokens.

use std::time::Duration;

use google_cloud_gax::error::rpc::Code;
use google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder;
use google_cloud_gax::options::RequestOptionsBuilder;
use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt};
use pubsub_schema::{Authentication, PubSubProfile};

/// Each start-up attempt gives up after this.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Start-up attempts in total (transient failures only; AIP-194 strict rules).
pub const ATTEMPTS: u32 = 3;

/// Bounds a start-up request: at most [`ATTEMPTS`] attempts of [`ATTEMPT_TIMEOUT`] each,
/// 200 ms..1 s apart, so a dead endpoint fails within ~17 s instead of the client's
/// default of about a minute.
pub fn bounded<R: RequestOptionsBuilder>(r: R) -> R {
    r.with_attempt_timeout(ATTEMPT_TIMEOUT)
        .with_retry_policy(Aip194Strict.with_attempt_limit(ATTEMPTS))
        .with_backoff_policy(
            ExponentialBackoffBuilder::new()
                .with_initial_delay(Duration::from_millis(200))
                .with_maximum_delay(Duration::from_secs(1))
                .build()
                .expect("valid backoff"),
        )
}

/// The endpoint a profile talks to, for error messages.
pub fn endpoint(profile: &PubSubProfile) -> String {
    match &profile.authentication {
        Authentication::Emulator { endpoint } => format!("emulator endpoint {endpoint}"),
        Authentication::ApplicationDefault | Authentication::ServiceAccountKeyFile { .. } => {
            "https://pubsub.googleapis.com".to_string()
        }
    }
}

/// What a start-up check was looking at.
#[derive(Debug, Clone, Copy)]
pub enum Resource<'a> {
    /// A full subscription name.
    Subscription(&'a str),
    /// A full topic name.
    Topic(&'a str),
}

impl Resource<'_> {
    fn describe(&self) -> String {
        match self {
            Resource::Subscription(s) => format!("subscription {s}"),
            Resource::Topic(t) => format!("topic {t}"),
        }
    }
    fn permission(&self) -> &'static str {
        match self {
            Resource::Subscription(_) => "pubsub.subscriptions.get and pubsub.subscriptions.consume (roles/pubsub.subscriber plus roles/pubsub.viewer, or roles/pubsub.editor)",
            Resource::Topic(_) => "pubsub.topics.get and pubsub.topics.publish (roles/pubsub.publisher plus roles/pubsub.viewer, or roles/pubsub.editor)",
        }
    }
    fn create_fix(&self) -> String {
        match self {
            Resource::Subscription(s) => format!(
                "create it first (gcloud pubsub subscriptions create {} --topic=TOPIC) or fix option 'subscription'",
                s.rsplit('/').next().unwrap_or(s)
            ),
            Resource::Topic(t) => format!(
                "create it first (gcloud pubsub topics create {}) or fix option 'topic'",
                t.rsplit('/').next().unwrap_or(t)
            ),
        }
    }
}

const CREDENTIALS_HINT: &str = "check the application default credentials: set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, or run 'gcloud auth application-default login'";

/// The coarse cause of a failed client call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Unreachable,
    Authentication,
    NotFound,
    PermissionDenied,
    Other,
}

/// Classifies a client error.
pub fn cause(e: &google_cloud_pubsub::Error) -> Cause {
    if let Some(s) = e.status() {
        return match s.code {
            Code::NotFound => Cause::NotFound,
            Code::PermissionDenied => Cause::PermissionDenied,
            Code::Unauthenticated => Cause::Authentication,
            Code::Unavailable | Code::DeadlineExceeded => Cause::Unreachable,
            _ => Cause::Other,
        };
    }
    if e.is_authentication() {
        Cause::Authentication
    } else if e.is_timeout() || e.is_connect() || e.is_io() || e.is_transport() {
        Cause::Unreachable
    } else {
        Cause::Other
    }
}

/// The start-up error for a failed check of `resource`, naming the cause and the fix.
pub fn startup_error(
    profile: &PubSubProfile,
    resource: Resource<'_>,
    e: &google_cloud_pubsub::Error,
) -> anyhow::Error {
    let what = resource.describe();
    let endpoint = endpoint(profile);
    match cause(e) {
        Cause::Unreachable => anyhow::anyhow!(
            "cannot reach Pub/Sub at {endpoint} to read {what}: {e} (is the endpoint up and reachable? gave up after {ATTEMPTS} attempts, each bounded by {ATTEMPT_TIMEOUT:?})"
        ),
        Cause::Authentication => anyhow::anyhow!(
            "authentication to Pub/Sub at {endpoint} failed while reading {what}: {e}; {CREDENTIALS_HINT}"
        ),
        Cause::NotFound => anyhow::anyhow!(
            "{what} does not exist (NOT_FOUND at {endpoint}): {}",
            resource.create_fix()
        ),
        Cause::PermissionDenied => anyhow::anyhow!(
            "permission denied on {what}: the credentials need {}",
            resource.permission()
        ),
        Cause::Other => anyhow::anyhow!("cannot read {what} at {endpoint}: {e}"),
    }
}

/// The error for a client that could not be built (typically no credentials found).
pub fn client_build_error(profile: &PubSubProfile, e: impl std::fmt::Display) -> anyhow::Error {
    match &profile.authentication {
        Authentication::ApplicationDefault => {
            anyhow::anyhow!("cannot create a Pub/Sub client: {e}; {CREDENTIALS_HINT}")
        }
        Authentication::Emulator { endpoint } => {
            anyhow::anyhow!("cannot create a Pub/Sub client for emulator endpoint {endpoint}: {e}")
        }
        Authentication::ServiceAccountKeyFile { .. } => {
            anyhow::anyhow!("cannot create a Pub/Sub client from option 'service-account-key-file'")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_gax::error::rpc::Status;

    fn status(code: Code) -> google_cloud_pubsub::Error {
        google_cloud_pubsub::Error::service(Status::default().set_code(code).set_message("x"))
    }

    #[test]
    fn statuses_name_cause_and_fix() {
        let p = crate::client::emulator_profile("p", "127.0.0.1:1");
        let sub = Resource::Subscription("projects/p/subscriptions/s");
        let e = startup_error(&p, sub, &status(Code::NotFound)).to_string();
        assert!(
            e.contains("projects/p/subscriptions/s") && e.contains("create it first"),
            "{e}"
        );
        let e = startup_error(&p, sub, &status(Code::PermissionDenied)).to_string();
        assert!(e.contains("pubsub.subscriptions.consume"), "{e}");
        let e = startup_error(
            &p,
            Resource::Topic("projects/p/topics/t"),
            &status(Code::Unauthenticated),
        )
        .to_string();
        assert!(e.contains("GOOGLE_APPLICATION_CREDENTIALS"), "{e}");
        let e = startup_error(&p, sub, &status(Code::Unavailable)).to_string();
        assert!(e.contains("127.0.0.1:1"), "{e}");
    }
}
