//! A sample that leaves the sampled subscription as it was (issue 16): every delivery on
//! a subscription counts towards its dead-letter policy, so the sample is read from a
//! temporary copy instead — a snapshot of the subscription, a new subscription on the same
//! topic seeked to it — and both are deleted afterwards, whatever happened. The sampled
//! subscription is only read (`get`) and snapshotted; no message of it is delivered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pubsub_schema::PubSubProfile;

use crate::client;
use crate::diagnose::{self, Cause, Resource};

/// How the snapshot and the temporary subscription of a sample are named:
/// `pubsub-connector-sample-{unix ms}-{pid}-{n}`, so leftovers are easy to find.
pub const PREFIX: &str = "pubsub-connector-sample-";
/// The temporary subscription expires after this long without use (the shortest
/// expiration Pub/Sub accepts), so one left behind by a crash does not stay.
pub const TEMPORARY_TTL: Duration = Duration::from_secs(24 * 3600);

/// The snapshot and the subscription a sample reads, created by [`Copy::create`] and
/// removed by [`Copy::remove`] (or, if that never ran, by `Drop` in the background).
pub struct Copy {
    profile: PubSubProfile,
    /// Full names, set once created.
    snapshot: Option<String>,
    subscription: Option<String>,
}

impl Copy {
    /// Copies subscription `name` (full name) as it is now. Errors, explaining why no
    /// sample can be taken, when any step is refused; what was created is removed.
    pub async fn create(profile: &PubSubProfile, name: &str) -> anyhow::Result<Copy> {
        let admin = client::subscription_admin(profile).await?;
        let original = diagnose::bounded(admin.get_subscription().set_subscription(name))
            .send()
            .await
            .map_err(|e| diagnose::startup_error(profile, Resource::Subscription(name), &e))?;
        if original.topic == "_deleted-topic_" {
            anyhow::bail!(
                "subscription {name} has no topic any more (it was deleted): nothing to sample"
            );
        }
        let id = unique_id();
        let project = &profile.project;
        let mut copy = Copy {
            profile: profile.clone(),
            snapshot: None,
            subscription: None,
        };
        let snapshot = format!("projects/{project}/snapshots/{id}");
        diagnose::bounded(
            admin
                .create_snapshot()
                .set_name(&snapshot)
                .set_subscription(name),
        )
        .send()
        .await
        .map_err(|e| refused(profile, &format!("creating snapshot {snapshot} of it"), "pubsub.snapshots.create on the project and pubsub.subscriptions.consume on the subscription (roles/pubsub.editor)", name, &e))?;
        copy.snapshot = Some(snapshot.clone());
        let subscription = client::subscription_path(project, &id);
        let ttl = google_cloud_wkt::Duration::clamp(TEMPORARY_TTL.as_secs() as i64, 0);
        diagnose::bounded(
            admin
                .create_subscription()
                .set_name(&subscription)
                .set_topic(&original.topic)
                .set_ack_deadline_seconds(60)
                .set_filter(original.filter.clone())
                .set_expiration_policy(
                    google_cloud_pubsub::model::ExpirationPolicy::new().set_ttl(ttl),
                ),
        )
        .send()
        .await
        .map_err(|e| refused(profile, &format!("creating the temporary subscription {subscription} on its topic {}", original.topic), "pubsub.subscriptions.create on the project and pubsub.topics.attachSubscription on the topic (roles/pubsub.editor)", name, &e))?;
        copy.subscription = Some(subscription.clone());
        diagnose::bounded(
            admin
                .seek()
                .set_subscription(&subscription)
                .set_snapshot(&snapshot),
        )
        .send()
        .await
        .map_err(|e| refused(profile, &format!("seeking the temporary subscription {subscription} to the snapshot"), "pubsub.subscriptions.consume on it and pubsub.snapshots.seek (roles/pubsub.editor)", name, &e))?;
        Ok(copy)
    }

    /// The temporary subscription's id, to read the sample from.
    pub fn subscription_id(&self) -> &str {
        let name = self.subscription.as_deref().unwrap_or_default();
        name.rsplit('/').next().unwrap_or(name)
    }

    /// Deletes the temporary subscription and the snapshot. Returns what could not be
    /// deleted, with the reason (each is found by [`PREFIX`]; the subscription expires
    /// after [`TEMPORARY_TTL`], the snapshot within 7 days).
    pub async fn remove(mut self) -> Vec<String> {
        remove(
            &self.profile,
            self.subscription.take(),
            self.snapshot.take(),
        )
        .await
    }
}

impl Drop for Copy {
    /// A sample abandoned half-way (timeout, panic): removal goes on in the background.
    fn drop(&mut self) {
        let (subscription, snapshot) = (self.subscription.take(), self.snapshot.take());
        if subscription.is_none() && snapshot.is_none() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let profile = self.profile.clone();
            rt.spawn(async move {
                for left in remove(&profile, subscription, snapshot).await {
                    tracing::warn!("{left}");
                }
            });
        }
    }
}

async fn remove(
    profile: &PubSubProfile,
    subscription: Option<String>,
    snapshot: Option<String>,
) -> Vec<String> {
    let mut left = Vec::new();
    let admin = match client::subscription_admin(profile).await {
        Ok(a) => a,
        Err(e) => {
            left.extend(
                subscription
                    .iter()
                    .chain(snapshot.iter())
                    .map(|n| format!("could not delete {n}: {e:#}")),
            );
            return left;
        }
    };
    if let Some(s) = subscription {
        let r = diagnose::bounded(admin.delete_subscription().set_subscription(&s))
            .send()
            .await;
        if let Some(e) = r.err().filter(|e| diagnose::cause(e) != Cause::NotFound) {
            left.push(format!(
                "could not delete the temporary subscription {s}: {e} (it expires after 1 day unused)"
            ));
        }
    }
    if let Some(s) = snapshot {
        let r = diagnose::bounded(admin.delete_snapshot().set_snapshot(&s))
            .send()
            .await;
        if let Some(e) = r.err().filter(|e| diagnose::cause(e) != Cause::NotFound) {
            left.push(format!(
                "could not delete the snapshot {s}: {e} (Pub/Sub deletes it within 7 days)"
            ));
        }
    }
    left
}

/// Why no sample can be taken: the step that was refused and, for a missing permission,
/// which one. The sampled subscription was not read.
fn refused(
    profile: &PubSubProfile,
    step: &str,
    permission: &str,
    name: &str,
    e: &google_cloud_pubsub::Error,
) -> anyhow::Error {
    let endpoint = diagnose::endpoint(profile);
    let why = match diagnose::cause(e) {
        Cause::PermissionDenied => {
            format!("permission denied at {endpoint}; the credentials need {permission}")
        }
        _ => format!("{e} (at {endpoint})"),
    };
    anyhow::anyhow!(
        "cannot sample subscription {name} without changing it: {step} failed: {why}. The sample is read from a copy so that no delivery counts towards the subscription's dead-letter policy; nothing was read from the subscription itself"
    )
}

fn unique_id() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!(
        "{PREFIX}{ms}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
