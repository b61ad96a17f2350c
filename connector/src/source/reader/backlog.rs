//! The backlog bound of a subtask's watermark (issue 44; decision 0047): every split's
//! watermark stays behind its subscription's oldest unacknowledged message, as the probe
//! of [`crate::source::backlog`] reads it. The subtask that owns a subscription's first
//! split probes it in a task of its own and reports the reading as a shared bound; every
//! subtask reading the subscription reads that bound at each watermark advance.
//!
//! Only for a table a window reads (the watermark means nothing elsewhere). With
//! `scan.watermark.backlog-probe = 'off'`, or when the first probe is not permitted, the
//! owner WARNs once and reports "no bound": the newest-less-bound rule holds alone.

use pubsub_engine_spi::alignment::{BoundValue, SharedBound};
use pubsub_engine_spi::Counter;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::watermark::{Backlog, HeldBy};
use super::*;
use crate::source::backlog::{self as probe, ProbeError};

/// A probe failure is logged the first time and then once every this many in a row.
const WARN_EVERY: u64 = 30;

/// Probe snapshots whose delete failed, at most: no new probe while this many are left
/// (each probe would leave one more against the project's snapshot quota).
const MAX_LEFT: usize = 5;

/// The subtask's side of the backlog bounds of the subscriptions it reads.
pub(super) struct BacklogBounds {
    /// One per subscription it reads.
    reads: Vec<SharedBound>,
    /// The probes it runs (the subscriptions whose first split it owns).
    probes: Vec<JoinHandle<()>>,
    /// Tells the probes to stop.
    stop: watch::Sender<bool>,
    /// Gauge `watermark_held_by`, one series per rule.
    held_by: Vec<(HeldBy, Gauge)>,
}

/// What one probe task counts into.
struct ProbeMetrics {
    probes: Counter,
    failures: Counter,
    age_ms: Gauge,
}

/// What a probe task needs.
struct ProbeTask {
    admin: SubscriptionAdmin,
    project: String,
    subscription: String,
    interval: Duration,
    reporter: SharedBound,
    metrics: ProbeMetrics,
    stop: watch::Receiver<bool>,
}

impl BacklogBounds {
    /// The bound of every subscription the subtask reads: `Unknown` until a probe
    /// answered, `Unbounded` when every probe is off or not permitted.
    fn read(&mut self) -> Backlog {
        let mut out = Backlog::Unbounded;
        for b in &mut self.reads {
            out = match (out, b.get()) {
                (Backlog::Unknown, _) | (_, BoundValue::Unknown) => Backlog::Unknown,
                (o, BoundValue::Unbounded) => o,
                (Backlog::Unbounded, BoundValue::At(ns)) => Backlog::OldestUnacked(ns),
                (Backlog::OldestUnacked(a), BoundValue::At(ns)) => {
                    Backlog::OldestUnacked(a.min(ns))
                }
            };
        }
        out
    }

    /// Tells the probes to stop after the snapshot each is at.
    pub(super) fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Stops the probes, each finishing (and deleting) the snapshot it is at, within
    /// `budget` in all.
    pub(super) async fn close(&mut self, budget: Duration) {
        self.stop.send_replace(true);
        let all = futures::future::join_all(self.probes.drain(..));
        if tokio::time::timeout(budget, all).await.is_err() {
            tracing::warn!("a backlog probe did not stop within {budget:?}: its snapshot may be left, and the next run deletes it");
        }
    }
}

