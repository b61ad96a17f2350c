//! Reconnect backoff of a streaming pull: jittered exponential, 100 ms doubling to 10 s,
//! reset after a successful delivery (issue "never silently wrong").

use std::time::Duration;

/// First delay after a stream ends or fails.
pub const INITIAL: Duration = Duration::from_millis(100);
/// The delay never grows beyond this.
pub const MAX: Duration = Duration::from_secs(10);

/// The delay before each reconnect attempt of one stream.
#[derive(Debug, Clone)]
pub struct Backoff {
    attempt: u32,
    /// xorshift state for the jitter (no need for a crypto RNG).
    seed: u64,
}

impl Backoff {
    pub fn new(seed: u64) -> Self {
        Backoff {
            attempt: 0,
            seed: seed | 1,
        }
    }

    /// The ceiling of the next delay without jitter: 100 ms x 2^attempt, capped at 10 s.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u64 << self.attempt.min(20);
        (INITIAL * factor as u32).min(MAX)
    }

    /// The next delay: uniformly in [ceiling / 2, ceiling] ("equal jitter"), so streams
    /// that failed together do not reconnect in lockstep. Advances the schedule.
    pub fn next_delay(&mut self) -> Duration {
        let c = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let frac = (self.seed % 1_000) as f64 / 1_000.0;
        c / 2 + c.mul_f64(frac / 2.0)
    }

    /// A delivery arrived: the next failure starts again at 100 ms.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_100ms_to_10s_with_jitter_and_resets() {
        let mut b = Backoff::new(42);
        let ceilings: Vec<u64> = (0..10)
            .map(|_| {
                let c = b.ceiling();
                let d = b.next_delay();
                assert!(d >= c / 2 && d <= c, "{d:?} outside [{:?}, {c:?}]", c / 2);
                c.as_millis() as u64
            })
            .collect();
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
        for _ in 0..100 {
            assert!(b.next_delay() <= MAX);
        }
        b.reset();
        assert_eq!(b.ceiling(), INITIAL);
        let d = b.next_delay();
        assert!(d >= Duration::from_millis(50) && d <= INITIAL, "{d:?}");
    }

    #[test]
    fn jitter_varies() {
        let mut b = Backoff::new(7);
        let ds: std::collections::HashSet<_> = (0..20)
            .map(|_| {
                let d = b.next_delay();
                b.reset();
                d
            })
            .collect();
        assert!(ds.len() > 5, "{ds:?}");
    }
}
