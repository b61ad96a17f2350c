//! Deduplication by a record id attribute (`scan.dedup.*`, README "Exactly once across
//! pipelines").
//!
//! The ids seen are one [`SeenSet`] per source table and process, shared by its subtasks
//! (a copy of a record may reach any subtask). An id is stored as the first 16 bytes of
//! its BLAKE3 hash (two ids colliding is a 2^-128 event per pair), with the publish time
//! of the copy that put it there and the subtask that owns it for checkpoints.
//!
//! Consistency with checkpoints: an id goes in when its message is decoded, which is
//! before the barrier of the epoch its rows are emitted in, and each subtask snapshots
//! the ids it owns at its barrier; so a checkpoint holds exactly the ids of messages
//! whose rows it covers. An id whose message is released (nacked) again is taken out.
//!
//! Window: an id is remembered while the newest publish time the set has seen is at
//! most `window` later than its own. Eviction runs in arrival order and only drops an
//! id whose window has ended, so an id is never forgotten early (one may stay longer).
//! At `max_ids` ids within their windows the job fails, naming the options.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, Weak};

use base64::Engine;

/// The state key of a subtask's ids in its checkpoint state.
pub const STATE_KEY: &str = "dedup";

/// Bytes of one id in the checkpoint: publish time (i64 LE) and hash (u128 LE).
const ENTRY: usize = 24;

/// Keys are already uniform (BLAKE3): hash them by their low 64 bits.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().take(8).enumerate() {
            self.0 |= u64::from(*b) << (8 * i);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    publish_ms: i64,
    owner: u32,
}

/// What [`SeenSet::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// First copy within the window: the id is now held (by this hash).
    New(u128),
    /// A copy of a record already seen: acknowledge it, emit nothing.
    Duplicate,
}

/// The ids seen by the subtasks of one source table in one process.
#[derive(Debug)]
pub struct SeenSet {
    window_ms: i64,
    max_ids: usize,
    ids: HashMap<u128, Seen, BuildHasherDefault<IdHasher>>,
    /// (publish ms, id) in arrival order, for eviction; an entry whose id was taken out
    /// or seen again is skipped.
    order: VecDeque<(i64, u128)>,
    newest_ms: i64,
}

/// The hash an id is kept as.
pub fn id_hash(id: &str) -> u128 {
    let h = blake3::hash(id.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h.as_bytes()[..16]);
    u128::from_le_bytes(b)
}

impl SeenSet {
    /// An empty set remembering ids for `window_ms` of publish time, at most `max_ids`.
    pub fn new(window_ms: u64, max_ids: u64) -> SeenSet {
        SeenSet {
            window_ms: i64::try_from(window_ms).unwrap_or(i64::MAX),
            max_ids: usize::try_from(max_ids).unwrap_or(usize::MAX),
            ids: HashMap::default(),
            order: VecDeque::new(),
            newest_ms: i64::MIN,
        }
    }

    /// Ids held now.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Bytes the set's two tables take now, from their capacities (entries and the hash
    /// table's control bytes; the allocator's own overhead is not counted).
    pub fn table_bytes(&self) -> usize {
        self.ids.capacity() * (std::mem::size_of::<(u128, Seen)>() + 1)
            + self.order.capacity() * std::mem::size_of::<(i64, u128)>()
    }

    /// Checks the id of a message published at `publish_ms` and, when it is new, holds
    /// it for subtask `owner`.
    ///
    /// Errors when the set holds `max_ids` ids within their windows (the message is not
    /// held; the caller fails the job).
    pub fn check(&mut self, id: &str, publish_ms: i64, owner: usize) -> anyhow::Result<Check> {
        let h = id_hash(id);
        if self.ids.contains_key(&h) {
            return Ok(Check::Duplicate);
        }
        self.newest_ms = self.newest_ms.max(publish_ms);
        self.evict();
        if self.ids.len() >= self.max_ids {
            anyhow::bail!(
                "deduplication holds {} record ids seen within its window of {} s ('{}' = {}): raise '{}' or shorten '{}' (nothing was acknowledged)",
                self.ids.len(),
                self.window_ms / 1000,
                pubsub_table_options::DEDUP_MAX_IDS,
                self.max_ids,
                pubsub_table_options::DEDUP_MAX_IDS,
                pubsub_table_options::DEDUP_WINDOW,
            );
        }
        self.hold(h, publish_ms, owner as u32);
        Ok(Check::New(h))
    }

    fn hold(&mut self, h: u128, publish_ms: i64, owner: u32) {
        self.ids.insert(h, Seen { publish_ms, owner });
        self.order.push_back((publish_ms, h));
    }

