//! The Pub/Sub sink operator: one message per row, published through the client's
//! batching publisher with a bounded number of publishes in flight; at every checkpoint
//! everything outstanding is flushed and awaited, and any failure fails the checkpoint.

use std::time::Duration;

use arrow::array::{Array, RecordBatch};
use async_trait::async_trait;
use futures::stream::{FuturesUnordered, StreamExt};
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::publisher::PublishFuture;
use pubsub_engine::format::Serializer;
use pubsub_engine::{
    ArrowOperator, CheckpointBarrier, Counter, OperatorConfig, OperatorContext, ROWS_WRITTEN,
};
use pubsub_schema::{PubSubProfile, SinkConfig};

use crate::client;

/// One subtask of a Pub/Sub sink table.
pub struct PubSubSink {
    profile: PubSubProfile,
    config: SinkConfig,
    topic: String,
    serializer: Serializer,
    /// Index of the `METADATA FROM 'ordering-key'` column in the rows, if declared.
    ordering_key: Option<usize>,
    publisher: Option<Publisher>,
    in_flight: FuturesUnordered<PublishFuture>,
    /// The first publish failure since the last checkpoint; sticky until it fails one.
    failure: Option<String>,
    written: Counter,
}

impl PubSubSink {
    pub fn new(profile: PubSubProfile, config: SinkConfig, op: OperatorConfig) -> Self {
        let topic = client::topic_path(&profile.project, &config.topic);
        PubSubSink {
            profile,
            config,
            topic,
            serializer: Serializer::new(&op.schema),
            ordering_key: op
                .schema
                .fields
                .iter()
                .position(|f| f.metadata_key.as_deref() == Some(crate::connector::ORDERING_KEY)),
            publisher: None,
            in_flight: FuturesUnordered::new(),
            failure: None,
            written: Counter::default(),
        }
    }

    /// Sends every batched message and awaits every publish result.
    async fn flush_all(&mut self) {
        if let Some(p) = &self.publisher {
            p.flush().await;
        }
        while !self.in_flight.is_empty() {
            self.settle_one().await;
        }
    }

    /// Awaits one publish result.
    async fn settle_one(&mut self) {
        match self.in_flight.next().await {
            Some(Ok(_id)) => self.written.add(1),
            Some(Err(e)) => {
                if self.failure.is_none() {
                    self.failure = Some(format!("publish to {} failed: {e}", self.topic));
                }
            }
            None => {}
        }
    }
}

#[async_trait]
impl ArrowOperator for PubSubSink {
    fn name(&self) -> String {
        format!("pubsub-sink({})", self.topic)
    }

    async fn on_start(&mut self, ctx: &mut OperatorContext) -> anyhow::Result<()> {
        self.written = ctx.counter(ROWS_WRITTEN);
        // Fail fast, naming the cause (unreachable endpoint, credentials, missing topic,
        // permission), with a bounded call (topics are not created yet).
        let admin = client::topic_admin(&self.profile).await?;
        crate::diagnose::bounded(admin.get_topic().set_topic(self.topic.clone()))
            .send()
            .await
            .map_err(|e| {
                crate::diagnose::startup_error(
                    &self.profile,
                    crate::diagnose::Resource::Topic(&self.topic),
                    &e,
                )
            })?;
        let publisher = client::publisher(&self.profile, &self.topic)?
            .set_message_count_threshold(self.config.publisher.batching_element_count_threshold)
            .set_byte_threshold(self.config.publisher.batching_request_byte_threshold)
            .set_delay_threshold(Duration::from_millis(
                self.config.publisher.batching_delay_threshold_ms,
            ))
            .build()
            .await?;
        self.publisher = Some(publisher);
        Ok(())
    }

    async fn process_batch(
        &mut self,
        batch: RecordBatch,
        _ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        // A failed publish dooms the next checkpoint: stop publishing now.
        if let Some(f) = &self.failure {
            anyhow::bail!(
                "{f}; the checkpoint in progress failed and nothing of it is acknowledged"
            );
        }
        let payloads = self.serializer.serialize(&batch)?;
        let keys = match self.ordering_key {
            Some(i) => Some(
                batch
                    .column(i)
                    .as_any()
                    .downcast_ref::<arrow::array::StringArray>()
                    .ok_or_else(|| anyhow::anyhow!("the ordering-key column is not TEXT"))?
                    .clone(),
            ),
            None => None,
        };
        for (row, payload) in payloads.into_iter().enumerate() {
            // Back-pressure: at the in-flight cap, send the partial batch at once (instead
            // of after the batching delay), then wait until half the window is free. Waiting
            // for a single free slot would flush a batch of one message per publish.
            let cap = self.config.publisher.max_in_flight_messages;
            if self.in_flight.len() as u64 >= cap {
                if let Some(p) = &self.publisher {
                    p.flush().await;
                }
                while self.in_flight.len() as u64 > cap / 2 {
                    self.settle_one().await;
                }
            }
            let publisher = self
                .publisher
                .as_ref()
                .expect("publisher is built in on_start");
            let mut message = Message::new().set_data(payload);
            // NULL or empty: no ordering key.
            if let Some(k) = keys
                .as_ref()
                .filter(|k| k.is_valid(row) && !k.value(row).is_empty())
            {
                message = message.set_ordering_key(k.value(row));
            }
            self.in_flight.push(publisher.publish(message));
        }
        Ok(())
    }

    async fn handle_checkpoint(
        &mut self,
        _barrier: CheckpointBarrier,
        _ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        self.flush_all().await;
        match self.failure.take() {
            Some(f) => Err(anyhow::anyhow!(f)),
            None => Ok(()),
        }
    }

    async fn on_close(&mut self, _ctx: &mut OperatorContext) -> anyhow::Result<()> {
        // Whatever is still in flight belongs to no completed checkpoint; its rows will be
        // re-read after the source's redelivery, so waiting is only a courtesy.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.flush_all()).await;
        self.publisher = None;
        Ok(())
    }
}
