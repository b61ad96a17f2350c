//! The SQL front end: `CREATE TABLE ... WITH (...)` and `INSERT INTO ... SELECT ... FROM
//! ... [WHERE ...]`, parsed with `sqlparser` (SPEC 8), bound to the connector registry, and
//! the SELECTs planned by DataFusion into expressions evaluated on Arrow batches.

mod aggregate;
mod catalog;
mod check;
mod clauses;
mod coercion;
mod dedup;
mod dialect;
mod eval;
mod exact_cast;
mod json;
mod late;
mod number_text;
mod parse;
mod plan;
mod row_local;
mod sample;
mod schemas;
mod select;
mod temporal;
mod temporal_fns;
mod type_words;
mod views;
mod watermark;
mod window_fns;

#[cfg(test)]
mod expr_tests;
#[cfg(test)]
mod late_tests;
#[cfg(test)]
mod row_local_tests;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod temporal_tests;
#[cfg(test)]
mod unsigned_tests;
#[cfg(test)]
mod window_oracle_tests;
#[cfg(test)]
mod window_tests;

pub use aggregate::{WindowKind, WindowPlan};
pub use check::{reject_failing, RejectedMessage, RowCheck};
pub use dedup::{dedup_columns, DedupColumns};
pub use eval::RowFailure;
pub use parse::{parse_pipeline, InsertDef, PipelineSql, SqlError, TableDef};
pub(crate) use plan::{check_exclusive_sources, give_record_keys, plan_query};
pub use plan::{plan_pipeline, plan_tables, PlannedPipeline, PlannedQuery, PlannedTable};
pub use plan::{EVENT_TIME, EVENT_TIME_COLUMN};
pub use sample::plan_sample_select;
pub use schemas::resolve_schemas;
pub use select::SelectPlan;
pub use watermark::{WatermarkDef, DEFAULT_DELAY as DEFAULT_OUT_OF_ORDERNESS};
