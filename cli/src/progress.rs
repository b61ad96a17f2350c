//! Live progress of `run` (SPEC 9): messages in/s, rows out/s, pending acks (held
//! messages and their bytes), the age of the oldest message held and the event-time lag
//! of the newest, and the last completed checkpoint with its age. On a
//! terminal one status line (indicatif) redrawn every second, with log lines written
//! above it; otherwise a `tracing` INFO line every [`LOG_EVERY`].

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pubsub_connector_core::source as src;
use pubsub_engine_spi::{Metrics, LAST_COMPLETED_EPOCH, MESSAGES_RECEIVED, ROWS_WRITTEN};

/// How often the terminal line is redrawn.
pub const DRAW_EVERY: Duration = Duration::from_secs(1);
/// How often the plain progress line is logged when stderr is not a terminal.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The bar log lines must go around while one is drawn.
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// The job's totals at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Messages received by every source subtask.
    pub received: u64,
    /// Rows every sink wrote and saw confirmed.
    pub written: u64,
    /// Messages held (received, not yet acknowledged).
    pub pending_acks: u64,
    /// Payload bytes of the held messages.
    pub held_bytes: u64,
    /// Last completed checkpoint epoch (0: none).
    pub epoch: u64,
    /// Milliseconds since the publish time of the oldest message held, over every source
    /// subtask and subscription (0: none held).
    pub oldest_unacked_ms: u64,
    /// Milliseconds since the publish time of the newest message held, the highest over
    /// every source subtask and subscription (0: none held).
    pub event_time_lag_ms: u64,
}

impl Totals {
    /// Reads the totals from the job's registry.
    pub fn read(metrics: &Metrics) -> Totals {
        Totals {
            received: metrics.total(MESSAGES_RECEIVED),
            written: metrics.total(ROWS_WRITTEN),
            pending_acks: metrics.gauge_total(src::PENDING_ACKS),
            held_bytes: metrics.gauge_total(src::BUFFERED_BYTES),
            epoch: metrics.gauge_total(LAST_COMPLETED_EPOCH),
            oldest_unacked_ms: metrics.gauge_max(src::OLDEST_UNACKED_MESSAGE_AGE_MS),
            event_time_lag_ms: metrics.gauge_max(src::EVENT_TIME_LAG_MS),
        }
    }
}

/// One progress report.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Messages received per second since the previous report.
    pub in_per_s: f64,
    /// Rows written per second since the previous report.
    pub out_per_s: f64,
    pub pending_acks: u64,
    pub held_bytes: u64,
    /// Since the publish time of the oldest message held (zero: none held).
    pub oldest_unacked: Duration,
    /// Since the publish time of the newest message held (zero: none held).
    pub event_time_lag: Duration,
    /// The last completed checkpoint and how long ago it was seen completing (`None`:
    /// it was restored, so when it completed is not known here).
    pub checkpoint: Option<(u64, Option<Duration>)>,
}

/// Turns successive totals into reports; time is passed in.
#[derive(Debug)]
pub struct Tracker {
    last: (Instant, Totals),
    /// The epoch last seen and when it first was (`None`: seen at the start).
    epoch: (u64, Option<Instant>),
}

impl Tracker {
    pub fn new(now: Instant, first: Totals) -> Tracker {
        Tracker {
            last: (now, first),
            epoch: (first.epoch, None),
        }
    }

    /// The report for `totals` read at `now`; rates are over the time since the last call.
    pub fn update(&mut self, now: Instant, totals: Totals) -> Report {
        let (then, prev) = self.last;
        let dt = now.saturating_duration_since(then);
        if totals.epoch != self.epoch.0 {
            self.epoch = (totals.epoch, Some(now));
        }
        self.last = (now, totals);
        Report {
            in_per_s: rate(prev.received, totals.received, dt),
            out_per_s: rate(prev.written, totals.written, dt),
            pending_acks: totals.pending_acks,
            held_bytes: totals.held_bytes,
            oldest_unacked: Duration::from_millis(totals.oldest_unacked_ms),
            event_time_lag: Duration::from_millis(totals.event_time_lag_ms),
            checkpoint: (totals.epoch > 0).then(|| {
                (
                    totals.epoch,
                    self.epoch.1.map(|at| now.saturating_duration_since(at)),
                )
            }),
        }
    }
}

/// Increase per second of a counter from `before` to `after` over `dt` (0 for no time).
pub fn rate(before: u64, after: u64, dt: Duration) -> f64 {
    let secs = dt.as_secs_f64();
    if secs <= 0.0 {
        return 0.0;
    }
    after.saturating_sub(before) as f64 / secs
}

/// `950`, `1.2k`, `3.4M` (per second values, rounded).
pub fn human_rate(per_s: f64) -> String {
    if per_s < 1000.0 {
        format!("{per_s:.0}")
    } else if per_s < 1_000_000.0 {
        format!("{:.1}k", per_s / 1000.0)
    } else {
        format!("{:.1}M", per_s / 1_000_000.0)
    }
}

/// `512 B`, `4.9 KiB`, `1.0 MiB`, `2.3 GiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `7s`, `2m05s`, `1h02m` (whole seconds, rounded down).
pub fn human_age(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in {} msg/s | out {} rows/s | pending acks {} ({}) | oldest unacked {}, event-time lag {} | ",
            human_rate(self.in_per_s),
            human_rate(self.out_per_s),
            self.pending_acks,
            human_bytes(self.held_bytes),
            human_age(self.oldest_unacked),
            human_age(self.event_time_lag),
        )?;
        match self.checkpoint {
            None => write!(f, "no checkpoint yet"),
            Some((epoch, None)) => write!(f, "checkpoint {epoch} (restored)"),
            Some((epoch, Some(age))) => write!(f, "checkpoint {epoch}, {} ago", human_age(age)),
        }
    }
}

