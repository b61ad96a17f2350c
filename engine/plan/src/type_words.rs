//! Arrow type names in messages, put in SQL words (issue 31, item 6.1): an error that
//! Arrow or DataFusion raises while a row is evaluated names its types as Arrow spells
//! them (`Int64`, `Decimal128(38, 10)`, `Timestamp(Nanosecond, None)`); the user wrote
//! `BIGINT`, `DECIMAL(38, 10)`, `TIMESTAMP`. Every row failure's message passes here
//! (`select::message`). Quoted values (`'Int64'`) are left as they are.

use std::str::FromStr;

use arrow::datatypes::DataType;

use arrow::datatypes::TimeUnit;
use datafusion_common::DataFusionError;

use pubsub_engine_spi::{ArrayOf, FieldType};

/// The first word of every Arrow type name this rewrites (not `Null`: an English word).
const HEADS: &[&str] = &[
    "Boolean",
    "Int8",
    "Int16",
    "Int32",
    "Int64",
    "UInt8",
    "UInt16",
    "UInt32",
    "UInt64",
    "Float16",
    "Float32",
    "Float64",
    "Utf8",
    "LargeUtf8",
    "Utf8View",
    "Binary",
    "LargeBinary",
    "BinaryView",
    "Date32",
    "Date64",
    "Timestamp",
    "Time32",
    "Time64",
    "Duration",
    "Interval",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "Decimal256",
];

