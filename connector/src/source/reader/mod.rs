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
//!
//! One file per concern (decision 0034): this one holds the subtask's state and its run
//! loop (one `select!` over control messages, the split streams and the deadlines);
//! [`start`] opens the subtask, [`intake`] takes stream events, [`flow`] holds flow
//! control and parking, [`decode`] decodes and applies the bad-message policies,
//! [`dedup`] checks record ids, [`checkpoint`] emits, binds and acks, [`metrics`] keeps
//! the counters and gauges.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use google_cloud_pubsub::client::{Subscriber, SubscriptionAdmin};
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::subscriber::handler::Handler;
use pubsub_engine_format::{DeserializeError, FieldValue};
use pubsub_engine_spi::{
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

mod align;
mod backlog;
mod checkpoint;
mod decode;
mod dedup;
mod flow;
mod intake;
mod metrics;
mod replay;
mod start;
pub(crate) mod watermark;

use decode::Buffered;
use dedup::Dedup;
use flow::{pull_plan, PullInputs, PullPlan, Reopen};
use metrics::Counters;

/// The longest a decoded row waits to be emitted.
const LINGER: Duration = Duration::from_millis(50);
/// Events of all splits of a subtask wait in one channel of this many.
const CHANNEL: usize = 64;
/// The time-based gauges (checkpoint lag, message ages) are refreshed at least this
/// often while the subtask waits, so a stalled source shows them rising.
const GAUGES_EVERY: Duration = Duration::from_secs(1);
/// While deliveries queue one behind another, the gauges and the watermark are refreshed
/// at most this often instead of once per delivery (three clock reads and a walk of the
/// splits each; decision 0049); once the queue is empty, at once.
const GAUGES_BUSY_EVERY: Duration = Duration::from_millis(10);

/// Sleeps until `at`, or for ever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

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
    /// Watermark alignment paused it (see [`align`]): its deliveries wait in `paused`.
    paused_for_alignment: bool,
    /// Gauges of this split's subscription: [`OLDEST_UNACKED_MESSAGE_AGE_MS`] and
    /// [`EVENT_TIME_LAG_MS`] (a subtask reads each subscription through one split at most).
    age: (Gauge, Gauge),
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
    /// Event time and watermarks of the splits (set up in `on_start`; none without splits).
    watermarks: Option<watermark::Watermarks>,
    /// When the run loop last advanced the watermarks (their clock for idleness).
    watermark_at: Instant,
    /// The watermark to send into the dataflow (the collector sends a repeat once).
    watermark_out: Option<pubsub_engine_spi::Watermark>,
    /// What the watermark is computed from (`watermark::event_time_source`), kept beside
    /// it in each checkpoint.
    event_time_source: String,
    /// `scan.max-consecutive-failures`: the messages that failed in a row.
    failures: FailureRun,
    /// The latest failed message and why (for the error when the run passes its bound).
    last_failure: String,
    /// Index among the metadata values of the hidden event-time column a windowed query
    /// reads (`pubsub_engine_spi::EVENT_TIME`), filled with the message's event time.
    event_time_slot: Option<usize>,
    /// For a table read by a window: deliveries the restored checkpoint already holds
    /// (set up in `on_start`).
    replays: Option<replay::Replays>,
    /// Watermark alignment, when the table names a group (set up in `on_start`).
    alignment: Option<align::Aligned>,
    /// The backlog bounds of its subscriptions, for a table a window reads (set up in
    /// `on_start`; decision 0047).
    backlog: Option<backlog::BacklogBounds>,
}

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
            avro: (op.format == pubsub_engine_spi::Format::Avro)
                .then(|| crate::avro::Revisions::new(profile.clone())),
            watermarks: None,
            watermark_at: Instant::now(),
            watermark_out: None,
            event_time_source: String::new(),
            failures: FailureRun::new(config.max_consecutive_failures),
            last_failure: String::new(),
            event_time_slot: op
                .metadata_fields
                .iter()
                .position(|f| f.key == pubsub_engine_spi::EVENT_TIME),
            replays: None,
            alignment: None,
            backlog: None,
            profile,
            config,
            options,
            op,
        })
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
        self.start(ctx).await
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
        // The last event was a delivery and more are queued; when the gauges were refreshed.
        let (mut busy, mut refreshed) = (false, Instant::now());
        // One timer for the linger deadline, re-armed when the deadline moves (once per
        // batch), instead of one registered and dropped per delivery (decision 0049).
        let flush_timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(flush_timer);
        let mut flush_armed: Option<Instant> = None;
        loop {
            let mut skipped = false;
            if self.counters.is_some() {
                let now = Instant::now();
                if !busy || now >= refreshed + GAUGES_BUSY_EVERY {
                    self.update_gauges();
                    refreshed = now;
                } else {
                    skipped = true;
                }
            }
            busy = false;
            if let Some(w) = self.watermark_out.take() {
                collector.emit_watermark(w)?;
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
            let flush_at = collector.flush_deadline().map(Instant::from_std);
            if let Some(at) = flush_at.filter(|at| flush_armed != Some(*at)) {
                flush_timer.as_mut().reset(at);
                flush_armed = Some(at);
            }
            let rate_wait = self.rate.as_ref().and_then(|r| r.wait_until(now));
            let stranded = self.stranded_until.filter(|t| *t > now);
            let PullPlan {
                can_pull,
                hold,
                reading,
            } = pull_plan(PullInputs {
                stopping: self.stopping,
                may_take,
                paused_left,
                open: self.rx.is_some(),
                no_splits: self.splits.is_empty(),
                all_up: self.splits.iter().all(|s| s.down.is_empty()),
                stranded: stranded.is_some(),
                aligned_waiting: self.alignment_waiting(),
            });
            // A skipped refresh waits for no tick when no delivery will be read next.
            if skipped && !(can_pull || hold) {
                self.update_gauges();
                refreshed = Instant::now();
                if let Some(w) = self.watermark_out.take() {
                    collector.emit_watermark(w)?;
                }
            }
            self.report_can_pull(ctx, reading);
            let first_deadline = self.first_checkpoint_deadline();
            let rx = self.rx.as_mut();
            let aligned = self.alignment.as_mut();
            tokio::select! {
                biased;
                ctrl = ctx.control_rx.recv() => match ctrl {
                    Some(ControlMessage::Checkpoint(barrier)) => {
                        self.on_barrier(barrier, ctx, collector).await?;
                    }
                    Some(ControlMessage::Commit { epoch }) => self.commit(epoch).await?,
                    Some(ControlMessage::Stop { mode: StopMode::Graceful }) => return Ok(SourceFinishType::Graceful),
                    Some(ControlMessage::Stop { mode: StopMode::Immediate }) | None => return Ok(SourceFinishType::Immediate),
                },
                pulled = async { rx.expect("guarded by can_pull or hold").recv().await }, if can_pull || hold => match pulled {
                    Some((tag, p)) => {
                        self.on_event(tag, p, can_pull, fetch, collector).await?;
                        busy = self.rx.as_ref().is_some_and(|rx| !rx.is_empty());
                    }
                    None => self.rx = None,
                },
                _ = &mut flush_timer, if flush_at.is_some() => {
                    self.flush(collector).await?;
                }
                // Lazy: a disabled branch's future is built but never polled, and building
                // a `Sleep` reads the clock and the runtime handle.
                () = sleep_until_some(rate_wait), if rate_wait.is_some() => {}
                () = std::future::ready(()), if paused_left && may_take => {}
                () = sleep_until_some(stranded), if stranded.is_some() => {}
                () = async { aligned.expect("guarded").member.changed().await }, if aligned.is_some() => {
                    self.on_group_watermark();
                }
                _ = gauge_tick.tick() => {}
                () = sleep_until_some(first_deadline), if first_deadline.is_some() => {
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
        // The probes finish the snapshot they are at while the streams close.
        if let Some(b) = self.backlog.as_ref() {
            b.stop();
        }
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
        // Within what is left of the same budget.
        if let Some(b) = self.backlog.as_mut() {
            b.close(deadline.saturating_duration_since(Instant::now()))
                .await;
        }
        // Last, with a budget of its own: best effort, nothing relies on it (every letter
        // of a completed checkpoint was flushed before it was reported).
        if let Some(q) = self.dead_letter.as_mut() {
            q.close().await;
        }
        Ok(())
    }
}
