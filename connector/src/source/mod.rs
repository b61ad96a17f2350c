//! The Pub/Sub source operator: StreamingPull streams feed a bounded channel; the run
//! loop decodes messages into rows, tracks every handle (see [`tracker`]) and acks only
//! on `Commit` of the checkpoint a message was bound to.
//!
//! Streams are kept alive across ends and retryable failures (see [`pull`]): one WARN per
//! incident naming the subscription and the cause, an INFO with the downtime when it
//! recovers, counter `pull_reconnects`. Permanent statuses fail the job.
//!
//! `ctx.set_can_pull` reports whether the subtask is reading: false before the streams
//! open, while flow control holds it (held messages or bytes at the limit) and while any
//! stream reconnects; the runtime's `--stop-when-idle` clock runs only while it is true.
//!
//! Memory: each held message costs its payload plus the tracker entry, the client's
//! handle and lease bookkeeping. Measured (`measure_memory_per_held_message` in
//! tests/source.rs, emulator, 4 streams): holding 50,000 ~12-byte messages with a 1 h
//! checkpoint interval grew the `pubsub-connector run` RSS from 21 MiB to 46 MiB, about
//! 540 bytes per held message besides its payload. The default element limit (250,000
//! per stream at the 10 s default interval) thus costs ~135 MB per stream at most besides
//! payloads; `scan.flow-control.max-outstanding-request-bytes` (100 MB) bounds payloads.

pub mod backoff;
pub mod policy;
mod pull;
pub mod tracker;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::subscriber::handler::Handler;
use pubsub_engine::format::{DeserializeError, FieldValue};
use pubsub_engine::{
    ControlMessage, Counter, OperatorConfig, SourceCollector, SourceContext, SourceFinishType,
    SourceOperator, StopMode, MESSAGES_ACKED, MESSAGES_NACKED, MESSAGES_RECEIVED,
};
use pubsub_schema::{DeserializationFailurePolicy, PubSubProfile, SourceConfig};
use tokio::time::Instant;

use self::policy::{bad_message_action, should_log_bad, BadMessageAction};
use self::pull::{PullStreams, Pulled, StreamSettings};
use self::tracker::{AckTracker, Received};
use crate::client;
use crate::diagnose::{self, Resource};

/// Counter: decode failures acknowledged under policy `drop`.
pub const MESSAGES_DROPPED: &str = "messages_dropped";
/// Counter: decode failures nacked under policy `nack`.
pub const MESSAGES_NACKED_BAD: &str = "messages_nacked_bad";
/// Counter: streaming pull reopen attempts after a stream ended or failed.
pub const PULL_RECONNECTS: &str = "pull_reconnects";

/// Rows per emitted batch, and the longest a decoded row waits to be emitted.
const BATCH_SIZE: usize = 512;
const LINGER: Duration = Duration::from_millis(50);

/// One subtask of a Pub/Sub source table.
pub struct PubSubSource {
    profile: PubSubProfile,
    config: SourceConfig,
    op: OperatorConfig,
    subscription: String,
    streams: Option<PullStreams>,
    tracker: AckTracker<Handler>,
    /// Ids decoded into the collector's buffer, in buffer order (not yet emitted).
    buffered: Vec<String>,
    counters: Option<Counters>,
    /// The effective held-messages limit (explicit option, or sized in `on_start`).
    max_outstanding_messages: u64,
    /// Streams currently reconnecting.
    down: std::collections::HashSet<usize>,
    /// The last value given to `ctx.set_can_pull`.
    reported_can_pull: Option<bool>,
}

struct Counters {
    received: Counter,
    acked: Counter,
    nacked: Counter,
    dropped: Counter,
    nacked_bad: Counter,
    reconnects: Counter,
}

impl PubSubSource {
    pub fn new(profile: PubSubProfile, config: SourceConfig, op: OperatorConfig) -> Self {
        let subscription = client::subscription_path(&profile.project, &config.subscription);
        PubSubSource {
            profile,
            config,
            op,
            subscription,
            streams: None,
            tracker: AckTracker::default(),
            buffered: Vec::new(),
            counters: None,
            max_outstanding_messages: policy::MIN_DEFAULT_OUTSTANDING,
            down: Default::default(),
            reported_can_pull: None,
        }
    }

