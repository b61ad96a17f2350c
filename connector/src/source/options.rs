//! `PubSubSubscriberOptions`: every knob of the subscribers of one source table (SPEC 5.3;
//! the reference connector's `PubSubSubscriberOptions.Builder`). Validation happens in
//! [`PubSubSubscriberOptionsBuilder::build`]; the SQL layer maps `scan.*` keys onto the
//! setters and renames a rejection to its key.

use std::time::Duration;

use pubsub_schema::SubscriberOptionsConfig;

use crate::build_error::{positive, show, whole_ms, BuildError};

/// The client's range for a lease extension (`set_max_lease_extension` clamps to it;
/// google-cloud-pubsub 1.7 `subscriber/builder.rs`). Values outside are refused, not clamped.
pub const LEASE_EXTENSION_RANGE: (Duration, Duration) =
    (Duration::from_secs(10), Duration::from_secs(600));

/// The most StreamingPull streams per split (`parallel_pull_count`). Each stream is one
/// open gRPC stream per split per subtask, counted against the project's StreamingPull
/// connection quota, with its own flow control and lease bookkeeping; one subtask decodes
/// on one thread, so beyond a few streams more only cost connections and memory. 64 is
/// far above what one subtask can use while still catching a typo (`1000000`).
pub const MAX_PARALLEL_PULL_COUNT: u32 = 64;

/// Validated subscriber options. Build with [`PubSubSubscriberOptions::builder`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PubSubSubscriberOptions {
    config: SubscriberOptionsConfig,
}

impl PubSubSubscriberOptions {
    /// A builder holding every default of SPEC 5.3.
    pub fn builder() -> PubSubSubscriberOptionsBuilder {
        PubSubSubscriberOptionsBuilder {
            config: SubscriberOptionsConfig::default(),
            sub_ms: Vec::new(),
        }
    }

    /// Validates a table config's subscriber options through the builder.
    pub fn from_config(c: &SubscriberOptionsConfig) -> Result<Self, BuildError> {
        PubSubSubscriberOptionsBuilder {
            config: c.clone(),
            sub_ms: Vec::new(),
        }
        .build()
    }

    /// The validated values, as stored in the table config.
    pub fn config(&self) -> &SubscriberOptionsConfig {
        &self.config
    }
}

