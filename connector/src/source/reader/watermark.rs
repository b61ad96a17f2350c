//! Event time and watermarks of one source subtask (issue 32, item 2; decision 0035).
//!
//! A row's event time is its message's publish time (nanoseconds since the Unix epoch,
//! the service's clock), its `scan.event-time.attribute` (decision 0038) or its `WATERMARK
//! FOR` column (decision 0037). Per split (the StreamingPull streams of one subscription), the
//! watermark is the highest event time seen minus the out-of-orderness bound; the
//! subtask's watermark is the minimum over its splits that are not idle, and never goes
//! backwards, also across a restart (it is part of each checkpoint). A split that has
//! delivered nothing for the idle timeout stops holding the minimum back; a subtask whose
//! splits are all idle is idle (its watermark stays where it is).

use std::time::Duration;

use tokio::time::Instant;

/// Checkpoint key of the subtask's watermark (nanoseconds since the Unix epoch).
pub const STATE_KEY: &str = "watermark";

/// Checkpoint key of what the watermark was computed from ([`event_time_source`]); absent
/// in checkpoints from before it existed, which were all of publish time.
pub const SOURCE_KEY: &str = "watermark_event_time";

/// What a table's event time is, as kept beside its watermark: `publish-time`,
/// `attribute:KEY` (`scan.event-time.attribute`) or `column:NAME` (`WATERMARK FOR`).
pub fn event_time_source(attribute: Option<&str>, column: Option<&str>) -> String {
    match (column, attribute) {
        (Some(c), _) => format!("column:{c}"),
        (None, Some(a)) => format!("attribute:{a}"),
        (None, None) => "publish-time".to_string(),
    }
}

/// The event-time source of a restored checkpoint's watermarks when it is not `current`
/// (`sources`: [`SOURCE_KEY`] of each restored subtask that checkpointed a watermark).
/// A watermark of another event time means nothing for this one (publish times are now,
/// an attribute may hold last year's times): it is not restored.
pub fn changed_event_time<'a>(
    sources: impl IntoIterator<Item = Option<&'a serde_json::Value>>,
    current: &str,
) -> Option<String> {
    sources.into_iter().find_map(|v| {
        let old = v.and_then(|v| v.as_str()).unwrap_or("publish-time");
        (old != current).then(|| old.to_string())
    })
}

/// The out-of-orderness of publish times this subtask allows before a message counts as
/// behind the watermark. Publish time is not delivery order on Pub/Sub: several streams
/// of a split interleave, a backlog and redeliveries come back older than what was just
/// read. One second is Arroyo's default for a connector's own timestamp; the measured
/// spread on the emulator is in decision 0035.
pub const DEFAULT_OUT_OF_ORDERNESS: Duration = Duration::from_secs(1);

/// How often the run loop advances the watermark (and reads the clock for idleness); a
/// barrier always advances it.
const ADVANCE_EVERY: Duration = Duration::from_millis(100);

/// One split's event-time progress.
#[derive(Debug, Clone, Copy)]
struct SplitTime {
    /// The highest event time it delivered (ns), if any.
    max_ns: Option<i64>,
    /// When it last delivered a message (or was added), by the clock its caller passed:
    /// the run loop's, which may be one advance old.
    last: Instant,
    /// It delivered since the last advance: never idle at the next one, whatever `last`
    /// says (a burst after a quiet spell is stamped with a clock from before it).
    fresh: bool,
    /// Paused by watermark alignment: it has deliveries it may not take, so it is never
    /// idle (it would stop holding the subtask back while its messages wait).
    paused: bool,
}

/// What the subtask's watermark is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkStatus {
    /// The watermark (ns since the Unix epoch): every event time at or below it is
    /// complete as far as this subtask knows. `None` until every active split delivered.
    pub watermark_ns: Option<i64>,
    /// Every split is idle: the subtask does not hold an operator's minimum back.
    pub idle: bool,
}