impl SourceReader {
    /// At start, for a table a window reads: joins the backlog bound of each subscription
    /// the subtask reads and starts the probes of those whose first split it owns.
    pub(super) fn start_backlog_bounds(&mut self, ctx: &SourceContext, admin: &SubscriptionAdmin) {
        if !self.op.drop_replays {
            return;
        }
        let c = self.options.config();
        let (on, interval) = (
            c.watermark_backlog_probe,
            Duration::from_millis(c.watermark_backlog_probe_interval_ms),
        );
        let held_by = HeldBy::ALL
            .iter()
            .map(|r| {
                let g = ctx.metrics.labelled_gauge(
                    WATERMARK_HELD_BY,
                    &ctx.task_info.operator_id,
                    ctx.task_info.task_index,
                    ("rule", r.label()),
                );
                (*r, g)
            })
            .collect();
        let (stop, stop_rx) = watch::channel(false);
        let mut bounds = BacklogBounds {
            reads: Vec::new(),
            probes: Vec::new(),
            stop,
            held_by,
        };
        // Every subscription of the table, not only those of this subtask's splits: a
        // subtask turns idle when its own splits are quiet, and the windows then follow
        // the others alone, so each must hold behind every subscription's backlog (a
        // table of `a;b` whose subtask 1 reads `b` alone must not pass a message of `a`
        // that another consumer holds).
        for (i, sub) in self.config.subscriptions.iter().enumerate() {
            let subscription = client::subscription_path(&self.profile.project, &sub.id);
            // The split with the subscription's own index is its first: its owner probes.
            let owner = self.splits.iter().any(|s| s.index == i);
            if !on {
                if owner {
                    tracing::warn!(
                        subscription = %subscription,
                        "'{}' = 'off': the watermark follows the newest event time less the out-of-orderness alone; a message redelivered or held by another consumer longer than that is late for its window (counted 'rows late', not in the results)",
                        pubsub_table_options::WATERMARK_BACKLOG_PROBE
                    );
                }
                continue;
            }
            bounds
                .reads
                .push(ctx.join_shared_bound(&subscription, false));
            if !owner {
                continue;
            }
            let task = ProbeTask {
                admin: admin.clone(),
                project: self.profile.project.clone(),
                subscription: subscription.clone(),
                interval,
                reporter: ctx.join_shared_bound(&subscription, true),
                metrics: ProbeMetrics {
                    probes: ctx.counter(BACKLOG_PROBES),
                    failures: ctx.counter(BACKLOG_PROBE_FAILURES),
                    age_ms: metrics::subscription_gauge(
                        ctx,
                        BACKLOG_OLDEST_UNACKED_AGE_MS,
                        &subscription,
                    ),
                },
                stop: stop_rx.clone(),
            };
            bounds.probes.push(tokio::spawn(task.run()));
        }
        // Unknown from the start (with the probe on): a barrier before the first advance
        // must not checkpoint a watermark set by the newest rule alone.
        if let Some(w) = self.watermarks.as_mut() {
            w.set_backlog(bounds.read());
        }
        self.backlog = Some(bounds);
    }

    /// At a watermark advance: the bound the subscriptions' probes allow now.
    pub(super) fn backlog_now(&mut self) -> Option<Backlog> {
        self.backlog.as_mut().map(BacklogBounds::read)
    }

    /// Sets gauge `watermark_held_by`.
    pub(super) fn set_held_by(&self, held: HeldBy) {
        if let Some(b) = &self.backlog {
            for (rule, g) in &b.held_by {
                g.set(u64::from(*rule == held));
            }
        }
    }
}

