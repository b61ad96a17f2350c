//! The Pub/Sub source operator: StreamingPull streams feed a bounded channel; the run
//! loop decodes messages into rows, tracks every handle (see [`tracker`]) and acks only
//! on `Commit` of the checkpoint a message was bound to.

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
use pubsub_schema::{PubSubProfile, SourceConfig};
use tokio::time::Instant;

use self::pull::{PullStreams, Pulled};
use self::tracker::{AckTracker, Received};
use crate::client;

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
}

struct Counters {
    received: Counter,
    acked: Counter,
    nacked: Counter,
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
        }
    }

    fn counters(&self) -> &Counters {
        self.counters
            .as_ref()
            .expect("counters are set in on_start")
    }

    fn under_flow_control(&self) -> bool {
        (self.tracker.held_messages() as u64) < self.config.max_outstanding_messages
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
        collector
            .deserialize_slice(&payload, &meta)
            .map_err(|e| self.decode_error(&id, &e))?;
        self.buffered.push(id);
        Ok(())
    }

    /// Emits the buffered rows, then stages their messages.
    async fn flush(&mut self, collector: &mut SourceCollector) -> anyhow::Result<()> {
        if self.buffered.is_empty() {
            return Ok(());
        }
        if let Err(e) = collector.flush_buffer().await {
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
        self.counters = Some(Counters {
            received: ctx.counter(MESSAGES_RECEIVED),
            acked: ctx.counter(MESSAGES_ACKED),
            nacked: ctx.counter(MESSAGES_NACKED),
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
        // Fail fast, naming the subscription, if it does not exist.
        let admin = client::subscription_admin(&self.profile).await?;
        admin
            .get_subscription()
            .set_subscription(self.subscription.clone())
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("cannot read subscription {}: {e}", self.subscription))?;
        let subscriber = client::subscriber(&self.profile).await?;
        self.streams = Some(PullStreams::start(
            &subscriber,
            &self.subscription,
            &self.config,
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
                    Pulled::Failed(e) => anyhow::bail!("streaming pull from {} failed: {e}", self.subscription),
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
