//! `PubSubStartPosition` (SPEC 5.4; the reference connector's `PubSubStartPosition`) and
//! the seek that reaches it: once per subscription, at the job's first start, before any
//! reader pulls (run from `Connector::prepare_source`, which the runtime calls on process 0
//! before any source subtask starts). Every source subtask writes [`STATE_KEY`] into its
//! checkpointed state ([`record`]): the mode and the subscriptions positioned so far. A
//! restore seeks only subscriptions added to the table since (see [`AppliedStartPosition`]).
//!
//! A seek moves the subscription for every consumer, other jobs included: use a start
//! position other than `continue-from-subscription` only on a subscription the job owns.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use google_cloud_pubsub::client::SubscriptionAdmin;
use google_cloud_pubsub::model::seek_request::Target;
use pubsub_engine_spi::{ConfigError, OperatorState};
use pubsub_schema::StartPosition;

use crate::build_error::BuildError;

/// The key under which each source subtask's state records the start position:
/// `{"mode": "latest", "subscriptions": ["projects/p/subscriptions/a", ...]}`, the mode
/// applied at the job's first start and every subscription positioned since (full names).
/// Checkpoints written before subscriptions were recorded hold the mode alone, as a
/// string; it means every subscription of the table was positioned.
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

/// What the last completed checkpoint says about the start position: which mode was
/// applied and which subscriptions are already positioned. Read with
/// [`AppliedStartPosition::from_state`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedStartPosition {
    /// The mode applied at the job's first start (`latest`, ...); `None` when the
    /// checkpoint holds state of this source but no record (written before records).
    pub mode: Option<String>,
    /// Full names of the subscriptions already positioned; `None` means every
    /// subscription (the plain-string record, which predates the list).
    pub subscriptions: Option<BTreeSet<String>>,
}

impl AppliedStartPosition {
    /// The record in the subtask states of the last completed checkpoint; `None` on the
    /// job's first start (`restored` empty). Several subtasks' records are merged (they
    /// normally agree); an unreadable or missing one counts as "every subscription".
    pub fn from_state(restored: &BTreeMap<usize, OperatorState>) -> Option<Self> {
        if restored.is_empty() {
            return None;
        }
        let mut mode = None;
        let mut subscriptions = Some(BTreeSet::new());
        for state in restored.values() {
            let v = state.values.get(STATE_KEY);
            match v {
                Some(serde_json::Value::String(m)) => {
                    mode.get_or_insert_with(|| m.clone());
                    subscriptions = None;
                }
                Some(serde_json::Value::Object(o)) => {
                    if let Some(m) = o.get("mode").and_then(|m| m.as_str()) {
                        mode.get_or_insert_with(|| m.to_string());
                    }
                    match (o.get("subscriptions"), subscriptions.as_mut()) {
                        (Some(serde_json::Value::Array(a)), Some(set)) => {
                            set.extend(a.iter().filter_map(|s| s.as_str().map(str::to_string)))
                        }
                        (Some(serde_json::Value::Array(_)), None) => {}
                        _ => subscriptions = None,
                    }
                }
                // No record (an older checkpoint): never seek again, as before records.
                _ => subscriptions = None,
            }
        }
        Some(AppliedStartPosition {
            mode,
            subscriptions,
        })
    }

    /// Whether subscription `name` (full name) was positioned already.
    pub fn covers(&self, name: &str) -> bool {
        self.subscriptions.as_ref().is_none_or(|s| s.contains(name))
    }
}

/// The value each source subtask stores under [`STATE_KEY`] once the job-level
/// preparation positioned every subscription of the table: the recorded mode if the
/// checkpoint it restored from has one (else the configured `position`'s), and the
/// recorded subscriptions together with every current one (`subscriptions`, full names).
pub fn record(
    restored: &BTreeMap<usize, OperatorState>,
    position: PubSubStartPosition,
    subscriptions: &[String],
) -> serde_json::Value {
    let applied = AppliedStartPosition::from_state(restored);
    let mode = applied
        .as_ref()
        .and_then(|a| a.mode.clone())
        .unwrap_or_else(|| position.mode().to_string());
    let mut all: BTreeSet<String> = applied.and_then(|a| a.subscriptions).unwrap_or_default();
    all.extend(subscriptions.iter().cloned());
    serde_json::json!({ "mode": mode, "subscriptions": all })
}

/// What [`seek_once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeekOutcome {
    /// The position needs no seek.
    NotNeeded,
    /// A restored job whose every subscription was positioned already.
    AlreadyApplied,
    /// Seeked these subscriptions (full names), each to its time: all of them at the
    /// job's first start, those added since on a restore.
    Seeked { seeks: Vec<(String, SystemTime)> },
}

