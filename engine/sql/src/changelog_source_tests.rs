//! Changelog sources (format `debezium_json`, issue 47) without a runtime: planning and
//! its refusals, the changes a stateless query writes, and an updating aggregate over a
//! changelog whose final state a consumer builds equals DataFusion's batch `GROUP BY` over
//! the rows the input changelog leaves, with and without a crash and a rescale.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow::datatypes::DataType;
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

use super::window_tests::text_rows;
use pubsub_engine_plan::window::{key_converter, split_by_group, WindowState};
use pubsub_engine_plan::{PlannedPipeline, PlannedQuery};
use pubsub_engine_spi::changelog::{CREATE, DELETE, UPDATE};

const SRC: &str = "CREATE TABLE src (id BIGINT PRIMARY KEY, page TEXT, v BIGINT) WITH ('connector' = 'mem', 'role' = 'source', 'format' = 'debezium_json')";

fn plan_sql(sql: &str) -> Result<PlannedPipeline, String> {
    let parsed = super::parse_pipeline(sql).map_err(|e| e.0)?;
    let connectors: Vec<Arc<dyn pubsub_engine_spi::ErasedConnector>> =
        vec![Arc::new(crate::test_mem::Mem)];
    super::plan_pipeline(&parsed, &connectors).map_err(|e| e.0)
}

/// Plans `insert` over [`SRC`] into `out`.
fn plan(out: &str, insert: &str) -> Result<PlannedQuery, String> {
    plan_sql(&format!("{SRC};\n{out};\n{insert}")).map(|p| p.queries[0].clone())
}

const OUT: &str =
    "CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json')";

/// A row of the source: `(id, page, v)`.
type Row = (i64, String, Option<i64>);

/// One change: op, old row, new row.
type Change = (&'static str, Option<Row>, Option<Row>);

/// Changes as the source's rows (`rows_schema`: every column as the new row, again as
/// the old row, then the operation); hidden columns get a fixed value.
fn changes_batch(q: &PlannedQuery, changes: &[Change]) -> RecordBatch {
    let schema = q.source.connection.schema.rows_schema();
    let fields = &q.source.connection.schema.fields;
    let mut columns: Vec<ArrayRef> = Vec::new();
    for image in [2, 1] {
        let row = |c: &Change| if image == 2 { c.2.clone() } else { c.1.clone() };
        for f in fields {
            let col: ArrayRef = match (f.name.as_str(), f.field_type.arrow_type()) {
                ("id", _) => Arc::new(Int64Array::from_iter(
                    changes.iter().map(|c| row(c).map(|r| r.0)),
                )),
                ("page", _) => Arc::new(StringArray::from_iter(
                    changes.iter().map(|c| row(c).map(|r| r.1)),
                )),
                ("v", _) => Arc::new(Int64Array::from_iter(
                    changes.iter().map(|c| row(c).and_then(|r| r.2)),
                )),
                (_, DataType::Timestamp(..)) => Arc::new(TimestampNanosecondArray::from_iter(
                    changes.iter().map(|c| row(c).map(|_| 0)),
                )),
                (_, DataType::Utf8) => Arc::new(StringArray::from_iter(
                    changes.iter().map(|c| row(c).map(|r| format!("m{}", r.0))),
                )),
                (name, t) => panic!("no test value for hidden column {name} ({t})"),
            };
            columns.push(col);
        }
    }
    columns.push(Arc::new(StringArray::from_iter_values(
        changes.iter().map(|c| c.0),
    )));
    RecordBatch::try_new(schema, columns).unwrap()
}

fn row(id: i64, page: &str, v: i64) -> Row {
    (id, page.to_string(), Some(v))
}

/// A written change as text: op, new row's cells, old row's cells.
fn written(batch: &RecordBatch, width: usize) -> Vec<(String, Vec<String>, Vec<String>)> {
    text_rows(batch)
        .into_iter()
        .map(|c| {
            (
                c[2 * width].clone(),
                c[..width].to_vec(),
                c[width..2 * width].to_vec(),
            )
        })
        .collect()
}

fn w(op: &str, after: &[&str], before: &[&str]) -> (String, Vec<String>, Vec<String>) {
    let cells = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
    (op.to_string(), cells(after), cells(before))
}

#[test]
fn a_stateless_query_writes_each_change_as_its_where_sees_both_rows() {
    let q = plan(
        OUT,
        "INSERT INTO out SELECT id, upper(page) AS page, v * 2 AS v2 FROM src WHERE v > 0",
    )
    .unwrap();
    let input = [
        (CREATE, None, Some(row(1, "a", 5))),
        (CREATE, None, Some(row(2, "b", -1))),
        (UPDATE, Some(row(1, "a", 5)), Some(row(1, "a", 6))),
        // Out of the rows the WHERE keeps: a delete; into them: a create.
        (UPDATE, Some(row(1, "a", 6)), Some(row(1, "a", -6))),
        (UPDATE, Some(row(2, "b", -1)), Some(row(2, "c", 1))),
        (DELETE, Some(row(2, "c", 1)), None),
        (DELETE, Some(row(1, "a", -6)), None),
    ];
    let out = q.project(&changes_batch(&q, &input)).unwrap();
    // A NULL cell prints as "".
    assert_eq!(
        written(&out, 3),
        vec![
            w(CREATE, &["1", "A", "10"], &["", "", ""]),
            w(UPDATE, &["1", "A", "12"], &["1", "A", "10"]),
            w(DELETE, &["", "", ""], &["1", "A", "12"]),
            w(CREATE, &["2", "C", "2"], &["", "", ""]),
            w(DELETE, &["", "", ""], &["2", "C", "2"]),
        ]
    );
    // The sink's rows: the changelog layout over the sink's columns.
    let names: Vec<String> = out
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        [
            "id",
            "page",
            "v2",
            "__before.id",
            "__before.page",
            "__before.v2",
            "__op"
        ]
    );
}

