//! The types every engine crate shares (SPEC 2.2, 3): a table's columns and their SQL
//! types, payload formats, the operator protocol (barriers, control messages, watermarks,
//! task identity), durations and data sizes in option values, stable record ids and the
//! redaction of URLs in messages. Plain data: no runtime, no SQL, no formats.

pub mod changelog;
pub mod duration;
pub mod record_id;
pub mod redact;
mod types;

pub use redact::redact_url;
pub use types::*;
