//! The campaign's data invariants, checked after each seed on what it observed (the
//! process outcomes, stops, exits and hangs, are judged in `rules.rs`):
//! 1. **at least once, exactly as published** (hop1): every seq of fate
//!    [`Fate::Output`] reaches hop1's output at least once, every field equal to
//!    [`expected_row`] (body, attributes, message id, each expression's value); every
//!    seq that fails to decode or fails in SQL reaches the dead-letter topic at least
//!    once, with its data, attributes and message id and the matching `dlq-error`; a
//!    filtered seq reaches neither. **Lost** counts seqs in neither that are not on the
//!    input subscription either.
//! 2. **no acknowledgement before its row is durable**: the proxy's wire log matches
//!    each acknowledged ack ID to the first confirmed publish of its row (or dead
//!    letter); a filtered message has no row and is exempt.
//! 3. **record ids**: every copy of a seq's row carries one record id, and two seqs
//!    never share one.
//! 4. **each duplicate explained**: a row (or dead letter) written more than once comes
//!    from a message delivered more than once, or from a publish retried across an
//!    outage of its path (sink, dead-letter queue) that was in progress between its
//!    first and its last confirmed copy.
//! 5. **exactly once end to end**: hop2's output holds every seq of fate
//!    [`Fate::Output`] exactly once, equal to [`expected_row`] and carrying the record
//!    id hop1 stamped; nothing else. A seq missing there (or, when dead-lettered, from
//!    the dead-letter topic) is lost end to end; a second copy is a duplicate after
//!    deduplication.
//! 6. no output line holds the secret the processes were given.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pubsub_emulator_tools::wire_log::{WireEvent, WireKind};
use serde_json::Value;

use super::outages::{self, Window};
use super::payload::{expected_row, fate, payload, Fate, Format};
use super::schedule::{Fault, Schedule};
use super::sql::RID;
use super::supervise::{End, Record};

/// A message read back: data and attributes.
#[derive(Debug, Clone)]
pub struct Msg {
    pub data: Vec<u8>,
    pub attributes: BTreeMap<String, String>,
}

/// What a seed observed.
#[derive(Debug)]
pub struct Observed {
    pub format: Format,
    /// Attributes the service adds to every input message (Avro: `googclient_*`).
    pub extra_attributes: BTreeMap<String, String>,
    /// The fault phase.
    pub record: Record,
    /// hop1's final run (`--stop-when-idle`).
    pub final_run: End,
    /// hop2's run (`--stop-when-idle`); `None` when hop1's final run hung (not started).
    pub hop2: Option<End>,
    /// Every copy hop1 wrote (its output subscriptions drained).
    pub rows: Vec<Msg>,
    /// Every dead letter (the dead-letter subscription drained).
    pub dead_letters: Vec<Msg>,
    /// Every row hop2 wrote.
    pub last: Vec<Msg>,
    /// Every window row hop1 wrote (during the faults and in its final, drained run).
    pub windows: Vec<Msg>,
    /// seq -> publish time (ms since the Unix epoch) of every input message, from the
    /// witness subscription of the input topic (the windows' event time).
    pub publish_ms: BTreeMap<u64, i64>,
    /// Message ids still on the input subscription after the final run.
    pub unread: HashSet<String>,
    /// Messages still on hop2's subscriptions after its run.
    pub hop2_unread: usize,
    pub wire: Vec<WireEvent>,
    /// How log lines name each path of hop1 (for the rules).
    pub paths: super::rules::Paths,
    pub input_subscription: String,
    pub output_topic: String,
    pub dead_letter_topic: String,
    pub logs: Vec<PathBuf>,
    pub secret: String,
    pub restarts: usize,
}