    /// Tells the runtime whether this subtask is reading (only on change).
    fn report_can_pull(&mut self, ctx: &SourceContext, can_pull: bool) {
        if self.reported_can_pull != Some(can_pull) {
            ctx.set_can_pull(can_pull);
            self.reported_can_pull = Some(can_pull);
        }
    }

    fn counters(&self) -> &Counters {
        self.counters
            .as_ref()
            .expect("counters are set in on_start")
    }

    fn under_flow_control(&self) -> bool {
        (self.tracker.held_messages() as u64) < self.max_outstanding_messages
            && (self.tracker.held_bytes() as u64) < self.config.max_outstanding_bytes
    }

    /// Metadata values of a message, in the order of the table's metadata columns.
    fn metadata(&self, m: &Message) -> Vec<FieldValue> {
        self.op
            .metadata_fields
            .iter()
            .map(|f| match f.key.as_str() {
                "message-id" => FieldValue::String(m.message_id.clone()),
                "publish-time" => m.publish_time.as_ref().map_or(FieldValue::Null, |t| {
                    FieldValue::TimestampNanos(t.seconds() * 1_000_000_000 + i64::from(t.nanos()))
                }),
                "attributes" => {
                    let sorted: std::collections::BTreeMap<_, _> = m.attributes.iter().collect();
                    FieldValue::String(serde_json::to_string(&sorted).unwrap_or_default())
                }
                crate::connector::ORDERING_KEY if m.ordering_key.is_empty() => FieldValue::Null,
                crate::connector::ORDERING_KEY => FieldValue::String(m.ordering_key.clone()),
                _ => FieldValue::Null,
            })
            .collect()
    }

    fn decode_error(&self, id: &str, e: &DeserializeError) -> anyhow::Error {
        anyhow::anyhow!(
            "message {id} from {} could not be decoded as {:?}: {} (the message was not acknowledged)",
            self.subscription,
            self.op.format,
            e.reason
        )
    }

    /// Takes one delivery: tracks it, decodes it into the buffer (first delivery only).
    /// A decode failure is handled by `scan.deserialization-failure-policy`.
    fn on_message(
        &mut self,
        m: Message,
        h: Handler,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<()> {
        self.counters().received.add(1);
        let id = m.message_id.clone();
        if self.tracker.receive(id.clone(), h, m.data.len()) == Received::Duplicate {
            return Ok(());
        }
        let meta = self.metadata(&m);
        let payload: Bytes = m.data;
        match collector.deserialize_slice(&payload, &meta) {
            Ok(_) => self.buffered.push(id),
            Err(e) => self.on_bad_message(id, &e)?,
        }
        Ok(())
    }

    /// Applies the bad-message policy to a message that failed to decode (nothing of it
    /// was buffered). `fail`: the job fails (close nacks the handle). `drop`: the message
    /// is staged now (it emits no rows) so it is bound at the next barrier and acked on
    /// commit. `nack`: it is nacked at once, for the subscription's dead-letter policy.
    fn on_bad_message(&mut self, id: String, e: &DeserializeError) -> anyhow::Result<()> {
        match bad_message_action(self.config.deserialization_failure_policy) {
            BadMessageAction::Fail => Err(self.decode_error(&id, e)),
            BadMessageAction::Drop => {
                self.tracker.stage([&id]);
                let c = &self.counters().dropped;
                c.add(1);
                let n = c.get();
                if should_log_bad(n) {
                    tracing::warn!(subscription = %self.subscription, "dropped message {id}: it could not be decoded as {:?}: {} (policy 'drop': acknowledged with the next checkpoint; {n} dropped so far)", self.op.format, e.reason);
                }
                Ok(())
            }
            BadMessageAction::Nack => {
                self.tracker.release(&id);
                let c = &self.counters().nacked_bad;
                c.add(1);
                self.counters().nacked.add(1);
                let n = c.get();
                if should_log_bad(n) {
                    tracing::warn!(subscription = %self.subscription, "nacked message {id}: it could not be decoded as {:?}: {} (policy 'nack': the dead-letter policy forwards it; {n} nacked so far)", self.op.format, e.reason);
                }
                Ok(())
            }
        }
    }

    /// Emits the buffered rows, then stages their messages.
    async fn flush(&mut self, collector: &mut SourceCollector) -> anyhow::Result<()> {
        if self.buffered.is_empty() {
            return Ok(());
        }
        if let Err(e) = collector.flush_buffer().await {
            // The deserializer validates fully in `deserialize_slice`, so this is a
            // fallback: whatever the policy, a flush-time decode error fails the job.
            if let Some(d) = e.downcast_ref::<DeserializeError>() {
                let id = self
                    .buffered
                    .get(d.message_index)
                    .cloned()
                    .unwrap_or_default();
                return Err(self.decode_error(&id, d));
            }
            return Err(e);
        }
        let ids = std::mem::take(&mut self.buffered);
        self.tracker.stage(&ids);
        Ok(())
    }

    /// Stops pulling and nacks whatever the streams delivered but we have not taken.
    async fn stop_pulling(&mut self) {
        if let Some(streams) = self.streams.as_mut() {
            let stray = streams.stop_reading().await;
            // Taken from the streams but never tracked: count them as read and released.
            let n = stray.len() as u64;
            for (_, h) in stray {
                h.nack();
            }
            self.counters().received.add(n);
            self.counters().nacked.add(n);
        }
    }
}

#[async_trait]
impl SourceOperator for PubSubSource {
    fn name(&self) -> String {
        format!("pubsub-source({})", self.subscription)
    }

