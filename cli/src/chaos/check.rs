//! The campaign's invariants, checked after each seed on what it observed:
//! 1. every published sequence number reaches the output at least once, with exactly the
//!    body, attributes and message id that were published; one that does not decode
//!    reaches the dead-letter topic instead, with its data, attributes and message id;
//! 2. no message is acknowledged before the publish of its row (or dead letter) was
//!    confirmed by the server (the proxy's wire log: Acknowledge against Publish
//!    responses);
//! 3. a duplicate row comes only from a message delivered more than once (a replayed
//!    checkpoint window) or a publish retried across a sink outage;
//! 4. every run ends within its bound (else a hang), and the final run exits 0;
//! 5. no run exits 0 with its input unread, and none exits 2 (no permanent failure);
//! 6. no output line holds the secret the processes were given.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pubsub_connector_core::wire_log::{WireEvent, WireKind};

use super::payload::{is_poison, payload};
use super::schedule::{Fault, Schedule};

/// What a seed observed.
#[derive(Debug, Default)]
pub struct Observed {
    /// The faults actually injected.
    pub faults: Vec<Fault>,
    /// seq -> message id of every confirmed publish.
    pub published: BTreeMap<u64, String>,
    /// Every output row (the output subscriptions drained).
    pub rows: Vec<Vec<u8>>,
    /// Every dead letter (the dead-letter subscription drained): data, attributes.
    pub dead_letters: Vec<(Vec<u8>, BTreeMap<String, String>)>,
    /// Message ids still on the input subscription after the final run.
    pub unread: HashSet<String>,
    pub final_exit: Option<i32>,
    pub wire: Vec<WireEvent>,
    pub input_subscription: String,
    pub output_topic: String,
    pub dead_letter_topic: String,
    pub logs: Vec<PathBuf>,
    pub secret: String,
    pub restarts: usize,
    pub hangs: Vec<String>,
    /// Failures found while running (an exit 2).
    pub failures: Vec<String>,
    /// Worth saying, not a violation (a graceful stop that failed and was restarted).
    pub notes: Vec<String>,
}

impl Observed {
    pub fn hang(&mut self, what: String) {
        self.hangs.push(what);
    }

    pub fn note(&mut self, what: String) {
        self.notes.push(what);
    }

    /// A start ended by itself during the schedule: restarted, unless no restart can fix
    /// it (exit 2), which is a violation.
    pub fn unexpected_exit(&mut self, code: Option<i32>, logs: &[PathBuf]) {
        let err = logs.last().cloned().unwrap_or_default();
        if code == Some(2) {
            self.failures.push(format!(
                "a run exited 2 (a failure no restart can fix) during the campaign; {}:\n{}",
                err.display(),
                super::seed::tail(&err, 5)
            ));
        } else {
            self.note(format!(
                "a run ended by itself with {code:?} and was restarted ({})",
                err.display()
            ));
        }
    }
}

/// A seed's figures and violations.
#[derive(Debug, Default)]
pub struct Outcome {
    pub seed: u64,
    pub faults: Vec<Fault>,
    pub published: usize,
    pub lost: usize,
    pub duplicates: usize,
    pub hangs: usize,
    pub restarts: usize,
    pub elapsed: Duration,
    pub violations: Vec<String>,
    pub notes: Vec<String>,
}

/// One output row, as the sink wrote it.
#[derive(serde::Deserialize)]
struct Row {
    seq: u64,
    mid: String,
    /// A NULL column is left out of the JSON row.
    #[serde(default)]
    body: serde_json::Value,
    attrs: BTreeMap<String, String>,
}

