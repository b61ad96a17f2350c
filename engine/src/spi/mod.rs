//! The Arroyo-shaped connector SPI (SPEC 2.2). Names and method splits mirror Arroyo's
//! `arroyo-operator` / `arroyo-rpc` so that a connector ports by changing imports.

mod connector;
mod context;
mod error;
mod metrics;
mod operator;
mod options;
mod types;

pub use connector::*;
pub use context::*;
pub use error::*;
pub use metrics::*;
pub use operator::*;
pub use options::*;
pub use types::*;