#[test]
fn a_failing_expression_names_the_change_whose_row_fails() {
    let q = plan(OUT, "INSERT INTO out SELECT id, 10 / v AS x FROM src").unwrap();
    let input = [
        (CREATE, None, Some(row(1, "a", 5))),
        (DELETE, Some(row(2, "b", 0)), None),
    ];
    let e = format!("{:#}", q.project(&changes_batch(&q, &input)).unwrap_err());
    assert!(
        e.contains("row 1 of its batch") && e.contains("10 / v"),
        "{e}"
    );
}

fn refused(sql: &str) -> String {
    plan_sql(sql)
        .err()
        .unwrap_or_else(|| panic!("planned: {sql}"))
}

#[test]
fn changelog_sources_are_refused_where_they_cannot_be_read_with_positions() {
    // Into a table that is no changelog: the FROM's position.
    let e = refused(&format!(
        "{SRC};\nCREATE TABLE j (id BIGINT) WITH ('connector' = 'mem', 'role' = 'sink');\nINSERT INTO j SELECT id FROM src"
    ));
    assert!(
        e.contains("table 'src' is a changelog (format 'debezium_json')")
            && e.contains(
                "table 'j' has format 'json': declare it with 'format' = 'debezium_json'"
            )
            && e.contains("(line 3, column 30)"),
        "{e}"
    );
    // A window over it.
    let e = refused(&format!(
        "{SRC};\n{OUT};\nINSERT INTO out SELECT window.start AS s, n FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, count(*) AS n FROM src GROUP BY window)"
    ));
    assert!(
        e.contains("which windows do not read yet") && e.contains("line 3"),
        "{e}"
    );
    // No primary key.
    let e = refused(&format!(
        "CREATE TABLE src (id BIGINT, v BIGINT) WITH ('connector' = 'mem', 'role' = 'source', 'format' = 'debezium_json');\n{OUT};\nINSERT INTO out SELECT id FROM src"
    ));
    assert!(
        e.contains("table 'src': a changelog source (format 'debezium_json') needs a primary key"),
        "{e}"
    );
    // A primary key elsewhere.
    let e = refused(
        "CREATE TABLE src (id BIGINT PRIMARY KEY) WITH ('connector' = 'mem', 'role' = 'source');\nCREATE TABLE j (id BIGINT) WITH ('connector' = 'mem', 'role' = 'sink');\nINSERT INTO j SELECT id FROM src",
    );
    assert!(
        e.contains("table 'src': PRIMARY KEY (id) applies to a changelog source"),
        "{e}"
    );
    // Metadata columns.
    let e = refused(&format!(
        "CREATE TABLE src (id BIGINT PRIMARY KEY, m TEXT METADATA FROM 'id') WITH ('connector' = 'mem', 'role' = 'source', 'format' = 'debezium_json');\n{OUT};\nINSERT INTO out SELECT id FROM src"
    ));
    assert!(e.contains("column 'm' reads metadata"), "{e}");
    // A key naming no column, twice, or declared twice.
    for (sql, needle) in [
        ("CREATE TABLE s (id BIGINT, PRIMARY KEY (nope)) WITH ('connector' = 'mem', 'role' = 'source')", "PRIMARY KEY names column 'nope', which the table does not declare"),
        ("CREATE TABLE s (id BIGINT, PRIMARY KEY (id, id)) WITH ('connector' = 'mem', 'role' = 'source')", "PRIMARY KEY names column 'id' twice"),
        ("CREATE TABLE s (id BIGINT PRIMARY KEY, PRIMARY KEY (id)) WITH ('connector' = 'mem', 'role' = 'source')", "declares its primary key twice"),
        ("CREATE TABLE s (id BIGINT, CONSTRAINT pk PRIMARY KEY (id)) WITH ('connector' = 'mem', 'role' = 'source')", "a table constraint is not supported"),
    ] {
        let e = super::parse_pipeline(sql).err().unwrap().0;
        assert!(e.contains(needle), "{sql}: {e}");
    }
    // A key column is NOT NULL.
    let q = plan(OUT, "INSERT INTO out SELECT id FROM src").unwrap();
    let id = &q.source.connection.schema.fields[0];
    assert!(id.required, "{id:?}");
}

