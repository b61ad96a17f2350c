//! Row formats: message payloads to Arrow rows (sources) and rows to payloads (sinks).

mod de;
mod ser;

pub use de::{DeserializeError, Deserializer, FieldValue};
pub use ser::Serializer;
