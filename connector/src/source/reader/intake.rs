//! Stream intake: routes each event of the split streams to its split, takes deliveries
//! (subscriber buffer caps, ack-confirmation check, tracking) and handles stream outages.

use super::*;

/// What `admit` decided about a delivery.
pub(super) enum Admit {
    /// Tracked: decode it (or keep it in the paused buffer).
    Take(Held),
    /// A redelivery of a message still held: the tracker kept the newer handle.
    Skip,
    /// It would cross a subscriber buffer cap and was nacked: park its split.
    Park,
}

/// How a delivery of `size` payload bytes fits the subscriber buffer caps while `held`
/// (messages, bytes) are tracked.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum CapCheck {
    Fits,
    /// It would cross a cap: nack it and park its split until a commit frees room.
    Over,
    /// It would cross a cap with nothing held: no commit can ever make room.
    NeverFits,
}

pub(super) fn cap_check(
    c: &pubsub_schema::SubscriberOptionsConfig,
    (held, bytes): (u64, u64),
    size: u64,
) -> CapCheck {
    let over = c
        .subscriber_buffer_max_messages
        .is_some_and(|cap| held + 1 > cap)
        || c.subscriber_buffer_max_bytes
            .is_some_and(|cap| bytes + size > cap);
    match (over, held) {
        (false, _) => CapCheck::Fits,
        (true, 0) => CapCheck::NeverFits,
        (true, _) => CapCheck::Over,
    }
}

/// The split a stream tag belongs to: tags are `position + splits x generation`.
pub(super) fn split_of(tag: usize, splits: usize) -> usize {
    tag % splits.max(1)
}

