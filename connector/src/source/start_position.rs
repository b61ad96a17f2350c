//! `PubSubStartPosition` (SPEC 5.4; the reference connector's `PubSubStartPosition`) and
//! the seek that reaches it: once, at the job's first start, before any reader pulls
//! (run from `Connector::prepare_source`, which the runtime calls on process 0 before any
//! source subtask starts). A restored job never seeks again: every source subtask writes
//! [`STATE_KEY`] into its checkpointed state, and a restore finds it there.
//!
//! A seek moves the subscription for every consumer, other jobs included: use a start
//! position other than `continue-from-subscription` only on a subscription the job owns.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use google_cloud_pubsub::client::SubscriptionAdmin;
use google_cloud_pubsub::model::seek_request::Target;
use pubsub_schema::StartPosition;

use crate::build_error::BuildError;

/// The key under which each source subtask's state records the start position applied at
/// the job's first start (its mode, e.g. `"latest"`).
pub const STATE_KEY: &str = "start-position";

/// How far back `earliest-retained` seeks: past the longest retention Pub/Sub offers
/// (31 days for subscriptions and topics), so every retained message is marked unacked.
pub const EARLIEST_LOOKBACK: Duration = Duration::from_secs(32 * 24 * 3600);

/// Where a job's first start begins reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PubSubStartPosition(StartPosition);

impl PubSubStartPosition {
    /// Wherever the subscription already is; no seek. The default.
    pub fn continue_from_subscription() -> Self {
        PubSubStartPosition(StartPosition::ContinueFromSubscription)
    }

    /// The oldest message the subscription retains (a seek 32 days back; only retained
    /// messages come back, acked ones only with `retain_acked_messages` or topic retention).
    pub fn earliest_retained() -> Self {
        PubSubStartPosition(StartPosition::EarliestRetained)
    }

    /// Messages published after the job's first start: the backlog is discarded (a seek to
    /// the instant the job first started, one instant for every subscription).
    pub fn latest() -> Self {
        PubSubStartPosition(StartPosition::Latest)
    }

    /// Messages published at or after `t`. Errors when `t` is not a whole number of
    /// milliseconds after the Unix epoch (stored as epoch milliseconds; never rounded).
    pub fn from_timestamp(t: SystemTime) -> Result<Self, BuildError> {
        let d = t.duration_since(UNIX_EPOCH).map_err(|_| {
            BuildError::new(
                "start_position",
                format!("{t:?}"),
                "must not be before 1970-01-01",
            )
        })?;
        let ms = crate::build_error::whole_ms("start_position", d)?;
        let millis = i64::try_from(ms)
            .map_err(|_| BuildError::new("start_position", ms, "is too far in the future"))?;
        Ok(PubSubStartPosition(StartPosition::Timestamp { millis }))
    }

    /// From a table config value. Errors on a negative timestamp.
    pub fn from_config(p: StartPosition) -> Result<Self, BuildError> {
        if let StartPosition::Timestamp { millis } = p {
            if millis < 0 {
                return Err(BuildError::new(
                    "start_position",
                    millis,
                    "timestamp must be epoch milliseconds >= 0",
                ));
            }
        }
        Ok(PubSubStartPosition(p))
    }

    pub fn config(&self) -> StartPosition {
        self.0
    }

    /// Whether reaching this position needs a seek.
    pub fn requires_seek(&self) -> bool {
        self.0 != StartPosition::ContinueFromSubscription
    }

    /// The mode's option value: `continue-from-subscription`, `earliest-retained`,
    /// `latest` or `timestamp`.
    pub fn mode(&self) -> &'static str {
        match self.0 {
            StartPosition::ContinueFromSubscription => "continue-from-subscription",
            StartPosition::EarliestRetained => "earliest-retained",
            StartPosition::Latest => "latest",
            StartPosition::Timestamp { .. } => "timestamp",
        }
    }

    /// The publish time to seek to, given the job's first-start instant `now`; `None` when
    /// no seek is needed.
    pub fn seek_time(&self, now: SystemTime) -> Option<SystemTime> {
        match self.0 {
            StartPosition::ContinueFromSubscription => None,
            StartPosition::EarliestRetained => Some(now - EARLIEST_LOOKBACK),
            StartPosition::Latest => Some(now),
            StartPosition::Timestamp { millis } => {
                Some(UNIX_EPOCH + Duration::from_millis(millis as u64))
            }
        }
    }
}

