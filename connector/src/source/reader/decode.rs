//! Decoding deliveries into rows and the bad-message policies (`scan.deserialization-
//! failure-policy`, `scan.max-consecutive-failures`, the dead-letter queue).

use super::*;

/// A message decoded into the collector's buffer, not yet staged.
pub(super) struct Buffered {
    pub(super) split: usize,
    pub(super) id: MessageId,
    /// Its payload and context, kept only under the `dead-letter` policy.
    pub(super) letter: Option<(bytes::Bytes, Box<crate::source::park::MessageContext>)>,
    /// The record id this message put into the deduplication set (taken out again if
    /// its rows are rejected).
    pub(super) dedup: Option<u128>,
}

/// `dlq-connector` of the source's dead letters.
pub const DEAD_LETTER_CONNECTOR: &str = "pubsub-source";

impl SourceReader {
    /// Decodes a tracked delivery into the buffer. A decode failure is handled by the
    /// failure policy.
    pub(super) fn decode(
        &mut self,
        split: usize,
        held: Held,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<()> {
        // Event time from a column is known once the message is decoded.
        let from_column = self.op.schema.event_time.is_some();
        if !from_column {
            self.observe_event_time(split, held.event_ns);
        }
        // A copy of a record already seen is acknowledged with the next checkpoint and
        // yields no row; a first copy holds its id from now (its rows go out before the
        // next barrier, so the checkpoint that covers them holds the id).
        let mut seen = None;
        if let (Some(d), Some(record)) = (&self.dedup, &held.dedup) {
            let (value, published_ms) = record.as_ref();
            match d.check(value, *published_ms, self.subtask)? {
                None => {
                    self.splits[split].tracker.stage([&held.id]);
                    return Ok(());
                }
                Some(hash) => seen = Some(hash),
            }
        }
        // `Err`: why the message yields no rows. No event time (`scan.event-time.attribute`
        // missing or not a timestamp) fails it like a payload that does not decode.
        let decoded = match held.event_error.as_deref() {
            Some(why) => Err(why.to_string()),
            None => match &held.writer {
                None => collector.deserialize_slice(&held.payload, &held.meta),
                Some(Ok((w, encoding))) => {
                    collector.deserialize_avro(&held.payload, w, *encoding, &held.meta)
                }
                Some(Err(reason)) => Err(collector.failure(reason.clone())),
            }
            .map_err(|e| format!("could not be decoded as {:?}: {}", self.op.format, e.reason)),
        };
        if let (Err(_), Some(h)) = (&decoded, seen) {
            // Only a message whose rows go out counts as seen.
            self.forget_seen(h);
        }
        match decoded {
            Ok(rows) => {
                if rows == 0 {
                    self.counters().skipped.add(1);
                }
                if from_column {
                    self.observe_event_time(split, collector.last_event_time());
                }
                // A dead letter for a row failure needs the payload (kept, like the
                // context, only under the `dead-letter` policy).
                let letter = held.context.map(|c| (held.payload, c));
                self.failures.decoded();
                self.buffered.push(Buffered {
                    split,
                    id: held.id,
                    letter,
                    dedup: seen,
                });
            }
            Err(why) => {
                self.counters().in_error.add(1);
                // Under `fail`, `on_bad_message` fails the job. Otherwise, past the bound,
                // this message is left unhandled (released at close).
                if bad_message_action(self.config.deserialization_failure_policy)
                    != BadMessageAction::Fail
                {
                    self.count_failure(split, &held.id, &why, true)?;
                }
                self.on_bad_message(split, held.id, held.payload, held.context, &why)?;
            }
        }
        Ok(())
    }

    /// A [`pubsub_engine_spi::PermanentError`]: Pub/Sub redelivers the same message after a
    /// restart, which fails on it again.
    pub(super) fn decode_error(
        &self,
        split: usize,
        id: &str,
        e: &DeserializeError,
    ) -> anyhow::Error {
        pubsub_engine_spi::PermanentError::wrap(anyhow::anyhow!(
            "message {id} from {} could not be decoded as {:?}: {} (the message was not acknowledged)",
            self.splits[split].subscription,
            self.op.format,
            e.reason
        ))
    }

    /// Records a failed message (`why`: what failed) in the run of failures; the job's
    /// error when the run passes `scan.max-consecutive-failures`. `decoded`: it failed
    /// at decoding, else its rows failed in SQL (the last of the run so far is then
    /// known only now, see [`FailureRun`]).
    pub(super) fn count_failure(
        &mut self,
        split: usize,
        id: &str,
        why: &str,
        decoded: bool,
    ) -> anyhow::Result<()> {
        self.last_failure = format!(
            "message {id} from {} {why}",
            self.splits[split].subscription
        );
        let over = if decoded {
            self.failures.decode_failed()
        } else {
            self.failures.emitted(false)
        };
        match over {
            Some(n) => Err(self.too_many_failures(n)),
            None => Ok(()),
        }
    }

    /// A [`pubsub_engine_spi::PermanentError`]: `n` messages in a row failed, more than
    /// `scan.max-consecutive-failures`. A restart would read the same messages (none of
    /// the run's last one and nothing after it was acknowledged) and fail on them again.
    pub(super) fn too_many_failures(&self, n: u64) -> anyhow::Error {
        pubsub_engine_spi::PermanentError::wrap(anyhow::anyhow!(
            "{n} messages in a row failed in source subtask {} (more than '{}' = {}) under '{}' = '{}': that looks like a systematic fault, such as a column type that does not match the data, rather than bad messages; the job stops instead of handling them all (messages not yet acknowledged are released for redelivery); the last: {}",
            self.subtask,
            pubsub_table_options::MAX_CONSECUTIVE_FAILURES,
            self.failures.max().map_or(-1, |m| m as i64),
            pubsub_table_options::DESERIALIZATION_FAILURE_POLICY,
            self.config.deserialization_failure_policy.as_str(),
            self.last_failure
        ))
    }

    /// Applies the bad-message policy to a message that failed to decode, or whose rows
    /// failed a query's SELECT (`why` says which; none of its rows was emitted). `fail`
    /// is the caller's (the job fails; close nacks the handle). `drop`: the message
    /// is staged now (it emits no rows) so it is bound at the next barrier and acked on
    /// commit. `nack`: it is nacked at once, for the subscription's dead-letter policy.
    /// `dead-letter`: its payload is queued for the dead-letter queue (offered by the run
    /// loop, flushed before the next checkpoint is reported) and it is staged like `drop`.
    pub(super) fn on_bad_message(
        &mut self,
        split: usize,
        id: MessageId,
        payload: bytes::Bytes,
        context: Option<Box<crate::source::park::MessageContext>>,
        why: &str,
    ) -> anyhow::Result<()> {
        let sub = self.splits[split].subscription.clone();
        match bad_message_action(self.config.deserialization_failure_policy) {
            BadMessageAction::Fail => Err(pubsub_engine_spi::PermanentError::wrap(
                anyhow::anyhow!("message {id} from {sub} {why} (the message was not acknowledged)"),
            )),
            BadMessageAction::Drop => {
                self.splits[split].tracker.stage([&id]);
                let c = &self.counters().dropped;
                c.add(1);
                let n = c.get();
                if should_log_bad(n) {
                    tracing::warn!(subscription = %sub, "dropped message {id}: it {why} (policy 'drop': acknowledged with the next checkpoint; {n} dropped so far)");
                }
                Ok(())
            }
            BadMessageAction::Nack => {
                self.splits[split].tracker.release(&id);
                let c = &self.counters().nacked_bad;
                c.add(1);
                let n = c.get();
                if should_log_bad(n) {
                    tracing::warn!(subscription = %sub, "nacked message {id}: it {why} (policy 'nack': the dead-letter policy forwards it; {n} nacked so far)");
                }
                Ok(())
            }
            BadMessageAction::DeadLetter => {
                self.splits[split].tracker.stage([&id]);
                let error = format!("message {id} {why}");
                let (attributes, ordering_key) = context
                    .map(|c| (c.attributes.into_iter().collect(), c.ordering_key))
                    .unwrap_or_default();
                self.letters.push(DeadLetter {
                    payload,
                    connector: DEAD_LETTER_CONNECTOR,
                    destination: sub.clone(),
                    error,
                    subtask: self.subtask,
                    attributes,
                    ordering_key,
                    message_id: Some(id.to_string()),
                });
                let n = self.counters().in_error.get();
                if should_log_bad(n) {
                    let topic = self.dead_letter.as_ref().map_or("", |q| q.topic());
                    tracing::warn!(subscription = %sub, "dead-lettering message {id} to {topic}: it {why} (policy 'dead-letter': acknowledged with the checkpoint after its dead letter is published; {n} messages in error so far)");
                }
                Ok(())
            }
        }
    }

    /// Offers the dead letters decoding produced to the queue (an offer may wait for
    /// publishes at the queue's in-flight bound, within its flush timeout). Errors fail
    /// the job: the messages are staged but never bound, so close nacks them.
    pub(super) async fn offer_letters(&mut self) -> anyhow::Result<()> {
        if self.letters.is_empty() {
            return Ok(());
        }
        let Some(q) = self.dead_letter.as_mut() else {
            anyhow::bail!("policy 'dead-letter' without a dead-letter queue");
        };
        for letter in self.letters.drain(..) {
            q.offer(letter).await?;
        }
        Ok(())
    }

    /// Before a checkpoint is reported: offers what is left and makes every dead letter
    /// durable. An error fails the job, so none of the checkpoint's messages is acked.
    pub(super) async fn flush_dead_letters(&mut self) -> anyhow::Result<()> {
        self.offer_letters().await?;
        if let Some(q) = self.dead_letter.as_mut() {
            q.flush().await?;
        }
        Ok(())
    }
}
