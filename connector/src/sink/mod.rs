//! The Pub/Sub sink (SPEC 6): one message per row through the client's batching
//! publisher, with bounded publishes in flight. A failed publish is classified
//! ([`errors`]): a missing topic is created, a refused request is republished one message
//! per request, a transient failure is republished after a backoff, and a message
//! refused on its own or over Pub/Sub's limits ([`limits`]) goes to the failure handler
//! ([`failure`]). At every barrier everything is published, awaited and repaired, then
//! the dead-letter queue is flushed; anything else fails the checkpoint.

pub mod builder;
mod encode;
pub mod errors;
mod failure;
pub mod limits;
pub mod metrics;
mod publisher;
mod schema_watch;
mod topic;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use arrow::array::{Array, RecordBatch};
use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::error::PublishError;
use google_cloud_pubsub::model::Message;
use pubsub_engine_spi::{ArrowOperator, CheckpointBarrier, OperatorConfig, OperatorContext};
use pubsub_schema::{CreateDisposition, PubSubProfile, SinkConfig};

pub use builder::{
    PubSubSink, PubSubSinkBuilder, PublisherOptions, PublisherOptionsBuilder, TopicCreateOptions,
    TopicCreateOptionsBuilder,
};
use encode::{Encoded, Encoder};
use errors::Repair;
use failure::FailureRoute;
use metrics::{SinkMetrics, SEND_ERRORS_PREFIX};

/// A message handed to the publisher, kept until its result arrives so it can be
/// republished or routed.
struct Pending {
    /// Order of arrival: republishing in this order keeps each key's order.
    seq: u64,
    message: Message,
    /// What the in-flight byte cap counts (data, key, attributes).
    bytes: u64,
    /// Republish attempts after transient failures so far.
    attempts: u32,
    /// Published in a request of its own (after a refused batch).
    solo: bool,
    /// The source message the row was read from, when the row carries it (see
    /// [`source_ids`]): named in a dead letter.
    source_id: Option<String>,
}

type Outcome = (Pending, Result<String, PublishError>);

/// One subtask of a Pub/Sub sink table.
pub struct SinkWriter {
    sink: PubSubSink,
    topic: String,
    encoder: Encoder,
    publisher: Option<Publisher>,
    /// Sends one message per request, to find the bad message of a refused request.
    solo: Option<Publisher>,
    in_flight: FuturesUnordered<BoxFuture<'static, Outcome>>,
    in_flight_bytes: u64,
    /// Failed messages waiting for a repair, by arrival.
    parked: BTreeMap<u64, Pending>,
    /// Ordering keys the client paused after a failure; resumed before republishing.
    paused_keys: BTreeSet<String>,
    topic_missing: bool,
    /// Sink subtasks of this table (set in `on_start`): with more than one, a topic a
    /// sink recreated may have taken other subtasks' rows before any subscription existed.
    parallelism: usize,
    next_seq: u64,
    /// Where the progress clock runs from: the last publish result (success or failure),
    /// or the moment something went in flight after nothing was. It runs only while
    /// something is in flight: idle time is not a stall.
    last_completion: Instant,
    warned_stall: bool,
    failure: FailureRoute,
    /// The first unrepairable failure; the checkpoint in progress fails with it.
    fatal: Option<String>,
    /// `fatal` is a failure every restart repeats (a row the failure handler refused).
    fatal_permanent: bool,
    metrics: SinkMetrics,
    /// Failed publishes by gRPC code, registered on first use.
    errors_by_code: BTreeMap<String, pubsub_engine_spi::Counter>,
    metric_scope: Option<(pubsub_engine_spi::Metrics, String, usize)>,
    /// Format `avro`: the topic's binding, followed while the job runs (decision 0031).
    revisions: Option<schema_watch::RevisionWatch>,
}

impl SinkWriter {
    /// Format `avro`: the topic's schema revision (its `last_revision_id`, else the newest)
    /// and encoding, checked against the table's columns. Errors are
    /// [`pubsub_engine_spi::ConfigError`]s naming the column and the field (no restart
    /// changes the schema), but for a failure to ask the schema service. The binding is
    /// then followed while the job runs ([`follow_revision`](Self::follow_revision)).
    async fn bind_avro(&mut self) -> anyhow::Result<()> {
        let (revision, encoding) =
            crate::avro_columns::sink_revision(self.sink.profile(), &self.topic).await?;
        let watch = schema_watch::RevisionWatch::start(
            self.sink.profile().clone(),
            self.topic.clone(),
            &revision,
            encoding,
        );
        self.rebind(revision, encoding, "")?;
        self.revisions = Some(watch);
        Ok(())
    }