/// A seed's figures and verdicts.
#[derive(Debug, Default)]
pub struct Outcome {
    pub seed: u64,
    pub format: Option<Format>,
    pub faults: Vec<Fault>,
    pub published: usize,
    /// hop1: lost, and copies beyond the first (rows and dead letters).
    pub lost: usize,
    pub duplicates: usize,
    /// End to end (hop2's output and the dead-letter topic).
    pub e2e_lost: usize,
    pub e2e_duplicates: usize,
    pub hangs: usize,
    pub restarts: usize,
    pub elapsed: Duration,
    pub violations: Vec<String>,
    pub notes: Vec<String>,
}

/// `N things` with the right plural.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Adds a violation naming how many items broke a rule, and the first.
fn broke(v: &mut Vec<String>, items: &[String], what: &str) {
    if let Some(first) = items.first() {
        v.push(format!("{} {what}; first: {first}", items.len()));
    }
}

pub fn check(schedule: &Schedule, obs: Observed, elapsed: Duration) -> Outcome {
    let judged = super::rules::runs(schedule, &obs);
    let mut v = judged.violations;
    let by_mid: HashMap<&str, u64> = obs
        .record
        .published
        .iter()
        .map(|(s, m)| (m.as_str(), *s))
        .collect();
    let mid_of = |seq: u64| obs.record.published.get(&seq).map(String::as_str);

    // 1. hop1: at least once, exactly as published.
    let mut wrong = Vec::new();
    let mut copies: BTreeMap<u64, usize> = BTreeMap::new();
    let mut rids: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for m in &obs.rows {
        let Some((seq, row)) = row_of(m, &mut wrong) else {
            continue;
        };
        if let Some(e) = unexpected(seq, &row, None, &obs, mid_of(seq)) {
            wrong.push(e);
        }
        match m.attributes.get(RID) {
            Some(rid) if m.attributes.len() == 1 && is_record_id(rid) => {
                rids.entry(seq).or_default().insert(rid.clone());
            }
            _ => wrong.push(format!(
                "the row of seq {seq} carries attributes {:?}, not one 32-hex-digit {RID:?}",
                m.attributes
            )),
        }
        *copies.entry(seq).or_default() += 1;
    }
    let mut letters: BTreeMap<u64, usize> = BTreeMap::new();
    for m in &obs.dead_letters {
        let seq = m.attributes.get("seq").and_then(|s| s.parse::<u64>().ok());
        match seq {
            Some(seq) => {
                if let Err(e) = check_letter(seq, m, &obs, &by_mid) {
                    wrong.push(e);
                }
                *letters.entry(seq).or_default() += 1;
            }
            None => wrong.push(format!("a dead letter without seq: {:?}", m.attributes)),
        }
    }
    broke(
        &mut v,
        &wrong,
        "output rows or dead letters are not what the pipeline must write",
    );
    let seen = |s: &u64| copies.contains_key(s) || letters.contains_key(s);
    let lost: Vec<u64> = obs
        .record
        .published
        .iter()
        .filter(|(s, mid)| fate(**s) != Fate::Filtered && !seen(s) && !obs.unread.contains(*mid))
        .map(|(s, _)| *s)
        .collect();
    if !lost.is_empty() {
        v.push(format!(
            "{} of {} published messages are lost: in neither the output, the dead-letter topic nor the input subscription (first seqs: {:?})",
            lost.len(),
            obs.record.published.len(),
            &lost[..lost.len().min(10)]
        ));
    }

    // 3. One record id per seq, one seq per record id.
    let mut ids = Vec::new();
    let mut owner: HashMap<&str, u64> = HashMap::new();
    for (seq, set) in &rids {
        if set.len() > 1 {
            ids.push(format!(
                "the copies of seq {seq} carry {} record ids {set:?}",
                set.len()
            ));
        }
        for rid in set {
            if let Some(other) = owner.insert(rid, *seq) {
                ids.push(format!("seqs {other} and {seq} share record id {rid}"));
            }
        }
    }
    broke(&mut v, &ids, "record ids are not one per record");

    // 2. Acknowledged only after the row's publish was confirmed; and 4.'s facts.
    let wire = Wire::read(&obs, &by_mid);
    broke(
        &mut v,
        &wire.early,
        "acknowledgements came before the row was durable",
    );

    // 4. Each duplicate explained by a redelivery or an outage of its path.
    let windows: Vec<&Window> = obs
        .record
        .injected
        .iter()
        .filter_map(|i| i.window.as_ref())
        .collect();
    let mut unexplained = Vec::new();
    for (seq, n, path) in copies
        .iter()
        .map(|(s, n)| (*s, *n, outages::Path::Sink))
        .chain(
            letters
                .iter()
                .map(|(s, n)| (*s, *n, outages::Path::DeadLetter)),
        )
    {
        let Some(mid) = mid_of(seq) else { continue };
        if n < 2 || wire.deliveries.get(mid).copied().unwrap_or(0) >= 2 {
            continue;
        }
        let times = wire.published.get(mid).map(Vec::as_slice).unwrap_or(&[]);
        let (first, last) = match (times.iter().min(), times.iter().max()) {
            (Some(f), Some(l)) => (*f, *l),
            _ => {
                unexplained.push(format!(
                    "seq {seq}: {n} copies, delivered once, no confirmed publish seen"
                ));
                continue;
            }
        };
        let explained = windows
            .iter()
            .any(|w| w.path == path && retry_across(w, first, last));
        if !explained {
            unexplained.push(format!(
                "seq {seq}: {n} copies, delivered once, published over {:.3}s with no outage of the {} path meanwhile",
                last.duration_since(first).as_secs_f64(),
                path.name()
            ));
        }
    }
    broke(&mut v, &unexplained, "messages were written more than once with neither a redelivery nor an outage to explain it");

    // 5. Exactly once end to end.
    let mut wrong = Vec::new();
    let mut last: BTreeMap<u64, usize> = BTreeMap::new();
    for m in &obs.last {
        let Some((seq, row)) = row_of(m, &mut wrong) else {
            continue;
        };
        let stamped = rids.get(&seq).and_then(|s| s.iter().next());
        if let Some(e) = unexpected(seq, &row, Some(stamped), &obs, mid_of(seq)) {
            wrong.push(e);
        }
        *last.entry(seq).or_default() += 1;
    }
    broke(
        &mut v,
        &wrong,
        "rows of the second hop are not what the first hop must write",
    );
    let e2e_lost: Vec<u64> = obs
        .record
        .published
        .keys()
        .copied()
        .filter(|s| match fate(*s) {
            Fate::Output => !last.contains_key(s),
            Fate::Filtered => false,
            _ => !letters.contains_key(s),
        })
        .collect();
    let e2e_duplicates: usize = last.values().map(|n| n - 1).sum();
    if !e2e_lost.is_empty() {
        v.push(format!(
            "exactly once: {} of {} published messages are in neither the second hop's output nor the dead-letter topic (first seqs: {:?})",
            e2e_lost.len(),
            obs.record.published.len(),
            &e2e_lost[..e2e_lost.len().min(10)]
        ));
    }
    if e2e_duplicates > 0 {
        let first: Vec<String> = last
            .iter()
            .filter(|(_, n)| **n > 1)
            .take(5)
            .map(|(s, n)| format!("seq {s} x{n}"))
            .collect();
        v.push(format!(
            "exactly once: the second hop's output holds {} after deduplication ({})",
            count(e2e_duplicates, "duplicate", "duplicates"),
            first.join(", ")
        ));
    }
    if obs.hop2_unread > 0 {
        v.push(format!(
            "the second hop exited with {} still unread on its subscriptions",
            count(obs.hop2_unread, "message", "messages")
        ));
    }

    // 6. No secret in any output.
    for (path, text) in super::seed::read_logs(&obs.logs) {
        if !obs.secret.is_empty() && text.contains(&obs.secret) {
            v.push(format!(
                "the secret given in {} appears in {}",
                super::pipeline::SECRET_ENV,
                path.display()
            ));
        }
    }

    // 7. The windows equal a batch GROUP BY over the rows written.
    let publish_ms = |seq: u64| obs.publish_ms.get(&seq).copied();
    v.extend(super::window_check::check(
        &obs.windows,
        &copies,
        &publish_ms,
    ));

    let duplicates = copies.values().chain(letters.values()).map(|n| n - 1).sum();
    Outcome {
        seed: schedule.seed,
        format: Some(obs.format),
        faults: obs
            .record
            .injected
            .iter()
            .map(|i| i.fault.clone())
            .collect(),
        published: obs.record.published.len(),
        lost: lost.len(),
        duplicates,
        e2e_lost: e2e_lost.len(),
        e2e_duplicates,
        hangs: judged.hangs,
        restarts: obs.restarts,
        elapsed,
        violations: v,
        notes: judged.notes,
    }
}

