//! The failure handler (SPEC 6): a row the encoder rejects or a message rejected on its
//! own either fails the job, is logged and dropped, or goes to the dead-letter queue.

use pubsub_engine_spi::{OperatorContext, PermanentError};
use pubsub_schema::FailureHandler;

use super::metrics::SinkMetrics;
use super::PubSubSink;
use crate::dead_letter::{DeadLetter, PubSubDeadLetterQueue};
use crate::source::policy::should_log_bad;

/// Where rejected rows go, and the count of rejections in a row.
pub struct FailureRoute {
    handler: FailureHandler,
    queue: Option<PubSubDeadLetterQueue>,
    destination: String,
    /// -1: no limit.
    max_in_a_row: i64,
    in_a_row: u64,
    subtask: usize,
}

impl FailureRoute {
    pub fn new(sink: &PubSubSink) -> anyhow::Result<Self> {
        let c = sink.config();
        let queue = match &c.dead_letter {
            Some(d) => Some(
                PubSubDeadLetterQueue::from_config(&sink.profile().project, d)?
                    .with_key_prefix("sink."),
            ),
            None => None,
        };
        Ok(FailureRoute {
            handler: c.failure_handler,
            queue,
            destination: sink.topic_name(),
            max_in_a_row: c.publisher.max_consecutive_rejections,
            in_a_row: 0,
            subtask: 0,
        })
    }

    /// Opens the dead-letter queue (its topic must exist). A queue that would go to real
    /// Pub/Sub beside a table on an emulator is refused first (exit 2).
    pub async fn open(&mut self, sink: &PubSubSink, ctx: &OperatorContext) -> anyhow::Result<()> {
        self.subtask = ctx.task_info.task_index;
        if let Some(q) = &mut self.queue {
            crate::dead_letter::check_not_inherited(sink.profile(), q, "sink.")?;
            q.set_counter(ctx.counter(crate::dead_letter::DEAD_LETTERS_PUBLISHED));
            q.open().await?;
        }
        Ok(())
    }

    /// A message was published: the run of rejections ends.
    pub fn accepted(&mut self) {
        self.in_a_row = 0;
    }

    /// Routes one rejected row (`payload`: its encoded data, if any; `message_id`: the
    /// source message it was read from, when the row carries it). Errors when the handler
    /// is `fail` or too many rows were rejected in a row (both a
    /// [`pubsub_engine_spi::PermanentError`]: a restart republishes the same rows and rejects
    /// them again), or when the dead-letter queue cannot take it.
    pub async fn reject(
        &mut self,
        payload: Vec<u8>,
        reason: String,
        message_id: Option<String>,
        metrics: &SinkMetrics,
    ) -> anyhow::Result<()> {
        metrics.rejected.add(1);
        self.in_a_row += 1;
        if self.max_in_a_row >= 0 && self.in_a_row > self.max_in_a_row as u64 {
            return Err(PermanentError::wrap(anyhow::anyhow!(
                "{} rows in a row were rejected (more than '{}' = {}), which looks like a systematic fault rather than bad rows; the last: {reason}",
                self.in_a_row,
                pubsub_table_options::MAX_CONSECUTIVE_REJECTIONS,
                self.max_in_a_row
            )));
        }
        match self.handler {
            FailureHandler::Fail => Err(PermanentError::wrap(anyhow::anyhow!(
                "{reason} (for {}; set '{}' to 'log-and-drop' or 'dead-letter' to route such rows)",
                self.destination,
                pubsub_table_options::FAILURE_HANDLER
            ))),
            FailureHandler::LogAndDrop => {
                metrics.skipped.add(1);
                let n = metrics.skipped.get();
                if should_log_bad(n) {
                    tracing::warn!(
                        "dropped a row for {}: {reason} ({n} dropped so far)",
                        self.destination
                    );
                }
                Ok(())
            }
            FailureHandler::DeadLetter => {
                let q = self
                    .queue
                    .as_mut()
                    .expect("the builder requires a queue with handler dead-letter");
                q.offer(DeadLetter {
                    payload: payload.into(),
                    connector: "pubsub-sink",
                    destination: self.destination.clone(),
                    error: reason,
                    subtask: self.subtask,
                    attributes: Default::default(),
                    ordering_key: String::new(),
                    message_id,
                })
                .await
            }
        }
    }

    /// Makes every dead letter durable (SPEC 6.1); runs after the sink drained.
    pub async fn flush(&mut self) -> anyhow::Result<()> {
        match &mut self.queue {
            Some(q) => q.flush().await,
            None => Ok(()),
        }
    }

    pub async fn close(&mut self) {
        if let Some(q) = &mut self.queue {
            q.close().await;
        }
    }
}