    /// Format `avro`, before each batch: re-binds to the revision Pub/Sub now validates
    /// the topic's messages with first, if it changed (a revision committed, the topic's
    /// revision range or encoding edited): rows from here on are written under it, so
    /// that Pub/Sub names each message with the revision that wrote it (decision 0031).
    /// One the columns cannot be written under fails the job as the start would.
    fn follow_revision(&mut self) -> anyhow::Result<()> {
        let Some(change) = self.revisions.as_mut().and_then(|w| w.changed()) else {
            return Ok(());
        };
        let (revision, encoding) = change.map_err(|e| {
            pubsub_engine_spi::ConfigError::wrap(anyhow::anyhow!(
                "the schema binding of topic {} changed while the job ran: {e}",
                self.topic
            ))
        })?;
        self.rebind(
            revision,
            encoding,
            " (its binding changed while the job ran)",
        )
    }

    fn rebind(
        &mut self,
        revision: std::sync::Arc<pubsub_engine_format::avro::AvroSchema>,
        encoding: pubsub_engine_format::avro::AvroEncoding,
        why: &str,
    ) -> anyhow::Result<()> {
        let describe = revision.describe();
        self.encoder.bind_avro(revision, encoding).map_err(|e| {
            pubsub_engine_spi::ConfigError::wrap(anyhow::anyhow!(
                "the sink table cannot be written into topic {} under its schema{why}: {e}",
                self.topic
            ))
        })?;
        tracing::info!(topic = %self.topic, "writing Avro ({encoding}) under {describe}{why}");
        Ok(())
    }

    /// A writer for a sink table validated by the builders (errors name the option).
    pub fn new(
        profile: PubSubProfile,
        config: SinkConfig,
        op: OperatorConfig,
    ) -> anyhow::Result<Self> {
        let sink = PubSubSink::from_config(profile, config)?;
        let topic = sink.topic_name();
        let failure = FailureRoute::new(&sink)?;
        Ok(SinkWriter {
            encoder: Encoder::new(&op.schema, sink.config().record_id_attribute.clone()),
            topic,
            sink,
            publisher: None,
            solo: None,
            in_flight: FuturesUnordered::new(),
            in_flight_bytes: 0,
            parked: BTreeMap::new(),
            paused_keys: BTreeSet::new(),
            topic_missing: false,
            parallelism: 1,
            next_seq: 0,
            last_completion: Instant::now(),
            warned_stall: false,
            failure,
            fatal: None,
            fatal_permanent: false,
            metrics: SinkMetrics::default(),
            errors_by_code: BTreeMap::new(),
            metric_scope: None,
            revisions: None,
        })
    }

    fn options(&self) -> &pubsub_schema::PublisherConfig {
        &self.sink.config().publisher
    }

    fn fail(&mut self, why: String) {
        if self.fatal.is_none() {
            self.fatal = Some(why);
        }
    }

    fn check_fatal(&self) -> anyhow::Result<()> {
        match &self.fatal {
            Some(f) => {
                let e = anyhow::anyhow!(
                    "{f}; the checkpoint in progress failed and nothing of it is acknowledged"
                );
                Err(if self.fatal_permanent {
                    pubsub_engine_spi::PermanentError::wrap(e)
                } else {
                    e
                })
            }
            None => Ok(()),
        }
    }

    fn gauges(&self) {
        self.metrics.in_flight.set(self.in_flight.len() as u64);
        self.metrics.in_flight_bytes.set(self.in_flight_bytes);
        self.metrics.parked.set(self.parked.len() as u64);
    }

    /// Hands `p` to the publisher (`solo`: the one-message-per-request one).
    fn send(&mut self, p: Pending) {
        let publisher = if p.solo { &self.solo } else { &self.publisher };
        let publisher = publisher
            .as_ref()
            .expect("publishers are built in on_start");
        if self.in_flight.is_empty() {
            // Nothing was in flight: the clock starts now, not at the last completion.
            self.last_completion = Instant::now();
            self.warned_stall = false;
        }
        self.in_flight_bytes += p.bytes;
        let result = publisher.publish(p.message.clone());
        self.in_flight
            .push(Box::pin(async move { (p, result.await) }));
        self.gauges();
    }