/// How much earlier than a copy's confirmation an outage may have begun and still have
/// caused its retry: the publish was sent before the outage and confirmed into it.
const SLACK: Duration = Duration::from_secs(1);

/// How long after an outage ended a publish retried across it may be confirmed: the
/// client's longest wait between attempts (`PUBLISH_RETRY_MAX_DELAY`, decision 0032)
/// plus one attempt.
const RETRY_SPAN: Duration =
    pubsub_connector_core::client::PUBLISH_RETRY_MAX_DELAY.saturating_add(Duration::from_secs(1));

/// Whether copies confirmed from `first` to `last` can come from a publish retried
/// across outage `w`: it was in progress from `SLACK` before the first confirmation
/// on, and ended at most `RETRY_SPAN` before the last (a retry's own wait was not
/// allowed for: a copy confirmed after that wait was counted as unexplained).
fn retry_across(w: &Window, first: Instant, last: Instant) -> bool {
    let from = first.checked_sub(SLACK).unwrap_or(first);
    w.from <= last && from <= w.to + RETRY_SPAN
}

/// A row's seq and JSON object, or why it is not one (pushed onto `wrong`).
fn row_of(m: &Msg, wrong: &mut Vec<String>) -> Option<(u64, serde_json::Map<String, Value>)> {
    let row = match serde_json::from_slice::<Value>(&m.data) {
        Ok(Value::Object(o)) => o,
        _ => {
            wrong.push(format!(
                "a row that is not a JSON object: {}",
                String::from_utf8_lossy(&m.data)
            ));
            return None;
        }
    };
    match row.get("seq").and_then(Value::as_u64) {
        Some(seq) => Some((seq, row)),
        None => {
            wrong.push(format!(
                "a row without seq: {}",
                String::from_utf8_lossy(&m.data)
            ));
            None
        }
    }
}

