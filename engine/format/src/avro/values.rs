//! Avro values as decoding and Avro JSON read them: the integer a value holds, and a
//! value in a message.

use apache_avro::types::Value;

/// The integer an Avro integer value holds: `int` and `long` and the logical types over
/// them (dates, times, timestamps), each written as that integer in JSON.
pub(crate) fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => Some(i64::from(*i)),
        Value::Long(i)
        | Value::TimeMicros(i)
        | Value::TimestampMillis(i)
        | Value::TimestampMicros(i)
        | Value::TimestampNanos(i)
        | Value::LocalTimestampMillis(i)
        | Value::LocalTimestampMicros(i)
        | Value::LocalTimestampNanos(i) => Some(*i),
        _ => None,
    }
}

/// A value for messages: its Avro kind and, for scalars, the value.
pub(crate) fn show(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Boolean(b) => format!("boolean {b}"),
        Value::Int(i) => format!("int {i}"),
        Value::Long(i) => format!("long {i}"),
        Value::Float(f) => format!("float {f}"),
        Value::Double(f) => format!("double {f}"),
        Value::String(s) => format!("string {:?}", s.chars().take(100).collect::<String>()),
        Value::Enum(_, s) => format!("enum symbol {s:?}"),
        Value::Union(_, inner) => show(inner),
        other => format!("{:?}", apache_avro::schema::SchemaKind::from(other)).to_lowercase(),
    }
}