impl WatermarkStatus {
    /// What goes into the dataflow: nothing before the subtask has a watermark (its
    /// downstream operators wait for one), `Idle` while every split is idle.
    pub fn to_emit(self) -> Option<pubsub_engine::Watermark> {
        if self.idle {
            return Some(pubsub_engine::Watermark::Idle);
        }
        self.watermark_ns.map(pubsub_engine::Watermark::EventTime)
    }
}

/// The watermarks of one subtask's splits.
#[derive(Debug)]
pub struct Watermarks {
    bound_ns: i64,
    /// `None`: a split is never idle.
    idle_timeout: Option<Duration>,
    splits: Vec<SplitTime>,
    /// The highest watermark reported (restored from the checkpoint): never lowered.
    current: Option<i64>,
}

impl Watermarks {
    /// `bound`: the out-of-orderness; `idle_timeout`: `None` keeps every split active.
    /// `restored`: the watermark of the restored checkpoint, if any.
    ///
    /// # Errors
    /// A bound of 292 years or more (it does not fit nanoseconds in an `i64`).
    pub fn new(
        bound: Duration,
        idle_timeout: Option<Duration>,
        restored: Option<i64>,
    ) -> anyhow::Result<Watermarks> {
        let bound_ns = i64::try_from(bound.as_nanos()).map_err(|_| {
            anyhow::anyhow!("an out-of-orderness of {bound:?} does not fit in nanoseconds")
        })?;
        Ok(Watermarks {
            bound_ns,
            idle_timeout,
            splits: Vec::new(),
            current: restored,
        })
    }

    /// Adds a split (its index is the order of the calls); it counts as having just
    /// delivered, so it holds the watermark back until it delivers or turns idle.
    pub fn add_split(&mut self, now: Instant) {
        self.splits.push(SplitTime {
            max_ns: None,
            last: now,
            fresh: false,
            paused: false,
        });
    }

    /// Split `split`'s own watermark: its highest event time minus the out-of-orderness;
    /// `None` before it delivered (or out of range).
    pub fn split_watermark(&self, split: usize) -> Option<i64> {
        let s = self.splits.get(split)?;
        s.max_ns.map(|m| m.saturating_sub(self.bound_ns))
    }

    /// Watermark alignment paused (`true`) or resumed split `split`: paused, it is never
    /// idle; resumed, its idle clock starts again at `now`.
    pub fn set_paused(&mut self, split: usize, paused: bool, now: Instant) {
        if let Some(s) = self.splits.get_mut(split) {
            if s.paused && !paused {
                s.last = now;
            }
            s.paused = paused;
        }
    }

    /// Split `split` delivered a message with event time `event_ns`. Returns whether the
    /// message is behind the subtask's watermark (a window that ends at or before it
    /// may already have fired). A split index out of range is ignored.
    pub fn observe(&mut self, split: usize, event_ns: i64, now: Instant) -> bool {
        let behind = self.current.is_some_and(|w| event_ns <= w);
        if let Some(s) = self.splits.get_mut(split) {
            s.max_ns = Some(s.max_ns.map_or(event_ns, |m| m.max(event_ns)));
            s.last = now;
            s.fresh = true;
        }
        behind
    }

    fn is_idle(&self, s: &SplitTime, now: Instant) -> bool {
        !s.fresh
            && !s.paused
            && self
                .idle_timeout
                .is_some_and(|t| now.saturating_duration_since(s.last) >= t)
    }

    /// Advances the watermark to what the splits allow at `now` (never lowers it).
    pub fn advance(&mut self, now: Instant) -> WatermarkStatus {
        let mut min: Option<i64> = None;
        let mut active = 0;
        let mut unknown = false;
        for s in &self.splits {
            if self.is_idle(s, now) {
                continue;
            }
            active += 1;
            match s.max_ns {
                Some(m) => {
                    let w = m.saturating_sub(self.bound_ns);
                    min = Some(min.map_or(w, |x| x.min(w)));
                }
                None => unknown = true,
            }
        }
        if let (false, Some(w)) = (unknown, min) {
            self.current = Some(self.current.map_or(w, |c| c.max(w)));
        }
        for s in &mut self.splits {
            s.fresh = false;
        }
        WatermarkStatus {
            watermark_ns: self.current,
            idle: active == 0,
        }
    }
}

