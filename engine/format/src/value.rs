//! One JSON value into one typed column, exactly or not at all (SPEC 8, "Decoding is
//! exact"). Values arrive as the raw JSON text serde_json captured, so numbers are read
//! from their digits, never through a lossy float.

use std::borrow::Cow;

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;

use super::column::Column;
use super::json_str::{json_string, show};
use super::number::{exact_i32, exact_i64, exact_u32, exact_u64, IntError};
use super::timestamp::{epoch_unit, format_name, from_epoch, parse_rfc3339, RANGE};
use pubsub_engine_types::{FieldType, TimestampFormat};

/// A payload column: its name (= the JSON key), SQL type, NOT NULL, output position.
#[derive(Debug, Clone)]
pub(crate) struct ColumnSpec {
    pub name: String,
    pub ty: FieldType,
    pub required: bool,
    pub out: usize,
}

impl ColumnSpec {
    /// `column 'name' (TYPE)`, the start of every refusal about this column.
    pub(crate) fn describe(&self) -> String {
        format!("column '{}' ({})", self.name, self.ty.sql_name())
    }
}

/// Reusable buffers, so values that need conversion do not allocate per row.
#[derive(Default)]
pub(crate) struct Scratch {
    bytes: Vec<u8>,
}

/// What kind of JSON value `raw` is, for messages.
pub(crate) fn kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'"') => "string",
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Decodes standard or URL-safe base64, padded or not (proto3 JSON `bytes`).
pub(crate) fn decode_base64(s: &str, out: &mut Vec<u8>) -> Result<(), base64::DecodeError> {
    let engine = if s.contains(['-', '_']) {
        &URL_SAFE
    } else {
        &STANDARD
    };
    engine.decode_vec(s, out)
}

