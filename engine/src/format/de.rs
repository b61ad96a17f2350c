//! Payload -> Arrow rows, with metadata columns appended per message.

use std::fmt;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;

use crate::spi::{FieldType, Format, MetadataField};

/// A metadata value supplied by a source for one message.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Null,
    String(String),
    /// Nanoseconds since the Unix epoch.
    TimestampNanos(i64),
    Int64(i64),
}

/// A message that could not be decoded. `message_index` is its position among the
/// messages buffered since the last flush (for errors found when the batch is built).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeserializeError {
    pub message_index: usize,
    pub reason: String,
}

impl fmt::Display for DeserializeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.reason)
    }
}

impl std::error::Error for DeserializeError {}

/// Rows one buffer may hold before it must be flushed. The JSON decoder sizes its
/// buffers by this, and rejects a message whose rows would cross it.
const MAX_ROWS: usize = 1 << 16;

enum MetaBuilder {
    Text(StringBuilder),
    Timestamp(TimestampNanosecondBuilder),
    Int64(Int64Builder),
}

/// Decodes payloads of one format into batches of the table's schema.
pub struct Deserializer {
    format: Format,
    schema: SchemaRef,
    /// Output position of each payload column and each metadata column.
    payload_columns: Vec<usize>,
    meta_columns: Vec<(usize, MetaBuilder)>,
    json: Option<arrow_json::reader::Decoder>,
    payload_schema: SchemaRef,
    raw: StringBuilder,
    /// Payloads buffered since the last flush, to find the culprit of a late error.
    messages: Vec<Bytes>,
    rows: usize,
}

impl Deserializer {
    /// `schema` is the full output schema; columns named in `metadata_fields` are filled
    /// from metadata, every other column from the payload. For `raw_string` the payload
    /// columns must be exactly one TEXT column named `value`.
    pub fn new(
        format: Format,
        schema: SchemaRef,
        metadata_fields: &[MetadataField],
    ) -> anyhow::Result<Self> {
        let mut payload_columns = Vec::new();
        let mut payload_fields: Vec<Field> = Vec::new();
        let mut meta_columns = Vec::new();
        for (i, field) in schema.fields().iter().enumerate() {
            match metadata_fields
                .iter()
                .find(|m| &m.field_name == field.name())
            {
                Some(m) => {
                    let b = match m.field_type {
                        FieldType::Text => MetaBuilder::Text(StringBuilder::new()),
                        FieldType::Timestamp => {
                            MetaBuilder::Timestamp(TimestampNanosecondBuilder::new())
                        }
                        FieldType::Bigint => MetaBuilder::Int64(Int64Builder::new()),
                        other => anyhow::bail!(
                            "metadata column '{}' cannot have type {}",
                            m.field_name,
                            other.sql_name()
                        ),
                    };
                    meta_columns.push((i, b));
                }
                None => {
                    payload_columns.push(i);
                    payload_fields.push(field.as_ref().clone().with_nullable(true));
                }
            }
        }
        let payload_schema = Arc::new(Schema::new(payload_fields));
        let json = match format {
            Format::Json => Some(
                arrow_json::ReaderBuilder::new(payload_schema.clone())
                    .with_batch_size(MAX_ROWS)
                    .build_decoder()?,
            ),
            Format::RawString => {
                let ok = payload_schema.fields().len() == 1
                    && payload_schema.field(0).name() == "value"
                    && payload_schema.field(0).data_type() == &DataType::Utf8;
                anyhow::ensure!(
                    ok,
                    "format 'raw_string' needs exactly one non-metadata column: value TEXT"
                );
                None
            }
            Format::RawBytes => anyhow::bail!("format 'raw_bytes' is not supported yet"),
        };
        Ok(Deserializer {
            format,
            schema,
            payload_columns,
            meta_columns,
            json,
            payload_schema,
            raw: StringBuilder::new(),
            messages: Vec::new(),
            rows: 0,
        })
    }

    pub fn buffered_rows(&self) -> usize {
        self.rows
    }

    pub fn buffered_messages(&self) -> usize {
        self.messages.len()
    }

