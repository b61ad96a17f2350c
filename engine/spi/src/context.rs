//! What the runtime hands to operators: contexts (identity, control channel, state,
//! metrics) and the source collector that turns messages into row batches and emits them
//! into the dataflow under back-pressure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use pubsub_engine_types::OperatorState;
use tokio::sync::mpsc;

use super::metrics::{Counter, Gauge, Metrics};
use pubsub_engine_format::avro::{AvroEncoding, AvroSchema};
use pubsub_engine_format::{DeserializeError, Deserializer, FieldValue};
use pubsub_engine_types::{
    CheckpointBarrier, ConnectionSchema, ControlMessage, TaskInfo, Watermark,
};

use crate::output::{RejectedMessage, RowChecker, SourceOutput};

/// Handed to a sink (or any non-source operator) subtask.
pub struct OperatorContext {
    pub task_info: TaskInfo,
    pub in_schema: SchemaRef,
    pub metrics: Metrics,
    pub state: OperatorState,
    /// `true` only on the job's first run: no completed checkpoint was restored and the
    /// job record counts no earlier start. A later run may follow one that wrote into the
    /// sink's destination (with or without a checkpoint), so a sink tells "never created"
    /// from "deleted mid-job" by it.
    pub first_run: bool,
}

impl OperatorContext {
    /// This subtask's counter `name`.
    pub fn counter(&self, name: &str) -> Counter {
        self.metrics
            .counter(name, &self.task_info.operator_id, self.task_info.task_index)
    }

    /// This subtask's gauge `name`.
    pub fn gauge(&self, name: &str) -> Gauge {
        self.metrics
            .gauge(name, &self.task_info.operator_id, self.task_info.task_index)
    }
}

/// Whether a source subtask is able to read, shared with the coordinator. The
/// `--stop-when-idle` clock only runs while every source subtask can pull and none is
/// waiting for back-pressure permits: time spent held by flow control, back-pressure or a
/// reconnect is not idleness (issue 5, "idle means caught up").
#[derive(Debug)]
pub struct PullState {
    can_pull: std::sync::atomic::AtomicBool,
    blocked: std::sync::atomic::AtomicBool,
}

