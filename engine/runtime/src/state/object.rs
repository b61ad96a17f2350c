//! Checkpoints in an object store (S3, GCS, Azure Blob, or files through `file://`), under
//! one prefix:
//!
//! - `PREFIX/checkpoints/{epoch:020}.json`: one object per completed checkpoint, the
//!   [`CheckpointMetadata`] as JSON (the same content as a local `checkpoint.json`);
//! - `PREFIX/latest`: the pointer, JSON `{"version":1,"epoch":E,"checkpoint":"checkpoints/…json"}`
//!   naming the current checkpoint object relative to `PREFIX`.
//!
//! A write puts the checkpoint object first and then replaces the pointer. Object stores
//! offer no rename, but a single PUT is atomic (a reader sees the old or the new object,
//! never a part) and, on S3, GCS and Azure, durable and read-after-write consistent once it
//! returns. So the pointer is the commit point: a crash between the two PUTs leaves an
//! unreferenced checkpoint object and the previous checkpoint current. Checkpoint objects
//! are never updated in place, so a reader that read the pointer always finds the object it
//! names, as long as it is not more than one checkpoint behind (two are kept).

use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use super::layout::{FILE, POINTER};
use super::CheckpointMetadata;

/// The folder of checkpoint objects under the prefix.
const CHECKPOINTS: &str = "checkpoints";
/// The pointer's format version.
const POINTER_VERSION: u32 = 1;

/// The content of the pointer object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pointer {
    /// Pointer format version ([`POINTER_VERSION`]).
    version: u32,
    /// The epoch of the current checkpoint.
    epoch: u64,
    /// The current checkpoint object, relative to the prefix (`checkpoints/{epoch:020}.json`).
    checkpoint: String,
}

/// Checkpoints under `prefix` of `store`. Clones share the knowledge of the current epoch.
#[derive(Debug, Clone)]
pub(super) struct ObjectCheckpoints {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// The location without credentials, for messages (`s3://bucket/prefix`).
    describe: String,
    /// The epoch the pointer names as far as this process knows (set by `load` and
    /// `write`): the checkpoint to keep besides the new one when pruning.
    current: Arc<Mutex<Option<u64>>>,
}

/// The name of a checkpoint object relative to the prefix.
fn checkpoint_name(epoch: u64) -> String {
    format!("{CHECKPOINTS}/{epoch:020}.json")
}