/// What is wrong with the row of `seq` (from hop1, or from hop2 with `rid` the record id
/// hop1 stamped for it), if anything.
fn unexpected(
    seq: u64,
    row: &serde_json::Map<String, Value>,
    rid: Option<Option<&String>>,
    obs: &Observed,
    mid: Option<&str>,
) -> Option<String> {
    let f = fate(seq);
    if f != Fate::Output {
        return Some(format!(
            "seq {seq} ({f:?}) must not be written, but was: {}",
            Value::Object(row.clone())
        ));
    }
    let Some(mid) = mid else {
        return Some(format!("seq {seq} was written but never published"));
    };
    let mut row = row.clone();
    if let Some(rid) = rid {
        let got = row.remove("rid");
        if got.as_ref().and_then(Value::as_str) != rid.map(String::as_str) {
            return Some(format!(
                "the second hop's row of seq {seq} carries record id {got:?}, the first hop stamped {rid:?}"
            ));
        }
    }
    let want = expected_row(seq, obs.format, mid, &obs.extra_attributes);
    let got = Value::Object(row);
    (got != want).then(|| format!("the row of seq {seq} is {got}, expected {want}"))
}

/// What is wrong with the dead letter `m` of `seq`, if anything.
fn check_letter(
    seq: u64,
    m: &Msg,
    obs: &Observed,
    by_mid: &HashMap<&str, u64>,
) -> Result<(), String> {
    let attrs = &m.attributes;
    let f = fate(seq);
    if !f.dead_lettered() {
        return Err(format!(
            "seq {seq} ({f:?}) was dead-lettered: {:?}",
            attrs.get("dlq-error")
        ));
    }
    let mid = attrs
        .get("dlq-message-id")
        .map(String::as_str)
        .unwrap_or("");
    if by_mid.get(mid) != Some(&seq) {
        return Err(format!(
            "the dead letter of seq {seq} names message id {mid:?}, which was not published with it"
        ));
    }
    let expected = payload(seq, obs.format);
    let kept = expected
        .attributes
        .iter()
        .chain(&obs.extra_attributes)
        .all(|(k, v)| attrs.get(k) == Some(v));
    if m.data != expected.data || !kept {
        return Err(format!(
            "the dead letter of seq {seq} differs from what was published: {attrs:?}"
        ));
    }
    let error = attrs.get("dlq-error").map(String::as_str).unwrap_or("");
    let why = error.strip_prefix(&format!("message {mid} ")).unwrap_or("");
    let right = match f {
        Fate::SqlFailure => {
            why.starts_with("failed in SQL: INSERT INTO dst ")
                && why.contains("`1000000 / (seq % 50 - 23)` failed: Divide by zero")
        }
        _ => why.starts_with("could not be decoded as "),
    };
    if !right {
        return Err(format!(
            "the dead letter of seq {seq} ({f:?}) gives the wrong reason: {error:?}"
        ));
    }
    Ok(())
}

