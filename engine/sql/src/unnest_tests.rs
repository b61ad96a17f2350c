//! `UNNEST(list)` in a stateless SELECT (issue 48, part 3): one row per element, as
//! DataFusion's batch SQL expands it; a failing element names its source row; the record
//! key of each element is its row's key and its position.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, ListBuilder, RecordBatch, StringArray, StringBuilder};
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

use super::parse::parse_pipeline;
use super::select::plan_select;
use super::window_tests::text_rows;
use pubsub_engine_plan::SelectPlan;
use pubsub_engine_spi::{
    ArrayOf, BadData, ConnectionSchema, FieldType, Format, SourceField, TimestampFormat,
};

/// `src`: page TEXT, tags TEXT[], v BIGINT.
fn src() -> ConnectionSchema {
    ConnectionSchema {
        event_time: None,
        format: Format::Json,
        timestamp_format: TimestampFormat::default(),
        bad_data: BadData::Fail,
        fields: vec![
            SourceField::new("page", FieldType::Text),
            SourceField::new("tags", FieldType::Array(ArrayOf::Text)),
            SourceField::new("v", FieldType::Bigint),
        ],
    }
}

fn plan(select: &str) -> Result<SelectPlan, String> {
    plan_file(&format!("INSERT INTO out {select};"))
}

/// The stateless SELECT of the INSERT of `statements` (after the tables `src` and `out`).
fn plan_file(statements: &str) -> Result<SelectPlan, String> {
    let file = format!(
        "CREATE TABLE src (a BIGINT) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT) WITH ('x' = 'y');\n{statements}"
    );
    let p = parse_pipeline(&file).map_err(|e| e.0)?;
    let q = &p.inserts[0].query;
    assert!(
        !super::aggregate::is_windowed(q),
        "planned as a stateless SELECT"
    );
    plan_select(q, "src", &src(), "INSERT INTO out").map_err(|e| e.0)
}

/// Rows of (page, tags, v); `tags` is split at commas into its elements, `"-"` an element
/// that is NULL.
fn rows(r: &[(&str, Option<&str>, Option<i64>)]) -> RecordBatch {
    let page: ArrayRef = Arc::new(StringArray::from_iter_values(r.iter().map(|x| x.0)));
    let mut tags = ListBuilder::new(StringBuilder::new());
    for (_, t, _) in r {
        match t {
            None => tags.append_null(),
            Some(t) => {
                for e in t.split(',').filter(|e| !e.is_empty()) {
                    tags.values().append_option((e != "-").then_some(e));
                }
                tags.append(true);
            }
        }
    }
    let tags: ArrayRef = Arc::new(tags.finish());
    let v: ArrayRef = Arc::new(Int64Array::from_iter(r.iter().map(|x| x.2)));
    RecordBatch::try_from_iter([("page", page), ("tags", tags), ("v", v)]).unwrap()
}

#[test]
fn each_element_is_a_row_and_a_null_or_empty_list_is_none() {
    let p = plan("SELECT page, UNNEST(tags) AS tag, v FROM src WHERE v > 0").unwrap();
    let out = p
        .evaluate(&rows(&[
            ("a", Some("x,-,y"), Some(1)),
            ("b", None, Some(2)),
            ("c", Some("z"), Some(3)),
            ("d", Some("w"), Some(-1)),
            ("e", Some(""), Some(5)),
        ]))
        .unwrap();
    assert_eq!(
        text_rows(&out),
        vec![
            vec!["a", "x", "1"],
            vec!["a", "", "1"],
            vec!["a", "y", "1"],
            vec!["c", "z", "3"],
        ]
    );
}

