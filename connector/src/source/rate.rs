//! The per-subtask message rate limit (`scan.rate-limit.messages-per-second`, the legacy
//! Flink source's knob): an evenly spaced schedule without bursts, so at most
//! `rate x t + 1` messages are taken in any window of length `t`.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct RateLimiter {
    step: Duration,
    next: Option<Instant>,
}

impl RateLimiter {
    /// At most `per_second` messages per second (> 0).
    pub fn new(per_second: u64) -> Self {
        RateLimiter {
            step: Duration::from_secs_f64(1.0 / per_second.max(1) as f64),
            next: None,
        }
    }

    /// When the next message may be taken, if that is after `now`.
    pub fn wait_until(&self, now: Instant) -> Option<Instant> {
        self.next.filter(|t| *t > now)
    }

    /// Records a message taken at `now`.
    pub fn took(&mut self, now: Instant) {
        let from = self.next.map_or(now, |t| t.max(now));
        self.next = Some(from + self.step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_messages_evenly_and_never_bursts_after_a_pause() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(50);
        assert_eq!(r.wait_until(t0), None, "the first message goes at once");
        r.took(t0);
        assert_eq!(r.wait_until(t0), Some(t0 + Duration::from_millis(20)));
        // Taking at the allowed instants: 50 messages span 49 steps.
        let mut now = t0;
        for _ in 1..50 {
            now = r.wait_until(now).unwrap();
            r.took(now);
        }
        assert_eq!(now - t0, Duration::from_millis(980));
        // After a long pause the schedule restarts from now: no saved-up burst.
        let later = now + Duration::from_secs(10);
        assert_eq!(r.wait_until(later), None);
        r.took(later);
        assert_eq!(r.wait_until(later), Some(later + Duration::from_millis(20)));
    }
}
