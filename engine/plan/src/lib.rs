//! The plan a pipeline compiles to, and what runs it without Timely (issue 46): each
//! query's SELECT as DataFusion physical expressions evaluated on Arrow batches with
//! exact casts and checked dates and times ([`SelectPlan`], SPEC 8), the row checks a
//! source runs before it emits, and the window state that folds rows into DataFusion
//! accumulators ([`window`]).
//!
//! The SQL front end (`pubsub-engine-sql`) builds these; the runtime
//! (`pubsub-engine-runtime`) runs them. This crate uses DataFusion's expressions and
//! accumulators, never its SQL planner.

mod calendar;
pub mod changelog;
mod check;
pub mod coercion;
mod dedup;
pub mod eval;
mod exact_cast;
pub mod join;
mod join_rows;
pub mod json;
mod number_text;
mod pipeline;
mod row_local;
mod select;
pub mod temporal;
mod temporal_fns;
pub mod type_words;
pub mod unnest;
pub mod window;

pub use check::{reject_failing, QueryChecks, RowCheck};
pub use dedup::{dedup_columns, DedupColumns};
pub use eval::RowFailure;
pub use exact_cast::into_sink_column;
pub use join::{JoinKind, JoinPlan, JoinSide, JoinState};
pub use pipeline::{ChangelogOptions, PlannedPipeline, PlannedQuery, PlannedTable};
pub use select::SelectPlan;
pub use window::{WindowKind, WindowPlan};