/// A record id: 32 lower-case hex digits.
fn is_record_id(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the proxy's wire log shows about hop1.
struct Wire<'a> {
    /// Deliveries of each message id on the input subscription.
    deliveries: HashMap<&'a str, usize>,
    /// Every confirmed publish (row or dead letter) of each message id.
    published: HashMap<String, Vec<Instant>>,
    /// Acknowledgements before their row was durable.
    early: Vec<String>,
}

impl<'a> Wire<'a> {
    fn read(obs: &'a Observed, by_mid: &HashMap<&str, u64>) -> Wire<'a> {
        let mut delivered: HashMap<&str, &str> = HashMap::new();
        let mut deliveries: HashMap<&str, usize> = HashMap::new();
        let mut published: HashMap<String, Vec<Instant>> = HashMap::new();
        let start = obs.wire.first().map(|e| e.at);
        let at = |t: Instant| start.map_or(0.0, |s| t.duration_since(s).as_secs_f64());
        let letters: HashMap<Vec<u8>, &str> = obs
            .record
            .published
            .iter()
            .filter(|(s, _)| fate(**s).dead_lettered())
            .map(|(s, m)| (payload(*s, obs.format).data, m.as_str()))
            .collect();
        let mut early = Vec::new();
        for e in &obs.wire {
            match &e.kind {
                WireKind::Delivered {
                    subscription,
                    messages,
                } if *subscription == obs.input_subscription => {
                    for m in messages {
                        delivered.insert(&m.ack_id, &m.message_id);
                        *deliveries.entry(&m.message_id).or_default() += 1;
                    }
                }
                WireKind::Published { topic, data } if *topic == obs.output_topic => {
                    for d in data {
                        let mid = serde_json::from_slice::<Value>(d)
                            .ok()
                            .and_then(|r| r.get("mid")?.as_str().map(str::to_string));
                        if let Some(mid) = mid {
                            published.entry(mid).or_default().push(e.at);
                        }
                    }
                }
                WireKind::Published { topic, data } if *topic == obs.dead_letter_topic => {
                    for d in data {
                        if let Some(mid) = letters.get(d) {
                            published.entry(mid.to_string()).or_default().push(e.at);
                        }
                    }
                }
                WireKind::Acked {
                    subscription,
                    ack_ids,
                } if *subscription == obs.input_subscription => {
                    for id in ack_ids {
                        let Some(mid) = delivered.get(id.as_str()) else {
                            early.push(format!(
                                "ack ID {id} acknowledged at +{:.3}s was never delivered",
                                at(e.at)
                            ));
                            continue;
                        };
                        let seq = by_mid.get(mid).copied();
                        if seq.is_some_and(|s| fate(s) == Fate::Filtered) {
                            continue; // no row to wait for
                        }
                        let durable = published
                            .get(*mid)
                            .and_then(|t| t.first())
                            .is_some_and(|t| *t <= e.at);
                        if !durable {
                            early.push(format!(
                                "message {mid} (seq {seq:?}) acknowledged at +{:.3}s before any publish of its row was confirmed",
                                at(e.at)
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        Wire {
            deliveries,
            published,
            early,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// What a seed of `n` messages observes when every message went through exactly as
    /// it must: each row once from hop1 and once from hop2, each dead letter once.
    fn perfect(n: u64) -> Observed {
        let mut record = Record::default();
        let (mut rows, mut last, mut dead_letters) = (Vec::new(), Vec::new(), Vec::new());
        let none = BTreeMap::new();
        for seq in 0..n {
            let mid = format!("m{seq}");
            record.published.insert(seq, mid.clone());
            let rid = format!("{:032x}", seq + 1);
            match fate(seq) {
                Fate::Output => {
                    let row = expected_row(seq, Format::Json, &mid, &none);
                    rows.push(Msg {
                        data: row.to_string().into_bytes(),
                        attributes: BTreeMap::from([(RID.to_string(), rid.clone())]),
                    });
                    let mut row = row;
                    row["rid"] = Value::String(rid);
                    last.push(Msg {
                        data: row.to_string().into_bytes(),
                        attributes: BTreeMap::new(),
                    });
                }
                Fate::Filtered => {}
                f => {
                    let p = payload(seq, Format::Json);
                    let why = if f == Fate::SqlFailure {
                        "failed in SQL: INSERT INTO dst SELECT ...: `1000000 / (seq % 50 - 23)` failed: Divide by zero error"
                    } else {
                        "could not be decoded as Json: EOF"
                    };
                    let mut attributes = p.attributes;
                    attributes.insert("dlq-message-id".into(), mid.clone());
                    attributes.insert("dlq-error".into(), format!("message {mid} {why}"));
                    dead_letters.push(Msg {
                        data: p.data,
                        attributes,
                    });
                }
            }
        }
        let ok = End::Exited {
            status: std::process::ExitStatus::from_raw(0),
            at: Instant::now(),
        };
        Observed {
            format: Format::Json,
            extra_attributes: BTreeMap::new(),
            record,
            final_run: ok.clone(),
            hop2: Some(ok),
            rows,
            dead_letters,
            last,
            windows: super::super::window_check::perfect(
                (0..n).filter(|s| fate(*s) == Fate::Output),
            ),
            publish_ms: (0..n)
                .map(|s| (s, super::super::payload::event_time_ms(s)))
                .collect(),
            unread: HashSet::new(),
            hop2_unread: 0,
            wire: Vec::new(),
            paths: Vec::new(),
            input_subscription: String::new(),
            output_topic: String::new(),
            dead_letter_topic: String::new(),
            logs: Vec::new(),
            secret: String::new(),
            restarts: 0,
        }
    }

    fn schedule() -> Schedule {
        Schedule::of(1, 1, Format::Json, 200)
    }

    #[test]
    fn a_copy_confirmed_within_a_retry_after_an_outage_is_explained_by_it() {
        let t = Instant::now() + Duration::from_secs(100);
        let s = Duration::from_secs;
        let w = Window {
            path: outages::Path::Sink,
            from: t,
            to: t + s(4),
        };
        // Confirmed during the outage, or within one retry wait after it.
        assert!(retry_across(&w, t + s(2), t + s(2)));
        assert!(retry_across(
            &w,
            t + s(4) + RETRY_SPAN,
            t + s(4) + RETRY_SPAN
        ));
        // Not: long after it, or before it began.
        assert!(!retry_across(
            &w,
            t + s(6) + RETRY_SPAN,
            t + s(6) + RETRY_SPAN
        ));
        assert!(!retry_across(&w, t - SLACK, t - SLACK));
    }

    #[test]
    fn a_perfect_seed_passes_and_each_way_of_breaking_exactly_once_fails_it() {
        let o = check(&schedule(), perfect(200), Duration::ZERO);
        assert!(o.violations.is_empty(), "{:?}", o.violations);
        assert_eq!(
            (o.lost, o.duplicates, o.e2e_lost, o.e2e_duplicates),
            (0, 0, 0, 0)
        );

        // hop1's copies are at-least-once figures; hop2 dropping them is the point.
        let mut obs = perfect(200);
        let copy = obs.rows[3].clone();
        obs.rows.push(copy);
        let o = check(&schedule(), obs, Duration::ZERO);
        assert_eq!(o.duplicates, 1);
        // (Delivered once, no outage: the copy itself is unexplained.)
        assert_eq!(o.violations.len(), 1, "{:?}", o.violations);

        // A second copy after deduplication fails the seed, and so does a missing one.
        let mut obs = perfect(200);
        let copy = obs.last[5].clone();
        obs.last.push(copy);
        let o = check(&schedule(), obs, Duration::ZERO);
        assert_eq!(o.e2e_duplicates, 1);
        assert!(
            o.violations[0].contains("exactly once"),
            "{:?}",
            o.violations
        );
        let mut obs = perfect(200);
        obs.last.remove(0);
        let o = check(&schedule(), obs, Duration::ZERO);
        assert_eq!(o.e2e_lost, 1);
        assert!(
            o.violations[0].contains("exactly once"),
            "{:?}",
            o.violations
        );

        // A wrong value of an expression, a filtered seq written, a record id that
        // differs between copies or hops: each is a violation.
        let mut obs = perfect(200);
        let mut row: Value = serde_json::from_slice(&obs.rows[0].data).unwrap();
        row["quotient"] = Value::from(0);
        obs.rows[0].data = row.to_string().into_bytes();
        assert!(!check(&schedule(), obs, Duration::ZERO)
            .violations
            .is_empty());
        let mut obs = perfect(200);
        let filtered = expected_row(7, Format::Json, "m7", &BTreeMap::new());
        obs.last.push(Msg {
            data: filtered.to_string().into_bytes(),
            attributes: BTreeMap::new(),
        });
        assert!(!check(&schedule(), obs, Duration::ZERO)
            .violations
            .is_empty());
        let mut obs = perfect(200);
        obs.rows[1]
            .attributes
            .insert(RID.into(), format!("{:032x}", 999));
        assert!(!check(&schedule(), obs, Duration::ZERO)
            .violations
            .is_empty());

        // A dead letter with the wrong reason, or missing.
        let mut obs = perfect(200);
        let l = obs
            .dead_letters
            .iter_mut()
            .find(|l| l.attributes["seq"] == "23")
            .unwrap();
        l.attributes.insert(
            "dlq-error".into(),
            "message m23 could not be decoded as Json".into(),
        );
        assert!(!check(&schedule(), obs, Duration::ZERO)
            .violations
            .is_empty());
        let mut obs = perfect(200);
        obs.dead_letters.pop();
        let o = check(&schedule(), obs, Duration::ZERO);
        assert_eq!((o.lost, o.e2e_lost), (1, 1));
    }
}
