//! Deduplication by a record id (a Pub/Sub source's `scan.dedup.*`, docs "Exactly once
//! across pipelines"): the set of ids seen, used in two places (decision 0046).
//!
//! - **One process**: one [`SeenSet`] per source table and process, shared by its
//!   subtasks (a copy of a record may reach any subtask), checked as a message is
//!   decoded. An id goes in before the barrier of the epoch its rows are emitted in, and
//!   each subtask snapshots the ids it owns at its barrier; so a checkpoint holds exactly
//!   the ids of messages whose rows it covers. An id whose message is released (nacked)
//!   again is taken out.
//! - **A cluster**: the rows go through the keyed exchange, hashed by their record's id,
//!   and each query's sink operator keeps a set for the ids its worker owns. Rows are
//!   checked as they arrive, whatever their epoch, so each id is tagged with the epoch
//!   that put it in and, while that epoch is open, the message: the snapshot of epoch `e` holds the ids of epochs
//!   `<= e` only ([`SeenSet::snapshot_through`]), and the other rows of that message are
//!   told from a copy's ([`Check::SameMessage`]).
//!
//! Both hold one id per record (its hash), in one checkpoint form, so a job moves
//! between one process and a cluster without forgetting.
//!
//! An id is stored as the first 16 bytes of its BLAKE3 hash (two ids colliding is a
//! 2^-128 event per pair), with the publish time of the copy that put it there, the
//! subtask that owns it for checkpoints and the epoch that put it there.
//!
//! The guarantee (issue 31, item 3), with W the window and N the newest publish time the
//! set has seen: a copy is dropped when it was published within W of the copy that put
//! its id in, and, when delivered, is at most W behind N (its *lag*). Ids are therefore
//! held while their publish time is within 2W of N (a first copy is at most W older than
//! its copy, which is at most W behind N), in publish-time order whatever the arrival
//! order, so a backlog delivered out of order within W loses no copy. A message more
//! than W behind N is still checked against the ids held but counted as behind the
//! window: a copy of it may pass. Only held ids count toward `max_ids`.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, Weak};

use base64::Engine;

/// Counter: messages dropped as copies of a record already seen (`scan.dedup.*`),
/// acknowledged with the next checkpoint. In a cluster, counted by the sink operator of
/// the first query reading the table, once per message (its row `#0`).
pub const MESSAGES_DEDUPLICATED: &str = "messages_deduplicated";
/// Counter: messages delivered more than `scan.dedup.window` behind the newest publish
/// time the table has seen: checked against the ids held, but outside the guarantee (a
/// copy of one may pass).
pub const MESSAGES_BEHIND_DEDUP_WINDOW: &str = "messages_behind_dedup_window";

/// The metadata key a deduplicating source fills with each row's key (`ID#N`, the
/// record's id and the row's position, as [`pubsub_engine_types::record_id::RECORD_KEY`] does), or
/// NULL for a message without an id: the cluster's exchange hashes its `ID`.
pub const DEDUP_KEY: &str = "dedup-key";
/// The hidden source column holding [`DEDUP_KEY`].
pub const DEDUP_KEY_COLUMN: &str = "__dedup_key";
/// The metadata key a deduplicating source fills with each row's message identity
/// (subscription and message id, which a redelivery keeps).
pub const DEDUP_MESSAGE: &str = "dedup-message";
/// The hidden source column holding [`DEDUP_MESSAGE`].
pub const DEDUP_MESSAGE_COLUMN: &str = "__dedup_message";
/// The metadata key a deduplicating source fills with each row's message publish time.
pub const DEDUP_PUBLISHED: &str = "dedup-published";
/// The hidden source column holding [`DEDUP_PUBLISHED`] (TIMESTAMP, ns).
pub const DEDUP_PUBLISHED_COLUMN: &str = "__dedup_published";

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
    /// The epoch that put it in, saturated at `u32::MAX` (about 136 years of 1 s
    /// checkpoints); 0 where snapshots do not filter by epoch (one process) and for ids
    /// restored from a checkpoint.
    epoch: u32,
}

/// What a source table deduplicates with: its window and bound, and the names of the
/// options setting them (for errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupSpec {
    /// Ids are held while published within twice this of the newest (ms).
    pub window_ms: u64,
    /// The most ids one set holds; reaching it fails the job.
    pub max_ids: u64,
    /// The option setting `window_ms` (e.g. `scan.dedup.window`).
    pub window_option: &'static str,
    /// The option setting `max_ids` (e.g. `scan.dedup.max-ids`).
    pub max_ids_option: &'static str,
    /// The option that turns deduplication on (e.g. `scan.dedup.attribute`).
    pub attribute_option: &'static str,
}