impl Default for PullState {
    /// A source that never reports is treated as always able to pull.
    fn default() -> Self {
        PullState {
            can_pull: std::sync::atomic::AtomicBool::new(true),
            blocked: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl PullState {
    /// True while the source could receive input and nothing holds it back.
    pub fn is_idle_capable(&self) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        self.can_pull.load(Acquire) && !self.blocked.load(Acquire)
    }
}

/// Handed to a source subtask's `run`.
pub struct SourceContext {
    pub task_info: TaskInfo,
    pub out_schema: SchemaRef,
    /// Checkpoint, commit and stop requests from the coordinator.
    pub control_rx: mpsc::UnboundedReceiver<ControlMessage>,
    pub metrics: Metrics,
    /// Restored state; whatever is here at a barrier is snapshotted with that checkpoint.
    pub state: OperatorState,
    /// Every subtask's restored state of this operator, keyed by the subtask index in the
    /// run that wrote the checkpoint (which may have had another parallelism), as in
    /// Arroyo's global keyed table where each subtask sees every entry on restore. Empty
    /// on a fresh start. Lets a source whose parallelism changed find where the others
    /// stopped (e.g. the smallest position), since `state` alone is only its own entry.
    pub restored_subtasks: BTreeMap<usize, OperatorState>,
    /// A deduplicating source running as one process: the states of its queries'
    /// deduplication in the cluster the job ran as before (decision 0046), whose ids it
    /// takes over. Empty otherwise.
    pub restored_dedup: Vec<OperatorState>,
    /// The job's time between checkpoints: a source holding work until commit sizes its
    /// leases against it.
    pub checkpoint_interval: std::time::Duration,
    /// Set by the runtime: where reports go, the pull state, `--drain`, alignment. Hidden
    /// from the docs: a connector reaches these only through the context's methods.
    #[doc(hidden)]
    pub runtime: SourceRuntime,
}

impl SourceContext {
    /// Tells the runtime whether this subtask is reading: `true` while it waits on its
    /// input with nothing holding it back, `false` while flow control, a reconnect or
    /// start-up keeps it from pulling. Only time in which every source can pull counts
    /// towards `--stop-when-idle`. Sources that never call this count as always pulling.
    pub fn set_can_pull(&self, can_pull: bool) {
        self.runtime
            .pull_state
            .can_pull
            .store(can_pull, std::sync::atomic::Ordering::Release);
    }

    /// This subtask's counter `name`.
    pub fn counter(&self, name: &str) -> Counter {
        self.metrics
            .counter(name, &self.task_info.operator_id, self.task_info.task_index)
    }

    /// Joins watermark alignment group `group` (Flink's `scan.watermark.alignment.*`,
    /// decision 0042): the member reports this subtask's watermark and reads the group's,
    /// which the leader computes over every process. The process forwards its members'
    /// watermarks at most once per `update_interval` (the smallest of its members').
    pub fn join_alignment_group(
        &self,
        group: &str,
        update_interval: std::time::Duration,
    ) -> crate::alignment::AlignmentMember {
        crate::alignment::AlignmentMember::new(
            self.runtime.alignment.clone(),
            group,
            &self.task_info.operator_id,
            self.task_info.task_index,
            update_interval,
        )
    }

    /// Joins job-wide bound `name` (one per key: e.g. a subscription's oldest unacked
    /// publish time, decision 0047): a `reporter` publishes it with
    /// [`SharedBound::report_at`](crate::alignment::SharedBound::report_at), and
    /// every subtask of every process that joined reads the lowest reported. Until a
    /// report reaches a process its readers read `Unknown`.
    pub fn join_shared_bound(&self, name: &str, reporter: bool) -> crate::alignment::SharedBound {
        crate::alignment::SharedBound::new(
            self.runtime.alignment.clone(),
            name,
            &self.task_info.operator_id,
            self.task_info.task_index,
            reporter,
        )
    }

    /// Tells the runtime this subtask has no more input (a bounded source reached its
    /// end). Once every source subtask of the job said so, the job takes a final
    /// checkpoint and stops gracefully (SPEC 2.1, "end of input"). The subtask must keep
    /// serving control messages (`Checkpoint`, `Commit`, `Stop`) until it is stopped.
    pub fn end_of_input(&self) {
        self.runtime.output.end_of_input(&self.task_info);
    }

    /// Closes epoch `barrier.epoch` for this subtask (Arroyo's default `start_checkpoint`):
    /// emits every buffered row, snapshots `self.state` for the epoch, then sends the
    /// barrier into the dataflow. After a `then_stop` barrier the subtask's output ends.
    ///
    /// The caller binds its own in-flight work (e.g. ack IDs) to the epoch before calling.
    /// Errors when buffered rows cannot be emitted (the dataflow is gone).
    pub async fn start_checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<()> {
        if barrier.then_stop && self.runtime.drain {
            // `--drain`: nothing comes after the final barrier, so every window may fire.
            collector.emit_watermark(Watermark::EventTime(i64::MAX))?;
        }
        collector.flush_buffer().await?;
        self.runtime
            .output
            .snapshot(&self.task_info, barrier.epoch, self.state.clone());
        collector.output.barrier(barrier.epoch)?;
        if barrier.then_stop {
            collector.output.finished()?;
            collector.ended = true;
        }
        Ok(())
    }
}

/// What `SourceCollector::flush_buffer_checked` emitted and handed back.
#[derive(Debug, Default)]
pub struct Flushed {
    /// Rows emitted into the dataflow.
    pub rows: usize,
    /// Messages whose rows a query's SELECT failed on: none of their rows was emitted.
    pub rejected: Vec<RejectedMessage>,
}

/// Builds row batches from message payloads and emits them into the dataflow.
///
/// Emission is bounded: every emitted row holds one permit of its process's share of
/// `--max-inflight-rows` until a sink of this process took the row or it was sent to a
/// process that gave credits for it (see `runtime/flow.rs`), so a slow sink anywhere
/// stalls `collect` instead of growing memory.
pub struct SourceCollector {
    out_schema: SchemaRef,
    output: Arc<dyn SourceOutput>,
    pull_state: Arc<PullState>,
    deserializer: Option<Deserializer>,
    /// The SELECTs of the queries reading this source, checked before emitting when the
    /// source asked for it (`check_rows`).
    row_checks: Option<Arc<dyn RowChecker>>,
    checking: bool,
    batch_size: usize,
    linger: Duration,
    buffer_started: Option<Instant>,
    /// A watermark given while rows were buffered: it goes out after them.
    pending_watermark: Option<Watermark>,
    /// The last watermark sent (a repeat is not sent again).
    sent_watermark: Option<Watermark>,
    /// The final barrier went out: nothing more is sent.
    ended: bool,
}

impl SourceCollector {
    /// A collector of rows of `out_schema` into `output` (made by the runtime).
    #[doc(hidden)]
    pub fn new(
        out_schema: SchemaRef,
        output: Arc<dyn SourceOutput>,
        pull_state: Arc<PullState>,
    ) -> Self {
        SourceCollector {
            out_schema,
            output,
            pull_state,
            deserializer: None,
            row_checks: None,
            checking: false,
            batch_size: 512,
            linger: Duration::from_millis(100),
            buffer_started: None,
            pending_watermark: None,
            sent_watermark: None,
            ended: false,
        }
    }

    /// Sets up message decoding for table `schema` (its format, `json.timestamp-format`
    /// and columns; the rows' schema is `schema.rows_schema()`), with metadata columns
    /// filled from the values passed to `deserialize_slice`. `batch_size` rows or `linger`
    /// time, whichever comes first, make `should_flush` true.
    ///
    /// Errors if the columns do not suit the format (see `Deserializer::new`).
    pub fn initialize_deserializer(
        &mut self,
        schema: &ConnectionSchema,
        batch_size: usize,
        linger: Duration,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(
            schema.rows_schema().fields() == self.out_schema.fields(),
            "the table's declared columns do not match the source's output schema"
        );
        self.deserializer = Some(Deserializer::new(schema)?);
        self.batch_size = batch_size.max(1);
        self.linger = linger;
        Ok(())
    }

    /// Decodes one message into the row buffer. `metadata` holds one value per metadata
    /// column, in declared order. Returns the number of rows the message yielded. On error
    /// (a value that does not fit its column) nothing of this message is buffered.
    pub fn deserialize_slice(
        &mut self,
        payload: &bytes::Bytes,
        metadata: &[FieldValue],
    ) -> Result<usize, DeserializeError> {
        self.decode_with(|d| d.deserialize(payload, metadata))
    }

    /// Like [`deserialize_slice`](Self::deserialize_slice) for format `avro`: `payload`
    /// was written with schema revision `writer` in `encoding` (see
    /// `Deserializer::deserialize_avro`).
    pub fn deserialize_avro(
        &mut self,
        payload: &bytes::Bytes,
        writer: &AvroSchema,
        encoding: AvroEncoding,
        metadata: &[FieldValue],
    ) -> Result<usize, DeserializeError> {
        self.decode_with(|d| d.deserialize_avro(payload, writer, encoding, metadata))
    }

    /// Runs one decode on the deserializer and starts the linger clock on the first row.
    fn decode_with(
        &mut self,
        decode: impl FnOnce(&mut Deserializer) -> Result<usize, DeserializeError>,
    ) -> Result<usize, DeserializeError> {
        let d = self
            .deserializer
            .as_mut()
            .expect("initialize_deserializer must be called before decoding");
        let rows = decode(d)?;
        if self.buffer_started.is_none() {
            self.buffer_started = Some(Instant::now());
        }
        Ok(rows)
    }

    /// The greatest event time (ns since the Unix epoch) of the last message decoded
    /// without error, from the table's event-time column (`ConnectionSchema::event_time`);
    /// `None` without one or when the message yielded no rows.
    pub fn last_event_time(&self) -> Option<i64> {
        self.deserializer.as_ref().and_then(|d| d.last_event_time())
    }

    /// The decode failure of the next message for `reason`, found outside the decoder
    /// (e.g. the schema revision it names cannot be read).
    pub fn failure(&self, reason: String) -> DeserializeError {
        DeserializeError {
            message_index: self.buffered_messages(),
            reason,
        }
    }

    /// Messages decoded since the last flush.
    pub fn buffered_messages(&self) -> usize {
        self.deserializer
            .as_ref()
            .map_or(0, |d| d.buffered_messages())
    }

    /// True when the buffer holds `batch_size` rows or its oldest row waited `linger`.
    pub fn should_flush(&self) -> bool {
        let Some(d) = &self.deserializer else {
            return false;
        };
        d.buffered_rows() >= self.batch_size
            || (d.buffered_messages() > 0
                && self
                    .buffer_started
                    .is_some_and(|t| t.elapsed() >= self.linger))
    }

    /// When the buffer must be flushed by the linger rule, if it holds anything.
    pub fn flush_deadline(&self) -> Option<Instant> {
        self.buffer_started.map(|t| t + self.linger)
    }

    /// The SELECTs `check_rows` runs (set by the runtime).
    #[doc(hidden)]
    pub fn set_row_checks(&mut self, checks: Arc<dyn RowChecker>) {
        self.row_checks = Some(checks);
    }

    /// Asks for every buffered row to be checked against the SELECT of each query that
    /// reads this source before it is emitted: `flush_buffer_checked` then hands back the
    /// messages whose rows fail, for the source's failure policy (drop, nack,
    /// dead-letter). Off by default: a failing row then fails the job in its query's
    /// operator, naming the message. The check evaluates each SELECT once more per batch.
    pub fn check_rows(&mut self, on: bool) {
        self.checking = on;
    }

    /// Sends this subtask's watermark into the dataflow (issue 32, decision 0036), after
    /// every row emitted before it and every row still in the buffer (those go first, with
    /// the next flush: the watermark was computed with their event times). The source
    /// keeps it from going backwards; the same watermark twice is sent once. Fails only
    /// when the dataflow is gone.
    pub fn emit_watermark(&mut self, watermark: Watermark) -> anyhow::Result<()> {
        if self.buffered_messages() > 0 {
            self.pending_watermark = Some(watermark);
            return Ok(());
        }
        self.pending_watermark = None;
        self.send_watermark(watermark)
    }

    fn send_watermark(&mut self, watermark: Watermark) -> anyhow::Result<()> {
        if self.sent_watermark == Some(watermark) {
            return Ok(());
        }
        // After the final barrier the subtask's output has ended: a watermark its source
        // still computes (a split turning idle) goes nowhere, and a send would find the
        // dataflow gone.
        if self.ended {
            return Ok(());
        }
        self.output.watermark(watermark)?;
        self.sent_watermark = Some(watermark);
        Ok(())
    }

    /// Emits the buffered rows as one batch. Returns the number of rows emitted.
    /// Decoding errors are all reported by `deserialize_slice`; this fails only when the
    /// dataflow is gone. With `check_rows(true)`, use `flush_buffer_checked`: this one
    /// fails on a message whose rows a query's SELECT rejects.
    pub async fn flush_buffer(&mut self) -> anyhow::Result<usize> {
        let flushed = self.flush_buffer_checked().await?;
        if let Some(r) = flushed.rejected.first() {
            anyhow::bail!("message {} of the batch: {}", r.message_index, r.failure);
        }
        Ok(flushed.rows)
    }

    /// Emits the buffered rows as one batch, without the rows of any message a query's
    /// SELECT fails on (only with `check_rows(true)`); returns the rows emitted and those
    /// messages, by their index among the messages decoded since the last flush. Fails
    /// only when the dataflow is gone.
    pub async fn flush_buffer_checked(&mut self) -> anyhow::Result<Flushed> {
        self.buffer_started = None;
        let Some(d) = self.deserializer.as_mut() else {
            return Ok(Flushed::default());
        };
        let starts = d.message_starts().to_vec();
        let Some(batch) = d.flush()? else {
            if let Some(w) = self.pending_watermark.take() {
                self.send_watermark(w)?;
            }
            return Ok(Flushed::default());
        };
        let (batch, rejected) = match &self.row_checks {
            Some(checks) if self.checking => checks.reject_failing(batch, &starts),
            _ => (batch, Vec::new()),
        };
        let rows = batch.num_rows();
        if rows > 0 {
            self.collect(batch).await?;
        }
        if let Some(w) = self.pending_watermark.take() {
            self.send_watermark(w)?;
        }
        Ok(Flushed { rows, rejected })
    }

    /// Emits a batch into the dataflow, waiting for back-pressure permits first (one per
    /// row; a batch larger than the process's share is emitted in slices).
    pub async fn collect(&mut self, batch: RecordBatch) -> anyhow::Result<()> {
        let max = self.output.max_batch_rows() as usize;
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = (batch.num_rows() - offset).min(max);
            let part = if len == batch.num_rows() {
                batch.clone()
            } else {
                batch.slice(offset, len)
            };
            self.collect_part(part).await?;
            offset += len;
        }
        Ok(())
    }

    async fn collect_part(&mut self, batch: RecordBatch) -> anyhow::Result<()> {
        let want = batch.num_rows() as u32;
        // Waiting for back-pressure is not idleness (see `PullState`).
        self.pull_state
            .blocked
            .store(true, std::sync::atomic::Ordering::Release);
        let permit = self.output.permits().acquire_many(want).await;
        self.pull_state
            .blocked
            .store(false, std::sync::atomic::Ordering::Release);
        let permit = permit.map_err(|_| anyhow::anyhow!("the dataflow has shut down"))?;
        permit.forget();
        self.output.batch(batch, want)
    }
}

/// What the runtime plugs into a [`SourceContext`] of one source subtask (the fields a connector does not touch).
#[derive(Clone)]
pub struct SourceRuntime {
    pub output: Arc<dyn SourceOutput>,
    pub pull_state: Arc<PullState>,
    /// `RuntimeConfig::drain`: the final barrier carries the watermark at the end of time.
    pub drain: bool,
    /// This process's watermark alignment groups.
    pub alignment: Arc<crate::alignment::Alignment>,
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