/// Builder of [`PubSubSubscriberOptions`]. Limits are per source subtask.
#[derive(Debug, Clone)]
pub struct PubSubSubscriberOptionsBuilder {
    config: SubscriberOptionsConfig,
    /// Durations given with a sub-millisecond part: refused by `build()`.
    sub_ms: Vec<(&'static str, Duration)>,
}

macro_rules! ms_setter {
    ($(#[$doc:meta])* $name:ident, $field:ident, option) => {
        $(#[$doc])*
        pub fn $name(mut self, d: Duration) -> Self {
            match whole_ms(stringify!($name), d) {
                Ok(ms) => self.config.$field = Some(ms),
                Err(_) => self.sub_ms.push((stringify!($name), d)),
            }
            self
        }
    };
    ($(#[$doc:meta])* $name:ident, $field:ident) => {
        $(#[$doc])*
        pub fn $name(mut self, d: Duration) -> Self {
            match whole_ms(stringify!($name), d) {
                Ok(ms) => self.config.$field = ms,
                Err(_) => self.sub_ms.push((stringify!($name), d)),
            }
            self
        }
    };
}

impl PubSubSubscriberOptionsBuilder {
    /// Messages held unacknowledged per subtask, everything received since the last
    /// completed checkpoint included, paused ones not; taking pauses at the limit while
    /// the streams stay polled into the paused buffers (also sent to the
    /// server as the stream's flow control; the emulator ignores it, the source enforces
    /// it itself). Positive. Default: sized from the checkpoint interval (10,000 msg/s
    /// per stream x 2.5 intervals, at least the client's 1000). Source: SPEC 5.3.
    pub fn max_outstanding_messages(mut self, messages: u64) -> Self {
        self.config.max_outstanding_messages = Some(messages);
        self
    }

    /// Payload bytes taken and unacknowledged per subtask; taking pauses at the limit.
    /// Positive. Default 100 MB (the client's default).
    pub fn max_outstanding_bytes(mut self, bytes: u64) -> Self {
        self.config.max_outstanding_bytes = bytes;
        self
    }

    /// Hard cap on messages held per subtask: the first delivery that would cross it is
    /// nacked before it is tracked (counted in `messages_rejected`) and its split is
    /// parked until commits free room. Counts paused messages too. Positive. Default: none.
    pub fn subscriber_buffer_max_messages(mut self, messages: u64) -> Self {
        self.config.subscriber_buffer_max_messages = Some(messages);
        self
    }

    /// Hard cap on payload bytes held per subtask, as above. Positive. Default: none.
    pub fn subscriber_buffer_max_bytes(mut self, bytes: u64) -> Self {
        self.config.subscriber_buffer_max_bytes = Some(bytes);
        self
    }

    /// While a subtask cannot take deliveries into rows (back-pressure, flow control, the
    /// rate limit), it keeps every stream polled into its split's paused buffer, so no
    /// delivery outlives its lease unread; the delivery that would make a split's buffer
    /// exceed this many messages parks the split: its paused messages (never emitted) are
    /// nacked, its streams stopped, and fresh ones open once it can take again (counter
    /// `splits_parked`). Positive. Default: 2 x the effective max outstanding messages
    /// (SPEC 5.3).
    pub fn paused_split_buffer_max_messages(mut self, messages: u64) -> Self {
        self.config.paused_split_buffer_max_messages = Some(messages);
        self
    }

    /// As [`Self::paused_split_buffer_max_messages`], in payload bytes. Positive.
    /// Default: 2 x max outstanding bytes.
    pub fn paused_split_buffer_max_bytes(mut self, bytes: u64) -> Self {
        self.config.paused_split_buffer_max_bytes = Some(bytes);
        self
    }

    /// StreamingPull streams per split (per subscription per subtask). 1..=64
    /// ([`MAX_PARALLEL_PULL_COUNT`]: each stream is an open gRPC stream counted against
    /// the project's StreamingPull quota, and one subtask cannot use more); must be 1 with
    /// ordering `per-key` (checked by the source builder). Default 1.
    pub fn parallel_pull_count(mut self, streams: u32) -> Self {
        self.config.parallel_pull_count = streams;
        self
    }

    ms_setter!(
        /// How long the client keeps extending a held message's lease before giving up
        /// (then Pub/Sub redelivers it). Zero disables extension: leases end at the
        /// stream's ack deadline. Otherwise it must exceed the checkpoint interval
        /// (checked at start; a WARN below twice the interval). Whole milliseconds.
        /// Default 1 h (the client's).
        max_ack_extension_period, max_ack_extension_period_ms
    );
    ms_setter!(
        /// Shortest lease extension. This client extends by one fixed length (no
        /// adaptive choice), so this raises the default length (60 s) to at least this.
        /// 10 s..600 s, below `max_duration_per_ack_extension`. Default: unset.
        min_duration_per_ack_extension, min_duration_per_ack_extension_ms, option
    );
    ms_setter!(
        /// Length of every lease extension and the stream's ack deadline: how soon the
        /// messages of a crashed reader are redelivered. 10 s..600 s (the client's range;
        /// refused outside it, never clamped). Default: the client's 60 s.
        max_duration_per_ack_extension, max_duration_per_ack_extension_ms, option
    );
    ms_setter!(
        /// Each commit waits this long for the server to confirm its acks, and fails the
        /// job when they are not confirmed in time. Only exactly-once subscriptions confirm
        /// acks (checked at start). At least 1 ms. Default: fire and forget.
        await_ack_confirmation, await_ack_confirmation_ms, option
    );
    ms_setter!(
        /// Bounds a subtask's whole close (final acks and nacks of all its streams, waits
        /// overlapping). At least 1 ms. Default 5 s.
        shutdown_timeout, shutdown_timeout_ms
    );
    ms_setter!(
        /// A subtask holding unacknowledged messages with no completed checkpoint this long
        /// after it started reading fails the job (checkpointing off or too slow). Zero
        /// disables. Default 10 min.
        first_checkpoint_timeout, first_checkpoint_timeout_ms
    );
    ms_setter!(
        /// A split that delivered nothing for this long stops holding the subtask's
        /// watermark back (Flink's `scan.watermark.idle-timeout`, Arroyo's `idle_time`).
        /// Zero: never (a silent split holds the watermark back). Default 5 min.
        watermark_idle_timeout, watermark_idle_timeout_ms
    );
    ms_setter!(
        /// How far behind the greatest event time seen a split's watermark stays, when
        /// event time is the publish time or an attribute (a `WATERMARK FOR` column carries
        /// its own; both together are refused). A message at or behind the watermark is
        /// counted `messages_behind_watermark`. Less than 106,752 days (nanoseconds in an
        /// `i64`). Default 1 s (decision 0035).
        watermark_out_of_orderness, watermark_out_of_orderness_ms, option
    );

    ms_setter!(
        /// How often the backlog probe reads the subscription's oldest unacknowledged
        /// message (a snapshot created and deleted: two admin calls per subscription per
        /// job). At least 100 ms. Default 2 s (decision 0047).
        watermark_backlog_probe_interval, watermark_backlog_probe_interval_ms
    );

    /// Whether the watermark is held behind the subscription's oldest unacknowledged
    /// message (`scan.watermark.backlog-probe`, decision 0047). Default `true`; without
    /// the permission to create snapshots the job WARNs and runs as with `false`.
    pub fn watermark_backlog_probe(mut self, on: bool) -> Self {
        self.config.watermark_backlog_probe = on;
        self
    }

    /// Messages taken from one split in one go before the next split is served.
    /// Positive. Default 1000.
    pub fn max_records_per_fetch(mut self, messages: u32) -> Self {
        self.config.max_records_per_fetch = messages;
        self
    }

    /// At most this many messages per second per subtask (the legacy Flink source's
    /// knob). Positive. Default: no limit.
    pub fn rate_limit_messages_per_second(mut self, messages: u64) -> Self {
        self.config.rate_limit_messages_per_second = Some(messages);
        self
    }

    /// Validates every rule of SPEC 5.3. Errors name the setter and the value.
    pub fn build(self) -> Result<PubSubSubscriberOptions, BuildError> {
        if let Some((option, d)) = self.sub_ms.first() {
            return Err(BuildError::new(
                option,
                show(*d),
                "must be a whole number of milliseconds",
            ));
        }
        let c = &self.config;
        let opt_positive = |name, v: Option<u64>| v.map(|v| positive(name, v)).transpose();
        opt_positive("max_outstanding_messages", c.max_outstanding_messages)?;
        positive("max_outstanding_bytes", c.max_outstanding_bytes)?;
        opt_positive(
            "subscriber_buffer_max_messages",
            c.subscriber_buffer_max_messages,
        )?;
        opt_positive("subscriber_buffer_max_bytes", c.subscriber_buffer_max_bytes)?;
        opt_positive(
            "paused_split_buffer_max_messages",
            c.paused_split_buffer_max_messages,
        )?;
        opt_positive(
            "paused_split_buffer_max_bytes",
            c.paused_split_buffer_max_bytes,
        )?;
        positive("parallel_pull_count", u64::from(c.parallel_pull_count))?;
        if c.parallel_pull_count > MAX_PARALLEL_PULL_COUNT {
            return Err(BuildError::new(
                "parallel_pull_count",
                c.parallel_pull_count,
                format!("must be at most {MAX_PARALLEL_PULL_COUNT} (streams per split, each an open StreamingPull stream; one subtask cannot use more)"),
            ));
        }
        positive("max_records_per_fetch", u64::from(c.max_records_per_fetch))?;
        opt_positive(
            "rate_limit_messages_per_second",
            c.rate_limit_messages_per_second,
        )?;
        positive("shutdown_timeout", c.shutdown_timeout_ms)
            .map_err(|_| BuildError::new("shutdown_timeout", "0ms", "must be at least 1ms"))?;
        if c.await_ack_confirmation_ms == Some(0) {
            return Err(BuildError::new(
                "await_ack_confirmation",
                "0ms",
                "must be at least 1ms",
            ));
        }
        if let Some(ms) = c.watermark_out_of_orderness_ms {
            if ms
                .checked_mul(1_000_000)
                .is_none_or(|ns| ns > i64::MAX as u64)
            {
                return Err(BuildError::new(
                    "watermark_out_of_orderness",
                    show(Duration::from_millis(ms)),
                    "must be less than 106,752 days, about 292 years (event times are nanoseconds in an i64)",
                ));
            }
        }
        if c.watermark_backlog_probe_interval_ms < 100 {
            return Err(BuildError::new(
                "watermark_backlog_probe_interval",
                show(Duration::from_millis(c.watermark_backlog_probe_interval_ms)),
                "must be at least 100ms (each probe is two admin calls per subscription)",
            ));
        }
        let (lo, hi) = LEASE_EXTENSION_RANGE;
        for (name, v) in [
            (
                "min_duration_per_ack_extension",
                c.min_duration_per_ack_extension_ms,
            ),
            (
                "max_duration_per_ack_extension",
                c.max_duration_per_ack_extension_ms,
            ),
        ] {
            if let Some(ms) = v {
                let d = Duration::from_millis(ms);
                if d < lo || d > hi {
                    return Err(BuildError::new(
                        name,
                        show(d),
                        "must be between 10s and 600s (the client's range)",
                    ));
                }
            }
        }
        if let (Some(min), Some(max)) = (
            c.min_duration_per_ack_extension_ms,
            c.max_duration_per_ack_extension_ms,
        ) {
            if min >= max {
                return Err(BuildError::between(
                    "min_duration_per_ack_extension",
                    "max_duration_per_ack_extension",
                    show(Duration::from_millis(min)),
                    format!(
                        "must be less than {{other}} ({})",
                        show(Duration::from_millis(max))
                    ),
                ));
            }
        }
        Ok(PubSubSubscriberOptions {
            config: self.config,
        })
    }
}

impl PubSubSubscriberOptions {
    /// The lease extension length handed to the client: max if set, else the client's
    /// 60 s raised to at least min.
    pub fn lease_extension(&self) -> Option<Duration> {
        let c = &self.config;
        match (
            c.max_duration_per_ack_extension_ms,
            c.min_duration_per_ack_extension_ms,
        ) {
            (Some(max), _) => Some(Duration::from_millis(max)),
            (None, Some(min)) => Some(Duration::from_millis(min).max(Duration::from_secs(60))),
            (None, None) => None,
        }
    }

    /// The paused-split caps: explicit, or 2 x the effective flow-control limits
    /// (`max_outstanding_messages` as sized at start).
    pub fn paused_split_caps(&self, effective_max_outstanding: u64) -> (u64, u64) {
        let c = &self.config;
        (
            c.paused_split_buffer_max_messages
                .unwrap_or(effective_max_outstanding.saturating_mul(2)),
            c.paused_split_buffer_max_bytes
                .unwrap_or(c.max_outstanding_bytes.saturating_mul(2)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(b: PubSubSubscriberOptionsBuilder) -> String {
        b.build().unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_the_specs() {
        let o = PubSubSubscriberOptions::builder().build().unwrap();
        let c = o.config();
        assert_eq!(c.max_outstanding_bytes, 100_000_000);
        assert_eq!(c.parallel_pull_count, 1);
        assert_eq!(c.max_ack_extension_period_ms, 3_600_000);
        assert_eq!(c.shutdown_timeout_ms, 5_000);
        assert_eq!(c.max_records_per_fetch, 1000);
        assert_eq!(c.first_checkpoint_timeout_ms, 600_000);
        assert_eq!(c.watermark_idle_timeout_ms, 300_000);
        assert_eq!(o.paused_split_caps(1000), (2000, 200_000_000));
        assert_eq!(o.lease_extension(), None);
    }

    #[test]
    fn every_rule_names_the_setter_and_value() {
        let b = PubSubSubscriberOptions::builder;
        assert_eq!(
            err(b().parallel_pull_count(0)),
            "option 'parallel_pull_count' is invalid: must be positive, was '0'"
        );
        assert_eq!(
            err(b().parallel_pull_count(1_000_000)),
            "option 'parallel_pull_count' is invalid: must be at most 64 (streams per split, each an open StreamingPull stream; one subtask cannot use more), was '1000000'"
        );
        assert!(b().parallel_pull_count(64).build().is_ok());
        assert!(err(b().max_outstanding_messages(0)).contains("'max_outstanding_messages'"));
        assert!(err(b().max_outstanding_bytes(0)).contains("'max_outstanding_bytes'"));
        assert!(err(b().subscriber_buffer_max_bytes(0)).contains("subscriber_buffer_max_bytes"));
        assert!(err(b().paused_split_buffer_max_messages(0))
            .contains("paused_split_buffer_max_messages"));
        assert!(err(b().max_records_per_fetch(0)).contains("max_records_per_fetch"));
        assert!(err(b().rate_limit_messages_per_second(0)).contains("rate_limit"));
        assert!(err(b().shutdown_timeout(Duration::ZERO)).contains("at least 1ms"));
        assert!(err(b().await_ack_confirmation(Duration::ZERO)).contains("at least 1ms"));
        assert_eq!(
            err(b().max_duration_per_ack_extension(Duration::from_secs(5))),
            "option 'max_duration_per_ack_extension' is invalid: must be between 10s and 600s (the client's range), was '5s'"
        );
        assert_eq!(
            err(b()
                .min_duration_per_ack_extension(Duration::from_secs(30))
                .max_duration_per_ack_extension(Duration::from_secs(20))),
            "option 'min_duration_per_ack_extension' is invalid: must be less than 'max_duration_per_ack_extension' (20s), was '30s'"
        );
        assert!(err(b().first_checkpoint_timeout(Duration::from_micros(1)))
            .contains("whole number of milliseconds"));
    }

    #[test]
    fn zero_extension_period_is_settable_and_min_raises_the_extension() {
        let o = PubSubSubscriberOptions::builder()
            .max_ack_extension_period(Duration::ZERO)
            .min_duration_per_ack_extension(Duration::from_secs(90))
            .build()
            .unwrap();
        assert_eq!(o.config().max_ack_extension_period_ms, 0);
        assert_eq!(o.lease_extension(), Some(Duration::from_secs(90)));
        let o = PubSubSubscriberOptions::builder()
            .min_duration_per_ack_extension(Duration::from_secs(10))
            .build()
            .unwrap();
        assert_eq!(o.lease_extension(), Some(Duration::from_secs(60)));
    }
}