pub fn check(schedule: &Schedule, obs: Observed, elapsed: Duration) -> Outcome {
    let mut v: Vec<String> = Vec::new();
    v.extend(obs.failures.iter().cloned());
    for h in &obs.hangs {
        v.push(format!("hang: {h}"));
    }
    if obs.hangs.is_empty() && obs.final_exit != Some(0) {
        v.push(format!("the final run exited {:?}, not 0", obs.final_exit));
    }
    if obs.final_exit == Some(0) && !obs.unread.is_empty() {
        v.push(format!(
            "the final run exited 0 with {} messages still unread on its subscription",
            obs.unread.len()
        ));
    }

    // 1. Every seq arrived, exactly as published.
    let by_mid: HashMap<&str, u64> = obs
        .published
        .iter()
        .map(|(s, m)| (m.as_str(), *s))
        .collect();
    let mut copies: HashMap<String, usize> = HashMap::new();
    let mut seen = HashSet::new();
    let mut wrong = Vec::new();
    for raw in &obs.rows {
        let row: Row = match serde_json::from_slice(raw) {
            Ok(r) => r,
            Err(e) => {
                wrong.push(format!(
                    "a row that does not decode ({e}): {}",
                    String::from_utf8_lossy(raw)
                ));
                continue;
            }
        };
        let expected = payload(row.seq);
        if by_mid.get(row.mid.as_str()) != Some(&row.seq) {
            wrong.push(format!(
                "the row of seq {} names message id {}, which was not published with it",
                row.seq, row.mid
            ));
        } else if row.body != expected.body || row.attrs != expected.attributes {
            wrong.push(format!(
                "the row of seq {} differs from what was published: {}",
                row.seq,
                String::from_utf8_lossy(raw)
            ));
        }
        seen.insert(row.seq);
        *copies.entry(row.mid).or_default() += 1;
    }
    for (data, attrs) in &obs.dead_letters {
        let seq = attrs.get("seq").and_then(|s| s.parse::<u64>().ok());
        let Some(seq) = seq.filter(|s| is_poison(*s)) else {
            wrong.push(format!(
                "a dead letter of a message that decodes, or without seq: {attrs:?}"
            ));
            continue;
        };
        let expected = payload(seq);
        let mid = attrs.get("dlq-message-id").cloned().unwrap_or_default();
        let attrs_kept = expected
            .attributes
            .iter()
            .all(|(k, v)| attrs.get(k) == Some(v));
        if by_mid.get(mid.as_str()) != Some(&seq) {
            wrong.push(format!(
                "the dead letter of seq {seq} names message id {mid:?}, which was not published with it"
            ));
        } else if *data != expected.data || !attrs_kept {
            wrong.push(format!(
                "the dead letter of seq {seq} differs from what was published: {attrs:?}"
            ));
        }
        seen.insert(seq);
        *copies.entry(mid).or_default() += 1;
    }
    if !wrong.is_empty() {
        v.push(format!(
            "{} output rows are not what was published; first: {}",
            wrong.len(),
            wrong[0]
        ));
    }
    // Not in the output and not on the input subscription either: acknowledged, lost.
    let lost: Vec<u64> = obs
        .published
        .iter()
        .filter(|(s, mid)| !seen.contains(*s) && !obs.unread.contains(*mid))
        .map(|(s, _)| *s)
        .collect();
    if !lost.is_empty() {
        v.push(format!(
            "{} of {} published messages are lost: in neither the output nor the input subscription (first seqs: {:?})",
            lost.len(),
            obs.published.len(),
            &lost[..lost.len().min(10)]
        ));
    }

    // 2. Acknowledged only after the row's publish was confirmed.
    let mut delivered: HashMap<&str, &str> = HashMap::new();
    let mut deliveries: HashMap<&str, usize> = HashMap::new();
    let mut confirmed: HashMap<String, Instant> = HashMap::new();
    let start = obs.wire.first().map(|e| e.at);
    let at = |t: Instant| start.map_or(0.0, |s| t.duration_since(s).as_secs_f64());
    let poison: HashMap<Vec<u8>, &str> = obs
        .published
        .iter()
        .filter(|(s, _)| is_poison(**s))
        .map(|(s, m)| (payload(*s).data, m.as_str()))
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
                    if let Ok(row) = serde_json::from_slice::<Row>(d) {
                        confirmed.entry(row.mid).or_insert(e.at);
                    }
                }
            }
            WireKind::Published { topic, data } if *topic == obs.dead_letter_topic => {
                for d in data {
                    if let Some(mid) = poison.get(d) {
                        confirmed.entry(mid.to_string()).or_insert(e.at);
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
                    if !confirmed.get(*mid).is_some_and(|t| *t <= e.at) {
                        early.push(format!(
                            "message {mid} (seq {:?}) acknowledged at +{:.3}s before any publish of its row was confirmed",
                            by_mid.get(mid),
                            at(e.at)
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    if !early.is_empty() {
        v.push(format!(
            "{} acknowledgements before the row was durable; first: {}",
            early.len(),
            early[0]
        ));
    }

    // 3. Duplicates only from replays or sink outages.
    let sink_outage = obs.faults.iter().any(|f| {
        matches!(
            f,
            Fault::CutSink { .. }
                | Fault::StallSink { .. }
                | Fault::RecreateSinkTopic { .. }
                | Fault::CutDeadLetter { .. }
        )
    });
    let duplicates: usize = copies.values().map(|c| c - 1).sum();
    let unexplained: Vec<&String> = copies
        .iter()
        .filter(|(mid, c)| {
            **c > 1 && deliveries.get(mid.as_str()).copied().unwrap_or(0) < 2 && !sink_outage
        })
        .map(|(mid, _)| mid)
        .collect();
    if !unexplained.is_empty() {
        v.push(format!(
            "{} messages were written more than once though delivered once and no sink outage happened (first: {})",
            unexplained.len(),
            unexplained[0]
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

    Outcome {
        seed: schedule.seed,
        faults: obs.faults,
        published: obs.published.len(),
        lost: lost.len(),
        duplicates,
        hangs: obs.hangs.len(),
        restarts: obs.restarts,
        elapsed,
        violations: v,
        notes: obs.notes,
    }
}
