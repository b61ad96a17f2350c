//! A pipeline built in Rust instead of SQL (SPEC 1, way 3): tables from typed connector
//! configs, wired source -> sink into the same [`PlannedPipeline`] that
//! [`plan_pipeline`](crate::plan_pipeline) makes from a pipeline file, so
//! the runtime's `run_pipeline` (`pubsub-engine-runtime`) runs it the same way.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use pubsub_engine_spi::{Connector, ConnectionSchema, FieldType, SourceField};
//! # use pubsub_engine_sql::{GraphTable, PipelineGraph};
//! # fn demo<C: Connector + Clone>(c: C, src_profile: C::ProfileT, src_table: C::TableT,
//! #     dst_profile: C::ProfileT, dst_table: C::TableT) -> anyhow::Result<()> {
//! let bids = GraphTable::new(c.clone(), "bids", src_profile, src_table, ConnectionSchema::json(vec![
//!     SourceField::new("price", FieldType::Bigint),
//!     SourceField::new("mid", FieldType::Text).not_null().metadata_from("message-id"),
//! ]))?;
//! let out = GraphTable::new(c, "out", dst_profile, dst_table, ConnectionSchema::json(vec![
//!     SourceField::new("mid", FieldType::Text),
//!     SourceField::new("price", FieldType::Bigint),
//! ]))?;
//! let plan = PipelineGraph::new().pipe(&bids, &out)?.build()?;
//! // pubsub_engine_runtime::run_pipeline(plan, RuntimeConfig { .. }, StopHandle::new()).await
//! # Ok(()) }
//! ```
//!
//! # Shapes
//!
//! - A [`GraphTable`] is one table: a connector, a name, the connector's typed profile and
//!   table config (the types behind its JSON Schemas, e.g. a Pub/Sub source built with its
//!   builder) and the columns ([`ConnectionSchema`]: format and [`SourceField`]s). It goes
//!   through [`ErasedConnector::from_config`], the path a UI's connection wizard takes, so
//!   it is checked as `CREATE TABLE` is: at least one column, each name once,
//!   `json.timestamp-format` only with format `json`, every `METADATA FROM` key known to
//!   the connector with an allowed type, plus whatever the connector's `from_config`
//!   checks. Whether it is a source or a sink is the connector's
//!   [`table_type`](pubsub_engine_spi::Connector::table_type) of the config.
//! - [`PipelineGraph::pipe`]`(source, sink)` adds one query, checked and planned exactly as
//!   `INSERT INTO sink SELECT <every sink column, by name> FROM source` is (same planner
//!   functions): every sink column is filled from the source column of the same name,
//!   which must exist, have the same type or one that converts exactly (INT -> BIGINT,
//!   INT/FLOAT -> DOUBLE, anything but BYTEA -> TEXT), and be NOT NULL when the sink
//!   column is. Source columns the sink does not name are not written. Rows are routed by
//!   the sink connector's [`sink_key`](pubsub_engine_spi::Connector::sink_key) column, as in SQL.
//! - Query ids are `q0`, `q1`, ... in `pipe` order, as SQL numbers its INSERTs: checkpoints
//!   key operator state by query id (sinks, `q0-sink-out`) and table name (sources,
//!   `source-bids`), so to restore a checkpoint a program must add the same pipes in the
//!   same order with the same table names. A query's `text` is the equivalent INSERT
//!   statement, so a graph and the pipeline file it mirrors plan to the same pipeline.
//! - One source table may feed several pipes: it is read once and each of its rows reaches
//!   every pipe (pass the same [`GraphTable`] to each). Several pipes may write one sink
//!   table. A table is identified by its name: one name, one table.
//!
//! # Errors
//!
//! Every error is a [`GraphError`] naming the table and, for columns, the column:
//! - building a table: `table 'NAME': <reason>` (a blank name, a config that does not
//!   deserialize, a column rule above, or the connector's own rejection);
//! - `pipe`: the source is a sink table or the sink a source table; a name already used
//!   by a different table; a sink column missing from the source
//!   (`pipe 'bids' -> 'out': column 'x' does not exist in table 'bids' (columns: ...)`);
//!   a type that does not convert exactly (an integer into a narrower integer is taken,
//!   checked row by row: a value that does not fit fails its row)
//!   (`pipe 'bids' -> 'out': column 'price' (TEXT) of 'bids' cannot be written to column
//!   'price' (BIGINT): ...`); a nullable source column feeding a NOT NULL sink column
//!   (`... column 'mid' (TEXT) of 'bids' may be NULL but column 'mid' is TEXT NOT NULL; ...`);
//!   two source tables consuming one exclusive resource (e.g. one Pub/Sub subscription),
//!   which would split its messages between them;
//! - `build`: a graph without any pipe.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::{check_exclusive_sources, give_record_keys, plan_query, InsertDef, SqlError};
use pubsub_engine_plan::{PlannedPipeline, PlannedQuery, PlannedTable};
use pubsub_engine_spi::{Connection, ConnectionSchema, ConnectionType, Connector, ErasedConnector};

