//! SELECT planning and evaluation without a runtime: exact outputs, refusals with their
//! positions, row failures naming their row.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray, TimestampNanosecondArray,
};
use arrow::datatypes::{Float64Type, Int64Type, TimestampNanosecondType};

use super::parse::parse_pipeline;
use super::SqlError;
use pubsub_engine_spi::{
    BadData, ConnectionSchema, FieldType, Format, SourceField, TimestampFormat,
};
use {super::select::plan_select, pubsub_engine_plan::SelectPlan};

fn field(name: &str, t: FieldType, required: bool, key: Option<&str>) -> SourceField {
    SourceField {
        name: name.into(),
        field_type: t,
        required,
        metadata_key: key.map(str::to_string),
    }
}

/// `src`: id TEXT (message-id), a BIGINT NOT NULL, i INT, d DOUBLE, s TEXT, ts TIMESTAMP,
/// j JSON, ok BOOLEAN.
fn src() -> ConnectionSchema {
    ConnectionSchema {
        event_time: None,
        format: Format::Json,
        timestamp_format: TimestampFormat::default(),
        bad_data: BadData::Fail,
        fields: vec![
            field("id", FieldType::Text, true, Some("message-id")),
            field("a", FieldType::Bigint, true, None),
            field("i", FieldType::Int, false, None),
            field("d", FieldType::Double, false, None),
            field("s", FieldType::Text, false, None),
            field("ts", FieldType::Timestamp, false, None),
            field("j", FieldType::Json, false, None),
            field("ok", FieldType::Boolean, false, None),
        ],
    }
}

fn batch(
    rows: &[(
        i64,
        Option<i32>,
        Option<f64>,
        Option<&str>,
        Option<i64>,
        Option<bool>,
    )],
) -> RecordBatch {
    let n = rows.len();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            (0..n).map(|i| format!("m{i}")),
        )),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.1))),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.2))),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.3))),
        Arc::new(TimestampNanosecondArray::from_iter(
            rows.iter().map(|r| r.4),
        )),
        Arc::new(StringArray::from_iter(
            rows.iter()
                .map(|r| r.3.map(|s| format!("{{\"k\":\"{s}\"}}"))),
        )),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| r.5))),
    ];
    RecordBatch::try_new(src().arrow_schema(), cols).unwrap()
}

/// Plans `SELECT <list> FROM src [WHERE ...]` written on line 2 of a file.
fn plan(select: &str) -> Result<SelectPlan, SqlError> {
    let file = format!(
        "CREATE TABLE src (a BIGINT) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT) WITH ('x' = 'y');\nINSERT INTO out {select};"
    );
    let p = parse_pipeline(&file)?;
    plan_select(&p.inserts[0].query, "src", &src(), "INSERT INTO out")
}

fn refused(select: &str, words: &[&str], at: &str) {
    let e = plan(select).map(|_| ()).unwrap_err().0;
    for w in words {
        assert!(e.contains(w), "{select}: '{e}' should say '{w}'");
    }
    let col = "INSERT INTO out ".len() + select.find(at).unwrap() + 1;
    assert!(
        e.contains(&format!("(line 2, column {col})")),
        "{select}: '{e}' should point at line 2, column {col}"
    );
}

#[test]
fn a_filter_and_expressions_give_exact_values_in_row_order() {
    let p = plan("SELECT a * 2 AS twice, upper(s), CAST(i AS BIGINT) + a, d / 4, a % 3 = 0 FROM src WHERE a > 1 AND s LIKE 'x%'").unwrap();
    let b = batch(&[
        (1, Some(1), Some(1.0), Some("xa"), None, None),
        (2, Some(2), Some(2.0), Some("xb"), None, None),
        (3, None, Some(6.0), Some("yc"), None, None),
        (6, Some(4), None, Some("xd"), None, None),
        (7, Some(5), Some(1.0), None, None, None),
    ]);
    let out = p.evaluate(&b).unwrap();
    assert_eq!(
        out.num_rows(),
        2,
        "rows 2 and 6 pass; NULL s is not LIKE anything"
    );
    assert_eq!(out.column(0).as_primitive::<Int64Type>().values(), &[4, 12]);
    assert_eq!(out.column(1).as_string::<i32>().value(1), "XD");
    assert_eq!(out.column(2).as_primitive::<Int64Type>().values(), &[4, 10]);
    let d = out.column(3).as_primitive::<Float64Type>();
    assert_eq!((d.value(0), d.is_null(1)), (0.5, true));
    let m = out.column(4).as_boolean();
    assert_eq!((m.value(0), m.value(1)), (false, true));
    let names: Vec<&str> = p.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names[0], "twice");
    assert_eq!(p.fields[0].field_type, FieldType::Bigint);
    assert!(
        p.fields[0].required,
        "a * 2 of a NOT NULL column is NOT NULL"
    );
}

