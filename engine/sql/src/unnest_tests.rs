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
    let file = format!(
        "CREATE TABLE src (a BIGINT) WITH ('x' = 'y'); CREATE TABLE out (a BIGINT) WITH ('x' = 'y');\nINSERT INTO out {select};"
    );
    let p = parse_pipeline(&file).map_err(|e| e.0)?;
    plan_select(&p.inserts[0].query, "src", &src(), "INSERT INTO out").map_err(|e| e.0)
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
    }
}

#[test]
fn a_failing_element_names_its_source_row() {
    let p = plan("SELECT page, CAST(UNNEST(tags) AS BIGINT) AS n FROM src").unwrap();
    let e = p
        .evaluate(&rows(&[("a", Some("1,2"), None), ("b", Some("3,x"), None)]))
        .unwrap_err();
    assert_eq!(e.row, 1, "{e}");
}