impl ProbeTask {
    /// Deletes what a crashed run left, then probes every interval until stopped. The
    /// first probe refused for permission, and any snapshot the credentials may create
    /// but not delete, turn the bound off for the job (one WARN); any other failure
    /// leaves the last reading in place (the watermark holds there). Snapshots whose
    /// delete failed are retried before each probe; while [`MAX_LEFT`] of them are left,
    /// no new one is created (the bound holds).
    async fn run(mut self) {
        let sub = self.subscription.clone();
        let stale = probe::delete_stale(&self.admin, &self.project, &sub).await;
        if stale > 0 {
            tracing::info!(subscription = %sub, "deleted {stale} backlog probe snapshots an earlier run left");
        }
        let mut left: Vec<String> = Vec::new();
        let (mut answered, mut failed) = (false, 0u64);
        loop {
            let mut still = Vec::new();
            for name in left.drain(..) {
                if probe::delete(&self.admin, &name).await.is_err() {
                    still.push(name);
                }
            }
            left = still;
            let outcome = if left.len() >= MAX_LEFT {
                Err((
                    ProbeError::Failed(format!(
                        "{} probe snapshots could not be deleted yet ({}, ...); no new one until they are",
                        left.len(),
                        left[0]
                    )),
                    None,
                ))
            } else {
                let name = probe::snapshot_name(&self.project, &sub, probe::unix_ms());
                probe::probe(&self.admin, &sub, &name)
                    .await
                    .map(|p| (p, name))
            };
            match outcome {
                Ok((p, name)) => {
                    self.reporter.report_at(p.oldest_unacked_ns);
                    self.metrics.probes.add(1);
                    let raw_ms = p
                        .oldest_unacked_ns
                        .saturating_add(probe::RESOLUTION_MARGIN.as_nanos() as i64)
                        / 1_000_000;
                    let age = (probe::unix_ms() as i64).saturating_sub(raw_ms).max(0);
                    self.metrics.age_ms.set(age as u64);
                    if failed > 0 {
                        tracing::info!(subscription = %sub, "the backlog probe answers again after {failed} failures");
                    }
                    (answered, failed) = (true, 0);
                    match p.left {
                        None => {}
                        Some(ProbeError::NotPermitted(e)) => {
                            self.not_permitted(&e);
                            return;
                        }
                        Some(ProbeError::Failed(e)) => {
                            tracing::warn!(subscription = %sub, "{e}: retried before the next probe");
                            left.push(name);
                        }
                    }
                }
                Err((ProbeError::NotPermitted(e), l)) if !answered => {
                    left.extend(l);
                    self.not_permitted(&e);
                    for name in left {
                        let _ = probe::delete(&self.admin, &name).await;
                    }
                    return;
                }
                Err((e, l)) => {
                    left.extend(l);
                    failed += 1;
                    self.metrics.failures.add(1);
                    if failed == 1 || failed % WARN_EVERY == 0 {
                        tracing::warn!(
                            subscription = %sub,
                            "backlog probe failed ({failed} in a row): {e}; the watermark stays at its last safe value until a probe answers"
                        );
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = self.stop.changed() => break,
            }
        }
        for name in left {
            if let Err(e) = probe::delete(&self.admin, &name).await {
                tracing::warn!("{e} (the next run deletes it; Pub/Sub within 7 days)");
            }
        }
    }

    /// The credentials may not create or delete probe snapshots: one WARN, and the bound
    /// is off for the job (the newest rule holds alone).
    fn not_permitted(&self, e: &str) {
        tracing::warn!(
            subscription = %self.subscription,
            "the backlog probe is not permitted ({e}); it needs {}. The watermark follows the newest event time less the out-of-orderness alone: a message redelivered or held by another consumer longer than that is late for its window (counted 'rows late', not in the results). Grant the permissions, or set '{}' = 'off' to say so",
            probe::PERMISSION,
            pubsub_table_options::WATERMARK_BACKLOG_PROBE
        );
        self.reporter.report_unbounded();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe that never answers (nothing listens at its endpoint) reports nothing: the
    /// bound stays unknown, so no watermark moves on a guess, and every failure counts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_probe_that_keeps_failing_leaves_the_bound_unknown_and_counts_each_failure() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let profile = client::emulator_profile("p", &format!("127.0.0.1:{port}"));
        let admin = client::subscription_admin(&profile).await.unwrap();
        let (reporter, mut reader) = SharedBound::standalone("projects/p/subscriptions/s");
        let (stop, stop_rx) = watch::channel(false);
        let (probes, failures) = (Counter::default(), Counter::default());
        let task = ProbeTask {
            admin,
            project: "p".into(),
            subscription: "projects/p/subscriptions/s".into(),
            interval: Duration::from_millis(100),
            reporter,
            metrics: ProbeMetrics {
                probes: probes.clone(),
                failures: failures.clone(),
                age_ms: Gauge::default(),
            },
            stop: stop_rx,
        };
        let handle = tokio::spawn(task.run());
        let started = std::time::Instant::now();
        while failures.get() < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "two probes failed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(reader.get(), BoundValue::Unknown);
        assert_eq!(probes.get(), 0);
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(60), handle)
            .await
            .expect("the probe stops when told")
            .unwrap();
    }
}
