//! Memory tables: `CREATE TABLE name (columns)` without `WITH`, written by one INSERT and
//! read like a view (`memory.rs`).

use std::sync::Arc;

use pubsub_engine_plan::{PlannedPipeline, PlannedQuery};
use pubsub_engine_spi::{ErasedConnector, FieldType, SourceField};

fn plan(sql: &str) -> Result<PlannedPipeline, String> {
    let sql = crate::parse_pipeline(sql).map_err(|e| e.0)?;
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(crate::test_mem::Mem)];
    crate::plan_pipeline(&sql, &connectors).map_err(|e| e.0)
}

fn refused(sql: &str) -> String {
    match plan(sql) {
        Ok(_) => panic!("planned: {sql}"),
        Err(e) => e,
    }
}

/// Line 1 and 2: a source and a sink.
const TABLES: &str =
    "CREATE TABLE src (page TEXT, v INT) WITH ('connector' = 'mem', 'role' = 'source');
CREATE TABLE out (ws TIMESTAMP, page TEXT, n BIGINT) WITH ('connector' = 'mem', 'role' = 'sink');
";

const PER_PAGE: &str = "SELECT window.start AS ws, page, n FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, page, count(*) AS n FROM src GROUP BY window, page)";

/// Everything planned about a query, as text.
fn fingerprint(q: &PlannedQuery) -> String {
    let exprs = |p: &pubsub_engine_plan::SelectPlan| {
        p.exprs
            .iter()
            .map(|(e, t)| format!("{e} | {t}"))
            .chain(p.filter.iter().map(|(e, t)| format!("filter {e} | {t}")))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let window = q.window.as_ref().map(|w| {
        format!(
            "{:?} before={:?} [{}] keys={} aggregates={:?} output={:?} at={:?} having={:?}",
            w.kind,
            w.before,
            exprs(&w.before),
            w.keys,
            w.aggregates
                .iter()
                .map(|a| a.fun().name().to_string())
                .collect::<Vec<_>>(),
            w.output,
            w.window_at,
            w.having.as_ref().map(|(e, t)| format!("{e} | {t}")),
        )
    });
    format!(
        "{}\n{:?}\n[{}]\n{:?}\n{:?}\n{:?}\n{window:?}",
        q.text,
        q.select,
        exprs(&q.select),
        q.select.schema,
        q.projection,
        q.sink_schema
    )
}

#[test]
fn a_windowed_aggregate_in_a_memory_table_plans_as_the_same_view_and_the_writer_may_come_last() {
    let memory = plan(&format!(
        "{TABLES}CREATE TABLE per_page (ws TIMESTAMP, page TEXT, n BIGINT);
INSERT INTO out SELECT ws, page, n FROM per_page WHERE n > 1;
INSERT INTO per_page {PER_PAGE};"
    ))
    .unwrap();
    let view = plan(&format!(
        "{TABLES}CREATE VIEW per_page AS {PER_PAGE};
INSERT INTO out SELECT ws, page, n FROM per_page WHERE n > 1;"
    ))
    .unwrap();
    let inline = plan(&format!(
        "{TABLES}INSERT INTO out SELECT ws, page, n FROM ({PER_PAGE}) AS per_page WHERE n > 1;"
    ))
    .unwrap();
    // The writing INSERT runs only where the table is read.
    assert_eq!(memory.queries.len(), 1);
    assert!(memory.queries[0].window.is_some());
    assert_eq!(memory.queries[0].source.connection.name, "src");
    assert_eq!(
        fingerprint(&memory.queries[0]),
        fingerprint(&view.queries[0])
    );
    assert_eq!(
        fingerprint(&memory.queries[0]),
        fingerprint(&inline.queries[0])
    );
}

#[test]
fn columns_take_the_declared_names_order_and_types_and_a_column_list_is_honoured() {
    let sink = "CREATE TABLE derived WITH ('connector' = 'mem', 'role' = 'sink');\n";
    let fields = |sql: &str| -> Vec<SourceField> {
        let p = plan(&format!("{TABLES}{sink}{sql}")).unwrap();
        p.queries[0].sink.connection.schema.fields.clone()
    };
    let field = |name: &str, t: FieldType, required: bool| SourceField {
        required,
        ..SourceField::new(name, t)
    };
    // Renamed by position, INT widened into BIGINT (max(v) is INT), count narrowed into
    // INT (checked).
    let got = fields(
        "CREATE TABLE m (start TIMESTAMP NOT NULL, p TEXT, hi BIGINT, c INT NOT NULL);
INSERT INTO m SELECT window.start, page, hi, n FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, page, max(v) AS hi, count(*) AS n FROM src GROUP BY window, page);
INSERT INTO derived SELECT * FROM m;",
    );
    assert_eq!(
        got,
        vec![
            field("start", FieldType::Timestamp, true),
            field("p", FieldType::Text, false),
            field("hi", FieldType::Bigint, false),
            field("c", FieldType::Int, true),
        ]
    );
    // A column list fills the named columns by name; one left out is NULL.
    let got = fields(
        "CREATE TABLE m (p TEXT, hi BIGINT, c BIGINT);
INSERT INTO m (c, p) SELECT n, page FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, page, count(*) AS n FROM src GROUP BY window, page);
INSERT INTO derived SELECT p, c, hi FROM m;",
    );
    assert_eq!(got[0], field("p", FieldType::Text, false));
    assert_eq!(got[1], field("c", FieldType::Bigint, true));
    assert_eq!(got[2].name, "hi");
    assert!(!got[2].required);
    // A memory table read by another one's INSERT.
    let got = fields(&format!(
        "CREATE TABLE a (ws TIMESTAMP, page TEXT, n BIGINT);
CREATE TABLE b (page TEXT, n BIGINT);
INSERT INTO derived SELECT page, n FROM b;
INSERT INTO b SELECT page, n FROM a WHERE n > 2;
INSERT INTO a {PER_PAGE};"
    ));
    assert_eq!(
        got,
        vec![
            field("page", FieldType::Text, false),
            field("n", FieldType::Bigint, true)
        ]
    );
}