    /// Decodes one payload; returns its row count. On error nothing of it is kept and the
    /// buffer stays usable.
    pub fn deserialize(
        &mut self,
        payload: &Bytes,
        metadata: &[FieldValue],
    ) -> Result<usize, DeserializeError> {
        let index = self.messages.len();
        let fail = |reason: String| DeserializeError {
            message_index: index,
            reason,
        };
        let rows = match self.format {
            Format::Json => {
                let decoder = self.json.as_mut().expect("json decoder");
                let before = decoder.len();
                let result = decoder.decode(payload);
                match result {
                    Ok(n) if n == payload.len() && !decoder.has_partial_record() => {
                        decoder.len() - before
                    }
                    Ok(_) => {
                        self.reset_json();
                        return Err(fail("payload is not complete JSON".to_string()));
                    }
                    Err(e) => {
                        self.reset_json();
                        return Err(fail(format!("payload is not valid JSON: {e}")));
                    }
                }
            }
            Format::RawString => match std::str::from_utf8(payload) {
                Ok(s) => {
                    self.raw.append_value(s);
                    1
                }
                Err(e) => return Err(fail(format!("payload is not UTF-8: {e}"))),
            },
            Format::RawBytes => return Err(fail("format 'raw_bytes' is not supported yet".into())),
        };
        for ((_, b), v) in self.meta_columns.iter_mut().zip(metadata) {
            for _ in 0..rows {
                match (&mut *b, v) {
                    (MetaBuilder::Text(b), FieldValue::String(s)) => b.append_value(s),
                    (MetaBuilder::Timestamp(b), FieldValue::TimestampNanos(t)) => {
                        b.append_value(*t)
                    }
                    (MetaBuilder::Int64(b), FieldValue::Int64(t)) => b.append_value(*t),
                    (MetaBuilder::Text(b), _) => b.append_null(),
                    (MetaBuilder::Timestamp(b), _) => b.append_null(),
                    (MetaBuilder::Int64(b), _) => b.append_null(),
                }
            }
        }
        self.messages.push(payload.clone());
        self.rows += rows;
        Ok(rows)
    }

    /// Builds the buffered rows into one batch (None if no rows). A type error found now
    /// is traced back to the first message that causes it on its own.
    pub fn flush(&mut self) -> Result<Option<RecordBatch>, DeserializeError> {
        let messages = std::mem::take(&mut self.messages);
        let rows = std::mem::replace(&mut self.rows, 0);
        let payload: Vec<ArrayRef> = match self.format {
            Format::Json => {
                let decoder = self.json.as_mut().expect("json decoder");
                match decoder.flush() {
                    Ok(Some(b)) => b.columns().to_vec(),
                    Ok(None) => {
                        self.take_meta();
                        return Ok(None);
                    }
                    Err(e) => {
                        self.reset_json();
                        self.take_meta();
                        let index = self.find_culprit(&messages).unwrap_or(0);
                        return Err(DeserializeError {
                            message_index: index,
                            reason: format!("payload does not match the table's columns: {e}"),
                        });
                    }
                }
            }
            Format::RawString | Format::RawBytes => vec![Arc::new(self.raw.finish()) as ArrayRef],
        };
        let meta = self.take_meta();
        if rows == 0 {
            return Ok(None);
        }
        let mut columns: Vec<Option<ArrayRef>> = vec![None; self.schema.fields().len()];
        for (pos, col) in self.payload_columns.iter().zip(payload) {
            columns[*pos] = Some(col);
        }
        for (pos, col) in meta {
            columns[pos] = Some(col);
        }
        let columns: Vec<ArrayRef> = columns
            .into_iter()
            .map(|c| c.expect("every column built"))
            .collect();
        RecordBatch::try_new(self.schema.clone(), columns)
            .map(Some)
            .map_err(|e| DeserializeError {
                message_index: 0,
                reason: format!("rows do not match the table's columns: {e}"),
            })
    }

