//! Pub/Sub Avro schemas (`format = 'avro'`, issue 18): messages decoded by the schema
//! revision each one names, rows encoded under the topic's revision, in `BINARY` or
//! `JSON` encoding. The codec is the `apache-avro` crate's; Avro's JSON encoding, which
//! the crate lacks, is read and written here.

mod decode;
mod encode;
mod json;
mod schema;
mod values;

#[cfg(test)]
mod tests;

pub(crate) use decode::decode_row;
pub use encode::AvroWriter;
pub use schema::{AvroEncoding, AvroField, AvroSchema};