    /// Takes out an id a message put in, when that message is released for redelivery
    /// (its rows were not emitted, so its redelivery must not count as a copy).
    pub fn forget(&mut self, h: u128) {
        self.ids.remove(&h);
    }

    /// Drops ids whose window ended, in arrival order.
    fn evict(&mut self) {
        let cutoff = self.newest_ms.saturating_sub(self.window_ms);
        while let Some(&(t, h)) = self.order.front() {
            if t >= cutoff {
                break;
            }
            self.order.pop_front();
            if self.ids.get(&h).is_some_and(|s| s.publish_ms == t) {
                self.ids.remove(&h);
            }
        }
    }

    /// The ids subtask `owner` holds, for its checkpoint state: base64 of 24 bytes each.
    pub fn snapshot(&self, owner: usize) -> serde_json::Value {
        let mut bytes = Vec::new();
        for (h, s) in &self.ids {
            if s.owner as usize == owner {
                bytes.extend_from_slice(&s.publish_ms.to_le_bytes());
                bytes.extend_from_slice(&h.to_le_bytes());
            }
        }
        serde_json::json!({
            "window_ms": self.window_ms,
            "ids": base64::engine::general_purpose::STANDARD.encode(bytes),
        })
    }

    /// Adds the ids of one restored subtask state (see [`Self::snapshot`]), owned by
    /// `owner` from now on.
    ///
    /// Errors on a state this version cannot read.
    pub fn restore(&mut self, state: &serde_json::Value, owner: usize) -> anyhow::Result<()> {
        let text = state["ids"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("the deduplication state has no ids"))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| anyhow::anyhow!("the deduplication state is not base64: {e}"))?;
        anyhow::ensure!(
            bytes.len() % ENTRY == 0,
            "the deduplication state holds {} bytes, not a multiple of {ENTRY}",
            bytes.len()
        );
        let mut entries: Vec<(i64, u128)> = bytes
            .chunks_exact(ENTRY)
            .map(|c| {
                let t = i64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
                let h = u128::from_le_bytes(c[8..].try_into().expect("16 bytes"));
                (t, h)
            })
            .collect();
        entries.sort_unstable();
        for (t, h) in entries {
            self.newest_ms = self.newest_ms.max(t);
            self.hold(h, t, owner as u32);
        }
        // Restored entries were appended by subtask; keep eviction in publish order.
        self.order.make_contiguous().sort_unstable();
        self.evict();
        Ok(())
    }
}

/// The sets of this process, by (job run, source operator id): the subtasks of one run of
/// one table share one; a restarted run builds a new one from its checkpoint.
type Registry = Mutex<HashMap<(u64, String), Weak<Mutex<SeenSet>>>>;

static SHARED: std::sync::LazyLock<Registry> = std::sync::LazyLock::new(Registry::default);

/// The set of source operator `operator_id` in run `run`, built by `make` (from the
/// restored states) by the first subtask that asks.
///
/// Errors: `make`'s.
pub fn shared(
    run: u64,
    operator_id: &str,
    make: impl FnOnce() -> anyhow::Result<SeenSet>,
) -> anyhow::Result<Arc<Mutex<SeenSet>>> {
    let mut map = SHARED.lock().expect("dedup registry lock");
    map.retain(|_, w| w.strong_count() > 0);
    let key = (run, operator_id.to_string());
    if let Some(set) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(set);
    }
    let set = Arc::new(Mutex::new(make()?));
    map.insert(key, Arc::downgrade(&set));
    Ok(set)
}