/// Rows of (page, tags, v) as DataFusion's batch SQL gives `query` over them (table `src`).
fn batch_sql(query: &str, b: &RecordBatch) -> Vec<Vec<String>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        let ctx = SessionContext::new();
        ctx.register_batch("src", b.clone()).unwrap();
        ctx.sql(query).await.unwrap().collect().await.unwrap()
    });
    out.iter().flat_map(text_rows).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn unnest_equals_datafusions_batch_unnest(
        input in prop::collection::vec(
            (0u8..4, prop::option::weighted(0.8, prop::collection::vec(0u8..6, 0..4)), prop::option::weighted(0.9, -5i64..5)),
            0..40,
        ),
    ) {
        let owned: Vec<(String, Option<String>, Option<i64>)> = input
            .iter()
            .map(|(p, t, v)| {
                (format!("p{p}"), t.as_ref().map(|t| t.iter().map(|x| if *x == 5 { "-".to_string() } else { format!("t{x}") }).collect::<Vec<_>>().join(",")), *v)
            })
            .collect();
        let r: Vec<(&str, Option<&str>, Option<i64>)> =
            owned.iter().map(|(p, t, v)| (p.as_str(), t.as_deref(), *v)).collect();
        let b = rows(&r);
        let query = "SELECT page, UNNEST(tags) AS tag, v FROM src WHERE v IS NULL OR v > -3";
        let got = text_rows(&plan(query).unwrap().evaluate(&b).unwrap());
        let mut want = batch_sql(query, &b);
        let mut got_sorted = got.clone();
        got_sorted.sort();
        want.sort();
        prop_assert_eq!(got_sorted, want);
        // Read from a subquery, and from a view, with a WHERE on the elements' rows.
        let outer = "SELECT tag, v * 2 AS w FROM (SELECT UNNEST(tags) AS tag, v FROM src WHERE v > -3) WHERE tag <> 't0'";
        let mut want = batch_sql(outer, &b);
        want.sort();
        let mut got = text_rows(&plan(outer).unwrap().evaluate(&b).unwrap());
        got.sort();
        prop_assert_eq!(&got, &want);
        let mut viewed = text_rows(
            &plan_file(
                "CREATE VIEW tagged AS SELECT UNNEST(tags) AS tag, v FROM src WHERE v > -3;
                 INSERT INTO out SELECT tag, v * 2 AS w FROM tagged WHERE tag <> 't0';",
            )
            .unwrap()
            .evaluate(&b)
            .unwrap(),
        );
        viewed.sort();
        prop_assert_eq!(viewed, want);
    }
}

#[test]
fn a_failing_element_names_its_source_row() {
    let p = plan("SELECT page, CAST(UNNEST(tags) AS BIGINT) AS n FROM src").unwrap();
    let e = p
        .evaluate(&rows(&[("a", Some("1,2"), None), ("b", Some("3,x"), None)]))
        .unwrap_err();
    assert_eq!(e.row, 1, "{e}");
    assert!(!e.internal && e.error.contains("'x'"), "{e}");
}

/// Each element's row carries its source row's record key and its position in the list,
/// kept when a WHERE above UNNEST drops the elements before it.
#[test]
fn each_element_has_its_rows_record_key_and_its_position() {
    let mut p =
        plan("SELECT tag FROM (SELECT UNNEST(tags) AS tag, v FROM src) WHERE tag <> 'x'").unwrap();
    let mut fields: Vec<arrow::datatypes::FieldRef> = p.schema.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new(
        "key",
        arrow::datatypes::DataType::Utf8,
        false,
    )));
    p.carry = Some((3, Arc::new(arrow::datatypes::Schema::new(fields))));
    let b = rows(&[("a", Some("x,y"), Some(1)), ("b", Some("z,x,w"), Some(2))]);
    let key: ArrayRef = Arc::new(StringArray::from(vec!["M1#0", "M2#0"]));
    let mut cols = b.columns().to_vec();
    cols.push(key);
    let mut fields: Vec<arrow::datatypes::FieldRef> = b.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new(
        "key",
        arrow::datatypes::DataType::Utf8,
        false,
    )));
    let b = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), cols).unwrap();
    assert_eq!(
        text_rows(&p.evaluate(&b).unwrap()),
        vec![
            vec!["y", "M1#0#1"],
            vec!["z", "M2#0#0"],
            vec!["w", "M2#0#2"],
        ]
    );
}

