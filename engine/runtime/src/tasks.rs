//! The async halves of operators: a source task runs `SourceOperator::run`; a sink task
//! feeds `ArrowOperator` and reports finished checkpoints back to its Timely operator.

use std::sync::mpsc::Sender;

use tokio::sync::mpsc::UnboundedReceiver;

use super::{activate, ActivatorSlot, CoordEvent, JobShared, SinkEvent};
use pubsub_engine_spi::{
    ArrowOperator, OperatorContext, SourceCollector, SourceContext, SourceOperator, Watermark,
};

pub(crate) async fn run_source(
    mut op: Box<dyn SourceOperator>,
    mut ctx: SourceContext,
    mut collector: SourceCollector,
    shared: JobShared,
) {
    let result = async {
        op.on_start(&mut ctx).await?;
        let _ = shared.coordinator.send(CoordEvent::TaskStarted {
            operator_id: ctx.task_info.operator_id.clone(),
            subtask: ctx.task_info.task_index,
        });
        op.run(&mut ctx, &mut collector).await
    }
    .await;
    let operator_id = ctx.task_info.operator_id.clone();
    let subtask = ctx.task_info.task_index;
    // Report a failure before the collector and the context (and so the Timely channel,
    // which their `SourcePort` holds) are dropped.
    if let Err(e) = &result {
        let _ = shared.coordinator.send(CoordEvent::TaskFailed {
            operator_id: operator_id.clone(),
            subtask,
            error: format!("{e:#}"),
            permanent: pubsub_engine_spi::restart_cannot_fix(e),
        });
    }
    if let Err(e) = op.on_close(&mut ctx).await {
        tracing::warn!(operator = %operator_id, subtask, "close failed: {e:#}");
    }
    drop(collector);
    if result.is_ok() {
        let _ = shared.coordinator.send(CoordEvent::TaskFinished {
            operator_id: operator_id.clone(),
            subtask,
        });
    }
    let _ = shared.coordinator.send(CoordEvent::TaskClosed {
        operator_id,
        subtask,
    });
}

