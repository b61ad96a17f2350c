//! Flow control and parking: what the subtask holds against its limits, the paused
//! buffers that keep streams polled while it may not take, and parking / reopening a
//! split's streams.

use super::*;

/// What reopening a parked split's streams needs.
pub(super) struct Reopen {
    pub(super) subscriber: Subscriber,
    pub(super) admin: SubscriptionAdmin,
    pub(super) settings: StreamSettings,
    pub(super) tx: mpsc::Sender<Tagged>,
}

/// Whether `held` (messages, bytes tracked) of which `paused` wait in the paused buffers
/// leave room: flow control (`max_messages` and `max_outstanding_bytes`) counts what was
/// taken into rows (held minus paused), the subscriber buffer caps count everything held.
pub(super) fn within_limits(
    c: &pubsub_schema::SubscriberOptionsConfig,
    max_messages: u64,
    (m, b): (u64, u64),
    (pm, pb): (u64, u64),
) -> bool {
    m - pm < max_messages
        && b - pb < c.max_outstanding_bytes
        && c.subscriber_buffer_max_messages.is_none_or(|cap| m < cap)
        && c.subscriber_buffer_max_bytes.is_none_or(|cap| b < cap)
}

/// What the run loop's state says about its streams this turn.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PullInputs {
    /// The final barrier was seen.
    pub(super) stopping: bool,
    /// A delivery may be taken into rows now (limits, rate, not stopping).
    pub(super) may_take: bool,
    /// Deliveries wait in a paused buffer (taken first, in order).
    pub(super) paused_left: bool,
    /// The streams' channel is open.
    pub(super) open: bool,
    /// The subtask has no split.
    pub(super) no_splits: bool,
    /// No stream is reconnecting.
    pub(super) all_up: bool,
    /// A closed stream may still have deliveries leased to it.
    pub(super) stranded: bool,
    /// A split paused by watermark alignment holds messages it may not take yet.
    pub(super) aligned_waiting: bool,
}

/// What the run loop does with its streams this turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PullPlan {
    /// Take deliveries into rows.
    pub(super) can_pull: bool,
    /// Held back (flow control, a cap, the rate limit): keep every stream polled into the
    /// paused buffers, so no delivery outlives its lease unread.
    pub(super) hold: bool,
    /// Reading, as the idle clock (`--stop-when-idle`) sees it.
    pub(super) reading: bool,
}

pub(super) fn pull_plan(i: PullInputs) -> PullPlan {
    let can_pull = i.may_take && !i.paused_left && i.open;
    PullPlan {
        can_pull,
        hold: !i.stopping && !i.may_take && i.open,
        reading: i.stopping
            || i.no_splits
            || (can_pull && i.all_up && !i.stranded && !i.aligned_waiting),
    }
}

impl SourceReader {
    pub(super) fn report_can_pull(&mut self, ctx: &SourceContext, can_pull: bool) {
        if self.reported_can_pull != Some(can_pull) {
            ctx.set_can_pull(can_pull);
            self.reported_can_pull = Some(can_pull);
        }
    }

    pub(super) fn held(&self) -> (u64, u64) {
        self.splits.iter().fold((0, 0), |(m, b), s| {
            (
                m + s.tracker.held_messages() as u64,
                b + s.tracker.held_bytes() as u64,
            )
        })
    }

    /// Messages and payload bytes waiting in the paused buffers (tracked, not taken).
    pub(super) fn paused(&self) -> (u64, u64) {
        self.splits.iter().fold((0, 0), |(m, b), s| {
            (m + s.paused.len() as u64, b + s.paused.bytes())
        })
    }

    /// Below flow control (messages taken: held minus paused) and the subscriber buffer
    /// caps (everything held): more deliveries may be taken into rows.
    pub(super) fn under_limits(&self) -> bool {
        !self.cap_reached
            && within_limits(
                self.options.config(),
                self.max_outstanding_messages,
                self.held(),
                self.paused(),
            )
    }

    /// Whether a delivery may be taken into rows now (else deliveries wait in the paused
    /// buffers, so the streams stay polled).
    pub(super) fn may_take(&self, now: Instant) -> bool {
        !self.stopping
            && self
                .rate
                .as_ref()
                .is_none_or(|r| r.wait_until(now).is_none())
            && self.under_limits()
    }