#[test]
fn a_bare_column_keeps_its_declared_type_and_metadata_key() {
    let p = plan("SELECT j, id, ts FROM src").unwrap();
    assert_eq!(p.fields[0].field_type, FieldType::Json);
    assert_eq!(p.fields[1].metadata_key.as_deref(), Some("message-id"));
    assert_eq!(p.fields[2].field_type, FieldType::Timestamp);
    let p = plan("SELECT * FROM src").unwrap();
    assert_eq!(p.fields, src().fields);
}

#[test]
fn date_and_time_functions_work_on_timestamps() {
    let p = plan("SELECT date_trunc('hour', ts), extract(minute FROM ts), to_timestamp('2024-05-01T10:20:30Z') FROM src").unwrap();
    // 2024-05-01T10:20:30.5Z
    let t = 1_714_558_830_500_000_000;
    let out = p
        .evaluate(&batch(&[(1, None, None, None, Some(t), None)]))
        .unwrap();
    let hour = out
        .column(0)
        .as_primitive::<TimestampNanosecondType>()
        .value(0);
    assert_eq!(hour, 1_714_557_600_000_000_000);
    assert_eq!(
        out.column(2)
            .as_primitive::<TimestampNanosecondType>()
            .value(0),
        1_714_558_830_000_000_000
    );
    let minute = arrow::compute::cast(out.column(1), &arrow::datatypes::DataType::Float64).unwrap();
    assert_eq!(minute.as_primitive::<Float64Type>().value(0), 20.0);
}

