//! Avro's JSON encoding, read and written by the writer schema (the crate has none).
//!
//! Pub/Sub's `JSON` encoding is Avro's: a union value other than null is an object with
//! one key naming its branch (`{"string": "x"}`; checked on the emulator: a bare `"x"` is
//! refused as "Could not parse message"), bytes and fixed are strings of code points
//! U+0000..U+00FF, and a record's keys not in the schema are ignored (the source reads
//! them with [`read_json_keys`], which names them: a record with a key its revision lacks
//! may have been written with another revision, decision 0031). JSON columns written
//! into record, array or map fields are plain JSON, read with `wrapped = false`: a union
//! value then takes the first branch that holds it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;

use apache_avro::types::Value;
use apache_avro::Schema;
use base64::Engine as _;
use serde_json::value::RawValue;

use super::schema::{type_text, AvroSchema};
use super::values::integer;
use crate::canonical::{entries, items};
use crate::json_str::{json_string, show};
use crate::number::{exact_i32, exact_i64};
use crate::value::kind;

/// Deepest nesting read.
const MAX_DEPTH: usize = 128;

/// Reads JSON `text` as a value of type `s` (a type inside `w`). `wrapped`: Avro's JSON
/// encoding (unions wrapped, bytes as characters U+0000..U+00FF); otherwise the JSON of a
/// column (unions bare, bytes as standard base64).
pub(crate) fn read_json_as(
    w: &AvroSchema,
    s: &Schema,
    text: &str,
    wrapped: bool,
) -> Result<Value, String> {
    let raw: &RawValue =
        serde_json::from_str(text).map_err(|e| format!("is not valid JSON: {e}"))?;
    Reader {
        w,
        wrapped,
        skipped: None,
    }
    .read(s, raw.get(), 0)
}

/// Reads Avro JSON `text` (Pub/Sub's `JSON` encoding) as a value of `w`'s top-level
/// record, and the keys it skipped because their record has no field by that name: a
/// top-level key as itself, a key of a nested record as `Record.key` (Avro names hold
/// no dots, so only nested ones do).
pub(crate) fn read_json_keys(w: &AvroSchema, text: &str) -> Result<(Value, Vec<String>), String> {
    let raw: &RawValue =
        serde_json::from_str(text).map_err(|e| format!("is not valid JSON: {e}"))?;
    let skipped = RefCell::new(Vec::new());
    let v = Reader {
        w,
        wrapped: true,
        skipped: Some(&skipped),
    }
    .read(&w.schema, raw.get(), 0)?;
    Ok((v, skipped.into_inner()))
}

struct Reader<'a> {
    w: &'a AvroSchema,
    wrapped: bool,
    /// Where skipped keys are named (see [`read_json_keys`]).
    skipped: Option<&'a RefCell<Vec<String>>>,
}