pub(crate) async fn run_sink(
    mut op: Box<dyn ArrowOperator>,
    mut ctx: OperatorContext,
    mut rx: UnboundedReceiver<SinkEvent>,
    done_tx: Sender<u64>,
    activator: ActivatorSlot,
    shared: JobShared,
) {
    let operator_id = ctx.task_info.operator_id.clone();
    let subtask = ctx.task_info.task_index;
    let fail = |error: String, e: &anyhow::Error| {
        let _ = shared.coordinator.send(CoordEvent::TaskFailed {
            operator_id: operator_id.clone(),
            subtask,
            error,
            permanent: pubsub_engine_spi::restart_cannot_fix(e),
        });
    };
    let input_watermark = ctx.gauge(pubsub_engine_spi::INPUT_WATERMARK_MS);
    let mut ok = true;
    // Rows were dropped unpublished (after an abort): no checkpoint may complete after
    // them, or the leader could commit rows this sink never wrote.
    let mut skipped = false;
    match op.on_start(&mut ctx).await {
        Ok(()) => {
            let _ = shared.coordinator.send(CoordEvent::TaskStarted {
                operator_id: operator_id.clone(),
                subtask,
            });
        }
        Err(e) => {
            fail(format!("{e:#}"), &e);
            ok = false;
        }
    }
    while let Some(ev) = rx.recv().await {
        match ev {
            SinkEvent::Batch(rows) => {
                // After a failure, queued rows belong to no checkpoint: skip them.
                if ok && !shared.is_aborted() {
                    if let Err(e) = op.process_batch(rows.batch, &mut ctx).await {
                        fail(format!("{e:#}"), &e);
                        ok = false;
                    }
                } else {
                    skipped = true;
                }
                // The permits go back when the last query's clone of these rows is dropped.
                drop(rows.permits);
            }
            SinkEvent::Checkpoint(barrier) if ok && !skipped && !shared.is_aborted() => {
                match op.handle_checkpoint(barrier, &mut ctx).await {
                    Ok(()) => {
                        let _ = done_tx.send(barrier.epoch);
                        activate(&activator);
                    }
                    Err(e) => {
                        fail(format!("checkpoint {} failed: {e:#}", barrier.epoch), &e);
                        ok = false;
                    }
                }
            }
            SinkEvent::Watermark(w) => {
                if let Watermark::EventTime(ns) = w {
                    input_watermark.set(ns.div_euclid(1_000_000).max(0) as u64);
                }
                if ok && !shared.is_aborted() {
                    if let Err(e) = op.handle_watermark(w, &mut ctx).await {
                        fail(format!("{e:#}"), &e);
                        ok = false;
                    }
                }
            }
            SinkEvent::Commit(epoch) if ok => {
                if let Err(e) = op.handle_commit(epoch, &mut ctx).await {
                    fail(format!("commit {epoch} failed: {e:#}"), &e);
                    ok = false;
                }
            }
            SinkEvent::Close => break,
            _ => {}
        }
    }
    if let Err(e) = op.on_close(&mut ctx).await {
        tracing::warn!(operator = %operator_id, subtask, "close failed: {e:#}");
    }
    if ok {
        let _ = shared.coordinator.send(CoordEvent::TaskFinished {
            operator_id,
            subtask,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Permits, Rows};
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use pubsub_engine_spi::{CheckpointBarrier, TaskInfo};
    use std::sync::{Arc, Mutex};

    /// Counts the rows it is given; every checkpoint succeeds.
    struct CountingSink(Arc<Mutex<usize>>);

    #[async_trait::async_trait]
    impl ArrowOperator for CountingSink {
        fn name(&self) -> String {
            "counting".into()
        }
        async fn process_batch(
            &mut self,
            batch: RecordBatch,
            _ctx: &mut OperatorContext,
        ) -> anyhow::Result<()> {
            *self.0.lock().unwrap() += batch.num_rows();
            Ok(())
        }
        async fn handle_checkpoint(
            &mut self,
            _barrier: CheckpointBarrier,
            _ctx: &mut OperatorContext,
        ) -> anyhow::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sink_that_skipped_rows_after_an_abort_completes_no_checkpoint() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))])
                .unwrap();
        let (coord, _events) = tokio::sync::mpsc::unbounded_channel();
        let shared = JobShared {
            flow: crate::Flow::new(0, 1, 1, 10, &Default::default(), Default::default()).0,
            coordinator: coord,
            aborted: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            alignment: Arc::new(pubsub_engine_spi::alignment::Alignment::new(0)),
        };
        let ctx = OperatorContext {
            task_info: TaskInfo {
                job_id: "j".into(),
                operator_id: "q0-sink-d".into(),
                operator_name: "d".into(),
                task_index: 0,
                parallelism: 1,
                run: 1,
            },
            in_schema: schema,
            metrics: Default::default(),
            state: Default::default(),
            first_run: true,
        };
        let rows = || {
            SinkEvent::Batch(Rows {
                batch: batch.clone(),
                permits: Arc::new(Permits::none()),
            })
        };
        let barrier = |epoch| {
            SinkEvent::Checkpoint(CheckpointBarrier {
                epoch,
                min_epoch: 1,
                timestamp: std::time::SystemTime::now(),
                then_stop: false,
            })
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let written = Arc::new(Mutex::new(0));
        tx.send(rows()).unwrap();
        tx.send(barrier(1)).unwrap();
        let sink = tokio::spawn(run_sink(
            Box::new(CountingSink(written.clone())),
            ctx,
            rx,
            done_tx,
            Arc::new(Mutex::new(None)),
            shared.clone(),
        ));
        let first = done_rx.recv_timeout(std::time::Duration::from_secs(30));
        assert_eq!(first, Ok(1), "a normal checkpoint completes");
        // The job aborts: these rows are skipped, so checkpoint 2 must not complete.
        shared.abort();
        tx.send(rows()).unwrap();
        tx.send(barrier(2)).unwrap();
        tx.send(SinkEvent::Close).unwrap();
        sink.await.unwrap();
        assert_eq!(*written.lock().unwrap(), 2, "the second batch was skipped");
        assert!(done_rx.try_recv().is_err(), "checkpoint 2 completed");
    }
}
