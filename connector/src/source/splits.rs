//! The split plan (SPEC 5.6). A split is (subscription, index): with ordering `per-key`
//! one split per subscription (one stream keeps a key's order), otherwise
//! max(#subscriptions, parallelism) splits, so every subtask reads. Split `i` reads
//! subscription `i mod n` and belongs to subtask `i mod parallelism`. Splits carry no
//! progress (Pub/Sub keeps it), so a rescaled job simply plans again.

/// One split: which subscription (index into the table's list) it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub index: usize,
    pub subscription: usize,
}

/// The splits subtask `subtask` of `parallelism` reads, for `subscriptions` subscriptions.
/// Empty for a surplus subtask (more subtasks than splits under `per-key`).
pub fn splits_for(
    subtask: usize,
    parallelism: usize,
    subscriptions: usize,
    per_key: bool,
) -> Vec<Split> {
    let parallelism = parallelism.max(1);
    let total = if per_key {
        subscriptions
    } else {
        subscriptions.max(parallelism)
    };
    (0..total)
        .filter(|i| i % parallelism == subtask)
        .map(|index| Split {
            index,
            subscription: index % subscriptions.max(1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(subtask: usize, p: usize, n: usize, per_key: bool) -> Vec<usize> {
        splits_for(subtask, p, n, per_key)
            .iter()
            .map(|s| s.subscription)
            .collect()
    }

    #[test]
    fn every_subtask_reads_and_every_subscription_is_read() {
        // One subscription, four subtasks: four splits of it.
        for t in 0..4 {
            assert_eq!(subs(t, 4, 1, false), vec![0]);
        }
        // Three subscriptions, two subtasks: split 2 (subscription 2) joins subtask 0.
        assert_eq!(subs(0, 2, 3, false), vec![0, 2]);
        assert_eq!(subs(1, 2, 3, false), vec![1]);
        // Two subscriptions, three subtasks: subtask 2 reads subscription 0 again.
        assert_eq!(subs(2, 3, 2, false), vec![0]);
    }

    #[test]
    fn per_key_plans_one_split_per_subscription_and_leaves_surplus_idle() {
        assert_eq!(subs(0, 4, 2, true), vec![0]);
        assert_eq!(subs(1, 4, 2, true), vec![1]);
        assert!(subs(2, 4, 2, true).is_empty());
        assert!(subs(3, 4, 2, true).is_empty());
        assert_eq!(subs(0, 1, 2, true), vec![0, 1]);
    }
}
