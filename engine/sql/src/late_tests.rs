//! Planning `scan.late-rows.table` (issue 32, item 3; decision 0045): the query writing a
//! windowed query's late rows, and each refusal naming the table, the option and its value.

use std::sync::Arc;

use crate::test_mem::Mem;
use crate::{parse_pipeline, plan_pipeline};
use pubsub_engine_plan::PlannedPipeline;
use pubsub_engine_spi::ErasedConnector;

/// Plans a source `src (page TEXT, v BIGINT)` with `src_options`, the tables `tables`, and
/// a windowed count per page into `out`.
fn plan(src_options: &str, tables: &str) -> Result<PlannedPipeline, String> {
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
    let sql = parse_pipeline(&format!(
        "CREATE TABLE src (page TEXT, v BIGINT) WITH ('connector' = 'mem', 'role' = 'source'{src_options});
         CREATE TABLE out (page TEXT, n BIGINT) WITH ('connector' = 'mem', 'role' = 'sink');
         {tables}
         INSERT INTO out SELECT page, n FROM (
            SELECT TUMBLE(INTERVAL '1' SECOND) AS window, page, count(*) AS n
            FROM src GROUP BY window, page);"
    ))
    .map_err(|e| e.to_string())?;
    plan_pipeline(&sql, &connectors).map_err(|e| e.to_string())
}

const LATE: &str = ", 'scan.late-rows.table' = 'late'";

#[test]
fn a_windowed_query_gets_a_query_writing_its_late_rows_as_read() {
    let p = plan(
        LATE,
        "CREATE TABLE late (v BIGINT, page TEXT) WITH ('connector' = 'mem', 'role' = 'sink', 'stamp' = 'true');",
    )
    .unwrap();
    assert_eq!(p.queries.len(), 2);
    let (q, late) = (&p.queries[0], &p.queries[1]);
    assert_eq!(late.id, "q0-late");
    assert_eq!(late.late_of.as_deref(), Some("q0"));
    assert_eq!(q.late.as_ref().map(|l| l.id.as_str()), Some("q0-late"));
    assert_eq!(
        late.text,
        "INSERT INTO late SELECT \"v\", \"page\" FROM \"src\""
    );
    // The window's first stage carries the source row after its own columns.
    let before = &q.window.as_ref().unwrap().before;
    assert!(before.keep_source);
    assert_eq!(before.width(), before.schema.fields().len());
    // The late table's columns in its own order, then the record id it stamps.
    let names: Vec<&str> = late
        .sink_schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["v", "page", "__record_id"]);
    // The source gives its rows record keys for the late table's ids.
    assert!(q
        .source
        .connection
        .schema
        .fields
        .iter()
        .any(|f| f.name == "__record_key"));
}

#[test]
fn without_the_option_late_rows_are_dropped_and_no_query_is_added() {
    let p = plan("", "").unwrap();
    assert_eq!(p.queries.len(), 1);
    assert!(p.queries[0].late.is_none());
    assert!(!p.queries[0].window.as_ref().unwrap().before.keep_source);
}

#[test]
fn a_bad_late_rows_table_is_refused_naming_the_option_and_its_value() {
    let sink = "'connector' = 'mem', 'role' = 'sink'";
    for (options, tables, expected) in [
        (
            ", 'scan.late-rows.table' = 'nope'".to_string(),
            String::new(),
            "table 'src': option 'scan.late-rows.table' ('nope'): table 'nope' is not defined",
        ),
        (
            ", 'scan.late-rows.table' = 'other'".to_string(),
            "CREATE TABLE other (v BIGINT) WITH ('connector' = 'mem', 'role' = 'source');".into(),
            "table 'src': option 'scan.late-rows.table' ('other'): is a table that is read; name a sink table",
        ),
        (
            LATE.to_string(),
            format!("CREATE TABLE late (v BIGINT, extra TEXT) WITH ({sink});"),
            "table 'src': option 'scan.late-rows.table' ('late'): ",
        ),
        (
            LATE.to_string(),
            format!("CREATE TABLE late (v BIGINT, page TEXT) WITH ({sink}, 'key' = 'page');"),
            "('late'): routes rows by an ordering key, and late rows have no order to keep",
        ),
        (
            ", 'scan.late-rows.table' = ' '".to_string(),
            String::new(),
            "table 'src': option 'scan.late-rows.table' is invalid: must name a sink table, was ' '",
        ),
    ] {
        let e = plan(&options, &tables).err().expect("refused");
        assert!(e.contains(expected), "{e}\nexpected: {expected}");
    }
    // A column the source does not have is named.
    let e = plan(
        LATE,
        &format!("CREATE TABLE late (v BIGINT, extra TEXT) WITH ({sink});"),
    )
    .err()
    .unwrap();
    assert!(
        e.contains("column 'extra' does not exist in table 'src'"),
        "{e}"
    );
    assert!(e.contains("change the column of 'late'"), "{e}");
    assert!(
        !e.contains("(line"),
        "no place in a query the user never wrote: {e}"
    );
    // A narrower integer column, which a query's INSERT takes checked (issue 47), is
    // refused: a late row has no message left to set aside when it does not fit.
    let e = plan(
        LATE,
        &format!("CREATE TABLE late (page TEXT, v INT) WITH ({sink});"),
    )
    .err()
    .unwrap();
    assert!(
        e.contains("('late'): column 'v' (BIGINT) of 'src' cannot be written to column 'v' (INT): the late-rows table takes the source's columns by name, each as a type that holds it exactly"),
        "{e}"
    );
    // A misspelt option gets a did-you-mean like every other.
    let e = plan(", 'scan.late-row.table' = 'late'", "").err().unwrap();
    assert!(e.contains("did you mean 'scan.late-rows.table'"), "{e}");
}

#[test]
fn a_sink_table_refuses_the_option() {
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
    let sql = parse_pipeline(
        "CREATE TABLE src (v BIGINT) WITH ('connector' = 'mem', 'role' = 'source');
         CREATE TABLE out (v BIGINT) WITH ('connector' = 'mem', 'role' = 'sink', 'scan.late-rows.table' = 'x');
         INSERT INTO out SELECT v FROM src;",
    )
    .unwrap();
    let e = plan_pipeline(&sql, &connectors).err().unwrap().to_string();
    assert!(
        e.contains(
            "table 'out': is a sink: option 'scan.late-rows.table' applies to a table that is read"
        ),
        "{e}"
    );
}