#[test]
fn implicit_conversions_that_could_change_a_value_are_refused() {
    refused(
        "SELECT a + d FROM src",
        &["BIGINT", "DOUBLE", "CAST"],
        "a + d",
    );
    // Compared as text, 9 > '10': refused, not silently lexicographic.
    refused(
        "SELECT a FROM src WHERE a > '10'",
        &["BIGINT", "TEXT"],
        "a > '10'",
    );
    refused(
        "SELECT a FROM src WHERE a = 1.5",
        &["BIGINT", "DOUBLE"],
        "a = 1.5",
    );
    // Text on the left of a number constant: compared as text too ('1940' < '500').
    for (select, at) in [
        // (sqlparser's span of a CAST starts at its operand)
        (
            "SELECT a FROM src WHERE CAST(a AS TEXT) > 500",
            "a AS TEXT) > 500",
        ),
        ("SELECT a FROM src WHERE s = 100", "s = 100"),
        ("SELECT a FROM src WHERE s IN ('x', 5)", "s IN ('x', 5)"),
        (
            "SELECT a FROM src WHERE s BETWEEN 5 AND 10",
            "s BETWEEN 5 AND 10",
        ),
    ] {
        refused(select, &["TEXT", "CAST"], at);
    }
    // Constants are shown as SQL writes them.
    let e = plan("SELECT a FROM src WHERE s = 100")
        .map(|_| ())
        .unwrap_err()
        .0;
    assert!(e.contains("`100`") && !e.contains("Int64(100)"), "{e}");
    // Exact ones pass: INT into DOUBLE, a whole constant into DOUBLE, explicit casts.
    for ok in [
        "SELECT i + d FROM src",
        "SELECT a FROM src WHERE d > 1000",
        "SELECT CAST(a AS DOUBLE) + d FROM src",
        "SELECT a FROM src WHERE ts > '2024-05-01T00:00:00Z'",
        // A cast that DataFusion elides names its column: two items, one name.
        "SELECT a, CAST(a AS BIGINT), CAST(CAST(a AS INT) AS BIGINT) FROM src",
    ] {
        plan(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn stateful_and_replay_unsafe_sql_is_refused_with_its_position() {
    refused(
        "SELECT count(a) FROM src",
        &["aggregate", "count", "not supported yet"],
        "count",
    );
    refused(
        "SELECT row_number() OVER (ORDER BY a) FROM src",
        &["window"],
        "row_number",
    );
    refused(
        "SELECT a FROM src WHERE a IN (SELECT a FROM src)",
        &["subquer"],
        "a IN",
    );
    refused(
        "SELECT now() FROM src",
        &["now", "replay", "publish-time"],
        "now",
    );
    refused("SELECT random() FROM src", &["random", "replay"], "random");
    refused("SELECT uuid() FROM src", &["uuid", "replay"], "uuid");
}

#[test]
fn unknown_names_get_a_suggestion() {
    let e = plan("SELECT upperr(s) FROM src").map(|_| ()).unwrap_err().0;
    assert!(
        e.contains("unknown function 'upperr'") && e.contains("did you mean 'upper'"),
        "{e}"
    );
    refused(
        "SELECT a, tss FROM src",
        &["column 'tss' does not exist", "did you mean 'ts'"],
        "tss",
    );
}

#[test]
fn a_failing_row_is_named_never_nulled() {
    let p = plan("SELECT CAST(s AS BIGINT) FROM src").unwrap();
    let b = batch(&[
        (1, None, None, Some("10"), None, None),
        (2, None, None, Some("11"), None, None),
        (3, None, None, Some("twelve"), None, None),
        (4, None, None, Some("x"), None, None),
    ]);
    let f = p.evaluate(&b).unwrap_err();
    assert_eq!((f.row, f.message_id.as_deref()), (2, Some("m2")));
    assert!(f.error.contains("twelve"), "{f}");
    assert_eq!(f.expr, "CAST(s AS BIGINT)");
    // TRY_CAST is the explicit choice of NULL.
    let p = plan("SELECT TRY_CAST(s AS BIGINT) FROM src").unwrap();
    assert_eq!(p.evaluate(&b).unwrap().column(0).null_count(), 2);
}

#[test]
fn integer_overflow_and_division_by_zero_are_row_failures() {
    let b = batch(&[
        (1, Some(0), None, None, None, None),
        (i64::MAX / 2 + 1, Some(1), None, None, None, None),
    ]);
    let f = plan("SELECT a * 2 FROM src")
        .unwrap()
        .evaluate(&b)
        .unwrap_err();
    assert_eq!(f.row, 1, "{f}");
    let f = plan("SELECT a / i FROM src")
        .unwrap()
        .evaluate(&b)
        .unwrap_err();
    assert_eq!(f.row, 0, "{f}");
    let min = batch(&[(i64::MIN, None, None, None, None, None)]);
    assert!(plan("SELECT -a FROM src").unwrap().evaluate(&min).is_err());
    let ok = plan("SELECT a + 1 FROM src")
        .unwrap()
        .evaluate(&batch(&[(41, None, None, None, None, None)]))
        .unwrap();
    assert_eq!(ok.column(0).as_primitive::<Int64Type>().value(0), 42);
}

const PAYLOADS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/payloads/"
);

/// A batch whose `j` column holds each of `docs` (and `s` the same text).
fn json_batch(docs: &[&str]) -> RecordBatch {
    let mut b = batch(&vec![(1, None, None, None, None, None); docs.len()]);
    let mut cols = b.columns().to_vec();
    cols[4] = Arc::new(StringArray::from_iter_values(docs.iter()));
    cols[6] = Arc::new(StringArray::from_iter_values(docs.iter()));
    b = RecordBatch::try_new(b.schema(), cols).unwrap();
    b
}

#[test]
fn json_getters_read_real_google_payloads() {
    let audit = std::fs::read_to_string(format!("{PAYLOADS}logging-sink-auditlog.json")).unwrap();
    let gcs =
        std::fs::read_to_string(format!("{PAYLOADS}gcs-notification-json-api-v1.json")).unwrap();
    let p = plan(
        "SELECT json_get_str(j, 'protoPayload', 'methodName'), \
                json_get_bool(j, 'protoPayload', 'authorizationInfo', 0, 'granted'), \
                json_get_json(j, 'resource', 'labels'), \
                json_get_int(j, 'generation'), \
                json_get_str(j, 'no', 'such', 'path') \
         FROM src",
    )
    .unwrap();
    let out = p.evaluate(&json_batch(&[&audit, &gcs])).unwrap();
    let method = out.column(0).as_string::<i32>();
    assert_eq!(
        (method.value(0), method.is_null(1)),
        ("storage.setIamPermissions", true)
    );
    let granted = out.column(1).as_boolean();
    assert!(granted.value(0) && granted.is_null(1));
    assert_eq!(
        out.column(2).as_string::<i32>().value(0),
        r#"{"bucket_name":"example-bucket","location":"us","project_id":"example-project"}"#
    );
    assert_eq!(p.fields[2].field_type, FieldType::Json);
    // proto3 JSON writes int64 as a string: "generation": "1607428286395814".
    let generation = out.column(3).as_primitive::<Int64Type>();
    assert_eq!(
        (generation.is_null(0), generation.value(1)),
        (true, 1607428286395814)
    );
    assert_eq!(
        out.column(4).null_count(),
        2,
        "an absent path is NULL, by the getter's contract"
    );
}

#[test]
fn a_json_value_of_another_type_is_a_row_failure() {
    let p = plan("SELECT json_get_int(j, 'k') FROM src").unwrap();
    let f = p
        .evaluate(&json_batch(&[r#"{"k": 1}"#, r#"{"k": 2.5}"#]))
        .unwrap_err();
    assert_eq!(f.row, 1, "{f}");
    assert!(f.error.contains("2.5"), "{f}");
    let f = plan("SELECT json_get_str(s, 'k') FROM src")
        .unwrap()
        .evaluate(&json_batch(&[r#"{"k": "x"}"#, "not json"]))
        .unwrap_err();
    assert_eq!(f.row, 1, "{f}");
    let f = plan("SELECT json_get_float(j, 'k') FROM src")
        .unwrap()
        .evaluate(&json_batch(&[r#"{"k": 9007199254740993}"#]))
        .unwrap_err();
    assert!(f.error.contains("9007199254740993"), "{f}");
    // Beyond u64 too (serde_json would read it as a rounded float).
    let f = plan("SELECT json_get_float(s, 'k') FROM src")
        .unwrap()
        .evaluate(&json_batch(&[r#"{"k": 123456789012345678901234567890}"#]))
        .unwrap_err();
    assert!(f.error.contains("123456789012345678901234567890"), "{f}");
    // A repeated key is refused, as when a message is decoded: keeping one value would
    // drop the other.
    let f = plan("SELECT json_get_int(s, 'a') FROM src")
        .unwrap()
        .evaluate(&json_batch(&[r#"{"a": 1, "a": 2}"#]))
        .unwrap_err();
    assert!(f.error.contains("twice"), "{f}");
}

#[test]
fn json_get_json_keeps_numbers_exactly_as_written() {
    let out = plan("SELECT json_get_json(s, 'x'), json_get_json(s, 'y'), json_get_json(s) FROM src")
        .unwrap()
        .evaluate(&json_batch(&[
            r#"{"x": 123456789012345678901234567890, "y": [1.10, 2, 1e2], "b": {"z": 1, "a": 0.1000000000000000055511151231257827}}"#,
        ]))
        .unwrap();
    let col = |i: usize| out.column(i).as_string::<i32>().value(0).to_string();
    assert_eq!(col(0), "123456789012345678901234567890");
    assert_eq!(col(1), "[1.10,2,1e2]");
    assert_eq!(
        col(2),
        r#"{"b":{"a":0.1000000000000000055511151231257827,"z":1},"x":123456789012345678901234567890,"y":[1.10,2,1e2]}"#
    );
}

/// Rows 1 and 4 fail `100 / i` (i = 0). Message starts [0, 1, 1, 3]: message 0 is row 0,
/// message 1 yielded no rows, message 2 is rows 1..3, message 3 rows 3..6. Messages 2 and
/// 3 are rejected whole; message 0's row stays, in order.
#[test]
fn a_failing_row_rejects_its_whole_message_and_keeps_the_rest_in_order() {
    use pubsub_engine_plan::{reject_failing, RowCheck};
    let rows: Vec<_> = [1, 0, 5, 7, 0, 9]
        .iter()
        .enumerate()
        .map(|(k, i)| (k as i64, Some(*i), None, None, None, None))
        .collect();
    let checks = [RowCheck {
        text: "INSERT INTO out SELECT 100 / i FROM src".into(),
        select: Arc::new(plan("SELECT 100 / i FROM src").unwrap()),
        changes: false,
    }];
    let (kept, rejected) = reject_failing(&checks, batch(&rows), &[0, 1, 1, 3]);
    let a = kept.column(1).as_primitive::<Int64Type>();
    assert_eq!(a.values().to_vec(), vec![0]);
    assert_eq!(
        rejected.iter().map(|r| r.message_index).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert!(
        rejected[0]
            .failure
            .starts_with("INSERT INTO out SELECT 100 / i FROM src: `100 / i` failed: ")
            && rejected[0].failure.contains("Divide by zero"),
        "{}",
        rejected[0].failure
    );
    // Nothing fails: the batch comes back whole.
    let ok: Vec<_> = [1, 2]
        .iter()
        .map(|i| (0, Some(*i), None, None, None, None))
        .collect();
    let (kept, rejected) = reject_failing(&checks, batch(&ok), &[0, 1]);
    assert_eq!((kept.num_rows(), rejected.len()), (2, 0));
}

/// Functions DataFusion runs only after their own rewrite (`coalesce` and `nvl` become a
/// CASE, `nvl2` too, `arrow_cast` a CAST) work here without its optimizer.
#[test]
fn functions_that_need_their_rewrite_evaluate() {
    let p = plan(
        "SELECT coalesce(upper(s), 'NONE'), nvl(i, 0), nvl2(s, 'has', 'none'), arrow_cast(i, 'Int64') FROM src",
    )
    .unwrap();
    let out = p
        .evaluate(&batch(&[
            (1, Some(4), None, Some("ab"), None, None),
            (2, None, None, None, None, None),
        ]))
        .unwrap();
    let c = out.column(0).as_string::<i32>();
    assert_eq!((c.value(0), c.value(1)), ("AB", "NONE"));
    let n = arrow::compute::cast(out.column(1), &arrow::datatypes::DataType::Int64).unwrap();
    assert_eq!(n.as_primitive::<Int64Type>().values(), &[4, 0]);
    let h = out.column(2).as_string::<i32>();
    assert_eq!((h.value(0), h.value(1)), ("has", "none"));
    let a = out.column(3).as_primitive::<Int64Type>();
    assert_eq!((a.value(0), a.is_null(1)), (4, true));
}

/// An INSERT maps select items to sink columns by position, so one column may feed two
/// (`SELECT seq, mid, mid`, as the cluster test's ordering key does); an alias keeps a bare
/// column's type and metadata key.
#[test]
fn repeated_items_and_aliased_columns_plan() {
    let p = plan("SELECT a, id, id, src.id, a + 1, a + 1, *, j AS doc, id AS m FROM src").unwrap();
    let names: Vec<&str> = p.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(&names[..6], ["a", "id", "id", "id", "a + 1", "a + 1"]);
    assert_eq!(p.fields.len(), 6 + src().fields.len() + 2);
    let doc = &p.fields[p.fields.len() - 2];
    assert_eq!(
        (doc.name.as_str(), doc.field_type),
        ("doc", FieldType::Json)
    );
    let m = &p.fields[p.fields.len() - 1];
    assert_eq!(m.metadata_key.as_deref(), Some("message-id"));
    let out = p
        .evaluate(&batch(&[(7, None, None, None, None, None)]))
        .unwrap();
    assert_eq!(out.column(2).as_string::<i32>().value(0), "m0");
    assert_eq!(out.column(5).as_primitive::<Int64Type>().value(0), 8);
}

#[test]
fn an_explicit_cast_that_would_change_a_value_fails_and_try_cast_gives_null() {
    let b = batch(&[
        (
            1,
            Some(3),
            Some(2.0),
            Some("1.25"),
            Some(1_000_000_000),
            None,
        ),
        (
            2,
            Some(4),
            Some(-0.0),
            Some("1.230"),
            Some(2_000_000_000),
            None,
        ),
        (
            3,
            Some(5),
            Some(2.7),
            Some("1.239"),
            Some(2_000_000_001),
            None,
        ),
    ]);
    // Rows 0 and 1 keep their values (-0.0 is 0); row 2's would be truncated or rounded.
    for (cast, try_cast, value) in [
        ("CAST(d AS BIGINT)", "TRY_CAST(d AS BIGINT)", "2.7"),
        ("CAST(d AS INT)", "TRY_CAST(d AS INT)", "2.7"),
        (
            "CAST(CAST(d AS DECIMAL(10, 0)) AS TEXT)",
            "CAST(TRY_CAST(d AS DECIMAL(10, 0)) AS TEXT)",
            "2.7",
        ),
        (
            "CAST(CAST(s AS DECIMAL(10, 2)) AS TEXT)",
            "CAST(TRY_CAST(s AS DECIMAL(10, 2)) AS TEXT)",
            "1.239",
        ),
        (
            "CAST(CAST(CAST(s AS DECIMAL(10, 3)) AS DECIMAL(10, 2)) AS TEXT)",
            "CAST(TRY_CAST(CAST(s AS DECIMAL(10, 3)) AS DECIMAL(10, 2)) AS TEXT)",
            "1.239",
        ),
        (
            "CAST(ts AS TIMESTAMP(0))",
            "TRY_CAST(ts AS TIMESTAMP(0))",
            "1970-01-01T00:00:02.000000001",
        ),
    ] {
        let p = plan(&format!("SELECT {cast} FROM src")).unwrap();
        let f = p.evaluate(&b).unwrap_err();
        assert_eq!(
            (f.row, f.message_id.as_deref()),
            (2, Some("m2")),
            "{cast}: {f}"
        );
        assert!(
            f.error.contains(value) && f.error.contains("would change"),
            "{cast}: {f}"
        );
        let ok = p.evaluate(&b.slice(0, 2)).unwrap();
        assert_eq!(ok.column(0).null_count(), 0, "{cast}");
        // TRY_CAST gives NULL for that value and the other rows as CAST gives them.
        let t = plan(&format!("SELECT {try_cast} FROM src"))
            .unwrap()
            .evaluate(&b)
            .unwrap();
        assert_eq!(t.column(0).null_count(), 1, "{try_cast}");
        assert!(t.column(0).is_null(2), "{try_cast}");
        assert_eq!(&t.column(0).slice(0, 2), ok.column(0), "{try_cast}");
    }
    let v = plan("SELECT CAST(d AS BIGINT), CAST(a AS DOUBLE), CAST(i AS SMALLINT) FROM src")
        .unwrap()
        .evaluate(&b.slice(0, 2))
        .unwrap();
    assert_eq!(v.column(0).as_primitive::<Int64Type>().values(), &[2, 0]);
    assert_eq!(
        v.column(1).as_primitive::<Float64Type>().values(),
        &[1.0, 2.0]
    );
    // Out of range fails as before; an integer beyond 2^53 does not fit a DOUBLE exactly.
    let big = batch(&[((1 << 53) + 1, Some(1), Some(1e300), None, None, None)]);
    for select in ["CAST(a AS DOUBLE)", "CAST(d AS BIGINT)", "CAST(a AS INT)"] {
        let f = plan(&format!("SELECT {select} FROM src"))
            .unwrap()
            .evaluate(&big);
        assert!(f.is_err(), "{select}");
    }
}