/// What [`seek_once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeekOutcome {
    /// The position needs no seek.
    NotNeeded,
    /// A restored job: the first start already seeked.
    AlreadyApplied,
    /// Seeked every subscription to this time.
    Seeked(SystemTime),
}

/// Seeks every subscription (full names) to `position`'s time, at most once per job:
/// not when `restored` (a checkpoint of this source exists, so its first start already
/// ran) and not for `continue-from-subscription`. `now` pins `latest` to one instant.
/// Errors name the subscription, the target time and the server's answer; a seek that
/// failed may have moved some subscriptions already (each seek is idempotent, so a
/// restart repeats them).
pub async fn seek_once(
    admin: &SubscriptionAdmin,
    subscriptions: &[String],
    position: PubSubStartPosition,
    restored: bool,
    now: SystemTime,
) -> anyhow::Result<SeekOutcome> {
    let Some(time) = position.seek_time(now) else {
        return Ok(SeekOutcome::NotNeeded);
    };
    if restored {
        tracing::info!(
            "start position '{}' was applied at the job's first start; a restore does not seek again",
            position.mode()
        );
        return Ok(SeekOutcome::AlreadyApplied);
    }
    // A seek into the future would acknowledge every message published until then.
    if time > now {
        anyhow::bail!(
            "option 'scan.startup.timestamp-millis' is invalid: {} is in the future (now {}); a seek there would acknowledge every message published before it",
            rfc3339(time),
            rfc3339(now)
        );
    }
    let ts = wkt_timestamp(time);
    for s in subscriptions {
        let target = rfc3339(time);
        crate::diagnose::bounded(
            admin
                .seek()
                .set_subscription(s.clone())
                .set_target(Target::Time(Box::new(ts.clone()))),
        )
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot seek subscription {s} to {target} (start position '{}'): {e}{}",
                position.mode(),
                if e.status()
                    .is_some_and(|st| st.code == google_cloud_gax::error::rpc::Code::Unimplemented)
                {
                    " (this server cannot seek to a time; use 'continue-from-subscription' with it)"
                } else {
                    ""
                }
            )
        })?;
        tracing::warn!(
            "seeked subscription {s} to {target} (start position '{}'): this moved it for every consumer of the subscription",
            position.mode()
        );
    }
    Ok(SeekOutcome::Seeked(time))
}

fn wkt_timestamp(t: SystemTime) -> google_cloud_wkt::Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    google_cloud_wkt::Timestamp::clamp(d.as_secs() as i64, d.subsec_nanos() as i32)
}

