//! The engine side of pubsub-connector: an Arroyo-shaped connector SPI ([`spi`]),
//! row formats ([`format`]), the SQL front end ([`sql`]), a pipeline graph built in Rust
//! ([`graph`], the same plans without SQL) and a Timely Dataflow runtime with checkpoint
//! epochs, state snapshots and two-phase commit ([`runtime`]).
//!
//! This crate knows nothing of Pub/Sub (SPEC section 3).

pub mod dedup;
pub mod duration;
pub mod format;
pub mod graph;
pub mod record_id;
pub mod redact;
pub mod runtime;
pub mod spi;
pub mod sql;
#[cfg(test)]
mod test_mem;

pub use graph::{GraphError, GraphTable, PipelineGraph};
pub use redact::redact_url;
pub use runtime::{run_pipeline, JobSummary, RuntimeConfig, StopHandle};
pub use spi::*;
pub use sql::PlannedPipeline;