    /// Sends what the publishers batched so far now, without waiting for the results
    /// (their futures are awaited under the progress timeout instead).
    fn flush_batches(&self) {
        for p in [&self.publisher, &self.solo].into_iter().flatten() {
            let p = p.clone();
            tokio::spawn(async move { p.flush().await });
        }
    }

    /// Waits for one publish result under the progress timeout: a warning at a tenth of
    /// it without any completion, failure at all of it.
    async fn settle_one(&mut self) -> anyhow::Result<()> {
        let timeout = Duration::from_millis(self.options().publish_progress_timeout_ms);
        loop {
            let deadline = self.last_completion + timeout;
            let warn_at = self.last_completion + timeout / 10;
            let wake = if self.warned_stall { deadline } else { warn_at };
            tokio::select! {
                // A result that is already there is progress, whatever the clock says
                // (results are only collected here, so they may wait a while).
                biased;
                next = self.in_flight.next() => {
                    if let Some((p, r)) = next {
                        self.settled(p, r).await;
                    }
                    return Ok(());
                }
                _ = tokio::time::sleep_until(wake.into()) => {
                    if Instant::now() >= deadline {
                        anyhow::bail!(
                            "no publish to {} completed for {:?} ('{}'): {} messages ({} bytes) still in flight; nothing of the checkpoint in progress is acknowledged",
                            self.topic, timeout, pubsub_table_options::PUBLISH_PROGRESS_TIMEOUT,
                            self.in_flight.len(), self.in_flight_bytes
                        );
                    }
                    self.warned_stall = true;
                    tracing::warn!(
                        "no publish to {} completed for {:?} (a tenth of '{}' = {:?}): {} messages in flight; the client keeps retrying",
                        self.topic, timeout / 10, pubsub_table_options::PUBLISH_PROGRESS_TIMEOUT, timeout, self.in_flight.len()
                    );
                }
            }
        }
    }

    /// Sends every batch now and awaits every result.
    async fn drain(&mut self) -> anyhow::Result<()> {
        self.flush_batches();
        while !self.in_flight.is_empty() {
            self.settle_one().await?;
        }
        self.gauges();
        Ok(())
    }

    /// One publish result: count it, or classify the failure (SPEC 6).
    async fn settled(&mut self, mut p: Pending, r: Result<String, PublishError>) {
        self.in_flight_bytes -= p.bytes;
        self.last_completion = Instant::now();
        self.warned_stall = false;
        let e = match r {
            Ok(_) => {
                self.metrics.sent.add(1);
                self.metrics.bytes_sent.add(p.message.data.len() as u64);
                self.failure.accepted();
                return;
            }
            Err(e) => e,
        };
        let label = errors::label(&e);
        let scope = self.metric_scope.clone();
        self.errors_by_code
            .entry(label.clone())
            .or_insert_with(|| match scope {
                Some((m, op, i)) => m.counter(&format!("{SEND_ERRORS_PREFIX}{label}"), &op, i),
                None => pubsub_engine_spi::Counter::default(),
            })
            .add(1);
        if !p.message.ordering_key.is_empty() {
            // The client paused the key: every later message of it fails until resumed.
            self.paused_keys.insert(p.message.ordering_key.clone());
        }
        match errors::classify(&e) {
            Repair::KeyPaused => self.park(p),
            Repair::TopicMissing => match self.sink.config().create_disposition {
                CreateDisposition::CreateIfNeeded => {
                    // An attempt like a transient failure: the republish waits the
                    // recovery backoff, and a topic deleted again and again fails.
                    p.attempts += 1;
                    if p.attempts > self.options().recovery.max_attempts {
                        self.fail(format!(
                            "topic {} went missing {} times while republishing ('{}' = {})",
                            self.topic,
                            p.attempts,
                            pubsub_table_options::RECOVERY_MAX_ATTEMPTS,
                            self.options().recovery.max_attempts
                        ));
                        return;
                    }
                    self.topic_missing = true;
                    self.park(p);
                }
                CreateDisposition::CreateNever => self.fail(format!(
                    "topic {} does not exist and '{}' is 'create-never': {e}",
                    self.topic,
                    pubsub_table_options::CREATE_DISPOSITION
                )),
            },
            Repair::InvalidArgument if p.solo => {
                let reason = format!("Pub/Sub refused the message on its own ({label}): {e}");
                if let Some(k) = Some(&p.message.ordering_key).filter(|k| !k.is_empty()) {
                    if let Some(s) = &self.solo {
                        s.resume_publish(k.clone());
                    }
                }
                let reason = match &p.source_id {
                    Some(id) => format!("the row of source message {id}: {reason}"),
                    None => reason,
                };
                if let Err(f) = self
                    .failure
                    .reject(
                        p.message.data.to_vec(),
                        reason,
                        p.source_id.clone(),
                        &self.metrics,
                    )
                    .await
                {
                    if self.fatal.is_none() {
                        self.fatal_permanent = pubsub_engine_spi::restart_cannot_fix(&f);
                    }
                    self.fail(f.to_string());
                }
            }
            Repair::InvalidArgument => {
                p.solo = true;
                self.park(p);
            }
            Repair::Transient => {
                p.attempts += 1;
                let max = self.options().recovery.max_attempts;
                if p.attempts > max {
                    self.fail(format!(
                        "publish to {} failed {} times in a row ('{}' = {max}); the last error ({label}): {e}",
                        self.topic,
                        p.attempts,
                        pubsub_table_options::RECOVERY_MAX_ATTEMPTS
                    ));
                } else {
                    self.park(p);
                }
            }
            Repair::Fatal => self.fail(format!("publish to {} failed ({label}): {e}", self.topic)),
        }
    }