/// A publish time in ns since the Unix epoch; `None` outside an `i64` (years 1677 to
/// 2262; never set by the service).
pub fn publish_ns(t: &google_cloud_wkt::Timestamp) -> Option<i64> {
    t.seconds()
        .checked_mul(1_000_000_000)?
        .checked_add(i64::from(t.nanos()))
}

/// The checkpoint value of a watermark.
pub fn snapshot(watermark_ns: Option<i64>) -> serde_json::Value {
    watermark_ns.map_or(serde_json::Value::Null, serde_json::Value::from)
}

/// The watermark to start from after a restore: the lowest of the restored subtasks'
/// (an operator's watermark is their minimum, so starting there never takes it past what
/// it was, whatever the new parallelism). `None` when there is nothing restored or any
/// restored subtask had no watermark yet (`null`: a split had not delivered): then no
/// message counts as behind until the splits deliver again. A subtask without the key (one
/// without splits, or a state from before watermarks) is left out. The operators downstream keep their own watermark in the checkpoint, so a
/// conservative start here never moves theirs back.
///
/// # Errors
/// A value that is not an integer (a state written by something else).
pub fn restore<'a>(
    values: impl IntoIterator<Item = Option<&'a serde_json::Value>>,
) -> anyhow::Result<Option<i64>> {
    let mut min: Option<i64> = None;
    for v in values.into_iter().flatten() {
        if v.is_null() {
            return Ok(None);
        }
        let w = v.as_i64().ok_or_else(|| {
            anyhow::anyhow!("checkpointed watermark {v} is not an integer of nanoseconds")
        })?;
        min = Some(min.map_or(w, |m| m.min(w)));
    }
    Ok(min)
}

impl super::SourceReader {
    /// Split `split` emits (decodes) a message with event time `event_ns`: counts it
    /// when it is behind the watermark. Only decoded messages move the watermark: one
    /// nacked from a paused buffer (a park, a stop) comes back later and must not find
    /// the watermark already past it.
    pub(super) fn observe_event_time(&mut self, split: usize, event_ns: Option<i64>) {
        let (Some(w), Some(ns)) = (self.watermarks.as_mut(), event_ns) else {
            return;
        };
        // The clock of the last advance (at most `ADVANCE_EVERY` old while messages
        // flow): idleness is minutes, so a clock read per message would buy nothing.
        if w.observe(split, ns, self.watermark_at) {
            self.counters().behind_watermark.add(1);
        }
        // Paused at once, not at the next advance: a split may decode a whole fetch
        // in between and run far past its group.
        self.pause_if_ahead(split);
    }

    /// Advances the watermark and sets its gauges, at most every `ADVANCE_EVERY`.
    pub(super) fn advance_watermark(&mut self, now: Instant, now_ms: i64) {
        let Some(w) = self.watermarks.as_mut() else {
            return;
        };
        if now < self.watermark_at + ADVANCE_EVERY {
            return;
        }
        self.watermark_at = now;
        let status = w.advance(now);
        self.watermark_out = status.to_emit();
        self.align(status, now);
        let c = self.counters();
        let ms = status.watermark_ns.map(|ns| ns.div_euclid(1_000_000));
        c.watermark_ms.set(ms.map_or(0, |ms| ms.max(0) as u64));
        c.watermark_lag_ms
            .set(ms.map_or(0, |ms| now_ms.saturating_sub(ms).max(0) as u64));
        c.idle.set(u64::from(status.idle));
    }
}

#[cfg(test)]
#[path = "watermark_tests.rs"]
mod tests;
