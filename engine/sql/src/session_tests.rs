//! SESSION windows without a runtime: sessions close `gap` after their last row, merge when
//! a row bridges them, fire once, count late rows; and, for seeded random inputs fed out
//! of order with a snapshot and restore in the middle, the sessions written equal those a
//! batch computation over the rows that were not late gives.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::window_tests::{feed, plan, run, S};
use pubsub_engine_plan::window::WindowState;
use pubsub_engine_plan::WindowKind;

const PER_PAGE: &str = "SELECT window.start AS ws, window.end AS we, page, n, total FROM (SELECT SESSION(INTERVAL '5' SECOND) AS window, page, count(*) AS n, sum(v) AS total FROM src GROUP BY window, page)";

fn at(s: i64) -> String {
    format!("1970-01-01T00:00:{s:02}")
}

#[test]
fn a_session_ends_gap_after_its_last_row_and_merges_when_a_row_bridges_two() {
    let (after, window) = plan(PER_PAGE).unwrap();
    assert_eq!(window.kind, WindowKind::Session { gap: 5 * S });
    let window = Arc::new(window);
    let mut state = WindowState::new(window.clone()).unwrap();
    feed(
        &window,
        &mut state,
        &[
            ("a", 1, 1),
            ("a", 2, 3),
            ("b", 4, 2),
            ("a", 8, 20),
            ("a", 16, 12),
        ],
    );
    // 8 s is 5 s after 3 s: not less than the gap, so a session of its own, which
    // overlaps [12, 17) and merges with it.
    feed(&window, &mut state, &[("a", 32, 8)]);
    assert_eq!(state.groups(), 4, "a: [1, 8), [8, 17), [20, 25); b: [2, 7)");
    // [1, 8) holds times up to 7.999999999 s: it is still open at 7 s.
    let fired = run(&after, &mut state, 7);
    assert_eq!(
        fired,
        vec![vec![at(2), at(7), "b".into(), "1".into(), "4".into()]]
    );
    // A row at or before the watermark could belong to a fired session: late, even where
    // (as here) the session it would join is still open.
    feed(&window, &mut state, &[("a", 100, 7), ("a", 64, 16)]);
    assert_eq!(state.take_late(), 1);
    // 16 s bridges [8, 17) and [20, 25).
    assert_eq!(state.groups(), 2);
    // Fired by end, then key.
    let fired = run(&after, &mut state, 100);
    assert_eq!(
        fired,
        vec![
            vec![at(1), at(8), "a".into(), "2".into(), "3".into()],
            vec![at(8), at(25), "a".into(), "4".into(), "120".into()],
        ]
    );
    assert_eq!(state.groups(), 0);
    assert!(run(&after, &mut state, 200).is_empty(), "fires once");
}

#[test]
fn sessions_survive_a_snapshot_and_a_restore_onto_another_number_of_subtasks() {
    let (after, window) = plan(PER_PAGE).unwrap();
    let window = Arc::new(window);
    let input: Vec<(String, i64, i64)> = (0..200)
        .map(|i| (format!("p{}", i % 7), i, (i * 7) % 60))
        .collect();
    let input: Vec<(&str, i64, i64)> = input.iter().map(|(p, v, t)| (p.as_str(), *v, *t)).collect();
    let mut whole = WindowState::new(window.clone()).unwrap();
    feed(&window, &mut whole, &input[..120]);
    let snap = whole.snapshot().unwrap();
    feed(&window, &mut whole, &input[120..]);
    let mut expected = run(&after, &mut whole, 100);
    expected.sort();
    let mut got = Vec::new();
    for k in 0..3u64 {
        let mut part = WindowState::new(window.clone()).unwrap();
        part.restore(std::slice::from_ref(&snap), k, 3).unwrap();
        // Each subtask takes the rows of the groups it owns (the router's rule).
        let mine: Vec<(&str, i64, i64)> = input[120..]
            .iter()
            .copied()
            .filter(|(p, _, _)| owned(&window, p, k))
            .collect();
        feed(&window, &mut part, &mine);
        got.extend(run(&after, &mut part, 100));
    }
    got.sort();
    assert_eq!(got, expected);
}