/// Appends the JSON value `raw` (not `null`; the caller handles NULL) to `col`'s buffer
/// `buf`, or returns why it does not fit (the text after `column 'x' (TYPE): `).
pub(crate) fn append(
    raw: &str,
    col: &ColumnSpec,
    tf: TimestampFormat,
    buf: &mut Column,
    scratch: &mut Scratch,
) -> Result<(), String> {
    let first = raw.as_bytes()[0];
    let is_string = first == b'"';
    let is_number = first == b'-' || first.is_ascii_digit();
    let wrong_kind = |wanted: &str| format!("{} is a JSON {}, not {wanted}", show(raw), kind(raw));
    match col.ty {
        FieldType::Text => {
            if !is_string {
                return Err(format!(
                    "{}; declare the column JSON to keep any JSON value as its text",
                    wrong_kind("a string")
                ));
            }
            buf.push_str(&json_string(raw)?)?;
        }
        FieldType::Json => {
            scratch.bytes.clear();
            super::canonical::canonicalize(raw, &mut scratch.bytes)
                .map_err(|e| format!("{} {e}", show(raw)))?;
            buf.push_str(std::str::from_utf8(&scratch.bytes).expect("canonical JSON is UTF-8"))?;
        }
        FieldType::Bigint => {
            let text = integer_text(raw, is_number, is_string, &wrong_kind)?;
            buf.push_i64(exact_i64(&text).map_err(|e| int_refusal(raw, e, col.ty))?);
        }
        FieldType::Int => {
            let text = integer_text(raw, is_number, is_string, &wrong_kind)?;
            buf.push_i32(exact_i32(&text).map_err(|e| int_refusal(raw, e, col.ty))?);
        }
        FieldType::UBigint => {
            let text = integer_text(raw, is_number, is_string, &wrong_kind)?;
            buf.push_u64(exact_u64(&text).map_err(|e| int_refusal(raw, e, col.ty))?);
        }
        FieldType::UInt => {
            let text = integer_text(raw, is_number, is_string, &wrong_kind)?;
            buf.push_u32(exact_u32(&text).map_err(|e| int_refusal(raw, e, col.ty))?);
        }
        FieldType::Double | FieldType::Float => {
            let special = |s: &str| match s {
                "NaN" => Some(f64::NAN),
                "Infinity" => Some(f64::INFINITY),
                "-Infinity" => Some(f64::NEG_INFINITY),
                _ => None,
            };
            let double = col.ty == FieldType::Double;
            if is_string {
                let v = special(&json_string(raw)?).ok_or_else(|| {
                    format!(
                        "{} is a JSON string; {} reads JSON numbers and the strings \"NaN\", \"Infinity\", \"-Infinity\"",
                        show(raw),
                        col.ty.sql_name()
                    )
                })?;
                if double {
                    buf.push_f64(v);
                } else {
                    buf.push_f32(v as f32);
                }
            } else if !is_number {
                return Err(wrong_kind("a number"));
            } else if double {
                // Rust's float parsing is correctly rounded (nearest f64).
                let v: f64 = raw.parse().map_err(|_| wrong_kind("a number"))?;
                if !v.is_finite() {
                    return Err(format!("{} is out of range for DOUBLE", show(raw)));
                }
                buf.push_f64(v);
            } else {
                // Parsed straight to f32: one rounding, to the nearest f32.
                let v: f32 = raw.parse().map_err(|_| wrong_kind("a number"))?;
                if !v.is_finite() {
                    return Err(format!(
                        "{} is out of range for FLOAT (at most about 3.4e38)",
                        show(raw)
                    ));
                }
                buf.push_f32(v);
            }
        }
        FieldType::Boolean => match raw {
            "true" => buf.push_bool(true),
            "false" => buf.push_bool(false),
            _ => return Err(wrong_kind("a boolean (true or false)")),
        },
        FieldType::Timestamp => buf.push_i64(timestamp(raw, is_number, is_string, tf)?),
        FieldType::Bytea => {
            if !is_string {
                return Err(wrong_kind("a base64 string"));
            }
            scratch.bytes.clear();
            decode_base64(&json_string(raw)?, &mut scratch.bytes)
                .map_err(|e| format!("{} is not base64: {e}", show(raw)))?;
            buf.push_bytes(&scratch.bytes)?;
        }
        FieldType::Array(e) => {
            if first != b'[' {
                return Err(wrong_kind("an array"));
            }
            let elements: Vec<&serde_json::value::RawValue> =
                serde_json::from_str(raw).map_err(|x| format!("{} {x}", show(raw)))?;
            // The element's spec: its messages are prefixed with its position below.
            let item = ColumnSpec {
                name: String::new(),
                ty: e.field_type(),
                required: false,
                out: 0,
            };
            buf.push_list(|items| {
                for (i, v) in elements.iter().enumerate() {
                    if v.get() == "null" {
                        items.push_null();
                        continue;
                    }
                    append(v.get(), &item, tf, items, scratch).map_err(|x| {
                        // An element's hint names the array type to declare.
                        let x = x.replace("declare the column JSON", "declare the column JSON[]");
                        format!("element {i} ({}): {x}", item.ty.sql_name())
                    })?;
                }
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// The integer text of a JSON number, or of a JSON string holding one (proto3 int64).
fn integer_text<'a>(
    raw: &'a str,
    is_number: bool,
    is_string: bool,
    wrong_kind: &dyn Fn(&str) -> String,
) -> Result<Cow<'a, str>, String> {
    if is_number {
        Ok(Cow::Borrowed(raw))
    } else if is_string {
        json_string(raw)
    } else {
        Err(wrong_kind("an integer"))
    }
}

fn int_refusal(raw: &str, e: IntError, ty: FieldType) -> String {
    let range = match ty {
        FieldType::Int => format!("{}..={}", i32::MIN, i32::MAX),
        FieldType::UInt => format!("0..={}", u32::MAX),
        FieldType::UBigint => format!("0..={}", u64::MAX),
        _ => format!("{}..={}", i64::MIN, i64::MAX),
    };
    match e {
        IntError::Syntax | IntError::NotInteger => format!("{} is not an integer", show(raw)),
        IntError::OutOfRange => format!(
            "{} is out of range for {} ({range})",
            show(raw),
            ty.sql_name()
        ),
    }
}

/// Nanoseconds since the epoch of a TIMESTAMP value under `json.timestamp-format` `tf`.
fn timestamp(
    raw: &str,
    is_number: bool,
    is_string: bool,
    tf: TimestampFormat,
) -> Result<i64, String> {
    let name = format_name(tf);
    match epoch_unit(tf) {
        None if is_string => parse_rfc3339(&json_string(raw)?).map_err(|e| {
            format!("{} {e}", show(raw))
        }),
        None if is_number => Err(format!(
            "JSON number {} needs 'json.timestamp-format' = 'epoch-seconds' (or another epoch-* unit); the default rfc3339 reads strings",
            show(raw)
        )),
        None => Err(format!(
            "{} is a JSON {}, not an RFC 3339 string",
            show(raw),
            kind(raw)
        )),
        Some(unit) => {
            let text = if is_number || is_string {
                if is_number {
                    Cow::Borrowed(raw)
                } else {
                    json_string(raw)?
                }
            } else {
                return Err(format!(
                    "{} is a JSON {}, not an integer ('json.timestamp-format' = '{name}')",
                    show(raw),
                    kind(raw)
                ));
            };
            let v = exact_i64(&text).map_err(|e| match e {
                IntError::OutOfRange => format!("{} is out of range ({RANGE})", show(raw)),
                _ => format!(
                    "{} is not an integer; 'json.timestamp-format' = '{name}' reads integers{}",
                    show(raw),
                    if is_string {
                        " (use 'rfc3339' for date strings)"
                    } else {
                        ""
                    }
                ),
            })?;
            from_epoch(v, unit).ok_or_else(|| format!("{} is out of range ({RANGE})", show(raw)))
        }
    }
}
