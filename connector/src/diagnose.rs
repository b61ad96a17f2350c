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

/// How a key-file profile is named in messages: by its option, never by its path.
pub const KEY_FILE: &str = "the service account key file set by 'service-account-key-file'";

/// The endpoint a profile talks to and, for the real service, with which credentials, for
/// error messages. Never the key file's path.
pub fn endpoint(profile: &PubSubProfile) -> String {
    match &profile.authentication {
        Authentication::Emulator { endpoint } => format!("emulator endpoint {endpoint}"),
        Authentication::ApplicationDefault => {
            "https://pubsub.googleapis.com (application default credentials)".to_string()
        }
        Authentication::ServiceAccountKeyFile { .. } => {
            format!("https://pubsub.googleapis.com ({KEY_FILE})")
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
const KEY_FILE_HINT: &str = "check that the key in the service account key file set by 'service-account-key-file' is current (not deleted or disabled in IAM) and that the machine running the job can reach oauth2.googleapis.com";

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
        Cause::Authentication => match &profile.authentication {
            // The library's credential errors are not passed on for a key file: the key was
            // checked when it was loaded, but the text of a token error is not ours to vet.
            Authentication::ServiceAccountKeyFile { .. } => anyhow::anyhow!(
                "authentication to Pub/Sub at {endpoint} failed while reading {what}: {}; {KEY_FILE_HINT}",
                key_file_auth_failure(e)
            ),
            _ => anyhow::anyhow!(
                "authentication to Pub/Sub at {endpoint} failed while reading {what}: {e}; {CREDENTIALS_HINT}"
            ),
        },
        Cause::NotFound => anyhow::anyhow!(
            "{what} does not exist (NOT_FOUND at {endpoint}): {}",
            resource.create_fix()
        ),
        Cause::PermissionDenied => anyhow::anyhow!(
            "permission denied on {what} at {endpoint}: the credentials need {}",
            resource.permission()
        ),
        Cause::Other => anyhow::anyhow!("cannot read {what} at {endpoint}: {e}"),
    }
}

/// What went wrong authenticating with a key file: Pub/Sub's own status when it answered
/// (the server only ever sees a token, never the file), else a category of the token
/// failure; the auth library's text is not passed on.
fn key_file_auth_failure(e: &google_cloud_pubsub::Error) -> String {
    if let Some(s) = e.status() {
        return format!(
            "Pub/Sub refused the credentials ({:?}: {})",
            s.code, s.message
        );
    }
    let credentials = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<google_cloud_gax::error::CredentialsError>());
    match credentials {
        Some(c) if c.is_transient() => {
            "no access token could be obtained with it (the token request failed in a way that may pass: network or token service)".to_string()
        }
        Some(_) => "no access token could be obtained with it (the token service refused it)".to_string(),
        None => "no access token could be obtained with it".to_string(),
    }
}

/// The error for a client that could not be built (typically no credentials found). A key
/// file problem comes earlier, from [`crate::credentials::access`]; by the time a client is
/// built the key is loaded, so `e` concerns the client, not the file.
pub fn client_build_error(profile: &PubSubProfile, e: impl std::fmt::Display) -> anyhow::Error {
    match &profile.authentication {
        Authentication::ApplicationDefault => {
            anyhow::anyhow!("cannot create a Pub/Sub client: {e}; {CREDENTIALS_HINT}")
        }
        Authentication::Emulator { endpoint } => {
            anyhow::anyhow!("cannot create a Pub/Sub client for emulator endpoint {endpoint}: {e}")
        }
        Authentication::ServiceAccountKeyFile { .. } => {
            anyhow::anyhow!("cannot create a Pub/Sub client with {KEY_FILE}: {e}")
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

    #[test]
    fn a_key_file_is_named_by_its_option_never_by_its_path() {
        let p = PubSubProfile {
            project: "p".into(),
            authentication: Authentication::ServiceAccountKeyFile {
                path: "/secret/dir-5e1f/key.json".into(),
            },
        };
        let sub = Resource::Subscription("projects/p/subscriptions/s");
        for code in [
            Code::Unauthenticated,
            Code::Unavailable,
            Code::NotFound,
            Code::PermissionDenied,
            Code::Internal,
        ] {
            let e = startup_error(&p, sub, &status(code)).to_string();
            assert!(e.contains(KEY_FILE) && !e.contains("5e1f"), "{e}");
        }
        let e = startup_error(&p, sub, &status(Code::Unauthenticated)).to_string();
        assert!(
            e.contains("Pub/Sub refused the credentials")
                && !e.contains("GOOGLE_APPLICATION_CREDENTIALS"),
            "{e}"
        );
        let e = client_build_error(&p, "tls").to_string();
        assert!(e.contains(KEY_FILE) && !e.contains("5e1f"), "{e}");
    }
}
