//! One Avro message into one row, by the writer's revision, resolved by field name against
//! the table's columns (Avro's resolution rules, kept exact: a promotion that could round,
//! such as a `long` into a DOUBLE column, is checked per value, never applied blindly).

use apache_avro::types::Value;
use base64::Engine as _;

use super::json::read_json_keys;
use super::schema::{type_text, AvroEncoding, AvroSchema};
use super::values::{integer, show};
use crate::column::Column;
use crate::value::ColumnSpec;
use pubsub_engine_types::FieldType;

/// Decodes `payload`, named by Pub/Sub as written with `writer` in `encoding`, into one
/// row of `columns` (`columns[spec.out]`). A column the writer has no field for is NULL
/// (or a failure if it is NOT NULL); a field no column names is skipped. Errors name the
/// column, the field and the revision.
///
/// Pub/Sub names the newest revision its validation accepts, and that validation ignores
/// bytes after the record and JSON keys the revision lacks (measured on the emulator,
/// decision 0031). So a payload `writer` does not read whole was written with another
/// revision: it is decoded by the one of `writer`'s siblings that reads it whole (several
/// that do must agree on every column), never by `writer`. A JSON record whose only
/// excess is keys no revision has is read by `writer`, as Pub/Sub does, unless such a key
/// names a column (its value would be lost, the column NULL).
pub(crate) fn decode_row(
    payload: &[u8],
    writer: &AvroSchema,
    encoding: AvroEncoding,
    specs: &[ColumnSpec],
    columns: &mut [Column],
) -> Result<(), String> {
    let (writer, fields) = match read(payload, writer, encoding)? {
        Read::Whole(fields) => (writer, fields),
        Read::Partial { fields, why } => {
            let whole: Vec<(&AvroSchema, Vec<(String, Value)>)> = writer
                .siblings
                .iter()
                .filter_map(|s| match read(payload, s, encoding) {
                    Ok(Read::Whole(f)) => Some((s.as_ref(), f)),
                    _ => None,
                })
                .collect();
            match whole.split_first() {
                Some(((w, f), rest)) => {
                    if let Some((other, _)) =
                        rest.iter().find(|(w2, f2)| !same_row(specs, w, f, w2, f2))
                    {
                        return Err(format!(
                            "{why}, and revisions {} and {} of schema {} both read it whole, with different values: which one wrote it cannot be told",
                            w.revision(),
                            other.revision(),
                            w.name()
                        ));
                    }
                    let (w, f) = whole.into_iter().next().expect("non-empty");
                    (w, f)
                }
                None => match fields {
                    // Keys no revision has, none of them a column's: ignored, as Pub/Sub
                    // ignores them.
                    Some((f, skipped))
                        if !skipped.iter().any(|k| specs.iter().any(|s| s.name == *k)) =>
                    {
                        (writer, f)
                    }
                    _ => {
                        return Err(if writer.siblings.is_empty() {
                            why
                        } else {
                            format!(
                                "{why}, and no other revision of schema {} reads it whole",
                                writer.name()
                            )
                        })
                    }
                },
            }
        }
    };
    let lookup = &writer.record().lookup;
    for spec in specs {
        let at = lookup.get(&spec.name).copied();
        let col = &mut columns[spec.out];
        match at.map(|i| &fields[i].1) {
            None if spec.required => {
                return Err(format!(
                    "{} is NOT NULL but {} has no field '{}'",
                    spec.describe(),
                    writer.describe(),
                    spec.name
                ))
            }
            None => col.push_null(),
            Some(v) => push(col, spec, v).map_err(|why| {
                let field = &writer.record().fields[at.expect("found")].schema;
                format!(
                    "{}: field '{}' ({}) of {}: {why}",
                    spec.describe(),
                    spec.name,
                    type_text(field),
                    writer.describe()
                )
            })?,
        }
    }
    Ok(())
}

/// A payload as one revision reads it.
enum Read {
    /// Every byte, every key: a payload this revision writes.
    Whole(Vec<(String, Value)>),
    /// Not a payload this revision writes (`why`). `fields`: a JSON record whose only
    /// excess is keys the revision has no field for, read without them, and those keys.
    Partial {
        fields: Option<(Vec<(String, Value)>, Vec<String>)>,
        why: String,
    },
}

