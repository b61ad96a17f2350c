//! Payload -> Arrow rows, with metadata columns appended per message.
//!
//! The declared type is a contract: a value that does not fit its column exactly is a
//! decode failure of its message, never a rounded, truncated, wrapped or NULL value.
//! `deserialize` does all validation; once it returned `Ok`, `flush` cannot fail for data
//! reasons, so a source can apply its failure policy per message.

use std::fmt;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use bytes::Bytes;

use super::avro::{AvroEncoding, AvroSchema};
use super::column::Column;
use super::object::ObjectDecoder;
use super::value::ColumnSpec;
use pubsub_engine_types::{ConnectionSchema, FieldType, Format};

/// A metadata value supplied by a source for one message.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Null,
    /// For TEXT and JSON columns (JSON: canonical JSON text, e.g. the attribute map).
    String(String),
    /// Nanoseconds since the Unix epoch.
    TimestampNanos(i64),
    Int64(i64),
    /// For a TEXT column: each row of the message gets this string, `#` and the row's
    /// position among the message's rows (from 0): the record key of
    /// [`pubsub_engine_types::record_id`].
    RowKey(String),
}

/// A message that could not be decoded. `message_index` is the message's own position
/// among the messages buffered since the last flush (the index it would have had).
/// `reason` names the column, the JSON key and the offending value, e.g.
/// `column 'price' (BIGINT): 100.01 is not an integer`.
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

/// A metadata column: filled from the `FieldValue` a source passes for `key`.
struct MetaColumn {
    name: String,
    key: String,
    ty: FieldType,
    required: bool,
    out: usize,
}

/// Decodes payloads of one table into batches of its Arrow schema
/// (`ConnectionSchema::arrow_schema()`).
pub struct Deserializer {
    format: Format,
    schema: SchemaRef,
    /// One buffer per output column, in schema order.
    columns: Vec<Column>,
    /// `json`: the payload columns; raw formats: the `value` column's position;
    /// `debezium_json`: the payload columns of the new row (`after`).
    json: Option<ObjectDecoder>,
    /// `debezium_json`: the payload columns of the old row (`before`), and the position
    /// of the operation column.
    changelog: Option<(ObjectDecoder, usize)>,
    /// `avro`: the payload columns, matched to schema fields by name.
    avro: Vec<ColumnSpec>,
    raw_out: usize,
    meta: Vec<MetaColumn>,
    messages: usize,
    rows: usize,
    /// The first row of each buffered message (a message of 0 rows shares its start).
    starts: Vec<usize>,
    /// The event-time column (`ConnectionSchema::event_time`): its position and name.
    event_time: Option<(usize, String)>,
    /// The greatest event time of the last message decoded (ns), if it had rows.
    last_event_ns: Option<i64>,
}

