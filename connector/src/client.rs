//! Builds `google-cloud-pubsub` clients for a profile. The crate ignores
//! `PUBSUB_EMULATOR_HOST`, so an emulator endpoint and anonymous credentials are passed
//! explicitly.

use google_cloud_pubsub::client::{Publisher, Subscriber, SubscriptionAdmin, TopicAdmin};
use pubsub_schema::{Authentication, PubSubProfile};

/// `projects/{project}/subscriptions/{id}`.
pub fn subscription_path(project: &str, id: &str) -> String {
    format!("projects/{project}/subscriptions/{id}")
}

/// `projects/{project}/topics/{id}`.
pub fn topic_path(project: &str, id: &str) -> String {
    format!("projects/{project}/topics/{id}")
}

fn emulator(
    profile: &PubSubProfile,
) -> Option<(String, google_cloud_auth::credentials::Credentials)> {
    match &profile.authentication {
        Authentication::Emulator { endpoint } => Some((
            format!("http://{endpoint}"),
            google_cloud_auth::credentials::anonymous::Builder::new().build(),
        )),
        Authentication::ApplicationDefault | Authentication::ServiceAccountKeyFile { .. } => None,
    }
}

/// A StreamingPull client. Errors when credentials cannot be loaded.
pub async fn subscriber(profile: &PubSubProfile) -> anyhow::Result<Subscriber> {
    let mut b = Subscriber::builder();
    if let Some((endpoint, creds)) = emulator(profile) {
        b = b.with_endpoint(endpoint).with_credentials(creds);
    }
    b.build()
        .await
        .map_err(|e| crate::diagnose::client_build_error(profile, e))
}

/// A batching publisher builder for `topic` (a full resource name).
pub fn publisher(
    profile: &PubSubProfile,
    topic: &str,
) -> google_cloud_pubsub::builder::publisher::PublisherBuilder {
    let mut b = Publisher::builder(topic.to_string());
    if let Some((endpoint, creds)) = emulator(profile) {
        b = b.with_endpoint(endpoint).with_credentials(creds);
    }
    b
}

/// The topic admin client.
pub async fn topic_admin(profile: &PubSubProfile) -> anyhow::Result<TopicAdmin> {
    let mut b = TopicAdmin::builder();
    if let Some((endpoint, creds)) = emulator(profile) {
        b = b.with_endpoint(endpoint).with_credentials(creds);
    }
    b.build()
        .await
        .map_err(|e| crate::diagnose::client_build_error(profile, e))
}

/// The subscription admin client.
pub async fn subscription_admin(profile: &PubSubProfile) -> anyhow::Result<SubscriptionAdmin> {
    let mut b = SubscriptionAdmin::builder();
    if let Some((endpoint, creds)) = emulator(profile) {
        b = b.with_endpoint(endpoint).with_credentials(creds);
    }
    b.build()
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
