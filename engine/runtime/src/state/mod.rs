//! Durable checkpoint metadata (SPEC 2.1: "its metadata is written durably ... then
//! `Commit` reaches every source"): where the last completed checkpoint is kept so that a
//! restart, of one process or of a whole cluster, continues above it.
//!
//! Two layouts, chosen by the `--state-dir` value (see `docs/decisions/0006-checkpoint-store.md`):
//! - a plain path: a local directory with one `checkpoint.json`, replaced by temp file,
//!   fsync, rename and directory fsync, locked by the writing process ([`local`]);
//! - an object-store URL (`file://`, `s3://`, `gs://`, `az://`): one object per checkpoint
//!   and a pointer object `latest` naming the current one ([`object`]), reachable by every
//!   process of a cluster.

mod job;
mod layout;
mod local;
mod location;
mod object;

pub use job::JobRecord;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use pubsub_engine_spi::OperatorState;

/// What a completed checkpoint records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// File format version.
    pub version: u32,
    pub job_id: String,
    /// The completed epoch; a restore continues at `epoch + 1`.
    pub epoch: u64,
    /// Milliseconds since the Unix epoch when the checkpoint completed.
    pub completed_at_ms: u64,
    /// Operator id -> subtask index -> state.
    pub operators: BTreeMap<String, BTreeMap<usize, OperatorState>>,
}

/// Where completed checkpoints are kept: a local state directory or an object store.
/// Cheap to clone (clones share the directory lock and the store's client); `Send + Sync`.
#[derive(Clone)]
pub struct CheckpointStore {
    backend: Backend,
    /// `false`: `write` is refused.
    writer: bool,
    /// The location with credentials and query values hidden ([`pubsub_engine_spi::redact_url`]).
    describe: String,
}

#[derive(Debug, Clone)]
enum Backend {
    Dir(local::LocalDir),
    Objects(object::ObjectCheckpoints),
}

impl std::fmt::Debug for CheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointStore")
            .field("location", &self.describe)
            .field("writer", &self.writer)
            .finish()
    }
}

/// Runs blocking file I/O off the async workers when inside a Tokio runtime (inline
/// otherwise), so an fsync does not stall the tasks sharing the worker.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => match handle.spawn_blocking(f).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(anyhow::anyhow!("checkpoint file I/O was cancelled: {e}")),
        },
        Err(_) => f(),
    }
}

/// The refusal of a state location written by job `theirs` to job `ours` (`what`:
/// "checkpoint" or "job record"): a job never restores another's state, which would carry
/// its positions, deduplicated ids and lease horizon into this one (issue 31, item 5).
pub(crate) fn another_jobs_state(
    what: &str,
    store: &CheckpointStore,
    theirs: &str,
    ours: &str,
) -> anyhow::Error {
    anyhow::anyhow!(
        "the {what} in {} was written by job '{theirs}', and this is job '{ours}': a job never restores another job's state. Give this job a --state-dir of its own (by default each pipeline has one: state/JOB_ID), pass --job-id {theirs} to continue that job, or remove the location to start it anew",
        store.describe()
    )
}

