//! The `blackhole` sink operator: encodes every row exactly as the Pub/Sub sink would
//! (the engine's [`Serializer`] for the table's `format` and `json.timestamp-format`),
//! then drops the bytes. The per-row work is the real encoding, so a
//! `nexmark -> blackhole` pipeline measures the engine and the formats without a service.

use arrow::array::RecordBatch;
use async_trait::async_trait;
use pubsub_engine_format::Serializer;
use pubsub_engine_spi::{
    ArrowOperator, CheckpointBarrier, Counter, OperatorConfig, OperatorContext, ROWS_WRITTEN,
};

/// Counter: payload bytes encoded (and discarded) by blackhole sinks.
pub const BYTES_ENCODED: &str = "bytes_encoded";

/// One subtask of a `blackhole` sink table.
pub struct BlackholeSink {
    serializer: Serializer,
    written: Counter,
    bytes: Counter,
}

impl BlackholeSink {
    pub fn new(op: OperatorConfig) -> Self {
        BlackholeSink {
            serializer: Serializer::new(&op.schema),
            written: Counter::default(),
            bytes: Counter::default(),
        }
    }
}

#[async_trait]
impl ArrowOperator for BlackholeSink {
    fn name(&self) -> String {
        "blackhole-sink".into()
    }

    async fn on_start(&mut self, ctx: &mut OperatorContext) -> anyhow::Result<()> {
        self.written = ctx.counter(ROWS_WRITTEN);
        self.bytes = ctx.counter(BYTES_ENCODED);
        Ok(())
    }

    /// Encodes the batch (an encoding error fails the job, as in the Pub/Sub sink), counts
    /// rows and bytes, and drops the payloads.
    async fn process_batch(
        &mut self,
        batch: RecordBatch,
        _ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        let payloads = self.serializer.serialize(&batch)?;
        let bytes: usize = payloads.iter().map(Vec::len).sum();
        self.written.add(payloads.len() as u64);
        self.bytes.add(bytes as u64);
        Ok(())
    }

    /// Nothing is held: every checkpoint succeeds at once.
    async fn handle_checkpoint(
        &mut self,
        _barrier: CheckpointBarrier,
        _ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        Ok(())
    }
}
