//! The bookkeeping of network outages on one path of the pipeline (source, sink or
//! dead-letter queue): each path goes through its own TCP cutter in front of the
//! emulator's proxy, and overlapping outages on one cutter merge into one that ends when
//! the last one ends. Every outage's window is recorded, so the rules can tell which
//! outcome an outage explains (see `rules.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pubsub_emulator_tools::tcp_cutter::TcpCutter;
use tokio::sync::Mutex;

/// Which path of the pipeline an outage is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Source,
    Sink,
    DeadLetter,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Source => "source",
            Path::Sink => "sink",
            Path::DeadLetter => "dead-letter",
        }
    }
}

/// Outages in progress on one cutter: each cut (or stall) ends when its last one ends.
#[derive(Clone)]
pub struct Outages {
    pub path: Path,
    pub cutter: Arc<TcpCutter>,
    /// When the outage in progress ends, and whether it cut the port (a stall that
    /// overlaps a cut and ends last must still restore the port).
    until: Arc<Mutex<Option<(Instant, bool)>>>,
    /// When each outage really ended (the port bound again, the stall lifted): later
    /// than scheduled when the restore waits for the port or the harness is busy.
    ends: Arc<std::sync::Mutex<Vec<Instant>>>,
}

impl Outages {
    pub async fn start(path: Path, upstream: &str) -> anyhow::Result<Self> {
        Ok(Outages {
            path,
            cutter: Arc::new(TcpCutter::start(upstream).await?),
            until: Default::default(),
            ends: Default::default(),
        })
    }

    /// The endpoint the pipeline reaches this path through.
    pub fn endpoint(&self) -> String {
        self.cutter.endpoint()
    }

    /// Whether an outage is in progress.
    pub async fn active(&self) -> bool {
        self.until.lock().await.is_some()
    }

    /// Cuts (or stalls) for `for_`; the returned task ends the outage. Overlapping outages
    /// merge into one that ends when the last one ends; a cut during a stall is not
    /// applied (the stall already holds everything).
    pub async fn begin(&self, for_: Duration, stall: bool) -> tokio::task::JoinHandle<()> {
        let end = Instant::now() + for_;
        {
            let mut until = self.until.lock().await;
            let cut = match *until {
                None if stall => {
                    self.cutter.stall(true);
                    false
                }
                None => {
                    self.cutter.cut();
                    true
                }
                Some((_, cut)) => cut,
            };
            *until = Some((until.map_or(end, |(u, _)| u.max(end)), cut));
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(end.into()).await;
            let mut until = me.until.lock().await;
            if let Some((u, cut)) = *until {
                if u <= Instant::now() {
                    *until = None;
                    me.cutter.stall(false);
                    if cut {
                        if let Err(e) = me.cutter.restore().await {
                            tracing::error!("chaos: {e:#}");
                        }
                    }
                    let late = Instant::now().saturating_duration_since(u);
                    tracing::debug!(
                        "chaos: {} outage ended {late:?} after its schedule",
                        me.path.name()
                    );
                    me.ends.lock().expect("ends lock").push(Instant::now());
                }
            }
        })
    }

    /// Stalls until [`Outages::end`] (no cut may be in progress: wait for
    /// [`Outages::active`] to be false first).
    pub async fn hold(&self) {
        self.begin(Duration::from_secs(3600), true).await.abort();
    }

    /// Ends the stall [`Outages::hold`] began.
    pub async fn end(&self) {
        let mut until = self.until.lock().await;
        *until = None;
        self.cutter.stall(false);
        self.ends.lock().expect("ends lock").push(Instant::now());
    }

    /// When the outage in progress at `scheduled` (its scheduled end) really ended: the
    /// first end recorded at or after it (overlapping outages end together).
    pub fn ended_after(&self, scheduled: Instant) -> Option<Instant> {
        let ends = self.ends.lock().expect("ends lock");
        ends.iter().copied().filter(|e| *e >= scheduled).min()
    }
}

/// One outage as it happened, for the rules.
#[derive(Debug, Clone)]
pub struct Window {
    pub path: Path,
    pub from: Instant,
    pub to: Instant,
}

impl Window {
    /// Whether the outage was in progress at some instant of `[from, to]`.
    pub fn overlaps(&self, from: Instant, to: Instant) -> bool {
        self.from <= to && from <= self.to
    }
}
