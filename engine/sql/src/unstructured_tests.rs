//! `'json.unstructured' = 'true'` (issue 47, item 3): planning.

use std::sync::Arc;

use pubsub_engine_spi::{ErasedConnector, FieldType, Format, SourceField};

fn plan(src_with: &str, src_columns: &str) -> Result<pubsub_engine_plan::PlannedPipeline, String> {
    let sql = crate::parse_pipeline(&format!(
        "CREATE TABLE src {src_columns} WITH ('connector' = 'mem', 'role' = 'source'{src_with});
CREATE TABLE out (m TEXT) WITH ('connector' = 'mem', 'role' = 'sink');
INSERT INTO out SELECT json_get_str(value, 'a') FROM src"
    ))
    .map_err(|e| e.0)?;
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(crate::test_mem::Mem)];
    crate::plan_pipeline(&sql, &connectors).map_err(|e| e.0)
}

#[test]
fn a_table_without_columns_gets_one_json_column_value() {
    let p = plan(", 'json.unstructured' = 'true'", "").unwrap();
    let schema = &p.queries[0].source.connection.schema;
    assert_eq!(schema.format, Format::JsonUnstructured);
    assert_eq!(schema.fields[0], SourceField::new("value", FieldType::Json));
    // Declared: taken as declared (the decoder checks the one column).
    plan(", 'json.unstructured' = 'true'", "(value JSON)").unwrap();
}

#[test]
fn the_option_is_refused_off_json_and_without_a_boolean_naming_the_value() {
    let e = plan(
        ", 'format' = 'raw_string', 'json.unstructured' = 'true'",
        "(value TEXT)",
    )
    .err()
    .unwrap();
    assert!(
        e.contains("option 'json.unstructured' applies to format 'json' only, was 'true' with format 'raw_string'"),
        "{e}"
    );
    let e = plan(", 'json.unstructured' = 'maybe'", "").err().unwrap();
    assert!(
        e.contains("json.unstructured") && e.contains("maybe"),
        "{e}"
    );
    // Off: a table without columns is refused, saying how to get one.
    let e = plan(", 'json.unstructured' = 'false'", "").err().unwrap();
    assert!(
        e.contains("declares no columns") && e.contains("'json.unstructured' = 'true'"),
        "{e}"
    );
}