/// `payload` read by `w`. The error is for a payload that is not even valid JSON text.
fn read(payload: &[u8], w: &AvroSchema, encoding: AvroEncoding) -> Result<Read, String> {
    let partial = |why: String| Read::Partial { fields: None, why };
    let record = |v: Value| match v {
        Value::Record(fields) => Ok(fields),
        _ => Err(format!("{} did not yield a record", w.describe())),
    };
    Ok(match encoding {
        AvroEncoding::Binary => {
            let mut rest = payload;
            match apache_avro::from_avro_datum(&w.schema, &mut rest, None) {
                Err(e) => partial(format!(
                    "payload is not Avro BINARY of {}: {e}",
                    w.describe()
                )),
                Ok(_) if !rest.is_empty() => partial(format!(
                    "payload has {} bytes after the Avro BINARY record of {}",
                    rest.len(),
                    w.describe()
                )),
                Ok(v) => Read::Whole(record(v)?),
            }
        }
        AvroEncoding::Json => {
            let text = std::str::from_utf8(payload)
                .map_err(|e| format!("Avro JSON payload is not UTF-8: {e}"))?;
            match read_json_keys(w, text) {
                Err(e) => partial(format!("payload is not Avro JSON of {}: {e}", w.describe())),
                Ok((v, skipped)) if skipped.is_empty() => Read::Whole(record(v)?),
                Ok((v, skipped)) => Read::Partial {
                    why: format!(
                        "payload has {} {} that {} has no field for",
                        if skipped.len() == 1 { "key" } else { "keys" },
                        skipped
                            .iter()
                            .take(10)
                            .map(|k| format!("'{k}'"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        w.describe()
                    ),
                    fields: Some((record(v)?, skipped)),
                },
            }
        }
    })
}

/// Whether revisions `a` and `b` give every column the same value (a field a revision
/// lacks is NULL; union branches are compared by value, not by position).
fn same_row(
    specs: &[ColumnSpec],
    a: &AvroSchema,
    fa: &[(String, Value)],
    b: &AvroSchema,
    fb: &[(String, Value)],
) -> bool {
    let get = |w: &AvroSchema, f: &[(String, Value)], name: &str| -> Value {
        match w.record().lookup.get(name).map(|&i| &f[i].1) {
            None => Value::Null,
            Some(Value::Union(_, inner)) => inner.as_ref().clone(),
            Some(v) => v.clone(),
        }
    };
    specs
        .iter()
        .all(|s| get(a, fa, &s.name) == get(b, fb, &s.name))
}

/// Appends Avro value `v` to `col` of `spec`'s type, exactly or not at all.
fn push(col: &mut Column, spec: &ColumnSpec, v: &Value) -> Result<(), String> {
    let v = match v {
        Value::Union(_, inner) => inner.as_ref(),
        v => v,
    };
    let no_fit = || format!("{} does not fit the column", show(v));
    match (spec.ty, v) {
        (_, Value::Null) if spec.required => return Err("NULL in a NOT NULL column".into()),
        (_, Value::Null) => col.push_null(),
        (FieldType::Boolean, Value::Boolean(b)) => col.push_bool(*b),
        (FieldType::Int, Value::Int(i)) => col.push_i32(*i),
        (FieldType::Int, Value::Long(i)) => col.push_i32(i32::try_from(*i).map_err(|_| no_fit())?),
        (FieldType::Bigint, Value::Int(i)) => col.push_i64(i64::from(*i)),
        (FieldType::Bigint, Value::Long(i)) => col.push_i64(*i),
        (FieldType::UInt, Value::Int(_) | Value::Long(_)) => {
            let i = integer(v).expect("an int or a long");
            col.push_u32(u32::try_from(i).map_err(|_| unsigned_range(v, spec.ty))?)
        }
        (FieldType::UBigint, Value::Int(_) | Value::Long(_)) => {
            let i = integer(v).expect("an int or a long");
            col.push_u64(u64::try_from(i).map_err(|_| unsigned_range(v, spec.ty))?)
        }
        (FieldType::Double, Value::Int(i)) => col.push_f64(f64::from(*i)),
        (FieldType::Double, Value::Long(i)) => col.push_f64(exact_f64(*i).ok_or_else(no_fit)?),
        (FieldType::Double, Value::Float(f)) => col.push_f64(f64::from(*f)),
        (FieldType::Double, Value::Double(f)) => col.push_f64(*f),
        (FieldType::Float, Value::Int(i)) => {
            col.push_f32(exact_f32(i64::from(*i)).ok_or_else(no_fit)?)
        }
        (FieldType::Float, Value::Long(i)) => col.push_f32(exact_f32(*i).ok_or_else(no_fit)?),
        (FieldType::Float, Value::Float(f)) => col.push_f32(*f),
        (FieldType::Float, Value::Double(f)) => {
            let narrow = *f as f32;
            if f64::from(narrow) != *f && !f.is_nan() {
                return Err(no_fit());
            }
            col.push_f32(narrow)
        }
        (FieldType::Text, Value::String(s) | Value::Enum(_, s)) => col.push_str(s)?,
        (FieldType::Text, Value::Uuid(u)) => col.push_str(&u.to_string())?,
        (FieldType::Bytea, Value::Bytes(b) | Value::Fixed(_, b)) => col.push_bytes(b)?,
        (FieldType::Timestamp, Value::TimestampMillis(t)) => {
            col.push_i64(t.checked_mul(1_000_000).ok_or_else(out_of_range)?)
        }
        (FieldType::Timestamp, Value::TimestampMicros(t)) => {
            col.push_i64(t.checked_mul(1_000).ok_or_else(out_of_range)?)
        }
        (FieldType::Timestamp, Value::TimestampNanos(t)) => col.push_i64(*t),
        (FieldType::Json, v) => {
            let json = to_json(v)?;
            col.push_str(&serde_json::to_string(&json).map_err(|e| e.to_string())?)?
        }
        (FieldType::Array(e), Value::Array(values)) => {
            let item = ColumnSpec {
                name: String::new(),
                ty: e.field_type(),
                required: false,
                out: 0,
            };
            col.push_list(|items| {
                for (i, v) in values.iter().enumerate() {
                    push(items, &item, v)
                        .map_err(|x| format!("element {i} ({}): {x}", item.ty.sql_name()))?;
                }
                Ok(())
            })?
        }
        _ => return Err(no_fit()),
    }
    Ok(())
}

/// A negative `int`/`long` (or, for INT UNSIGNED, one above 4294967295).
fn unsigned_range(v: &Value, ty: FieldType) -> String {
    let max = if ty == FieldType::UInt {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    format!(
        "{} is out of range for {} (0..={max})",
        show(v),
        ty.sql_name()
    )
}

fn out_of_range() -> String {
    "the timestamp is outside the TIMESTAMP range (years 1677 to 2262)".into()
}

/// `i` as a DOUBLE if the double holds it exactly.
pub(crate) fn exact_f64(i: i64) -> Option<f64> {
    let f = i as f64;
    (f as i128 == i128::from(i)).then_some(f)
}

/// `i` as a FLOAT if the float holds it exactly.
pub(crate) fn exact_f32(i: i64) -> Option<f32> {
    let f = i as f32;
    (f as i128 == i128::from(i)).then_some(f)
}

/// An Avro value as JSON: records and maps as objects (keys sorted, the canonical form of
/// JSON columns), bytes as standard base64, enums and UUIDs as strings, timestamps, dates
/// and times as their integers. Refuses what JSON cannot hold exactly (NaN, infinities,
/// decimals, durations).
pub(crate) fn to_json(v: &Value) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    let float = |f: f64| {
        serde_json::Number::from_f64(f)
            .map(J::Number)
            .ok_or_else(|| format!("{f} cannot be written as JSON"))
    };
    if let Some(i) = integer(v) {
        return Ok(J::from(i));
    }
    Ok(match v {
        Value::Null => J::Null,
        Value::Boolean(b) => J::Bool(*b),
        Value::Float(f) => float(f64::from(*f))?,
        Value::Double(f) => float(*f)?,
        Value::String(s) | Value::Enum(_, s) => J::String(s.clone()),
        Value::Uuid(u) => J::String(u.to_string()),
        Value::Bytes(b) | Value::Fixed(_, b) => {
            J::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        Value::Union(_, inner) => to_json(inner)?,
        Value::Array(items) => J::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Map(m) => J::Object(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), to_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        Value::Record(fields) => J::Object(
            fields
                .iter()
                .map(|(k, v)| Ok((k.clone(), to_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => return Err(format!("{} has no exact JSON form", show(other))),
    })
}