impl SourceReader {
    /// One event of the streams in the run loop: taken into rows (`can_pull`) or into its
    /// split's paused buffer; parks the split a delivery could not be taken for, offers
    /// the dead letters decoding produced, and flushes at the fetch size or linger.
    pub(super) async fn on_event(
        &mut self,
        tag: usize,
        p: Pulled,
        can_pull: bool,
        fetch: usize,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<()> {
        if let (Some(r), Pulled::Message(m, _)) = (self.avro.as_mut(), &p) {
            r.fetch(&m.attributes).await?;
        }
        // A split paused by watermark alignment takes nothing into rows.
        let aligned = self
            .splits
            .get(split_of(tag, self.splits.len()))
            .is_some_and(|s| s.paused_for_alignment);
        let park = if can_pull && !aligned {
            self.on_pulled(tag, p, collector)?
        } else {
            self.on_pulled_paused(tag, p)?
        };
        if let Some(split) = park {
            self.park(split).await;
        }
        self.offer_letters().await?;
        if collector.should_flush() || collector.buffered_messages() >= fetch {
            self.flush(collector).await?;
        }
        Ok(())
    }

    /// The split `tag` belongs to, if it is that split's current tag. A delivery of
    /// stopped streams (a parked split, or after the final barrier) is nacked at once.
    pub(super) fn route(&mut self, tag: usize, p: Pulled) -> Option<(usize, Pulled)> {
        let split = split_of(tag, self.splits.len());
        if self
            .splits
            .get(split)
            .is_some_and(|s| s.tag == tag && s.streams.is_some())
        {
            return Some((split, p));
        }
        if let Pulled::Message(_, h) = p {
            h.nack();
            self.counters().received.add(1);
        }
        None
    }

    /// Takes one event of the streams tagged `tag`. Returns the split to park when a
    /// delivery crossed a subscriber buffer cap.
    pub(super) fn on_pulled(
        &mut self,
        tag: usize,
        p: Pulled,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<Option<usize>> {
        match self.route(tag, p) {
            Some((split, Pulled::Message(m, h))) => {
                if let Some(rate) = self.rate.as_mut() {
                    rate.took(Instant::now());
                }
                match self.admit(split, m, h)? {
                    Admit::Take(held) => self.decode(split, held, collector).map(|()| None),
                    Admit::Skip => Ok(None),
                    Admit::Park => Ok(Some(split)),
                }
            }
            Some((split, other)) => self.on_stream_event(split, other).map(|()| None),
            None => Ok(None),
        }
    }

    /// Takes one event while the subtask may not take deliveries into rows (back-pressure,
    /// flow control, the rate limit) or its split is paused by watermark alignment: a
    /// delivery goes to its split's paused buffer. Returns the split to park when the delivery would cross its
    /// paused cap (the delivery was nacked, untracked).
    pub(super) fn on_pulled_paused(
        &mut self,
        tag: usize,
        p: Pulled,
    ) -> anyhow::Result<Option<usize>> {
        match self.route(tag, p) {
            Some((split, Pulled::Message(m, h))) => {
                let size = m.data.len() as u64;
                if self.splits[split]
                    .paused
                    .would_cross(size, self.paused_caps)
                {
                    h.nack();
                    self.counters().received.add(1);
                    return Ok(Some(split));
                }
                match self.admit(split, m, h)? {
                    Admit::Take(held) => {
                        self.splits[split].paused.push(held);
                        Ok(None)
                    }
                    Admit::Skip => Ok(None),
                    Admit::Park => Ok(Some(split)),
                }
            }
            Some((split, other)) => self.on_stream_event(split, other).map(|()| None),
            None => Ok(None),
        }
    }

    /// A stream of split `split` went down, came back, or failed for good.
    pub(super) fn on_stream_event(&mut self, split: usize, p: Pulled) -> anyhow::Result<()> {
        let sub = self.splits[split].subscription.clone();
        match p {
            Pulled::Message(..) => unreachable!("deliveries are taken by the callers"),
            Pulled::Reconnecting { stream, cause } => {
                self.splits[split].down.insert(stream);
                self.stream_closed();
                let which = if stream == pull::MONITOR {
                    "streaming pull".to_string()
                } else {
                    format!("streaming pull {stream}")
                };
                tracing::warn!(subscription = %sub, "{which} from {sub} interrupted: {cause}; reconnecting with backoff (held messages keep their leases)");
                Ok(())
            }
            Pulled::Recovered { stream, down_for } => {
                self.splits[split].down.remove(&stream);
                let which = if stream == pull::MONITOR {
                    "streaming pull".to_string()
                } else {
                    format!("streaming pull {stream}")
                };
                tracing::info!(subscription = %sub, "{which} from {sub} reconnected after {down_for:.1?} down");
                Ok(())
            }
            Pulled::Failed { code, error } => {
                let status = code.map_or_else(|| "error".to_string(), |c| format!("{c:?}"));
                anyhow::bail!("streaming pull from subscription {sub} failed permanently with status {status}: {error}")
            }
        }
    }

    /// Takes one delivery of split `split`: enforces the subscriber buffer caps and tracks
    /// it. Returns what to decode, `Skip` for a redelivery of a message still held, or
    /// `Park` when it would cross a cap (it was nacked): its split stops reading until a
    /// commit frees room, instead of leaving its streams unpolled.
    pub(super) fn admit(&mut self, split: usize, m: Message, h: Delivery) -> anyhow::Result<Admit> {
        self.counters().received.add(1);
        let c = self.options.config();
        let (held, bytes) = self.held();
        let size = m.data.len() as u64;
        let check = cap_check(c, (held, bytes), size);
        if check == CapCheck::NeverFits {
            // Nothing held to commit: this message can never fit.
            h.nack();
            anyhow::bail!(
                "message {} from {} is {size} bytes, more than the subscriber buffer cap '{}' ({} bytes) allows even with nothing else held: raise the cap (the message was not acknowledged)",
                m.message_id,
                self.splits[split].subscription,
                pubsub_table_options::SUBSCRIBER_BUFFER_MAX_BYTES,
                c.subscriber_buffer_max_bytes.unwrap_or_default()
            );
        }
        if check == CapCheck::Over {
            self.cap_reached = true;
            h.nack();
            self.counters().rejected.add(1);
            let n = self.counters().rejected.get();
            if should_log_bad(n) {
                tracing::warn!(subscription = %self.splits[split].subscription, "nacked message {} ({size} bytes) before tracking it: holding {held} messages / {bytes} bytes, it would cross the subscriber buffer cap ('{}' / '{}'); its split is parked until a commit frees room ({n} rejected so far)", m.message_id, pubsub_table_options::SUBSCRIBER_BUFFER_MAX_MESSAGES, pubsub_table_options::SUBSCRIBER_BUFFER_MAX_BYTES);
            }
            return Ok(Admit::Park);
        }
        if let Some(r) = self.replays.as_mut() {
            if r.is_replay(&m.message_id) {
                // In the restored checkpoint already (its ack was lost): ack it now.
                h.into_ack_handler().ack();
                self.counters().replayed.add(1);
                return Ok(Admit::Skip);
            }
        }
        if c.await_ack_confirmation_ms.is_some() && !matches!(h.handler(), Handler::ExactlyOnce(_))
        {
            // Never ack unconfirmed while confirmation was asked for: say so instead.
            h.nack();
            anyhow::bail!(
                "option '{}' is set, but subscription {} delivered message {} without exactly-once semantics, so its ack cannot be confirmed (the server does not treat the subscription as exactly-once; the Pub/Sub emulator never does): unset the option or enable exactly-once delivery",
                pubsub_table_options::AWAIT_ACK_CONFIRMATION,
                self.splits[split].subscription,
                m.message_id
            );
        }
        // The one copy of the id: the tracker and the buffers share it.
        let id = MessageId::from(m.message_id.as_str());
        // Publish time, or the attribute the table names (a bad one fails at decode).
        let (event_ns, event_error) = match &self.config.event_time_attribute {
            None => (
                m.publish_time.as_ref().and_then(watermark::publish_ns),
                None,
            ),
            Some(key) => match crate::source::event_time::from_attributes(key, &m.attributes) {
                Ok(ns) => (Some(ns), None),
                Err(why) => (None, Some(why.into_boxed_str())),
            },
        };
        let published_ms = m
            .publish_time
            .as_ref()
            .map(|t| t.seconds().saturating_mul(1_000) + i64::from(t.nanos()) / 1_000_000);
        let mut meta = self.metadata(split, &m, h.handler());
        // The hidden event-time column of a windowed query (`pubsub_engine_spi::EVENT_TIME`).
        if let (Some(i), Some(ns)) = (self.event_time_slot, event_ns) {
            meta[i] = FieldValue::TimestampNanos(ns);
        }
        // An empty value is no id (issue 31, item 3): it passes as a message without one.
        let dedup = self.dedup.as_ref().map(|d| {
            let value = m.attributes.get(&d.attribute).filter(|v| !v.is_empty());
            value.map(|v| Box::new((v.clone(), published_ms.unwrap_or(0))))
        });
        let writer = self.avro.as_ref().map(|r| r.writer(&m.attributes));
        let context = (bad_message_action(self.config.deserialization_failure_policy)
            == BadMessageAction::DeadLetter)
            .then(|| {
                Box::new(crate::source::park::MessageContext {
                    attributes: m.attributes,
                    ordering_key: m.ordering_key,
                })
            });
        if self.splits[split]
            .tracker
            .receive(id.clone(), h, m.data.len(), published_ms)
            == Received::Duplicate
        {
            return Ok(Admit::Skip);
        }
        // Counted once per message taken, not per redelivery of one still held.
        let dedup = match (dedup, &self.dedup) {
            (Some(None), Some(d)) => {
                d.without.add(1);
                None
            }
            // In a cluster the sink operators check the row keys (decision 0046).
            (_, Some(d)) if d.in_dataflow() => None,
            (record, _) => record.flatten(),
        };
        Ok(Admit::Take(Held {
            id,
            payload: m.data,
            meta,
            context,
            dedup,
            writer,
            event_ns,
            event_error,
        }))
    }

    /// Metadata values of a message, in the order of the table's metadata columns.
    pub(super) fn metadata(&self, split: usize, m: &Message, h: &Handler) -> Vec<FieldValue> {
        crate::source::metadata::metadata_values(
            self.op.metadata_fields.iter().map(|f| f.key.as_str()),
            m,
            h.delivery_attempt(),
            &self.splits[split].subscription,
            self.config.dedup.as_ref().map(|d| d.attribute.as_str()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{cap_check, split_of, CapCheck};
    use pubsub_schema::SubscriberOptionsConfig;

    #[test]
    fn a_delivery_crossing_a_buffer_cap_parks_its_split_unless_nothing_is_held() {
        let c = SubscriberOptionsConfig {
            subscriber_buffer_max_messages: Some(3),
            subscriber_buffer_max_bytes: Some(100),
            ..Default::default()
        };
        assert_eq!(cap_check(&c, (2, 50), 50), CapCheck::Fits);
        assert_eq!(cap_check(&c, (3, 50), 1), CapCheck::Over);
        assert_eq!(cap_check(&c, (1, 60), 41), CapCheck::Over);
        // Larger than the byte cap on its own: no commit can make room.
        assert_eq!(cap_check(&c, (0, 0), 101), CapCheck::NeverFits);
        assert_eq!(cap_check(&c, (0, 0), 100), CapCheck::Fits);
        assert_eq!(
            cap_check(
                &SubscriberOptionsConfig::default(),
                (u64::MAX - 1, 0),
                1 << 40
            ),
            CapCheck::Fits
        );
    }

    #[test]
    fn a_reopened_splits_tags_map_to_the_same_split() {
        for splits in 1..5 {
            for pos in 0..splits {
                for generation in 0..3 {
                    assert_eq!(split_of(pos + splits * generation, splits), pos);
                }
            }
        }
        // A subtask without splits routes nothing anywhere (never divides by zero).
        assert_eq!(split_of(7, 0), 0);
    }
}
