//! Deduplication on a record-id attribute (`scan.dedup.*`, decision 0026): the set shared
//! by the table's subtasks in this process, checked as a message is decoded.

use super::*;
use crate::source::dedup as seen;

/// Deduplication (`scan.dedup.*`): the attribute, the set shared by the subtasks of this
/// table in this process, and its counters.
pub(super) struct Dedup {
    pub(super) attribute: String,
    pub(super) set: std::sync::Arc<std::sync::Mutex<seen::SeenSet>>,
    pub(super) deduplicated: Counter,
    pub(super) without: Counter,
    pub(super) behind: Counter,
}

impl Dedup {
    /// Joins (or creates) the set the table's subtasks in this process share, restoring
    /// the ids of the restored subtasks' checkpoints (each to its new owner).
    pub(super) fn open(
        ctx: &SourceContext,
        d: pubsub_schema::DedupConfig,
    ) -> anyhow::Result<Dedup> {
        let parallelism = ctx.task_info.parallelism;
        let restored = &ctx.restored_subtasks;
        let set = seen::shared(ctx.task_info.run, &ctx.task_info.operator_id, || {
            let mut set = seen::SeenSet::new(d.window_ms, d.max_ids);
            for (old, state) in restored {
                if let Some(ids) = state.values.get(seen::STATE_KEY) {
                    set.restore(ids, seen::new_owner(*old, parallelism))
                        .map_err(|e| {
                            e.context(format!("restoring the deduplication ids of subtask {old}"))
                        })?;
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
        let check = self
            .set
            .lock()
            .expect("dedup lock")
            .check(value, published_ms, subtask)?;
        Ok(match check {
            seen::Check::Duplicate => {
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

    /// The ids subtask `subtask` owns, for its checkpoint.
    pub(super) fn snapshot(&self, subtask: usize) -> serde_json::Value {
        self.set.lock().expect("dedup lock").snapshot(subtask)
    }
}

impl SourceReader {
    /// Takes a record id out of the deduplication set: its message's rows did not go out.
    pub(super) fn forget_seen(&self, h: u128) {
        if let Some(d) = &self.dedup {
            d.set.lock().expect("dedup lock").forget(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dedup(window_ms: u64) -> Dedup {
        Dedup {
            attribute: "rid".into(),
            set: std::sync::Arc::new(std::sync::Mutex::new(seen::SeenSet::new(window_ms, 1_000))),
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
