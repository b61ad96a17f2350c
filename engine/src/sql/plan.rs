//! Parsed SQL -> connections and queries, validated against the connector registry.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::DataType;
use arrow::datatypes::SchemaRef;

use super::parse::{PipelineSql, Projection, SqlError, TableDef};
use crate::spi::{
    BadData, Connection, ConnectionSchema, ConnectionType, ErasedConnector, Format, OperatorConfig,
    TimestampFormat,
};

/// A table bound to its connector.
#[derive(Clone)]
pub struct PlannedTable {
    pub connector: Arc<dyn ErasedConnector>,
    pub connection: Connection,
}

impl PlannedTable {
    /// The operator config for one subtask of this table.
    pub fn operator_config(&self) -> OperatorConfig {
        let s = &self.connection.schema;
        OperatorConfig {
            format: s.format,
            bad_data: s.bad_data,
            schema: s.clone(),
            metadata_fields: s.metadata_fields(),
        }
    }
}

/// One `INSERT INTO sink SELECT ... FROM source`.
#[derive(Clone)]
pub struct PlannedQuery {
    /// `q{index}`, stable across restarts of the same pipeline file.
    pub id: String,
    pub source: PlannedTable,
    pub sink: PlannedTable,
    /// Source column index feeding each sink column, in sink order.
    pub projection: Vec<usize>,
    pub sink_schema: SchemaRef,
}

impl PlannedQuery {
    /// Selects, casts and renames source rows into the sink's schema.
    pub fn project(&self, batch: &RecordBatch) -> anyhow::Result<RecordBatch> {
        let columns = self
            .projection
            .iter()
            .zip(self.sink_schema.fields())
            .map(|(i, f)| {
                let c = batch.column(*i);
                if c.data_type() == f.data_type() {
                    Ok(c.clone())
                } else {
                    // Never turn a value that does not convert into NULL.
                    let opts = CastOptions {
                        safe: false,
                        ..CastOptions::default()
                    };
                    cast_with_options(c, f.data_type(), &opts).map_err(anyhow::Error::from)
                }
            })
            .collect::<anyhow::Result<Vec<ArrayRef>>>()?;
        let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        RecordBatch::try_new_with_options(self.sink_schema.clone(), columns, &opts).map_err(|e| {
            anyhow::anyhow!(
                "rows for '{}' do not fit its columns: {e}",
                self.sink.connection.name
            )
        })
    }
}

/// A validated pipeline: every query with its two tables.
#[derive(Clone)]
pub struct PlannedPipeline {
    pub queries: Vec<PlannedQuery>,
}