/// The first-start decisions of earlier starts that no completed checkpoint covers, and
/// where to record new ones before acting on them (issue 16, finding 1): without them a
/// job that dies before its first checkpoint would seek `latest` to a new instant on its
/// restart and so acknowledge everything published in between, rows never written.
///
/// Recorded as `{"mode": "latest", "seeks": {"projects/p/subscriptions/s": MS}}`, the
/// target of each seek in ms since the Unix epoch.
#[derive(Debug, Clone, Default)]
pub struct SeekDecisions<'a> {
    /// What an earlier start recorded (`PrepareContext::recorded_decision`).
    pub recorded: Option<&'a serde_json::Value>,
    /// Where a new decision goes (`PrepareContext::decision_log`).
    pub log: pubsub_engine_spi::DecisionLog,
}

impl SeekDecisions<'_> {
    /// The recorded seek target of `subscription` under `mode`, if any.
    fn recorded_time(&self, mode: &str, subscription: &str) -> Option<SystemTime> {
        let r = self.recorded?;
        if r.get("mode").and_then(|m| m.as_str()) != Some(mode) {
            return None;
        }
        let ms = r.get("seeks")?.get(subscription)?.as_u64()?;
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// The recorded seeks of `mode` and `seeks`, as one record.
    fn merged(&self, mode: &str, seeks: &[(String, SystemTime)]) -> serde_json::Value {
        let mut all = serde_json::Map::new();
        if let Some(r) = self
            .recorded
            .filter(|r| r.get("mode").and_then(|m| m.as_str()) == Some(mode))
        {
            if let Some(o) = r.get("seeks").and_then(|s| s.as_object()) {
                all.extend(o.clone());
            }
        }
        for (s, t) in seeks {
            let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
            all.insert(s.clone(), serde_json::json!(ms));
        }
        serde_json::json!({ "mode": mode, "seeks": all })
    }
}

/// Seeks each subscription (full names) to `position`'s time, at most once per
/// subscription per job: at the job's first start (`applied` is `None`) all of them, on a
/// restore only those `applied` does not cover (added to the table since), and none for
/// `continue-from-subscription`. `now` pins `latest` to one instant for all of them, cut
/// to whole milliseconds. A subscription that `decisions` recorded under the same mode
/// (`latest`, `earliest-retained`: the modes that read the clock) is seeked to its recorded
/// time again; the others' times are recorded through `decisions.log` before any seek.
/// When the configured mode differs from the recorded one, logs a WARN: recorded
/// subscriptions are not seeked a second time.
///
/// Errors name the subscription, the target time and the server's answer; a time in the
/// future is refused (a [`ConfigError`]); a decision that cannot be recorded fails before
/// any seek. A seek that failed may have moved some subscriptions already (each seek is
/// idempotent, and its target recorded, so a restart repeats them).
pub async fn seek_once(
    admin: &SubscriptionAdmin,
    subscriptions: &[String],
    position: PubSubStartPosition,
    applied: Option<&AppliedStartPosition>,
    decisions: &SeekDecisions<'_>,
    now: SystemTime,
) -> anyhow::Result<SeekOutcome> {
    if let Some(recorded) = applied.and_then(|a| a.mode.as_deref()) {
        if recorded != position.mode() {
            tracing::warn!(
                "'scan.startup.mode' is '{}' but the job's first start applied '{recorded}': a restore does not seek a subscription a second time, so the subscriptions positioned then stay where they are; only subscriptions added to the table since are positioned with '{}'",
                position.mode(),
                position.mode()
            );
        }
    }
    let now = UNIX_EPOCH
        + Duration::from_millis(
            now.duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64,
        );
    let Some(time) = position.seek_time(now) else {
        return Ok(SeekOutcome::NotNeeded);
    };
    let todo: Vec<&String> = subscriptions
        .iter()
        .filter(|s| applied.is_none_or(|a| !a.covers(s)))
        .collect();
    if todo.is_empty() {
        tracing::info!(
            "start position '{}' was applied at the job's first start; a restore does not seek again",
            position.mode()
        );
        return Ok(SeekOutcome::AlreadyApplied);
    }
    // A seek into the future would acknowledge every message published until then.
    if time > now {
        return Err(ConfigError::wrap(anyhow::anyhow!(
            "option 'scan.startup.timestamp-millis' is invalid: {} is in the future (now {}); a seek there would acknowledge every message published before it",
            rfc3339(time),
            rfc3339(now)
        )));
    }
    // A clock reading is pinned by the first start that took it; a configured timestamp
    // is the configuration's.
    let pinned = matches!(
        position.config(),
        StartPosition::Latest | StartPosition::EarliestRetained
    );
    let mode = position.mode();
    let seeks: Vec<(String, SystemTime)> = todo
        .iter()
        .map(|s| {
            let again = pinned.then(|| decisions.recorded_time(mode, s)).flatten();
            if let Some(t) = again {
                tracing::info!(
                    "subscription {s}: repeating the seek to {} that a start of this job decided before its first checkpoint completed (start position '{mode}')",
                    rfc3339(t)
                );
            }
            (s.to_string(), again.unwrap_or(time))
        })
        .collect();
    // Durable before the first seek acts on it.
    decisions
        .log
        .record(decisions.merged(mode, &seeks))
        .await
        .map_err(|e| {
            e.context("cannot record the start position's seek targets; nothing was seeked")
        })?;
    for (s, time) in &seeks {
        if applied.is_some() {
            tracing::info!(
                "subscription {s} was added to the table since the job's first start: positioning it with start position '{mode}'"
            );
        }
        let ts = wkt_timestamp(*time);
        let target = rfc3339(*time);
        crate::diagnose::bounded(
            admin
                .seek()
                .set_subscription(s.to_string())
                .set_target(Target::Time(Box::new(ts))),
        )
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot seek subscription {s} to {target} (start position '{mode}'): {e}{}",
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
            "seeked subscription {s} to {target} (start position '{mode}'): this moved it for every consumer of the subscription"
        );
    }
    Ok(SeekOutcome::Seeked { seeks })
}

