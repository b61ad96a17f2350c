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
//!    message's decoded rows (before any WHERE), counted from 0. A row `UNNEST` expands
//!    from it gets `KEY#N#E`, E being its element's position in the list, from 0.
//! 3. The [`RecordProducer`] writing the row (the job, the sink table, the query's index
//!    `q0`, `q1`, ... in pipeline order, one per SELECT of a `UNION ALL`, and the query's
//!    statement in canonical form) makes the id: the first 16 bytes of BLAKE3 over
//!    `pubsub-connector record id v2`, then each of the job id, the sink table's name, the
//!    query id, the statement and `KEY#N` after its length in bytes (u64, little endian),
//!    as 32 lower-case hex digits. The lengths keep the parts apart whatever they hold.
//!
//! Nothing comes from a clock, a counter that restarts or the subtask, so a replay after
//! any restart or rescale gives the same ids. Two jobs, two sinks or two different
//! statements never give one row key the same id, so two pipelines deduplicating on one
//! upstream id and writing different rows to one topic keep both (issue 31, item 2), even
//! when their files share a name (and so a default job id). Renaming the job or the sink
//! table, or editing a query (its text or its index), changes its ids.

/// The metadata key a source fills with each row's `KEY#N` (step 2) when a sink of the
/// pipeline stamps record ids; never declared by users (`METADATA FROM` refuses it).
pub const RECORD_KEY: &str = "record-key";
/// The hidden source column holding [`RECORD_KEY`] (not visible to SQL).
pub const RECORD_KEY_COLUMN: &str = "__record_key";
/// The trailing column of a sink's rows holding each row's record id (step 3), present
/// only when the sink stamps them.
pub const RECORD_ID_COLUMN: &str = "__record_id";

const DOMAIN: &[u8] = b"pubsub-connector record id v2";

/// What writes a row, for its record id (step 3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecordProducer {
    /// The job id (`RuntimeConfig::job_id`), the same on every run of the pipeline.
    pub job: String,
    /// The sink table's name.
    pub sink: String,
    /// The query's id within the pipeline (`q0`, `q1`, ...).
    pub query: String,
    /// The query's statement in canonical form (as sqlparser prints it, so comments and
    /// whitespace do not count).
    pub statement: String,
}

/// The record id of the row whose record key and position are `row_key` (`KEY#N`),
/// written by `producer`: 32 lower-case hex digits.
pub fn record_id(producer: &RecordProducer, row_key: &str) -> String {
    let mut h = blake3::Hasher::new();
    h.update(DOMAIN);
    let parts = [
        producer.job.as_str(),
        &producer.sink,
        &producer.query,
        &producer.statement,
        row_key,
    ];
    for part in parts {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let bytes = h.finalize();
    let mut out = String::with_capacity(32);
    for b in &bytes.as_bytes()[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Checks a job id: 1 to 128 characters, each an ASCII letter or digit, `.`, `_` or `-`
/// (it names a state directory and enters record ids). Errors say which rule failed.
pub fn check_job_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err(format!(
            "job id '{id}' must have 1 to 128 characters, has {}",
            id.chars().count()
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "job id '{id}' holds {c:?}: only ASCII letters, digits, '.', '_' and '-' are allowed"
        ));
    }
    if id.chars().all(|c| c == '.') {
        return Err(format!("job id '{id}' must not be only dots"));
    }
    Ok(())
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

    const INSERT: &str = "INSERT INTO out SELECT seq FROM src";

    fn by(job: &str, sink: &str, query: &str) -> RecordProducer {
        RecordProducer {
            job: job.into(),
            sink: sink.into(),
            query: query.into(),
            statement: INSERT.into(),
        }
    }

    #[test]
    fn an_id_depends_on_the_producer_the_key_and_the_row_only() {
        let key = message_key("projects/p/subscriptions/s", "123");
        let p = by("p1", "out", "q0");
        let a = record_id(&p, &row_key(&key, 0));
        // The same inputs give the same id (a replay), in the documented form.
        assert_eq!(a, record_id(&p, &row_key(&key, 0)));
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        // Fixed by the derivation (checked with an independent BLAKE3 of the documented
        // layout): a change of hash, domain or layout breaks it.
        assert_eq!(a, record_id(&p, "projects/p/subscriptions/s/123#0"));
        assert_eq!(a, "a97425aac83c288ec3e433c9d3c9de6b");
        // Every input matters: the row, the message, the subscription, the query, the
        // sink and the job.
        let others = [
            record_id(&p, &row_key(&key, 1)),
            record_id(
                &p,
                &row_key(&message_key("projects/p/subscriptions/s", "124"), 0),
            ),
            record_id(
                &p,
                &row_key(&message_key("projects/p/subscriptions/t", "123"), 0),
            ),
            record_id(&by("p1", "out", "q1"), &row_key(&key, 0)),
            record_id(&by("p1", "out2", "q0"), &row_key(&key, 0)),
            record_id(&by("p2", "out", "q0"), &row_key(&key, 0)),
            record_id(
                &RecordProducer {
                    statement: "INSERT INTO out SELECT seq + 1 AS seq FROM src".into(),
                    ..p.clone()
                },
                &row_key(&key, 0),
            ),
        ];
        for o in &others {
            assert_ne!(&a, o);
        }
        // The lengths keep the parts apart.
        assert_ne!(
            record_id(&by("p", "q1", "x"), "0#0"),
            record_id(&by("p", "q", "1x"), "0#0")
        );
        let nul = |statement: &str| RecordProducer {
            statement: statement.into(),
            ..p.clone()
        };
        assert_ne!(
            record_id(&nul("a\0b"), "c#0"),
            record_id(&nul("a"), "b\0c#0")
        );
    }

    /// Issue 31, item 2: two pipelines deduplicating on one upstream id and writing to one
    /// topic gave their different rows one id (the id named only the query's index).
    #[test]
    fn two_jobs_never_share_an_id_for_one_upstream_record() {
        let row = row_key("9f2c", 0);
        let one = record_id(&by("enrich", "out", "q0"), &row);
        let two = record_id(&by("audit", "out", "q0"), &row);
        assert_ne!(one, two);
        // Two files of one name (one default job id) writing different rows: still apart.
        let other = RecordProducer {
            statement: "INSERT INTO out SELECT seq * 2 AS seq FROM src".into(),
            ..by("enrich", "out", "q0")
        };
        assert_ne!(one, record_id(&other, &row));
        // Two copies of one upstream record (different message ids, same attribute)
        // give one id within one job; two records give two.
        assert_eq!(
            one,
            record_id(&by("enrich", "out", "q0"), &row_key("9f2c", 0))
        );
        assert_ne!(
            one,
            record_id(&by("enrich", "out", "q0"), &row_key("9f2d", 0))
        );
    }

    #[test]
    fn job_ids_are_checked() {
        for ok in ["p1", "quickstart", "a.b_c-9", &"x".repeat(128)] {
            assert_eq!(check_job_id(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("", "1 to 128"),
            (&"x".repeat(129) as &str, "1 to 128"),
            ("a b", "' '"),
            ("a/b", "'/'"),
            ("a\0b", "'\\0'"),
            ("..", "only dots"),
            ("é", "'é'"),
        ] {
            let e = check_job_id(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
