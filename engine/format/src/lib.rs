//! Row formats: message payloads to Arrow rows (sources) and rows to payloads (sinks).
//!
//! The declared column type is a contract in both directions (SPEC 8): decoding refuses a
//! value that does not fit its column exactly, and encoding writes what decodes back to
//! the same value.

pub mod avro;
pub mod canonical;
mod column;
mod de;
mod json_str;
pub mod number;
mod object;
mod ser;
mod text;
mod timestamp;
mod value;

#[cfg(test)]
mod tests;

pub use de::{DeserializeError, Deserializer, FieldValue};
pub use ser::Serializer;
pub use text::to_text;
pub use timestamp::{parse_rfc3339, RANGE as TIMESTAMP_RANGE};