/// Every aggregate the oracle compares: retracting ones (`count`, `sum`, `avg`) and ones
/// that keep their values (`min`, `max`, a DISTINCT), with a HAVING.
const QUERY: &str = "SELECT page, count(*) AS n, count(v) AS nv, count(DISTINCT v) AS dv, sum(v) AS total, min(v) AS lo, max(v) AS hi, avg(v) AS mean FROM src GROUP BY page HAVING count(*) > 1 OR sum(v) > 0";

/// The changes of a seeded random history of rows `0..ids`: each step creates a row
/// that does not exist, or updates or deletes one that does.
fn history(steps: &[(u8, u8, u8, Option<i64>)], ids: u8) -> Vec<Change> {
    let mut rows: BTreeMap<i64, Row> = BTreeMap::new();
    let mut out = Vec::new();
    for (id, what, page, v) in steps {
        let id = i64::from(id % ids);
        let new = (id, format!("p{}", page % 4), *v);
        match (rows.get(&id).cloned(), what % 3) {
            (None, _) => {
                out.push((CREATE, None, Some(new.clone())));
                rows.insert(id, new);
            }
            (Some(old), 0) => {
                out.push((DELETE, Some(old), None));
                rows.remove(&id);
            }
            (Some(old), _) => {
                out.push((UPDATE, Some(old), Some(new.clone())));
                rows.insert(id, new);
            }
        }
    }
    out
}

/// The rows a changelog leaves.
fn net(changes: &[Change]) -> Vec<Row> {
    let mut rows: BTreeMap<i64, Row> = BTreeMap::new();
    for (_, before, after) in changes {
        if let Some(b) = before {
            rows.remove(&b.0);
        }
        if let Some(a) = after {
            rows.insert(a.0, a.clone());
        }
    }
    rows.into_values().collect()
}

/// DataFusion's batch [`QUERY`] over `rows`, by group.
fn batch_sql(rows: &[Row]) -> BTreeMap<String, Vec<String>> {
    batch_sql_of(QUERY, rows)
}

/// DataFusion's batch `query` over `rows`, by group.
fn batch_sql_of(query: &str, rows: &[Row]) -> BTreeMap<String, Vec<String>> {
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)));
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.1)));
    let v: ArrayRef = Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2)));
    let src = RecordBatch::try_from_iter([("id", id), ("page", page), ("v", v)]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        let ctx = SessionContext::new();
        ctx.register_batch("src", src).unwrap();
        ctx.sql(query).await.unwrap().collect().await.unwrap()
    });
    out.iter()
        .flat_map(text_rows)
        .map(|r| (r[0].clone(), r))
        .collect()
}

