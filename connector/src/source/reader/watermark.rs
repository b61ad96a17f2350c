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

/// Which rule holds a subtask's watermark where it is (gauge `watermark_held_by`, one
/// series per rule, 1 for the rule that holds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    /// The newest event time less the out-of-orderness of its slowest split (or a split
    /// that has not delivered yet).
    Newest,
    /// The subscription's oldest unacknowledged message, or a probe not answered yet
    /// (decision 0047).
    Backlog,
    /// Every split is idle.
    Idle,
    /// Its slowest split is paused by watermark alignment.
    Alignment,
}

impl HeldBy {
    /// Every rule, in the order of the gauge's series.
    pub const ALL: [HeldBy; 4] = [
        HeldBy::Newest,
        HeldBy::Backlog,
        HeldBy::Idle,
        HeldBy::Alignment,
    ];

    /// The gauge's label value.
    pub fn label(self) -> &'static str {
        match self {
            HeldBy::Newest => "newest",
            HeldBy::Backlog => "backlog",
            HeldBy::Idle => "idle",
            HeldBy::Alignment => "alignment",
        }
    }
}

/// What the backlog probe says of the subscriptions a subtask reads (decision 0047).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backlog {
    /// Not known yet, or the last probe failed before any answered: the watermark stays.
    Unknown,
    /// No bound (the probe is off or not permitted): the newest rule alone.
    Unbounded,
    /// Every message not yet acknowledged was published at or after this (ns since the
    /// Unix epoch, already rounded down for the service's resolution).
    OldestUnacked(i64),
}

/// What the subtask's watermark is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkStatus {
    /// The watermark (ns since the Unix epoch): every event time at or below it is
    /// complete as far as this subtask knows. `None` until every active split delivered.
    pub watermark_ns: Option<i64>,
    /// Every split is idle: the subtask does not hold an operator's minimum back.
    pub idle: bool,
    /// Which rule holds it.
    pub held_by: HeldBy,
}

impl WatermarkStatus {
    /// What goes into the dataflow: nothing before the subtask has a watermark (its
    /// downstream operators wait for one), `Idle` while every split is idle.
    pub fn to_emit(self) -> Option<pubsub_engine_spi::Watermark> {
        if self.idle {
            return Some(pubsub_engine_spi::Watermark::Idle);
        }
        self.watermark_ns
            .map(pubsub_engine_spi::Watermark::EventTime)
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
    /// The backlog bound of its subscriptions: the lowest over them (`Unbounded` when the
    /// probe is off).
    backlog: Backlog,
    /// The newest rule alone at the last advance (never lowered): how far the splits have
    /// read, what alignment compares (see [`Watermarks::progress`]).
    progress: Option<i64>,
    /// Every split silent for the idle timeout at the last advance, owed or not (see
    /// [`Watermarks::quiet`]).
    quiet: bool,
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
            backlog: Backlog::Unbounded,
            progress: restored,
            quiet: false,
        })
    }

    /// The backlog bound now (the lowest over the subtask's subscriptions): at the next
    /// advance the watermark does not pass it less the out-of-orderness, and stays where
    /// it is while it is [`Backlog::Unknown`]. Dataflow's rule: a message's event time is
    /// at most the out-of-orderness behind its publish time, so a message still unacked
    /// at the service has an event time above the bound less the out-of-orderness.
    pub fn set_backlog(&mut self, backlog: Backlog) {
        self.backlog = backlog;
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

    /// How far the active splits have read: the lowest one's highest event time less the
    /// out-of-orderness, without the backlog bound (never lowered; `None` until every
    /// active split delivered). Watermark alignment reports this, not the watermark: a
    /// split paused by alignment keeps its messages unacked, so the backlog bound would
    /// hold the group behind the very messages the split waits to take, and the group
    /// would never come within the drift of it (found by the e2e test
    /// `backlog::alignment_pauses_and_parks_...`).
    pub fn progress(&self) -> Option<i64> {
        self.progress
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

    /// Silent for the idle timeout, not paused, and not owed a message: while the
    /// subscription holds an unacked message published before this split's newest event
    /// time (another consumer holds it, or it waits for redelivery), that message may
    /// still come here, so the split keeps holding the watermark (and its subtask stays
    /// active downstream) until the backlog passes it or the bound is known again.
    fn is_idle(&self, s: &SplitTime, now: Instant) -> bool {
        let owed = match (self.backlog, s.max_ns) {
            (Backlog::OldestUnacked(b), Some(m)) => b < m,
            (Backlog::Unknown, Some(_)) => true,
            _ => false,
        };
        !owed && self.is_quiet(s, now)
    }

    /// Silent for the idle timeout and not paused.
    fn is_quiet(&self, s: &SplitTime, now: Instant) -> bool {
        !s.fresh
            && !s.paused
            && self
                .idle_timeout
                .is_some_and(|t| now.saturating_duration_since(s.last) >= t)
    }

    /// Every split was silent for the idle timeout at the last advance, whatever the
    /// backlog owes it: what watermark alignment counts as idle. Alignment only paces
    /// reading, so a member waiting for a message another consumer holds must not stop
    /// its group (a probe that never answers would otherwise hold it for good).
    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// Advances the watermark to what the splits and the backlog allow at `now` (never
    /// lowers it).
    pub fn advance(&mut self, now: Instant) -> WatermarkStatus {
        // The lowest split watermark, and whether that split is paused by alignment.
        let mut min: Option<(i64, bool)> = None;
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
                    if min.is_none_or(|(x, _)| w < x) {
                        min = Some((w, s.paused));
                    }
                }
                None => unknown = true,
            }
        }
        let newest = match min {
            Some((_, true)) => HeldBy::Alignment,
            _ => HeldBy::Newest,
        };
        let (next, held_by) = match (unknown, min, self.backlog) {
            _ if active == 0 => (None, HeldBy::Idle),
            (true, _, _) | (_, None, _) => (None, HeldBy::Newest),
            (false, Some((w, _)), Backlog::Unbounded) => (Some(w), newest),
            (false, Some(_), Backlog::Unknown) => (None, HeldBy::Backlog),
            (false, Some((w, _)), Backlog::OldestUnacked(b)) => {
                let cap = b.saturating_sub(self.bound_ns);
                if cap < w {
                    (Some(cap), HeldBy::Backlog)
                } else {
                    (Some(w), newest)
                }
            }
        };
        if let Some(w) = next {
            self.current = Some(self.current.map_or(w, |c| c.max(w)));
        }
        if let (false, Some((w, _))) = (unknown, min) {
            self.progress = Some(self.progress.map_or(w, |p| p.max(w)));
        }
        self.quiet = !self.splits.is_empty() && self.splits.iter().all(|s| self.is_quiet(s, now));
        for s in &mut self.splits {
            s.fresh = false;
        }
        WatermarkStatus {
            watermark_ns: self.current,
            idle: active == 0,
            held_by,
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
        if self.watermarks.is_none() || now < self.watermark_at + ADVANCE_EVERY {
            return;
        }
        let backlog = self.backlog_now();
        let Some(w) = self.watermarks.as_mut() else {
            return;
        };
        self.watermark_at = now;
        if let Some(b) = backlog {
            w.set_backlog(b);
        }
        let status = w.advance(now);
        let (progress, quiet) = (w.progress(), w.quiet());
        self.set_held_by(status.held_by);
        self.watermark_out = status.to_emit();
        self.align(progress, status.idle || quiet, now);
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