    fn park(&mut self, p: Pending) {
        self.parked.insert(p.seq, p);
        self.gauges();
    }

    /// Repairs until nothing is parked: creates a missing topic, waits the recovery
    /// backoff, resumes paused keys and republishes in arrival order (a message refused
    /// with its batch alone, after everything before it completed). Bounded by the
    /// recovery attempts and the progress timeout.
    async fn repair(&mut self) -> anyhow::Result<()> {
        self.drain().await?;
        while !self.parked.is_empty() {
            self.check_fatal()?;
            if self.topic_missing {
                let ensured = topic::ensure(&self.sink, true, self.encoder.is_avro()).await?;
                if ensured.created {
                    self.metrics.topics_created.add(1);
                }
                self.await_subscription(ensured).await?;
                self.topic_missing = false;
            }
            let attempts = self.parked.values().map(|p| p.attempts).max().unwrap_or(0);
            if attempts > 0 {
                let delay = backoff(&self.options().recovery, attempts);
                tracing::warn!(
                    "republishing {} messages to {} in {delay:?} (attempt {attempts})",
                    self.parked.len(),
                    self.topic
                );
                tokio::time::sleep(delay).await;
            }
            for k in std::mem::take(&mut self.paused_keys) {
                if let Some(p) = &self.publisher {
                    p.resume_publish(k.clone());
                }
                if let Some(p) = &self.solo {
                    p.resume_publish(k);
                }
            }
            for (_, p) in std::mem::take(&mut self.parked) {
                if p.solo {
                    // Alone in its request, and after everything before it.
                    self.drain().await?;
                    self.send(p);
                    self.drain().await?;
                } else {
                    self.send(p);
                }
            }
            self.drain().await?;
        }
        self.check_fatal()
    }

    /// After the topic was found deleted mid-run and recreated: republishing goes on only
    /// into a topic with a subscription, since Pub/Sub discards what a topic without one
    /// receives (decision 0018). Checks at once and then after each recovery backoff, up to
    /// the recovery attempts, so that a subscription created meanwhile (by whoever
    /// recreated the topic) lets the job go on; then fails the checkpoint, logged at ERROR
    /// with what to do. A topic a sink created (labelled) with more than one sink subtask
    /// fails at once: the other subtasks, which saw no NOT_FOUND, may already have
    /// published into it before any subscription existed; only a restart, which reads
    /// everything since the last completed checkpoint again, writes those rows.
    async fn await_subscription(&mut self, ensured: topic::Ensured) -> anyhow::Result<()> {
        let fail = |why: String| {
            tracing::error!("{why}");
            anyhow::anyhow!(why)
        };
        if ensured.recreated && self.parallelism > 1 {
            return Err(fail(format!(
                "{} ({} sink subtasks: the others may have published into the recreated topic before any subscription existed)",
                topic::no_subscription_error(&self.topic),
                self.parallelism
            )));
        }
        let recovery = self.options().recovery.clone();
        for attempt in 1..=recovery.max_attempts + 1 {
            if topic::has_subscription(&self.sink).await? {
                return Ok(());
            }
            if attempt > recovery.max_attempts {
                break;
            }
            let delay = backoff(&recovery, attempt);
            tracing::warn!(
                "topic {} was recreated and has no subscription yet: {} messages stay parked; checking again in {delay:?} (attempt {attempt} of '{}' = {})",
                self.topic,
                self.parked.len(),
                pubsub_table_options::RECOVERY_MAX_ATTEMPTS,
                recovery.max_attempts
            );
            tokio::time::sleep(delay).await;
        }
        Err(fail(topic::no_subscription_error(&self.topic)))
    }