#[test]
fn refusals_name_their_reason_and_position() {
    let m = "CREATE TABLE m (ws TIMESTAMP, page TEXT, n BIGINT);\n"; // line 3
    let write = format!("INSERT INTO m {PER_PAGE};\n");
    let read = "INSERT INTO out SELECT ws, page, n FROM m;\n";
    let cases: Vec<(String, &str)> = vec![
        // A second INSERT, at its position.
        (
            format!("{m}{write}{read}{write}"),
            "INSERT INTO m: memory table 'm' is already written by the INSERT at line 4, column 1: a memory table is written by exactly one INSERT (line 6, column 1)",
        ),
        // Read, never written: at the reader.
        (
            format!("{m}{read}"),
            "memory table 'm' is read here, but no INSERT writes it (a table without WITH (...) is a memory table: write it with INSERT INTO m SELECT ..., or declare it WITH (...) to read a connector's table) (line 4, column 41)",
        ),
        // Written, never read: at the CREATE TABLE.
        (
            format!("{m}{write}INSERT INTO out {PER_PAGE};"),
            "CREATE TABLE m: memory table 'm' (a table without WITH (...)) is written by the INSERT at line 4, column 1 but read by none, so its rows would go nowhere: read it from an INSERT, or declare it WITH (...) to write a connector's table (line 3, column 1)",
        ),
        // Neither.
        (
            format!("{m}INSERT INTO out {PER_PAGE};"),
            "CREATE TABLE m: memory table 'm' (a table without WITH (...)) is neither written nor read: write it with INSERT INTO m SELECT ... and read it from another INSERT, or declare it WITH (...) (line 3, column 1)",
        ),
        // No columns and no WITH.
        (
            format!("CREATE TABLE m;\n{write}{read}"),
            "CREATE TABLE m: a table without WITH (...) is a memory table (written by one INSERT, read like a view) and needs its columns: declare them, or add WITH ('connector' = ...) for a connector's table (line 3, column 1)",
        ),
        // WATERMARK FOR: its rows keep their source's event time.
        (
            format!("CREATE TABLE m (ws TIMESTAMP, page TEXT, n BIGINT,\n  WATERMARK FOR ws AS ws);\n{write}{read}"),
            "CREATE TABLE m: WATERMARK FOR is not supported on a memory table (a table without WITH (...)): its rows keep the event time of the table its INSERT reads; declare WATERMARK FOR on that table (line 4, column 3)",
        ),
        (
            format!("CREATE TABLE m (ws TIMESTAMP, page TEXT METADATA FROM 'id', n BIGINT);\n{write}{read}"),
            "CREATE TABLE m: column 'page': METADATA FROM reads a connector's messages, and a memory table (a table without WITH (...)) has none (line 3, column 1)",
        ),
        // A stateless query, as for a view: at the reader.
        (
            format!("{m}INSERT INTO m SELECT CAST(NULL AS TIMESTAMP), page, CAST(v AS BIGINT) FROM src;\n{read}"),
            "memory table 'm' does not aggregate: the INSERT writing it (line 4, column 1) is a stateless SELECT, which a memory table (as a view) does not support yet; write that SELECT in the INSERT that reads it (line 5, column 41)",
        ),
        (
            format!("{m}INSERT INTO m {PER_PAGE} UNION ALL {PER_PAGE};\n{read}"),
            "INSERT INTO m: a memory table is written by one SELECT: UNION ALL is not supported into it (declare a memory table per SELECT) (line 4, column 154)",
        ),
        (
            format!("{m}INSERT INTO m (ws, pages) {PER_PAGE};\n{read}"),
            "INSERT INTO m: memory table 'm' has no column 'pages' (it declares ws, page, n) (line 4, column 20)",
        ),
        (
            format!("CREATE TABLE m (ws TIMESTAMP, page TEXT, n BIGINT NOT NULL);\nINSERT INTO m (ws, page) {PER_PAGE};\n{read}"),
            "INSERT INTO m: the column list leaves out column 'n' of memory table 'm', which is NOT NULL (line 4, column 1)",
        ),
        // Two memory tables written from each other.
        (
            format!("{m}CREATE TABLE k (ws TIMESTAMP, page TEXT, n BIGINT);\nINSERT INTO m SELECT ws, page, n FROM k;\nINSERT INTO k SELECT ws, page, n FROM m;\n{read}"),
            "INSERT INTO m: memory table 'm' reads itself (through the memory tables its INSERT reads): a memory table is written from other tables (line 5, column 1)",
        ),
        (
            format!("{m}CREATE TABLE m (a BIGINT) WITH ('connector' = 'mem', 'role' = 'sink');\n{write}{read}"),
            "table 'm' is defined twice",
        ),
        (
            format!("CREATE VIEW m AS {PER_PAGE};\n{m}{write}{read}"),
            "table 'm': the name is already a view's (line 4, column 1)",
        ),
        (
            format!("{m}CREATE VIEW m AS {PER_PAGE};\n{write}{read}"),
            "CREATE VIEW m: 'm' is already the name of a table or a view (line 4, column 13)",
        ),
    ];
    for (sql, says) in cases {
        let e = refused(&format!("{TABLES}{sql}"));
        assert!(
            e.contains(says),
            "{sql}\n  refused with: {e}\n  expected: {says}"
        );
    }
}