impl CheckpointStore {
    /// Opens the checkpoint location given as `--state-dir`.
    ///
    /// - A plain path (anything not starting with `scheme:/`): the local state directory,
    ///   unchanged on disk (`DIR/checkpoint.json`, so existing state directories restore).
    ///   With `writer` it is created if missing and locked (`DIR/lock`, holding the pid): a
    ///   directory locked by another process is refused naming that pid. Without `writer`
    ///   no lock is taken and nothing is created (a missing directory holds no checkpoint).
    /// - A URL: an object store, as object_store's `parse_url_opts` reads it: `file:///abs/path`
    ///   (local files, every write fsynced), `s3://bucket/prefix` (also `s3a://` and
    ///   `https://…amazonaws.com/…`), `gs://bucket/prefix`, `az://container/prefix` (also
    ///   `adl`, `azure`, `abfs[s]` and `https://….blob.core.windows.net/…`). Credentials and
    ///   settings come from the environment as each builder's `from_env` reads them
    ///   (`AWS_*`, `GOOGLE_*` incl. `GOOGLE_APPLICATION_CREDENTIALS`, `AZURE_*`); without
    ///   any, the cloud's instance metadata / default credentials are used at the first
    ///   request. Object stores have no lock: make sure one process writes (process 0 of a
    ///   cluster). No request is made here: an unreachable store or bad credentials fail
    ///   the first [`load`](Self::load).
    ///
    /// `writer == false` opens read-only: [`write`](Self::write) is refused (processes of a
    /// cluster other than process 0 only restore).
    ///
    /// A directory that cannot be created, or is locked by another process, is an error
    /// naming the directory. A URL that cannot be used is an error naming the option and the
    /// location (credentials removed), e.g.
    /// `--state-dir 'ftp://x': unsupported URL scheme 'ftp' (use a directory, file://, s3://, gs:// or az://)`;
    /// also for a malformed URL, a `memory://` or plain `http(s)://` URL, and a builder that
    /// refuses its settings (e.g. `az://` without `AZURE_STORAGE_ACCOUNT_NAME`).
    pub async fn open(location: &str, writer: bool) -> anyhow::Result<Self> {
        match location::parse(location)? {
            location::Location::Dir(dir) => {
                let dir = blocking(move || local::LocalDir::open(&dir, writer)).await?;
                Ok(CheckpointStore {
                    backend: Backend::Dir(dir),
                    writer,
                    describe: location.to_string(),
                })
            }
            location::Location::Store {
                store,
                prefix,
                describe,
            } => Ok(CheckpointStore {
                backend: Backend::Objects(object::ObjectCheckpoints::new(
                    store,
                    prefix,
                    describe.clone(),
                )),
                writer,
                describe,
            }),
        }
    }

    /// For tests and embedders: checkpoints in an object store you built (e.g.
    /// `object_store::memory::InMemory`, or a builder with explicit credentials) under
    /// `prefix` (`/`-separated; empty for the root), with the pointer protocol of
    /// [`write`](Self::write). Opened as a writer. `describe` names the location in logs
    /// and errors (credentials and query values are hidden if it is a URL, as
    /// [`pubsub_engine_spi::redact_url`] does).
    pub fn from_object_store(
        store: Arc<dyn object_store::ObjectStore>,
        prefix: &str,
        describe: &str,
    ) -> Self {
        let prefix: object_store::path::Path =
            prefix.split('/').filter(|part| !part.is_empty()).collect();
        let describe = pubsub_engine_spi::redact_url(describe);
        CheckpointStore {
            backend: Backend::Objects(object::ObjectCheckpoints::new(
                store,
                prefix,
                describe.clone(),
            )),
            writer: true,
            describe,
        }
    }

    /// The newest complete checkpoint, or `None` when there is none (no `checkpoint.json`;
    /// no pointer object `latest`).
    ///
    /// Errors (never ignored: starting over would lose the epoch sequence and re-run
    /// seeks): a corrupt `checkpoint.json`; a corrupt pointer; a pointer naming a missing or
    /// corrupt checkpoint object or one of another epoch; a failed read. Each names the file
    /// or object. A location holding the other layout (a directory written through a
    /// `file://` URL opened as a path, or the reverse) is also an error, saying which value
    /// to pass instead.
    pub async fn load(&self) -> anyhow::Result<Option<CheckpointMetadata>> {
        match &self.backend {
            Backend::Dir(dir) => {
                let dir = dir.clone();
                blocking(move || dir.load()).await
            }
            Backend::Objects(objects) => objects.load().await,
        }
    }

