//! The job record (`job.json` beside the checkpoints): what a start must know about the
//! runs before it that no completed checkpoint tells (issue 16, findings 1 and 15).
//!
//! - **Start decisions.** A connector's first-start decision (e.g. the instant `latest`
//!   seeks to) is written here *before* it acts on it, so a run that dies before its first
//!   checkpoint completes is restarted with the same decision, not a new one (a new
//!   `latest` instant would acknowledge everything published in between).
//! - **Clean stop.** The leader writes `clean_stop: false` when a run starts and `true`
//!   when it stopped gracefully. A start that finds `false` follows an unclean stop: the
//!   messages the dead run held stay leased to it at the server until their leases run
//!   out, so `--stop-when-idle` must not take the quiet for "caught up" before then.
//!
//! Written only by the checkpoint writer (process 0): locally by temp file, fsync and
//! rename; in an object store by one PUT.

use std::collections::BTreeMap;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::{blocking, Backend, CheckpointStore};

/// The object or file name of the job record, beside the checkpoints.
pub(super) const FILE: &str = "job.json";

/// What the state location records about the job's runs (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job that wrote it (`RuntimeConfig.job_id`).
    pub job_id: String,
    /// When the latest run started, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// `true` once the latest run stopped gracefully (final checkpoint committed, every
    /// other held message released); `false` while it runs and after it died or aborted.
    pub clean_stop: bool,
    /// Until when (ms since the Unix epoch) messages may still be leased to an earlier
    /// run: set by the first start after a run that did not stop cleanly (its start plus
    /// the sources' redelivery horizon) and by every clean stop (the stop plus that
    /// horizon: what its closed streams were still sent, and acks lost in a cut), and
    /// carried by every later start until it has passed.
    #[serde(default)]
    pub leases_until_ms: Option<u64>,
    /// The latest run's redelivery horizon in ms (its sources' longest stream ack
    /// deadline), recorded at its start: a start after it died waits out the longer of
    /// this and its own. Absent in records written before issue 31.
    #[serde(default)]
    pub horizon_ms: Option<u64>,
    /// Operator id (`source-{table}`) -> the decision its connector recorded before acting
    /// on it at a start that no completed checkpoint covers yet (opaque to the engine).
    #[serde(default)]
    pub start_decisions: BTreeMap<String, serde_json::Value>,
    /// How many runs of the job have started, the latest included (a record written before
    /// this count existed reads as 0 and counts as one earlier run).
    #[serde(default)]
    pub runs: u64,
}

impl CheckpointStore {
    /// The job record, or `None` when this location has none (a new location, or one
    /// written before records existed). A corrupt record is an error naming it: ignoring
    /// it would re-take a first-start decision.
    pub async fn load_job_record(&self) -> anyhow::Result<Option<JobRecord>> {
        let bytes = match &self.backend {
            Backend::Dir(dir) => {
                let dir = dir.clone();
                blocking(move || dir.read(FILE)).await?
            }
            Backend::Objects(objects) => objects.read(FILE).await?,
        };
        bytes
            .map(|b| {
                serde_json::from_slice(&b)
                    .with_context(|| format!("job record {FILE} in {} is corrupt", self.describe))
            })
            .transpose()
    }

    /// Replaces the job record durably (see the module docs). Errors: a store opened
    /// read-only; a failed write, naming the location.
    pub async fn write_job_record(&self, record: &JobRecord) -> anyhow::Result<()> {
        if !self.writer {
            anyhow::bail!(
                "the job record was not written: the checkpoint store {} was opened read-only",
                self.describe
            );
        }
        let bytes = serde_json::to_vec_pretty(record)?;
        match &self.backend {
            Backend::Dir(dir) => {
                let dir = dir.clone();
                blocking(move || dir.replace(FILE, &bytes)).await
            }
            Backend::Objects(objects) => objects.replace(FILE, bytes).await,
        }
        .with_context(|| format!("cannot write the job record in {}", self.describe))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> JobRecord {
        JobRecord {
            job_id: "j".into(),
            started_at_ms: 5,
            clean_stop: false,
            leases_until_ms: Some(9),
            horizon_ms: Some(60_000),
            runs: 3,
            start_decisions: BTreeMap::from([(
                "source-t".to_string(),
                serde_json::json!({"mode": "latest", "seeks": {"projects/p/subscriptions/s": 42}}),
            )]),
        }
    }

    #[tokio::test]
    async fn job_record_round_trips_in_a_directory_and_an_object_store() {
        let dir = tempfile::tempdir().unwrap();
        let objects = tempfile::tempdir().unwrap();
        for location in [
            dir.path().display().to_string(),
            format!("file://{}", objects.path().display()),
        ] {
            let store = CheckpointStore::open(&location, true).await.unwrap();
            assert_eq!(store.load_job_record().await.unwrap(), None, "{location}");
            store.write_job_record(&record()).await.unwrap();
            let reader = CheckpointStore::open(&location, false).await.unwrap();
            assert_eq!(reader.load_job_record().await.unwrap(), Some(record()));
            let e = reader.write_job_record(&record()).await.unwrap_err();
            assert!(e.to_string().contains("read-only"), "{e}");
            // A checkpoint beside it is unaffected, and the reverse.
            store.write(&super::super::tests::meta(3)).await.unwrap();
            assert_eq!(store.load_job_record().await.unwrap(), Some(record()));
            assert_eq!(store.load().await.unwrap().unwrap().epoch, 3);
        }
        std::fs::write(dir.path().join(FILE), b"{").unwrap();
        let e = CheckpointStore::open(&dir.path().display().to_string(), false)
            .await
            .unwrap()
            .load_job_record()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("corrupt"), "{e}");
    }
}
