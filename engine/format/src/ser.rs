//! Arrow rows -> one payload per row, written so that the source's decoder reads back
//! exactly the same values.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    Float32Type, Float64Type, Int32Type, Int64Type, TimestampNanosecondType, UInt32Type, UInt64Type,
};
use base64::Engine as _;

use std::sync::Arc;

use super::avro::{AvroEncoding, AvroSchema, AvroWriter};
use super::canonical::canonicalize;
use super::timestamp::{epoch_unit, format_name, to_epoch, write_rfc3339};
use pubsub_engine_types::{ConnectionSchema, FieldType, Format, TimestampFormat};

/// A payload column of the sink table.
struct OutColumn {
    name: String,
    ty: FieldType,
    /// `"name":`, escaped once.
    key: Vec<u8>,
}

/// Encodes each row of a batch as one message payload, by the sink table's declared
/// schema (format, `json.timestamp-format`, columns). Metadata columns are not part of
/// the payload.
pub struct Serializer {
    format: Format,
    tf: TimestampFormat,
    columns: Vec<OutColumn>,
    /// Why the table cannot be written in its format; reported by every `serialize`.
    unusable: Option<String>,
    /// `avro`: the writer under the topic's schema revision ([`Serializer::avro`]).
    avro: Option<AvroWriter>,
}

impl Serializer {
    /// An encoder for the sink table `schema`. A schema that does not suit its format
    /// (`raw_string` without exactly one payload column `value TEXT`, `raw_bytes` without
    /// `value BYTEA`) makes every `serialize` call fail with the reason.
    pub fn new(schema: &ConnectionSchema) -> Self {
        let columns: Vec<OutColumn> = schema
            .fields
            .iter()
            .filter(|f| f.metadata_key.is_none())
            .map(|f| OutColumn {
                name: f.name.clone(),
                ty: f.field_type,
                key: format!("{}:", serde_json::Value::from(f.name.as_str())).into_bytes(),
            })
            .collect();
        let needs = |ty: FieldType, format: &str| match columns.as_slice() {
            [c] if c.name == "value" && c.ty == ty => None,
            _ => Some(format!(
                "{format} needs exactly one non-metadata column: value {}",
                ty.sql_name()
            )),
        };
        let unusable = match schema.format {
            Format::Json | Format::DebeziumJson => None,
            Format::RawString => needs(FieldType::Text, "format 'raw_string'"),
            Format::RawBytes => needs(FieldType::Bytea, "format 'raw_bytes'"),
            Format::JsonUnstructured => needs(FieldType::Json, "'json.unstructured' = 'true'"),
            Format::Avro => Some(
                "format 'avro' writes only under the topic's schema revision, which was not read"
                    .to_string(),
            ),
        };
        Serializer {
            format: schema.format,
            tf: schema.timestamp_format,
            columns,
            unusable,
            avro: None,
        }
    }

    /// An encoder for the sink table `schema` (format `avro`) into a topic whose schema
    /// revision is `writer`, in `encoding`. Errors, naming the column and the schema field,
    /// if the payload columns cannot be written under it (see [`AvroWriter::new`]).
    pub fn avro(
        schema: &ConnectionSchema,
        writer: Arc<AvroSchema>,
        encoding: AvroEncoding,
    ) -> Result<Self, String> {
        let mut s = Serializer::new(schema);
        let columns: Vec<(String, FieldType)> =
            s.columns.iter().map(|c| (c.name.clone(), c.ty)).collect();
        s.avro = Some(AvroWriter::new(writer, encoding, &columns)?);
        s.unusable = None;
        Ok(s)
    }