    /// Makes `meta` the current checkpoint, durably and atomically: when this returns `Ok`
    /// a restart loads `meta`; when it fails or the process dies during it, a restart loads
    /// `meta` or the previous checkpoint, never a mix or nothing.
    ///
    /// - Local directory: temp file, fsync, rename over `checkpoint.json`, directory fsync.
    /// - Object store: PUT `checkpoints/{epoch:020}.json`, then PUT the pointer `latest`
    ///   (JSON: `version`, `epoch`, `checkpoint` = the object's path relative to the
    ///   prefix); a crash between the two leaves the previous checkpoint current, and the
    ///   next write of that epoch overwrites the orphan. Then checkpoint objects older than
    ///   the previous one are deleted (two are kept, so a reader one checkpoint behind still
    ///   finds its object); a failed list or delete only logs a warning. Each PUT is
    ///   retried by object_store's client (by default up to 10 times within 3 minutes), so
    ///   a write can take that long before it fails.
    ///
    /// Errors: a store opened with `writer == false`; any failed write, naming the file or
    /// object.
    pub async fn write(&self, meta: &CheckpointMetadata) -> anyhow::Result<()> {
        if !self.writer {
            anyhow::bail!(
                "checkpoint {} was not written: the checkpoint store {} was opened read-only (in a cluster only process 0 writes checkpoints)",
                meta.epoch,
                self.describe
            );
        }
        match &self.backend {
            Backend::Dir(dir) => {
                let dir = dir.clone();
                let meta = meta.clone();
                blocking(move || dir.write(&meta)).await
            }
            Backend::Objects(objects) => objects.write(meta).await,
        }
    }

    /// The location for logs and errors: a path as given, a URL with its credentials and
    /// query values hidden ([`pubsub_engine_spi::redact_url`]; never log secrets).
    pub fn describe(&self) -> String {
        self.describe.clone()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Checkpoint metadata of `epoch` with one operator's state.
    pub(crate) fn meta(epoch: u64) -> CheckpointMetadata {
        let mut st = OperatorState::default();
        st.values.insert("k".into(), serde_json::json!(epoch));
        CheckpointMetadata {
            version: 1,
            job_id: "j".into(),
            epoch,
            completed_at_ms: 1,
            operators: BTreeMap::from([("q0-source".to_string(), BTreeMap::from([(0usize, st)]))]),
        }
    }

    fn path(dir: &tempfile::TempDir) -> String {
        dir.path().display().to_string()
    }

    fn file_url(dir: &tempfile::TempDir) -> String {
        format!("file://{}", dir.path().display())
    }

    #[tokio::test]
    async fn write_then_load() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(&path(&dir), true).await.unwrap();
        assert!(store.load().await.unwrap().is_none());
        store.write(&meta(7)).await.unwrap();
        assert_eq!(store.load().await.unwrap().unwrap(), meta(7));
        // The on-disk format is the one of every release so far.
        let on_disk: CheckpointMetadata =
            serde_json::from_slice(&std::fs::read(dir.path().join("checkpoint.json")).unwrap())
                .unwrap();
        assert_eq!(on_disk, meta(7));
        std::fs::write(dir.path().join("checkpoint.json"), b"{").unwrap();
        assert!(store
            .load()
            .await
            .unwrap_err()
            .to_string()
            .contains("corrupt"));
    }

