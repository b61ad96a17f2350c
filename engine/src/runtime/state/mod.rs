//! Durable checkpoint metadata: one JSON file replaced atomically per completed checkpoint.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::spi::OperatorState;

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

/// The checkpoint directory (`--state-dir`), locked by this process while it is open.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    /// Holds an exclusive advisory lock on `lock` in the directory until dropped: two jobs
    /// on one state directory would overwrite each other's checkpoints.
    _lock: std::sync::Arc<fs::File>,
}

const FILE: &str = "checkpoint.json";
const LOCK: &str = "lock";

impl CheckpointStore {
    /// Creates the directory if needed and locks it. Errors name the directory; a
    /// directory locked by another process is refused naming that process's pid.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        fs::create_dir_all(dir)
            .with_context(|| format!("cannot create state directory {}", dir.display()))?;
        let path = dir.join(LOCK);
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let owner = fs::read_to_string(&path).unwrap_or_default();
                anyhow::bail!(
                    "state directory {} is in use by another pubsub-connector process (pid {}, lock file {}): stop it or use another --state-dir",
                    dir.display(),
                    owner.trim(),
                    path.display()
                );
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
        file.set_len(0)?;
        write!(file, "{}", std::process::id())?;
        Ok(CheckpointStore {
            dir: dir.to_path_buf(),
            _lock: std::sync::Arc::new(file),
        })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    /// The last completed checkpoint, if any. A corrupt file is an error (never ignored:
    /// starting over would re-run seeks and lose the epoch sequence).
    pub fn load(&self) -> anyhow::Result<Option<CheckpointMetadata>> {
        let path = self.path();
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("checkpoint file {} is corrupt", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes `meta` durably: temp file, fsync, rename over the old one, fsync the directory.
    pub fn write(&self, meta: &CheckpointMetadata) -> anyhow::Result<()> {
        let tmp = self.dir.join(format!("{FILE}.tmp"));
        let bytes = serde_json::to_vec_pretty(meta)?;
        {
            let mut f = fs::File::create(&tmp)
                .with_context(|| format!("cannot write {}", tmp.display()))?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.path())
            .with_context(|| format!("cannot replace {}", self.path().display()))?;
        // The rename is durable only once the directory is synced.
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("cannot sync state directory {}", self.dir.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_load() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path()).unwrap();
        assert!(store.load().unwrap().is_none());
        let mut ops = BTreeMap::new();
        let mut st = OperatorState::default();
        st.values.insert("k".into(), serde_json::json!(1));
        ops.insert("q0-source".to_string(), BTreeMap::from([(0usize, st)]));
        let meta = CheckpointMetadata {
            version: 1,
            job_id: "j".into(),
            epoch: 7,
            completed_at_ms: 1,
            operators: ops,
        };
        store.write(&meta).unwrap();
        assert_eq!(store.load().unwrap().unwrap(), meta);
        fs::write(store.path(), b"{").unwrap();
        assert!(store.load().unwrap_err().to_string().contains("corrupt"));
    }

    #[test]
    fn a_second_open_of_a_locked_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = CheckpointStore::open(dir.path()).unwrap();
        let e = CheckpointStore::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("in use by another") && e.contains(&std::process::id().to_string()),
            "{e}"
        );
        drop(first);
        CheckpointStore::open(dir.path()).unwrap();
    }
}
