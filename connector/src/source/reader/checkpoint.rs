//! Checkpoint binding: emitting the buffered rows and staging their messages, binding
//! them at a barrier, acking them on commit, and the first-checkpoint detector.

use super::*;

/// The failure of each of `n` buffered messages (`None`: its rows went out), from the
/// rejections `(message index, failure)` of a flush. A rejection of an index out of range,
/// or a second one of an index, is an internal error (never a silent guess).
pub(super) fn failures_by_index(
    n: usize,
    rejected: impl IntoIterator<Item = (usize, String)>,
) -> anyhow::Result<Vec<Option<String>>> {
    let mut failures: Vec<Option<String>> = vec![None; n];
    for (index, failure) in rejected {
        let Some(slot) = failures.get_mut(index).filter(|s| s.is_none()) else {
            anyhow::bail!("internal error: a rejected message index {index} is not buffered");
        };
        *slot = Some(failure);
    }
    Ok(failures)
}

impl SourceReader {
    /// A checkpoint barrier: emits and stages what is buffered, makes every staged bad
    /// message's dead letter durable, binds the staged messages to the barrier's epoch
    /// (acked on its `Commit`), snapshots the dedup ids, and forwards the barrier. The
    /// final barrier (`then_stop`) first stops the streams.
    pub(super) async fn on_barrier(
        &mut self,
        barrier: pubsub_engine_spi::CheckpointBarrier,
        ctx: &mut SourceContext,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<()> {
        if barrier.then_stop {
            self.stopping = true;
            self.stop_pulling().await;
        }
        self.flush(collector).await?;
        // Every staged bad message's dead letter is durable before the checkpoint that
        // acks it is reported.
        self.flush_dead_letters().await?;
        for s in &mut self.splits {
            s.tracker.bind(barrier.epoch);
        }
        if let Some(r) = &self.replays {
            let ids = r.snapshot(self.splits.iter().flat_map(|s| s.tracker.bound_ids()));
            ctx.state.values.insert(replay::STATE_KEY.to_string(), ids);
        }
        let backlog = self.backlog_now();
        if let Some(w) = self.watermarks.as_mut() {
            if let Some(b) = backlog {
                w.set_backlog(b);
            }
            let status = w.advance(Instant::now());
            // The watermark of the checkpoint goes ahead of its barrier: an operator's
            // checkpointed watermark then never lags the sources' one.
            self.watermark_out = None;
            if let Some(mark) = status.to_emit() {
                collector.emit_watermark(mark)?;
            }
            ctx.state.values.insert(
                watermark::STATE_KEY.to_string(),
                watermark::snapshot(status.watermark_ns),
            );
            ctx.state.values.insert(
                watermark::SOURCE_KEY.to_string(),
                serde_json::Value::from(self.event_time_source.as_str()),
            );
        }
        if let Some(ids) = self.dedup.as_ref().and_then(|d| d.snapshot(self.subtask)) {
            ctx.state
                .values
                .insert(crate::source::dedup::STATE_KEY.to_string(), ids);
        }
        ctx.start_checkpoint(barrier, collector).await
    }

    /// Emits the buffered rows, then stages their messages. While the emit waits for
    /// back-pressure permits, deliveries keep being taken into the paused buffers (and a
    /// split that would cross its cap is parked); once it completes, parked splits reopen.
    pub(super) async fn flush(&mut self, collector: &mut SourceCollector) -> anyhow::Result<()> {
        if self.buffered.is_empty() {
            return Ok(());
        }
        let emitted = {
            let mut emit = std::pin::pin!(collector.flush_buffer_checked());
            loop {
                let take = self.rx.is_some();
                let rx = self.rx.as_mut();
                tokio::select! {
                    biased;
                    r = &mut emit => break r,
                    pulled = async { rx.expect("guarded by take").recv().await }, if take => match pulled {
                        Some((tag, p)) => {
                            if let Some(split) = self.on_pulled_paused(tag, p)? {
                                self.park(split).await;
                            }
                        }
                        None => self.rx = None,
                    },
                }
            }
        };
        if !self.any_paused() && self.may_take(Instant::now()) {
            self.reopen_parked();
        }
        let flushed = match emitted {
            Ok(flushed) => flushed,
            Err(e) => {
                // The deserializer validates fully in `deserialize_slice`, so this is a
                // fallback: whatever the policy, a flush-time decode error fails the job.
                if let Some(d) = e.downcast_ref::<DeserializeError>() {
                    let (split, id) = self
                        .buffered
                        .get(d.message_index)
                        .map(|b| (b.split, b.id.clone()))
                        .unwrap_or_default();
                    return Err(self.decode_error(split, &id, d));
                }
                return Err(e);
            }
        };
        self.counters().fetches.add(1);
        if flushed.rejected.is_empty() {
            // The common case: every message's rows went out. Keeps the buffer's capacity.
            for i in 0..self.buffered.len() {
                if let Some(n) = self.failures.emitted(true) {
                    return Err(self.too_many_failures(n));
                }
                let b = &self.buffered[i];
                self.splits[b.split].tracker.stage([&b.id]);
            }
            self.buffered.clear();
            return Ok(());
        }
        let buffered = std::mem::take(&mut self.buffered);
        // Messages whose rows a query's SELECT failed on: none of their rows went out.
        let failures = failures_by_index(
            buffered.len(),
            flushed
                .rejected
                .into_iter()
                .map(|r| (r.message_index, r.failure)),
        )?;
        // In decode order, so the run of failures counts them as they came.
        for (b, failure) in buffered.into_iter().zip(failures) {
            let Some(failure) = failure else {
                if let Some(n) = self.failures.emitted(true) {
                    return Err(self.too_many_failures(n));
                }
                self.splits[b.split].tracker.stage([&b.id]);
                continue;
            };
            self.counters().in_error.add(1);
            if let Some(h) = b.dedup {
                self.forget_seen(h);
            }
            let why = format!("failed in SQL: {failure}");
            // Past the bound, this message is left unhandled (released at close).
            self.count_failure(b.split, &b.id, &why, false)?;
            let (payload, context) = match b.letter {
                Some((p, c)) => (p, Some(c)),
                None => (bytes::Bytes::new(), None),
            };
            self.on_bad_message(b.split, b.id, payload, context, &why)?;
        }
        Ok(())
    }

    /// Checkpoint `epoch` committed: acks what was bound to it; with
    /// `await_ack_confirmation`, waits for the server to confirm them (exactly-once
    /// subscriptions) and fails on a rejection or the timeout.
    pub(super) async fn commit(&mut self, epoch: u64) -> anyhow::Result<()> {
        let wait = self
            .options
            .config()
            .await_ack_confirmation_ms
            .map(Duration::from_millis);
        let mut confirmations: Vec<BoxFuture<'static, Result<(), String>>> = Vec::new();
        let mut n = 0;
        if let Some(r) = self.replays.as_mut() {
            let ids = self
                .splits
                .iter()
                .flat_map(|s| s.tracker.bound_until(epoch))
                .collect();
            r.acked(ids);
        }
        for s in &mut self.splits {
            n += match wait {
                None => s.tracker.commit(epoch),
                Some(_) => s
                    .tracker
                    .commit_with(epoch, |d| match d.into_ack_handler() {
                        Handler::ExactlyOnce(eo) => confirmations.push(Box::pin(async move {
                            eo.confirmed_ack().await.map_err(|e| e.to_string())
                        })),
                        other => other.ack(),
                    }),
            };
        }
        self.counters().acked.add(n as u64);
        self.cap_reached = false;
        self.committed = true;
        self.last_commit = Instant::now();
        if let (Some(wait), false) = (wait, confirmations.is_empty()) {
            let count = confirmations.len();
            match tokio::time::timeout(wait, futures::future::join_all(confirmations)).await {
                Err(_) => anyhow::bail!(
                    "the acks of checkpoint {epoch} ({count} messages) were not confirmed within {} ('{}'): the server did not answer in time; unconfirmed messages are redelivered",
                    crate::build_error::show(wait),
                    pubsub_table_options::AWAIT_ACK_CONFIRMATION
                ),
                Ok(results) => {
                    if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
                        anyhow::bail!("an ack of checkpoint {epoch} was rejected by the server: {e} (the message will be redelivered)");
                    }
                    self.counters().confirmed.add(results.len() as u64);
                }
            }
        }
        Ok(())
    }