impl Reader<'_> {
    fn read(&self, s: &Schema, raw: &str, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        let s = self.w.resolve(s)?;
        let wrong = || format!("{} {} is not a {}", kind(raw), show(raw), type_text(s));
        let number = || matches!(raw.as_bytes()[0], b'-' | b'0'..=b'9');
        let int = || {
            if !number() {
                return Err(wrong());
            }
            exact_i32(raw).map_err(|_| wrong())
        };
        let long = || {
            if !number() {
                return Err(wrong());
            }
            exact_i64(raw).map_err(|_| wrong())
        };
        let string = || -> Result<Cow<'_, str>, String> {
            if raw.as_bytes()[0] != b'"' {
                return Err(wrong());
            }
            json_string(raw)
        };
        let bytes = || -> Result<Vec<u8>, String> {
            let text = string()?;
            if !self.wrapped {
                // A JSON column holds bytes as standard base64, as the source writes them
                // (`to_json`): the same bytes come back, never the base64 text itself.
                return base64::engine::general_purpose::STANDARD
                    .decode(text.as_bytes())
                    .map_err(|_| {
                        format!(
                            "{} is not standard base64, which bytes in a JSON column are",
                            show(raw)
                        )
                    });
            }
            text.chars()
                .map(|c| {
                    u8::try_from(u32::from(c)).map_err(|_| {
                        format!(
                            "{} is not Avro JSON bytes: character {c:?} is beyond U+00FF",
                            show(raw)
                        )
                    })
                })
                .collect()
        };
        Ok(match s {
            Schema::Null if raw == "null" => Value::Null,
            Schema::Boolean if raw == "true" || raw == "false" => Value::Boolean(raw == "true"),
            Schema::Int => Value::Int(int()?),
            Schema::Long => Value::Long(long()?),
            Schema::Date => Value::Date(int()?),
            Schema::TimeMillis => Value::TimeMillis(int()?),
            Schema::TimeMicros => Value::TimeMicros(long()?),
            Schema::TimestampMillis => Value::TimestampMillis(long()?),
            Schema::TimestampMicros => Value::TimestampMicros(long()?),
            Schema::TimestampNanos => Value::TimestampNanos(long()?),
            Schema::LocalTimestampMillis => Value::LocalTimestampMillis(long()?),
            Schema::LocalTimestampMicros => Value::LocalTimestampMicros(long()?),
            Schema::LocalTimestampNanos => Value::LocalTimestampNanos(long()?),
            // Rounded once to the type, as JSON columns are; an infinite result is refused.
            Schema::Float if number() => Value::Float(
                raw.parse::<f32>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .ok_or_else(wrong)?,
            ),
            Schema::Double if number() => Value::Double(
                raw.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .ok_or_else(wrong)?,
            ),
            Schema::String | Schema::Uuid => Value::String(string()?.into_owned()),
            Schema::Bytes => Value::Bytes(bytes()?),
            Schema::Fixed(f) => {
                let b = bytes()?;
                if b.len() != f.size {
                    return Err(format!(
                        "{} has {} bytes, fixed {} holds {}",
                        show(raw),
                        b.len(),
                        f.name.name,
                        f.size
                    ));
                }
                Value::Fixed(f.size, b)
            }
            Schema::Enum(e) => {
                let sym = string()?;
                let i = e.symbols.iter().position(|x| *x == *sym).ok_or_else(|| {
                    format!("{} is not a symbol of enum {}", show(raw), e.name.name)
                })?;
                Value::Enum(i as u32, sym.into_owned())
            }
            Schema::Array(a) if raw.starts_with('[') => Value::Array(
                items(raw)?
                    .into_iter()
                    .map(|x| self.read(&a.items, x.get(), depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            Schema::Map(m) if raw.starts_with('{') => {
                let mut out = HashMap::new();
                for (k, v) in entries(raw)? {
                    let v = self.read(&m.types, v.get(), depth + 1)?;
                    if out.insert(k.to_string(), v).is_some() {
                        return Err(format!("has key '{k}' twice"));
                    }
                }
                Value::Map(out)
            }
            Schema::Record(r) if raw.starts_with('{') => {
                let mut found: Vec<Option<&RawValue>> = vec![None; r.fields.len()];
                for (k, v) in entries(raw)? {
                    // Keys the schema does not name are ignored, as Pub/Sub does.
                    if let Some(&i) = r.lookup.get(k.as_ref()) {
                        if found[i].replace(v).is_some() {
                            return Err(format!("has key '{k}' twice"));
                        }
                    } else if let Some(skipped) = self.skipped {
                        skipped.borrow_mut().push(if depth == 0 {
                            k.to_string()
                        } else {
                            format!("{}.{k}", r.name.name)
                        });
                    }
                }
                let mut fields = Vec::with_capacity(r.fields.len());
                for (f, v) in r.fields.iter().zip(found) {
                    let v = v.ok_or_else(|| format!("has no field '{}'", f.name))?;
                    let v = self
                        .read(&f.schema, v.get(), depth + 1)
                        .map_err(|e| format!("field '{}': {e}", f.name))?;
                    fields.push((f.name.clone(), v));
                }
                Value::Record(fields)
            }
            Schema::Union(u) => {
                let variants = u.variants();
                if raw == "null" {
                    let i = variants
                        .iter()
                        .position(|v| matches!(v, Schema::Null))
                        .ok_or_else(wrong)?;
                    return Ok(Value::Union(i as u32, Box::new(Value::Null)));
                }
                if self.wrapped {
                    let not_union = || {
                        format!(
                            "{} is not a union value (an object with one key naming its branch)",
                            show(raw)
                        )
                    };
                    if !raw.starts_with('{') {
                        return Err(not_union());
                    }
                    let e = entries(raw)?;
                    let [(name, v)] = e.as_slice() else {
                        return Err(not_union());
                    };
                    let i = variants
                        .iter()
                        .position(|b| branch_name(self.w, b) == *name)
                        .ok_or_else(|| {
                            format!("'{name}' is not a branch of union {}", type_text(s))
                        })?;
                    Value::Union(
                        i as u32,
                        Box::new(self.read(&variants[i], v.get(), depth + 1)?),
                    )
                } else {
                    variants
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| !matches!(b, Schema::Null))
                        .find_map(|(i, b)| {
                            self.read(b, raw, depth + 1)
                                .ok()
                                .map(|v| Value::Union(i as u32, Box::new(v)))
                        })
                        .ok_or_else(wrong)?
                }
            }
            Schema::Decimal(_) | Schema::BigDecimal | Schema::Duration => {
                return Err(format!("Avro type {} is not supported yet", type_text(s)))
            }
            _ => return Err(wrong()),
        })
    }
}

