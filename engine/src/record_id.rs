//! Stable record ids (issue 18, SPEC 11): the value a sink stamps on every message it
//! publishes for one row, the same on every replay of that row, so that a consumer
//! deduplicating on it sees each record once.
//!
//! Derivation, in three steps:
//! 1. The source gives each message a **record key**: the value of its deduplication
//!    attribute when it deduplicates on one and the message carries it (the upstream
//!    record id, so a record keeps its identity across hops, whichever copy arrives
//!    first), otherwise `SUBSCRIPTION/MESSAGE_ID` (the subscription's full path and the
//!    message id Pub/Sub assigned, which a redelivery keeps).
//! 2. Each row of the message gets `KEY#N`, N being the row's position among the
//!    message's decoded rows (before any WHERE), counted from 0.
//! 3. The query writing the row (`q0`, `q1`, ... in pipeline order, one per SELECT of a
//!    `UNION ALL`) makes the id: the first 16 bytes of BLAKE3 over
//!    `pubsub-connector record id v1`, NUL, the query id, NUL, `KEY#N`, as 32 lower-case
//!    hex digits.
//!
//! Nothing comes from a clock, a counter that restarts or the subtask, so a replay after
//! any restart or rescale gives the same ids. Editing the pipeline so that a query's
//! index changes, or reading through another subscription, changes them.

/// The metadata key a source fills with each row's `KEY#N` (step 2) when a sink of the
/// pipeline stamps record ids; never declared by users (`METADATA FROM` refuses it).
pub const RECORD_KEY: &str = "record-key";
/// The hidden source column holding [`RECORD_KEY`] (not visible to SQL).
pub const RECORD_KEY_COLUMN: &str = "__record_key";
/// The trailing column of a sink's rows holding each row's record id (step 3), present
/// only when the sink stamps them.
pub const RECORD_ID_COLUMN: &str = "__record_id";

const DOMAIN: &[u8] = b"pubsub-connector record id v1";

/// The record id of the row whose record key and position are `row_key` (`KEY#N`),
/// written by query `query`: 32 lower-case hex digits.
pub fn record_id(query: &str, row_key: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(DOMAIN);
    h.update(&[0]);
    h.update(query.as_bytes());
    h.update(&[0]);
    h.update(row_key.as_bytes());
    let bytes = h.finalize();
    let mut out = String::with_capacity(32);
    for b in &bytes.as_bytes()[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Step 2: the record key of row `position` of a message whose record key is `key`.
pub fn row_key(key: &str, position: usize) -> String {
    format!("{key}#{position}")
}

/// Step 1 without a deduplication attribute: the key of message `message_id` read from
/// `subscription` (its full path).
pub fn message_key(subscription: &str, message_id: &str) -> String {
    format!("{subscription}/{message_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_depends_on_the_query_the_key_and_the_row_only() {
        let key = message_key("projects/p/subscriptions/s", "123");
        let a = record_id("q0", &row_key(&key, 0));
        // The same inputs give the same id (a replay), in the documented form.
        assert_eq!(a, record_id("q0", &row_key(&key, 0)));
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        // Fixed by the derivation: a change of hash, domain or layout breaks it.
        assert_eq!(a, record_id("q0", "projects/p/subscriptions/s/123#0"));
        // Every input matters: the row, the message, the subscription, the query.
        let others = [
            record_id("q0", &row_key(&key, 1)),
            record_id(
                "q0",
                &row_key(&message_key("projects/p/subscriptions/s", "124"), 0),
            ),
            record_id(
                "q0",
                &row_key(&message_key("projects/p/subscriptions/t", "123"), 0),
            ),
            record_id("q1", &row_key(&key, 0)),
        ];
        for o in &others {
            assert_ne!(&a, o);
        }
        // The NUL separators keep the query and the key apart.
        assert_ne!(record_id("q1", "0#0"), record_id("q", "10#0"));
    }

    #[test]
    fn an_upstream_id_keeps_its_record_across_copies() {
        // Two copies of one upstream record (different message ids, same attribute)
        // give one id; two records give two.
        let first = record_id("q0", &row_key("9f2c", 0));
        assert_eq!(first, record_id("q0", &row_key("9f2c", 0)));
        assert_ne!(first, record_id("q0", &row_key("9f2d", 0)));
    }
}