/// `msg` with each Arrow type name replaced by its SQL name.
pub fn sql_words(msg: &str) -> String {
    let b = msg.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = String::with_capacity(msg.len());
    let mut i = 0;
    let mut quoted = false;
    while i < b.len() {
        let c = b[i];
        if c == b'\'' {
            // A quote opens after a space or bracket and closes before one: not the
            // apostrophe of "Can't".
            let before = i.checked_sub(1).map(|j| b[j]);
            let after = b.get(i + 1).copied();
            if !quoted && before.is_none_or(|p| !word(p)) {
                quoted = true;
            } else if quoted && after.is_none_or(|n| !word(n)) {
                quoted = false;
            }
        }
        let starts_word = word(c) && (i == 0 || !word(b[i - 1]));
        if !quoted && starts_word {
            let end = i + b[i..].iter().take_while(|c| word(**c)).count();
            let head = &msg[i..end];
            if HEADS.contains(&head) {
                // With its parenthesized arguments, if it has them.
                let mut stop = end;
                if b.get(end) == Some(&b'(') {
                    let mut depth = 0;
                    for (k, ch) in b[end..].iter().enumerate() {
                        match ch {
                            b'(' => depth += 1,
                            b')' => {
                                depth -= 1;
                                if depth == 0 {
                                    stop = end + k + 1;
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                }
                if let Ok(t) = DataType::from_str(&msg[i..stop]) {
                    out.push_str(&sql_type(&t));
                    i = stop;
                    continue;
                }
            }
            out.push_str(head);
            i = end;
            continue;
        }
        let ch = msg[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// A DataFusion error's message without its "Error during planning:" style prefix.
pub fn message(e: &DataFusionError) -> String {
    let s = e.find_root().message().to_string();
    // DataFusion files some user errors (an invalid regular expression) as internal ones
    // and asks for a bug report; the user's SQL is the cause.
    let s = s
        .split(". This issue was likely caused by a bug in DataFusion")
        .next()
        .unwrap_or_default();
    sql_words(s.trim())
}

/// The column type whose Arrow type holds every value of `t` exactly (the evaluator
/// converts to it), if any.
pub fn field_type(t: &DataType) -> Option<FieldType> {
    use DataType::*;
    Some(match t {
        Int64 => FieldType::Bigint,
        Int32 | Int16 | Int8 | UInt16 | UInt8 => FieldType::Int,
        UInt64 => FieldType::UBigint,
        UInt32 => FieldType::UInt,
        Float64 => FieldType::Double,
        Float32 | Float16 => FieldType::Float,
        Boolean => FieldType::Boolean,
        Utf8 | LargeUtf8 | Utf8View => FieldType::Text,
        Binary | LargeBinary | BinaryView => FieldType::Bytea,
        Timestamp(_, z)
            if super::coercion::is_exact(
                &Timestamp(TimeUnit::Nanosecond, z.clone()),
                &Timestamp(TimeUnit::Nanosecond, None),
            ) =>
        {
            FieldType::Timestamp
        }
        Date32 | Date64 => FieldType::Timestamp,
        Null => FieldType::Text,
        // A list of a scalar type (issue 48); lists of lists have no column type.
        List(f) | LargeList(f) => FieldType::Array(ArrayOf::of(field_type(f.data_type())?)?),
        _ => return None,
    })
}

/// An Arrow type in SQL words, as the user writes it, for messages.
pub fn sql_type(t: &DataType) -> String {
    use arrow::datatypes::IntervalUnit;
    use DataType::*;
    // The precision SQL writes for a unit: TIMESTAMP(3), TIME(6).
    let precision = |u: &TimeUnit| match u {
        TimeUnit::Second => "(0)",
        TimeUnit::Millisecond => "(3)",
        TimeUnit::Microsecond => "(6)",
        TimeUnit::Nanosecond => "",
    };
    match t {
        Int64 => "BIGINT".into(),
        Int32 => "INT".into(),
        Int16 => "SMALLINT".into(),
        Int8 => "TINYINT".into(),
        UInt64 => "BIGINT UNSIGNED".into(),
        UInt32 => "INT UNSIGNED".into(),
        UInt16 => "SMALLINT UNSIGNED".into(),
        UInt8 => "TINYINT UNSIGNED".into(),
        Float64 => "DOUBLE".into(),
        Float32 => "FLOAT".into(),
        Float16 => "FLOAT16".into(),
        Boolean => "BOOLEAN".into(),
        Utf8 | LargeUtf8 | Utf8View => "TEXT".into(),
        Binary | LargeBinary | BinaryView => "BYTEA".into(),
        Timestamp(u, None) => format!("TIMESTAMP{}", precision(u)),
        Timestamp(u, Some(z)) => format!("TIMESTAMP{} WITH TIME ZONE '{z}'", precision(u)),
        Date32 => "DATE".into(),
        Date64 => "DATE (64-bit milliseconds)".into(),
        Time32(u) | Time64(u) => format!("TIME{}", precision(u)),
        Interval(IntervalUnit::MonthDayNano) => "INTERVAL".into(),
        Interval(IntervalUnit::YearMonth) => "INTERVAL YEAR TO MONTH".into(),
        Interval(IntervalUnit::DayTime) => "INTERVAL DAY TO SECOND".into(),
        Duration(u) => format!("DURATION{}", precision(u)),
        Decimal32(p, s) | Decimal64(p, s) => format!("DECIMAL({p}, {s})"),
        Decimal128(p, s) | Decimal256(p, s) => format!("DECIMAL({p}, {s})"),
        Null => "NULL".into(),
        List(f) | LargeList(f) => format!("{}[]", sql_type(f.data_type())),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrow_type_names_become_sql_names() {
        for (arrow, sql) in [
            (
                "Cast error: Cannot cast string 'twelve' to value of Int64 type",
                "Cast error: Cannot cast string 'twelve' to value of BIGINT type",
            ),
            (
                "Can't cast value 300 to type Int8",
                "Can't cast value 300 to type TINYINT",
            ),
            (
                "Cannot cast to Decimal128(10, 2). Overflowing on 1e20",
                "Cannot cast to DECIMAL(10, 2). Overflowing on 1e20",
            ),
            (
                "from Timestamp(Nanosecond, None) to Timestamp(s) and Date32",
                "from TIMESTAMP to TIMESTAMP(0) and DATE",
            ),
            (
                "a 'Int64' stays quoted; Utf8View is TEXT",
                "a 'Int64' stays quoted; TEXT is TEXT",
            ),
            (
                "Int64Array and Int64s are words",
                "Int64Array and Int64s are words",
            ),
            ("Interval(MonthDayNano) + Float64", "INTERVAL + DOUBLE"),
        ] {
            assert_eq!(sql_words(arrow), sql, "{arrow}");
        }
    }
}
