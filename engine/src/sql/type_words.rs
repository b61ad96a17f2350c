//! Arrow type names in messages, put in SQL words (issue 31, item 6.1): an error that
//! Arrow or DataFusion raises while a row is evaluated names its types as Arrow spells
//! them (`Int64`, `Decimal128(38, 10)`, `Timestamp(Nanosecond, None)`); the user wrote
//! `BIGINT`, `DECIMAL(38, 10)`, `TIMESTAMP`. Every row failure's message passes here
//! (`select::message`). Quoted values (`'Int64'`) are left as they are.

use std::str::FromStr;

use arrow::datatypes::DataType;

use super::select::sql_type;

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
pub(crate) fn sql_words(msg: &str) -> String {
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