    async fn on_start(&mut self, ctx: &mut SourceContext) -> anyhow::Result<()> {
        // Not reading until the streams are open.
        self.report_can_pull(ctx, false);
        self.counters = Some(Counters {
            received: ctx.counter(MESSAGES_RECEIVED),
            acked: ctx.counter(MESSAGES_ACKED),
            nacked: ctx.counter(MESSAGES_NACKED),
            dropped: ctx.counter(MESSAGES_DROPPED),
            nacked_bad: ctx.counter(MESSAGES_NACKED_BAD),
            reconnects: ctx.counter(PULL_RECONNECTS),
        });
        // Leases must outlive a checkpoint, or held messages are redelivered before their
        // commit (SPEC 5.3). The client ends lease extension silently at max lease.
        let period = Duration::from_millis(self.config.max_ack_extension_period_ms);
        anyhow::ensure!(
            period > ctx.checkpoint_interval,
            "option 'scan.ack.max-extension-period' is invalid: must exceed the checkpoint interval ({:?}), was '{:?}'",
            ctx.checkpoint_interval,
            period
        );
        if period < ctx.checkpoint_interval * 2 {
            tracing::warn!(
                "'scan.ack.max-extension-period' ({period:?}) is less than twice the checkpoint interval ({:?}): a slow checkpoint will cause redeliveries",
                ctx.checkpoint_interval
            );
        }
        self.max_outstanding_messages = policy::effective_max_outstanding(
            self.config.max_outstanding_messages,
            ctx.checkpoint_interval,
            self.config.parallel_pull_count,
        );
        tracing::info!(
            subscription = %self.subscription,
            "flow control: at most {} messages ({}) and {} bytes held per subtask",
            self.max_outstanding_messages,
            if self.config.max_outstanding_messages.is_some() { "set by 'scan.flow-control.max-outstanding-element-count'" } else { "default: 10000 msg/s per stream x 2.5 checkpoint intervals, at least 1000" },
            self.config.max_outstanding_bytes
        );
        // Fail fast, naming the cause, if the subscription cannot be read (bounded).
        let admin = client::subscription_admin(&self.profile).await?;
        let sub = diagnose::bounded(
            admin
                .get_subscription()
                .set_subscription(self.subscription.clone()),
        )
        .send()
        .await
        .map_err(|e| {
            diagnose::startup_error(
                &self.profile,
                Resource::Subscription(&self.subscription),
                &e,
            )
        })?;
        if self.config.deserialization_failure_policy == DeserializationFailurePolicy::Nack {
            let has_dlq = sub
                .dead_letter_policy
                .as_ref()
                .is_some_and(|d| !d.dead_letter_topic.is_empty());
            anyhow::ensure!(
                has_dlq,
                "option 'scan.deserialization-failure-policy' = 'nack' needs a dead-letter policy on subscription {}, which has none (a nacked message would be redelivered forever): set a dead-letter topic on the subscription, or use 'drop'",
                self.subscription
            );
        }
        let subscriber = client::subscriber(&self.profile).await?;
        self.streams = Some(PullStreams::start(
            subscriber,
            admin,
            &self.subscription,
            StreamSettings {
                streams: self.config.parallel_pull_count,
                max_outstanding_messages: self.max_outstanding_messages,
                max_outstanding_bytes: self.config.max_outstanding_bytes,
                max_lease: period,
                max_lease_extension: self
                    .config
                    .max_duration_per_ack_extension_ms
                    .map(Duration::from_millis),
            },
            self.counters().reconnects.clone(),
        ));
        Ok(())
    }

