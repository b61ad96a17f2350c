//! One subtask of a Pub/Sub source table: reads its splits (see [`super::splits`]),
//! decodes messages into rows, tracks every handle per split and acks only on `Commit`
//! of the checkpoint a message was bound to (SPEC 5.2).
//!
//! Limits enforced here, per subtask (SPEC 5.3): flow control (messages and bytes taken
//! into rows, not yet acknowledged), the subscriber buffer caps (a delivery that would
//! cross one is nacked before it is tracked), the rate limit (messages per second), the
//! fetch size, the first-checkpoint detector, ack confirmation at commit, the shutdown
//! timeout, and the paused-split caps. Whenever a delivery may not be taken (back-pressure,
//! flow control, the rate limit), the streams stay polled into each split's paused buffer
//! (see [`super::park`]), because a delivery left unread in a stream outlives its lease;
//! a split whose buffer would cross its cap, or a delivery crossing a subscriber buffer
//! cap, parks the split until it may take again.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use google_cloud_pubsub::client::{Subscriber, SubscriptionAdmin};
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::subscriber::handler::Handler;
use pubsub_engine::format::{DeserializeError, FieldValue};
use pubsub_engine::{
    ControlMessage, Counter, Gauge, OperatorConfig, SourceCollector, SourceContext,
    SourceFinishType, SourceOperator, StopMode, MESSAGES_ACKED, MESSAGES_NACKED,
    MESSAGES_NACK_UNSENT, MESSAGES_RECEIVED,
};
use pubsub_schema::{OrderingMode, PubSubProfile, SourceConfig};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::lease::{Delivery, Leases};
use super::options::PubSubSubscriberOptions;
use super::park::{Held, PausedBuffer, PausedCaps};
use super::policy::{self, bad_message_action, should_log_bad, BadMessageAction, FailureRun};
use super::pull::{self, PullStreams, Pulled, StreamSettings, StreamShared, Tagged};
use super::tracker::{AckHandle, AckTracker, MessageId, Received};
use super::*;
use crate::client;
use crate::dead_letter::{DeadLetter, PubSubDeadLetterQueue, DEAD_LETTERS_PUBLISHED};

/// The longest a decoded row waits to be emitted.
const LINGER: Duration = Duration::from_millis(50);
/// Events of all splits of a subtask wait in one channel of this many.
const CHANNEL: usize = 64;
/// The time-based gauges (checkpoint lag, message ages) are refreshed at least this
/// often while the subtask waits, so a stalled source shows them rising.
const GAUGES_EVERY: Duration = Duration::from_secs(1);

/// One split this subtask reads.
struct Split {
    /// The split's index in the plan (for logs).
    index: usize,
    /// The subscription's full name.
    subscription: String,
    /// `None` while parked (or after stopping).
    streams: Option<PullStreams>,
    /// The tag its current streams send under: `position + splits x generation`, so
    /// deliveries of streams stopped by a park are told apart from the fresh ones'.
    tag: usize,
    tracker: AckTracker<Delivery>,
    /// Streams currently reconnecting.
    down: HashSet<usize>,
    /// Deliveries taken while the subtask could not emit.
    paused: PausedBuffer,
    /// When the split was parked, while it is.
    parked_at: Option<Instant>,
    /// Gauges of this split's subscription: [`OLDEST_UNACKED_MESSAGE_AGE_MS`] and
    /// [`EVENT_TIME_LAG_MS`] (a subtask reads each subscription through one split at most).
    age: (Gauge, Gauge),
}

/// What `admit` decided about a delivery.
enum Admit {
    /// Tracked: decode it (or keep it in the paused buffer).
    Take(Held),
    /// A redelivery of a message still held: the tracker kept the newer handle.
    Skip,
    /// It would cross a subscriber buffer cap and was nacked: park its split.
    Park,
}

/// What reopening a parked split's streams needs.
struct Reopen {
    subscriber: Subscriber,
    admin: SubscriptionAdmin,
    settings: StreamSettings,
    tx: mpsc::Sender<Tagged>,
}

struct Counters {
    received: Counter,
    acked: Counter,
    nacked: Counter,
    nack_unsent: Counter,
    dropped: Counter,
    nacked_bad: Counter,
    rejected: Counter,
    skipped: Counter,
    in_error: Counter,
    fetches: Counter,
    confirmed: Counter,
    reconnects: Counter,
    parked: Counter,
    pending_acks: Gauge,
    buffered_bytes: Gauge,
    pending_checkpoints: Gauge,
    checkpoint_lag_ms: Gauge,
}

/// A message decoded into the collector's buffer, not yet staged.
struct Buffered {
    split: usize,
    id: MessageId,
    /// Its payload and context, kept only under the `dead-letter` policy.
    letter: Option<(bytes::Bytes, Box<super::park::MessageContext>)>,
    /// The record id this message put into the deduplication set (taken out again if
    /// its rows are rejected).
    dedup: Option<u128>,
}

/// Deduplication (`scan.dedup.*`): the attribute, the set shared by the subtasks of this
/// table in this process, and its counters.
struct Dedup {
    attribute: String,
    set: std::sync::Arc<std::sync::Mutex<super::dedup::SeenSet>>,
    deduplicated: Counter,
    without: Counter,
    behind: Counter,
}

/// One subtask of a Pub/Sub source table.
pub struct SourceReader {
    profile: PubSubProfile,
    config: SourceConfig,
    options: PubSubSubscriberOptions,
    op: OperatorConfig,
    splits: Vec<Split>,
    rx: Option<mpsc::Receiver<Tagged>>,
    /// Messages decoded into the collector's buffer, in buffer order.
    buffered: Vec<Buffered>,
    counters: Option<Counters>,
    /// The effective held-messages limit (explicit option, or sized in `on_start`).
    max_outstanding_messages: u64,
    reported_can_pull: Option<bool>,
    rate: Option<super::rate::RateLimiter>,
    /// When reading started, and whether a checkpoint committed since.
    started: Instant,
    /// A delivery crossed a subscriber buffer cap since the last commit: taking pauses
    /// and parked splits stay parked until a commit frees room (rejecting more would only
    /// churn redeliveries).
    cap_reached: bool,
    committed: bool,
    last_commit: Instant,
    /// The final barrier was seen: no stream is reopened.
    stopping: bool,
    paused_caps: PausedCaps,
    reopen: Option<Reopen>,
    /// Every stream's lease loop (parked and reconnected streams' too): `on_close` waits
    /// for them within the shutdown timeout and counts the nacks of those still running.
    leases: Leases,
    /// Until when deliveries a closed stream (parked, failed, restarted) was still being
    /// sent may be leased to it (one stream ack deadline after it closed): the subtask
    /// does not count as idle before, so `--stop-when-idle` does not end a run while they
    /// are out.
    stranded_until: Option<Instant>,
    /// The dead-letter queue of policy `dead-letter` (opened in `on_start`).
    dead_letter: Option<PubSubDeadLetterQueue>,
    /// Letters of messages that failed to decode, not yet offered to the queue (decoding
    /// is synchronous; the run loop offers them right after).
    letters: Vec<DeadLetter>,
    /// The subtask's index (for `dlq-subtask`).
    subtask: usize,
    /// Deduplication, when `scan.dedup.attribute` is set (set up in `on_start`).
    dedup: Option<Dedup>,
    /// Format `avro`: the schema revisions messages name.
    avro: Option<crate::avro::Revisions>,
    /// `scan.max-consecutive-failures`: the messages that failed in a row.
    failures: FailureRun,
    /// The latest failed message and why (for the error when the run passes its bound).
    last_failure: String,
}

