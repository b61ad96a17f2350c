//! Deduplication on a record-id attribute (`scan.dedup.*`, decision 0026): the set shared
//! by the table's subtasks in this process, checked as a message is decoded. In a cluster
//! of several processes (decision 0046) the source only fills the rows' deduplication
//! key and the queries' sink operators check it, behind the exchange by record id.

use super::*;
use crate::source::dedup as seen;

/// Deduplication (`scan.dedup.*`): the attribute, the set shared by the subtasks of this
/// table in this process (`None` in a cluster: the dataflow checks), and its counters.
pub(super) struct Dedup {
    pub(super) attribute: String,
    pub(super) set: Option<std::sync::Arc<std::sync::Mutex<seen::SeenSet>>>,
    pub(super) deduplicated: Counter,
    pub(super) without: Counter,
    pub(super) behind: Counter,
}

impl Dedup {
    /// Joins (or creates) the set the table's subtasks in this process share, restoring
    /// the ids of the restored subtasks' checkpoints (each to its new owner) and those
    /// its queries held when the job ran as a cluster; in a cluster (`in_dataflow`), only
    /// the counters.
    pub(super) fn open(
        ctx: &SourceContext,
        d: pubsub_schema::DedupConfig,
        in_dataflow: bool,
    ) -> anyhow::Result<Dedup> {
        let parallelism = ctx.task_info.parallelism;
        let restored = &ctx.restored_subtasks;
        let set = if in_dataflow {
            tracing::info!(
                "deduplicating on attribute '{}' in each query's sink operator (a cluster)",
                d.attribute
            );
            None
        } else {
            let set = seen::shared(ctx.task_info.run, &ctx.task_info.operator_id, || {
                let mut set = seen::SeenSet::new(&crate::source::dedup_spec(&d));
                for (old, state) in restored {
                    if let Some(ids) = state.values.get(seen::STATE_KEY) {
                        set.restore(ids, seen::new_owner(*old, parallelism))
                            .map_err(|e| {
                                e.context(format!(
                                    "restoring the deduplication ids of subtask {old}"
                                ))
                            })?;
                    }
                }
                for state in &ctx.restored_dedup {
                    if let Some(ids) = state.values.get(seen::STATE_KEY) {
                        set.restore_owned(ids, |h| {
                            Some(seen::owner_of(h, parallelism as u64) as usize)
                        })
                        .map_err(|e| e.context("restoring the deduplication ids of a cluster"))?;
                    }
                }
                Ok(set)
            })?;
            tracing::info!(
                "deduplicating on attribute '{}' (window {} s, {} ids restored)",
                d.attribute,
                d.window_ms / 1000,
                set.lock().expect("dedup lock").len()
            );
            Some(set)
        };
        Ok(Dedup {
            attribute: d.attribute,
            set,
            deduplicated: ctx.counter(MESSAGES_DEDUPLICATED),
            without: ctx.counter(MESSAGES_WITHOUT_DEDUP_ATTRIBUTE),
            behind: ctx.counter(MESSAGES_BEHIND_DEDUP_WINDOW),
        })
    }

    /// Checks record `(value, published_ms)` of subtask `subtask`: `None` for a copy of
    /// a record already seen (acknowledged with the next checkpoint, no row), else the
    /// hash a first copy now holds in the set (its rows go out before the next barrier,
    /// so the checkpoint that covers them holds the id).
    pub(super) fn check(
        &self,
        value: &str,
        published_ms: i64,
        subtask: usize,
    ) -> anyhow::Result<Option<u128>> {
        let Some(set) = &self.set else {
            return Ok(Some(0));
        };
        let check = set
            .lock()
            .expect("dedup lock")
            .check(value, published_ms, subtask)?;
        Ok(match check {
            seen::Check::Duplicate | seen::Check::SameMessage => {
                self.deduplicated.add(1);
                None
            }
            seen::Check::New { hash, behind } => {
                if behind {
                    self.behind.add(1);
                }
                Some(hash)
            }
        })
    }

    /// The ids subtask `subtask` owns, for its checkpoint (`None` in a cluster).
    pub(super) fn snapshot(&self, subtask: usize) -> Option<serde_json::Value> {
        let set = self.set.as_ref()?;
        Some(set.lock().expect("dedup lock").snapshot(subtask))
    }

    /// Whether the dataflow checks the ids (a cluster), not this source.
    pub(super) fn in_dataflow(&self) -> bool {
        self.set.is_none()
    }
}

impl SourceReader {
    /// Takes a record id out of the deduplication set: its message's rows did not go out.
    pub(super) fn forget_seen(&self, h: u128) {
        if let Some(set) = self.dedup.as_ref().and_then(|d| d.set.as_ref()) {
            set.lock().expect("dedup lock").forget(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dedup(window_ms: u64) -> Dedup {
        Dedup {
            attribute: "rid".into(),
            set: Some(std::sync::Arc::new(std::sync::Mutex::new(
                seen::SeenSet::new(&seen::DedupSpec {
                    window_ms,
                    max_ids: 1_000,
                    window_option: "w",
                    max_ids_option: "m",
                    attribute_option: "a",
                }),
            ))),
            deduplicated: Counter::default(),
            without: Counter::default(),
            behind: Counter::default(),
        }
    }

    #[test]
    fn a_second_copy_yields_no_row_and_is_counted_whichever_subtask_reads_it() {
        let d = dedup(60_000);
        let first = d.check("r1", 1_000, 0).unwrap();
        assert!(first.is_some());
        assert_eq!(d.check("r1", 1_500, 1).unwrap(), None);
        assert_eq!(d.check("r1", 2_000, 0).unwrap(), None);
        assert_eq!(d.deduplicated.get(), 2);
        assert!(d.check("r2", 2_000, 1).unwrap().is_some());
        assert_eq!(d.behind.get(), 0);
        // The snapshot of a subtask holds the ids it owns.
        assert_ne!(d.snapshot(0), d.snapshot(1));
    }

    #[test]
    fn a_record_more_than_the_window_behind_the_newest_is_counted_as_behind() {
        let d = dedup(1_000);
        assert!(d.check("new", 100_000, 0).unwrap().is_some());
        assert!(d.check("old", 10_000, 0).unwrap().is_some());
        assert_eq!(d.behind.get(), 1);
    }
}