#[cfg(doc)]
use pubsub_engine_spi::SourceField;

/// Why a table or a pipe was refused; names the table and, for columns, the column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphError(pub String);

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GraphError {}

impl From<SqlError> for GraphError {
    fn from(e: SqlError) -> Self {
        GraphError(e.0)
    }
}

/// One table of a [`PipelineGraph`]: a connector with a validated config and columns.
#[derive(Clone)]
pub struct GraphTable {
    table: PlannedTable,
}

impl fmt::Debug for GraphTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphTable")
            .field("connection", &self.table.connection)
            .finish()
    }
}

impl GraphTable {
    /// A table of `connector` named `name` (unique within a graph) from the connector's
    /// typed `profile` and `table` config and its columns.
    ///
    /// Errors (`table 'NAME': ...`): a blank name, and see
    /// [`ErasedConnector::from_config`].
    pub fn new<C: Connector>(
        connector: C,
        name: impl Into<String>,
        profile: C::ProfileT,
        table: C::TableT,
        schema: ConnectionSchema,
    ) -> Result<GraphTable, GraphError> {
        GraphTable::from_erased(Arc::new(connector), name, &profile, &table, schema)
    }

    /// Like [`new`](Self::new) for a connector known only as an [`ErasedConnector`] (e.g.
    /// one picked from a registry by name): `profile` and `table` are anything that
    /// serializes to the connector's JSON shapes (its typed configs, or JSON values as a
    /// UI submits them).
    pub fn from_erased(
        connector: Arc<dyn ErasedConnector>,
        name: impl Into<String>,
        profile: &impl Serialize,
        table: &impl Serialize,
        schema: ConnectionSchema,
    ) -> Result<GraphTable, GraphError> {
        let name = name.into();
        let e = |m: String| GraphError(format!("table '{name}': {m}"));
        if name.trim().is_empty() || name.trim() != name {
            return Err(e(
                "a table name must be non-blank, without surrounding spaces".into(),
            ));
        }
        let profile = serde_json::to_value(profile)
            .map_err(|x| e(format!("the connection profile does not serialize: {x}")))?;
        let table = serde_json::to_value(table)
            .map_err(|x| e(format!("the table config does not serialize: {x}")))?;
        let connection = connector
            .from_config(&name, profile, table, &schema)
            .map_err(|x| e(format!("{x:#}")))?;
        let changelog = (connection.schema.format == pubsub_engine_spi::Format::DebeziumJson)
            .then(pubsub_engine_plan::ChangelogOptions::default);
        Ok(GraphTable {
            table: PlannedTable {
                connector,
                connection,
                late_rows: None,
                changelog,
                primary_key: Vec::new(),
            },
        })
    }

    pub fn name(&self) -> &str {
        &self.table.connection.name
    }

    /// Whether the table is read (a source) or written (a sink).
    pub fn connection_type(&self) -> ConnectionType {
        self.table.connection.connection_type
    }

