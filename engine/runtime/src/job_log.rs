//! The leader's side of the job record (`state/job.rs`): marks a run as started before any
//! source is prepared, hands each source table its recorded start decision and a log to
//! record a new one, and marks the run clean once it stopped gracefully.

use std::sync::Arc;

use tokio::sync::Mutex;

use super::state::{CheckpointStore, JobRecord};
use pubsub_engine_spi::DecisionLog;

/// The job record of the running job (process 0 only).
pub(crate) struct JobLog {
    store: CheckpointStore,
    record: Arc<Mutex<JobRecord>>,
    /// The sources' redelivery horizon (their longest stream ack deadline).
    horizon: std::time::Duration,
    /// Until when a run before this one may still hold messages leased to it (see
    /// `JobRecord::leases_until_ms`).
    pub leases_until: Option<std::time::SystemTime>,
    /// The previous run stopped cleanly (after its final checkpoint), or there was none.
    pub previous_clean: bool,
}

impl JobLog {
    /// Reads the previous run's record and writes this run's (`clean_stop: false`),
    /// keeping the recorded start decisions. After an unclean stop the dead run's leases
    /// may last until now plus `horizon` (the sources' redelivery horizon): that instant
    /// is recorded, and kept by later starts until it has passed. Errors: the record
    /// cannot be read or written (the job must not start: a decision it takes could not
    /// be repeated); the record is another job's (a `ConfigError`).
    ///
    /// The dead run's horizon is the longer of this run's and the one the dead run
    /// recorded at its start: a run with a longer lease extension than this one's
    /// configuration holds its messages that much longer (issue 31, item 10).
    pub async fn start(
        store: CheckpointStore,
        job_id: &str,
        horizon: std::time::Duration,
    ) -> anyhow::Result<Self> {
        let previous = store.load_job_record().await?;
        if let Some(r) = previous.as_ref().filter(|r| r.job_id != job_id) {
            let e = super::state::another_jobs_state("job record", &store, &r.job_id, job_id);
            return Err(pubsub_engine_spi::ConfigError::wrap(e));
        }
        let now = super::control::now_ms();
        let horizon_ms = horizon.as_millis() as u64;
        let mut leases_until = previous.as_ref().and_then(|r| r.leases_until_ms);
        if let Some(r) = previous.as_ref().filter(|r| !r.clean_stop) {
            let dead = r.horizon_ms.unwrap_or(0).max(horizon_ms);
            let until = now + dead;
            leases_until = Some(leases_until.map_or(until, |u| u.max(until)));
        }
        let leases_until = leases_until.filter(|u| *u > now);
        let previous_clean = previous.as_ref().is_none_or(|r| r.clean_stop);
        let record = JobRecord {
            job_id: job_id.to_string(),
            started_at_ms: now,
            clean_stop: false,
            leases_until_ms: leases_until,
            horizon_ms: Some(horizon_ms),
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
            previous_clean,
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
        start_job(dir, "j", horizon_s).await.unwrap()
    }

    async fn start_job(
        dir: &tempfile::TempDir,
        job: &str,
        horizon_s: u64,
    ) -> anyhow::Result<JobLog> {
        let store = CheckpointStore::open(&dir.path().display().to_string(), true).await?;
        JobLog::start(store, job, Duration::from_secs(horizon_s)).await
    }

    fn left(log: &JobLog) -> Duration {
        log.leases_until
            .expect("leases")
            .duration_since(SystemTime::now())
            .unwrap()
    }

    /// Issue 31, item 10: a run that died with a 600 s horizon (a longer lease extension)
    /// is waited out for 600 s by a start configured for 60 s (it waited 60 s before).
    #[tokio::test]
    async fn a_dead_run_is_waited_out_by_its_own_longer_horizon() {
        let dir = tempfile::tempdir().unwrap();
        drop(start(&dir, 600).await); // dies
        let next = start(&dir, 60).await;
        assert!(left(&next) > Duration::from_secs(590), "{:?}", left(&next));
        // ... and a longer current horizon wins over a shorter recorded one.
        let dir2 = tempfile::tempdir().unwrap();
        drop(start(&dir2, 10).await);
        let next = start(&dir2, 300).await;
        assert!(left(&next) > Duration::from_secs(290), "{:?}", left(&next));
    }

    /// Issue 31, item 5: a job record of another job (a run that died before its first
    /// checkpoint) is refused, naming both jobs and the ways on, as a ConfigError.
    #[tokio::test]
    async fn another_jobs_record_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        start_job(&dir, "p1", 60).await.unwrap().mark_clean().await;
        let e = start_job(&dir, "p2", 60).await.err().expect("refused");
        assert!(pubsub_engine_spi::ConfigError::is_in(&e));
        let text = format!("{e:#}");
        for part in ["job 'p1'", "job 'p2'", "--state-dir", "--job-id p1"] {
            assert!(text.contains(part), "{part}: {text}");
        }
        // The refusal wrote nothing: the first job continues.
        let again = start_job(&dir, "p1", 60).await.unwrap();
        assert!(!again.first_run().await);
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