    /// One payload per row, in row order.
    ///
    /// - `json`: one object per row with every payload column, NULL columns omitted;
    ///   BIGINT/INT and their UNSIGNED forms as numbers; DOUBLE/FLOAT as numbers, NaN and ±infinity as the strings
    ///   `"NaN"`, `"Infinity"`, `"-Infinity"`; TIMESTAMP per `json.timestamp-format`
    ///   (`rfc3339`: UTC ending in `Z` with 0, 3, 6 or 9 fractional digits, the fewest that
    ///   are exact; `epoch-*`: an integer in that unit); BYTEA as standard padded base64;
    ///   JSON columns as nested JSON in canonical form.
    /// - `raw_string` / `raw_bytes`: the `value` column's text / bytes.
    ///
    /// Errors naming the row (`row N of the batch ...`) if a row cannot be written
    /// exactly: an empty raw payload (Pub/Sub rejects a message without data), a JSON
    /// column holding invalid JSON, or a TIMESTAMP an `epoch-*` unit would truncate. Also
    /// errors if the batch lacks a declared column or has it with another type.
    pub fn serialize(&self, batch: &RecordBatch) -> anyhow::Result<Vec<Vec<u8>>> {
        self.serialize_rows(batch)?
            .into_iter()
            .enumerate()
            .map(|(row, r)| match r {
                Ok(p) if p.is_empty() => Err(anyhow::anyhow!(
                    "row {row} of the batch would be an empty message (Pub/Sub rejects a message without data or attributes)"
                )),
                Ok(p) => Ok(p),
                Err(e) => Err(anyhow::anyhow!("row {row} of the batch: {e}")),
            })
            .collect()
    }

    /// One result per row, in row order, so a sink can route the rows it cannot write
    /// and publish the rest. A row's error says why (`column 'c' (TIMESTAMP): ...`); a
    /// NULL or empty raw `value` is an empty payload (`Ok` of no bytes: whether the
    /// message is empty depends on its attributes). The outer error is the batch's: the
    /// table cannot be written in its format, or a declared column is missing or has
    /// another type.
    pub fn serialize_rows(
        &self,
        batch: &RecordBatch,
    ) -> anyhow::Result<Vec<Result<Vec<u8>, String>>> {
        if let Some(e) = &self.unusable {
            anyhow::bail!("{e}");
        }
        let arrays = self
            .columns
            .iter()
            .map(|c| {
                let a = batch.column_by_name(&c.name).ok_or_else(|| {
                    anyhow::anyhow!("the rows have no column '{}' to write", c.name)
                })?;
                anyhow::ensure!(
                    // Lists compare without their element field's name.
                    a.data_type().equals_datatype(&c.ty.arrow_type()),
                    "column '{}' ({}) arrives as Arrow {}, expected {}",
                    c.name,
                    c.ty.sql_name(),
                    a.data_type(),
                    c.ty.arrow_type()
                );
                Ok(a)
            })
            .collect::<anyhow::Result<Vec<&ArrayRef>>>()?;
        Ok(match self.format {
            Format::Avro => {
                let w = self.avro.as_ref().expect("unusable without a writer");
                (0..batch.num_rows())
                    .map(|row| w.encode_row(&arrays, row))
                    .collect()
            }
            Format::RawString => {
                let s = arrays[0].as_string::<i32>();
                (0..s.len())
                    .map(|i| {
                        Ok(if s.is_valid(i) {
                            s.value(i).as_bytes().to_vec()
                        } else {
                            Vec::new()
                        })
                    })
                    .collect()
            }
            Format::JsonUnstructured => {
                // The `value` column as a JSON column's value is written, as the payload.
                let mut scratch = String::new();
                (0..batch.num_rows())
                    .map(|row| {
                        let mut out = Vec::new();
                        if arrays[0].is_valid(row) {
                            self.write_value(
                                arrays[0],
                                row,
                                FieldType::Json,
                                &mut out,
                                &mut scratch,
                            )
                            .map_err(|e| format!("column 'value' (JSON): {e}"))?;
                        }
                        Ok(out)
                    })
                    .collect()
            }
            Format::RawBytes => {
                let b = arrays[0].as_binary::<i32>();
                (0..b.len())
                    .map(|i| {
                        Ok(if b.is_valid(i) {
                            b.value(i).to_vec()
                        } else {
                            Vec::new()
                        })
                    })
                    .collect()
            }
            Format::Json => {
                let mut scratch = String::new();
                (0..batch.num_rows())
                    .map(|row| {
                        let mut out = Vec::with_capacity(self.json_room(&arrays, row));
                        self.write_object(&arrays, row, &mut out, &mut scratch)?;
                        Ok(out)
                    })
                    .collect()
            }
            Format::DebeziumJson => self.changes(batch, &arrays)?,
        })
    }