    /// Waits until one more message of `bytes` fits the in-flight caps: sends the partial
    /// batches once, then waits for results until half the window is free.
    async fn make_room(&mut self, bytes: u64) -> anyhow::Result<()> {
        let (max_msgs, max_bytes) = (
            self.options().max_in_flight_messages,
            self.options().max_in_flight_bytes,
        );
        let full = |s: &Self| {
            !s.in_flight.is_empty()
                && (s.in_flight.len() as u64 >= max_msgs || s.in_flight_bytes + bytes > max_bytes)
        };
        if !full(self) {
            return Ok(());
        }
        self.flush_batches();
        // Waiting for a single free slot would send batches of one message.
        while !self.in_flight.is_empty()
            && (self.in_flight.len() as u64 > max_msgs / 2
                || self.in_flight_bytes + bytes > max_bytes)
        {
            self.settle_one().await?;
        }
        Ok(())
    }
}

/// The column of `batch` filled from the source's `message-id` metadata column, if the
/// query selected it (the planner marks it, see [`pubsub_engine_spi::SOURCE_METADATA_KEY`]):
/// how a sink row names its source message without an extra column (decision 0018).
fn source_ids(batch: &RecordBatch) -> Option<arrow::array::StringArray> {
    let i = batch.schema().fields().iter().position(|f| {
        f.data_type() == &arrow::datatypes::DataType::Utf8
            && f.metadata()
                .get(pubsub_engine_spi::SOURCE_METADATA_KEY)
                .map(String::as_str)
                == Some(crate::connector::MESSAGE_ID)
    })?;
    batch
        .column(i)
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .cloned()
}

/// The recovery backoff before republish attempt `attempt` (1-based): initial doubling
/// to max, with up to half of it as random jitter.
fn backoff(r: &pubsub_schema::RecoveryConfig, attempt: u32) -> Duration {
    let base = r
        .initial_backoff_ms
        .saturating_mul(1u64 << (attempt.saturating_sub(1)).min(20))
        .min(r.max_backoff_ms);
    // Jitter from the clock's nanoseconds: enough to spread subtasks that failed together.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    let jitter = nanos % (base / 2 + 1);
    Duration::from_millis(base / 2 + jitter)
}

#[async_trait]
impl ArrowOperator for SinkWriter {
    fn name(&self) -> String {
        format!("pubsub-sink({})", self.topic)
    }

    async fn on_start(&mut self, ctx: &mut OperatorContext) -> anyhow::Result<()> {
        self.metrics = SinkMetrics::new(ctx);
        self.metric_scope = Some((
            ctx.metrics.clone(),
            ctx.task_info.operator_id.clone(),
            ctx.task_info.task_index,
        ));
        // Fail fast, naming the cause (unreachable endpoint, credentials, permission).
        // The dead-letter topic first: a run refused for it creates no output topic.
        self.failure.open(&self.sink, ctx).await?;
        self.parallelism = ctx.task_info.parallelism.max(1);
        // A missing topic is created under create-if-needed. At the job's first run it is
        // created as it is; at any later run an earlier one may have written into it (with
        // or without a checkpoint), so it was deleted mid-job: like a topic a sink
        // recreated mid-run, it must have a subscription before anything is published
        // (Pub/Sub discards what a topic without one receives; issue 16, finding 6, as a
        // kind; found by the fault campaign, seed 39).
        let mid_job = !ctx.first_run;
        let ensured = topic::ensure(&self.sink, mid_job, self.encoder.is_avro()).await?;
        if ensured.created {
            self.metrics.topics_created.add(1);
        }
        topic::require_subscription(&self.sink, ensured).await?;
        if self.encoder.is_avro() {
            self.bind_avro().await?;
        }
        let (profile, c) = (self.sink.profile().clone(), self.options().clone());
        self.publisher = Some(publisher::build(&profile, &self.topic, &c, false).await?);
        self.solo = Some(publisher::build(&profile, &self.topic, &c, true).await?);
        Ok(())
    }

