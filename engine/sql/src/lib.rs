//! The SQL front end: `CREATE TABLE ... WITH (...)` and `INSERT INTO ... SELECT ... FROM
//! ... [WHERE ...]`, parsed with `sqlparser` (SPEC 8), bound to the connector registry, and
//! the SELECTs planned by DataFusion into the plan the runtime runs
//! (`pubsub-engine-plan`). A pipeline graph built in Rust ([`PipelineGraph`]) is planned
//! the same way without SQL text.
//!
//! The only crate that depends on `sqlparser` and `datafusion-sql`; it knows nothing of
//! Timely (SPEC 3, issue 46).

mod aggregate;
mod catalog;
mod clauses;
mod derive;
mod dialect;
mod error;
pub mod graph;
mod join;
mod join_rows;
mod late;
mod memory;
mod parse;
mod pipeline;
mod plan;
mod ranking;
mod sample;
mod schemas;
mod secrets;
mod select;
mod unnest_below;
mod views;
mod watermark;
mod window_fns;

#[cfg(test)]
mod changelog_source_tests;
#[cfg(test)]
mod derive_tests;
#[cfg(test)]
mod expr_tests;
#[cfg(test)]
mod join_rows_tests;
#[cfg(test)]
mod join_tests;
#[cfg(test)]
mod late_tests;
#[cfg(test)]
mod memory_tests;
#[cfg(test)]
mod narrowing_tests;
#[cfg(test)]
mod ranking_tests;
#[cfg(test)]
mod row_local_tests;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod temporal_tests;
#[cfg(test)]
mod test_mem;
#[cfg(test)]
mod unnest_tests;
#[cfg(test)]
mod unsigned_tests;
#[cfg(test)]
mod unstructured_tests;
#[cfg(test)]
mod updating_tests;
#[cfg(test)]
mod window_oracle_tests;
#[cfg(test)]
mod window_tests;

pub use error::SqlError;
pub use graph::{GraphError, GraphTable, PipelineGraph};
pub use parse::{parse_pipeline, InsertDef, PipelineSql, TableDef};
pub use pipeline::plan_pipeline;
pub use plan::plan_tables;
pub(crate) use plan::{check_exclusive_sources, give_record_keys, plan_query};
pub use sample::plan_sample_select;
pub use schemas::resolve_schemas;
pub use secrets::written_option_values;
pub use watermark::{WatermarkDef, DEFAULT_DELAY as DEFAULT_OUT_OF_ORDERNESS};

/// Whether table `name` of `sql` takes its columns from the query writing it (a sink
/// declared without payload columns, of a format that writes declared columns; see
/// `derive.rs`): for a UI that marks those columns. False for a name `sql` does not
/// declare.
pub fn takes_query_columns(sql: &PipelineSql, name: &str) -> bool {
    sql.tables
        .iter()
        .find(|t| t.name == name)
        .is_some_and(|t| derive::takes_query_columns(t, sql))
}

/// The columns of a planned table's schema that SQL sees: without the hidden ones
/// planning adds (record key, event time, deduplication).
pub fn visible_columns(
    schema: &pubsub_engine_spi::ConnectionSchema,
) -> pubsub_engine_spi::ConnectionSchema {
    plan::visible(schema)
}
