//! The local state directory (a plain `--state-dir` path): `DIR/checkpoint.json` replaced
//! atomically per completed checkpoint, `DIR/lock` held by the one writing process.
//!
//! This is the on-disk format of every release so far; it must stay readable as it is.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

use super::layout::{FILE, POINTER};
use super::CheckpointMetadata;

/// The lock file: holds the writer's pid; locked with `File::try_lock` while it runs.
pub(super) const LOCK: &str = "lock";

/// A state directory; clones share the lock, which is released when the last one drops.
#[derive(Debug, Clone)]
pub(super) struct LocalDir {
    dir: PathBuf,
    /// `Some` for a writer: an exclusive advisory lock on `DIR/lock`. Two jobs on one
    /// state directory would overwrite each other's checkpoints.
    _lock: Option<Arc<fs::File>>,
}

impl LocalDir {
    /// A writer creates the directory if needed and locks it; a directory locked by another
    /// process is refused naming that process's pid. A reader takes no lock and creates
    /// nothing (a missing directory simply holds no checkpoint).
    pub(super) fn open(dir: &Path, writer: bool) -> anyhow::Result<Self> {
        if !writer {
            return Ok(LocalDir {
                dir: dir.to_path_buf(),
                _lock: None,
            });
        }
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
                // A restart finds the other job still running: restarting cannot help.
                return Err(pubsub_engine_spi::PermanentError::wrap(anyhow::anyhow!(
                    "state directory {} is in use by another pubsub-connector process (pid {}, lock file {}): stop it or use another --state-dir",
                    dir.display(),
                    owner.trim(),
                    path.display()
                )));
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
        file.set_len(0)?;
        write!(file, "{}", std::process::id())?;
        Ok(LocalDir {
            dir: dir.to_path_buf(),
            _lock: Some(Arc::new(file)),
        })
    }

    pub(super) fn path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    /// The last completed checkpoint, if any. A corrupt file is an error (never ignored:
    /// starting over would re-run seeks and lose the epoch sequence), and so is a directory
    /// that holds the object-store layout instead (it was written through a `file://` URL).
    pub(super) fn load(&self) -> anyhow::Result<Option<CheckpointMetadata>> {
        let path = self.path();
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("checkpoint file {} is corrupt", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let pointer = self.dir.join(POINTER);
                if pointer.is_file() {
                    anyhow::bail!(
                        "state directory {} has no {FILE} but holds the object-store layout ({}): it was written through a file:// URL; pass --state-dir file://{} to restore it",
                        self.dir.display(),
                        pointer.display(),
                        std::path::absolute(&self.dir)
                            .unwrap_or_else(|_| self.dir.clone())
                            .display()
                    );
                }
                Ok(None)
            }
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes `meta` durably: temp file, fsync, rename over the old one, fsync the directory.
    pub(super) fn write(&self, meta: &CheckpointMetadata) -> anyhow::Result<()> {
        self.replace(FILE, &serde_json::to_vec_pretty(meta)?)
    }

    /// The bytes of `DIR/name`, or `None` when it does not exist.
    pub(super) fn read(&self, name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let path = self.dir.join(name);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Replaces `DIR/name` with `bytes` durably and atomically: temp file, fsync, rename
    /// over the old one, fsync the directory.
    pub(super) fn replace(&self, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let tmp = self.dir.join(format!("{name}.tmp"));
        let path = self.dir.join(name);
        {
            let mut f = fs::File::create(&tmp)
                .with_context(|| format!("cannot write {}", tmp.display()))?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &path).with_context(|| format!("cannot replace {}", path.display()))?;
        // The rename is durable only once the directory is synced.
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("cannot sync state directory {}", self.dir.display()))?;
        Ok(())
    }
}
