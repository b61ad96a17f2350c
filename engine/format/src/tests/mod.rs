//! Decoder and encoder tests on real payloads and per-type value tables.

mod arrays;
mod debezium;
mod fixtures;
mod messages;
mod numbers;
mod roundtrip;
mod values;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int32Type, Int64Type, TimeUnit, TimestampNanosecondType,
    UInt32Type, UInt64Type,
};
use bytes::Bytes;

use super::{Deserializer, FieldValue};
use pubsub_engine_types::{
    BadData, ConnectionSchema, FieldType, Format, SourceField, TimestampFormat,
};

/// A nullable payload column.
fn col(name: &str, ty: FieldType) -> SourceField {
    SourceField {
        name: name.to_string(),
        field_type: ty,
        required: false,
        metadata_key: None,
    }
}

/// A NOT NULL payload column.
fn req(name: &str, ty: FieldType) -> SourceField {
    SourceField {
        required: true,
        ..col(name, ty)
    }
}

/// A metadata column `name TYPE [NOT NULL] METADATA FROM 'key'`.
fn meta(name: &str, ty: FieldType, key: &str, required: bool) -> SourceField {
    SourceField {
        name: name.to_string(),
        field_type: ty,
        required,
        metadata_key: Some(key.to_string()),
    }
}

fn table(format: Format, tf: TimestampFormat, fields: Vec<SourceField>) -> ConnectionSchema {
    ConnectionSchema {
        event_time: None,
        format,
        timestamp_format: tf,
        bad_data: BadData::Fail,
        fields,
    }
}

fn json_table(fields: Vec<SourceField>) -> ConnectionSchema {
    table(Format::Json, TimestampFormat::Rfc3339, fields)
}

/// Decodes one message and flushes: the batch, or the refusal reason.
fn decode_one(
    schema: &ConnectionSchema,
    payload: &[u8],
    metadata: &[FieldValue],
) -> Result<RecordBatch, String> {
    let mut d = Deserializer::new(schema).expect("schema suits its format");
    d.deserialize(&Bytes::copy_from_slice(payload), metadata)
        .map_err(|e| e.reason)?;
    let b = d
        .flush()
        .expect("flush after Ok never fails")
        .expect("rows");
    assert_eq!(b.schema(), schema.arrow_schema());
    Ok(b)
}

/// A decoded cell, comparable (floats by bits, so NaN equals NaN and -0.0 differs from 0.0).
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Null,
    I64(i64),
    I32(i32),
    U64(u64),
    U32(u32),
    F64(u64),
    F32(u32),
    Bool(bool),
    Str(String),
    Bytes(Vec<u8>),
    /// TIMESTAMP nanoseconds.
    Ts(i64),
    /// An ARRAY's elements.
    List(Vec<Val>),
}

fn f64v(v: f64) -> Val {
    Val::F64(v.to_bits())
}

fn f32v(v: f32) -> Val {
    Val::F32(v.to_bits())
}

fn s(v: &str) -> Val {
    Val::Str(v.to_string())
}

fn cell(b: &RecordBatch, name: &str, row: usize) -> Val {
    let a = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    val(a, row)
}

fn val(a: &arrow::array::ArrayRef, row: usize) -> Val {
    if a.is_null(row) {
        return Val::Null;
    }
    match a.data_type() {
        DataType::Int64 => Val::I64(a.as_primitive::<Int64Type>().value(row)),
        DataType::Int32 => Val::I32(a.as_primitive::<Int32Type>().value(row)),
        DataType::UInt64 => Val::U64(a.as_primitive::<UInt64Type>().value(row)),
        DataType::UInt32 => Val::U32(a.as_primitive::<UInt32Type>().value(row)),
        DataType::Float64 => f64v(a.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => f32v(a.as_primitive::<Float32Type>().value(row)),
        DataType::Boolean => Val::Bool(a.as_boolean().value(row)),
        DataType::Utf8 => s(a.as_string::<i32>().value(row)),
        DataType::Binary => Val::Bytes(a.as_binary::<i32>().value(row).to_vec()),
        DataType::Timestamp(TimeUnit::Nanosecond, None) => {
            Val::Ts(a.as_primitive::<TimestampNanosecondType>().value(row))
        }
        DataType::List(_) => {
            let items = a.as_list::<i32>().value(row);
            Val::List((0..items.len()).map(|i| val(&items, i)).collect())
        }
        other => panic!("unexpected type {other}"),
    }
}

/// Every cell of a batch, row by row.
fn cells(b: &RecordBatch) -> Vec<Vec<Val>> {
    let names: Vec<String> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    (0..b.num_rows())
        .map(|r| names.iter().map(|n| cell(b, n, r)).collect())
        .collect()
}

/// Canonical JSON of the attribute map in `NAME.attrs.json`, as the source passes it.
fn attrs_json(text: &str) -> String {
    let v: std::collections::BTreeMap<String, String> = serde_json::from_str(text).unwrap();
    serde_json::to_string(&v).unwrap()
}

/// Nanoseconds for a UTC time given as whole seconds plus nanoseconds.
fn ts(secs: i64, nanos: i64) -> Val {
    Val::Ts(secs * 1_000_000_000 + nanos)
}
