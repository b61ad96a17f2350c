use std::sync::Arc;

use arrow::array::{Int64Array, StringArray, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use tokio::sync::mpsc;

use super::*;
use pubsub_engine_spi::dedup::DedupSpec;

fn spec() -> DedupSpec {
    DedupSpec {
        window_ms: 60_000,
        max_ids: 1_000,
        window_option: "scan.dedup.window",
        max_ids_option: "scan.dedup.max-ids",
        attribute_option: "scan.dedup.attribute",
    }
}

/// Source rows: a value, the hidden key (`ID#N` or NULL), the message (`m{v / 10}`:
/// rows 0..9 are one message) and the publish time (ms).
fn batch(rows: &[(i64, Option<&str>, i64)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("v", DataType::Int64, false),
        Field::new("__dedup_key", DataType::Utf8, true),
        Field::new("__dedup_message", DataType::Utf8, false),
        Field::new(
            "__dedup_published",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        ),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| format!("sub/m{}", r.0 / 10)),
            )),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| r.2 * 1_000_000),
            )),
        ],
    )
    .unwrap()
}

fn values(b: &RecordBatch) -> Vec<i64> {
    b.column(0)
        .as_primitive::<arrow::datatypes::Int64Type>()
        .values()
        .to_vec()
}

fn run(
    subtask: usize,
    peers: u64,
    restore: Vec<OperatorState>,
) -> (
    DedupRun,
    mpsc::UnboundedReceiver<CoordEvent>,
    Counter,
    Counter,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (dropped, behind) = (Counter::default(), Counter::default());
    let plumbing = DedupPlumbing {
        id: "q0-dedup".into(),
        restore,
        columns: DedupColumns {
            spec: spec(),
            key: 1,
            message: 2,
            published: 3,
        },
        counters: Some((dropped.clone(), behind.clone())),
        coordinator: tx,
    };
    (
        DedupRun::new(plumbing, subtask, peers, 3),
        rx,
        dropped,
        behind,
    )
}

/// The snapshots sent: (epoch, through_end, ids held).
fn snapshots(rx: &mut mpsc::UnboundedReceiver<CoordEvent>) -> Vec<(u64, bool, OperatorState)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        match e {
            CoordEvent::WindowSnapshot {
                epoch,
                through_end,
                state,
                ..
            } => out.push((epoch, through_end, serde_json::from_str(&state).unwrap())),
            CoordEvent::TaskFailed { error, .. } => panic!("failed: {error}"),
            _ => {}
        }
    }
    out
}

#[test]
fn every_row_of_every_copy_of_a_record_is_routed_to_one_worker_and_rows_without_an_id_stay() {
    let b = batch(&[
        (0, Some("a#0"), 1),
        (1, Some("b#0"), 1),
        (2, None, 1),
        (3, Some("a#0"), 2),
        (4, Some(""), 2),
        (5, Some("a#1"), 2),
    ]);
    let parts = split_by_id(&b, 1, 4, 3).unwrap();
    let target_of = |v: i64| {
        parts
            .iter()
            .find(|(_, p)| values(p).contains(&v))
            .map(|(t, _)| *t)
            .unwrap()
    };
    assert_eq!(target_of(0), target_of(3), "both copies of a#0");
    assert_eq!(target_of(0), target_of(5), "every row of record a");
    assert_eq!(target_of(0), owner_of(id_hash("a"), 4));
    assert_eq!(
        (target_of(2), target_of(4)),
        (3, 3),
        "no id: the own worker"
    );
    assert_eq!(parts.iter().map(|(_, p)| p.num_rows()).sum::<usize>(), 6);
}

#[test]
fn a_copy_is_dropped_in_any_batch_and_counted_once_per_message() {
    let (mut r, mut rx, dropped, behind) = run(0, 1, Vec::new());
    // Message m0 (rows 0 and 1, record m) and, in a later batch of the same epoch, its
    // third row: all kept, as one message's rows.
    let first = r
        .filter(
            3,
            &batch(&[(0, Some("m#0"), 100), (1, Some("m#1"), 100), (5, None, 100)]),
        )
        .unwrap();
    assert_eq!(values(&first), [0, 1, 5]);
    assert_eq!(
        values(&r.filter(3, &batch(&[(2, Some("m#2"), 100)])).unwrap()),
        [2]
    );
    // A copy of record m (message m1, two rows), a message without an id, a new record.
    let second = r
        .filter(
            4,
            &batch(&[
                (10, Some("m#0"), 150),
                (11, Some("m#1"), 150),
                (15, None, 150),
                (20, Some("n#0"), 150),
            ]),
        )
        .unwrap();
    assert_eq!(values(&second), [15, 20]);
    assert_eq!(dropped.get(), 1, "one message dropped (its two rows)");
    // A redelivery of m0 in a later epoch (its epoch committed, the ack was lost): a copy.
    assert_eq!(
        r.filter(5, &batch(&[(0, Some("m#0"), 100)]))
            .unwrap()
            .num_rows(),
        0
    );
    assert_eq!(dropped.get(), 2);
    // More than the window behind the newest: new, and counted as behind.
    let old = r
        .filter(5, &batch(&[(30, Some("o#0"), 150 - 61_000)]))
        .unwrap();
    assert_eq!(values(&old), [30]);
    assert_eq!(behind.get(), 1);
    assert!(snapshots(&mut rx).is_empty(), "no epoch complete yet");
}

