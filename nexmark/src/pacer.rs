//! Rate limiting without busy-waiting: how many events may go out now, and when the next
//! one is due.

use std::time::{Duration, Instant};

/// The most a pacer lets a subtask owe: a source that was held back (back-pressure, a
/// checkpoint) catches up by at most this much time's worth of events at once, then
/// continues at its rate instead of emitting everything it missed in one burst.
pub const MAX_BURST: Duration = Duration::from_millis(100);

/// Paces one subtask at `rate` events per second.
#[derive(Debug, Clone)]
pub struct Pacer {
    /// Events per second; `None` = unlimited.
    rate: Option<f64>,
    /// The time from which `emitted` events are counted.
    origin: Instant,
    /// Events accounted for since `origin` (emitted, or forgiven after a stall).
    emitted: f64,
}

impl Pacer {
    /// A pacer for `rate` events per second starting at `now`; `rate` 0 (or not finite)
    /// is unlimited.
    pub fn new(rate: f64, now: Instant) -> Self {
        Pacer {
            rate: (rate.is_finite() && rate > 0.0).then_some(rate),
            origin: now,
            emitted: 0.0,
        }
    }

    /// How many events may be emitted at `now`, at most `max`. A debt of more than
    /// [`MAX_BURST`] (or one event, if that is more) is forgiven down to that.
    pub fn allowance(&mut self, now: Instant, max: u64) -> u64 {
        let Some(rate) = self.rate else {
            return max;
        };
        let due = now.saturating_duration_since(self.origin).as_secs_f64() * rate;
        let burst = (rate * MAX_BURST.as_secs_f64()).max(1.0);
        if due - self.emitted > burst {
            self.emitted = due - burst;
        }
        // The epsilon absorbs float error in `due` (50 ms at 1000/s is 50 events, not 49).
        ((due - self.emitted + 1e-6).floor().max(0.0) as u64).min(max)
    }

    /// Records `n` events as emitted.
    pub fn consumed(&mut self, n: u64) {
        self.emitted += n as f64;
    }

    /// When the next event is due; `None` when unlimited.
    pub fn next_due(&self) -> Option<Instant> {
        let rate = self.rate?;
        let at = (self.emitted + 1.0) / rate;
        // Capped so that an absurdly slow rate cannot overflow an Instant.
        Some(self.origin + Duration::from_secs_f64(at.min(1e9)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emits_at_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(1000.0, t0);
        assert_eq!(p.allowance(t0, 10_000), 0);
        assert_eq!(p.next_due(), Some(t0 + Duration::from_millis(1)));
        let n = p.allowance(t0 + Duration::from_millis(50), 10_000);
        assert_eq!(n, 50);
        p.consumed(n);
        assert_eq!(p.allowance(t0 + Duration::from_millis(50), 10_000), 0);
        assert_eq!(p.next_due(), Some(t0 + Duration::from_millis(51)));
        assert_eq!(
            p.allowance(t0 + Duration::from_millis(60), 4),
            4,
            "capped by max"
        );
    }

    #[test]
    fn a_stall_is_made_up_by_at_most_100ms_of_events() {
        let t0 = Instant::now();
        let mut p = Pacer::new(1000.0, t0);
        let n = p.allowance(t0 + Duration::from_secs(5), u64::MAX);
        assert_eq!(n, 100);
        p.consumed(n);
        // After the burst it is back at the rate, not owing the other 4.9 s.
        assert_eq!(p.allowance(t0 + Duration::from_secs(5), u64::MAX), 0);
        assert_eq!(p.allowance(t0 + Duration::from_millis(5010), u64::MAX), 10);
    }

    #[test]
    fn slow_rates_and_unlimited() {
        let t0 = Instant::now();
        let mut p = Pacer::new(0.5, t0);
        assert_eq!(p.allowance(t0 + Duration::from_secs(1), 10), 0);
        assert_eq!(p.next_due(), Some(t0 + Duration::from_secs(2)));
        assert_eq!(p.allowance(t0 + Duration::from_secs(2), 10), 1);
        let mut u = Pacer::new(0.0, t0);
        assert_eq!(u.allowance(t0, 512), 512);
        assert_eq!(u.next_due(), None);
    }
}