    /// `format = 'debezium_json'`: one `{"before":..,"after":..,"op":..}` per row of a
    /// changelog batch (see [`pubsub_engine_types::changelog`]). Errors (the batch's): an
    /// old-row column missing or of another type, an operation other than c, u, d.
    fn changes(
        &self,
        batch: &RecordBatch,
        after: &[&ArrayRef],
    ) -> anyhow::Result<Vec<Result<Vec<u8>, String>>> {
        use pubsub_engine_types::changelog::{before_column, CREATE, DELETE, OP_COLUMN, UPDATE};
        let ops = match batch.column_by_name(OP_COLUMN) {
            None => None,
            Some(a) => Some(a.as_string_opt::<i32>().ok_or_else(|| {
                anyhow::anyhow!(
                    "column '{OP_COLUMN}' arrives as Arrow {}, expected Utf8",
                    a.data_type()
                )
            })?),
        };
        let before = match ops {
            None => Vec::new(),
            Some(_) => self
                .columns
                .iter()
                .map(|c| {
                    let name = before_column(&c.name);
                    let a = batch.column_by_name(&name).ok_or_else(|| {
                        anyhow::anyhow!("the changes have no column '{name}' (the old row)")
                    })?;
                    anyhow::ensure!(
                        a.data_type() == &c.ty.arrow_type(),
                        "column '{name}' ({}) arrives as Arrow {}, expected {}",
                        c.ty.sql_name(),
                        a.data_type(),
                        c.ty.arrow_type()
                    );
                    Ok(a)
                })
                .collect::<anyhow::Result<Vec<&ArrayRef>>>()?,
        };
        let mut scratch = String::new();
        (0..batch.num_rows())
            .map(|row| {
                let op = match ops {
                    None => CREATE,
                    Some(o) if o.is_valid(row) => o.value(row),
                    Some(_) => anyhow::bail!("row {row} of the changes has no operation"),
                };
                let (old, new) = match op {
                    CREATE => (false, true),
                    UPDATE => (true, true),
                    DELETE => (true, false),
                    other => anyhow::bail!(
                        "row {row} of the changes has operation '{other}': expected c, u or d"
                    ),
                };
                let mut out = Vec::with_capacity(
                    32 + self.json_room(after, row)
                        + if old { self.json_room(&before, row) } else { 0 },
                );
                let mut write = || -> Result<(), String> {
                    out.extend_from_slice(b"{\"before\":");
                    if old {
                        self.write_object(&before, row, &mut out, &mut scratch)
                            .map_err(|e| format!("before: {e}"))?;
                    } else {
                        out.extend_from_slice(b"null");
                    }
                    out.extend_from_slice(b",\"after\":");
                    if new {
                        self.write_object(after, row, &mut out, &mut scratch)?;
                    } else {
                        out.extend_from_slice(b"null");
                    }
                    out.extend_from_slice(b",\"op\":\"");
                    out.extend_from_slice(op.as_bytes());
                    out.extend_from_slice(b"\"}");
                    Ok(())
                };
                Ok(write().map(|()| out))
            })
            .collect()
    }

    /// Writes row `row` of `arrays` (one per payload column) as a JSON object, NULL
    /// columns omitted. Errors name the column.
    fn write_object(
        &self,
        arrays: &[&ArrayRef],
        row: usize,
        out: &mut Vec<u8>,
        scratch: &mut String,
    ) -> Result<(), String> {
        let start = out.len();
        out.push(b'{');
        for (c, a) in self.columns.iter().zip(arrays) {
            if a.is_null(row) {
                continue;
            }
            if out.len() > start + 1 {
                out.push(b',');
            }
            out.extend_from_slice(&c.key);
            self.write_value(a, row, c.ty, out, scratch)
                .map_err(|e| format!("column '{}' ({}): {e}", c.name, c.ty.sql_name()))?;
        }
        out.push(b'}');
        Ok(())
    }

    /// Bytes to reserve for row `row` as JSON: enough for its text unless a string needs
    /// escapes, so that the payload is allocated once (a 1 KiB TEXT value regrew it from
    /// 130 bytes twice; decision 0049).
    fn json_room(&self, arrays: &[&ArrayRef], row: usize) -> usize {
        let mut room = 2;
        for (c, a) in self.columns.iter().zip(arrays) {
            room += c.key.len()
                + 1
                + match c.ty {
                    // Quotes, and a few escapes without regrowing.
                    FieldType::Text | FieldType::Json => a.as_string::<i32>().value(row).len() + 8,
                    FieldType::Bytea => a.as_binary::<i32>().value(row).len().div_ceil(3) * 4 + 2,
                    // Up to -9223372036854775808, an RFC 3339 text with nanoseconds and
                    // quotes (32), or the shortest round-trip double (24).
                    _ => 32,
                };
        }
        room
    }