/// The new owner of the ids restored from old subtask `old` when the job now runs
/// `parallelism` subtasks (each id is owned by exactly one subtask, whatever the
/// parallelism was).
pub fn new_owner(old: usize, parallelism: usize) -> usize {
    old % parallelism.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000;

    #[test]
    fn a_copy_within_the_window_is_a_duplicate_and_after_it_is_new() {
        let mut s = SeenSet::new(60_000, 100);
        assert!(matches!(s.check("a", 0, 0).unwrap(), Check::New(_)));
        assert_eq!(s.check("a", 30 * S, 1).unwrap(), Check::Duplicate);
        assert!(matches!(s.check("b", 60 * S, 0).unwrap(), Check::New(_)));
        // `a` (published at 0) is remembered while the newest is at most 60 s later.
        assert_eq!(s.check("a", 60 * S, 0).unwrap(), Check::Duplicate);
        assert!(matches!(
            s.check("c", 60 * S + 1, 0).unwrap(),
            Check::New(_)
        ));
        assert!(matches!(s.check("a", 61 * S, 0).unwrap(), Check::New(_)));
        // An out-of-order late publish time does not move the window back.
        assert_eq!(s.check("c", 10 * S, 0).unwrap(), Check::Duplicate);
    }

    #[test]
    fn eviction_never_forgets_an_id_early() {
        // Arrival order differs from publish order: `late` (published at 50 s) arrives
        // before `early` (5 s). When the window passes `early`, `late` must stay.
        let mut s = SeenSet::new(10_000, 100);
        s.check("late", 50 * S, 0).unwrap();
        s.check("early", 5 * S, 0).unwrap();
        s.check("x", 58 * S, 0).unwrap();
        assert_eq!(s.check("late", 59 * S, 0).unwrap(), Check::Duplicate);
        // `early` ended its window long ago but waits behind `late`: kept longer, which
        // is allowed; `late` leaves only after 60 s.
        assert!(matches!(s.check("y", 61 * S, 0).unwrap(), Check::New(_)));
        assert!(matches!(s.check("late", 61 * S, 0).unwrap(), Check::New(_)));
    }

    #[test]
    fn the_bound_fails_loudly_and_forget_frees_an_id() {
        let mut s = SeenSet::new(60_000, 2);
        let Check::New(a) = s.check("a", 0, 0).unwrap() else {
            panic!("new")
        };
        s.check("b", 0, 0).unwrap();
        let e = s.check("c", 0, 0).unwrap_err().to_string();
        assert!(e.contains("'scan.dedup.max-ids' = 2"), "{e}");
        assert!(e.contains("scan.dedup.window"), "{e}");
        assert_eq!(s.len(), 2, "the refused id is not held");
        // A released message takes its id out: its redelivery is new again.
        s.forget(a);
        assert!(matches!(s.check("a", 0, 0).unwrap(), Check::New(_)));
        // An id whose window ended makes room.
        assert!(matches!(s.check("d", 61 * S, 0).unwrap(), Check::New(_)));
    }

    #[test]
    fn snapshots_split_by_owner_and_restore_under_a_new_parallelism() {
        let mut s = SeenSet::new(60_000, 100);
        for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            s.check(id, i as i64 * S, i % 3).unwrap();
        }
        let states: Vec<serde_json::Value> = (0..3).map(|o| s.snapshot(o)).collect();
        // 3 subtasks -> 2: every id is held again, each by one new owner.
        let mut r = SeenSet::new(60_000, 100);
        for (old, state) in states.iter().enumerate() {
            r.restore(state, new_owner(old, 2)).unwrap();
        }
        assert_eq!(r.len(), 5);
        for id in ["a", "b", "c", "d", "e"] {
            assert_eq!(r.check(id, 5 * S, 0).unwrap(), Check::Duplicate, "{id}");
        }
        let owned: usize = (0..2)
            .map(|o| {
                let b = base64::engine::general_purpose::STANDARD
                    .decode(r.snapshot(o)["ids"].as_str().unwrap())
                    .unwrap();
                b.len() / ENTRY
            })
            .sum();
        assert_eq!(owned, 5, "each id is in exactly one snapshot");
        // The window goes on from the restored publish times.
        assert!(matches!(r.check("f", 65 * S, 0).unwrap(), Check::New(_)));
        assert!(matches!(r.check("a", 65 * S, 0).unwrap(), Check::New(_)));
        assert!(r
            .restore(&serde_json::json!({"ids": "AAAA"}), 0)
            .unwrap_err()
            .to_string()
            .contains("multiple of 24"));
    }

    /// The figure the README and `scan.dedup.max-ids` state: about 100 bytes per id.
    #[test]
    fn an_id_costs_about_a_hundred_bytes() {
        let mut s = SeenSet::new(600_000, 1_000_000);
        for i in 0..1_000_000 {
            s.check(&format!("id-{i}"), i, 0).unwrap();
        }
        let per_id = s.table_bytes() / s.len();
        println!("{per_id} bytes per id at {} ids", s.len());
        assert!((60..=140).contains(&per_id), "{per_id} bytes per id");
    }

    #[test]
    fn subtasks_of_one_run_share_a_set_and_a_new_run_gets_its_own() {
        let a = shared(7, "source-t", || Ok(SeenSet::new(1000, 10))).unwrap();
        a.lock().unwrap().check("x", 0, 0).unwrap();
        let b = shared(7, "source-t", || panic!("already built")).unwrap();
        assert_eq!(
            b.lock().unwrap().check("x", 0, 1).unwrap(),
            Check::Duplicate
        );
        let c = shared(8, "source-t", || Ok(SeenSet::new(1000, 10))).unwrap();
        assert!(c.lock().unwrap().is_empty());
    }
}
