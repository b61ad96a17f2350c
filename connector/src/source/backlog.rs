//! The backlog probe (issue 44; decision 0047): the publish time of a subscription's
//! oldest unacknowledged message, read from the public API. A snapshot expires 7 days
//! after its creation **less the age of the subscription's oldest unacked message**
//! (Pub/Sub's Snapshot resource), so `expire_time - 7 days` is that message's publish time
//! (or the creation time when nothing is unacked), by the service's own clock. The probe
//! creates a snapshot, reads `expire_time` and deletes the snapshot.
//!
//! One subtask per subscription probes (the owner of the subscription's first split); its
//! result reaches every split of the job through a shared bound (the leader broadcasts it
//! to the other processes). Snapshots are named `pubsub-connector-probe-{hash}-{unix ms}-
//! {pid}-{n}` (`hash`: the subscription's full name, so that every probe of one
//! subscription shares a prefix however long its id), and a probe's owner deletes what an
//! earlier crashed run left of its prefix when it starts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use google_cloud_pubsub::client::SubscriptionAdmin;

use crate::diagnose::{self, Cause};

/// Every probe snapshot's name starts with this.
pub const PREFIX: &str = "pubsub-connector-probe-";

/// A snapshot lives at most this long (Pub/Sub's Snapshot resource: 7 days less the age of
/// the oldest unacked message).
pub const SNAPSHOT_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// Taken off every reading so that the bound errs early: the service does not document
/// the resolution of `expire_time` (the emulator's is milliseconds), nor how long a
/// message published just before the snapshot takes to be part of it.
pub const RESOLUTION_MARGIN: Duration = Duration::from_secs(1);

/// A probe snapshot whose name says it was created longer ago than this was left by a
/// run that crashed between creating and deleting it (a probe takes two admin calls).
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// The permission a probe needs, for the WARN that says it is missing.
pub const PERMISSION: &str =
    "pubsub.snapshots.create, pubsub.snapshots.delete and pubsub.snapshots.list on the project (roles/pubsub.editor)";

/// Why a probe gave no reading, or its snapshot could not be deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    /// The credentials may not create (or delete) snapshots: the probe cannot work in
    /// this job.
    NotPermitted(String),
    /// Any other failure (unreachable, refused because the backlog is close to 7 days
    /// old, a malformed answer): the reading is unknown this time.
    Failed(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::NotPermitted(e) => write!(f, "not permitted: {e}"),
            ProbeError::Failed(e) => f.write_str(e),
        }
    }
}

/// The name prefix of subscription `subscription`'s probe snapshots (full name).
pub fn snapshot_prefix(subscription: &str) -> String {
    let hash = blake3::hash(subscription.as_bytes());
    format!("{PREFIX}{}-", &hash.to_hex()[..16])
}

/// A new probe snapshot's full name in `project`, created at `unix_ms`.
pub fn snapshot_name(project: &str, subscription: &str, unix_ms: u128) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "projects/{project}/snapshots/{}{unix_ms}-{}-{}",
        snapshot_prefix(subscription),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// When a probe snapshot named `name` (full or short) of `subscription` was created (ms
/// since the Unix epoch); `None` for any other snapshot.
pub fn created_ms(name: &str, subscription: &str) -> Option<u128> {
    let short = name.rsplit('/').next().unwrap_or(name);
    let rest = short.strip_prefix(&snapshot_prefix(subscription))?;
    rest.split('-').next()?.parse().ok()
}

/// The oldest unacked message's publish time (ns since the Unix epoch) that a snapshot
/// expiring at `expire` says, less [`RESOLUTION_MARGIN`]; `None` when it does not fit.
pub fn oldest_unacked_ns(expire: &google_cloud_wkt::Timestamp) -> Option<i64> {
    let lifetime = SNAPSHOT_LIFETIME + RESOLUTION_MARGIN;
    expire
        .seconds()
        .checked_mul(1_000_000_000)?
        .checked_add(i64::from(expire.nanos()))?
        .checked_sub(i64::try_from(lifetime.as_nanos()).ok()?)
}

/// Milliseconds since the Unix epoch by this machine's clock.
pub fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// What one probe read, and whether its snapshot is still there.
#[derive(Debug)]
pub struct Probed {
    /// The oldest unacked publish time (see [`oldest_unacked_ns`]).
    pub oldest_unacked_ns: i64,
    /// The snapshot could not be deleted: why (the caller retries or gives up).
    pub left: Option<ProbeError>,
}