/// Binds tables to connectors (pulling and validating every option) and queries to tables.
///
/// Errors name the table and, for options, the key and value.
pub fn plan_pipeline(
    sql: &PipelineSql,
    connectors: &[Arc<dyn ErasedConnector>],
) -> Result<PlannedPipeline, SqlError> {
    let mut tables = Vec::new();
    for t in &sql.tables {
        tables.push((t.name.clone(), plan_table(t, connectors)?));
    }
    let find = |name: &str| {
        tables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| {
                SqlError(format!(
                    "table '{name}' is not defined (CREATE TABLE it first)"
                ))
            })
    };
    let mut queries = Vec::new();
    for (i, ins) in sql.inserts.iter().enumerate() {
        let source = find(&ins.source)?;
        let sink = find(&ins.sink)?;
        if source.connection.connection_type != ConnectionType::Source {
            return Err(SqlError(format!(
                "table '{}' is a sink and cannot be read by SELECT",
                ins.source
            )));
        }
        if sink.connection.connection_type != ConnectionType::Sink {
            return Err(SqlError(format!(
                "table '{}' is a source and cannot be written by INSERT",
                ins.sink
            )));
        }
        let src_schema = source.connection.schema.arrow_schema();
        let sink_schema = sink.connection.schema.arrow_schema();
        let projection: Vec<usize> = match &ins.projection {
            Projection::All => (0..src_schema.fields().len()).collect(),
            Projection::Columns(cols) => cols
                .iter()
                .map(|c| {
                    src_schema.index_of(c).map_err(|_| {
                        SqlError(format!(
                            "column '{c}' does not exist in table '{}'",
                            ins.source
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        if projection.len() != sink_schema.fields().len() {
            return Err(SqlError(format!(
                "INSERT INTO {} selects {} columns but the table has {}",
                ins.sink,
                projection.len(),
                sink_schema.fields().len()
            )));
        }
        for (i, f) in projection.iter().zip(sink_schema.fields()) {
            let from = src_schema.field(*i);
            if !is_safe_cast(from.data_type(), f.data_type()) {
                let sql = |t: &ConnectionSchema, name: &str| {
                    t.fields
                        .iter()
                        .find(|x| x.name == name)
                        .map_or("?", |x| x.field_type.sql_name())
                };
                return Err(SqlError(format!(
                    "INSERT INTO {}: column '{}' ({}) cannot be written to column '{}' ({}): only the same type, INT -> BIGINT, INT/BIGINT -> DOUBLE and any type -> TEXT are allowed",
                    ins.sink,
                    from.name(),
                    sql(&source.connection.schema, from.name()),
                    f.name(),
                    sql(&sink.connection.schema, f.name()),
                )));
            }
        }
        queries.push(PlannedQuery {
            id: format!("q{i}"),
            source,
            sink,
            projection,
            sink_schema,
        });
    }
    if queries.is_empty() {
        return Err(SqlError(
            "the pipeline has no INSERT INTO ... SELECT statement".into(),
        ));
    }
    Ok(PlannedPipeline { queries })
}

/// Casts that never fail: identity, integer widening, integers to DOUBLE (exact up to
/// 2^53: larger BIGINTs round) and anything to TEXT. Others could fail or invent NULLs
/// at run time, so the planner rejects them.
fn is_safe_cast(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    from == to
        || matches!(
            (from, to),
            (Int32, Int64) | (Int32, Float64) | (Int64, Float64) | (_, Utf8)
        )
}

fn plan_table(
    t: &TableDef,
    connectors: &[Arc<dyn ErasedConnector>],
) -> Result<PlannedTable, SqlError> {
    let e = |m: String| SqlError(format!("table '{}': {m}", t.name));
    let mut options = t.options.clone();
    let name = options
        .pull_str("connector")
        .map_err(|x| e(x.to_string()))?;
    let connector = connectors
        .iter()
        .find(|c| c.name() == name)
        .cloned()
        .ok_or_else(|| {
            let known: Vec<&str> = connectors.iter().map(|c| c.name()).collect();
            e(format!(
                "option 'connector' is invalid: unknown connector, was '{name}' (known: {})",
                known.join(", ")
            ))
        })?;
    let format = match options
        .pull_opt_str("format")
        .map_err(|x| e(x.to_string()))?
    {
        None => Format::Json,
        Some(f) => Format::parse(&f).ok_or_else(|| {
            e(format!(
                "option 'format' is invalid: must be json, raw_string or raw_bytes, was '{f}'"
            ))
        })?,
    };
    let timestamp_format = match options
        .pull_opt_str("json.timestamp-format")
        .map_err(|x| e(x.to_string()))?
    {
        None => TimestampFormat::default(),
        Some(v) => {
            if format != Format::Json {
                return Err(e(format!(
                    "option 'json.timestamp-format' applies to format 'json' only, was '{v}'"
                )));
            }
            TimestampFormat::parse(&v).ok_or_else(|| {
                e(format!(
                    "option 'json.timestamp-format' is invalid: must be one of {}, was '{v}'",
                    TimestampFormat::VALUES
                ))
            })?
        }
    };
    let schema = ConnectionSchema {
        format,
        timestamp_format,
        bad_data: BadData::Fail,
        fields: t.fields.clone(),
    };
    let connection = connector
        .from_options(&t.name, &mut options, &schema)
        .map_err(|x| e(format!("{x:#}")))?;
    let mut known = vec!["connector", "format", "json.timestamp-format"];
    known.extend_from_slice(connector.known_options());
    options.finish(&known).map_err(|x| e(x.to_string()))?;
    Ok(PlannedTable {
        connector,
        connection,
    })
}
