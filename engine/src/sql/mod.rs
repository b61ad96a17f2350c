//! The SQL front end: `CREATE TABLE ... WITH (...)` and `INSERT INTO ... SELECT ... FROM`,
//! parsed with `sqlparser` (SPEC 8), then planned against the connector registry.

mod dialect;
mod parse;
mod plan;

pub use parse::{parse_pipeline, InsertDef, PipelineSql, Projection, SqlError, TableDef};
pub(crate) use plan::{check_exclusive_sources, plan_query};
pub use plan::{plan_pipeline, plan_tables, PlannedPipeline, PlannedQuery, PlannedTable};
