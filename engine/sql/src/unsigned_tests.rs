//! `INT UNSIGNED` and `BIGINT UNSIGNED` columns in SQL (issue 32, item 3): casts between
//! signed and unsigned keep the value or fail the row, arithmetic fails instead of
//! wrapping, and windowed aggregates (`sum` overflowing fails) run over them.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, TimestampNanosecondArray, UInt32Array,
    UInt64Array,
};
use arrow::datatypes::{DataType, Int64Type, UInt32Type, UInt64Type};

use super::aggregate::plan_windowed;
use super::parse::parse_pipeline;
use super::window_tests::S;
use super::SqlError;
use pubsub_engine_plan::window::WindowState;
use pubsub_engine_plan::WindowPlan;
use pubsub_engine_spi::{ConnectionSchema, FieldType, SourceField};
use {super::select::plan_select, pubsub_engine_plan::SelectPlan};

/// `src`: u BIGINT UNSIGNED, ui INT UNSIGNED, b BIGINT.
fn src() -> ConnectionSchema {
    ConnectionSchema::json(vec![
        SourceField::new("u", FieldType::UBigint),
        SourceField::new("ui", FieldType::UInt),
        SourceField::new("b", FieldType::Bigint),
    ])
}

fn batch(rows: &[(u64, u32, i64)]) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.1))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
    ];
    RecordBatch::try_new(src().arrow_schema(), cols).unwrap()
}

fn plan(select: &str) -> Result<SelectPlan, SqlError> {
    let file = format!(
        "CREATE TABLE src (u BIGINT UNSIGNED) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT) WITH ('x' = 'y');\nINSERT INTO out {select};"
    );
    let p = parse_pipeline(&file)?;
    plan_select(&p.inserts[0].query, "src", &src(), "INSERT INTO out")
}

/// The row failure of `select` on `rows`: (row, message).
fn fails(select: &str, rows: &[(u64, u32, i64)]) -> (usize, String) {
    let f = plan(select).unwrap().evaluate(&batch(rows)).unwrap_err();
    (f.row, f.error.to_string())
}

#[test]
fn unsigned_columns_keep_their_types_and_every_value() {
    let p = plan("SELECT u, ui, CAST(ui AS BIGINT) AS wide, ui + 1 AS next FROM src").unwrap();
    let types: Vec<FieldType> = p.fields.iter().map(|f| f.field_type).collect();
    assert_eq!(
        types,
        [
            FieldType::UBigint,
            FieldType::UInt,
            FieldType::Bigint,
            FieldType::Bigint
        ]
    );
    let out = p
        .evaluate(&batch(&[(u64::MAX, u32::MAX, -1), (0, 0, 0)]))
        .unwrap();
    assert_eq!(
        out.column(0).as_primitive::<UInt64Type>().values(),
        &[u64::MAX, 0]
    );
    assert_eq!(
        out.column(1).as_primitive::<UInt32Type>().values(),
        &[u32::MAX, 0]
    );
    assert_eq!(
        out.column(3).as_primitive::<Int64Type>().values(),
        &[i64::from(u32::MAX) + 1, 1]
    );
}

#[test]
fn a_cast_between_signed_and_unsigned_keeps_the_value_or_fails_the_row() {
    // Fits: the value is kept.
    let p = plan("SELECT CAST(b AS BIGINT UNSIGNED) AS bu, CAST(u AS BIGINT) AS ub, CAST(u AS INT UNSIGNED) AS uu FROM src").unwrap();
    assert_eq!(p.fields[0].field_type, FieldType::UBigint);
    let out = p.evaluate(&batch(&[(7, 0, 5)])).unwrap();
    assert_eq!(out.column(0).as_primitive::<UInt64Type>().value(0), 5);
    assert_eq!(out.column(1).as_primitive::<Int64Type>().value(0), 7);
    assert_eq!(out.column(2).as_primitive::<UInt32Type>().value(0), 7);

    // A negative BIGINT into BIGINT UNSIGNED fails its row, never wraps.
    let (row, e) = fails(
        "SELECT CAST(b AS BIGINT UNSIGNED) FROM src",
        &[(0, 0, 1), (0, 0, -1)],
    );
    assert_eq!(row, 1, "{e}");
    assert!(e.contains("-1") && e.contains("BIGINT UNSIGNED"), "{e}");
    // Above i64::MAX into BIGINT, above u32::MAX into INT UNSIGNED.
    let (row, e) = fails("SELECT CAST(u AS BIGINT) FROM src", &[(u64::MAX, 0, 0)]);
    assert_eq!(row, 0);
    assert!(
        e.contains("18446744073709551615") && e.contains("BIGINT"),
        "{e}"
    );
    let (_, e) = fails(
        "SELECT CAST(u AS INT UNSIGNED) FROM src",
        &[(1 << 32, 0, 0)],
    );
    assert!(
        e.contains("4294967296") && e.contains("INT UNSIGNED"),
        "{e}"
    );
    // A fraction into an unsigned column is not rounded.
    let (_, e) = fails("SELECT CAST(1.5 AS BIGINT UNSIGNED) FROM src", &[(0, 0, 0)]);
    assert!(e.contains("1.5") && e.contains("BIGINT UNSIGNED"), "{e}");

    // TRY_CAST: NULL for a value that does not fit.
    let out = plan("SELECT TRY_CAST(b AS BIGINT UNSIGNED) FROM src")
        .unwrap()
        .evaluate(&batch(&[(0, 0, -1), (0, 0, 3)]))
        .unwrap();
    let c = out.column(0).as_primitive::<UInt64Type>();
    assert_eq!((c.is_null(0), c.value(1)), (true, 3));
}

