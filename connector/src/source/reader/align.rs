//! Watermark alignment of a subtask's splits (issue 32, item 2; Flink's
//! `scan.watermark.alignment.*`; decision 0042).
//!
//! The subtask reports how far it has read (its watermark by the newest rule, without the
//! backlog bound) to its group at each watermark advance and reads the
//! group's (the lowest over every member: this process's as they are now, the others' as
//! the leader last broadcast them; a member without a watermark yet holds the group at
//! the start of time until it has one or turns idle). A split whose own
//! watermark is more than `max-drift` ahead of the group's is paused: its deliveries go to
//! its paused buffer instead of into rows, so its watermark stops rising, and at the
//! `scan.paused-split-buffer.*` caps it is parked (its paused messages nacked, never
//! emitted; its streams stopped). It resumes once the group comes within the drift: its
//! paused buffer is decoded first, in delivery order, and a parked split reopens.

use pubsub_engine_spi::alignment::{AlignmentMember, MemberWatermark, HELD};

use super::*;

/// The subtask's membership in its table's alignment group.
pub(super) struct Aligned {
    pub(super) member: AlignmentMember,
    max_drift_ns: i64,
    /// The group's watermark as last read (at a broadcast or an advance).
    group_ns: Option<i64>,
}

impl Aligned {
    pub(super) fn new(mut member: AlignmentMember, max_drift: Duration) -> Self {
        // Held by this member itself until its first advance: no message is taken into
        // rows before the group's watermark is read.
        let group_ns = member.group_watermark();
        Aligned {
            member,
            max_drift_ns: i64::try_from(max_drift.as_nanos()).unwrap_or(i64::MAX),
            group_ns,
        }
    }
}

/// Whether a split whose watermark is `split_ns` must pause in a group at `group_ns`: only
/// when both are known and it is more than `max_drift_ns` ahead (a split that has not
/// delivered, or a group with no known member, holds nothing back).
pub(super) fn must_pause(split_ns: Option<i64>, group_ns: Option<i64>, max_drift_ns: i64) -> bool {
    match (split_ns, group_ns) {
        (Some(s), Some(g)) => s > g.saturating_add(max_drift_ns),
        _ => false,
    }
}

impl SourceReader {
    /// At a watermark advance: reports how far the subtask has read (`progress`, see
    /// `Watermarks::progress`), or that it is `quiet` (`Watermarks::quiet`), to its group
    /// and pauses or resumes its splits.
    pub(super) fn align(&mut self, progress: Option<i64>, quiet: bool, now: Instant) {
        let Some(a) = self.alignment.as_mut() else {
            return;
        };
        a.member.report(match progress {
            _ if quiet => MemberWatermark::Idle,
            Some(w) => MemberWatermark::At(w),
            None => MemberWatermark::Unknown,
        });
        a.group_ns = a.member.group_watermark();
        self.pause_or_resume(now);
    }

    /// The leader broadcast group watermarks: reads this group's and pauses or resumes.
    pub(super) fn on_group_watermark(&mut self) {
        let Some(a) = self.alignment.as_mut() else {
            return;
        };
        a.group_ns = a.member.group_watermark();
        self.pause_or_resume(Instant::now());
    }

    /// After split `split` decoded a message: pauses it if it is now too far ahead (a
    /// comparison; resuming waits for the group, at an advance or a broadcast).
    pub(super) fn pause_if_ahead(&mut self, split: usize) {
        let (Some(a), Some(w)) = (self.alignment.as_ref(), self.watermarks.as_ref()) else {
            return;
        };
        let paused = self
            .splits
            .get(split)
            .is_none_or(|s| s.paused_for_alignment);
        if !paused && must_pause(w.split_watermark(split), a.group_ns, a.max_drift_ns) {
            self.pause_or_resume(Instant::now());
        }
    }

    fn pause_or_resume(&mut self, now: Instant) {
        let (Some(a), Some(w)) = (self.alignment.as_ref(), self.watermarks.as_mut()) else {
            return;
        };
        for (i, s) in self.splits.iter_mut().enumerate() {
            let pause = must_pause(w.split_watermark(i), a.group_ns, a.max_drift_ns);
            if pause == s.paused_for_alignment {
                continue;
            }
            s.paused_for_alignment = pause;
            w.set_paused(i, pause, now);
            if let (true, Some(c)) = (pause, self.counters.as_ref()) {
                c.alignment_pauses.add(1);
            }
            let ms = |ns: Option<i64>| match ns {
                None => "none".to_string(),
                Some(HELD) => "held (a member has no watermark yet)".to_string(),
                Some(n) => n.div_euclid(1_000_000).to_string(),
            };
            tracing::debug!(
                subscription = %s.subscription,
                group = a.member.group(),
                "split {} {} by watermark alignment: its watermark {} ms, the group's {} ms, max drift {} ms",
                s.index,
                if pause { "paused" } else { "resumed" },
                ms(w.split_watermark(i)),
                ms(a.group_ns),
                a.max_drift_ns / 1_000_000
            );
        }
        let paused = self
            .splits
            .iter()
            .filter(|s| s.paused_for_alignment)
            .count();
        if let Some(c) = self.counters.as_ref() {
            c.paused_for_alignment.set(paused as u64);
        }
    }

    /// A split paused by alignment holds messages it may not take (in its paused buffer,
    /// or left in the subscription by a park): the subtask is not idle, so
    /// `--stop-when-idle` does not end a run that has not read them.
    pub(super) fn alignment_waiting(&self) -> bool {
        self.splits
            .iter()
            .any(|s| s.paused_for_alignment && (s.parked_at.is_some() || !s.paused.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::must_pause;

    #[test]
    fn a_split_pauses_only_when_more_than_the_drift_ahead_of_a_known_group() {
        assert!(
            !must_pause(Some(130), Some(100), 30),
            "exactly the drift ahead"
        );
        assert!(must_pause(Some(131), Some(100), 30));
        assert!(!must_pause(Some(50), Some(100), 30), "behind the group");
        assert!(!must_pause(None, Some(100), 30), "has not delivered");
        assert!(!must_pause(Some(i64::MAX), None, 30), "no member known");
        assert!(
            must_pause(Some(i64::MIN + 31), Some(i64::MIN), 30),
            "a member without a watermark holds the group at the start of time"
        );
        assert!(
            !must_pause(Some(i64::MAX), Some(i64::MAX - 1), 30),
            "no overflow"
        );
    }
}
