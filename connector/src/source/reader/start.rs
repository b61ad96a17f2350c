//! Starting a subtask: metrics, dedup set, dead-letter queue, the start-position record,
//! flow-control sizing and the split streams.

use super::metrics::subscription_gauge;
use super::*;

impl SourceReader {
    /// `on_start`: opens what the subtask needs and starts its split streams. Errors
    /// are the job's (a missing Avro schema or dead-letter topic fails the start).
    pub(super) async fn start(&mut self, ctx: &mut SourceContext) -> anyhow::Result<()> {
        self.report_can_pull(ctx, false);
        self.counters = Some(Counters::new(ctx));
        self.subtask = ctx.task_info.task_index;
        if self.avro.is_some() {
            self.require_avro_topics().await?;
        }
        if self.op.drop_replays {
            self.replays = Some(replay::Replays::restore(ctx.restored_subtasks.values()));
        }
        if let Some(d) = self.config.dedup.clone() {
            self.dedup = Some(Dedup::open(ctx, d, self.op.dedup_in_dataflow)?);
        }
        if let Some(q) = self.dead_letter.as_mut() {
            crate::dead_letter::check_not_inherited(&self.profile, q, "scan.")?;
            // Fails fast on a missing topic (never created) or unusable credentials.
            q.set_counter(ctx.counter(DEAD_LETTERS_PUBLISHED));
            q.open().await?;
        }
        // The start position was applied (or needed nothing) to every subscription before
        // any subtask started; a restore finds the record and seeks only subscriptions
        // added since (SPEC 5.4).
        let position = crate::source::PubSubStartPosition::from_config(self.config.start_position)?;
        ctx.state.values.insert(
            crate::source::start_position::STATE_KEY.to_string(),
            crate::source::start_position::record(
                &ctx.restored_subtasks,
                position,
                &self
                    .config
                    .subscriptions
                    .iter()
                    .map(|s| client::subscription_path(&self.profile.project, &s.id))
                    .collect::<Vec<_>>(),
            ),
        );
        let c = self.options.config().clone();
        // The client ends lease extension silently at max lease; the job-level prepare
        // checked it against the checkpoint interval (SPEC 5.3).
        let period = Duration::from_millis(c.max_ack_extension_period_ms);
        let per_key = self.config.ordering_mode == OrderingMode::PerKey;
        let plan = crate::source::splits::splits_for(
            ctx.task_info.task_index,
            ctx.task_info.parallelism,
            self.config.subscriptions.len(),
            per_key,
        );
        if plan.is_empty() {
            tracing::warn!(
                "source subtask {} has no split to read ({} subscriptions under ordering 'per-key', parallelism {}): it stays idle",
                ctx.task_info.task_index,
                self.config.subscriptions.len(),
                ctx.task_info.parallelism
            );
            self.report_can_pull(ctx, true);
            return Ok(());
        }
        let streams = c.parallel_pull_count.saturating_mul(plan.len() as u32);
        self.max_outstanding_messages = policy::effective_max_outstanding(
            c.max_outstanding_messages,
            ctx.checkpoint_interval,
            streams,
        );
        tracing::info!(
            "flow control: at most {} messages ({}) and {} bytes held per subtask",
            self.max_outstanding_messages,
            if c.max_outstanding_messages.is_some() {
                "set by 'scan.flow-control.max-outstanding-element-count'"
            } else {
                "default: 10000 msg/s per stream x 2.5 checkpoint intervals, at least 1000"
            },
            c.max_outstanding_bytes
        );
        let subscriber = client::subscriber(&self.profile).await?;
        let admin = client::subscription_admin(&self.profile).await?;
        let (tx, rx) = mpsc::channel(CHANNEL);
        self.rx = Some(rx);
        let settings = StreamSettings {
            streams: c.parallel_pull_count,
            max_outstanding_messages: self.max_outstanding_messages,
            max_outstanding_bytes: c.max_outstanding_bytes,
            max_lease: period,
            max_lease_extension: self.options.lease_extension(),
        };
        let (messages, bytes) = self
            .options
            .paused_split_caps(self.max_outstanding_messages);
        self.paused_caps = PausedCaps { messages, bytes };
        self.reopen = Some(Reopen {
            subscriber: subscriber.clone(),
            admin: admin.clone(),
            settings: settings.clone(),
            tx: tx.clone(),
        });
        for (pos, split) in plan.iter().enumerate() {
            let s = &self.config.subscriptions[split.subscription];
            let subscription = client::subscription_path(&self.profile.project, &s.id);
            let streams = PullStreams::start(
                subscriber.clone(),
                admin.clone(),
                &subscription,
                settings.clone(),
                self.stream_shared(),
                pos,
                tx.clone(),
            );
            self.splits.push(Split {
                index: split.index,
                streams: Some(streams),
                tag: pos,
                tracker: AckTracker::default(),
                down: HashSet::new(),
                paused: PausedBuffer::default(),
                parked_at: None,
                paused_for_alignment: false,
                age: (
                    subscription_gauge(ctx, OLDEST_UNACKED_MESSAGE_AGE_MS, &subscription),
                    subscription_gauge(ctx, EVENT_TIME_LAG_MS, &subscription),
                ),
                subscription,
            });
        }
        let source = watermark::event_time_source(
            self.config.event_time_attribute.as_deref(),
            self.op
                .schema
                .event_time
                .as_ref()
                .map(|e| e.column.as_str()),
        );
        let with_mark = || {
            ctx.restored_subtasks
                .iter()
                .filter(|(_, s)| s.values.contains_key(watermark::STATE_KEY))
        };
        let restored = match watermark::changed_event_time(
            with_mark().map(|(_, s)| s.values.get(watermark::SOURCE_KEY)),
            &source,
        ) {
            Some(old) => {
                tracing::warn!(
                    "source subtask {}: the checkpointed watermark is of event time '{old}', this table's is '{source}': starting without a watermark",
                    ctx.task_info.task_index
                );
                None
            }
            None => {
                watermark::restore(with_mark().map(|(_, s)| s.values.get(watermark::STATE_KEY)))?
            }
        };
        self.event_time_source = source;
        // `WATERMARK FOR col AS col - INTERVAL`: that column's bound; else the option's
        // for publish time or an attribute (both together are refused at planning).
        let bound = match &self.op.schema.event_time {
            Some(e) => e.out_of_orderness,
            None => c
                .watermark_out_of_orderness_ms
                .map_or(watermark::DEFAULT_OUT_OF_ORDERNESS, Duration::from_millis),
        };
        let idle = (c.watermark_idle_timeout_ms > 0)
            .then(|| Duration::from_millis(c.watermark_idle_timeout_ms));
        let mut marks = watermark::Watermarks::new(bound, idle, restored)?;
        let now = Instant::now();
        self.watermark_at = now;
        for _ in &self.splits {
            marks.add_split(now);
        }
        self.watermarks = Some(marks);
        if let Some(a) = &self.config.alignment {
            let member =
                ctx.join_alignment_group(&a.group, Duration::from_millis(a.update_interval_ms));
            self.alignment = Some(align::Aligned::new(
                member,
                Duration::from_millis(a.max_drift_ms),
            ));
        }
        self.start_backlog_bounds(ctx, &admin);
        tracing::debug!(
            "source subtask {} reads splits {:?}",
            ctx.task_info.task_index,
            self.splits
                .iter()
                .map(|s| (s.index, s.subscription.as_str()))
                .collect::<Vec<_>>()
        );
        self.rate = c
            .rate_limit_messages_per_second
            .map(crate::source::rate::RateLimiter::new);
        self.started = Instant::now();
        self.last_commit = self.started;
        Ok(())
    }

    /// Format `avro`: each subscription's topic has an Avro schema (a
    /// [`pubsub_engine_spi::ConfigError`] otherwise).
    pub(super) async fn require_avro_topics(&self) -> anyhow::Result<()> {
        let admin = client::subscription_admin(&self.profile).await?;
        for s in &self.config.subscriptions {
            let name = client::subscription_path(&self.profile.project, &s.id);
            let sub =
                crate::diagnose::bounded(admin.get_subscription().set_subscription(name.clone()))
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot read subscription {name}: {e}"))?;
            let whose = format!("the topic of subscription {name}");
            crate::avro::require_avro_topic(&self.profile, &sub.topic, &whose).await?;
        }
        Ok(())
    }
}
