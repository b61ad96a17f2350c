//! The windowed query's check (issues 32 and 44): hop1's windows are of publish time with
//! the default 1 s out-of-orderness, so they fire during the faults, the watermark held
//! behind the input's oldest unacknowledged message by the backlog probe (decision 0047);
//! the rest fire in its final, drained run. Every window row must equal a batch GROUP BY
//! over the rows hop1's stateless query wrote (the same source rows, the same WHERE), by
//! each message's publish time: a message counted twice after a replay, lost from the
//! state by a crash, or late for a window that fired before it came back (another
//! consumer's nack, an expired lease, a restart) changes a count. Copies of a window row (fired, then
//! written again after a crash before its checkpoint) must carry the same values and the
//! same record id.

use std::collections::{BTreeMap, HashMap};

use super::check::Msg;
#[cfg(test)]
use super::payload::event_time_ms;
use super::sql::RID;

/// A window row's key: (window start, epoch ms; k) -> (count, sum of seqs).
type Windows = BTreeMap<(i64, i64), (i64, i64)>;

/// The windows of the seqs hop1 wrote (`written`), each at its event time (`event_ms`);
/// a seq without one is left out (and reported by [`check`]).
fn oracle<'a>(
    written: impl Iterator<Item = &'a u64>,
    event_ms: &dyn Fn(u64) -> Option<i64>,
) -> Windows {
    let mut out = Windows::new();
    for &seq in written {
        let Some(t) = event_ms(seq) else {
            continue;
        };
        let e = out
            .entry((t.div_euclid(1000) * 1000, (seq % 3) as i64))
            .or_insert((0, 0));
        e.0 += 1;
        e.1 += seq as i64;
    }
    out
}

/// Violations of the windows' promise; `written` holds every seq hop1's stateless query
/// wrote at least once, `event_ms` each seq's event time (its publish time).
pub fn check(
    rows: &[Msg],
    written: &BTreeMap<u64, usize>,
    event_ms: &dyn Fn(u64) -> Option<i64>,
) -> Vec<String> {
    let mut v = Vec::new();
    let unknown: Vec<u64> = written
        .keys()
        .copied()
        .filter(|s| event_ms(*s).is_none())
        .take(3)
        .collect();
    if !unknown.is_empty() {
        v.push(format!(
            "no publish time is known for seqs {unknown:?} (the witness subscription lacks them)"
        ));
    }
    let mut got = Windows::new();
    let mut rid_of: HashMap<(i64, i64), String> = HashMap::new();
    let mut owner: HashMap<String, (i64, i64)> = HashMap::new();
    for m in rows {
        let parsed = serde_json::from_slice::<serde_json::Value>(&m.data)
            .ok()
            .and_then(|r| {
                let ws = pubsub_engine_format::parse_rfc3339(r["ws"].as_str()?).ok()? / 1_000_000;
                Some((
                    (ws, r["k"].as_i64()?),
                    (r["n"].as_i64()?, r["total"].as_i64()?),
                ))
            });
        let Some((key, value)) = parsed else {
            v.push(format!(
                "a window row is not {{ws, k, n, total}}: {}",
                String::from_utf8_lossy(&m.data)
            ));
            continue;
        };
        if let Some(before) = got.insert(key, value) {
            if before != value {
                v.push(format!(
                    "window {key:?} was written with {before:?} and with {value:?}"
                ));
            }
        }
        let Some(rid) = m.attributes.get(RID) else {
            v.push(format!("window row {key:?} carries no {RID:?}"));
            continue;
        };
        if let Some(other) = rid_of.insert(key, rid.clone()).filter(|r| r != rid) {
            v.push(format!(
                "the copies of window {key:?} carry record ids {other} and {rid}"
            ));
        }
        if let Some(other) = owner.insert(rid.clone(), key).filter(|k| *k != key) {
            v.push(format!(
                "windows {other:?} and {key:?} share record id {rid}"
            ));
        }
    }
    let expected = oracle(written.keys(), event_ms);
    if got != expected {
        let missing: Vec<_> = expected
            .iter()
            .filter(|(k, _)| !got.contains_key(k))
            .take(3)
            .collect();
        let differ: Vec<_> = got
            .iter()
            .filter(|(k, g)| expected.get(k).is_some_and(|e| e != *g))
            .take(3)
            .map(|(k, g)| format!("{k:?}: {g:?}, batch {:?}", expected[k]))
            .collect();
        let extra: Vec<_> = got
            .keys()
            .filter(|k| !expected.contains_key(k))
            .take(3)
            .collect();
        v.push(format!(
            "the windows differ from a batch GROUP BY over the rows written: {} of {} windows missing (first {missing:?}), values differ ({differ:?}), {} not expected (first {extra:?})",
            expected.keys().filter(|k| !got.contains_key(k)).count(),
            expected.len(),
            got.keys().filter(|k| !expected.contains_key(k)).count(),
        ));
    }
    v
}

/// The window rows of the seqs `written`, each once, as hop1 writes them (tests).
#[cfg(test)]
pub fn perfect(written: impl Iterator<Item = u64>) -> Vec<Msg> {
    let written: Vec<u64> = written.collect();
    oracle(written.iter(), &|s| Some(event_time_ms(s)))
        .into_iter()
        .map(|((ws, k), (n, total))| {
            // Within the first minute of event time (6,000 seqs).
            let s = (ws - event_time_ms(0)) / 1000;
            assert!(s < 60, "perfect() writes the first minute only");
            let row = serde_json::json!({
                "ws": format!("2026-12-04T00:00:{s:02}Z"),
                "k": k, "n": n, "total": total,
            });
            Msg {
                data: row.to_string().into_bytes(),
                attributes: [(RID.to_string(), format!("w{ws}-{k}"))].into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_equal_to_the_batch_pass_and_a_count_off_by_one_or_a_second_value_fails() {
        let written: BTreeMap<u64, usize> = (0..300).map(|s| (s, 1)).collect();
        let rows = perfect(0..300);
        let at = |s| Some(event_time_ms(s));
        assert!(
            check(&rows, &written, &at).is_empty(),
            "{:?}",
            check(&rows, &written, &at)
        );
        // A replay counted twice: one more row than the batch says.
        let mut replayed = written.clone();
        replayed.remove(&5);
        assert!(check(&rows, &replayed, &at)[0].contains("values differ"));
        // A row late for its window: its message counted in no window.
        let mut late = rows.clone();
        let mut first: serde_json::Value = serde_json::from_slice(&late[0].data).unwrap();
        first["n"] = serde_json::json!(first["n"].as_i64().unwrap() - 1);
        late[0].data = first.to_string().into_bytes();
        assert!(check(&late, &written, &at)[0].contains("values differ"));
        // A seq whose publish time is unknown is reported, not left out silently.
        let none = |s| (s != 7).then(|| event_time_ms(s));
        assert!(check(&rows, &written, &none)[0].contains("no publish time is known for seqs [7]"));
        // A copy with another value.
        let mut copies = rows.clone();
        let mut other = rows[0].clone();
        let mut v: serde_json::Value = serde_json::from_slice(&other.data).unwrap();
        v["n"] = serde_json::json!(999);
        other.data = v.to_string().into_bytes();
        copies.push(other);
        assert!(check(&copies, &written, &at)[0].contains("was written with"));
    }
}