    /// When the first-checkpoint detector fires: armed while no checkpoint committed, the
    /// budget is not zero, and messages are held.
    pub(super) fn first_checkpoint_deadline(&self) -> Option<Instant> {
        let ms = self.options.config().first_checkpoint_timeout_ms;
        (ms > 0 && !self.committed && self.held().0 > 0)
            .then(|| self.started + Duration::from_millis(ms))
    }

    pub(super) fn first_checkpoint_error(&self, ctx: &SourceContext) -> anyhow::Error {
        let ms = self.options.config().first_checkpoint_timeout_ms;
        anyhow::anyhow!(
            "source subtask {} holds {} unacknowledged messages and no checkpoint completed within {} of starting ('{}'): checkpointing is off or too slow (checkpoint interval {:?}); nothing is acknowledged until a checkpoint completes, so the subscription would stall once flow control fills. Raise '{}' above the checkpoint interval, or checkpoint more often",
            ctx.task_info.task_index,
            self.held().0,
            crate::build_error::show(Duration::from_millis(ms)),
            pubsub_table_options::FIRST_CHECKPOINT_TIMEOUT,
            ctx.checkpoint_interval,
            pubsub_table_options::FIRST_CHECKPOINT_TIMEOUT,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::failures_by_index;

    #[test]
    fn each_rejection_lands_on_its_own_message_and_a_bad_index_is_an_error() {
        let f = failures_by_index(4, [(2, "x".to_string()), (0, "y".to_string())]).unwrap();
        assert_eq!(f, vec![Some("y".into()), None, Some("x".into()), None]);
        assert!(failures_by_index(4, [])
            .unwrap()
            .iter()
            .all(Option::is_none));
        let out_of_range = failures_by_index(2, [(2, "x".to_string())]).unwrap_err();
        assert!(out_of_range.to_string().contains("index 2 is not buffered"));
        assert!(failures_by_index(3, [(1, "a".to_string()), (1, "b".to_string())]).is_err());
    }
}