impl Deserializer {
    /// A decoder for table `schema`: its `format`, `timestamp_format` and columns. Columns
    /// with a `metadata_key` are filled from the metadata values passed to `deserialize`
    /// (one per metadata column, in declared order; allowed types TEXT, JSON, TIMESTAMP,
    /// BIGINT); every other column from the payload. `raw_string` needs exactly one
    /// payload column `value TEXT`, `raw_bytes` exactly one `value BYTEA`.
    ///
    /// Errors if the columns do not suit the format.
    pub fn new(schema: &ConnectionSchema) -> anyhow::Result<Self> {
        let mut payload = Vec::new();
        let mut meta = Vec::new();
        for (out, f) in schema.fields.iter().enumerate() {
            match &f.metadata_key {
                Some(key) => {
                    anyhow::ensure!(
                        matches!(
                            f.field_type,
                            FieldType::Text
                                | FieldType::Json
                                | FieldType::Timestamp
                                | FieldType::Bigint
                        ),
                        "metadata column '{}' cannot have type {}",
                        f.name,
                        f.field_type.sql_name()
                    );
                    meta.push(MetaColumn {
                        name: f.name.clone(),
                        key: key.clone(),
                        ty: f.field_type,
                        required: f.required,
                        out,
                    });
                }
                None => payload.push(ColumnSpec {
                    name: f.name.clone(),
                    ty: f.field_type,
                    required: f.required,
                    out,
                }),
            }
        }
        let raw_column = |ty: FieldType, format: &str| -> anyhow::Result<usize> {
            match payload.as_slice() {
                [c] if c.name == "value" && c.ty == ty => Ok(c.out),
                _ => anyhow::bail!(
                    "{format} needs exactly one non-metadata column: value {}",
                    ty.sql_name()
                ),
            }
        };
        let width = schema.fields.len();
        let (json, raw_out) = match schema.format {
            Format::Json | Format::DebeziumJson => (
                Some(ObjectDecoder::new(payload.clone(), schema.timestamp_format)),
                0,
            ),
            Format::RawString => (None, raw_column(FieldType::Text, "format 'raw_string'")?),
            Format::RawBytes => (None, raw_column(FieldType::Bytea, "format 'raw_bytes'")?),
            Format::JsonUnstructured => (
                None,
                raw_column(FieldType::Json, "'json.unstructured' = 'true'")?,
            ),
            Format::Avro => (None, 0),
        };
        // A changelog's rows: every column as the new row, then as the old row, then the
        // operation (`ConnectionSchema::rows_schema`).
        let changelog = (schema.format == Format::DebeziumJson).then(|| {
            let before = payload
                .iter()
                .map(|c| ColumnSpec {
                    out: c.out + width,
                    ..c.clone()
                })
                .collect();
            (
                ObjectDecoder::new(before, schema.timestamp_format),
                2 * width,
            )
        });
        let avro = match schema.format {
            Format::Avro => payload,
            _ => Vec::new(),
        };
        let event_time = match &schema.event_time {
            None => None,
            Some(e) => {
                let at = schema
                    .fields
                    .iter()
                    .position(|f| f.name == e.column && f.field_type == FieldType::Timestamp)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "the event-time column '{}' is not a TIMESTAMP column of the table",
                            e.column
                        )
                    })?;
                Some((at, e.column.clone()))
            }
        };
        let rows_schema = schema.rows_schema();
        let mut columns: Vec<Column> = schema
            .fields
            .iter()
            .map(|f| Column::new(f.field_type))
            .collect();
        if changelog.is_some() {
            columns.extend(schema.fields.iter().map(|f| Column::new(f.field_type)));
            columns.push(Column::new(FieldType::Text));
        }
        Ok(Deserializer {
            format: schema.format,
            schema: rows_schema,
            columns,
            json,
            changelog,
            avro,
            raw_out,
            meta,
            messages: 0,
            rows: 0,
            starts: Vec::new(),
            event_time,
            last_event_ns: None,
        })
    }

    /// Rows buffered since the last flush.
    pub fn buffered_rows(&self) -> usize {
        self.rows
    }

    /// Messages buffered since the last flush.
    pub fn buffered_messages(&self) -> usize {
        self.messages
    }

    /// The first buffered row of each buffered message, in message order (a message that
    /// yielded no rows has the start of the next one).
    pub fn message_starts(&self) -> &[usize] {
        &self.starts
    }

    /// Decodes one message into the buffer and returns its row count (at least 1):
    /// `json` one row per whitespace-separated top-level object, `raw_string`/`raw_bytes`
    /// one row. `metadata` holds one value per metadata column, in declared order; each
    /// of the message's rows gets them.
    ///
    /// Errors (with `message_index` = this message's index) if any value does not fit its
    /// column; then nothing of this message is buffered and the buffer stays usable.
    pub fn deserialize(
        &mut self,
        payload: &Bytes,
        metadata: &[FieldValue],
    ) -> Result<usize, DeserializeError> {
        self.deserialize_with(payload, None, metadata)
    }

    /// Like [`deserialize`](Self::deserialize), for format `avro`: `payload` was written
    /// with schema revision `writer` in `encoding`, and yields one row. A column with no
    /// field in the revision is NULL (refused if NOT NULL); fields no column names are
    /// skipped; a value is taken only if it fits its column exactly.
    pub fn deserialize_avro(
        &mut self,
        payload: &Bytes,
        writer: &AvroSchema,
        encoding: AvroEncoding,
        metadata: &[FieldValue],
    ) -> Result<usize, DeserializeError> {
        self.deserialize_with(payload, Some((writer, encoding)), metadata)
    }

    fn deserialize_with(
        &mut self,
        payload: &Bytes,
        writer: Option<(&AvroSchema, AvroEncoding)>,
        metadata: &[FieldValue],
    ) -> Result<usize, DeserializeError> {
        let mark = self.rows;
        self.last_event_ns = None;
        match self
            .decode(payload, writer, metadata)
            .and_then(|rows| self.event_time_of(mark).map(|_| rows))
        {
            Ok(rows) => {
                self.messages += 1;
                self.starts.push(self.rows);
                self.rows += rows;
                Ok(rows)
            }
            Err(reason) => {
                self.columns.iter_mut().for_each(|c| c.truncate(mark));
                Err(DeserializeError {
                    message_index: self.messages,
                    reason,
                })
            }
        }
    }

    fn decode(
        &mut self,
        payload: &Bytes,
        writer: Option<(&AvroSchema, AvroEncoding)>,
        metadata: &[FieldValue],
    ) -> Result<usize, String> {
        if metadata.len() != self.meta.len() {
            return Err(format!(
                "the source passed {} metadata values for {} metadata columns",
                metadata.len(),
                self.meta.len()
            ));
        }
        // SIMD check first (decision 0049); std's only for its error, which names where.
        let utf8 = || match simdutf8::basic::from_utf8(payload) {
            Ok(s) => Ok(s),
            Err(_) => {
                std::str::from_utf8(payload).map_err(|e| format!("payload is not UTF-8: {e}"))
            }
        };
        let rows = match self.format {
            Format::Json => {
                let d = self.json.as_mut().expect("json decoder");
                d.decode_payload(utf8()?, &mut self.columns)?
            }
            Format::RawString => {
                self.columns[self.raw_out].push_str(utf8()?)?;
                1
            }
            Format::RawBytes => {
                self.columns[self.raw_out].push_bytes(payload)?;
                1
            }
            Format::JsonUnstructured => {
                let text = utf8()?;
                let raw: &serde_json::value::RawValue =
                    serde_json::from_str(text).map_err(|e| format!("payload is not JSON: {e}"))?;
                let mut canonical = Vec::with_capacity(text.len());
                super::canonical::canonicalize(raw.get(), &mut canonical)?;
                let canonical = std::str::from_utf8(&canonical).expect("canonical JSON is UTF-8");
                self.columns[self.raw_out].push_str(canonical)?;
                1
            }
            Format::Avro => {
                let (w, encoding) = writer.ok_or_else(|| {
                    "format 'avro' decodes a message only with the schema revision it names"
                        .to_string()
                })?;
                super::avro::decode_row(payload, w, encoding, &self.avro, &mut self.columns)?;
                1
            }
            Format::DebeziumJson => self.decode_change(utf8()?)?,
        };
        // A change's old row carries its message's metadata too.
        let (images, width) = match &self.changelog {
            Some((_, op)) => (2, op / 2),
            None => (1, 0),
        };
        for (m, v) in self.meta.iter().zip(metadata) {
            for image in 0..images {
                let col = &mut self.columns[m.out + image * width];
                for row in 0..rows {
                    match (m.ty, v) {
                        (_, FieldValue::Null) if m.required => {
                            return Err(format!(
                                "metadata column '{}' ({}) is NOT NULL but the message has no '{}'",
                                m.name,
                                m.ty.sql_name(),
                                m.key
                            ))
                        }
                        (_, FieldValue::Null) => col.push_null(),
                        (FieldType::Text | FieldType::Json, FieldValue::String(s)) => {
                            col.push_str(s)?
                        }
                        (FieldType::Text, FieldValue::RowKey(key)) => {
                            col.push_str(&pubsub_engine_types::record_id::row_key(key, row))?
                        }
                        (FieldType::Timestamp, FieldValue::TimestampNanos(t)) => col.push_i64(*t),
                        (FieldType::Bigint, FieldValue::Int64(t)) => col.push_i64(*t),
                        (ty, v) => {
                            return Err(format!(
                                "metadata column '{}' ({}) cannot hold {v:?} from '{}'",
                                m.name,
                                ty.sql_name(),
                                m.key
                            ))
                        }
                    }
                }
            }
        }
        Ok(rows)
    }

    /// One Debezium change event (`{"before", "after", "op"}`, or that object as the
    /// `payload` of Kafka Connect's schema envelope) into one row (a tombstone, an empty
    /// or `null` payload, into none): `c` and `r` (a
    /// snapshot read, written as `c`) need `after`, `d` needs `before`, `u` both; the
    /// other image must be null or absent. Each image is decoded as a JSON row of the
    /// table's columns.
    fn decode_change(&mut self, text: &str) -> Result<usize, String> {
        use pubsub_engine_types::changelog::{CREATE, DELETE, READ, UPDATE};
        #[derive(serde::Deserialize)]
        struct Change<'a> {
            #[serde(borrow, default)]
            before: Option<&'a serde_json::value::RawValue>,
            #[serde(borrow, default)]
            after: Option<&'a serde_json::value::RawValue>,
            #[serde(default)]
            op: Option<String>,
            #[serde(borrow, default)]
            payload: Option<&'a serde_json::value::RawValue>,
        }
        fn parse(t: &str) -> Result<Change<'_>, String> {
            serde_json::from_str(t).map_err(|e| {
                format!("payload is not a Debezium change event (an object with before, after and op): {e}")
            })
        }
        // Debezium's tombstone after a delete (`tombstones.on.delete`, for Kafka's log
        // compaction): no change, no row.
        if matches!(text.trim(), "" | "null") {
            return Ok(0);
        }
        if !text.trim_start().starts_with('{') {
            return Err(
                "payload is not a Debezium change event (a JSON object with before, after and op)"
                    .into(),
            );
        }
        let mut change = parse(text)?;
        if change.op.is_none() {
            if let Some(p) = change.payload {
                change = parse(p.get())?;
            }
        }
        let null = |v: Option<&serde_json::value::RawValue>| v.is_none_or(|v| v.get() == "null");
        let op = change
            .op
            .as_deref()
            .ok_or_else(|| "the change event has no 'op' (c, r, u or d)".to_string())?;
        let (needs_before, needs_after, written) = match op {
            CREATE | READ => (false, true, CREATE),
            UPDATE => (true, true, UPDATE),
            DELETE => (true, false, DELETE),
            other => {
                return Err(format!(
                    "the change event's op is {}: only c, r, u and d change rows (a truncate 't' or message 'm' has no row to apply)",
                    serde_json::Value::String(other.to_string())
                ))
            }
        };
        for (name, image, needed) in [
            ("before", change.before, needs_before),
            ("after", change.after, needs_after),
        ] {
            match (needed, null(image)) {
                (true, true) => {
                    return Err(format!(
                        "the change event (op '{op}') has no '{name}' row{}",
                        if name == "before" {
                            ": the source database must log whole old rows (PostgreSQL: REPLICA IDENTITY FULL; MySQL: binlog_row_image=FULL)"
                        } else {
                            ""
                        }
                    ))
                }
                (false, false) => {
                    return Err(format!(
                        "the change event (op '{op}') has a '{name}' row, which op '{op}' does not have"
                    ))
                }
                _ => {}
            }
        }
        let (before, at) = self.changelog.as_mut().expect("a changelog decoder");
        let op_at = *at;
        let decode = |d: &mut ObjectDecoder,
                      image: Option<&serde_json::value::RawValue>,
                      name: &str,
                      bufs: &mut [Column]|
         -> Result<(), String> {
            match image.filter(|v| v.get() != "null") {
                None => {
                    d.cols.iter().for_each(|c| bufs[c.out].push_null());
                    Ok(())
                }
                Some(v) => d
                    .decode_payload(v.get(), bufs)
                    .and_then(|rows| match rows {
                        1 => Ok(()),
                        _ => Err("not one object".to_string()),
                    })
                    .map_err(|e| format!("'{name}': {e}")),
            }
        };
        decode(before, change.before, "before", &mut self.columns)?;
        let after = self.json.as_mut().expect("the after decoder");
        decode(after, change.after, "after", &mut self.columns)?;
        self.columns[op_at].push_str(written)?;
        Ok(1)
    }

    /// The greatest event time (ns) of the last message decoded without error, from the
    /// table's event-time column; `None` without one, or when the message had no rows.
    pub fn last_event_time(&self) -> Option<i64> {
        self.last_event_ns
    }

    /// Reads the event time of the rows from `mark` on into `last_event_ns`. A NULL is a
    /// failure of the message (issue 32, item 1: never a default).
    fn event_time_of(&mut self, mark: usize) -> Result<(), String> {
        let Some((at, name)) = &self.event_time else {
            return Ok(());
        };
        match self.columns[*at].max_nanos_from(mark) {
            Ok(t) => {
                self.last_event_ns = t;
                Ok(())
            }
            Err(row) => Err(format!(
                "the event-time column '{name}' is NULL (row {} of the message): a row needs an event time",
                row + 1
            )),
        }
    }

    /// Builds the buffered rows into one batch of the table's schema (None if no rows) and
    /// empties the buffer. Cannot fail for data reasons (every value was validated by
    /// `deserialize`); an error here is an internal inconsistency.
    pub fn flush(&mut self) -> Result<Option<RecordBatch>, DeserializeError> {
        let rows = std::mem::replace(&mut self.rows, 0);
        self.messages = 0;
        self.starts.clear();
        let columns: Vec<ArrayRef> = self.columns.iter_mut().map(|c| c.finish()).collect();
        if rows == 0 {
            return Ok(None);
        }
        RecordBatch::try_new(self.schema.clone(), columns)
            .map(Some)
            .map_err(|e| DeserializeError {
                message_index: 0,
                reason: format!("internal error: decoded rows do not form a batch: {e}"),
            })
    }
}