    /// Writes the non-null value `a[row]` of SQL type `ty` as JSON.
    fn write_value(
        &self,
        a: &ArrayRef,
        row: usize,
        ty: FieldType,
        out: &mut Vec<u8>,
        scratch: &mut String,
    ) -> Result<(), String> {
        match ty {
            FieldType::Text => {
                super::json_str::write_json_str(a.as_string::<i32>().value(row), out);
            }
            FieldType::Json => {
                let text = a.as_string::<i32>().value(row);
                let raw: &serde_json::value::RawValue = serde_json::from_str(text)
                    .map_err(|e| format!("value is not valid JSON: {e}"))?;
                canonicalize(raw.get(), out)?;
            }
            FieldType::Bigint => write_int(a.as_primitive::<Int64Type>().value(row), out),
            FieldType::Int => write_int(a.as_primitive::<Int32Type>().value(row), out),
            // Up to 18446744073709551615 as a JSON number: the decoder reads it exactly.
            FieldType::UBigint => write_int(a.as_primitive::<UInt64Type>().value(row), out),
            FieldType::UInt => write_int(a.as_primitive::<UInt32Type>().value(row), out),
            FieldType::Double => write_float(a.as_primitive::<Float64Type>().value(row), out),
            FieldType::Float => {
                let v = a.as_primitive::<Float32Type>().value(row);
                if v.is_finite() {
                    // Shortest text that reads back as this f32.
                    serde_json::to_writer(&mut *out, &v).map_err(|e| e.to_string())?;
                } else {
                    write_float(f64::from(v), out);
                }
            }
            FieldType::Boolean => {
                let v = a.as_boolean().value(row);
                out.extend_from_slice(if v { b"true" } else { b"false" });
            }
            FieldType::Timestamp => {
                let nanos = a.as_primitive::<TimestampNanosecondType>().value(row);
                match epoch_unit(self.tf) {
                    None => {
                        out.push(b'"');
                        write_rfc3339(nanos, out);
                        out.push(b'"');
                    }
                    Some(unit) => {
                        let v = to_epoch(nanos, unit).ok_or_else(|| {
                            let mut t = Vec::new();
                            write_rfc3339(nanos, &mut t);
                            format!(
                                "{} is not a whole number of the unit of 'json.timestamp-format' = '{}'; writing it would truncate it",
                                String::from_utf8_lossy(&t),
                                format_name(self.tf)
                            )
                        })?;
                        write_int(v, out);
                    }
                }
            }
            FieldType::Bytea => {
                scratch.clear();
                base64::engine::general_purpose::STANDARD
                    .encode_string(a.as_binary::<i32>().value(row), scratch);
                out.push(b'"');
                out.extend_from_slice(scratch.as_bytes());
                out.push(b'"');
            }
            FieldType::Array(e) => {
                let items = a.as_list::<i32>().value(row);
                out.push(b'[');
                for i in 0..items.len() {
                    if i > 0 {
                        out.push(b',');
                    }
                    if items.is_null(i) {
                        out.extend_from_slice(b"null");
                    } else {
                        self.write_value(&items, i, e.field_type(), out, scratch)
                            .map_err(|x| format!("element {i}: {x}"))?;
                    }
                }
                out.push(b']');
            }
        }
        Ok(())
    }
}

/// An integer as JSON text (`itoa`: no formatter machinery on the per-cell path).
fn write_int(v: impl itoa::Integer, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// A DOUBLE as the shortest JSON number that reads back exactly, or a proto3 string for
/// NaN and the infinities.
fn write_float(v: f64, out: &mut Vec<u8>) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v == f64::INFINITY {
        out.extend_from_slice(b"\"Infinity\"");
    } else if v == f64::NEG_INFINITY {
        out.extend_from_slice(b"\"-Infinity\"");
    } else {
        serde_json::to_writer(&mut *out, &v).expect("a finite float always serializes");
    }
}