    async fn run(
        &mut self,
        ctx: &mut SourceContext,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<SourceFinishType> {
        collector.initialize_deserializer(&self.op.schema, BATCH_SIZE, LINGER)?;
        let mut stopping = false;
        loop {
            let flush_at = collector.flush_deadline().map(Instant::from_std);
            let can_pull = !stopping && self.under_flow_control();
            // Reading, as the idle clock sees it: not held by flow control, no stream down.
            let reading = stopping || (can_pull && self.down.is_empty());
            self.report_can_pull(ctx, reading);
            let streams = self
                .streams
                .as_mut()
                .expect("streams are started in on_start");
            tokio::select! {
                biased;
                ctrl = ctx.control_rx.recv() => match ctrl {
                    Some(ControlMessage::Checkpoint(barrier)) => {
                        if barrier.then_stop {
                            self.stop_pulling().await;
                            stopping = true;
                        }
                        self.flush(collector).await?;
                        self.tracker.bind(barrier.epoch);
                        ctx.start_checkpoint(barrier, collector).await?;
                    }
                    Some(ControlMessage::Commit { epoch }) => {
                        let n = self.tracker.commit(epoch);
                        self.counters().acked.add(n as u64);
                    }
                    Some(ControlMessage::Stop { mode: StopMode::Graceful }) => return Ok(SourceFinishType::Graceful),
                    Some(ControlMessage::Stop { mode: StopMode::Immediate }) | None => return Ok(SourceFinishType::Immediate),
                },
                pulled = streams.next(), if can_pull => match pulled {
                    Pulled::Message(m, h) => {
                        self.on_message(m, h, collector)?;
                        if collector.should_flush() {
                            self.flush(collector).await?;
                        }
                    }
                    Pulled::Reconnecting { stream, cause } => {
                        self.down.insert(stream);
                        let which = if stream == pull::MONITOR { "streaming pull".to_string() } else { format!("streaming pull {stream}") };
                        tracing::warn!(subscription = %self.subscription, "{which} from {} interrupted: {cause}; reconnecting with backoff (held messages keep their leases)", self.subscription);
                    }
                    Pulled::Recovered { stream, down_for } => {
                        self.down.remove(&stream);
                        let which = if stream == pull::MONITOR { "streaming pull".to_string() } else { format!("streaming pull {stream}") };
                        tracing::info!(subscription = %self.subscription, "{which} from {} reconnected after {down_for:.1?} down", self.subscription);
                    }
                    Pulled::Failed { code, error } => {
                        let status = code.map_or_else(|| "error".to_string(), |c| format!("{c:?}"));
                        anyhow::bail!("streaming pull from subscription {} failed permanently with status {status}: {error}", self.subscription)
                    }
                },
                _ = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                    self.flush(collector).await?;
                }
            }
        }
    }

    /// Stops the streams, nacks everything still held so Pub/Sub redelivers it at once,
    /// then awaits each subscriber's shutdown (bounded) so the final acks and nacks are sent.
    async fn on_close(&mut self, _ctx: &mut SourceContext) -> anyhow::Result<()> {
        self.stop_pulling().await;
        let n = self.tracker.release_all();
        if self.counters.is_some() {
            self.counters().nacked.add(n as u64);
        }
        if n > 0 {
            tracing::info!(subscription = %self.subscription, "released {n} unacknowledged messages for redelivery");
        }
        if let Some(streams) = self.streams.take() {
            streams.shutdown(Duration::from_secs(5)).await;
        }
        Ok(())
    }
}