fn owned(window: &pubsub_engine_plan::WindowPlan, page: &str, k: u64) -> bool {
    let page: arrow::array::ArrayRef = Arc::new(arrow::array::StringArray::from(vec![page]));
    let rows = pubsub_engine_plan::window::key_converter(window)
        .unwrap()
        .convert_columns(&[page])
        .unwrap();
    pubsub_engine_plan::window::owner(rows.row(0).as_ref(), 3) == k
}

/// The sessions of `times` (seconds) with gap `gap`: `(start, end, count, sum of values)`.
fn sessions(rows: &mut [(i64, i64)], gap: i64) -> Vec<(i64, i64, i64, i64)> {
    rows.sort();
    let mut out: Vec<(i64, i64, i64, i64)> = Vec::new();
    for &(t, v) in rows.iter() {
        match out.last_mut() {
            Some(s) if t < s.1 => {
                s.1 = t + gap;
                s.2 += 1;
                s.3 += v;
            }
            _ => out.push((t, t + gap, 1, v)),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Rows arrive in random batches, out of order; after each batch the watermark is the
    /// highest time seen minus `bound`; the state is snapshotted and restored at `cut`.
    #[test]
    fn sessions_equal_a_batch_computation_over_the_rows_that_were_not_late(
        input in prop::collection::vec((0u8..4, 0i64..120, -50i64..50), 1..120),
        batch in 1usize..9,
        bound in 0i64..15,
        cut in 0usize..20,
    ) {
        let (after, window) = plan(PER_PAGE).unwrap();
        let window = Arc::new(window);
        let mut state = WindowState::new(window.clone()).unwrap();
        let mut watermark: Option<i64> = None;
        let mut max_seen = i64::MIN;
        let mut kept: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
        let mut late = 0;
        let mut counted = 0;
        let mut got = Vec::new();
        for (i, chunk) in input.chunks(batch).enumerate() {
            let rows: Vec<(String, i64, i64)> =
                chunk.iter().map(|(k, t, v)| (format!("k{k}"), *v, *t)).collect();
            for (k, v, t) in &rows {
                if watermark.is_some_and(|w| *t <= w) {
                    late += 1;
                } else {
                    kept.entry(k.clone()).or_default().push((*t, *v));
                }
                max_seen = max_seen.max(*t);
            }
            let rows: Vec<(&str, i64, i64)> = rows.iter().map(|(k, v, t)| (k.as_str(), *v, *t)).collect();
            feed(&window, &mut state, &rows);
            if i == cut {
                counted += state.take_late();
                let snap = state.snapshot().unwrap();
                state = WindowState::new(window.clone()).unwrap();
                state.restore(&[snap], 0, 1).unwrap();
            }
            let w = max_seen - bound;
            if watermark.is_none_or(|c| w > c) {
                watermark = Some(w);
                got.extend(run(&after, &mut state, w));
            }
        }
        got.extend(run(&after, &mut state, 1_000));
        prop_assert_eq!(counted + state.take_late(), late);
        let mut expected: Vec<Vec<String>> = Vec::new();
        for (k, rows) in kept.iter_mut() {
            for (s, e, n, sum) in sessions(rows, 5) {
                expected.push(vec![stamp(s), stamp(e), k.clone(), n.to_string(), sum.to_string()]);
            }
        }
        got.sort();
        expected.sort();
        prop_assert_eq!(got, expected);
    }
}

fn stamp(s: i64) -> String {
    let t = chrono::DateTime::from_timestamp(s, 0).unwrap();
    t.format("%Y-%m-%dT%H:%M:%S").to_string()
}