/// The name a union branch of type `s` has in Avro's JSON encoding: a named type's full
/// name, otherwise the primitive type underneath (a logical type's too).
pub(crate) fn branch_name(w: &AvroSchema, s: &Schema) -> String {
    let s = w.resolve(s).unwrap_or(s);
    match s {
        Schema::Record(r) => r.name.fullname(None),
        Schema::Enum(e) => e.name.fullname(None),
        Schema::Fixed(f) => f.name.fullname(None),
        Schema::Decimal(d) => match d.inner.as_ref() {
            Schema::Fixed(f) => f.name.fullname(None),
            _ => "bytes".into(),
        },
        Schema::Null => "null".into(),
        Schema::Boolean => "boolean".into(),
        Schema::Int | Schema::Date | Schema::TimeMillis => "int".into(),
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => "long".into(),
        Schema::Float => "float".into(),
        Schema::Double => "double".into(),
        Schema::Bytes | Schema::BigDecimal => "bytes".into(),
        Schema::String | Schema::Uuid => "string".into(),
        Schema::Array(_) => "array".into(),
        Schema::Map(_) => "map".into(),
        Schema::Union(_) | Schema::Duration | Schema::Ref { .. } => "fixed".into(),
    }
}

/// Writes `v`, a value of type `s` inside `w`, in Avro's JSON encoding. Errors for a
/// NaN or infinite float (JSON has no such number) and a value that does not match `s`.
pub(crate) fn write_json(
    w: &AvroSchema,
    s: &Schema,
    v: &Value,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let s = w.resolve(s)?;
    let str_out = |t: &str, out: &mut Vec<u8>| {
        serde_json::to_writer(out, t).expect("a string always serializes into memory")
    };
    let bytes_out = |b: &[u8], out: &mut Vec<u8>| {
        let t: String = b.iter().map(|&x| char::from(x)).collect();
        str_out(&t, out)
    };
    let float_out = |f: f64, out: &mut Vec<u8>| -> Result<(), String> {
        if !f.is_finite() {
            return Err(format!("{f} cannot be written in Avro's JSON encoding"));
        }
        serde_json::to_writer(out, &f).map_err(|e| e.to_string())
    };
    if let Some(i) = integer(v) {
        out.extend_from_slice(i.to_string().as_bytes());
        return Ok(());
    }
    match (s, v) {
        (Schema::Union(u), Value::Union(i, inner)) => {
            let b = u
                .variants()
                .get(*i as usize)
                .ok_or("union branch out of range")?;
            if matches!(**inner, Value::Null) {
                out.extend_from_slice(b"null");
            } else {
                out.push(b'{');
                str_out(&branch_name(w, b), out);
                out.push(b':');
                write_json(w, b, inner, out)?;
                out.push(b'}');
            }
        }
        (_, Value::Null) => out.extend_from_slice(b"null"),
        (_, Value::Boolean(b)) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        (_, Value::Float(f)) => {
            if !f.is_finite() {
                return Err(format!("{f} cannot be written in Avro's JSON encoding"));
            }
            serde_json::to_writer(out, f).map_err(|e| e.to_string())?
        }
        (_, Value::Double(f)) => float_out(*f, out)?,
        (_, Value::String(t) | Value::Enum(_, t)) => str_out(t, out),
        (_, Value::Bytes(b) | Value::Fixed(_, b)) => bytes_out(b, out),
        (Schema::Array(a), Value::Array(items)) => {
            out.push(b'[');
            for (n, x) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_json(w, &a.items, x, out)?;
            }
            out.push(b']');
        }
        (Schema::Map(m), Value::Map(entries)) => {
            let mut keys: Vec<&String> = entries.keys().collect();
            keys.sort();
            out.push(b'{');
            for (n, k) in keys.into_iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                str_out(k, out);
                out.push(b':');
                write_json(w, &m.types, &entries[k], out)?;
            }
            out.push(b'}');
        }
        (Schema::Record(r), Value::Record(fields)) => {
            out.push(b'{');
            for (n, (f, (name, x))) in r.fields.iter().zip(fields).enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                str_out(name, out);
                out.push(b':');
                write_json(w, &f.schema, x, out)?;
            }
            out.push(b'}');
        }
        (s, v) => {
            return Err(format!(
                "{} cannot be written as {}",
                super::values::show(v),
                type_text(s)
            ))
        }
    }
    Ok(())
}