/// Rows of epoch 4 arrive before epoch 3 is complete: the snapshot of epoch 3 must not
/// hold their ids (a restore from it replays them, and they must be written then), the
/// one of epoch 4 must.
#[test]
fn the_snapshot_of_an_epoch_holds_only_the_ids_of_that_epoch_and_before() {
    let (mut r, mut rx, ..) = run(0, 1, Vec::new());
    r.filter(4, &batch(&[(0, Some("late#0"), 10)])).unwrap();
    // The first copy, in epoch 3, arrives after: a copy, dropped.
    let copy = r
        .filter(3, &batch(&[(10, Some("late#0"), 5), (20, Some("x#0"), 5)]))
        .unwrap();
    assert_eq!(values(&copy), [20]);
    r.step(Some(4));
    r.step(Some(5));
    r.step(None);
    let snaps = snapshots(&mut rx);
    assert_eq!(
        snaps.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
        [(3, false), (4, false), (5, true)]
    );
    let restore = |s: &OperatorState| {
        let (mut r, ..) = run(0, 1, vec![s.clone()]);
        r.filter(
            9,
            &batch(&[(30, Some("late#0"), 20), (40, Some("x#0"), 20)]),
        )
        .map(|b| values(&b))
        .unwrap()
    };
    assert_eq!(restore(&snaps[0].2), [30], "epoch 3 holds x, not late");
    assert_eq!(
        restore(&snaps[1].2),
        Vec::<i64>::new(),
        "epoch 4 holds both"
    );
}

#[test]
fn a_restore_on_another_worker_count_keeps_each_id_on_its_owner() {
    let (mut r, mut rx, ..) = run(0, 1, Vec::new());
    let keys: Vec<String> = (0..30).map(|i| format!("k{i}#0")).collect();
    let rows: Vec<(i64, Option<&str>, i64)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (10 * i as i64, Some(k.as_str()), 1))
        .collect();
    r.filter(3, &batch(&rows)).unwrap();
    r.step(Some(4));
    let state = snapshots(&mut rx).remove(0).2;
    // On 3 workers each drops the copies of the rows it owns; together, every copy.
    let mut kept = 0;
    for w in 0..3 {
        let (mut r, ..) = run(w, 3, vec![state.clone()]);
        let mine: Vec<(i64, Option<&str>, i64)> = rows
            .iter()
            .filter(|(_, k, _)| owner_of(id_hash(id_of_row_key(k.unwrap())), 3) == w as u64)
            .copied()
            .collect();
        kept += r.filter(5, &batch(&mine)).unwrap().num_rows();
    }
    assert_eq!(kept, 0);
}

#[test]
fn reaching_the_bound_fails_the_job_naming_the_option() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let plumbing = DedupPlumbing {
        id: "q0-dedup".into(),
        restore: Vec::new(),
        columns: DedupColumns {
            spec: DedupSpec {
                max_ids: 1,
                ..spec()
            },
            key: 1,
            message: 2,
            published: 3,
        },
        counters: None,
        coordinator: tx,
    };
    let mut r = DedupRun::new(plumbing, 0, 1, 1);
    assert!(r
        .filter(1, &batch(&[(0, Some("a#0"), 1), (10, Some("b#0"), 1)]))
        .is_none());
    match rx.try_recv() {
        Ok(CoordEvent::TaskFailed { error, .. }) => {
            assert!(error.contains("scan.dedup.max-ids"), "{error}")
        }
        _ => panic!("the job fails"),
    }
}

#[test]
fn a_stage_is_found_by_its_table_whichever_query_ran_it() {
    let id = stage_id("q12", "clicks-raw");
    assert_eq!(id, "q12-dedup-clicks-raw");
    assert!(is_stage_of(&id, "clicks-raw"));
    assert!(!is_stage_of(&id, "clicks"));
    assert!(!is_stage_of(&id, "raw"));
    assert!(!is_stage_of("source-clicks-raw", "clicks-raw"));
    assert!(!is_stage_of("q-dedup-clicks", "clicks"));
    assert!(!is_stage_of("q1-window", "q1-window"));
}