fn wkt_timestamp(t: SystemTime) -> google_cloud_wkt::Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    google_cloud_wkt::Timestamp::clamp(d.as_secs() as i64, d.subsec_nanos() as i32)
}

/// `t` as RFC 3339 in UTC, millisecond precision, fixed width (as `dlq-timestamp`).
pub fn rfc3339(t: SystemTime) -> String {
    crate::dead_letter::rfc3339_millis(t)
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

    /// Subtask states of a checkpoint in which each of `n` subtasks recorded `value`.
    fn restored(n: usize, value: serde_json::Value) -> BTreeMap<usize, OperatorState> {
        (0..n)
            .map(|i| {
                let mut s = OperatorState::default();
                s.values.insert(STATE_KEY.to_string(), value.clone());
                (i, s)
            })
            .collect()
    }

    /// `seek_once` at the current time, which must succeed.
    async fn seek_now(
        admin: &SubscriptionAdmin,
        subs: &[String],
        position: PubSubStartPosition,
        applied: Option<&AppliedStartPosition>,
    ) -> SeekOutcome {
        seek_once(
            admin,
            subs,
            position,
            applied,
            &SeekDecisions::default(),
            SystemTime::now(),
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn fake_admin_first_start_seeks_each_subscription_once_to_one_instant() {
        let (admin, seeks) = fake();
        let subs: Vec<String> = SUBS.iter().map(|s| s.to_string()).collect();
        let now = UNIX_EPOCH + Duration::from_millis(1_764_460_800_123);
        let out = seek_once(
            &admin,
            &subs,
            PubSubStartPosition::latest(),
            None,
            &SeekDecisions::default(),
            now,
        )
        .await
        .unwrap();
        assert_eq!(
            out,
            SeekOutcome::Seeked {
                seeks: subs.iter().map(|s| (s.clone(), now)).collect()
            }
        );
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
        let recorded = AppliedStartPosition::from_state(&restored(
            2,
            record(&BTreeMap::new(), PubSubStartPosition::latest(), &subs),
        ));
        for p in [
            PubSubStartPosition::latest(),
            PubSubStartPosition::earliest_retained(),
            PubSubStartPosition::from_timestamp(UNIX_EPOCH + Duration::from_secs(5)).unwrap(),
        ] {
            let out = seek_once(
                &admin,
                &subs,
                p,
                recorded.as_ref(),
                &SeekDecisions::default(),
                SystemTime::now(),
            )
            .await
            .unwrap();
            assert_eq!(out, SeekOutcome::AlreadyApplied);
        }
        let now = UNIX_EPOCH + Duration::from_millis(1_764_460_800_000);
        let future = PubSubStartPosition::from_timestamp(now + Duration::from_secs(3600)).unwrap();
        let e = seek_once(&admin, &subs, future, None, &SeekDecisions::default(), now)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("is in the future"), "{e}");
        assert!(ConfigError::is_in(&e), "no restart fixes it");
        let out = seek_now(
            &admin,
            &subs,
            PubSubStartPosition::continue_from_subscription(),
            None,
        )
        .await;
        assert_eq!(out, SeekOutcome::NotNeeded);
        assert!(
            seeks.lock().unwrap().is_empty(),
            "no seek on a restore or for continue"
        );
    }

    #[tokio::test]
    async fn fake_admin_restore_seeks_only_a_subscription_added_since() {
        let (admin, seeks) = fake();
        // The first start positioned `a`; the table now reads `a;b`.
        let first = restored(
            2,
            record(
                &BTreeMap::new(),
                PubSubStartPosition::latest(),
                &[SUBS[0].to_string()],
            ),
        );
        let applied = AppliedStartPosition::from_state(&first).unwrap();
        assert_eq!(applied.mode.as_deref(), Some("latest"));
        let subs: Vec<String> = SUBS.iter().map(|s| s.to_string()).collect();
        let now = UNIX_EPOCH + Duration::from_millis(1_764_460_800_456);
        let out = seek_once(
            &admin,
            &subs,
            PubSubStartPosition::latest(),
            Some(&applied),
            &SeekDecisions::default(),
            now,
        )
        .await
        .unwrap();
        assert_eq!(
            out,
            SeekOutcome::Seeked {
                seeks: vec![(SUBS[1].to_string(), now)]
            }
        );
        let got: Vec<_> = seeks.lock().unwrap().iter().map(seeked_to).collect();
        assert_eq!(got, vec![(SUBS[1].to_string(), 1_764_460_800, 456_000_000)]);
        // The subtasks then record both, under the mode of the first start, so the next
        // restore seeks nothing even with another mode configured.
        let next = record(&first, PubSubStartPosition::earliest_retained(), &subs);
        assert_eq!(
            next,
            serde_json::json!({"mode": "latest", "subscriptions": [SUBS[0], SUBS[1]]})
        );
        let applied = AppliedStartPosition::from_state(&restored(1, next));
        let out = seek_once(
            &admin,
            &subs,
            PubSubStartPosition::earliest_retained(),
            applied.as_ref(),
            &SeekDecisions::default(),
            now,
        )
        .await
        .unwrap();
        assert_eq!(out, SeekOutcome::AlreadyApplied);
        assert_eq!(seeks.lock().unwrap().len(), 1, "no second seek");
    }

    #[tokio::test]
    async fn fake_admin_a_removed_subscription_stays_recorded() {
        // `a;b` positioned, `b` removed from the table, later added back: no seek.
        let both: Vec<String> = SUBS.iter().map(|s| s.to_string()).collect();
        let first = restored(
            1,
            record(&BTreeMap::new(), PubSubStartPosition::latest(), &both),
        );
        let only_a = restored(1, record(&first, PubSubStartPosition::latest(), &both[..1]));
        let (admin, seeks) = fake();
        let applied = AppliedStartPosition::from_state(&only_a);
        let out = seek_now(
            &admin,
            &both,
            PubSubStartPosition::latest(),
            applied.as_ref(),
        )
        .await;
        assert_eq!(out, SeekOutcome::AlreadyApplied);
        assert!(seeks.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn fake_admin_the_old_plain_string_record_means_every_subscription() {
        let (admin, seeks) = fake();
        let subs: Vec<String> = SUBS.iter().map(|s| s.to_string()).collect();
        let old = restored(2, serde_json::Value::String("latest".into()));
        let applied = AppliedStartPosition::from_state(&old).unwrap();
        assert_eq!(applied.mode.as_deref(), Some("latest"));
        assert!(applied.covers(SUBS[1]));
        let out = seek_now(&admin, &subs, PubSubStartPosition::latest(), Some(&applied)).await;
        assert_eq!(out, SeekOutcome::AlreadyApplied);
        // A state without any record (an older checkpoint) does not seek either.
        let none = AppliedStartPosition::from_state(&restored(1, serde_json::Value::Null));
        let out = seek_now(
            &admin,
            &subs,
            PubSubStartPosition::earliest_retained(),
            none.as_ref(),
        )
        .await;
        assert_eq!(out, SeekOutcome::AlreadyApplied);
        assert!(seeks.lock().unwrap().is_empty(), "no seek");
        // The next checkpoint records the current subscriptions under the old mode.
        assert_eq!(
            record(&old, PubSubStartPosition::earliest_retained(), &subs),
            serde_json::json!({"mode": "latest", "subscriptions": [SUBS[0], SUBS[1]]})
        );
        assert!(AppliedStartPosition::from_state(&BTreeMap::new()).is_none());
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
            None,
            &SeekDecisions::default(),
            now,
        )
        .await
        .unwrap();
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_001);
        seek_once(
            &admin,
            &subs,
            PubSubStartPosition::from_timestamp(at).unwrap(),
            None,
            &SeekDecisions::default(),
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

    /// A decision log kept in memory, as the job record keeps it across starts.
    fn memory_log() -> (
        pubsub_engine_spi::DecisionLog,
        Arc<Mutex<Option<serde_json::Value>>>,
    ) {
        let kept = Arc::new(Mutex::new(None));
        let k = kept.clone();
        let log = pubsub_engine_spi::DecisionLog::new(move |v| {
            *k.lock().unwrap() = Some(v);
            Box::pin(async { Ok(()) })
        });
        (log, kept)
    }

    /// Issue 16, finding 1: a job with `latest` that dies before its first checkpoint
    /// completes must seek its restart to the same instant, not to a new "now" (which
    /// would acknowledge everything published in between).
    #[tokio::test]
    async fn fake_admin_a_restart_before_the_first_checkpoint_repeats_the_recorded_instant() {
        let (admin, seeks) = fake();
        let (log, kept) = memory_log();
        let subs = vec![SUBS[0].to_string()];
        let t0 = UNIX_EPOCH + Duration::from_millis(1_764_460_800_123);
        let first = SeekDecisions {
            recorded: None,
            log: log.clone(),
        };
        seek_once(
            &admin,
            &subs,
            PubSubStartPosition::latest(),
            None,
            &first,
            t0,
        )
        .await
        .unwrap();
        let recorded = kept
            .lock()
            .unwrap()
            .clone()
            .expect("recorded before the seek");
        // The restart: no completed checkpoint, a later clock, and the table gained `b`.
        let t1 = t0 + Duration::from_secs(30);
        let both: Vec<String> = SUBS.iter().map(|s| s.to_string()).collect();
        let again = SeekDecisions {
            recorded: Some(&recorded),
            log: log.clone(),
        };
        let out = seek_once(
            &admin,
            &both,
            PubSubStartPosition::latest(),
            None,
            &again,
            t1,
        )
        .await
        .unwrap();
        assert_eq!(
            out,
            SeekOutcome::Seeked {
                seeks: vec![(SUBS[0].to_string(), t0), (SUBS[1].to_string(), t1)]
            },
            "the recorded subscription repeats its instant; the new one takes now"
        );
        let got: Vec<_> = seeks.lock().unwrap().iter().map(seeked_to).collect();
        assert_eq!(got[1], (SUBS[0].to_string(), 1_764_460_800, 123_000_000));
        // Both are recorded now, and a third start repeats both.
        let recorded = kept.lock().unwrap().clone().unwrap();
        let third = SeekDecisions {
            recorded: Some(&recorded),
            log,
        };
        let out = seek_once(
            &admin,
            &both,
            PubSubStartPosition::latest(),
            None,
            &third,
            t1 + Duration::from_secs(9),
        )
        .await
        .unwrap();
        assert_eq!(
            out,
            SeekOutcome::Seeked {
                seeks: vec![(SUBS[0].to_string(), t0), (SUBS[1].to_string(), t1)]
            }
        );
        // Another mode does not reuse a `latest` instant; a timestamp is the config's.
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_000);
        let out = seek_once(
            &admin,
            &subs,
            PubSubStartPosition::from_timestamp(at).unwrap(),
            None,
            &SeekDecisions {
                recorded: Some(&recorded),
                log: Default::default(),
            },
            t1,
        )
        .await
        .unwrap();
        assert_eq!(
            out,
            SeekOutcome::Seeked {
                seeks: vec![(SUBS[0].to_string(), at)]
            }
        );
    }

    #[tokio::test]
    async fn fake_admin_a_decision_that_cannot_be_recorded_seeks_nothing() {
        let (admin, seeks) = fake();
        let log = pubsub_engine_spi::DecisionLog::new(|_| {
            Box::pin(async { Err(anyhow::anyhow!("disk full")) })
        });
        let e = seek_once(
            &admin,
            &[SUBS[0].to_string()],
            PubSubStartPosition::latest(),
            None,
            &SeekDecisions {
                recorded: None,
                log,
            },
            SystemTime::now(),
        )
        .await
        .unwrap_err();
        assert!(format!("{e:#}").contains("disk full"), "{e:#}");
        assert!(
            seeks.lock().unwrap().is_empty(),
            "no seek before the record"
        );
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
