//! A parsed pipeline planned whole: every table bound to its connector, the hidden
//! columns its queries need, every query planned, the late-rows queries added.

use std::sync::Arc;

use super::error::SqlError;
use super::parse::PipelineSql;
use super::plan::{
    check_exclusive_sources, give_event_time, give_record_keys, plan_query, plan_table,
};
use pubsub_engine_plan::PlannedPipeline;
use pubsub_engine_spi::{ConnectionType, ErasedConnector};

/// Binds tables to connectors (pulling and validating every option) and queries to tables.
///
/// Errors name the table and, for options, the key and value; type and nullability
/// errors name both columns with their SQL types.
pub fn plan_pipeline(
    sql: &PipelineSql,
    connectors: &[Arc<dyn ErasedConnector>],
) -> Result<PlannedPipeline, SqlError> {
    let mut tables = Vec::new();
    let mut from_queries = Vec::new();
    for t in &sql.tables {
        if super::derive::takes_query_columns(t, sql) {
            from_queries.push(t);
            continue;
        }
        tables.push((t.name.clone(), plan_table(t, connectors)?));
    }
    // Memory tables: their columns checked against the queries writing them.
    let prepared = super::memory::prepare(sql, &tables)?;
    let sql = prepared.as_ref().unwrap_or(sql);
    // Sink tables without columns: the columns of the query writing each, planned over
    // the sources as they will be (with their event time).
    if !from_queries.is_empty() {
        let mut sources = tables.clone();
        for ins in &sql.inserts {
            give_event_time(&mut sources, ins)?;
        }
        for t in from_queries {
            let t = super::derive::with_query_columns(t, sql, &sources)?;
            tables.push((t.name.clone(), plan_table(&t, connectors)?));
        }
    }
    for ins in &sql.inserts {
        give_record_keys(&mut tables, &ins.source, &ins.sink)?;
        if let Some(joined) = &ins.joined {
            give_record_keys(&mut tables, joined, &ins.sink)?;
        }
        give_event_time(&mut tables, ins)?;
        if let Some(late) = super::late::table_of(&tables, ins) {
            give_record_keys(&mut tables, &ins.source, &late)?;
        }
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
        let what = format!("INSERT INTO {}", ins.sink);
        if let Some(joined) = &ins.joined {
            let right = find(joined)?;
            if right.connection.connection_type != ConnectionType::Source {
                return Err(SqlError(format!(
                    "table '{joined}' is a sink and cannot be read by SELECT"
                )));
            }
            queries.push(super::join::plan_join(
                format!("q{i}"),
                ins,
                &what,
                [source, right],
                sink,
            )?);
            continue;
        }
        queries.push(plan_query(format!("q{i}"), ins, &what, source, sink)?);
    }
    super::late::plan_late_queries(&mut queries, &find)?;
    if queries.is_empty() {
        return Err(SqlError(
            "the pipeline has no INSERT INTO ... SELECT statement".into(),
        ));
    }
    check_exclusive_sources(&tables, "declare one table and read it from every INSERT")?;
    Ok(PlannedPipeline { queries })
}
