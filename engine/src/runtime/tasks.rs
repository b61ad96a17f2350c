//! The async halves of operators: a source task runs `SourceOperator::run`; a sink task
//! feeds `ArrowOperator` and reports finished checkpoints back to its Timely operator.

use std::sync::mpsc::Sender;

use tokio::sync::mpsc::UnboundedReceiver;

use super::{activate, ActivatorSlot, CoordEvent, JobShared, SinkEvent};
use crate::spi::{ArrowOperator, OperatorContext, SourceCollector, SourceContext, SourceOperator};

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
    // Report a failure before the collector (and so the Timely channel) is dropped.
    if let Err(e) = &result {
        let _ = shared.coordinator.send(CoordEvent::TaskFailed {
            operator_id: operator_id.clone(),
            subtask,
            error: format!("{e:#}"),
            config: crate::ConfigError::is_in(e),
        });
    }
    if let Err(e) = op.on_close(&mut ctx).await {
        tracing::warn!(operator = %operator_id, subtask, "close failed: {e:#}");
    }
    drop(collector);
    if result.is_ok() {
        let _ = shared.coordinator.send(CoordEvent::TaskFinished {
            operator_id,
            subtask,
        });
    }
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
            config: crate::ConfigError::is_in(e),
        });
    };
    let mut ok = true;
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
                }
                // The permits go back when the last query's clone of these rows is dropped.
                drop(rows.permits);
            }
            SinkEvent::Checkpoint(barrier) if ok => {
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
