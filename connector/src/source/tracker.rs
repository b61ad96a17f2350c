//! The acknowledgement tracker (SPEC 5.2), per source subtask.
//!
//! A message moves: pending (received, handle held) -> staged (its rows were emitted) ->
//! bound to checkpoint `e` at the barrier -> acked on `Commit { e' >= e }`. Nothing else
//! ever acks. A redelivery of an id already tracked is a duplicate: its rows are not
//! emitted again and the older handle is released (nack) so it does not hold a lease twice.

use std::collections::{BTreeMap, HashMap};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Pending,
    Staged,
    Bound(u64),
}

struct Entry<H> {
    handle: H,
    bytes: usize,
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
    entries: HashMap<String, Entry<H>>,
    bound: BTreeMap<u64, Vec<String>>,
    staged: Vec<String>,
    bytes: usize,
}

impl<H: AckHandle> Default for AckTracker<H> {
    fn default() -> Self {
        AckTracker {
            entries: HashMap::new(),
            bound: BTreeMap::new(),
            staged: Vec::new(),
            bytes: 0,
        }
    }
}

impl<H: AckHandle> AckTracker<H> {
    /// Records a delivery of `message_id` (`bytes` = payload size) as pending.
    pub fn receive(&mut self, message_id: String, handle: H, bytes: usize) -> Received {
        if let Some(e) = self.entries.get_mut(&message_id) {
            // Keep the newest ack ID: an older one may have expired with its lease.
            let old = std::mem::replace(&mut e.handle, handle);
            old.nack();
            return Received::Duplicate;
        }
        self.bytes += bytes;
        self.entries.insert(
            message_id,
            Entry {
                handle,
                bytes,
                stage: Stage::Pending,
            },
        );
        Received::New
    }

    /// Marks messages whose rows have been emitted into the dataflow.
    pub fn stage<'a>(&mut self, ids: impl IntoIterator<Item = &'a String>) {
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
        for id in &ids {
            if let Some(e) = self.entries.get_mut(id) {
                e.stage = Stage::Bound(epoch);
            }
        }
        let n = ids.len();
        if n > 0 {
            self.bound.entry(epoch).or_default().extend(ids);
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
                self.bytes -= e.bytes;
                ack(e.handle);
                n += 1;
            }
        }
        n
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
                self.bytes -= e.bytes;
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
                t.receive(id.into(), Fake(id, log.clone()), 10),
                Received::New
            );
        }
        t.stage(&["a".to_string()]);
        assert_eq!(t.bind(1), 1);
        t.stage(&["b".to_string()]);
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
        t.receive("a".into(), Fake("old", log.clone()), 5);
        assert_eq!(
            t.receive("a".into(), Fake("new", log.clone()), 5),
            Received::Duplicate
        );
        assert_eq!(t.held_messages(), 1);
        t.stage(&["a".to_string()]);
        t.bind(1);
        t.commit(1);
        assert_eq!(*log.borrow(), vec!["nack old", "ack new"]);
    }

    #[test]
    fn release_only_touches_pending() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut t = AckTracker::default();
        t.receive("a".into(), Fake("a", log.clone()), 1);
        t.receive("b".into(), Fake("b", log.clone()), 1);
        t.stage(&["b".to_string()]);
        assert!(t.release("a"));
        assert!(!t.release("b"));
        assert_eq!(*log.borrow(), vec!["nack a"]);
    }
}