/// Logs `report` as the plain (non-terminal) progress line, with its numbers as fields.
pub fn log(report: &Report) {
    let (epoch, age_s) = match report.checkpoint {
        Some((e, age)) => (Some(e), age.map(|a| a.as_secs())),
        None => (None, None),
    };
    tracing::info!(
        in_per_s = report.in_per_s.round() as u64,
        out_per_s = report.out_per_s.round() as u64,
        pending_acks = report.pending_acks,
        held_bytes = report.held_bytes,
        oldest_unacked_s = report.oldest_unacked.as_secs_f64(),
        event_time_lag_s = report.event_time_lag.as_secs_f64(),
        checkpoint = epoch,
        checkpoint_age_s = age_s,
        "progress: {report}"
    );
}

/// The running progress reporter; [`Progress::finish`] clears the terminal line.
pub struct Progress {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// Starts reporting the job's progress from `metrics`: a status line when stderr is a
    /// terminal, a log line every [`LOG_EVERY`] otherwise.
    pub fn start(metrics: Metrics) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = terminal.then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                None,
                indicatif::ProgressDrawTarget::stderr(),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg}").expect("valid template"),
            );
            *BAR.lock().expect("bar lock") = Some(bar.clone());
            bar
        });
        let every = if terminal { DRAW_EVERY } else { LOG_EVERY };
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut tracker = Tracker::new(Instant::now(), Totals::read(&metrics));
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tick.tick() => {}
                }
                let report = tracker.update(Instant::now(), Totals::read(&metrics));
                match &bar {
                    Some(bar) => {
                        bar.set_message(report.to_string());
                        bar.tick();
                    }
                    None => log(&report),
                }
            }
            if let Some(bar) = BAR.lock().expect("bar lock").take() {
                bar.finish_and_clear();
            }
        });
        Progress { stop, task }
    }

    /// Stops reporting and clears the terminal line (before the summary is printed).
    pub async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Where log lines go: stderr, above the status line while one is drawn.
pub struct LogWriter;

/// For `tracing_subscriber::fmt().with_writer(...)`.
pub fn log_writer() -> LogWriter {
    LogWriter
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The fmt layer writes each event with one `write_all`, so one suspend per line.
        let bar = BAR.lock().map(|b| b.clone()).unwrap_or(None);
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf))?,
            None => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(received: u64, written: u64, epoch: u64) -> Totals {
        Totals {
            received,
            written,
            pending_acks: 300,
            held_bytes: 5 * 1024 * 1024,
            epoch,
            oldest_unacked_ms: 0,
            event_time_lag_ms: 0,
        }
    }

    #[test]
    fn rates_are_per_second_over_the_interval() {
        assert_eq!(rate(100, 1100, Duration::from_secs(2)), 500.0);
        assert_eq!(rate(100, 100, Duration::from_secs(1)), 0.0);
        assert_eq!(rate(0, 10, Duration::ZERO), 0.0);
        // A counter never goes down; a lower value (a different registry) is no negative rate.
        assert_eq!(rate(10, 5, Duration::from_secs(1)), 0.0);
        assert_eq!(human_rate(950.4), "950");
        assert_eq!(human_rate(1234.0), "1.2k");
        assert_eq!(human_rate(3_400_000.0), "3.4M");
    }

    #[test]
    fn ages_and_bytes_read_naturally() {
        assert_eq!(human_age(Duration::from_millis(7900)), "7s");
        assert_eq!(human_age(Duration::from_secs(125)), "2m05s");
        assert_eq!(human_age(Duration::from_secs(3720)), "1h02m");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(5 * 1024 * 1024), "5.0 MiB");
    }

    #[test]
    fn the_checkpoint_age_runs_from_when_its_epoch_was_first_seen() {
        let t0 = Instant::now();
        let mut t = Tracker::new(t0, totals(0, 0, 0));
        let r = t.update(t0 + Duration::from_secs(10), totals(5000, 4000, 0));
        assert_eq!((r.in_per_s, r.out_per_s), (500.0, 400.0));
        assert_eq!(r.checkpoint, None);
        assert!(r.to_string().ends_with("no checkpoint yet"), "{r}");
        let r = t.update(t0 + Duration::from_secs(12), totals(5000, 5000, 3));
        assert_eq!(r.checkpoint, Some((3, Some(Duration::ZERO))));
        let r = t.update(t0 + Duration::from_secs(19), totals(5000, 5000, 3));
        assert_eq!(r.checkpoint, Some((3, Some(Duration::from_secs(7)))));
        assert_eq!(r.in_per_s, 0.0);
    }

    #[test]
    fn a_restored_checkpoint_has_no_age() {
        let t0 = Instant::now();
        let mut t = Tracker::new(t0, totals(0, 0, 41));
        let r = t.update(t0 + Duration::from_secs(1), totals(0, 0, 41));
        assert_eq!(r.checkpoint, Some((41, None)));
        assert!(r.to_string().ends_with("checkpoint 41 (restored)"), "{r}");
    }

    #[test]
    fn the_plain_line_carries_every_number() {
        let r = Report {
            in_per_s: 1234.0,
            out_per_s: 999.6,
            pending_acks: 300,
            held_bytes: 5 * 1024 * 1024,
            oldest_unacked: Duration::from_millis(12_900),
            event_time_lag: Duration::from_millis(400),
            checkpoint: Some((42, Some(Duration::from_secs(3)))),
        };
        assert_eq!(
            r.to_string(),
            "in 1.2k msg/s | out 1000 rows/s | pending acks 300 (5.0 MiB) | oldest unacked 12s, event-time lag 0s | checkpoint 42, 3s ago"
        );
    }
}
