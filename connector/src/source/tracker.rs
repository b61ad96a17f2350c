//! The acknowledgement tracker (SPEC 5.2), per source subtask.
//!
//! A message moves: pending (received, handle held) -> staged (its rows were emitted) ->
//! bound to checkpoint `e` at the barrier -> acked on `Commit { e' >= e }`. Nothing else
//! ever acks. A redelivery of an id already tracked is a duplicate: its rows are not
//! emitted again and the older handle is released (nack) so it does not hold a lease twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A message id, allocated once per delivery and shared by the tracker's map, its staged
/// and bound lists and the reader's buffers (decision 0029).
pub type MessageId = Arc<str>;

/// What the tracker needs of a message handle.
pub trait AckHandle {
    fn ack(self);
    fn nack(self);
}

impl AckHandle for google_cloud_pubsub::subscriber::handler::Handler {
    fn ack(self) {
        google_cloud_pubsub::subscriber::handler::Handler::ack(self)
    }
    fn nack(self) {
        google_cloud_pubsub::subscriber::handler::Handler::nack(self)
    }
}

/// Whether a message's rows were emitted; which checkpoint a staged message is bound to is
/// kept in [`AckTracker::bound`] only, so binding touches no entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Pending,
    Staged,
}

struct Entry<H> {
    handle: H,
    bytes: usize,
    /// Publish time, Unix ms (`None`: the service sent none).
    published_ms: Option<i64>,
    stage: Stage,
}

/// Outcome of [`AckTracker::receive`].
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// First delivery: decode and emit it.
    New,
    /// Already tracked: do not emit again (its older handle was nacked).
    Duplicate,
}

/// Tracks every message held by one source subtask.
pub struct AckTracker<H: AckHandle> {
    /// By message id: service-assigned, so a fast seeded hash is safe (decision 0029).
    entries: HashMap<MessageId, Entry<H>, foldhash::fast::RandomState>,
    bound: BTreeMap<u64, Vec<MessageId>>,
    staged: Vec<MessageId>,
    bytes: usize,
    /// Publish times (Unix ms) of the held messages, with how many hold each: the oldest
    /// and newest in O(log n) for the age gauges.
    published: BTreeMap<i64, u32>,
}

impl<H: AckHandle> Default for AckTracker<H> {
    fn default() -> Self {
        AckTracker {
            entries: HashMap::default(),
            bound: BTreeMap::new(),
            staged: Vec::new(),
            bytes: 0,
            published: BTreeMap::new(),
        }
    }
}

impl<H: AckHandle> AckTracker<H> {
    /// Records a delivery of `message_id` (`bytes` = payload size, `published_ms` = its
    /// publish time in Unix ms) as pending.
    pub fn receive(
        &mut self,
        message_id: MessageId,
        handle: H,
        bytes: usize,
        published_ms: Option<i64>,
    ) -> Received {
        if let Some(e) = self.entries.get_mut(&message_id) {
            // Keep the newest ack ID: an older one may have expired with its lease.
            let old = std::mem::replace(&mut e.handle, handle);
            old.nack();
            return Received::Duplicate;
        }
        self.bytes += bytes;
        if let Some(t) = published_ms {
            *self.published.entry(t).or_default() += 1;
        }
        self.entries.insert(
            message_id,
            Entry {
                handle,
                bytes,
                published_ms,
                stage: Stage::Pending,
            },
        );
        Received::New
    }

    /// Forgets a removed entry's size and publish time.
    fn forget(&mut self, e: &Entry<H>) {
        self.bytes -= e.bytes;
        if let Some(t) = e.published_ms {
            if let std::collections::btree_map::Entry::Occupied(mut o) = self.published.entry(t) {
                *o.get_mut() -= 1;
                if *o.get() == 0 {
                    o.remove();
                }
            }
        }
    }