/// Milliseconds since the Unix epoch, by this machine's clock.
fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A gauge of this subtask labelled with one of its subscriptions.
fn subscription_gauge(ctx: &SourceContext, name: &str, subscription: &str) -> Gauge {
    ctx.metrics.labelled_gauge(
        name,
        &ctx.task_info.operator_id,
        ctx.task_info.task_index,
        ("subscription", subscription),
    )
}

/// `dlq-connector` of the source's dead letters.
pub const DEAD_LETTER_CONNECTOR: &str = "pubsub-source";

impl SourceReader {
    /// A subtask of the source `config` (validated by `PubSubSource::from_config`).
    pub fn new(
        profile: PubSubProfile,
        config: SourceConfig,
        op: OperatorConfig,
    ) -> anyhow::Result<Self> {
        let options = PubSubSubscriberOptions::from_config(&config.subscriber)?;
        let dead_letter = config
            .dead_letter
            .as_ref()
            .map(|d| PubSubDeadLetterQueue::from_config(&profile.project, d))
            .transpose()?
            .map(|q| q.with_key_prefix("scan."));
        Ok(SourceReader {
            splits: Vec::new(),
            rx: None,
            buffered: Vec::new(),
            counters: None,
            max_outstanding_messages: policy::MIN_DEFAULT_OUTSTANDING,
            reported_can_pull: None,
            rate: None,
            started: Instant::now(),
            cap_reached: false,
            committed: false,
            last_commit: Instant::now(),
            stopping: false,
            paused_caps: PausedCaps {
                messages: u64::MAX,
                bytes: u64::MAX,
            },
            reopen: None,
            leases: Leases::default(),
            stranded_until: None,
            dead_letter,
            letters: Vec::new(),
            subtask: 0,
            dedup: None,
            avro: (op.format == pubsub_engine::Format::Avro)
                .then(|| crate::avro::Revisions::new(profile.clone())),
            failures: FailureRun::new(config.max_consecutive_failures),
            last_failure: String::new(),
            profile,
            config,
            options,
            op,
        })
    }

    fn report_can_pull(&mut self, ctx: &SourceContext, can_pull: bool) {
        if self.reported_can_pull != Some(can_pull) {
            ctx.set_can_pull(can_pull);
            self.reported_can_pull = Some(can_pull);
        }
    }

    /// What the streams count into, and the subtask's lease loops.
    fn stream_shared(&self) -> StreamShared {
        let c = self.counters();
        StreamShared {
            reconnects: c.reconnects.clone(),
            received: c.received.clone(),
            nacked: c.nacked.clone(),
            leases: self.leases.clone(),
        }
    }

    fn counters(&self) -> &Counters {
        self.counters
            .as_ref()
            .expect("counters are set in on_start")
    }

    fn held(&self) -> (u64, u64) {
        self.splits.iter().fold((0, 0), |(m, b), s| {
            (
                m + s.tracker.held_messages() as u64,
                b + s.tracker.held_bytes() as u64,
            )
        })
    }

    /// Messages and payload bytes waiting in the paused buffers (tracked, not taken).
    fn paused(&self) -> (u64, u64) {
        self.splits.iter().fold((0, 0), |(m, b), s| {
            (m + s.paused.len() as u64, b + s.paused.bytes())
        })
    }

    /// Below flow control (messages taken: held minus paused) and the subscriber buffer
    /// caps (everything held): more deliveries may be taken into rows.
    fn under_limits(&self) -> bool {
        let c = self.options.config();
        let (m, b) = self.held();
        let (pm, pb) = self.paused();
        !self.cap_reached
            && m - pm < self.max_outstanding_messages
            && b - pb < c.max_outstanding_bytes
            && c.subscriber_buffer_max_messages.is_none_or(|cap| m < cap)
            && c.subscriber_buffer_max_bytes.is_none_or(|cap| b < cap)
    }

    /// Whether a delivery may be taken into rows now (else deliveries wait in the paused
    /// buffers, so the streams stay polled).
    fn may_take(&self, now: Instant) -> bool {
        !self.stopping
            && self
                .rate
                .as_ref()
                .is_none_or(|r| r.wait_until(now).is_none())
            && self.under_limits()
    }

    fn update_gauges(&self) {
        let (m, b) = self.held();
        let c = self.counters();
        c.pending_acks.set(m);
        c.buffered_bytes.set(b);
        c.pending_checkpoints.set(
            self.splits
                .iter()
                .map(|s| s.tracker.pending_checkpoints() as u64)
                .max()
                .unwrap_or(0),
        );
        c.checkpoint_lag_ms
            .set(self.last_commit.elapsed().as_millis() as u64);
        let now_ms = unix_ms_now();
        for s in &self.splits {
            // Publish times are the service's clock: a local clock behind it reads as 0.
            let (oldest, newest) = s.tracker.publish_time_range().unwrap_or((now_ms, now_ms));
            s.age.0.set(now_ms.saturating_sub(oldest).max(0) as u64);
            s.age.1.set(now_ms.saturating_sub(newest).max(0) as u64);
        }
    }

    /// When the first-checkpoint detector fires: armed while no checkpoint committed, the
    /// budget is not zero, and messages are held.
    fn first_checkpoint_deadline(&self) -> Option<Instant> {
        let ms = self.options.config().first_checkpoint_timeout_ms;
        (ms > 0 && !self.committed && self.held().0 > 0)
            .then(|| self.started + Duration::from_millis(ms))
    }

    fn first_checkpoint_error(&self, ctx: &SourceContext) -> anyhow::Error {
        let ms = self.options.config().first_checkpoint_timeout_ms;
        anyhow::anyhow!(
            "source subtask {} holds {} unacknowledged messages and no checkpoint completed within {} of starting ('{}'): checkpointing is off or too slow (checkpoint interval {:?}); nothing is acknowledged until a checkpoint completes, so the subscription would stall once flow control fills. Raise '{}' above the checkpoint interval, or checkpoint more often",
            ctx.task_info.task_index,
            self.held().0,
            crate::build_error::show(Duration::from_millis(ms)),
            pubsub_table_options::FIRST_CHECKPOINT_TIMEOUT,
            ctx.checkpoint_interval,
            pubsub_table_options::FIRST_CHECKPOINT_TIMEOUT,
        )
    }