#[test]
fn a_declared_type_the_query_does_not_fit_is_refused_when_planned_naming_both() {
    let e = refused(&format!(
        "{TABLES}CREATE TABLE m (ws TIMESTAMP, page BIGINT, n BIGINT);
INSERT INTO m {PER_PAGE};
INSERT INTO out SELECT ws, CAST(page AS TEXT), n FROM m;"
    ));
    assert!(
        e.starts_with("INSERT INTO m: column 'page' of memory table 'm' is BIGINT, and the SELECT's item 2 (`page`) is TEXT: a memory table's column takes the same type,")
            && e.ends_with("(line 4, column 1)"),
        "{e}"
    );
    // Into TEXT from another type: the CAST is written, so that its format is chosen.
    let e = refused(&format!(
        "{TABLES}CREATE TABLE m (ws TEXT, page TEXT, n BIGINT);
INSERT INTO m {PER_PAGE};
INSERT INTO out SELECT CAST(NULL AS TIMESTAMP), page, n FROM m;"
    ));
    assert!(
        e.contains(
            "column 'ws' of memory table 'm' is TEXT, and the SELECT's item 1 (`ws`) is TIMESTAMP"
        ),
        "{e}"
    );
    let e = refused(&format!(
        "{TABLES}CREATE TABLE m (ws TIMESTAMP, page TEXT NOT NULL, n BIGINT);
INSERT INTO m {PER_PAGE};
INSERT INTO out SELECT ws, page, n FROM m;"
    ));
    assert!(
        e.contains("INSERT INTO m: column 'page' of memory table 'm' is NOT NULL, and the SELECT's item 2 (`page`) may be NULL (use COALESCE, or declare the column without NOT NULL) (line 4, column 1)"),
        "{e}"
    );
    let e = refused(&format!(
        "{TABLES}CREATE TABLE m (ws TIMESTAMP, page TEXT);
INSERT INTO m {PER_PAGE};
INSERT INTO out SELECT ws, page, 1 FROM m;"
    ));
    assert!(
        e.contains("INSERT INTO m: the SELECT gives 3 columns (ws TIMESTAMP, page TEXT, n BIGINT), and memory table 'm' declares 2 (ws, page) (line 4, column 1)"),
        "{e}"
    );
}

#[test]
fn a_pipeline_without_a_memory_table_parses_as_before() {
    let p = crate::parse_pipeline(&format!(
        "{TABLES}INSERT INTO out SELECT CAST(NULL AS TIMESTAMP), page, CAST(v AS BIGINT) FROM src;"
    ))
    .unwrap();
    assert_eq!(p.tables.len(), 2);
    assert!(p.inserts[0].memory.is_empty());
}