/// Streams `changes` in batches of `per_batch` through `peers` subtasks, flushing after
/// every `flush_every` batches; with a crash `(cut, extra, peers_after)` as in
/// `updating_tests::stream`. Returns what a consumer applying the changelog holds.
fn stream(
    changes: &[Change],
    per_batch: usize,
    flush_every: usize,
    peers: u64,
    crash: Option<(usize, usize, u64)>,
) -> BTreeMap<String, Vec<String>> {
    stream_of(QUERY, changes, per_batch, flush_every, peers, crash)
}

/// [`stream`] of `query`.
fn stream_of(
    query: &str,
    changes: &[Change],
    per_batch: usize,
    flush_every: usize,
    peers: u64,
    crash: Option<(usize, usize, u64)>,
) -> BTreeMap<String, Vec<String>> {
    let q = plan(OUT, &format!("INSERT INTO out {query}")).unwrap();
    let w = q.window.clone().unwrap();
    assert!(w.retracting);
    let converter = key_converter(&w).unwrap();
    let width = q.sink_schema.fields().len();
    let mut consumer: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut apply = |batch: &RecordBatch| {
        for (op, after, before) in written(batch, width) {
            match op.as_str() {
                DELETE => {
                    consumer.remove(&before[0]);
                }
                _ => {
                    consumer.insert(after[0].clone(), after);
                }
            }
        }
    };
    let state = || {
        let mut s = WindowState::new(w.clone()).unwrap();
        s.start_run(0, false);
        s
    };
    let batches: Vec<&[Change]> = changes.chunks(per_batch).collect();
    let mut states: Vec<WindowState> = (0..peers).map(|_| state()).collect();
    let flush_all = |states: &mut Vec<WindowState>, apply: &mut dyn FnMut(&RecordBatch)| {
        for s in states.iter_mut() {
            let rows = |b: &RecordBatch, h| q.sink_rows(b, h);
            if let Some(c) = s.flush(0, &q.sink_schema, false, &rows, true).unwrap() {
                apply(&c.batch);
            }
        }
    };
    let mut i = 0;
    let mut checkpoint = None;
    let mut crashed = false;
    while i < batches.len() {
        let first = w.first_stage(&changes_batch(&q, batches[i])).unwrap();
        let n = states.len() as u64;
        for (t, part) in split_by_group(&w, &converter, &first, n).unwrap() {
            states[t as usize].update_at(&part, 0).unwrap();
        }
        if (i + 1) % flush_every == 0 {
            flush_all(&mut states, &mut apply);
        }
        if let Some((cut, extra, peers_after)) = crash {
            if i == cut && checkpoint.is_none() {
                let snaps: Vec<_> = states.iter_mut().map(|s| s.snapshot().unwrap()).collect();
                checkpoint = Some((i, snaps));
            }
            if !crashed && (i == cut + extra || i + 1 == batches.len()) {
                if let Some((at, snaps)) = checkpoint.take() {
                    crashed = true;
                    states = (0..peers_after)
                        .map(|t| {
                            let mut s = WindowState::new(w.clone()).unwrap();
                            s.restore(&snaps, t, peers_after).unwrap();
                            s.start_run(100 + t, true);
                            s
                        })
                        .collect();
                    i = at + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    flush_all(&mut states, &mut apply);
    consumer
}

#[test]
fn a_history_with_every_row_deleted_ends_with_no_group() {
    let changes = [
        (CREATE, None, Some(row(1, "a", 5))),
        (CREATE, None, Some(row(2, "a", 7))),
        (UPDATE, Some(row(1, "a", 5)), Some(row(1, "b", 1))),
        (DELETE, Some(row(2, "a", 7)), None),
        (DELETE, Some(row(1, "b", 1)), None),
    ];
    assert_eq!(stream(&changes, 1, 1, 1, None), BTreeMap::new());
    assert_eq!(stream(&changes, 5, 1, 2, None), BTreeMap::new());
    // Before the deletes, `min` and `max` came back to the values left after a retraction.
    let some = &changes[..4];
    let got = stream(some, 2, 1, 1, None);
    assert_eq!(got, batch_sql(&net(some)));
    assert_eq!(got.len(), 1, "{got:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn an_updating_aggregate_over_a_changelog_ends_in_the_batch_sqls_state(
        steps in prop::collection::vec((0u8..8, 0u8..3, 0u8..4, prop::option::weighted(0.9, -20i64..20)), 1..120),
        per_batch in 1usize..10,
        flush_every in 1usize..4,
        peers in 1u64..4,
        crash in prop::option::of((0usize..12, 0usize..6, 1u64..4)),
    ) {
        let changes = history(&steps, 8);
        prop_assert_eq!(
            stream(&changes, per_batch, flush_every, peers, crash),
            batch_sql(&net(&changes))
        );
    }
}

#[test]
fn a_table_that_names_a_column_op_is_read_as_rows_not_changes() {
    let p = plan_sql(
        "CREATE TABLE j (a TEXT, b TEXT, __op TEXT) WITH ('connector' = 'mem', 'role' = 'source');
CREATE TABLE o (a TEXT, __op TEXT) WITH ('connector' = 'mem', 'role' = 'sink');
INSERT INTO o SELECT a, __op FROM j",
    )
    .unwrap();
    let q = &p.queries[0];
    let text = |v: &str| Arc::new(StringArray::from(vec![v])) as ArrayRef;
    let batch = RecordBatch::try_new(
        q.source.connection.schema.rows_schema(),
        vec![text("x"), text("y"), text("d")],
    )
    .unwrap();
    assert!(!pubsub_engine_plan::changelog::is_changes(&batch));
    assert_eq!(text_rows(&q.project(&batch).unwrap()), vec![vec!["x", "d"]]);
}

#[test]
fn a_group_whose_values_were_all_retracted_averages_to_null_not_nan() {
    let null: Row = (2, "a".to_string(), None);
    let changes = [
        (CREATE, None, Some(row(1, "a", 5))),
        (CREATE, None, Some(null.clone())),
        (CREATE, None, Some((4, "a".to_string(), None))),
        (CREATE, None, Some(row(3, "a", 6))),
        (DELETE, Some(row(1, "a", 5)), None),
        (DELETE, Some(row(3, "a", 6)), None),
    ];
    let want = batch_sql(&net(&changes));
    assert_eq!(want["a"][7], "", "DataFusion's avg of no value is NULL");
    assert_eq!(stream(&changes, 5, 1, 1, None), want);
    assert_eq!(stream(&changes, 1, 1, 1, None), want);
}

#[test]
fn floating_point_sums_and_averages_keep_their_values_and_match_the_batch_exactly() {
    let query = "SELECT page, sum(CAST(v AS DOUBLE) / 10) AS s, avg(v) AS a FROM src GROUP BY page";
    let changes = [
        (CREATE, None, Some(row(1, "a", 1))),
        (CREATE, None, Some(row(2, "a", 2))),
        (CREATE, None, Some(row(3, "a", 3))),
        (CREATE, None, Some(row(4, "a", 10_000_000_000_000_000))),
        (DELETE, Some(row(1, "a", 1)), None),
        (DELETE, Some(row(2, "a", 2)), None),
        (DELETE, Some(row(4, "a", 10_000_000_000_000_000)), None),
    ];
    let want = batch_sql_of(query, &net(&changes));
    assert_eq!(want["a"], vec!["a", "0.3", "3.0"]);
    assert_eq!(stream_of(query, &changes, 1, 1, 1, None), want);
}

#[test]
fn over_a_changelog_groups_are_kept_until_deleted_and_a_ttl_is_refused() {
    let q = plan(OUT, &format!("INSERT INTO out {QUERY}")).unwrap();
    assert!(matches!(
        q.window.as_ref().unwrap().kind,
        pubsub_engine_plan::WindowKind::Updating { ttl: i64::MAX, .. }
    ));
    let e = plan(
        "CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json', 'changelog.state-ttl' = '1h')",
        &format!("INSERT INTO out {QUERY}"),
    )
    .err()
    .unwrap();
    assert!(
        e.contains("option 'changelog.state-ttl' of table 'out' does not apply to an aggregate over a changelog (table 'src')"),
        "{e}"
    );
}

#[test]
fn a_stateless_querys_ordering_key_must_come_from_the_primary_key() {
    let out = "CREATE TABLE out (id BIGINT, page TEXT, k TEXT) WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json', 'key' = 'k')";
    plan(
        out,
        "INSERT INTO out SELECT id, page, CAST(id AS TEXT) AS k FROM src",
    )
    .unwrap();
    let e = plan(out, "INSERT INTO out SELECT id, page, page AS k FROM src")
        .err()
        .unwrap();
    assert!(
        e.contains("column 'k' of table 'out' is its ordering key, and over a changelog (table 'src') it must be computed from the primary key (id) alone"),
        "{e}"
    );
}