    /// Metadata values of a message, in the order of the table's metadata columns.
    fn metadata(&self, split: usize, m: &Message, h: &Handler) -> Vec<FieldValue> {
        super::metadata::metadata_values(
            self.op.metadata_fields.iter().map(|f| f.key.as_str()),
            m,
            h.delivery_attempt(),
            &self.splits[split].subscription,
            self.config.dedup.as_ref().map(|d| d.attribute.as_str()),
        )
    }

    /// Format `avro`: each subscription's topic has an Avro schema (a
    /// [`pubsub_engine::ConfigError`] otherwise).
    async fn require_avro_topics(&self) -> anyhow::Result<()> {
        let admin = client::subscription_admin(&self.profile).await?;
        for s in &self.config.subscriptions {
            let name = client::subscription_path(&self.profile.project, &s.id);
            let sub =
                crate::diagnose::bounded(admin.get_subscription().set_subscription(name.clone()))
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot read subscription {name}: {e}"))?;
            let whose = format!("the topic of subscription {name}");
            crate::avro::require_avro_topic(&self.profile, &sub.topic, &whose).await?;
        }
        Ok(())
    }

    /// A [`pubsub_engine::PermanentError`]: Pub/Sub redelivers the same message after a
    /// restart, which fails on it again.
    fn decode_error(&self, split: usize, id: &str, e: &DeserializeError) -> anyhow::Error {
        pubsub_engine::PermanentError::wrap(anyhow::anyhow!(
            "message {id} from {} could not be decoded as {:?}: {} (the message was not acknowledged)",
            self.splits[split].subscription,
            self.op.format,
            e.reason
        ))
    }

    /// Records a failed message (`why`: what failed) in the run of failures; the job's
    /// error when the run passes `scan.max-consecutive-failures`. `decoded`: it failed
    /// at decoding, else its rows failed in SQL (the last of the run so far is then
    /// known only now, see [`FailureRun`]).
    fn count_failure(
        &mut self,
        split: usize,
        id: &str,
        why: &str,
        decoded: bool,
    ) -> anyhow::Result<()> {
        self.last_failure = format!(
            "message {id} from {} {why}",
            self.splits[split].subscription
        );
        let over = if decoded {
            self.failures.decode_failed()
        } else {
            self.failures.emitted(false)
        };
        match over {
            Some(n) => Err(self.too_many_failures(n)),
            None => Ok(()),
        }
    }

    /// A [`pubsub_engine::PermanentError`]: `n` messages in a row failed, more than
    /// `scan.max-consecutive-failures`. A restart would read the same messages (none of
    /// the run's last one and nothing after it was acknowledged) and fail on them again.
    fn too_many_failures(&self, n: u64) -> anyhow::Error {
        pubsub_engine::PermanentError::wrap(anyhow::anyhow!(
            "{n} messages in a row failed in source subtask {} (more than '{}' = {}) under '{}' = '{}': that looks like a systematic fault, such as a column type that does not match the data, rather than bad messages; the job stops instead of handling them all (messages not yet acknowledged are released for redelivery); the last: {}",
            self.subtask,
            pubsub_table_options::MAX_CONSECUTIVE_FAILURES,
            self.failures.max().map_or(-1, |m| m as i64),
            pubsub_table_options::DESERIALIZATION_FAILURE_POLICY,
            self.config.deserialization_failure_policy.as_str(),
            self.last_failure
        ))
    }

    /// The split `tag` belongs to, if it is that split's current tag. A delivery of
    /// stopped streams (a parked split, or after the final barrier) is nacked at once.
    fn route(&mut self, tag: usize, p: Pulled) -> Option<(usize, Pulled)> {
        let split = tag % self.splits.len().max(1);
        if self
            .splits
            .get(split)
            .is_some_and(|s| s.tag == tag && s.streams.is_some())
        {
            return Some((split, p));
        }
        if let Pulled::Message(_, h) = p {
            h.nack();
            self.counters().received.add(1);
        }
        None
    }

