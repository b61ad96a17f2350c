//! The Arroyo-shaped connector SPI (SPEC 2.2). Names and method splits mirror Arroyo's
//! `arroyo-operator` / `arroyo-rpc` so that a connector ports by changing imports.
//!
//! It builds without Timely, DataFusion or sqlparser (SPEC 3, issue 46): what the runtime
//! and the plan do for a source subtask sits behind [`SourceOutput`] and [`RowChecker`],
//! which they implement. Decoding payloads is the formats crate's
//! (`pubsub-engine-format`), which the source collector uses.

pub mod alignment;
mod connector;
mod context;
pub mod dedup;
mod error;
mod metrics;
mod operator;
mod options;
mod output;

pub use connector::*;
pub use context::*;
pub use error::*;
pub use metrics::*;
pub use operator::*;
pub use options::*;
pub use output::*;
// The shared types appear in every signature of the SPI (columns, barriers, watermarks,
// task identity): re-exported so that a connector names the SPI with one crate.
pub use pubsub_engine_types::*;