    /// Decodes up to `max` deliveries of the paused buffers, oldest first per split, while
    /// the limits allow; returns how many. Until every paused buffer is empty the streams
    /// are not read into rows, so a split's (and a key's) order holds.
    pub(super) fn decode_paused(
        &mut self,
        max: usize,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<usize> {
        let mut n = 0;
        for split in 0..self.splits.len() {
            // A split paused by alignment keeps its buffer, also when a message decoded
            // here paused it.
            while n < max
                && !self.splits[split].paused_for_alignment
                && self.may_take(Instant::now())
            {
                let Some(held) = self.splits[split].paused.pop() else {
                    break;
                };
                if let Some(rate) = self.rate.as_mut() {
                    rate.took(Instant::now());
                }
                self.decode(split, held, collector)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Deliveries wait in the paused buffer of a split that may take them (a split paused
    /// by watermark alignment keeps its own until it resumes).
    pub(super) fn any_paused(&self) -> bool {
        self.splits
            .iter()
            .any(|s| !s.paused_for_alignment && !s.paused.is_empty())
    }

    /// Parks split `split`: stops its streams, nacks its paused buffer, and leaves the
    /// stopped streams' shutdown to a task (it ends once the handles they leased are
    /// acked at a commit or released).
    pub(super) async fn park(&mut self, split: usize) {
        let s = &mut self.splits[split];
        let Some(mut streams) = s.streams.take() else {
            return;
        };
        streams.stop_reading().await;
        let ids = s.paused.take_ids();
        for id in &ids {
            s.tracker.release(id);
        }
        s.down.clear();
        s.parked_at = Some(Instant::now());
        let sub = s.subscription.clone();
        self.stream_closed();
        // Its lease loops stay in `leases`: they end once the handles they leased are
        // acked at a commit or released.
        drop(streams);
        let caps = self.paused_caps;
        self.counters().parked.add(1);
        let n = self.counters().parked.get();
        if self.splits[split].paused_for_alignment {
            // Expected while a group waits for a slow member: not a warning.
            if should_log_bad(n) {
                tracing::info!(subscription = %sub, "split {} is paused by watermark alignment and its paused buffer is full ({} messages; caps '{}' = {}, '{}' = {} bytes): parked, its messages nacked for redelivery, its streams stopped until its group catches up ({n} parks so far)", self.splits[split].index, ids.len(), pubsub_table_options::PAUSED_SPLIT_BUFFER_MAX_MESSAGES, caps.messages, pubsub_table_options::PAUSED_SPLIT_BUFFER_MAX_BYTES, caps.bytes);
            }
        } else if should_log_bad(n) {
            tracing::warn!(subscription = %sub, "split {} cannot take deliveries (back-pressure, flow control or the rate limit) and its paused buffer is full ({} messages; caps '{}' = {}, '{}' = {} bytes), or a subscriber buffer cap was reached: parked, {} messages nacked for redelivery, its streams stopped; fresh streams open once it can take again ({n} parks so far)", self.splits[split].index, ids.len(), pubsub_table_options::PAUSED_SPLIT_BUFFER_MAX_MESSAGES, caps.messages, pubsub_table_options::PAUSED_SPLIT_BUFFER_MAX_BYTES, caps.bytes, ids.len() + 1);
        }
    }

    /// A stream closed (parked, failed or restarted): what the server was still sending on
    /// it stays leased to it for one stream ack deadline, so the subtask is not idle
    /// before that has passed.
    pub(super) fn stream_closed(&mut self) {
        let deadline = self
            .options
            .lease_extension()
            .unwrap_or(pull::DEFAULT_STREAM_ACK_DEADLINE);
        self.stranded_until = Some(Instant::now() + deadline);
    }

    /// Opens fresh streams for every parked split (not after the final barrier).
    pub(super) fn reopen_parked(&mut self) {
        let Some(r) = self.reopen.as_ref() else {
            return;
        };
        if self.stopping {
            return;
        }
        let n = self.splits.len();
        let shared = self.stream_shared();
        for s in &mut self.splits {
            let Some(since) = s.parked_at else { continue };
            if s.paused_for_alignment {
                continue;
            }
            s.tag += n;
            s.streams = Some(PullStreams::start(
                r.subscriber.clone(),
                r.admin.clone(),
                &s.subscription,
                r.settings.clone(),
                shared.clone(),
                s.tag,
                r.tx.clone(),
            ));
            s.parked_at = None;
            tracing::debug!(subscription = %s.subscription, "split {} can take again after {:.1?} parked: fresh streams opened", s.index, since.elapsed());
        }
    }

    /// Stops every split's streams and nacks whatever they forwarded but we did not take,
    /// and what waits undecoded in the paused buffers (rows after the final barrier would
    /// never be committed).
    pub(super) async fn stop_pulling(&mut self) {
        for s in &mut self.splits {
            if let Some(streams) = s.streams.as_mut() {
                streams.stop_reading().await;
            }
            for id in s.paused.take_ids() {
                s.tracker.release(&id);
            }
        }
        let mut forwarded = 0u64;
        if let Some(rx) = self.rx.as_mut() {
            while let Ok((_, p)) = rx.try_recv() {
                if let Pulled::Message(_, h) = p {
                    h.nack();
                    forwarded += 1;
                }
            }
        }
        if self.counters.is_some() {
            self.counters().received.add(forwarded);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{pull_plan, within_limits, PullInputs, PullPlan};

    #[test]
    fn a_held_back_subtask_keeps_its_streams_polled_and_is_not_idle() {
        let reading = PullInputs {
            may_take: true,
            open: true,
            all_up: true,
            ..Default::default()
        };
        assert_eq!(
            pull_plan(reading),
            PullPlan {
                can_pull: true,
                hold: false,
                reading: true
            }
        );
        // Flow control, a cap or the rate limit: polled into the paused buffers.
        let held = PullInputs {
            may_take: false,
            ..reading
        };
        assert_eq!(
            pull_plan(held),
            PullPlan {
                can_pull: false,
                hold: true,
                reading: false
            }
        );
        // Paused deliveries go first; the streams wait.
        let paused = PullInputs {
            paused_left: true,
            ..reading
        };
        assert_eq!(
            pull_plan(paused),
            PullPlan {
                can_pull: false,
                hold: false,
                reading: false
            }
        );
        // A stream down, or deliveries possibly stranded on a closed one: not idle.
        for i in [
            PullInputs {
                all_up: false,
                ..reading
            },
            PullInputs {
                stranded: true,
                ..reading
            },
        ] {
            assert_eq!(
                pull_plan(i),
                PullPlan {
                    can_pull: true,
                    hold: false,
                    reading: false
                }
            );
        }
        // A split paused by watermark alignment holds messages it has not read: not idle.
        assert_eq!(
            pull_plan(PullInputs {
                aligned_waiting: true,
                ..reading
            }),
            PullPlan {
                can_pull: true,
                hold: false,
                reading: false
            }
        );
        // After the final barrier nothing is held back and the idle clock may run.
        let stopping = PullInputs {
            stopping: true,
            may_take: false,
            ..reading
        };
        assert_eq!(
            pull_plan(stopping),
            PullPlan {
                can_pull: false,
                hold: false,
                reading: true
            }
        );
        // A subtask without splits is idle from the start.
        let none = PullInputs {
            no_splits: true,
            open: false,
            ..Default::default()
        };
        assert_eq!(
            pull_plan(none),
            PullPlan {
                can_pull: false,
                hold: false,
                reading: true
            }
        );
    }
    use pubsub_schema::SubscriberOptionsConfig;

    #[test]
    fn flow_control_counts_what_was_taken_and_the_buffer_caps_count_everything_held() {
        let c = SubscriberOptionsConfig {
            max_outstanding_bytes: 1_000,
            subscriber_buffer_max_messages: Some(20),
            subscriber_buffer_max_bytes: Some(2_000),
            ..Default::default()
        };
        assert!(within_limits(&c, 10, (9, 900), (0, 0)));
        // At the message limit, or the byte limit, of flow control.
        assert!(!within_limits(&c, 10, (10, 100), (0, 0)));
        assert!(!within_limits(&c, 10, (5, 1_000), (0, 0)));
        // Paused deliveries are not taken into rows: flow control leaves them out...
        assert!(within_limits(&c, 10, (15, 1_500), (6, 600)));
        // ...but they are held, so the subscriber buffer caps count them.
        assert!(!within_limits(&c, 10, (20, 1_500), (15, 1_000)));
        assert!(!within_limits(&c, 10, (15, 2_000), (10, 1_500)));
        // Without caps only flow control applies.
        let open = SubscriberOptionsConfig {
            max_outstanding_bytes: 1_000,
            ..Default::default()
        };
        assert!(within_limits(&open, 10, (1_000, 50_000), (995, 49_500)));
    }
}