    /// Marks messages whose rows have been emitted into the dataflow.
    pub fn stage<'a>(&mut self, ids: impl IntoIterator<Item = &'a MessageId>) {
        for id in ids {
            if let Some(e) = self.entries.get_mut(id) {
                if e.stage == Stage::Pending {
                    e.stage = Stage::Staged;
                    self.staged.push(id.clone());
                }
            }
        }
    }

    /// Binds every staged message to checkpoint `epoch`. Returns how many.
    pub fn bind(&mut self, epoch: u64) -> usize {
        let ids = std::mem::take(&mut self.staged);
        let n = ids.len();
        match self.bound.entry(epoch) {
            _ if n == 0 => {}
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(ids);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => o.get_mut().extend(ids),
        }
        n
    }

    /// Checkpoint `epoch` committed: acks every message bound to an epoch `<= epoch`
    /// (which also heals a lost earlier commit). Returns how many were acked.
    pub fn commit(&mut self, epoch: u64) -> usize {
        self.commit_with(epoch, H::ack)
    }

    /// As [`Self::commit`], handing each committed handle to `ack` (e.g. to collect
    /// confirmations) instead of acking it fire-and-forget.
    pub fn commit_with(&mut self, epoch: u64, mut ack: impl FnMut(H)) -> usize {
        let later = self.bound.split_off(&(epoch + 1));
        let done = std::mem::replace(&mut self.bound, later);
        let mut n = 0;
        for id in done.into_values().flatten() {
            if let Some(e) = self.entries.remove(&id) {
                self.forget(&e);
                ack(e.handle);
                n += 1;
            }
        }
        n
    }

    /// Every id bound to a checkpoint and not yet acked.
    pub fn bound_ids(&self) -> impl Iterator<Item = &MessageId> {
        self.bound.values().flatten()
    }

    /// The ids a commit of `epoch` acks (bound to it or earlier).
    pub fn bound_until(&self, epoch: u64) -> Vec<MessageId> {
        self.bound
            .range(..=epoch)
            .flat_map(|(_, ids)| ids.iter().cloned())
            .collect()
    }

    /// Checkpoints with messages bound and not yet committed.
    pub fn pending_checkpoints(&self) -> usize {
        self.bound.len()
    }

    /// Nacks and forgets one pending message (e.g. one that arrived after the final barrier).
    pub fn release(&mut self, message_id: &str) -> bool {
        match self.entries.get(message_id).map(|e| e.stage) {
            Some(Stage::Pending) => {
                let e = self.entries.remove(message_id).expect("present");
                self.forget(&e);
                e.handle.nack();
                true
            }
            _ => false,
        }
    }

    /// Nacks everything still held (pending, staged and bound) so Pub/Sub redelivers it
    /// at once. Returns how many.
    pub fn release_all(&mut self) -> usize {
        let n = self.entries.len();
        for (_, e) in self.entries.drain() {
            e.handle.nack();
        }
        self.bound.clear();
        self.staged.clear();
        self.bytes = 0;
        self.published.clear();
        n
    }

    /// Messages held (all stages).
    pub fn held_messages(&self) -> usize {
        self.entries.len()
    }

    /// Payload bytes held (all stages).
    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    /// The publish times (Unix ms) of the oldest and the newest message held, or `None`
    /// when nothing held has one.
    pub fn publish_time_range(&self) -> Option<(i64, i64)> {
        let oldest = *self.published.keys().next()?;
        let newest = *self.published.keys().next_back()?;
        Some((oldest, newest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A fake handle recording what happened to it (no emulator needed for pure logic).
    struct Fake(&'static str, Rc<RefCell<Vec<String>>>);
    impl AckHandle for Fake {
        fn ack(self) {
            self.1.borrow_mut().push(format!("ack {}", self.0));
        }
        fn nack(self) {
            self.1.borrow_mut().push(format!("nack {}", self.0));
        }
    }

    #[test]
    fn acks_only_bound_messages_of_committed_epochs() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut t = AckTracker::default();
        for id in ["a", "b", "c"] {
            assert_eq!(
                t.receive(id.into(), Fake(id, log.clone()), 10, None),
                Received::New
            );
        }
        t.stage(&[MessageId::from("a")]);
        assert_eq!(t.bind(1), 1);
        t.stage(&[MessageId::from("b")]);
        // Commit of epoch 1 acks only a: b is staged but not bound, c is pending.
        assert_eq!(t.commit(1), 1);
        assert_eq!(*log.borrow(), vec!["ack a"]);
        assert_eq!(t.bind(2), 1);
        assert_eq!(t.commit(1), 0, "epoch 2 is not committed yet");
        assert_eq!((t.held_messages(), t.held_bytes()), (2, 20));
        // A commit of a later epoch acks earlier bound ones too (a lost commit heals).
        assert_eq!(t.commit(3), 1);
        assert_eq!(t.release_all(), 1);
        assert_eq!(*log.borrow(), vec!["ack a", "ack b", "nack c"]);
        assert_eq!(t.held_bytes(), 0);
    }

    #[test]
    fn redelivery_is_a_duplicate_and_releases_the_old_handle() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut t = AckTracker::default();
        t.receive("a".into(), Fake("old", log.clone()), 5, None);
        assert_eq!(
            t.receive("a".into(), Fake("new", log.clone()), 5, None),
            Received::Duplicate
        );
        assert_eq!(t.held_messages(), 1);
        t.stage(&[MessageId::from("a")]);
        t.bind(1);
        t.commit(1);
        assert_eq!(*log.borrow(), vec!["nack old", "ack new"]);
    }

    #[test]
    fn release_only_touches_pending() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut t = AckTracker::default();
        t.receive("a".into(), Fake("a", log.clone()), 1, None);
        t.receive("b".into(), Fake("b", log.clone()), 1, None);
        t.stage(&[MessageId::from("b")]);
        assert!(t.release("a"));
        assert!(!t.release("b"));
        assert_eq!(*log.borrow(), vec!["nack a"]);
    }

    #[test]
    fn the_publish_time_range_spans_what_is_held_until_it_is_acked_or_released() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut t = AckTracker::default();
        assert_eq!(t.publish_time_range(), None);
        // Two messages published in the same millisecond, one earlier, one later.
        for (id, ms) in [("a", 2_000), ("b", 1_000), ("c", 2_000), ("d", 3_000)] {
            t.receive(id.into(), Fake(id, log.clone()), 1, Some(ms));
        }
        t.receive("e".into(), Fake("e", log.clone()), 1, None);
        assert_eq!(t.publish_time_range(), Some((1_000, 3_000)));
        // A redelivery of a held message does not count twice.
        t.receive("b".into(), Fake("b2", log.clone()), 1, Some(1_000));
        t.stage(&[MessageId::from("b"), MessageId::from("d")]);
        t.bind(1);
        t.commit(1);
        assert_eq!(t.publish_time_range(), Some((2_000, 2_000)));
        assert!(t.release("a"));
        assert_eq!(
            t.publish_time_range(),
            Some((2_000, 2_000)),
            "c is still held"
        );
        assert!(t.release("c"));
        assert_eq!(t.publish_time_range(), None, "e has no publish time");
        t.receive("f".into(), Fake("f", log.clone()), 1, Some(5_000));
        t.release_all();
        assert_eq!(t.publish_time_range(), None);
    }
}