    async fn process_batch(
        &mut self,
        batch: RecordBatch,
        _ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        self.check_fatal()?;
        self.follow_revision()?;
        let ordering = self.options().message_ordering;
        let ids = source_ids(&batch);
        for (row, e) in self.encoder.encode(&batch)?.into_iter().enumerate() {
            let source_id = ids
                .as_ref()
                .and_then(|a| a.is_valid(row).then(|| a.value(row).to_string()));
            // Only built for a rejected row.
            let which = || match &source_id {
                Some(id) => format!("row {row} of the batch (source message {id})"),
                None => format!("row {row} of the batch"),
            };
            let (data, attributes, ordering_key) = match e {
                Encoded::Message {
                    data,
                    attributes,
                    ordering_key,
                } => (data, attributes, ordering_key),
                Encoded::Rejected { payload, reason } => {
                    self.failure
                        .reject(
                            payload,
                            format!("{}: {reason}", which()),
                            source_id,
                            &self.metrics,
                        )
                        .await?;
                    continue;
                }
            };
            if !ordering && !ordering_key.is_empty() {
                // The same row comes back on every restart.
                return Err(pubsub_engine_spi::PermanentError::wrap(anyhow::anyhow!(
                    "{} carries ordering key '{ordering_key}', but '{}' is false: enable it to publish ordering keys (Pub/Sub keeps a key's order only for a publisher that orders), or leave the ordering-key column NULL or empty",
                    which(),
                    pubsub_table_options::MESSAGE_ORDERING
                )));
            }
            if let Some(reason) =
                limits::violation(&self.topic, data.len(), &attributes, &ordering_key)
            {
                self.failure
                    .reject(
                        data,
                        format!("{}: {reason}", which()),
                        source_id,
                        &self.metrics,
                    )
                    .await?;
                continue;
            }
            let bytes = limits::batching_bytes(data.len(), &attributes, &ordering_key) as u64;
            self.make_room(bytes).await?;
            self.check_fatal()?;
            let message = Message::new()
                .set_data(data)
                .set_attributes(attributes)
                .set_ordering_key(ordering_key);
            let seq = self.next_seq;
            self.next_seq += 1;
            self.send(Pending {
                seq,
                message,
                bytes,
                attempts: 0,
                solo: false,
                source_id,
            });
        }
        if !self.parked.is_empty() {
            self.repair().await?;
        }
        self.check_fatal()
    }

    /// Publishes everything outstanding, awaits every result, repairs what can be
    /// repaired, then flushes the dead-letter queue (SPEC 6). A completed checkpoint
    /// leaves no parked message and no paused key behind.
    async fn handle_checkpoint(
        &mut self,
        _barrier: CheckpointBarrier,
        _ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        self.repair().await?;
        for k in std::mem::take(&mut self.paused_keys) {
            if let Some(p) = &self.publisher {
                p.resume_publish(k);
            }
        }
        self.failure.flush().await?;
        self.check_fatal()
    }

    async fn on_close(&mut self, _ctx: &mut OperatorContext) -> anyhow::Result<()> {
        // Whatever is still in flight belongs to no completed checkpoint; its rows are
        // read again after the source's redelivery, so waiting is a courtesy, bounded.
        let timeout = Duration::from_millis(self.options().shutdown_timeout_ms);
        if tokio::time::timeout(timeout, self.drain()).await.is_err() {
            tracing::warn!(
                "closing: {} publishes to {} still in flight after {timeout:?} ('{}'); they belong to no completed checkpoint, so their rows are read again",
                self.in_flight.len(),
                self.topic,
                pubsub_table_options::SINK_SHUTDOWN_TIMEOUT
            );
        }
        self.publisher = None;
        self.solo = None;
        self.revisions = None;
        self.failure.close().await;
        Ok(())
    }
}
