//! Operator traits: sources produce rows, `ArrowOperator`s (sinks) consume them.

use arrow::array::RecordBatch;
use async_trait::async_trait;

use super::context::{OperatorContext, SourceCollector, SourceContext};
use pubsub_engine_types::{CheckpointBarrier, SourceFinishType, Watermark};

/// A source subtask. `run` owns the read loop: it must watch `ctx.control_rx` and handle
/// `Checkpoint` (bind in-flight work to the epoch, then `ctx.start_checkpoint`), `Commit`
/// (finalize everything bound to epochs `<=` the committed one) and `Stop`.
#[async_trait]
pub trait SourceOperator: Send {
    fn name(&self) -> String;

    /// Connects to external systems; errors fail the job before any data flows. Runs per
    /// subtask, concurrently with the other subtasks of every process, after the table's
    /// job-level `Connector::prepare_source` returned; work that must happen once per
    /// job before anyone reads belongs there.
    async fn on_start(&mut self, _ctx: &mut SourceContext) -> anyhow::Result<()> {
        Ok(())
    }

    /// Reads until stopped. An error fails the job.
    async fn run(
        &mut self,
        ctx: &mut SourceContext,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<SourceFinishType>;

    /// Releases external resources; called after `run` returns, also after an error.
    async fn on_close(&mut self, _ctx: &mut SourceContext) -> anyhow::Result<()> {
        Ok(())
    }
}

/// A non-source operator subtask, used by sinks (Arroyo's `ArrowOperator`).
#[async_trait]
pub trait ArrowOperator: Send {
    fn name(&self) -> String;

    async fn on_start(&mut self, _ctx: &mut OperatorContext) -> anyhow::Result<()> {
        Ok(())
    }

    /// Takes one batch of input rows. May wait (back-pressure) but must not wait for a
    /// checkpoint.
    async fn process_batch(
        &mut self,
        batch: RecordBatch,
        ctx: &mut OperatorContext,
    ) -> anyhow::Result<()>;

    /// The operator's input watermark advanced, or every upstream subtask turned idle, or
    /// one came back (issue 32, decision 0036). Rows given to `process_batch` after it
    /// with an event time at or below the last `Watermark::EventTime` are late (sources
    /// still emit them: a redelivery, a subtask back from idle); the operator decides what
    /// they mean. It comes after every row it covers. An error fails the job.
    async fn handle_watermark(
        &mut self,
        _watermark: Watermark,
        _ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        Ok(())
    }

    /// Every input row of epochs `<= barrier.epoch` has been given to `process_batch`.
    /// A sink makes them durable before returning; an error fails the checkpoint and the
    /// job, so nothing of this epoch is committed.
    async fn handle_checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        ctx: &mut OperatorContext,
    ) -> anyhow::Result<()>;

    /// Checkpoint `epoch` completed.
    async fn handle_commit(
        &mut self,
        _epoch: u64,
        _ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        Ok(())
    }

    /// Releases external resources at the end of the job (also after an error).
    async fn on_close(&mut self, _ctx: &mut OperatorContext) -> anyhow::Result<()> {
        Ok(())
    }
}

/// What `Connector::make_operator` returns.
pub enum ConstructedOperator {
    Source(Box<dyn SourceOperator>),
    Operator(Box<dyn ArrowOperator>),
}