#[test]
fn an_element_of_a_json_array_is_json_and_array_casts_are_refused() {
    let schema = ConnectionSchema {
        fields: vec![
            SourceField::new("id", FieldType::Text),
            SourceField::new("steps", FieldType::Array(ArrayOf::Json)),
            SourceField::new("n", FieldType::Array(ArrayOf::Double)),
        ],
        ..src()
    };
    let file = "CREATE TABLE src (a BIGINT) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT) WITH ('x' = 'y');
        INSERT INTO out SELECT id, UNNEST(steps) AS step, steps FROM src;
        INSERT INTO out SELECT step FROM (SELECT UNNEST(steps) AS step FROM src);
        INSERT INTO out SELECT CAST(n AS BIGINT[]) FROM src;
        INSERT INTO out SELECT CAST(n AS TEXT) FROM src;";
    let p = parse_pipeline(file).unwrap();
    let select = |k: usize| plan_select(&p.inserts[k].query, "src", &schema, "INSERT INTO out");
    let types: Vec<FieldType> = select(0)
        .unwrap()
        .fields
        .iter()
        .map(|f| f.field_type)
        .collect();
    assert_eq!(
        types,
        vec![
            FieldType::Text,
            FieldType::Json,
            FieldType::Array(ArrayOf::Json)
        ]
    );
    assert_eq!(select(1).unwrap().fields[0].field_type, FieldType::Json);
    for (k, want) in [
        (2, "CAST from DOUBLE[] to BIGINT[] is not supported"),
        (3, "CAST from DOUBLE[] to TEXT is not supported"),
    ] {
        let e = select(k).unwrap_err().0;
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn array_columns_are_declared_as_postgresql_writes_them_and_refused_with_the_reason() {
    let declared = |ty: &str| {
        parse_pipeline(&format!(
            "CREATE TABLE src (a {ty}) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT) WITH ('x' = 'y');\nINSERT INTO out SELECT a FROM src;"
        ))
        .map(|p| p.tables[0].fields[0].field_type)
        .map_err(|e| e.0)
    };
    assert_eq!(declared("TEXT[]"), Ok(FieldType::Array(ArrayOf::Text)));
    assert_eq!(
        declared("ARRAY<BIGINT>"),
        Ok(FieldType::Array(ArrayOf::Bigint))
    );
    assert_eq!(declared("JSON[]"), Ok(FieldType::Array(ArrayOf::Json)));
    assert_eq!(
        declared("BIGINT UNSIGNED[]"),
        Ok(FieldType::Array(ArrayOf::UBigint))
    );
    for (ty, why) in [
        (
            "TEXT[3]",
            "an array length would not be enforced; declare TEXT[]",
        ),
        ("TEXT[][]", "arrays do not nest; declare JSON"),
        ("VARCHAR(5)[]", "TEXT has no length limit"),
        ("DATE[]", "type DATE is not supported"),
    ] {
        let e = declared(ty).unwrap_err();
        assert!(
            e.contains("table 'src' column 'a'") && e.contains(why),
            "{ty}: {e}"
        );
    }
}

/// `src` with an event time: page TEXT, tags TEXT[], v BIGINT; the rows carry the event
/// time after them (`__event_time`, as the runtime appends it).
fn windowed(select: &str) -> Result<(SelectPlan, pubsub_engine_plan::WindowPlan), String> {
    let file = format!(
        "CREATE TABLE src (a BIGINT) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT) WITH ('x' = 'y');\n{select}"
    );
    let p = parse_pipeline(&file).map_err(|e| e.0)?;
    super::aggregate::plan_windowed(
        &p.inserts[0].query,
        "src",
        &src(),
        (3, "__event_time"),
        false,
        super::aggregate::DEFAULT_UPDATING,
        "INSERT INTO out",
    )
    .map_err(|e| e.0)
}

/// [`rows`] with event times (seconds), as `__event_time`.
fn timed(r: &[(&str, Option<&str>, Option<i64>)], secs: &[i64]) -> RecordBatch {
    let b = rows(r);
    let ts: ArrayRef = Arc::new(arrow::array::TimestampNanosecondArray::from_iter_values(
        secs.iter().map(|s| s * 1_000_000_000),
    ));
    let mut cols: Vec<(&str, ArrayRef)> = vec![
        ("page", b.column(0).clone()),
        ("tags", b.column(1).clone()),
        ("v", b.column(2).clone()),
    ];
    cols.push(("__event_time", ts));
    RecordBatch::try_from_iter(cols).unwrap()
}

const PER_TAG: &str = "SELECT window.start AS ws, tag, n, total FROM (
    SELECT TUMBLE(INTERVAL '10' SECOND) AS window, tag, count(*) AS n, sum(v) AS total
    FROM (SELECT UNNEST(tags) AS tag, v FROM src WHERE v > -3) WHERE tag <> 't0'
    GROUP BY window, tag)";

const PER_TAG_BATCH: &str =
    "SELECT date_bin(INTERVAL '10' SECOND, __event_time) AS ws, tag, count(*) AS n, sum(v) AS total
    FROM (SELECT UNNEST(tags) AS tag, v, __event_time FROM src WHERE v > -3) WHERE tag <> 't0'
    GROUP BY ws, tag";

/// The rows a windowed plan writes for `b` once every window fired.
fn fire_all(select: &str, b: &RecordBatch) -> Vec<Vec<String>> {
    let (after, window) = windowed(select).unwrap();
    let window = Arc::new(window);
    let mut state = pubsub_engine_plan::window::WindowState::new(window.clone()).unwrap();
    state.update(&window.before.evaluate(b).unwrap()).unwrap();
    let mut out = Vec::new();
    for fired in state.advance(i64::MAX / 2).unwrap() {
        out.extend(text_rows(&after.evaluate(&fired).unwrap()));
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// UNNEST in a subquery below a windowed aggregate, with a WHERE on each side of it:
    /// the windows equal DataFusion's batch GROUP BY of the same UNNEST.
    #[test]
    fn a_window_over_unnest_equals_datafusions_batch_group_by(
        input in prop::collection::vec(
            (prop::option::weighted(0.8, prop::collection::vec(0u8..6, 0..4)), prop::option::weighted(0.9, -5i64..5), 0i64..40),
            1..40,
        ),
    ) {
        let owned: Vec<(String, Option<String>, Option<i64>)> = input
            .iter()
            .map(|(t, v, _)| {
                ("p".to_string(), t.as_ref().map(|t| t.iter().map(|x| if *x == 5 { "-".to_string() } else { format!("t{x}") }).collect::<Vec<_>>().join(",")), *v)
            })
            .collect();
        let r: Vec<(&str, Option<&str>, Option<i64>)> =
            owned.iter().map(|(p, t, v)| (p.as_str(), t.as_deref(), *v)).collect();
        let secs: Vec<i64> = input.iter().map(|x| x.2).collect();
        let b = timed(&r, &secs);
        let mut want = batch_sql(PER_TAG_BATCH, &b);
        want.sort();
        prop_assert_eq!(fire_all(&format!("INSERT INTO out {PER_TAG};"), &b), want.clone());
        // The same subquery as a view.
        let view = "CREATE VIEW tagged AS SELECT UNNEST(tags) AS tag, v FROM src WHERE v > -3;
            INSERT INTO out SELECT window.start AS ws, tag, n, total FROM (
                SELECT TUMBLE(INTERVAL '10' SECOND) AS window, tag, count(*) AS n, sum(v) AS total
                FROM tagged WHERE tag <> 't0' GROUP BY window, tag);";
        prop_assert_eq!(fire_all(view, &b), want);
    }
}

#[test]
fn unnest_is_refused_where_it_cannot_run_with_the_reason() {
    for (select, why) in [
        (
            "INSERT INTO out SELECT TUMBLE(INTERVAL '1' SECOND) AS window, UNNEST(tags) AS tag, count(*) AS n FROM src GROUP BY window, UNNEST(tags);",
            "an aggregate reads UNNEST from a subquery or a view in its FROM only",
        ),
        (
            "INSERT INTO out SELECT count(*) FROM (SELECT UNNEST(tags) AS tag FROM (SELECT tags FROM src)) GROUP BY tag;",
            "UNNEST reads its table directly",
        ),
    ] {
        let e = windowed(select).unwrap_err();
        assert!(e.contains(why), "{select}: {e}");
    }
    for (select, want) in [
        (
            "SELECT page FROM src WHERE UNNEST(tags) = 'x'",
            "UNNEST is allowed in a SELECT list only; to keep some elements, UNNEST in a subquery",
        ),
        (
            "SELECT UNNEST(page) FROM src",
            "UNNEST takes an array column (TEXT[], JSON[], ...) of one level",
        ),
    ] {
        let e = plan(select).unwrap_err();
        assert!(
            e.contains(want) && e.contains("(line 2, column"),
            "{select}: {e}"
        );
    }
    let e = plan("SELECT * FROM (SELECT UNNEST(tags) AS tag FROM src)").unwrap_err();
    assert!(
        e.contains("SELECT * of a subquery or view of UNNEST is not supported; name its columns")
            && e.contains("(line 2, column 17)"),
        "{e}"
    );
}

#[test]
fn each_element_counts_in_its_rows_window_and_the_wheres_drop_rows_and_elements() {
    let b = timed(
        &[
            ("p", Some("t1,t2"), Some(1)),
            ("p", Some("t1"), Some(2)),
            ("p", Some("t0,t1"), Some(-4)),
            ("p", Some("t0,t1"), Some(7)),
            ("p", Some("t1"), Some(5)),
        ],
        &[1, 3, 5, 8, 12],
    );
    assert_eq!(
        fire_all(&format!("INSERT INTO out {PER_TAG};"), &b),
        vec![
            vec!["1970-01-01T00:00:00", "t1", "3", "10"],
            vec!["1970-01-01T00:00:00", "t2", "1", "1"],
            vec!["1970-01-01T00:00:10", "t1", "1", "5"],
        ]
    );
}