/// `t` as RFC 3339 in UTC, millisecond precision.
pub fn rfc3339(t: SystemTime) -> String {
    let ts = wkt_timestamp(t);
    String::from(ts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_gax::options::RequestOptions;
    use google_cloud_gax::response::Response;
    use google_cloud_pubsub::model::{SeekRequest, SeekResponse};
    use std::sync::{Arc, Mutex};

    /// A fake admin stub (the emulator cannot seek to a time): records every seek request.
    #[derive(Debug, Default)]
    struct FakeSeekAdmin {
        seeks: Arc<Mutex<Vec<SeekRequest>>>,
    }

    impl google_cloud_pubsub::stub::SubscriptionAdmin for FakeSeekAdmin {
        async fn seek(
            &self,
            req: SeekRequest,
            _options: RequestOptions,
        ) -> google_cloud_pubsub::Result<Response<SeekResponse>> {
            self.seeks.lock().unwrap().push(req);
            Ok(Response::from(SeekResponse::new()))
        }
    }

    fn fake() -> (SubscriptionAdmin, Arc<Mutex<Vec<SeekRequest>>>) {
        let f = FakeSeekAdmin::default();
        let seeks = f.seeks.clone();
        (SubscriptionAdmin::from_stub(f), seeks)
    }

    fn seeked_to(r: &SeekRequest) -> (String, i64, i32) {
        match r.target.as_ref() {
            Some(Target::Time(t)) => (r.subscription.clone(), t.seconds(), t.nanos()),
            other => panic!("a time seek expected, got {other:?}"),
        }
    }

    const SUBS: [&str; 2] = ["projects/p/subscriptions/a", "projects/p/subscriptions/b"];

    #[tokio::test]
    async fn fake_admin_first_start_seeks_each_subscription_once_to_one_instant() {
        let (admin, seeks) = fake();
        let subs: Vec<String> = SUBS.iter().map(|s| s.to_string()).collect();
        let now = UNIX_EPOCH + Duration::from_millis(1_764_460_800_123);
        let out = seek_once(&admin, &subs, PubSubStartPosition::latest(), false, now)
            .await
            .unwrap();
        assert_eq!(out, SeekOutcome::Seeked(now));
        let got: Vec<_> = seeks.lock().unwrap().iter().map(seeked_to).collect();
        assert_eq!(
            got,
            vec![
                (SUBS[0].to_string(), 1_764_460_800, 123_000_000),
                (SUBS[1].to_string(), 1_764_460_800, 123_000_000)
            ],
            "latest is pinned to one instant for every subscription"
        );
    }

    #[tokio::test]
    async fn fake_admin_restore_never_seeks_again() {
        let (admin, seeks) = fake();
        let subs = vec![SUBS[0].to_string()];
        for p in [
            PubSubStartPosition::latest(),
            PubSubStartPosition::earliest_retained(),
            PubSubStartPosition::from_timestamp(UNIX_EPOCH + Duration::from_secs(5)).unwrap(),
        ] {
            let out = seek_once(&admin, &subs, p, true, SystemTime::now())
                .await
                .unwrap();
            assert_eq!(out, SeekOutcome::AlreadyApplied);
        }
        let now = UNIX_EPOCH + Duration::from_millis(1_764_460_800_000);
        let future = PubSubStartPosition::from_timestamp(now + Duration::from_secs(3600)).unwrap();
        let e = seek_once(&admin, &subs, future, false, now)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("is in the future"), "{e}");
        let out = seek_once(
            &admin,
            &subs,
            PubSubStartPosition::continue_from_subscription(),
            false,
            SystemTime::now(),
        )
        .await
        .unwrap();
        assert_eq!(out, SeekOutcome::NotNeeded);
        assert!(
            seeks.lock().unwrap().is_empty(),
            "no seek on a restore or for continue"
        );
    }

    #[tokio::test]
    async fn fake_admin_targets_of_earliest_and_timestamp() {
        let (admin, seeks) = fake();
        let subs = vec![SUBS[0].to_string()];
        let now = UNIX_EPOCH + Duration::from_secs(20_000 * 24 * 3600);
        seek_once(
            &admin,
            &subs,
            PubSubStartPosition::earliest_retained(),
            false,
            now,
        )
        .await
        .unwrap();
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_001);
        seek_once(
            &admin,
            &subs,
            PubSubStartPosition::from_timestamp(at).unwrap(),
            false,
            now,
        )
        .await
        .unwrap();
        let got: Vec<_> = seeks.lock().unwrap().iter().map(seeked_to).collect();
        assert_eq!(
            got[0].1,
            (20_000 - 32) * 24 * 3600,
            "32 days back: past any retention"
        );
        assert_eq!((got[1].1, got[1].2), (1_700_000_000, 1_000_000));
    }

    #[test]
    fn timestamps_are_whole_milliseconds() {
        let e =
            PubSubStartPosition::from_timestamp(UNIX_EPOCH + Duration::from_micros(1)).unwrap_err();
        assert!(
            e.to_string().contains("whole number of milliseconds"),
            "{e}"
        );
        assert!(PubSubStartPosition::from_config(StartPosition::Timestamp { millis: -1 }).is_err());
        assert_eq!(PubSubStartPosition::latest().mode(), "latest");
        assert!(!PubSubStartPosition::default().requires_seek());
    }
}
