//! The runtime's end of a source subtask (SPEC 2.2, issue 46): where the collector's
//! rows, watermarks and barriers go, what the context reports to the coordinator, and the
//! row checks the plan runs before rows are emitted. The runtime and the plan implement
//! these traits; the SPI knows nothing of Timely or DataFusion.

use arrow::array::RecordBatch;
use tokio::sync::Semaphore;

use crate::{OperatorState, TaskInfo, Watermark};

/// Where one source subtask's output goes, in the order it is sent. Every method but
/// `permits` and `max_batch_rows` fails only when the dataflow is gone.
pub trait SourceOutput: Send + Sync {
    /// This process's back-pressure permits (`--max-inflight-rows`, decision 0021): the
    /// collector takes, and forgets, one per row before `batch`; the rows give them back
    /// once a sink took them.
    fn permits(&self) -> &Semaphore;
    /// The most permits (rows) one `batch` may carry: a larger batch goes in slices.
    fn max_batch_rows(&self) -> u32;
    /// Rows into the dataflow, holding the `permits` the collector took for them.
    fn batch(&self, batch: RecordBatch, permits: u32) -> anyhow::Result<()>;
    /// The subtask's watermark, after every row sent before it.
    fn watermark(&self, watermark: Watermark) -> anyhow::Result<()>;
    /// Closes epoch `epoch` of the subtask's output.
    fn barrier(&self, epoch: u64) -> anyhow::Result<()>;
    /// No more output (after a `then_stop` barrier).
    fn finished(&self) -> anyhow::Result<()>;
    /// The subtask's state at the barrier of `epoch`, for the coordinator's checkpoint;
    /// sent before the barrier itself.
    fn snapshot(&self, task: &TaskInfo, epoch: u64, state: OperatorState);
    /// The subtask has no more input (a bounded source reached its end).
    fn end_of_input(&self, task: &TaskInfo);
}

/// The SELECTs of the queries reading a source, run on its rows before they are emitted
/// when the source asked for it (`SourceCollector::check_rows`, issue 17).
pub trait RowChecker: Send + Sync {
    /// Removes from `batch` every row of each message (`starts`: the first row of each
    /// message, ascending) on which some query's SELECT fails; returns what is left, in
    /// order, and the rejected messages in message order.
    fn reject_failing(
        &self,
        batch: RecordBatch,
        starts: &[usize],
    ) -> (RecordBatch, Vec<RejectedMessage>);
}

/// A buffered message whose rows failed a row check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedMessage {
    /// The message's position among the messages decoded since the last flush (the order
    /// of `SourceCollector::deserialize_slice` calls that succeeded).
    pub message_index: usize,
    /// The statement, the expression and the error, e.g. ``INSERT INTO out SELECT ...:
    /// `CAST(v AS BIGINT)` failed: Cast error: Cannot cast string 'x' to value of Int64
    /// type``.
    pub failure: String,
}
