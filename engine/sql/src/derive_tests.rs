//! A sink table without columns takes those of the query writing it (issue 47, item 3).

use std::sync::Arc;

use pubsub_engine_spi::{ErasedConnector, FieldType, SourceField};

fn plan(sql: &str) -> Result<pubsub_engine_plan::PlannedPipeline, String> {
    let sql = crate::parse_pipeline(sql).map_err(|e| e.0)?;
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(crate::test_mem::Mem)];
    crate::plan_pipeline(&sql, &connectors).map_err(|e| e.0)
}

const SRC: &str = "CREATE TABLE src (id BIGINT NOT NULL, page TEXT, v INT, doc JSON) WITH ('connector' = 'mem', 'role' = 'source');";

fn sink_fields(p: &pubsub_engine_plan::PlannedPipeline) -> Vec<SourceField> {
    p.queries[0].sink.connection.schema.fields.clone()
}

fn field(name: &str, t: FieldType, required: bool) -> SourceField {
    SourceField {
        required,
        ..SourceField::new(name, t)
    }
}

#[test]
fn a_stateless_query_gives_each_select_item_its_name_type_and_nullability() {
    let p = plan(&format!(
        "{SRC}
         CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink');
         INSERT INTO out SELECT id, page, CAST(v AS BIGINT) * 2 AS twice, doc, upper(page) AS shout FROM src"
    ))
    .unwrap();
    assert_eq!(
        sink_fields(&p),
        vec![
            field("id", FieldType::Bigint, true),
            field("page", FieldType::Text, false),
            field("twice", FieldType::Bigint, false),
            field("doc", FieldType::Json, false),
            field("shout", FieldType::Text, false),
        ]
    );
}

#[test]
fn an_updating_and_a_windowed_aggregate_give_their_output_columns() {
    let p = plan(&format!(
        "{SRC}
         CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json');
         INSERT INTO out SELECT page, count(*) AS n, max(v) AS hi FROM src GROUP BY page"
    ))
    .unwrap();
    assert_eq!(
        sink_fields(&p),
        vec![
            field("page", FieldType::Text, false),
            field("n", FieldType::Bigint, true),
            field("hi", FieldType::Int, false),
        ]
    );
    let p = plan(&format!(
        "{SRC}
         CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink');
         INSERT INTO out SELECT window.start AS ws, n FROM (
           SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, count(*) AS n FROM src GROUP BY window)"
    ))
    .unwrap();
    assert_eq!(
        sink_fields(&p),
        vec![
            field("ws", FieldType::Timestamp, true),
            field("n", FieldType::Bigint, true),
        ]
    );
}

#[test]
fn a_column_list_is_refused_and_a_second_insert_must_fit() {
    let e = plan(&format!(
        "{SRC}
         CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink');
         INSERT INTO out (id) SELECT id FROM src"
    ))
    .err()
    .unwrap();
    assert!(
        e.contains("table 'out' declares no columns, so it takes the select list's names and types: write the INSERT without a column list"),
        "{e}"
    );
    // The first INSERT decides; the second is checked against it like any table.
    let e = plan(&format!(
        "{SRC}
         CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink');
         INSERT INTO out SELECT id FROM src;
         INSERT INTO out SELECT page FROM src"
    ))
    .err()
    .unwrap();
    assert!(
        e.contains("id") && e.contains("TEXT") && e.contains("BIGINT"),
        "{e}"
    );
    // A format with its own columns is not derived: raw_string needs `value TEXT`.
    let e = plan(&format!(
        "{SRC}
         CREATE TABLE out WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'raw_string');
         INSERT INTO out SELECT page FROM src"
    ))
    .err()
    .unwrap();
    assert!(e.contains("declares no columns"), "{e}");
}

#[test]
fn an_item_named_like_a_declared_metadata_column_fills_it() {
    let p = plan(&format!(
        "{SRC}
         CREATE TABLE out (k TEXT METADATA FROM 'id') WITH ('connector' = 'mem', 'role' = 'sink', 'format' = 'debezium_json');
         INSERT INTO out SELECT page, upper(page) AS k, count(*) AS n FROM src GROUP BY page"
    ))
    .unwrap();
    assert_eq!(
        sink_fields(&p),
        vec![
            field("page", FieldType::Text, false),
            SourceField::new("k", FieldType::Text).metadata_from("id"),
            field("n", FieldType::Bigint, true),
        ]
    );
}
