//! The leader's side of the job record (`state/job.rs`): marks a run as started before any
//! source is prepared, hands each source table its recorded start decision and a log to
//! record a new one, and marks the run clean once it stopped gracefully.

use std::sync::Arc;

use tokio::sync::Mutex;

use super::state::{CheckpointStore, JobRecord};
use crate::spi::DecisionLog;

/// The job record of the running job (process 0 only).
pub(crate) struct JobLog {
    store: CheckpointStore,
    record: Arc<Mutex<JobRecord>>,
    /// The sources' redelivery horizon (their longest stream ack deadline).
    horizon: std::time::Duration,
    /// Until when a run before this one may still hold messages leased to it (see
    /// `JobRecord::leases_until_ms`).
    pub leases_until: Option<std::time::SystemTime>,
}

impl JobLog {
    /// Reads the previous run's record and writes this run's (`clean_stop: false`),
    /// keeping the recorded start decisions. After an unclean stop the dead run's leases
    /// may last until now plus `horizon` (the sources' redelivery horizon): that instant
    /// is recorded, and kept by later starts until it has passed. Errors: the record
    /// cannot be read or written (the job must not start: a decision it takes could not
    /// be repeated).
    pub async fn start(
        store: CheckpointStore,
        job_id: &str,
        horizon: std::time::Duration,
    ) -> anyhow::Result<Self> {
        let previous = store.load_job_record().await?;
        let now = super::control::now_ms();
        let mut leases_until = previous.as_ref().and_then(|r| r.leases_until_ms);
        if previous.as_ref().is_some_and(|r| !r.clean_stop) {
            let until = now + horizon.as_millis() as u64;
            leases_until = Some(leases_until.map_or(until, |u| u.max(until)));
        }
        let leases_until = leases_until.filter(|u| *u > now);
        let record = JobRecord {
            job_id: job_id.to_string(),
            started_at_ms: now,
            clean_stop: false,
            leases_until_ms: leases_until,
            runs: previous.as_ref().map_or(1, |r| r.runs.max(1) + 1),
            start_decisions: previous.map(|r| r.start_decisions).unwrap_or_default(),
        };
        store.write_job_record(&record).await?;
        Ok(JobLog {
            store,
            record: Arc::new(Mutex::new(record)),
            horizon,
            leases_until: leases_until
                .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
        })
    }

    /// Whether this is the job's first run (no earlier start recorded).
    pub async fn first_run(&self) -> bool {
        self.record.lock().await.runs <= 1
    }

    /// The decision recorded for operator `operator_id` by this or an earlier start.
    pub async fn recorded(&self, operator_id: &str) -> Option<serde_json::Value> {
        self.record
            .lock()
            .await
            .start_decisions
            .get(operator_id)
            .cloned()
    }

    /// A log that durably replaces operator `operator_id`'s decision.
    pub fn decision_log(&self, operator_id: &str) -> DecisionLog {
        let (store, record, id) = (
            self.store.clone(),
            self.record.clone(),
            operator_id.to_string(),
        );
        DecisionLog::new(move |decision| {
            let (store, record, id) = (store.clone(), record.clone(), id.clone());
            Box::pin(async move {
                let mut r = record.lock().await;
                let mut next = r.clone();
                next.start_decisions.insert(id, decision);
                store.write_job_record(&next).await?;
                *r = next;
                Ok(())
            })
        })
    }

    /// Records that this run stopped gracefully, and that its closed streams may still
    /// hold messages leased until now plus the horizon: what the service sent on a stream
    /// after its last read (at the stop, or into a connection a network cut broke, which
    /// the client reconnects silently) is redelivered only then, and acknowledgements
    /// lost in a cut are not retried by the client (found by the fault campaign, seeds 6
    /// and 22). A failure only warns: the next run then waits out the leases it believes
    /// a dead run left, which delays an idle stop only.
    pub async fn mark_clean(&self) {
        let mut r = self.record.lock().await;
        let mut next = r.clone();
        next.clean_stop = true;
        let until = super::control::now_ms() + self.horizon.as_millis() as u64;
        next.leases_until_ms = Some(next.leases_until_ms.map_or(until, |u| u.max(until)));
        match self.store.write_job_record(&next).await {
            Ok(()) => *r = next,
            Err(e) => tracing::warn!("{e:#}: the next run will treat this one as unclean"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    async fn start(dir: &tempfile::TempDir, horizon_s: u64) -> JobLog {
        let store = CheckpointStore::open(&dir.path().display().to_string(), true)
            .await
            .unwrap();
        JobLog::start(store, "j", Duration::from_secs(horizon_s))
            .await
            .unwrap()
    }

    /// Issue 16, finding 15: a clean stop between an unclean one and a later start must
    /// not hide the dead run's leases from that start (found by the fault campaign: a
    /// cluster restarted after a SIGKILL, stopped cleanly, and the next run exited 0
    /// while the killed process's messages were still leased).
    #[tokio::test]
    async fn a_dead_runs_leases_outlive_a_clean_stop_in_between() {
        let dir = tempfile::tempdir().unwrap();
        let first = start(&dir, 60).await;
        assert_eq!(first.leases_until, None, "a new location holds no leases");
        assert!(first.first_run().await);
        drop(first); // dies: never marked clean
        let second = start(&dir, 60).await;
        assert!(
            !second.first_run().await,
            "a second start, even without a checkpoint"
        );
        let until = second.leases_until.expect("the dead run's leases");
        let left = until.duration_since(SystemTime::now()).unwrap();
        assert!(
            left > Duration::from_secs(50) && left <= Duration::from_secs(60),
            "{left:?}"
        );
        second.mark_clean().await;
        drop(second);
        let third = start(&dir, 60).await;
        assert!(
            third.leases_until >= Some(until),
            "carried across the clean stop"
        );
        third.mark_clean().await;
        drop(third);
        // A clean stop leaves its own streams' horizon: what the service sent on them
        // after their last read.
        let dir3 = tempfile::tempdir().unwrap();
        let clean = start(&dir3, 10).await;
        clean.mark_clean().await;
        drop(clean);
        let next = start(&dir3, 10).await;
        let left = next
            .leases_until
            .expect("a clean stop's stream horizon")
            .duration_since(SystemTime::now())
            .unwrap();
        assert!(
            left > Duration::from_secs(5) && left <= Duration::from_secs(10),
            "{left:?}"
        );
        // Once passed, it is dropped.
        let dir2 = tempfile::tempdir().unwrap();
        start(&dir2, 0).await.mark_clean().await;
        let after = start(&dir2, 0).await;
        assert_eq!(
            after.leases_until, None,
            "a zero horizon has passed at once"
        );
    }
}