/// The epoch of a checkpoint object's file name (`{epoch:020}.json`), `None` for any other.
fn epoch_of(file_name: &str) -> Option<u64> {
    let digits = file_name.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

impl ObjectCheckpoints {
    pub(super) fn new(store: Arc<dyn ObjectStore>, prefix: Path, describe: String) -> Self {
        ObjectCheckpoints {
            store,
            prefix,
            describe,
            current: Arc::new(Mutex::new(None)),
        }
    }

    /// `relative` (`/`-separated, relative to the prefix) as a path in the store.
    fn path(&self, relative: &str) -> anyhow::Result<Path> {
        let rel = Path::parse(relative).map_err(|e| anyhow!("{e}"))?;
        Ok(self.prefix.parts().chain(rel.parts()).collect())
    }

    /// `relative` as users see it: `s3://bucket/prefix/latest`.
    fn name(&self, relative: &str) -> String {
        format!("{}/{relative}", self.describe.trim_end_matches('/'))
    }

    /// The object at `relative`, or `None` when it does not exist.
    async fn get(&self, relative: &str) -> anyhow::Result<Option<bytes::Bytes>> {
        let path = self.path(relative)?;
        match self.store.get(&path).await {
            Ok(got) => Ok(Some(got.bytes().await.with_context(|| {
                format!("cannot read object {}", self.name(relative))
            })?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read object {}", self.name(relative))),
        }
    }

    /// The bytes of object `relative`, or `None` when it does not exist.
    pub(super) async fn read(&self, relative: &str) -> anyhow::Result<Option<Vec<u8>>> {
        Ok(self.get(relative).await?.map(|b| b.to_vec()))
    }

    /// Replaces object `relative` with `bytes` (one PUT: atomic in every object store).
    pub(super) async fn replace(&self, relative: &str, bytes: Vec<u8>) -> anyhow::Result<()> {
        self.store
            .put(&self.path(relative)?, PutPayload::from(bytes))
            .await
            .with_context(|| format!("cannot write object {}", self.name(relative)))?;
        Ok(())
    }

    /// The checkpoint the pointer names, or `None` when there is no pointer. A corrupt
    /// pointer, or one naming a missing, corrupt or mismatching object, is an error naming
    /// the object: starting over would lose the epoch sequence.
    pub(super) async fn load(&self) -> anyhow::Result<Option<CheckpointMetadata>> {
        let pointer_name = self.name(POINTER);
        let Some(bytes) = self.get(POINTER).await? else {
            // A local state directory opened through `file://` (or a copied one) would
            // otherwise silently start over.
            if self.get(FILE).await?.is_some() {
                anyhow::bail!(
                    "{} holds {} of a local state directory but no checkpoint pointer {pointer_name}: pass its directory path (not a URL) as --state-dir to restore it",
                    self.describe,
                    self.name(FILE)
                );
            }
            return Ok(None);
        };
        let pointer: Pointer = serde_json::from_slice(&bytes)
            .with_context(|| format!("checkpoint pointer {pointer_name} is corrupt"))?;
        if pointer.version != POINTER_VERSION {
            anyhow::bail!(
                "checkpoint pointer {pointer_name} has version {}, this build reads version {POINTER_VERSION}",
                pointer.version
            );
        }
        let object_name = self.name(&pointer.checkpoint);
        self.path(&pointer.checkpoint).with_context(|| {
            format!("checkpoint pointer {pointer_name} is corrupt: it names an invalid object path {object_name}")
        })?;
        let bytes = self.get(&pointer.checkpoint).await?.ok_or_else(|| {
            anyhow!(
                "checkpoint pointer {pointer_name} names checkpoint {} in {object_name}, which does not exist (deleted by hand, or the store lost it)",
                pointer.epoch
            )
        })?;
        let meta: CheckpointMetadata = serde_json::from_slice(&bytes).with_context(|| {
            format!("checkpoint object {object_name} (named by {pointer_name}) is corrupt")
        })?;
        if meta.epoch != pointer.epoch {
            anyhow::bail!(
                "checkpoint object {object_name} holds epoch {}, but the pointer {pointer_name} names epoch {}",
                meta.epoch,
                pointer.epoch
            );
        }
        *self.current.lock().unwrap() = Some(meta.epoch);
        Ok(Some(meta))
    }

    /// Puts the checkpoint object, then the pointer naming it; then prunes old objects.
    /// An error of either PUT fails the write (the previous checkpoint stays current as long
    /// as the pointer PUT did not succeed); pruning failures only warn.
    pub(super) async fn write(&self, meta: &CheckpointMetadata) -> anyhow::Result<()> {
        let object = checkpoint_name(meta.epoch);
        let bytes = serde_json::to_vec_pretty(meta)?;
        self.store
            .put(&self.path(&object)?, PutPayload::from(bytes))
            .await
            .with_context(|| format!("cannot write checkpoint object {}", self.name(&object)))?;
        let pointer = Pointer {
            version: POINTER_VERSION,
            epoch: meta.epoch,
            checkpoint: object.clone(),
        };
        self.store
            .put(
                &self.path(POINTER)?,
                PutPayload::from(serde_json::to_vec_pretty(&pointer)?),
            )
            .await
            .with_context(|| {
                format!(
                    "cannot write checkpoint pointer {} (checkpoint object {} was written but is not current)",
                    self.name(POINTER),
                    self.name(&object)
                )
            })?;
        let previous = self.current.lock().unwrap().replace(meta.epoch);
        self.prune(meta.epoch, previous).await;
        Ok(())
    }

    /// Deletes the checkpoint objects older than the one before `current` (that one is
    /// kept so that a reader that read the previous pointer still finds its object).
    /// `previous` is the epoch the pointer named before; unknown (a store written without a
    /// `load`), the newest object below `current` stands for it. Objects above `current`
    /// are never touched. Failures are logged, never returned: the checkpoint is complete.
    async fn prune(&self, current: u64, previous: Option<u64>) {
        let folder = match self.path(CHECKPOINTS) {
            Ok(p) => p,
            Err(_) => return,
        };
        let listed: Result<Vec<_>, _> = self.store.list(Some(&folder)).try_collect().await;
        let listed = match listed {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(
                    "checkpoint {current} is complete, but old checkpoints in {} could not be listed for deletion: {e}",
                    self.name(CHECKPOINTS)
                );
                return;
            }
        };
        let epochs: Vec<(u64, Path)> = listed
            .into_iter()
            .filter_map(|m| Some((epoch_of(m.location.filename()?)?, m.location)))
            .collect();
        let keep = previous.filter(|&p| p < current).or_else(|| {
            epochs
                .iter()
                .map(|(e, _)| *e)
                .filter(|&e| e < current)
                .max()
        });
        let Some(keep) = keep else { return };
        for (epoch, path) in epochs {
            if epoch >= keep {
                continue;
            }
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    tracing::debug!("deleted old checkpoint object {}", self.name(&checkpoint_name(epoch)));
                }
                Err(e) => tracing::warn!(
                    "checkpoint {current} is complete, but the old checkpoint object {} could not be deleted: {e}",
                    self.name(&checkpoint_name(epoch))
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tests::meta;
    use crate::state::CheckpointStore;
    use object_store::memory::InMemory;

    async fn names(store: &InMemory, prefix: &str) -> Vec<String> {
        let list: Vec<_> = store
            .list(Some(&Path::from(prefix)))
            .try_collect()
            .await
            .unwrap();
        let mut names: Vec<String> = list.into_iter().map(|m| m.location.to_string()).collect();
        names.sort();
        names
    }

    fn on(mem: &Arc<InMemory>) -> CheckpointStore {
        CheckpointStore::from_object_store(mem.clone(), "jobs/a", "memory:///jobs/a")
    }

    #[test]
    fn epoch_names_sort_and_parse() {
        assert_eq!(checkpoint_name(3), "checkpoints/00000000000000000003.json");
        assert_eq!(epoch_of("00000000000000000003.json"), Some(3));
        assert_eq!(epoch_of(&format!("{:020}.json", u64::MAX)), Some(u64::MAX));
        assert_eq!(epoch_of("3.json"), None);
        assert_eq!(epoch_of("0000000000000000000x.json"), None);
        assert_eq!(epoch_of("00000000000000000003.json.tmp"), None);
        assert!(checkpoint_name(9) < checkpoint_name(10));
    }

    #[tokio::test]
    async fn state_pointer_names_the_newest_and_two_objects_are_kept() {
        let mem = Arc::new(InMemory::new());
        let store = on(&mem);
        assert_eq!(store.load().await.unwrap(), None);
        for epoch in 1..=3 {
            store.write(&meta(epoch)).await.unwrap();
        }
        assert_eq!(store.load().await.unwrap(), Some(meta(3)));
        // A second store on the same objects (another process) reads the same.
        assert_eq!(on(&mem).load().await.unwrap(), Some(meta(3)));
        assert_eq!(
            names(&mem, "jobs/a").await,
            [
                "jobs/a/checkpoints/00000000000000000002.json",
                "jobs/a/checkpoints/00000000000000000003.json",
                "jobs/a/latest",
            ]
        );
        let pointer: Pointer = serde_json::from_slice(
            &mem.get(&Path::from("jobs/a/latest"))
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            pointer,
            Pointer {
                version: 1,
                epoch: 3,
                checkpoint: "checkpoints/00000000000000000003.json".into()
            }
        );
        // A fresh store (no load: it does not know the previous epoch) prunes the same way.
        on(&mem).write(&meta(4)).await.unwrap();
        assert_eq!(
            names(&mem, "jobs/a/checkpoints").await,
            [
                "jobs/a/checkpoints/00000000000000000003.json",
                "jobs/a/checkpoints/00000000000000000004.json",
            ]
        );
    }

    #[tokio::test]
    async fn state_a_checkpoint_object_without_its_pointer_does_not_become_current() {
        let mem = Arc::new(InMemory::new());
        let store = on(&mem);
        store.write(&meta(1)).await.unwrap();
        store.write(&meta(2)).await.unwrap();
        // A crash between the two PUTs of epoch 3: its object exists, the pointer does not name it.
        mem.put(
            &Path::from("jobs/a/checkpoints/00000000000000000003.json"),
            PutPayload::from(serde_json::to_vec(&meta(3)).unwrap()),
        )
        .await
        .unwrap();
        assert_eq!(on(&mem).load().await.unwrap(), Some(meta(2)));
        // The same with nothing completed yet: no checkpoint at all.
        let fresh = Arc::new(InMemory::new());
        fresh
            .put(
                &Path::from("jobs/a/checkpoints/00000000000000000001.json"),
                PutPayload::from(serde_json::to_vec(&meta(1)).unwrap()),
            )
            .await
            .unwrap();
        assert_eq!(on(&fresh).load().await.unwrap(), None);
        // The restarted job writes epoch 3 again over the orphan and continues.
        let restarted = on(&mem);
        assert_eq!(restarted.load().await.unwrap(), Some(meta(2)));
        let mut again = meta(3);
        again.job_id = "restarted".into();
        restarted.write(&again).await.unwrap();
        assert_eq!(on(&mem).load().await.unwrap(), Some(again));
    }

    #[tokio::test]
    async fn state_the_object_is_written_before_the_pointer() {
        // A store whose PUTs fail from the n-th on, to cut a write at each step.
        for fail_from in 0..2 {
            let mem = Arc::new(InMemory::new());
            on(&mem).write(&meta(1)).await.unwrap();
            let cut = Arc::new(FailingPuts {
                inner: mem.clone(),
                puts_left: Mutex::new(fail_from),
            });
            let store = CheckpointStore::from_object_store(cut, "jobs/a", "memory:///jobs/a");
            let e = store.write(&meta(2)).await.unwrap_err();
            let e = format!("{e:#}");
            assert!(e.contains("memory:///jobs/a/"), "{e}");
            // Whatever step failed, epoch 1 is still current and readable.
            assert_eq!(
                on(&mem).load().await.unwrap(),
                Some(meta(1)),
                "cut after {fail_from} PUTs"
            );
        }
    }

    #[tokio::test]
    async fn state_a_corrupt_or_dangling_pointer_is_an_error_naming_the_object() {
        let mem = Arc::new(InMemory::new());
        let store = on(&mem);
        store.write(&meta(1)).await.unwrap();
        store.write(&meta(2)).await.unwrap();
        let latest = Path::from("jobs/a/latest");

        mem.put(&latest, PutPayload::from_static(b"{\"epoch\": 2,"))
            .await
            .unwrap();
        let e = format!("{:#}", on(&mem).load().await.unwrap_err());
        assert!(
            e.contains("checkpoint pointer memory:///jobs/a/latest is corrupt"),
            "{e}"
        );

        let dangling =
            br#"{"version":1,"epoch":7,"checkpoint":"checkpoints/00000000000000000007.json"}"#;
        mem.put(&latest, PutPayload::from_static(dangling))
            .await
            .unwrap();
        let e = format!("{:#}", on(&mem).load().await.unwrap_err());
        assert!(
            e.contains("memory:///jobs/a/checkpoints/00000000000000000007.json")
                && e.contains("does not exist"),
            "{e}"
        );

        // The pointer is fine but the object it names is corrupt.
        let good =
            br#"{"version":1,"epoch":2,"checkpoint":"checkpoints/00000000000000000002.json"}"#;
        mem.put(&latest, PutPayload::from_static(good))
            .await
            .unwrap();
        assert_eq!(on(&mem).load().await.unwrap(), Some(meta(2)));
        mem.put(
            &Path::from("jobs/a/checkpoints/00000000000000000002.json"),
            PutPayload::from_static(b"{"),
        )
        .await
        .unwrap();
        let e = format!("{:#}", on(&mem).load().await.unwrap_err());
        assert!(
            e.contains("checkpoint object memory:///jobs/a/checkpoints/00000000000000000002.json")
                && e.contains("corrupt"),
            "{e}"
        );

        // A pointer naming an object of another epoch.
        let wrong =
            br#"{"version":1,"epoch":5,"checkpoint":"checkpoints/00000000000000000001.json"}"#;
        mem.put(
            &Path::from("jobs/a/checkpoints/00000000000000000001.json"),
            PutPayload::from(serde_json::to_vec(&meta(1)).unwrap()),
        )
        .await
        .unwrap();
        mem.put(&latest, PutPayload::from_static(wrong))
            .await
            .unwrap();
        let e = format!("{:#}", on(&mem).load().await.unwrap_err());
        assert!(
            e.contains("holds epoch 1") && e.contains("names epoch 5"),
            "{e}"
        );
    }

    /// Delegates to `inner`, but fails every PUT once `puts_left` reached 0.
    #[derive(Debug)]
    struct FailingPuts {
        inner: Arc<InMemory>,
        puts_left: Mutex<usize>,
    }

    impl std::fmt::Display for FailingPuts {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "FailingPuts({})", self.inner)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for FailingPuts {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            {
                let mut left = self.puts_left.lock().unwrap();
                if *left == 0 {
                    return Err(object_store::Error::Generic {
                        store: "FailingPuts",
                        source: format!("injected failure of PUT {location}").into(),
                    });
                }
                *left -= 1;
            }
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }
}
