//! Replays of messages a restored checkpoint already holds (issue 32, item 5), for a table
//! read by a windowed query: its state counts each message once, so a redelivery of a
//! message it already counted must not be counted again.
//!
//! Acks go out after the checkpoint commits, fire-and-forget: after a crash, messages of
//! the last checkpoint (bound, not yet acked) and messages whose ack had not reached the
//! service yet come back. Each snapshot therefore lists the ids of messages bound and not
//! acked, and of those acked in the last [`ACK_GRACE`]; a restored subtask acks a
//! delivery of a listed id at once and emits nothing for it (counted as
//! `messages_replayed`). This is the reference Flink source's "ids processed but not
//! acknowledged" state, bounded in time.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use pubsub_engine_spi::OperatorState;
use tokio::time::Instant;

use crate::source::tracker::MessageId;

/// Key of the listed ids in a subtask's state (a JSON array of message ids).
pub(super) const STATE_KEY: &str = "replayed_ids";

/// How long the ids of acked messages stay listed: an ack is sent within a second or so
/// of its commit; a minute covers a slow client.
const ACK_GRACE: Duration = Duration::from_secs(60);

/// How long a restored subtask watches for listed ids: a message whose ack was lost
/// comes back once its lease runs out, at most 600 s (Pub/Sub's longest ack deadline),
/// plus a margin.
const WATCH: Duration = Duration::from_secs(20 * 60);

pub(super) struct Replays {
    /// Ids of the restored checkpoint (every subtask's: a redelivery may reach any).
    restored: HashSet<Box<str>>,
    watch_until: Instant,
    /// Ids acked recently, by when.
    acked: VecDeque<(Instant, Vec<MessageId>)>,
}

impl Replays {
    /// From the restored snapshots of every subtask.
    pub(super) fn restore<'a>(states: impl IntoIterator<Item = &'a OperatorState>) -> Self {
        let restored = states
            .into_iter()
            .filter_map(|s| s.values.get(STATE_KEY)?.as_array().cloned())
            .flatten()
            .filter_map(|v| v.as_str().map(Box::from))
            .collect();
        Replays {
            restored,
            watch_until: Instant::now() + WATCH,
            acked: VecDeque::new(),
        }
    }

    /// Whether `id` is a message the restored checkpoint holds (each id once: a second
    /// delivery of it is tracked as any message is).
    pub(super) fn is_replay(&mut self, id: &str) -> bool {
        if self.restored.is_empty() {
            return false;
        }
        if Instant::now() > self.watch_until {
            self.restored = HashSet::new();
            return false;
        }
        self.restored.remove(id)
    }

    /// `ids` were acked now.
    pub(super) fn acked(&mut self, ids: Vec<MessageId>) {
        let now = Instant::now();
        while self
            .acked
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > ACK_GRACE)
        {
            self.acked.pop_front();
        }
        if !ids.is_empty() {
            self.acked.push_back((now, ids));
        }
    }

    /// The ids a checkpoint lists: `bound` (bound to it or earlier, not acked), those
    /// acked in the last [`ACK_GRACE`], and restored ones still watched for.
    pub(super) fn snapshot<'a>(
        &self,
        bound: impl Iterator<Item = &'a MessageId>,
    ) -> serde_json::Value {
        let now = Instant::now();
        let mut ids: Vec<serde_json::Value> = bound
            .map(|id| serde_json::Value::from(id.as_ref()))
            .collect();
        for (t, acked) in &self.acked {
            if now.saturating_duration_since(*t) <= ACK_GRACE {
                ids.extend(acked.iter().map(|id| serde_json::Value::from(id.as_ref())));
            }
        }
        if now <= self.watch_until {
            ids.extend(
                self.restored
                    .iter()
                    .map(|id| serde_json::Value::from(id.as_ref())),
            );
        }
        serde_json::Value::Array(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn listed_ids_are_replays_once_and_acked_ids_stay_listed_for_the_grace() {
        let mut first = Replays::restore([]);
        first.acked(vec![MessageId::from("a")]);
        let bound = [MessageId::from("b")];
        let snap = first.snapshot(bound.iter());
        let state = OperatorState {
            values: [(STATE_KEY.to_string(), snap)].into(),
        };
        let mut next = Replays::restore([&state]);
        assert!(next.is_replay("a"), "acked within the grace");
        assert!(next.is_replay("b"), "bound, not acked");
        assert!(!next.is_replay("b"), "once");
        assert!(!next.is_replay("c"));
    }
}