    fn take_meta(&mut self) -> Vec<(usize, ArrayRef)> {
        self.meta_columns
            .iter_mut()
            .map(|(pos, b)| {
                let a: ArrayRef = match b {
                    MetaBuilder::Text(b) => Arc::new(b.finish()),
                    MetaBuilder::Timestamp(b) => Arc::new(b.finish()),
                    MetaBuilder::Int64(b) => Arc::new(b.finish()),
                };
                (*pos, a)
            })
            .collect()
    }

    fn reset_json(&mut self) {
        // A decoder that saw bad input may hold a partial row: start a fresh one.
        // Rows of earlier messages in this buffer are lost with it, so callers treat a
        // JSON error as fatal for the buffer (the job fails; nothing was acknowledged).
        self.json = arrow_json::ReaderBuilder::new(self.payload_schema.clone())
            .with_batch_size(MAX_ROWS)
            .build_decoder()
            .ok();
    }

    fn find_culprit(&self, messages: &[Bytes]) -> Option<usize> {
        messages.iter().position(|m| {
            let Ok(mut d) =
                arrow_json::ReaderBuilder::new(self.payload_schema.clone()).build_decoder()
            else {
                return false;
            };
            d.decode(m).is_err() || d.flush().is_err()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("mid", DataType::Utf8, false),
        ]))
    }

    fn meta() -> Vec<MetadataField> {
        vec![MetadataField {
            field_name: "mid".into(),
            key: "message-id".into(),
            field_type: FieldType::Text,
        }]
    }

    #[test]
    fn json_rows_with_metadata() {
        let mut d = Deserializer::new(Format::Json, schema(), &meta()).unwrap();
        let m = |s: &str| vec![FieldValue::String(s.to_string())];
        assert_eq!(
            d.deserialize(
                &Bytes::from_static(br#"{"id": 1, "name": "a", "extra": true}"#),
                &m("m1")
            )
            .unwrap(),
            1
        );
        assert_eq!(
            d.deserialize(&Bytes::from_static(br#"{"id": 2}{"id": 3}"#), &m("m2"))
                .unwrap(),
            2
        );
        let b = d.flush().unwrap().unwrap();
        assert_eq!(b.num_rows(), 3);
        assert_eq!(b.column(0).as_primitive::<Int64Type>().values(), &[1, 2, 3]);
        assert!(b.column(1).is_null(1));
        let mids = b.column(2).as_string::<i32>();
        assert_eq!(
            (mids.value(0), mids.value(1), mids.value(2)),
            ("m1", "m2", "m2")
        );
    }

    #[test]
    fn malformed_json_names_the_message() {
        let mut d = Deserializer::new(Format::Json, schema(), &meta()).unwrap();
        let m = vec![FieldValue::String("x".into())];
        d.deserialize(&Bytes::from_static(br#"{"id": 1}"#), &m)
            .unwrap();
        let e = d
            .deserialize(&Bytes::from_static(b"not json"), &m)
            .unwrap_err();
        assert_eq!(e.message_index, 1);
        let e = d
            .deserialize(&Bytes::from_static(br#"{"id": 1"#), &m)
            .unwrap_err();
        assert!(e.reason.contains("not complete"), "{e}");
    }

    #[test]
    fn type_mismatch_found_at_flush_names_the_message() {
        let mut d = Deserializer::new(Format::Json, schema(), &meta()).unwrap();
        let m = vec![FieldValue::String("x".into())];
        d.deserialize(&Bytes::from_static(br#"{"id": 1}"#), &m)
            .unwrap();
        d.deserialize(&Bytes::from_static(br#"{"id": "seven"}"#), &m)
            .unwrap();
        let e = d.flush().unwrap_err();
        assert_eq!(e.message_index, 1, "{e}");
    }

    #[test]
    fn raw_string() {
        let s = Arc::new(Schema::new(vec![Field::new("value", DataType::Utf8, true)]));
        let mut d = Deserializer::new(Format::RawString, s, &[]).unwrap();
        d.deserialize(&Bytes::from_static(b"hello"), &[]).unwrap();
        assert!(d
            .deserialize(&Bytes::from_static(&[0xff, 0xfe]), &[])
            .is_err());
        let b = d.flush().unwrap().unwrap();
        assert_eq!(b.column(0).as_string::<i32>().value(0), "hello");
    }
}
