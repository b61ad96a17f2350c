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

/// The checkpoint directory (`--state-dir`).
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
}

const FILE: &str = "checkpoint.json";

impl CheckpointStore {
    /// Creates the directory if needed. Errors name the directory.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        fs::create_dir_all(dir)
            .with_context(|| format!("cannot create state directory {}", dir.display()))?;
        Ok(CheckpointStore {
            dir: dir.to_path_buf(),
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
}