#[test]
fn unsigned_arithmetic_fails_instead_of_wrapping() {
    let (row, e) = fails("SELECT u + u FROM src", &[(1, 0, 0), (u64::MAX, 0, 0)]);
    assert_eq!(row, 1, "{e}");
    assert!(e.to_lowercase().contains("overflow"), "{e}");
    let (_, e) = fails("SELECT ui - ui - ui FROM src", &[(0, 1, 0)]);
    assert!(e.to_lowercase().contains("overflow"), "{e}");
}

#[test]
fn a_signed_expression_into_an_unsigned_column_needs_a_cast() {
    // `u + b` is DECIMAL(21, 0) in DataFusion (no integer type holds both): the column
    // type is the CAST the user writes, checked per row.
    let e = plan("SELECT u + b FROM src").map(|_| ()).unwrap_err().0;
    assert!(e.contains("which no column type holds"), "{e}");
    assert!(e.contains("BIGINT UNSIGNED"), "{e}");
    let p = plan("SELECT CAST(u + b AS BIGINT UNSIGNED) AS s FROM src").unwrap();
    let out = p.evaluate(&batch(&[(u64::MAX, 0, -1)])).unwrap();
    assert_eq!(
        out.column(0).as_primitive::<UInt64Type>().value(0),
        u64::MAX - 1
    );
    let (_, e) = fails(
        "SELECT CAST(u + b AS BIGINT UNSIGNED) AS s FROM src",
        &[(0, 0, -1)],
    );
    assert!(e.contains("BIGINT UNSIGNED"), "{e}");
}

/// A windowed query over `src` with the event time after its columns.
fn windowed(select: &str) -> (SelectPlan, Arc<WindowPlan>) {
    let sql = format!(
        "CREATE TABLE src (u BIGINT UNSIGNED) WITH ('x' = 'y');\nCREATE TABLE out (a TEXT) WITH ('x' = 'y');\nINSERT INTO out {select}"
    );
    let p = parse_pipeline(&sql).unwrap();
    let (after, window) = plan_windowed(
        &p.inserts[0].query,
        "src",
        &src(),
        (3, "__event_time"),
        false,
        crate::aggregate::DEFAULT_UPDATING,
        "INSERT INTO out",
    )
    .unwrap();
    (after, Arc::new(window))
}

fn feed(window: &WindowPlan, state: &mut WindowState, rows: &[(u64, u32, i64)]) {
    let b = batch(rows);
    let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from_iter_values(
        (0..rows.len() as i64).map(|i| i * S),
    ));
    let mut cols = b.columns().to_vec();
    cols.push(ts);
    let mut fields: Vec<_> = b.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new(
        "__event_time",
        ts_type(),
        false,
    )));
    let rows = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), cols).unwrap();
    state
        .update(&window.before.evaluate(&rows).unwrap())
        .unwrap();
}

fn ts_type() -> DataType {
    DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, None)
}

#[test]
fn windowed_aggregates_over_unsigned_columns_are_exact_and_a_sum_overflow_fails() {
    let (after, window) = windowed(
        "SELECT n, total, lo, hi, small FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, count(u) AS n, sum(u) AS total, min(u) AS lo, max(u) AS hi, sum(ui) AS small FROM src GROUP BY window)",
    );
    let types: Vec<FieldType> = after.fields.iter().map(|f| f.field_type).collect();
    assert_eq!(
        types,
        [
            FieldType::Bigint,
            FieldType::UBigint,
            FieldType::UBigint,
            FieldType::UBigint,
            FieldType::UBigint
        ]
    );
    let mut state = WindowState::new(window.clone()).unwrap();
    // Beyond i64::MAX and 2^53, summed exactly; u32::MAX twice exceeds INT UNSIGNED.
    let big = u64::MAX - 10;
    feed(
        &window,
        &mut state,
        &[(big, u32::MAX, 0), (3, u32::MAX, 0), (0, 0, 0)],
    );
    let fired = state.advance(100 * S).unwrap();
    let b = after.evaluate(&fired[0]).unwrap();
    assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), 3);
    assert_eq!(b.column(1).as_primitive::<UInt64Type>().value(0), big + 3);
    assert_eq!(b.column(2).as_primitive::<UInt64Type>().value(0), 0);
    assert_eq!(b.column(3).as_primitive::<UInt64Type>().value(0), big);
    assert_eq!(
        b.column(4).as_primitive::<UInt64Type>().value(0),
        2 * u64::from(u32::MAX)
    );

    // A sum beyond u64::MAX fails the window, never wraps.
    let mut state = WindowState::new(window.clone()).unwrap();
    feed(&window, &mut state, &[(u64::MAX, 0, 0), (1, 0, 0)]);
    let e = format!("{:#}", state.advance(100 * S).unwrap_err());
    assert!(e.contains("does not fit"), "{e}");
}