/// One probe of `subscription` (full name) with snapshot `name`. The snapshot is deleted
/// before it returns; a reading whose snapshot could not be deleted is still a reading
/// (`Probed::left` says why it is left). `Err((error, left))`: no reading, and whether
/// the snapshot is left.
pub async fn probe(
    admin: &SubscriptionAdmin,
    subscription: &str,
    name: &str,
) -> Result<Probed, (ProbeError, Option<String>)> {
    let created = diagnose::bounded(
        admin
            .create_snapshot()
            .set_name(name)
            .set_subscription(subscription),
    )
    .send()
    .await
    .map_err(|e| {
        let why = format!("creating snapshot {name} of {subscription}: {e}");
        let err = match diagnose::cause(&e) {
            Cause::PermissionDenied => ProbeError::NotPermitted(why),
            _ => ProbeError::Failed(why),
        };
        (err, None)
    })?;
    let reading = created
        .expire_time
        .as_ref()
        .and_then(oldest_unacked_ns)
        .ok_or_else(|| {
            ProbeError::Failed(format!(
                "snapshot {name} of {subscription} came back without a usable expire time ({:?})",
                created.expire_time
            ))
        });
    let left = delete(admin, name).await.err();
    match reading {
        Ok(ns) => Ok(Probed {
            oldest_unacked_ns: ns,
            left,
        }),
        Err(e) => Err((e, left.map(|_| name.to_string()))),
    }
}

/// Deletes snapshot `name` (full); gone already is fine.
pub async fn delete(admin: &SubscriptionAdmin, name: &str) -> Result<(), ProbeError> {
    match diagnose::bounded(admin.delete_snapshot().set_snapshot(name))
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if diagnose::cause(&e) == Cause::NotFound => Ok(()),
        Err(e) => {
            let why = format!("deleting probe snapshot {name}: {e}");
            Err(match diagnose::cause(&e) {
                Cause::PermissionDenied => ProbeError::NotPermitted(why),
                _ => ProbeError::Failed(why),
            })
        }
    }
}

/// Deletes the probe snapshots of `subscription` in `project` that a crashed run left
/// (created more than [`STALE_AFTER`] ago). Returns how many it deleted; what it could not
/// list or delete is logged (Pub/Sub deletes a snapshot within 7 days anyway).
pub async fn delete_stale(admin: &SubscriptionAdmin, project: &str, subscription: &str) -> usize {
    let now = unix_ms();
    let mut stale = Vec::new();
    let mut token = String::new();
    // At most 100 pages of 1,000: the project's snapshot quota is far below that.
    for _ in 0..100 {
        let page = match diagnose::bounded(
            admin
                .list_snapshots()
                .set_project(format!("projects/{project}"))
                .set_page_size(1_000)
                .set_page_token(token.clone()),
        )
        .send()
        .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("cannot list the snapshots of project {project} to delete probe snapshots an earlier run left: {e}");
                return 0;
            }
        };
        stale.extend(page.snapshots.into_iter().filter_map(|s| {
            let at = created_ms(&s.name, subscription)?;
            (now.saturating_sub(at) > STALE_AFTER.as_millis()).then_some(s.name)
        }));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut deleted = 0;
    for name in stale {
        match delete(admin, &name).await {
            Ok(()) => deleted += 1,
            Err(e) => {
                tracing::warn!("{e} (left by an earlier run; Pub/Sub deletes it within 7 days)")
            }
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_expiring_7_days_after_creation_says_nothing_is_unacked_before_it() {
        // Created at 1,000 s with nothing unacked: expires at 1,000 s + 7 days.
        let expire = google_cloud_wkt::Timestamp::clamp(1_000 + 7 * 24 * 3600, 0);
        assert_eq!(oldest_unacked_ns(&expire), Some(999 * 1_000_000_000));
        // The oldest unacked message is 8.04 s old: expires 8.04 s earlier.
        let expire = google_cloud_wkt::Timestamp::clamp(991 + 7 * 24 * 3600, 960_000_000);
        assert_eq!(oldest_unacked_ns(&expire), Some(990_960_000_000));
        let far = google_cloud_wkt::Timestamp::clamp(i64::MAX / 2, 0);
        assert_eq!(oldest_unacked_ns(&far), None, "out of range is no reading");
    }

    #[test]
    fn probe_snapshot_names_are_per_subscription_and_carry_their_creation_time() {
        let a = "projects/p/subscriptions/clicks";
        let b = "projects/p/subscriptions/clicks-2";
        let name = snapshot_name("p", a, 1_700_000_000_123);
        assert!(
            name.starts_with("projects/p/snapshots/pubsub-connector-probe-"),
            "{name}"
        );
        assert_eq!(created_ms(&name, a), Some(1_700_000_000_123));
        assert_eq!(created_ms(&name, b), None, "another subscription's");
        assert_eq!(created_ms("projects/p/snapshots/mine", a), None);
        let long = format!("projects/p/subscriptions/{}", "x".repeat(255));
        let short = snapshot_name("p", &long, 1)
            .rsplit('/')
            .next()
            .unwrap()
            .len();
        assert!(
            short < 80,
            "a snapshot id is at most 255 characters: {short}"
        );
        assert_ne!(snapshot_name("p", a, 1), snapshot_name("p", a, 1), "unique");
    }
}
