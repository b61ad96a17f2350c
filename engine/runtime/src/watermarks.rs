//! Watermarks through the dataflow (issue 32, item 2; decision 0036).
//!
//! A source subtask's watermark travels in-band, as a record after the rows it covers, on
//! the same Timely channels as the rows: every channel keeps order from one worker to
//! another, so an operator sees a watermark only after every row its sender emitted
//! before it. The route operator copies it to every worker it may send rows to. The
//! operator keeps the last watermark of each upstream subtask and takes the minimum.

use pubsub_engine_spi::Watermark;

/// A watermark on its way from source subtask `from` (the global index of its worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Mark {
    pub from: u32,
    pub watermark: Watermark,
}

/// What one upstream subtask last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// Nothing yet: holds the operator back (it may still send rows of any time).
    Unknown,
    At(i64),
    /// Idle since it was at this time (if it ever was anywhere).
    Idle(Option<i64>),
}

/// The input watermark of one operator subtask: the minimum over its upstream subtasks
/// that are not idle. It never goes backwards: an upstream subtask that comes back from
/// idle below it does not lower it (its rows below it are late).
#[derive(Debug)]
pub(crate) struct InputWatermarks {
    upstream: Vec<(u32, Upstream)>,
    current: Option<i64>,
    idle: bool,
}

impl InputWatermarks {
    /// `upstream`: the global worker indexes of the source subtasks that send to it.
    pub fn new(upstream: impl IntoIterator<Item = u32>) -> Self {
        InputWatermarks {
            upstream: upstream
                .into_iter()
                .map(|u| (u, Upstream::Unknown))
                .collect(),
            current: None,
            idle: false,
        }
    }

    /// The operator's watermark: `None` until every upstream subtask sent one (or is idle).
    #[cfg(test)]
    pub fn current(&self) -> Option<i64> {
        self.current
    }

    /// Takes `mark`; returns the operator's new watermark when it changed (a higher event
    /// time, or idleness starting or ending). A mark from a subtask not upstream is ignored.
    pub fn update(&mut self, mark: Mark) -> Option<Watermark> {
        let slot = self.upstream.iter_mut().find(|(u, _)| *u == mark.from)?;
        slot.1 = match (mark.watermark, slot.1) {
            (Watermark::EventTime(t), Upstream::At(p)) => Upstream::At(t.max(p)),
            (Watermark::EventTime(t), Upstream::Idle(Some(p))) => Upstream::At(t.max(p)),
            (Watermark::EventTime(t), _) => Upstream::At(t),
            (Watermark::Idle, Upstream::At(p)) => Upstream::Idle(Some(p)),
            (Watermark::Idle, Upstream::Idle(p)) => Upstream::Idle(p),
            (Watermark::Idle, Upstream::Unknown) => Upstream::Idle(None),
        };
        let mut min: Option<i64> = None;
        let mut active = false;
        for (_, u) in &self.upstream {
            match u {
                Upstream::Unknown => return None,
                Upstream::At(t) => {
                    active = true;
                    min = Some(min.map_or(*t, |m| m.min(*t)));
                }
                Upstream::Idle(_) => {}
            }
        }
        if !active {
            if self.idle {
                return None;
            }
            self.idle = true;
            return Some(Watermark::Idle);
        }
        let was_idle = std::mem::replace(&mut self.idle, false);
        let min = min.expect("an active upstream has a time");
        match self.current {
            Some(c) if min <= c => was_idle.then_some(Watermark::EventTime(c)),
            _ => {
                self.current = Some(min);
                Some(Watermark::EventTime(min))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(from: u32, t: i64) -> Mark {
        Mark {
            from,
            watermark: Watermark::EventTime(t),
        }
    }
    fn idle(from: u32) -> Mark {
        Mark {
            from,
            watermark: Watermark::Idle,
        }
    }

    #[test]
    fn the_minimum_over_upstream_once_every_one_reported() {
        let mut w = InputWatermarks::new([0, 1, 2]);
        assert_eq!(w.update(at(0, 50)), None);
        assert_eq!(w.update(at(2, 30)), None);
        assert_eq!(w.current(), None, "subtask 1 has said nothing");
        assert_eq!(w.update(at(1, 40)), Some(Watermark::EventTime(30)));
        assert_eq!(w.update(at(0, 60)), None, "the minimum did not move");
        assert_eq!(w.update(at(2, 70)), Some(Watermark::EventTime(40)));
        // An upstream watermark never goes back, even if a subtask says so.
        assert_eq!(w.update(at(1, 10)), None);
        assert_eq!(w.current(), Some(40));
        // A mark from a worker that is not upstream changes nothing.
        assert_eq!(w.update(at(7, 1_000)), None);
        assert_eq!(w.current(), Some(40));
    }

    #[test]
    fn idle_subtasks_do_not_hold_it_back_and_a_return_never_lowers_it() {
        let mut w = InputWatermarks::new([0, 1]);
        assert_eq!(w.update(idle(1)), None, "subtask 0 has said nothing");
        assert_eq!(w.update(at(0, 100)), Some(Watermark::EventTime(100)));
        assert_eq!(w.update(at(1, 20)), None, "back from idle, below: held");
        assert_eq!(w.update(at(0, 200)), None, "subtask 1 at 20 holds it");
        assert_eq!(w.update(at(1, 150)), Some(Watermark::EventTime(150)));
        assert_eq!(w.update(idle(1)), Some(Watermark::EventTime(200)));
        assert_eq!(w.update(idle(0)), Some(Watermark::Idle));
        assert_eq!(w.update(idle(0)), None, "already idle");
        assert_eq!(w.current(), Some(200), "idleness keeps the time");
        // Back from idle at the same time: not idle any more, the time unchanged.
        assert_eq!(w.update(at(0, 120)), Some(Watermark::EventTime(200)));
        assert_eq!(w.update(at(0, 260)), Some(Watermark::EventTime(260)));
    }

    #[test]
    fn every_upstream_idle_from_the_start_is_idle_without_a_time() {
        let mut w = InputWatermarks::new([3]);
        assert_eq!(w.update(idle(3)), Some(Watermark::Idle));
        assert_eq!(w.current(), None);
        assert_eq!(w.update(at(3, 5)), Some(Watermark::EventTime(5)));
    }
}
