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
/// [`pubsub_engine::PermanentError`] unless the file could not be read for a cause that
/// may pass ([`crate::credentials::KeyFileError::Unreadable`]).
macro_rules! configured {
    ($builder:expr, $profile:expr) => {{
        let access = crate::credentials::access($profile).map_err(|e| {
            let permanent = !matches!(e, crate::credentials::KeyFileError::Unreadable(_));
            let e = anyhow::Error::new(e);
            if permanent {
                pubsub_engine::PermanentError::wrap(e)
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

/// A batching publisher builder for `topic` (a full resource name). Errors when a key file
/// cannot be used.
pub fn publisher(
    profile: &PubSubProfile,
    topic: &str,
) -> anyhow::Result<google_cloud_pubsub::builder::publisher::PublisherBuilder> {
    Ok(configured!(Publisher::builder(topic.to_string()), profile))
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