    /// Takes one event of the streams tagged `tag`. Returns the split to park when a
    /// delivery crossed a subscriber buffer cap.
    fn on_pulled(
        &mut self,
        tag: usize,
        p: Pulled,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<Option<usize>> {
        match self.route(tag, p) {
            Some((split, Pulled::Message(m, h))) => {
                if let Some(rate) = self.rate.as_mut() {
                    rate.took(Instant::now());
                }
                match self.admit(split, m, h)? {
                    Admit::Take(held) => self.decode(split, held, collector).map(|()| None),
                    Admit::Skip => Ok(None),
                    Admit::Park => Ok(Some(split)),
                }
            }
            Some((split, other)) => self.on_stream_event(split, other).map(|()| None),
            None => Ok(None),
        }
    }

    /// Takes one event while a flush waits for back-pressure: a delivery goes to its
    /// split's paused buffer. Returns the split to park when the delivery would cross its
    /// paused cap (the delivery was nacked, untracked).
    fn on_pulled_paused(&mut self, tag: usize, p: Pulled) -> anyhow::Result<Option<usize>> {
        match self.route(tag, p) {
            Some((split, Pulled::Message(m, h))) => {
                let size = m.data.len() as u64;
                if self.splits[split]
                    .paused
                    .would_cross(size, self.paused_caps)
                {
                    h.nack();
                    self.counters().received.add(1);
                    return Ok(Some(split));
                }
                match self.admit(split, m, h)? {
                    Admit::Take(held) => {
                        self.splits[split].paused.push(held);
                        Ok(None)
                    }
                    Admit::Skip => Ok(None),
                    Admit::Park => Ok(Some(split)),
                }
            }
            Some((split, other)) => self.on_stream_event(split, other).map(|()| None),
            None => Ok(None),
        }
    }

    /// A stream of split `split` went down, came back, or failed for good.
    fn on_stream_event(&mut self, split: usize, p: Pulled) -> anyhow::Result<()> {
        let sub = self.splits[split].subscription.clone();
        match p {
            Pulled::Message(..) => unreachable!("deliveries are taken by the callers"),
            Pulled::Reconnecting { stream, cause } => {
                self.splits[split].down.insert(stream);
                self.stream_closed();
                let which = if stream == pull::MONITOR {
                    "streaming pull".to_string()
                } else {
                    format!("streaming pull {stream}")
                };
                tracing::warn!(subscription = %sub, "{which} from {sub} interrupted: {cause}; reconnecting with backoff (held messages keep their leases)");
                Ok(())
            }
            Pulled::Recovered { stream, down_for } => {
                self.splits[split].down.remove(&stream);
                let which = if stream == pull::MONITOR {
                    "streaming pull".to_string()
                } else {
                    format!("streaming pull {stream}")
                };
                tracing::info!(subscription = %sub, "{which} from {sub} reconnected after {down_for:.1?} down");
                Ok(())
            }
            Pulled::Failed { code, error } => {
                let status = code.map_or_else(|| "error".to_string(), |c| format!("{c:?}"));
                anyhow::bail!("streaming pull from subscription {sub} failed permanently with status {status}: {error}")
            }
        }
    }

    /// Takes one delivery of split `split`: enforces the subscriber buffer caps and tracks
    /// it. Returns what to decode, `Skip` for a redelivery of a message still held, or
    /// `Park` when it would cross a cap (it was nacked): its split stops reading until a
    /// commit frees room, instead of leaving its streams unpolled.
    fn admit(&mut self, split: usize, m: Message, h: Delivery) -> anyhow::Result<Admit> {
        self.counters().received.add(1);
        let c = self.options.config();
        let (held, bytes) = self.held();
        let size = m.data.len() as u64;
        let over = c
            .subscriber_buffer_max_messages
            .is_some_and(|cap| held + 1 > cap)
            || c.subscriber_buffer_max_bytes
                .is_some_and(|cap| bytes + size > cap);
        if over && held == 0 {
            // Nothing held to commit: this message can never fit.
            h.nack();
            anyhow::bail!(
                "message {} from {} is {size} bytes, more than the subscriber buffer cap '{}' ({} bytes) allows even with nothing else held: raise the cap (the message was not acknowledged)",
                m.message_id,
                self.splits[split].subscription,
                pubsub_table_options::SUBSCRIBER_BUFFER_MAX_BYTES,
                c.subscriber_buffer_max_bytes.unwrap_or_default()
            );
        }
        if over {
            self.cap_reached = true;
            h.nack();
            self.counters().rejected.add(1);
            let n = self.counters().rejected.get();
            if should_log_bad(n) {
                tracing::warn!(subscription = %self.splits[split].subscription, "nacked message {} ({size} bytes) before tracking it: holding {held} messages / {bytes} bytes, it would cross the subscriber buffer cap ('{}' / '{}'); its split is parked until a commit frees room ({n} rejected so far)", m.message_id, pubsub_table_options::SUBSCRIBER_BUFFER_MAX_MESSAGES, pubsub_table_options::SUBSCRIBER_BUFFER_MAX_BYTES);
            }
            return Ok(Admit::Park);
        }
        if c.await_ack_confirmation_ms.is_some() && !matches!(h.handler(), Handler::ExactlyOnce(_))
        {
            // Never ack unconfirmed while confirmation was asked for: say so instead.
            h.nack();
            anyhow::bail!(
                "option '{}' is set, but subscription {} delivered message {} without exactly-once semantics, so its ack cannot be confirmed (the server does not treat the subscription as exactly-once; the Pub/Sub emulator never does): unset the option or enable exactly-once delivery",
                pubsub_table_options::AWAIT_ACK_CONFIRMATION,
                self.splits[split].subscription,
                m.message_id
            );
        }
        // The one copy of the id: the tracker and the buffers share it.
        let id = MessageId::from(m.message_id.as_str());
        let published_ms = m
            .publish_time
            .as_ref()
            .map(|t| t.seconds().saturating_mul(1_000) + i64::from(t.nanos()) / 1_000_000);
        let meta = self.metadata(split, &m, h.handler());
        // An empty value is no id (issue 31, item 3): it passes as a message without one.
        let dedup = self.dedup.as_ref().map(|d| {
            let value = m.attributes.get(&d.attribute).filter(|v| !v.is_empty());
            value.map(|v| Box::new((v.clone(), published_ms.unwrap_or(0))))
        });
        let writer = self.avro.as_ref().map(|r| r.writer(&m.attributes));
        let context = (bad_message_action(self.config.deserialization_failure_policy)
            == BadMessageAction::DeadLetter)
            .then(|| {
                Box::new(super::park::MessageContext {
                    attributes: m.attributes,
                    ordering_key: m.ordering_key,
                })
            });
        if self.splits[split]
            .tracker
            .receive(id.clone(), h, m.data.len(), published_ms)
            == Received::Duplicate
        {
            return Ok(Admit::Skip);
        }
        // Counted once per message taken, not per redelivery of one still held.
        let dedup = match (dedup, &self.dedup) {
            (Some(None), Some(d)) => {
                d.without.add(1);
                None
            }
            (record, _) => record.flatten(),
        };
        Ok(Admit::Take(Held {
            id,
            payload: m.data,
            meta,
            context,
            dedup,
            writer,
        }))
    }

    /// Decodes a tracked delivery into the buffer. A decode failure is handled by the
    /// failure policy.
    fn decode(
        &mut self,
        split: usize,
        held: Held,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<()> {
        // A copy of a record already seen is acknowledged with the next checkpoint and
        // yields no row; a first copy holds its id from now (its rows go out before the
        // next barrier, so the checkpoint that covers them holds the id).
        let mut seen = None;
        if let (Some(d), Some(record)) = (&self.dedup, &held.dedup) {
            let (value, published_ms) = record.as_ref();
            let check =
                d.set
                    .lock()
                    .expect("dedup lock")
                    .check(value, *published_ms, self.subtask)?;
            match check {
                super::dedup::Check::Duplicate => {
                    d.deduplicated.add(1);
                    self.splits[split].tracker.stage([&held.id]);
                    return Ok(());
                }
                super::dedup::Check::New { hash, behind } => {
                    if behind {
                        d.behind.add(1);
                    }
                    seen = Some(hash);
                }
            }
        }
        let decoded = match &held.writer {
            None => collector.deserialize_slice(&held.payload, &held.meta),
            Some(Ok((w, encoding))) => {
                collector.deserialize_avro(&held.payload, w, *encoding, &held.meta)
            }
            Some(Err(reason)) => Err(collector.failure(reason.clone())),
        };
        if let (Err(_), Some(h)) = (&decoded, seen) {
            // Only a message whose rows go out counts as seen.
            self.forget_seen(h);
        }
        match decoded {
            Ok(rows) => {
                if rows == 0 {
                    self.counters().skipped.add(1);
                }
                // A dead letter for a row failure needs the payload (kept, like the
                // context, only under the `dead-letter` policy).
                let letter = held.context.map(|c| (held.payload, c));
                self.failures.decoded();
                self.buffered.push(Buffered {
                    split,
                    id: held.id,
                    letter,
                    dedup: seen,
                });
            }
            Err(e) => {
                self.counters().in_error.add(1);
                if bad_message_action(self.config.deserialization_failure_policy)
                    == BadMessageAction::Fail
                {
                    return Err(self.decode_error(split, &held.id, &e));
                }
                let why = format!("could not be decoded as {:?}: {}", self.op.format, e.reason);
                // Past the bound, this message is left unhandled (released at close).
                self.count_failure(split, &held.id, &why, true)?;
                self.on_bad_message(split, held.id, held.payload, held.context, &why)?;
            }
        }
        Ok(())
    }

    /// Takes a record id out of the deduplication set: its message's rows did not go out.
    fn forget_seen(&self, h: u128) {
        if let Some(d) = &self.dedup {
            d.set.lock().expect("dedup lock").forget(h);
        }
    }

    /// Decodes up to `max` deliveries of the paused buffers, oldest first per split, while
    /// the limits allow; returns how many. Until every paused buffer is empty the streams
    /// are not read into rows, so a split's (and a key's) order holds.
    fn decode_paused(
        &mut self,
        max: usize,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<usize> {
        let mut n = 0;
        for split in 0..self.splits.len() {
            while n < max && self.may_take(Instant::now()) {
                let Some(held) = self.splits[split].paused.pop() else {
                    break;
                };
                if let Some(rate) = self.rate.as_mut() {
                    rate.took(Instant::now());
                }
                self.decode(split, held, collector)?;
                n += 1;
            }
        }
        Ok(n)
    }

    fn any_paused(&self) -> bool {
        self.splits.iter().any(|s| !s.paused.is_empty())
    }

    /// Parks split `split`: stops its streams, nacks its paused buffer, and leaves the
    /// stopped streams' shutdown to a task (it ends once the handles they leased are
    /// acked at a commit or released).
    async fn park(&mut self, split: usize) {
        let s = &mut self.splits[split];
        let Some(mut streams) = s.streams.take() else {
            return;
        };
        streams.stop_reading().await;
        let ids = s.paused.take_ids();
        for id in &ids {
            s.tracker.release(id);
        }
        s.down.clear();
        s.parked_at = Some(Instant::now());
        let sub = s.subscription.clone();
        self.stream_closed();
        // Its lease loops stay in `leases`: they end once the handles they leased are
        // acked at a commit or released.
        drop(streams);
        let caps = self.paused_caps;
        self.counters().parked.add(1);
        let n = self.counters().parked.get();
        if should_log_bad(n) {
            tracing::warn!(subscription = %sub, "split {} cannot take deliveries (back-pressure, flow control or the rate limit) and its paused buffer is full ({} messages; caps '{}' = {}, '{}' = {} bytes), or a subscriber buffer cap was reached: parked, {} messages nacked for redelivery, its streams stopped; fresh streams open once it can take again ({n} parks so far)", self.splits[split].index, ids.len(), pubsub_table_options::PAUSED_SPLIT_BUFFER_MAX_MESSAGES, caps.messages, pubsub_table_options::PAUSED_SPLIT_BUFFER_MAX_BYTES, caps.bytes, ids.len() + 1);
        }
    }

    /// A stream closed (parked, failed or restarted): what the server was still sending on
    /// it stays leased to it for one stream ack deadline, so the subtask is not idle
    /// before that has passed.
    fn stream_closed(&mut self) {
        let deadline = self
            .options
            .lease_extension()
            .unwrap_or(pull::DEFAULT_STREAM_ACK_DEADLINE);
        self.stranded_until = Some(Instant::now() + deadline);
    }

    /// Opens fresh streams for every parked split (not after the final barrier).
    fn reopen_parked(&mut self) {
        let Some(r) = self.reopen.as_ref() else {
            return;
        };
        if self.stopping {
            return;
        }
        let n = self.splits.len();
        let shared = self.stream_shared();
        for s in &mut self.splits {
            let Some(since) = s.parked_at else { continue };
            s.tag += n;
            s.streams = Some(PullStreams::start(
                r.subscriber.clone(),
                r.admin.clone(),
                &s.subscription,
                r.settings.clone(),
                shared.clone(),
                s.tag,
                r.tx.clone(),
            ));
            s.parked_at = None;
            tracing::debug!(subscription = %s.subscription, "split {} can take again after {:.1?} parked: fresh streams opened", s.index, since.elapsed());
        }
    }

    /// Applies the bad-message policy to a message that failed to decode, or whose rows
    /// failed a query's SELECT (`why` says which; none of its rows was emitted). `fail`
    /// is the caller's (the job fails; close nacks the handle). `drop`: the message
    /// is staged now (it emits no rows) so it is bound at the next barrier and acked on
    /// commit. `nack`: it is nacked at once, for the subscription's dead-letter policy.
    /// `dead-letter`: its payload is queued for the dead-letter queue (offered by the run
    /// loop, flushed before the next checkpoint is reported) and it is staged like `drop`.
    fn on_bad_message(
        &mut self,
        split: usize,
        id: MessageId,
        payload: bytes::Bytes,
        context: Option<Box<super::park::MessageContext>>,
        why: &str,
    ) -> anyhow::Result<()> {
        let sub = self.splits[split].subscription.clone();
        match bad_message_action(self.config.deserialization_failure_policy) {
            BadMessageAction::Fail => Err(pubsub_engine::PermanentError::wrap(anyhow::anyhow!(
                "message {id} from {sub} {why} (the message was not acknowledged)"
            ))),
            BadMessageAction::Drop => {
                self.splits[split].tracker.stage([&id]);
                let c = &self.counters().dropped;
                c.add(1);
                let n = c.get();
                if should_log_bad(n) {
                    tracing::warn!(subscription = %sub, "dropped message {id}: it {why} (policy 'drop': acknowledged with the next checkpoint; {n} dropped so far)");
                }
                Ok(())
            }
            BadMessageAction::Nack => {
                self.splits[split].tracker.release(&id);
                let c = &self.counters().nacked_bad;
                c.add(1);
                let n = c.get();
                if should_log_bad(n) {
                    tracing::warn!(subscription = %sub, "nacked message {id}: it {why} (policy 'nack': the dead-letter policy forwards it; {n} nacked so far)");
                }
                Ok(())
            }
            BadMessageAction::DeadLetter => {
                self.splits[split].tracker.stage([&id]);
                let error = format!("message {id} {why}");
                let (attributes, ordering_key) = context
                    .map(|c| (c.attributes.into_iter().collect(), c.ordering_key))
                    .unwrap_or_default();
                self.letters.push(DeadLetter {
                    payload,
                    connector: DEAD_LETTER_CONNECTOR,
                    destination: sub.clone(),
                    error,
                    subtask: self.subtask,
                    attributes,
                    ordering_key,
                    message_id: Some(id.to_string()),
                });
                let n = self.counters().in_error.get();
                if should_log_bad(n) {
                    let topic = self.dead_letter.as_ref().map_or("", |q| q.topic());
                    tracing::warn!(subscription = %sub, "dead-lettering message {id} to {topic}: it {why} (policy 'dead-letter': acknowledged with the checkpoint after its dead letter is published; {n} messages in error so far)");
                }
                Ok(())
            }
        }
    }

    /// Offers the dead letters decoding produced to the queue (an offer may wait for
    /// publishes at the queue's in-flight bound, within its flush timeout). Errors fail
    /// the job: the messages are staged but never bound, so close nacks them.
    async fn offer_letters(&mut self) -> anyhow::Result<()> {
        if self.letters.is_empty() {
            return Ok(());
        }
        let Some(q) = self.dead_letter.as_mut() else {
            anyhow::bail!("policy 'dead-letter' without a dead-letter queue");
        };
        for letter in self.letters.drain(..) {
            q.offer(letter).await?;
        }
        Ok(())
    }

    /// Before a checkpoint is reported: offers what is left and makes every dead letter
    /// durable. An error fails the job, so none of the checkpoint's messages is acked.
    async fn flush_dead_letters(&mut self) -> anyhow::Result<()> {
        self.offer_letters().await?;
        if let Some(q) = self.dead_letter.as_mut() {
            q.flush().await?;
        }
        Ok(())
    }

    /// Emits the buffered rows, then stages their messages. While the emit waits for
    /// back-pressure permits, deliveries keep being taken into the paused buffers (and a
    /// split that would cross its cap is parked); once it completes, parked splits reopen.
    async fn flush(&mut self, collector: &mut SourceCollector) -> anyhow::Result<()> {
        if self.buffered.is_empty() {
            return Ok(());
        }
        let emitted = {
            let mut emit = std::pin::pin!(collector.flush_buffer_checked());
            loop {
                let take = self.rx.is_some();
                let rx = self.rx.as_mut();
                tokio::select! {
                    biased;
                    r = &mut emit => break r,
                    pulled = async { rx.expect("guarded by take").recv().await }, if take => match pulled {
                        Some((tag, p)) => {
                            if let Some(split) = self.on_pulled_paused(tag, p)? {
                                self.park(split).await;
                            }
                        }
                        None => self.rx = None,
                    },
                }
            }
        };
        if !self.any_paused() && self.may_take(Instant::now()) {
            self.reopen_parked();
        }
        let flushed = match emitted {
            Ok(flushed) => flushed,
            Err(e) => {
                // The deserializer validates fully in `deserialize_slice`, so this is a
                // fallback: whatever the policy, a flush-time decode error fails the job.
                if let Some(d) = e.downcast_ref::<DeserializeError>() {
                    let (split, id) = self
                        .buffered
                        .get(d.message_index)
                        .map(|b| (b.split, b.id.clone()))
                        .unwrap_or_default();
                    return Err(self.decode_error(split, &id, d));
                }
                return Err(e);
            }
        };
        self.counters().fetches.add(1);
        if flushed.rejected.is_empty() {
            // The common case: every message's rows went out. Keeps the buffer's capacity.
            for i in 0..self.buffered.len() {
                if let Some(n) = self.failures.emitted(true) {
                    return Err(self.too_many_failures(n));
                }
                let b = &self.buffered[i];
                self.splits[b.split].tracker.stage([&b.id]);
            }
            self.buffered.clear();
            return Ok(());
        }
        let buffered = std::mem::take(&mut self.buffered);
        // Messages whose rows a query's SELECT failed on: none of their rows went out.
        let mut failures: Vec<Option<String>> = vec![None; buffered.len()];
        for r in flushed.rejected {
            let Some(slot) = failures.get_mut(r.message_index).filter(|s| s.is_none()) else {
                anyhow::bail!(
                    "internal error: a rejected message index {} is not buffered",
                    r.message_index
                );
            };
            *slot = Some(r.failure);
        }
        // In decode order, so the run of failures counts them as they came.
        for (b, failure) in buffered.into_iter().zip(failures) {
            let Some(failure) = failure else {
                if let Some(n) = self.failures.emitted(true) {
                    return Err(self.too_many_failures(n));
                }
                self.splits[b.split].tracker.stage([&b.id]);
                continue;
            };
            self.counters().in_error.add(1);
            if let Some(h) = b.dedup {
                self.forget_seen(h);
            }
            let why = format!("failed in SQL: {failure}");
            // Past the bound, this message is left unhandled (released at close).
            self.count_failure(b.split, &b.id, &why, false)?;
            let (payload, context) = match b.letter {
                Some((p, c)) => (p, Some(c)),
                None => (bytes::Bytes::new(), None),
            };
            self.on_bad_message(b.split, b.id, payload, context, &why)?;
        }
        Ok(())
    }

    /// Checkpoint `epoch` committed: acks what was bound to it; with
    /// `await_ack_confirmation`, waits for the server to confirm them (exactly-once
    /// subscriptions) and fails on a rejection or the timeout.
    async fn commit(&mut self, epoch: u64) -> anyhow::Result<()> {
        let wait = self
            .options
            .config()
            .await_ack_confirmation_ms
            .map(Duration::from_millis);
        let mut confirmations: Vec<BoxFuture<'static, Result<(), String>>> = Vec::new();
        let mut n = 0;
        for s in &mut self.splits {
            n += match wait {
                None => s.tracker.commit(epoch),
                Some(_) => s
                    .tracker
                    .commit_with(epoch, |d| match d.into_ack_handler() {
                        Handler::ExactlyOnce(eo) => confirmations.push(Box::pin(async move {
                            eo.confirmed_ack().await.map_err(|e| e.to_string())
                        })),
                        other => other.ack(),
                    }),
            };
        }
        self.counters().acked.add(n as u64);
        self.cap_reached = false;
        self.committed = true;
        self.last_commit = Instant::now();
        if let (Some(wait), false) = (wait, confirmations.is_empty()) {
            let count = confirmations.len();
            match tokio::time::timeout(wait, futures::future::join_all(confirmations)).await {
                Err(_) => anyhow::bail!(
                    "the acks of checkpoint {epoch} ({count} messages) were not confirmed within {} ('{}'): the server did not answer in time; unconfirmed messages are redelivered",
                    crate::build_error::show(wait),
                    pubsub_table_options::AWAIT_ACK_CONFIRMATION
                ),
                Ok(results) => {
                    if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
                        anyhow::bail!("an ack of checkpoint {epoch} was rejected by the server: {e} (the message will be redelivered)");
                    }
                    self.counters().confirmed.add(results.len() as u64);
                }
            }
        }
        Ok(())
    }

    /// Stops every split's streams and nacks whatever they forwarded but we did not take,
    /// and what waits undecoded in the paused buffers (rows after the final barrier would
    /// never be committed).
    async fn stop_pulling(&mut self) {
        for s in &mut self.splits {
            if let Some(streams) = s.streams.as_mut() {
                streams.stop_reading().await;
            }
            for id in s.paused.take_ids() {
                s.tracker.release(&id);
            }
        }
        let mut forwarded = 0u64;
        if let Some(rx) = self.rx.as_mut() {
            while let Ok((_, p)) = rx.try_recv() {
                if let Pulled::Message(_, h) = p {
                    h.nack();
                    forwarded += 1;
                }
            }
        }
        if self.counters.is_some() {
            self.counters().received.add(forwarded);
        }
    }
}

#[async_trait]
impl SourceOperator for SourceReader {
    fn name(&self) -> String {
        let subs: Vec<&str> = self
            .config
            .subscriptions
            .iter()
            .map(|s| s.id.as_str())
            .collect();
        format!("pubsub-source({})", subs.join(";"))
    }

    async fn on_start(&mut self, ctx: &mut SourceContext) -> anyhow::Result<()> {
        self.report_can_pull(ctx, false);
        let counter = |n| ctx.counter(n);
        let gauge = |n| {
            ctx.metrics
                .gauge(n, &ctx.task_info.operator_id, ctx.task_info.task_index)
        };
        self.counters = Some(Counters {
            received: counter(MESSAGES_RECEIVED),
            acked: counter(MESSAGES_ACKED),
            nacked: counter(MESSAGES_NACKED),
            nack_unsent: counter(MESSAGES_NACK_UNSENT),
            dropped: counter(MESSAGES_DROPPED),
            nacked_bad: counter(MESSAGES_NACKED_BAD),
            rejected: counter(MESSAGES_REJECTED),
            skipped: counter(RECORDS_SKIPPED),
            in_error: counter(RECORDS_IN_ERROR),
            fetches: counter(FETCHES),
            confirmed: counter(ACKS_CONFIRMED),
            reconnects: counter(PULL_RECONNECTS),
            parked: counter(SPLITS_PARKED),
            pending_acks: gauge(PENDING_ACKS),
            buffered_bytes: gauge(BUFFERED_BYTES),
            pending_checkpoints: gauge(PENDING_CHECKPOINTS),
            checkpoint_lag_ms: gauge(CHECKPOINT_LAG_MS),
        });
        self.subtask = ctx.task_info.task_index;
        if self.avro.is_some() {
            self.require_avro_topics().await?;
        }
        if let Some(d) = self.config.dedup.clone() {
            let parallelism = ctx.task_info.parallelism;
            let restored = &ctx.restored_subtasks;
            let set = super::dedup::shared(ctx.task_info.run, &ctx.task_info.operator_id, || {
                let mut set = super::dedup::SeenSet::new(d.window_ms, d.max_ids);
                for (old, state) in restored {
                    if let Some(ids) = state.values.get(super::dedup::STATE_KEY) {
                        set.restore(ids, super::dedup::new_owner(*old, parallelism))
                            .map_err(|e| {
                                e.context(format!(
                                    "restoring the deduplication ids of subtask {old}"
                                ))
                            })?;
                    }
                }
                Ok(set)
            })?;
            tracing::info!(
                "deduplicating on attribute '{}' (window {} s, {} ids restored)",
                d.attribute,
                d.window_ms / 1000,
                set.lock().expect("dedup lock").len()
            );
            self.dedup = Some(Dedup {
                attribute: d.attribute,
                set,
                deduplicated: counter(MESSAGES_DEDUPLICATED),
                without: counter(MESSAGES_WITHOUT_DEDUP_ATTRIBUTE),
                behind: counter(MESSAGES_BEHIND_DEDUP_WINDOW),
            });
        }
        if let Some(q) = self.dead_letter.as_mut() {
            crate::dead_letter::check_not_inherited(&self.profile, q, "scan.")?;
            // Fails fast on a missing topic (never created) or unusable credentials.
            q.set_counter(ctx.counter(DEAD_LETTERS_PUBLISHED));
            q.open().await?;
        }
        // The start position was applied (or needed nothing) to every subscription before
        // any subtask started; a restore finds the record and seeks only subscriptions
        // added since (SPEC 5.4).
        let position = super::PubSubStartPosition::from_config(self.config.start_position)?;
        ctx.state.values.insert(
            super::start_position::STATE_KEY.to_string(),
            super::start_position::record(
                &ctx.restored_subtasks,
                position,
                &self
                    .config
                    .subscriptions
                    .iter()
                    .map(|s| client::subscription_path(&self.profile.project, &s.id))
                    .collect::<Vec<_>>(),
            ),
        );
        let c = self.options.config().clone();
        // The client ends lease extension silently at max lease; the job-level prepare
        // checked it against the checkpoint interval (SPEC 5.3).
        let period = Duration::from_millis(c.max_ack_extension_period_ms);
        let per_key = self.config.ordering_mode == OrderingMode::PerKey;
        let plan = super::splits::splits_for(
            ctx.task_info.task_index,
            ctx.task_info.parallelism,
            self.config.subscriptions.len(),
            per_key,
        );
        if plan.is_empty() {
            tracing::warn!(
                "source subtask {} has no split to read ({} subscriptions under ordering 'per-key', parallelism {}): it stays idle",
                ctx.task_info.task_index,
                self.config.subscriptions.len(),
                ctx.task_info.parallelism
            );
            self.report_can_pull(ctx, true);
            return Ok(());
        }
        let streams = c.parallel_pull_count.saturating_mul(plan.len() as u32);
        self.max_outstanding_messages = policy::effective_max_outstanding(
            c.max_outstanding_messages,
            ctx.checkpoint_interval,
            streams,
        );
        tracing::info!(
            "flow control: at most {} messages ({}) and {} bytes held per subtask",
            self.max_outstanding_messages,
            if c.max_outstanding_messages.is_some() {
                "set by 'scan.flow-control.max-outstanding-element-count'"
            } else {
                "default: 10000 msg/s per stream x 2.5 checkpoint intervals, at least 1000"
            },
            c.max_outstanding_bytes
        );
        let subscriber = client::subscriber(&self.profile).await?;
        let admin = client::subscription_admin(&self.profile).await?;
        let (tx, rx) = mpsc::channel(CHANNEL);
        self.rx = Some(rx);
        let settings = StreamSettings {
            streams: c.parallel_pull_count,
            max_outstanding_messages: self.max_outstanding_messages,
            max_outstanding_bytes: c.max_outstanding_bytes,
            max_lease: period,
            max_lease_extension: self.options.lease_extension(),
        };
        let (messages, bytes) = self
            .options
            .paused_split_caps(self.max_outstanding_messages);
        self.paused_caps = PausedCaps { messages, bytes };
        self.reopen = Some(Reopen {
            subscriber: subscriber.clone(),
            admin: admin.clone(),
            settings: settings.clone(),
            tx: tx.clone(),
        });
        for (pos, split) in plan.iter().enumerate() {
            let s = &self.config.subscriptions[split.subscription];
            let subscription = client::subscription_path(&self.profile.project, &s.id);
            let streams = PullStreams::start(
                subscriber.clone(),
                admin.clone(),
                &subscription,
                settings.clone(),
                self.stream_shared(),
                pos,
                tx.clone(),
            );
            self.splits.push(Split {
                index: split.index,
                streams: Some(streams),
                tag: pos,
                tracker: AckTracker::default(),
                down: HashSet::new(),
                paused: PausedBuffer::default(),
                parked_at: None,
                age: (
                    subscription_gauge(ctx, OLDEST_UNACKED_MESSAGE_AGE_MS, &subscription),
                    subscription_gauge(ctx, EVENT_TIME_LAG_MS, &subscription),
                ),
                subscription,
            });
        }
        tracing::debug!(
            "source subtask {} reads splits {:?}",
            ctx.task_info.task_index,
            self.splits
                .iter()
                .map(|s| (s.index, s.subscription.as_str()))
                .collect::<Vec<_>>()
        );
        self.rate = c
            .rate_limit_messages_per_second
            .map(super::rate::RateLimiter::new);
        self.started = Instant::now();
        self.last_commit = self.started;
        Ok(())
    }

    async fn run(
        &mut self,
        ctx: &mut SourceContext,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<SourceFinishType> {
        let fetch = self.options.config().max_records_per_fetch as usize;
        collector.initialize_deserializer(&self.op.schema, fetch, LINGER)?;
        // Under `fail` a row failure fails the job in its query's operator; otherwise the
        // policy applies to it as to a message that cannot be decoded.
        collector.check_rows(
            bad_message_action(self.config.deserialization_failure_policy)
                != BadMessageAction::Fail,
        );
        let mut gauge_tick = tokio::time::interval(GAUGES_EVERY);
        gauge_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.counters.is_some() {
                self.update_gauges();
            }
            // Deliveries taken while the subtask could not take them come first.
            if self.any_paused()
                && self.decode_paused(fetch, collector)? > 0
                && (collector.should_flush() || collector.buffered_messages() >= fetch)
            {
                self.flush(collector).await?;
            }
            self.offer_letters().await?;
            let now = Instant::now();
            let may_take = self.may_take(now);
            let paused_left = self.any_paused();
            if may_take && !paused_left {
                self.reopen_parked();
            }
            let stopping = self.stopping;
            let flush_at = collector.flush_deadline().map(Instant::from_std);
            let rate_wait = self.rate.as_ref().and_then(|r| r.wait_until(now));
            let can_pull = may_take && !paused_left && self.rx.is_some();
            // Held back by flow control, a cap or the rate limit: keep every stream polled
            // into the paused buffers, so no delivery outlives its lease unread there.
            let hold = !stopping && !may_take && self.rx.is_some();
            // Reading, as the idle clock sees it: not held back, no stream down.
            let all_up = self.splits.iter().all(|s| s.down.is_empty());
            let stranded = self.stranded_until.filter(|t| *t > now);
            let reading =
                stopping || self.splits.is_empty() || (can_pull && all_up && stranded.is_none());
            self.report_can_pull(ctx, reading);
            let first_deadline = self.first_checkpoint_deadline();
            let rx = self.rx.as_mut();
            tokio::select! {
                biased;
                ctrl = ctx.control_rx.recv() => match ctrl {
                    Some(ControlMessage::Checkpoint(barrier)) => {
                        if barrier.then_stop {
                            self.stopping = true;
                            self.stop_pulling().await;
                        }
                        self.flush(collector).await?;
                        // Every staged bad message's dead letter is durable before the
                        // checkpoint that acks it is reported.
                        self.flush_dead_letters().await?;
                        for s in &mut self.splits {
                            s.tracker.bind(barrier.epoch);
                        }
                        if let Some(d) = &self.dedup {
                            let ids = d.set.lock().expect("dedup lock").snapshot(self.subtask);
                            ctx.state.values.insert(super::dedup::STATE_KEY.to_string(), ids);
                        }
                        ctx.start_checkpoint(barrier, collector).await?;
                    }
                    Some(ControlMessage::Commit { epoch }) => self.commit(epoch).await?,
                    Some(ControlMessage::Stop { mode: StopMode::Graceful }) => return Ok(SourceFinishType::Graceful),
                    Some(ControlMessage::Stop { mode: StopMode::Immediate }) | None => return Ok(SourceFinishType::Immediate),
                },
                pulled = async { rx.expect("guarded by can_pull or hold").recv().await }, if can_pull || hold => match pulled {
                    Some((tag, p)) => {
                        if let (Some(r), Pulled::Message(m, _)) = (self.avro.as_mut(), &p) {
                            r.fetch(&m.attributes).await?;
                        }
                        let park = if can_pull {
                            self.on_pulled(tag, p, collector)?
                        } else {
                            self.on_pulled_paused(tag, p)?
                        };
                        if let Some(split) = park {
                            self.park(split).await;
                        }
                        self.offer_letters().await?;
                        if collector.should_flush() || collector.buffered_messages() >= fetch {
                            self.flush(collector).await?;
                        }
                    }
                    None => self.rx = None,
                },
                _ = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                    self.flush(collector).await?;
                }
                _ = tokio::time::sleep_until(rate_wait.unwrap_or_else(Instant::now)), if rate_wait.is_some() => {}
                () = std::future::ready(()), if paused_left && may_take => {}
                _ = tokio::time::sleep_until(stranded.unwrap_or_else(Instant::now)), if stranded.is_some() => {}
                _ = gauge_tick.tick() => {}
                _ = tokio::time::sleep_until(first_deadline.unwrap_or_else(Instant::now)), if first_deadline.is_some() => {
                    if self.first_checkpoint_deadline().is_some_and(|d| d <= Instant::now()) {
                        return Err(self.first_checkpoint_error(ctx));
                    }
                }
            }
        }
    }

    /// Stops the streams, nacks everything still held so Pub/Sub redelivers it at once,
    /// then awaits each subscriber's shutdown so the final acks and nacks are sent; the
    /// whole close is bounded by `shutdown_timeout`, all splits' waits overlapping.
    async fn on_close(&mut self, _ctx: &mut SourceContext) -> anyhow::Result<()> {
        let timeout = Duration::from_millis(self.options.config().shutdown_timeout_ms);
        let deadline = Instant::now() + timeout;
        if tokio::time::timeout_at(deadline, self.stop_pulling())
            .await
            .is_err()
        {
            tracing::warn!(
                "stopping the streams did not finish within the shutdown timeout ({timeout:?})"
            );
        }
        let mut n = 0;
        for s in &mut self.splits {
            n += s.tracker.release_all();
            // Stopped above; dropping them ends their tasks if the stop timed out.
            drop(s.streams.take());
        }
        if n > 0 {
            tracing::info!("released {n} unacknowledged messages for redelivery");
        }
        // The nacks are sent by each stream's lease loop, which ends once every request
        // it started completed: wait for all of them, or the process could exit first.
        let unsent = self
            .leases
            .close(deadline.saturating_duration_since(Instant::now()))
            .await;
        if self.counters.is_some() {
            self.counters().nack_unsent.add(unsent);
            self.update_gauges();
        }
        if unsent > 0 {
            tracing::warn!("subscriber shutdown did not finish within the shutdown timeout ('{}' = {timeout:?}): {unsent} nacks were not confirmed sent; those messages return when their lease runs out", pubsub_table_options::SHUTDOWN_TIMEOUT);
        }
        // Last, with a budget of its own: best effort, nothing relies on it (every letter
        // of a completed checkpoint was flushed before it was reported).
        if let Some(q) = self.dead_letter.as_mut() {
            q.close().await;
        }
        Ok(())
    }
}