    #[tokio::test]
    async fn a_second_open_of_a_locked_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = CheckpointStore::open(&path(&dir), true).await.unwrap();
        let e = CheckpointStore::open(&path(&dir), true)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("in use by another") && e.contains(&std::process::id().to_string()),
            "{e}"
        );
        drop(first);
        CheckpointStore::open(&path(&dir), true).await.unwrap();
    }

    #[tokio::test]
    async fn state_a_read_only_open_of_a_locked_directory_restores_and_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let writer = CheckpointStore::open(&path(&dir), true).await.unwrap();
        writer.write(&meta(3)).await.unwrap();
        let reader = CheckpointStore::open(&path(&dir), false).await.unwrap();
        assert_eq!(reader.load().await.unwrap(), Some(meta(3)));
        let e = reader.write(&meta(4)).await.unwrap_err().to_string();
        assert!(e.contains("read-only") && e.contains(&path(&dir)), "{e}");
        assert_eq!(writer.load().await.unwrap(), Some(meta(3)));
        // A reader creates nothing: a missing directory holds no checkpoint.
        let missing = dir.path().join("missing").display().to_string();
        let reader = CheckpointStore::open(&missing, false).await.unwrap();
        assert_eq!(reader.load().await.unwrap(), None);
        assert!(!dir.path().join("missing").exists());
    }

    #[tokio::test]
    async fn state_file_url_write_then_load_from_a_read_only_store() {
        let dir = tempfile::tempdir().unwrap();
        let url = file_url(&dir);
        let writer = CheckpointStore::open(&url, true).await.unwrap();
        assert_eq!(writer.load().await.unwrap(), None);
        for epoch in 1..=3 {
            writer.write(&meta(epoch)).await.unwrap();
        }
        let reader = CheckpointStore::open(&url, false).await.unwrap();
        assert_eq!(reader.load().await.unwrap(), Some(meta(3)));
        let e = reader.write(&meta(4)).await.unwrap_err().to_string();
        assert!(e.contains("read-only") && e.contains(&url), "{e}");
        // The object layout on disk: the pointer and the two newest checkpoints.
        assert!(dir.path().join("latest").is_file());
        let mut objects: Vec<String> = std::fs::read_dir(dir.path().join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        objects.sort();
        assert_eq!(
            objects,
            ["00000000000000000002.json", "00000000000000000003.json"]
        );
        assert_eq!(writer.describe(), url);
    }

    #[tokio::test]
    async fn state_a_location_holding_the_other_layout_is_refused_not_started_over() {
        let dir = tempfile::tempdir().unwrap();
        CheckpointStore::open(&path(&dir), true)
            .await
            .unwrap()
            .write(&meta(5))
            .await
            .unwrap();
        let e = format!(
            "{:#}",
            CheckpointStore::open(&file_url(&dir), false)
                .await
                .unwrap()
                .load()
                .await
                .unwrap_err()
        );
        assert!(
            e.contains("checkpoint.json") && e.contains("directory path"),
            "{e}"
        );

        let objects = tempfile::tempdir().unwrap();
        CheckpointStore::open(&file_url(&objects), true)
            .await
            .unwrap()
            .write(&meta(5))
            .await
            .unwrap();
        let e = format!(
            "{:#}",
            CheckpointStore::open(&path(&objects), false)
                .await
                .unwrap()
                .load()
                .await
                .unwrap_err()
        );
        assert!(e.contains(&file_url(&objects)), "{e}");
    }

    #[tokio::test]
    async fn state_unsupported_and_malformed_locations_name_the_option_and_value() {
        let e = CheckpointStore::open("ftp://x", true)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--state-dir 'ftp://x': unsupported URL scheme 'ftp' (use a directory, file://, s3://, gs:// or az://)"
        );
        for (bad, why) in [
            ("s3://bu cket/p", "malformed URL"),
            ("s3://", "malformed URL"),
            ("file://host/relative", "malformed URL"),
            ("gs://[::1/p", "malformed URL"),
            ("memory:///x", "in-memory"),
            ("http://example.com/state", "unsupported URL scheme 'http'"),
        ] {
            let e = CheckpointStore::open(bad, true)
                .await
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("--state-dir '{bad}': ")) && e.contains(why),
                "{bad}: {e}"
            );
        }
        // A malformed URL with credentials is named without them.
        let e = CheckpointStore::open("s3://u:secret@bu cket/p?token=abc", true)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--state-dir 's3://***@bu cket/p?token=***'")
                && !e.contains("secret")
                && !e.contains("abc"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn state_describe_has_no_credentials() {
        let store = CheckpointStore::open("s3://user:secret@bucket/p?token=abc", true)
            .await
            .unwrap();
        let d = store.describe();
        assert!(!d.contains("secret") && !d.contains("abc"), "{d}");
        assert_eq!(d, "s3://***@bucket/p?token=***");
        assert!(!format!("{store:?}").contains("secret"));
        let mem = CheckpointStore::from_object_store(
            Arc::new(object_store::memory::InMemory::new()),
            "p",
            "s3://user:secret@bucket/p?token=abc",
        );
        assert_eq!(mem.describe(), "s3://***@bucket/p?token=***");
    }
}
