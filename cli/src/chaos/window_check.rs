//! The windowed query's check (issue 32, item 8): hop1's windows stay open through every
//! fault (their out-of-orderness outlasts the seed) and fire in its final, drained run.
//! Every window row must equal a batch GROUP BY over the rows hop1's stateless query
//! wrote (the same source rows, the same WHERE): a message counted twice after a replay,
//! or lost from the state by a crash, changes a count. Copies of a window row (fired, then
//! written again after a crash before its checkpoint) must carry the same values and the
//! same record id.

use std::collections::{BTreeMap, HashMap};

use super::check::Msg;
use super::payload::event_time_ms;
use super::sql::RID;

/// A window row's key: (window start, epoch ms; k) -> (count, sum of seqs).
type Windows = BTreeMap<(i64, i64), (i64, i64)>;

/// The windows of the seqs hop1 wrote (`written`).
fn oracle<'a>(written: impl Iterator<Item = &'a u64>) -> Windows {
    let mut out = Windows::new();
    for &seq in written {
        let t = event_time_ms(seq);
        let e = out
            .entry((t.div_euclid(1000) * 1000, (seq % 3) as i64))
            .or_insert((0, 0));
        e.0 += 1;
        e.1 += seq as i64;
    }
    out
}

/// Violations of the windows' promise; `written` holds every seq hop1's stateless query
/// wrote at least once.
pub fn check(rows: &[Msg], written: &BTreeMap<u64, usize>) -> Vec<String> {
    let mut v = Vec::new();
    let mut got = Windows::new();
    let mut rid_of: HashMap<(i64, i64), String> = HashMap::new();
    let mut owner: HashMap<String, (i64, i64)> = HashMap::new();
    for m in rows {
        let parsed = serde_json::from_slice::<serde_json::Value>(&m.data)
            .ok()
            .and_then(|r| {
                let ws = pubsub_engine::format::parse_rfc3339(r["ws"].as_str()?).ok()? / 1_000_000;
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
    let expected = oracle(written.keys());
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
    oracle(written.iter())
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
        assert!(
            check(&rows, &written).is_empty(),
            "{:?}",
            check(&rows, &written)
        );
        // A replay counted twice: one more row than the batch says.
        let mut replayed = written.clone();
        replayed.remove(&5);
        assert!(check(&rows, &replayed)[0].contains("values differ"));
        // A copy with another value.
        let mut copies = rows.clone();
        let mut other = rows[0].clone();
        let mut v: serde_json::Value = serde_json::from_slice(&other.data).unwrap();
        v["n"] = serde_json::json!(999);
        other.data = v.to_string().into_bytes();
        copies.push(other);
        assert!(check(&copies, &written)[0].contains("was written with"));
    }
}