    /// The table as the runtime sees it (connector name, type, columns, JSON config).
    pub fn connection(&self) -> &Connection {
        &self.table.connection
    }

    /// Same connector, name, type, columns and config.
    fn same_as(&self, other: &GraphTable) -> bool {
        self.table.connector.name() == other.table.connector.name()
            && self.table.connection == other.table.connection
    }
}

/// A pipeline of pipes from source tables to sink tables; [`build`](Self::build) gives
/// the [`PlannedPipeline`] to run. See the [module docs](self) for the checks.
#[derive(Clone, Default)]
pub struct PipelineGraph {
    /// Every table piped so far, once each, in order of first use.
    tables: Vec<GraphTable>,
    queries: Vec<PlannedQuery>,
    /// Each pipe as an INSERT and its error prefix: [`build`](Self::build) plans them
    /// again once every table is known (a source read by a sink that stamps record ids
    /// gives all its rows a record key, whichever pipe added the sink).
    pipes: Vec<(InsertDef, String)>,
}

impl PipelineGraph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds query `q{n}` (n = pipes added before): every row of `source` is written to
    /// `sink`, each sink column from the source column of the same name. Takes tables by
    /// value or by reference.
    ///
    /// Errors: see the [module docs](self#errors).
    pub fn pipe(
        mut self,
        source: impl Borrow<GraphTable>,
        sink: impl Borrow<GraphTable>,
    ) -> Result<Self, GraphError> {
        let (source, sink) = (source.borrow(), sink.borrow());
        if source.connection_type() != ConnectionType::Source {
            return Err(GraphError(format!(
                "table '{}' is a sink and cannot be piped from",
                source.name()
            )));
        }
        if sink.connection_type() != ConnectionType::Sink {
            return Err(GraphError(format!(
                "table '{}' is a source and cannot be piped into",
                sink.name()
            )));
        }
        let what = format!("pipe '{}' -> '{}'", source.name(), sink.name());
        let columns: Vec<String> = sink
            .connection()
            .schema
            .fields
            .iter()
            .map(|f| f.name.clone())
            .collect();
        let src = &source.connection().schema;
        if let Some(c) = columns
            .iter()
            .find(|c| !src.fields.iter().any(|f| &f.name == *c))
        {
            let list: Vec<String> = src
                .fields
                .iter()
                .map(|f| format!("{} {}", f.name, f.field_type.sql_name()))
                .collect();
            return Err(GraphError(format!(
                "{what}: column '{c}' does not exist in table '{}' (columns: {})",
                source.name(),
                list.join(", ")
            )));
        }
        let ins = InsertDef::by_name(sink.name(), source.name(), &columns)
            .map_err(|e| GraphError(format!("{what}: {}", e.0)))?;
        let id = format!("q{}", self.queries.len());
        let mut pair = vec![
            (source.name().to_string(), source.table.clone()),
            (sink.name().to_string(), sink.table.clone()),
        ];
        give_record_keys(&mut pair, source.name(), sink.name())
            .map_err(|e| GraphError(format!("{what}: {}", e.0)))?;
        let [(_, src), (_, dst)] = <[_; 2]>::try_from(pair).ok().expect("two tables");
        let query = plan_query(id, &ins, &what, src, dst).map_err(|e| prefixed(&what, e))?;
        for t in [source, sink] {
            match self.tables.iter().find(|u| u.name() == t.name()) {
                Some(u) if u.same_as(t) => {}
                Some(_) => {
                    return Err(GraphError(format!(
                        "table '{}' is already in the graph with a different connector, config or columns: give each table its own name",
                        t.name()
                    )))
                }
                None => self.tables.push(t.clone()),
            }
        }
        let named: Vec<(String, PlannedTable)> = self
            .tables
            .iter()
            .map(|t| (t.name().to_string(), t.table.clone()))
            .collect();
        check_exclusive_sources(&named, "pipe one source table into every sink")?;
        self.queries.push(query);
        self.pipes.push((ins, what));
        Ok(self)
    }

    /// The pipeline to run with the runtime's `run_pipeline` (`pubsub-engine-runtime`).
    ///
    /// Errors: the graph has no pipe.
    pub fn build(self) -> Result<PlannedPipeline, GraphError> {
        if self.queries.is_empty() {
            return Err(GraphError(
                "the pipeline graph has no pipe: add one with PipelineGraph::pipe(source, sink)"
                    .into(),
            ));
        }
        let mut tables: Vec<(String, PlannedTable)> = self
            .tables
            .iter()
            .map(|t| (t.name().to_string(), t.table.clone()))
            .collect();
        for (ins, what) in &self.pipes {
            give_record_keys(&mut tables, &ins.source, &ins.sink)
                .map_err(|e| GraphError(format!("{what}: {}", e.0)))?;
        }
        let table = |name: &str| {
            tables
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.clone())
                .expect("every piped table is in the graph")
        };
        let queries = self
            .pipes
            .iter()
            .enumerate()
            .map(|(i, (ins, what))| {
                plan_query(
                    format!("q{i}"),
                    ins,
                    what,
                    table(&ins.source),
                    table(&ins.sink),
                )
                .map_err(|e| prefixed(what, e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PlannedPipeline { queries })
    }
}

/// A planning error of pipe `what`, starting with `what`.
fn prefixed(what: &str, e: SqlError) -> GraphError {
    if e.0.starts_with(what) {
        GraphError(e.0)
    } else {
        GraphError(format!("{what}: {}", e.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_mem::{Mem, MemTable};
    use crate::{parse_pipeline, plan_pipeline};
    use pubsub_engine_spi::{FieldType, Format, SourceField, TimestampFormat};

    /// Issue 32, item 1: a connector that does not read an event-time column refuses a
    /// table that names one (a newcomer's `nexmark` table took the clause and never made
    /// a watermark), with the clause's position.
    #[test]
    fn a_connector_without_event_time_refuses_watermark_for() {
        let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
        for (clause, option) in [
            (", WATERMARK FOR ts", ""),
            ("", ", 'event_time_field' = 'ts'"),
        ] {
            let sql = parse_pipeline(&format!(
                "CREATE TABLE src (n INT, ts TIMESTAMP{clause}) WITH ('connector' = 'mem', 'role' = 'source'{option});
                 CREATE TABLE out (n INT) WITH ('connector' = 'mem', 'role' = 'sink');
                 INSERT INTO out SELECT n FROM src;"
            ))
            .unwrap();
            let e = plan_pipeline(&sql, &connectors)
                .err()
                .expect("refused")
                .to_string();
            assert!(
                e.contains("table 'src': connector 'mem' does not read an event-time column"),
                "{e}"
            );
            assert_eq!(e.contains("(line 1, column 40)"), !clause.is_empty(), "{e}");
        }
    }

    /// A sink that stamps record ids gets each row's id as its trailing column, derived
    /// from the query and the source's hidden record key, which SQL does not see (`*`).
    #[test]
    fn a_stamping_sink_gets_each_rows_record_id_and_sql_never_sees_the_key() {
        use arrow::array::{Array, AsArray, Int32Array, RecordBatch, StringArray};
        let sql = parse_pipeline(
            "CREATE TABLE src (n INT) WITH ('connector' = 'mem', 'role' = 'source');
             CREATE TABLE out (n INT) WITH ('connector' = 'mem', 'role' = 'sink', 'stamp' = 'true');
             CREATE TABLE plain (n INT) WITH ('connector' = 'mem', 'role' = 'sink');
             INSERT INTO out SELECT * FROM src WHERE n > 1;
             INSERT INTO out SELECT n FROM src;
             INSERT INTO plain SELECT * FROM src;",
        )
        .unwrap();
        let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
        let mut planned = plan_pipeline(&sql, &connectors).unwrap();
        let unbound = planned.clone();
        planned.bind_job("p1").unwrap();
        // The source carries the key once, for every query that reads it.
        let src = &planned.sources()[0].0;
        let names: Vec<&str> = src
            .connection
            .schema
            .fields
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(
            names,
            ["n", pubsub_engine_spi::record_id::RECORD_KEY_COLUMN]
        );
        let keys = [
            "projects/p/subscriptions/s/1#0",
            "projects/p/subscriptions/s/2#0",
            "x#1",
        ];
        let batch = RecordBatch::try_new(
            Arc::new(src.connection.schema.arrow_schema().as_ref().clone()),
            vec![
                Arc::new(Int32Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(keys.to_vec())),
            ],
        )
        .unwrap();
        // An unbound plan stamps nothing: the job id is part of every record id.
        let e = unbound.queries[0].project(&batch).unwrap_err();
        assert!(e.to_string().contains("bind_job"), "{e}");
        let ids = |q: &PlannedQuery| -> Vec<String> {
            let out = q.project(&batch).unwrap();
            assert_eq!(
                out.schema().field(out.num_columns() - 1).name(),
                pubsub_engine_spi::record_id::RECORD_ID_COLUMN
            );
            let c = out.column(out.num_columns() - 1).as_string::<i32>().clone();
            (0..c.len()).map(|i| c.value(i).to_string()).collect()
        };
        // `*` selected only `n`; the WHERE kept rows 2 and 3, each with its own key.
        let q0 = &planned.queries[0];
        assert_eq!(q0.select.fields.len(), 1);
        let id = |q: &PlannedQuery, k: &str| {
            pubsub_engine_spi::record_id::record_id(
                &pubsub_engine_spi::record_id::RecordProducer {
                    job: "p1".into(),
                    sink: "out".into(),
                    query: q.id.clone(),
                    statement: q.text.clone(),
                },
                k,
            )
        };
        assert_eq!(ids(q0), [id(q0, keys[1]), id(q0, keys[2])]);
        // Another SELECT into the same sink: the same rows get other ids.
        let q1 = &planned.queries[1];
        assert_eq!(ids(q1), keys.iter().map(|k| id(q1, k)).collect::<Vec<_>>());
        // A sink that does not stamp gets its own columns only.
        assert_eq!(planned.queries[2].project(&batch).unwrap().num_columns(), 1);
        // The graph plans the same (a source piped before its stamping sink too).
        let table = |name: &str, t: MemTable| {
            GraphTable::new(
                Mem,
                name,
                (),
                t,
                ConnectionSchema::json(vec![col("n", FieldType::Int)]),
            )
            .unwrap()
        };
        let s = table("src", MemTable::default());
        let plain = table(
            "plain",
            MemTable {
                sink: true,
                ..MemTable::default()
            },
        );
        let out = table(
            "out",
            MemTable {
                sink: true,
                stamp: true,
                ..MemTable::default()
            },
        );
        let graph = PipelineGraph::new()
            .pipe(&s, &plain)
            .unwrap()
            .pipe(&s, &out)
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(graph.queries[0].source.connection, src.connection);
        let mut graph = graph;
        graph.bind_job("p1").unwrap();
        assert_eq!(graph.queries[1].project(&batch).unwrap().num_columns(), 2);
        // The names are reserved.
        let e = |text: &str| {
            plan_pipeline(&parse_pipeline(text).unwrap(), &connectors)
                .err()
                .unwrap()
                .0
        };
        assert!(e("CREATE TABLE src (__record_key TEXT) WITH ('connector' = 'mem', 'role' = 'source');
                   CREATE TABLE out (a TEXT) WITH ('connector' = 'mem', 'role' = 'sink', 'stamp' = 'true');
                   INSERT INTO out SELECT __record_key FROM src;").contains("column name '__record_key' is reserved"));
        assert!(e("CREATE TABLE src (a TEXT) WITH ('connector' = 'mem', 'role' = 'source');
                   CREATE TABLE out (__record_id TEXT) WITH ('connector' = 'mem', 'role' = 'sink', 'stamp' = 'true');
                   INSERT INTO out SELECT a FROM src;").contains("column name '__record_id' of table 'out' is reserved"));
    }

    fn source(name: &str, fields: Vec<SourceField>) -> GraphTable {
        let table = MemTable {
            resource: Some(format!("res-{name}")),
            ..MemTable::default()
        };
        GraphTable::new(Mem, name, (), table, ConnectionSchema::json(fields)).unwrap()
    }

    fn sink(name: &str, fields: Vec<SourceField>) -> GraphTable {
        let table = MemTable {
            sink: true,
            ..MemTable::default()
        };
        GraphTable::new(Mem, name, (), table, ConnectionSchema::json(fields)).unwrap()
    }

    fn col(name: &str, t: FieldType) -> SourceField {
        SourceField::new(name, t)
    }

    fn pipe_error(src: &GraphTable, dst: &GraphTable) -> String {
        PipelineGraph::new().pipe(src, dst).err().unwrap().0
    }

    #[test]
    fn a_pipe_plans_as_the_insert_selecting_the_sink_columns_by_name() {
        let src = GraphTable::new(
            Mem,
            "src",
            (),
            MemTable {
                resource: Some("res-src".into()),
                ..MemTable::default()
            },
            ConnectionSchema::json(vec![
                col("n", FieldType::Int),
                col("k", FieldType::Text),
                col("id", FieldType::Text).not_null().metadata_from("id"),
                col("unused", FieldType::Boolean),
            ]),
        )
        .unwrap();
        let out = GraphTable::new(
            Mem,
            "out",
            (),
            MemTable {
                sink: true,
                key: Some("k".into()),
                ..MemTable::default()
            },
            // Other order, a widening cast, a NOT NULL column fed by a NOT NULL one.
            ConnectionSchema::json(vec![
                col("id", FieldType::Text).not_null(),
                col("k", FieldType::Text),
                col("n", FieldType::Bigint),
            ]),
        )
        .unwrap();
        let other = sink("other", vec![col("n", FieldType::Double)]);
        let graph = PipelineGraph::new()
            .pipe(&src, &out)
            .unwrap()
            .pipe(src.clone(), other)
            .unwrap()
            .build()
            .unwrap();

        let sql = parse_pipeline(
            "CREATE TABLE src (n INT, k TEXT, id TEXT NOT NULL METADATA FROM 'id', unused BOOLEAN)
                 WITH ('connector' = 'mem', 'role' = 'source', 'resource' = 'res-src');
             CREATE TABLE out (id TEXT NOT NULL, k TEXT, n BIGINT)
                 WITH ('connector' = 'mem', 'role' = 'sink', 'key' = 'k');
             CREATE TABLE other (n DOUBLE) WITH ('connector' = 'mem', 'role' = 'sink');
             INSERT INTO out SELECT id, k, n FROM src;
             INSERT INTO other SELECT n FROM src;",
        )
        .unwrap();
        let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
        let planned = plan_pipeline(&sql, &connectors).unwrap();

        assert_eq!(graph.queries.len(), 2);
        for (g, p) in graph.queries.iter().zip(&planned.queries) {
            assert_eq!(g.id, p.id);
            assert_eq!(g.text, p.text);
            assert_eq!(g.projection, p.projection);
            assert_eq!(g.route_by, p.route_by);
            assert_eq!(g.sink_schema, p.sink_schema);
            assert_eq!(g.source.connection, p.source.connection);
            assert_eq!(g.sink.connection, p.sink.connection);
        }
        let q0 = &graph.queries[0];
        assert_eq!(q0.id, "q0");
        assert_eq!(q0.text, "INSERT INTO out SELECT id, k, n FROM src");
        // The SELECT names the sink's columns in sink order; column j takes item j.
        assert_eq!(q0.projection, vec![Some(0), Some(1), Some(2)]);
        let items: Vec<&str> = q0.select.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(items, ["id", "k", "n"]);
        assert_eq!(q0.route_by, Some(1), "routed by the sink key column 'k'");
        assert_eq!(graph.queries[1].id, "q1");
        // One source table, read once for both pipes.
        let sources = graph.sources();
        assert_eq!(sources.len(), 1);
        assert_eq!(sources[0].1, vec![0, 1]);
    }

    #[test]
    fn a_sink_column_missing_from_the_source_names_the_pipe_table_and_column() {
        let src = source("src", vec![col("a", FieldType::Text)]);
        let dst = sink(
            "dst",
            vec![col("a", FieldType::Text), col("b", FieldType::Bigint)],
        );
        assert_eq!(
            pipe_error(&src, &dst),
            "pipe 'src' -> 'dst': column 'b' does not exist in table 'src' (columns: a TEXT)"
        );
    }

    #[test]
    fn a_type_that_does_not_convert_exactly_names_both_columns() {
        let src = source(
            "src",
            vec![col("a", FieldType::Text), col("n", FieldType::Bigint)],
        );
        // BIGINT -> DOUBLE rounds beyond 2^53: refused as in SQL.
        let dst = sink(
            "dst",
            vec![col("a", FieldType::Text), col("n", FieldType::Double)],
        );
        let e = pipe_error(&src, &dst);
        assert!(
            e.starts_with(
                "pipe 'src' -> 'dst': column 'n' (BIGINT) of 'src' cannot be written to column 'n' (DOUBLE): only the same type, exact conversions"
            ),
            "{e}"
        );
        // Exact conversions pass.
        let dst = sink(
            "dst",
            vec![col("n", FieldType::Text), col("a", FieldType::Text)],
        );
        assert!(PipelineGraph::new().pipe(&src, &dst).is_ok());
        // Signed into unsigned may be negative, BIGINT UNSIGNED into BIGINT too large:
        // planned as checked conversions (a value that does not fit fails its row,
        // narrowing_tests.rs), as Arroyo takes them (issue 47).
        let checked = |src: &GraphTable, to: FieldType| {
            let graph = PipelineGraph::new()
                .pipe(src, &sink("dst", vec![col("n", to)]))
                .unwrap();
            graph.queries[0].select.exprs[0].1.clone()
        };
        assert_eq!(
            checked(&src, FieldType::UBigint),
            "CAST(n AS BIGINT UNSIGNED)"
        );
        let unsigned = |name, ty| source(name, vec![col("n", ty)]);
        assert_eq!(
            checked(&unsigned("src", FieldType::UBigint), FieldType::Bigint),
            "CAST(n AS BIGINT)"
        );
        for to in [FieldType::Bigint, FieldType::UBigint, FieldType::Double] {
            let dst = sink("dst", vec![col("n", to)]);
            assert!(
                PipelineGraph::new()
                    .pipe(&unsigned("src", FieldType::UInt), &dst)
                    .is_ok(),
                "INT UNSIGNED -> {}",
                to.sql_name()
            );
        }
    }

    #[test]
    fn a_not_null_sink_column_fed_by_a_nullable_source_column_is_refused() {
        let src = source("src", vec![col("a", FieldType::Text)]);
        let dst = sink("dst", vec![col("a", FieldType::Text).not_null()]);
        let e = pipe_error(&src, &dst);
        assert!(
            e.starts_with("pipe 'src' -> 'dst': column 'a' (TEXT) of 'src' may be NULL but column 'a' is TEXT NOT NULL; declare 'a' NOT NULL"),
            "{e}"
        );
        let src = source("src", vec![col("a", FieldType::Text).not_null()]);
        assert!(PipelineGraph::new().pipe(&src, &dst).is_ok());
    }

    #[test]
    fn direction_names_and_exclusive_resources_are_checked() {
        let src = source("src", vec![col("a", FieldType::Text)]);
        let dst = sink("dst", vec![col("a", FieldType::Text)]);
        assert_eq!(
            pipe_error(&dst, &dst),
            "table 'dst' is a sink and cannot be piped from"
        );
        assert_eq!(
            pipe_error(&src, &src),
            "table 'src' is a source and cannot be piped into"
        );
        // One name, one table.
        let twin = sink("src", vec![col("a", FieldType::Text)]);
        let other_src = source("other", vec![col("a", FieldType::Text)]);
        let e = PipelineGraph::new()
            .pipe(&src, &dst)
            .unwrap()
            .pipe(&other_src, &twin)
            .err()
            .unwrap()
            .0;
        assert_eq!(
            e,
            "table 'src' is already in the graph with a different connector, config or columns: give each table its own name"
        );
        // Two source tables on one exclusive resource would split its messages.
        let same_resource = GraphTable::new(
            Mem,
            "again",
            (),
            MemTable {
                resource: Some("res-src".into()),
                ..MemTable::default()
            },
            ConnectionSchema::json(vec![col("a", FieldType::Text)]),
        )
        .unwrap();
        let e = PipelineGraph::new()
            .pipe(&src, &dst)
            .unwrap()
            .pipe(&same_resource, &dst)
            .err()
            .unwrap()
            .0;
        assert_eq!(
            e,
            "tables 'src' and 'again' both read res-src: each message would reach only one of them; pipe one source table into every sink"
        );
        assert_eq!(
            PipelineGraph::new().build().err().unwrap().0,
            "the pipeline graph has no pipe: add one with PipelineGraph::pipe(source, sink)"
        );
    }

    #[test]
    fn a_table_is_checked_like_create_table() {
        let make = |schema: ConnectionSchema| {
            GraphTable::new(Mem, "t", (), MemTable::default(), schema)
                .err()
                .unwrap()
                .0
        };
        assert_eq!(
            make(ConnectionSchema::json(vec![])),
            "table 't': no columns are declared"
        );
        assert_eq!(
            GraphTable::new(
                Mem,
                " ",
                (),
                MemTable::default(),
                ConnectionSchema::json(vec![col("a", FieldType::Text)])
            )
            .err()
            .unwrap()
            .0,
            "table ' ': a table name must be non-blank, without surrounding spaces"
        );
        assert_eq!(
            make(ConnectionSchema::json(vec![
                col("a", FieldType::Text),
                col("a", FieldType::Int)
            ])),
            "table 't': column 'a' is declared twice"
        );
        assert_eq!(
            make(
                ConnectionSchema::new(Format::RawString, vec![col("value", FieldType::Text)])
                    .with_timestamp_format(TimestampFormat::EpochMillis)
            ),
            "table 't': json.timestamp-format 'epoch-millis' applies to formats 'json' and 'debezium_json' only, but the format is 'raw_string'"
        );
        assert_eq!(
            make(ConnectionSchema::json(vec![
                col("x", FieldType::Text).metadata_from("nope")
            ])),
            "table 't': unknown metadata field 'nope' for column 'x' of mem connector 't' (known: id)"
        );
        assert_eq!(
            make(ConnectionSchema::json(vec![
                col("x", FieldType::Bigint).metadata_from("id")
            ])),
            "table 't': column 'x' is METADATA FROM 'id', which is TEXT, but is declared BIGINT"
        );
        // Through the erased connector, a config of the wrong shape is refused up front.
        let e = GraphTable::from_erased(
            Arc::new(Mem),
            "t",
            &(),
            &serde_json::json!({"sink": true, "topic": "x"}),
            ConnectionSchema::json(vec![col("a", FieldType::Text)]),
        )
        .err()
        .unwrap()
        .0;
        assert!(
            e.starts_with("table 't': the mem table config is invalid: unknown field `topic`"),
            "{e}"
        );
        let t = GraphTable::from_erased(
            Arc::new(Mem),
            "t",
            &(),
            &serde_json::json!({"sink": true, "resource": null, "key": null}),
            ConnectionSchema::json(vec![col("a", FieldType::Text)]),
        )
        .unwrap();
        assert_eq!(t.connection_type(), ConnectionType::Sink);
        assert_eq!(t.name(), "t");
    }
}