/// What [`SeenSet::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No copy held: the id is now held (by this hash). `behind`: the message is more
    /// than the window behind the newest publish time seen, so its first copy may have
    /// been forgotten (outside the guarantee; counted).
    New { hash: u128, behind: bool },
    /// A copy of a record already seen: acknowledge it, emit nothing.
    Duplicate,
    /// Another row of the message that put the id in, in the same epoch (a message's
    /// rows are emitted together, but may reach the check in several batches): kept.
    SameMessage,
}

/// The ids seen by the subtasks of one source table in one process, or by one worker's
/// sink operator of a query in a cluster.
#[derive(Debug)]
pub struct SeenSet {
    window_ms: i64,
    max_ids: usize,
    window_option: &'static str,
    max_ids_option: &'static str,
    ids: HashMap<u128, Seen, BuildHasherDefault<IdHasher>>,
    /// The message (a hash of its delivery) that put each id of an epoch still open in
    /// (a cluster only): its other rows in that epoch are no copy. Dropped once the
    /// epoch is complete ([`Self::close_epochs_before`]), so the ids held cost no more.
    open: HashMap<u128, u64, BuildHasherDefault<IdHasher>>,
    /// (publish ms, id), oldest first, for eviction; an entry whose id was taken out is
    /// skipped when it comes up.
    expiry: BinaryHeap<Reverse<(i64, u128)>>,
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
    /// An empty set remembering ids for `spec.window_ms` of publish time, at most
    /// `spec.max_ids`.
    pub fn new(spec: &DedupSpec) -> SeenSet {
        SeenSet {
            window_ms: i64::try_from(spec.window_ms).unwrap_or(i64::MAX),
            max_ids: usize::try_from(spec.max_ids).unwrap_or(usize::MAX),
            window_option: spec.window_option,
            max_ids_option: spec.max_ids_option,
            ids: HashMap::default(),
            open: HashMap::default(),
            expiry: BinaryHeap::new(),
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
            + self.open.capacity() * (std::mem::size_of::<(u128, u64)>() + 1)
            + self.expiry.capacity() * std::mem::size_of::<(i64, u128)>()
    }

    /// Checks the id of a message published at `publish_ms` and, when it is new, holds
    /// it for subtask `owner`.
    ///
    /// Errors when the set holds `max_ids` ids, every one still needed by the guarantee
    /// (the message is not held; the caller fails the job, which a restart may clear
    /// once newer messages move the window on).
    pub fn check(&mut self, id: &str, publish_ms: i64, owner: usize) -> anyhow::Result<Check> {
        self.check_hash(id_hash(id), publish_ms, owner, 0, 0)
    }

    /// [`Self::check`] of an id already hashed ([`id_hash`]), for a row of message
    /// `message` (a hash of its delivery, never 0; 0: unknown) in epoch `epoch`, which
    /// put the id in when new.
    pub fn check_hash(
        &mut self,
        h: u128,
        publish_ms: i64,
        owner: usize,
        epoch: u64,
        message: u64,
    ) -> anyhow::Result<Check> {
        let epoch = u32::try_from(epoch).unwrap_or(u32::MAX);
        if let Some(s) = self.ids.get(&h) {
            if message != 0 && s.epoch == epoch && self.open.get(&h) == Some(&message) {
                return Ok(Check::SameMessage);
            }
            return Ok(Check::Duplicate);
        }
        self.newest_ms = self.newest_ms.max(publish_ms);
        self.evict();
        if self.ids.len() >= self.max_ids {
            anyhow::bail!(
                "deduplication holds {} record ids, every one published within twice its window of {} s of the newest message seen ('{}' = {}): raise '{}' or shorten '{}' (nothing was acknowledged)",
                self.ids.len(),
                self.window_ms / 1000,
                self.max_ids_option,
                self.max_ids,
                self.max_ids_option,
                self.window_option,
            );
        }
        let behind = publish_ms < self.newest_ms.saturating_sub(self.window_ms);
        self.hold(h, publish_ms, owner as u32, epoch);
        if message != 0 {
            self.open.insert(h, message);
        }
        Ok(Check::New { hash: h, behind })
    }

    /// Forgets which message put in the ids of epochs before `epoch`, which are complete:
    /// no row of theirs comes any more.
    pub fn close_epochs_before(&mut self, epoch: u64) {
        let before = u32::try_from(epoch).unwrap_or(u32::MAX);
        let ids = &self.ids;
        self.open
            .retain(|h, _| ids.get(h).is_some_and(|s| s.epoch >= before));
    }

    fn hold(&mut self, h: u128, publish_ms: i64, owner: u32, epoch: u32) {
        self.ids.insert(
            h,
            Seen {
                publish_ms,
                owner,
                epoch,
            },
        );
        self.expiry.push(Reverse((publish_ms, h)));
    }

    /// Takes out an id a message put in, when that message is released for redelivery
    /// (its rows were not emitted, so its redelivery must not count as a copy).
    pub fn forget(&mut self, h: u128) {
        self.ids.remove(&h);
        self.open.remove(&h);
    }

    /// Drops every id published more than twice the window before the newest publish
    /// time seen (no copy the guarantee covers can match it any more), oldest first.
    fn evict(&mut self) {
        let cutoff = self
            .newest_ms
            .saturating_sub(self.window_ms.saturating_mul(2));
        while let Some(&Reverse((t, h))) = self.expiry.peek() {
            if t >= cutoff {
                break;
            }
            self.expiry.pop();
            if self.ids.get(&h).is_some_and(|s| s.publish_ms == t) {
                self.ids.remove(&h);
            }
        }
    }

    /// The ids subtask `owner` holds, for its checkpoint state: base64 of 24 bytes each.
    pub fn snapshot(&self, owner: usize) -> serde_json::Value {
        self.snapshot_through(owner, u64::MAX)
    }

    /// The ids subtask `owner` holds that epochs up to `epoch` put in (see the module
    /// docs), in [`Self::snapshot`]'s form.
    pub fn snapshot_through(&self, owner: usize, epoch: u64) -> serde_json::Value {
        let through = u32::try_from(epoch).unwrap_or(u32::MAX);
        let mut bytes = Vec::new();
        for (h, s) in &self.ids {
            if s.owner as usize == owner && s.epoch <= through {
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
        self.restore_owned(state, |_| Some(owner))
    }

    /// Adds the ids of one restored state that `owner_of` gives an owner (by hash),
    /// skipping the others; each id counts as put in by epoch 0 (it is in a completed
    /// checkpoint).
    ///
    /// Errors on a state this version cannot read.
    pub fn restore_owned(
        &mut self,
        state: &serde_json::Value,
        owner_of: impl Fn(u128) -> Option<usize>,
    ) -> anyhow::Result<()> {
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
            let Some(owner) = owner_of(h) else { continue };
            self.newest_ms = self.newest_ms.max(t);
            self.hold(h, t, owner as u32, 0);
        }
        self.evict();
        Ok(())
    }
}

/// The record id of row key `ID#N` (see [`DEDUP_KEY`]).
pub fn id_of_row_key(key: &str) -> &str {
    key.rsplit_once('#').map_or(key, |(id, _)| id)
}

/// The worker of `peers` that owns id hash `h` in a cluster (the keyed exchange's rule:
/// the same in every process and after any change of worker or process count).
pub fn owner_of(h: u128, peers: u64) -> u64 {
    (h as u64) % peers.max(1)
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

    fn spec(window_ms: u64, max_ids: u64) -> DedupSpec {
        DedupSpec {
            window_ms,
            max_ids,
            window_option: "scan.dedup.window",
            max_ids_option: "scan.dedup.max-ids",
            attribute_option: "scan.dedup.attribute",
        }
    }

    fn is_new(c: Check) -> bool {
        matches!(c, Check::New { .. })
    }

    #[test]
    fn a_copy_within_the_window_is_a_duplicate_and_far_behind_it_is_new() {
        let mut s = SeenSet::new(&spec(60_000, 100));
        assert!(is_new(s.check("a", 0, 0).unwrap()));
        assert_eq!(s.check("a", 30 * S, 1).unwrap(), Check::Duplicate);
        assert!(is_new(s.check("b", 120 * S, 0).unwrap()));
        // `a` (published at 0) is held while the newest is at most 2 windows later: a
        // copy of it published at 60 s may still come, at most 60 s behind.
        assert_eq!(s.check("a", 60 * S, 0).unwrap(), Check::Duplicate);
        assert!(is_new(s.check("c", 120 * S + 1, 0).unwrap()));
        assert_eq!(
            s.check("a", 121 * S, 0).unwrap(),
            Check::New {
                hash: id_hash("a"),
                behind: false
            }
        );
        // An out-of-order late publish time does not move the window back.
        assert_eq!(s.check("c", 10 * S, 0).unwrap(), Check::Duplicate);
    }

    /// Issue 31, item 3: a backlog delivered out of publish order. Each record `rI` is
    /// published at I s and copied W later; the messages arrive shuffled, each at most W
    /// behind the newest seen. Every copy is dropped: before, an id left once the newest
    /// publish time seen anywhere was W past it, so a copy arriving after a younger
    /// message passed (67 of 200 copies with this seed).
    #[test]
    fn a_backlog_out_of_order_within_the_window_drops_every_copy() {
        const W: i64 = 10 * S;
        let mut messages: Vec<(String, i64)> = (0..200)
            .flat_map(|i| {
                let t = i64::from(i) * S / 4;
                [(format!("r{i}"), t), (format!("r{i}"), t + W)]
            })
            .collect();
        messages.sort_by_key(|(_, t)| *t);
        // Shuffled (Fisher-Yates, a fixed xorshift) within blocks of 10 s of publish
        // time, so no message lags the newest by more than W.
        let mut x: u64 = 31;
        for block in messages.chunks_mut(40) {
            for i in (1..block.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                block.swap(i, (x % (i as u64 + 1)) as usize);
            }
        }
        let mut s = SeenSet::new(&spec(W as u64, 1_000));
        let (mut new, mut dropped, mut newest) = (0, 0, i64::MIN);
        for (id, t) in &messages {
            newest = newest.max(*t);
            assert!(newest - t <= W, "the test keeps every lag within W");
            match s.check(id, *t, 0).unwrap() {
                Check::New { behind, .. } => {
                    assert!(!behind);
                    new += 1;
                }
                Check::Duplicate => dropped += 1,
                Check::SameMessage => panic!("no message is known here"),
            }
        }
        assert_eq!((new, dropped), (200, 200));
    }

    #[test]
    fn a_message_further_behind_than_the_window_is_flagged() {
        let mut s = SeenSet::new(&spec(10_000, 100));
        s.check("x", 100 * S, 0).unwrap();
        let late = s.check("y", 89 * S, 0).unwrap();
        assert!(matches!(late, Check::New { behind: true, .. }), "{late:?}");
        let close = s.check("z", 90 * S, 0).unwrap();
        assert!(
            matches!(close, Check::New { behind: false, .. }),
            "{close:?}"
        );
    }

    /// Issue 31, item 3: ids whose retention ended count toward `max_ids` no more, in
    /// whatever order they arrived (before, eviction stopped at the first young id in
    /// arrival order, and the job failed on expired ids behind it).
    #[test]
    fn expired_ids_behind_a_younger_arrival_do_not_count() {
        let mut s = SeenSet::new(&spec(10_000, 3));
        s.check("young", 50 * S, 0).unwrap();
        s.check("old1", 1 * S, 0).unwrap();
        s.check("old2", 2 * S, 0).unwrap();
        // At 55 s `old1` and `old2` are more than 2 W behind (`young` is not): room for a
        // new id (eviction in arrival order stopped at `young` and failed here).
        assert!(is_new(s.check("next", 55 * S, 0).unwrap()));
        assert_eq!(s.len(), 2, "young and next");
    }

    #[test]
    fn the_bound_fails_loudly_and_forget_frees_an_id() {
        let mut s = SeenSet::new(&spec(60_000, 2));
        let Check::New { hash: a, .. } = s.check("a", 0, 0).unwrap() else {
            panic!("new")
        };
        s.check("b", 0, 0).unwrap();
        let e = s.check("c", 0, 0).unwrap_err().to_string();
        assert!(e.contains("'scan.dedup.max-ids' = 2"), "{e}");
        assert!(e.contains("scan.dedup.window"), "{e}");
        assert_eq!(s.len(), 2, "the refused id is not held");
        // A released message takes its id out: its redelivery is new again.
        s.forget(a);
        assert!(is_new(s.check("a", 0, 0).unwrap()));
        // An id whose retention ended makes room.
        assert!(is_new(s.check("d", 121 * S, 0).unwrap()));
    }

    #[test]
    fn snapshots_split_by_owner_and_restore_under_a_new_parallelism() {
        let mut s = SeenSet::new(&spec(60_000, 100));
        for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            s.check(id, i as i64 * S, i % 3).unwrap();
        }
        let states: Vec<serde_json::Value> = (0..3).map(|o| s.snapshot(o)).collect();
        // 3 subtasks -> 2: every id is held again, each by one new owner.
        let mut r = SeenSet::new(&spec(60_000, 100));
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
        assert!(is_new(r.check("f", 125 * S, 0).unwrap()));
        assert!(is_new(r.check("a", 125 * S, 0).unwrap()));
        assert!(r
            .restore(&serde_json::json!({"ids": "AAAA"}), 0)
            .unwrap_err()
            .to_string()
            .contains("multiple of 24"));
    }

    /// In a cluster rows are checked as they arrive: an id a later epoch put in is not in
    /// an earlier epoch's snapshot (its rows are not covered by that checkpoint, and a
    /// replay after a restore from it must write them), and a restore keeps only the ids
    /// a worker owns.
    #[test]
    fn a_snapshot_through_an_epoch_holds_the_ids_of_that_epoch_and_before() {
        let mut s = SeenSet::new(&spec(60_000, 100));
        let ids: Vec<u128> = (0..40).map(|i| id_hash(&format!("k{i}#0"))).collect();
        for (i, h) in ids.iter().enumerate() {
            let epoch = 5 + (i % 2) as u64;
            assert!(is_new(
                s.check_hash(*h, i as i64, 0, epoch, i as u64 + 1).unwrap()
            ));
        }
        // A copy in an earlier epoch than its first arrival is still a copy.
        assert_eq!(
            s.check_hash(ids[1], 50, 0, 5, 99).unwrap(),
            Check::Duplicate
        );
        // Another row of the message that put it in, in its epoch: kept; in a later
        // epoch (a redelivery) or with no message known: a copy.
        assert_eq!(
            s.check_hash(ids[1], 1, 0, 6, 2).unwrap(),
            Check::SameMessage
        );
        assert_eq!(s.check_hash(ids[1], 1, 0, 7, 2).unwrap(), Check::Duplicate);
        assert_eq!(s.check_hash(ids[1], 1, 0, 6, 0).unwrap(), Check::Duplicate);
        // Once epoch 6 is complete, no row of its messages comes any more.
        s.close_epochs_before(7);
        assert!(s.open.is_empty());
        assert_eq!(s.check_hash(ids[1], 1, 0, 6, 2).unwrap(), Check::Duplicate);
        let count = |v: &serde_json::Value| {
            base64::engine::general_purpose::STANDARD
                .decode(v["ids"].as_str().unwrap())
                .unwrap()
                .len()
                / ENTRY
        };
        assert_eq!(count(&s.snapshot_through(0, 4)), 0);
        assert_eq!(count(&s.snapshot_through(0, 5)), 20);
        assert_eq!(count(&s.snapshot_through(0, 6)), 40);
        // Restored on 3 workers: each keeps the ids it owns, all of them once.
        let state = s.snapshot_through(0, 6);
        let mut held = 0;
        for w in 0..3u64 {
            let mut r = SeenSet::new(&spec(60_000, 100));
            r.restore_owned(&state, |h| (owner_of(h, 3) == w).then_some(w as usize))
                .unwrap();
            for h in &ids {
                let owned = owner_of(*h, 3) == w;
                let c = r.check_hash(*h, 60, w as usize, 7, 1).unwrap();
                assert_eq!(c == Check::Duplicate, owned);
            }
            held += ids.iter().filter(|h| owner_of(**h, 3) == w).count();
        }
        assert_eq!(held, 40);
    }

    /// The figure docs/options.md and `scan.dedup.max-ids` state: about 100 bytes per id.
    #[test]
    fn an_id_costs_about_a_hundred_bytes() {
        let mut s = SeenSet::new(&spec(600_000, 1_000_000));
        for i in 0..1_000_000 {
            s.check(&format!("id-{i}"), i, 0).unwrap();
        }
        let per_id = s.table_bytes() / s.len();
        println!("{per_id} bytes per id at {} ids", s.len());
        assert!((60..=140).contains(&per_id), "{per_id} bytes per id");
    }

    #[test]
    fn subtasks_of_one_run_share_a_set_and_a_new_run_gets_its_own() {
        let a = shared(7, "source-t", || Ok(SeenSet::new(&spec(1000, 10)))).unwrap();
        a.lock().unwrap().check("x", 0, 0).unwrap();
        let b = shared(7, "source-t", || panic!("already built")).unwrap();
        assert_eq!(
            b.lock().unwrap().check("x", 0, 1).unwrap(),
            Check::Duplicate
        );
        let c = shared(8, "source-t", || Ok(SeenSet::new(&spec(1000, 10)))).unwrap();
        assert!(c.lock().unwrap().is_empty());
    }
}
