//! The Google Cloud Pub/Sub connector: a StreamingPull source that acknowledges a message
//! only after the checkpoint covering it completes (SPEC 5), and a sink that publishes
//! rows and awaits every publish at each checkpoint (SPEC 6).

pub mod admin;
pub mod avro;
pub mod avro_columns;
pub mod build_error;
pub mod client;
mod connector;
pub mod credentials;
pub mod dead_letter;
pub mod diagnose;
pub mod explore;
pub mod sink;
pub mod source;

pub use connector::{sql_error, PubSubConnector, METADATA_DEFS};
