//! One value per type: what is accepted exactly, and what is refused with which words.

use super::*;
use pubsub_engine_types::FieldType::*;
use pubsub_engine_types::TimestampFormat::*;

/// Accepted as this value, or refused with a reason containing this text.
enum Want {
    Is(Val),
    Refused(&'static str),
}
use Want::*;

fn check(ty: FieldType, tf: TimestampFormat, json: &str, want: Want) {
    let schema = table(Format::Json, tf, vec![col("v", ty)]);
    let payload = format!(r#"{{"other": 1, "v": {json}}}"#);
    let got = decode_one(&schema, payload.as_bytes(), &[]).map(|b| cell(&b, "v", 0));
    match (got, want) {
        (Ok(v), Is(w)) => assert_eq!(v, w, "{} {json}", ty.sql_name()),
        (Err(e), Refused(w)) => {
            assert!(e.contains(w), "{} {json}: {e:?} lacks {w:?}", ty.sql_name());
            assert!(
                e.starts_with(&format!("column 'v' ({})", ty.sql_name())),
                "{e}"
            );
        }
        (got, Is(w)) => panic!("{} {json}: want {w:?}, got {got:?}", ty.sql_name()),
        (got, Refused(w)) => panic!("{} {json}: want refusal {w:?}, got {got:?}", ty.sql_name()),
    }
}

fn check_all(ty: FieldType, tf: TimestampFormat, cases: Vec<(&str, Want)>) {
    for (json, want) in cases {
        check(ty, tf, json, want);
    }
}

/// Every JSON form of the unsigned edges: 0, the maximum, -1, the maximum + 1, 1.5; number
/// text in a string follows BIGINT's rules (decision 0033).
#[test]
fn bigint_unsigned_and_int_unsigned() {
    check_all(
        UBigint,
        Rfc3339,
        vec![
            ("0", Is(Val::U64(0))),
            ("-0", Is(Val::U64(0))),
            ("18446744073709551615", Is(Val::U64(u64::MAX))),
            ("1.8446744073709551615e19", Is(Val::U64(u64::MAX))),
            (r#""18446744073709551615""#, Is(Val::U64(u64::MAX))),
            // Above i64::MAX and 2^53: read from the digits, never through a float.
            ("9223372036854775809", Is(Val::U64(9_223_372_036_854_775_809))),
            (
                "-1",
                Refused("column 'v' (BIGINT UNSIGNED): -1 is out of range for BIGINT UNSIGNED (0..=18446744073709551615)"),
            ),
            (
                "18446744073709551616",
                Refused("18446744073709551616 is out of range for BIGINT UNSIGNED"),
            ),
            (r#""-1""#, Refused("out of range for BIGINT UNSIGNED")),
            ("1.5", Refused("column 'v' (BIGINT UNSIGNED): 1.5 is not an integer")),
            (r#""1.5""#, Refused("is not an integer")),
            ("true", Refused("true is a JSON boolean, not an integer")),
            ("null", Is(Val::Null)),
        ],
    );
    check_all(
        UInt,
        Rfc3339,
        vec![
            ("0", Is(Val::U32(0))),
            ("4294967295", Is(Val::U32(u32::MAX))),
            (r#""4294967295""#, Is(Val::U32(u32::MAX))),
            ("4.294967295e9", Is(Val::U32(u32::MAX))),
            (
                "-1",
                Refused("column 'v' (INT UNSIGNED): -1 is out of range for INT UNSIGNED (0..=4294967295)"),
            ),
            ("4294967296", Refused("4294967296 is out of range for INT UNSIGNED")),
            ("1.5", Refused("1.5 is not an integer")),
            ("null", Is(Val::Null)),
        ],
    );
}

#[test]
fn bigint() {
    check_all(
        Bigint,
        Rfc3339,
        vec![
            ("100", Is(Val::I64(100))),
            ("-7", Is(Val::I64(-7))),
            (
                "100.01",
                Refused("column 'v' (BIGINT): 100.01 is not an integer"),
            ),
            ("-0.9", Refused("-0.9 is not an integer")),
            ("0.5e1", Is(Val::I64(5))),
            ("100.0", Is(Val::I64(100))),
            ("1e2", Is(Val::I64(100))),
            ("1.0000000000000000001", Refused("is not an integer")),
            ("9223372036854775807", Is(Val::I64(i64::MAX))),
            ("-9223372036854775808", Is(Val::I64(i64::MIN))),
            (
                "9223372036854775808",
                Refused("9223372036854775808 is out of range for BIGINT"),
            ),
            ("-9223372036854775809", Refused("out of range for BIGINT")),
            ("1e19", Refused("1e19 is out of range for BIGINT")),
            ("1e400", Refused("out of range for BIGINT")),
            (r#""9223372036854775807""#, Is(Val::I64(i64::MAX))),
            (
                r#""9223372036854775808""#,
                Refused("out of range for BIGINT"),
            ),
            (r#""12345""#, Is(Val::I64(12345))),
            (r#""-5""#, Is(Val::I64(-5))),
            (r#""1.5""#, Refused(r#""1.5" is not an integer"#)),
            (r#""abc""#, Refused(r#""abc" is not an integer"#)),
            (r#""""#, Refused("is not an integer")),
            (r#"" 5""#, Refused("is not an integer")),
            (r#""+5""#, Refused("is not an integer")),
            ("true", Refused("true is a JSON boolean, not an integer")),
            ("[1]", Refused("is a JSON array, not an integer")),
            ("null", Is(Val::Null)),
        ],
    );
}

#[test]
fn int() {
    check_all(
        Int,
        Rfc3339,
        vec![
            ("1.5", Refused("column 'v' (INT): 1.5 is not an integer")),
            ("2147483647", Is(Val::I32(i32::MAX))),
            ("-2147483648", Is(Val::I32(i32::MIN))),
            ("2147483648", Refused("2147483648 is out of range for INT")),
            (r#""2147483648""#, Refused("out of range for INT")),
            (r#""42""#, Is(Val::I32(42))),
            ("4.2e1", Is(Val::I32(42))),
        ],
    );
}

#[test]
fn double_and_float() {
    check_all(
        Double,
        Rfc3339,
        vec![
            ("1.5", Is(f64v(1.5))),
            ("0.1", Is(f64v(0.1))),
            ("100", Is(f64v(100.0))),
            ("-0.0", Is(f64v(-0.0))),
            ("1e308", Is(f64v(1e308))),
            ("1.7976931348623157e308", Is(f64v(f64::MAX))),
            ("1e309", Refused("1e309 is out of range for DOUBLE")),
            ("1e400", Refused("1e400 is out of range for DOUBLE")),
            ("5e-324", Is(f64v(5e-324))),
            ("1e-400", Is(f64v(0.0))),
            ("9007199254740993", Is(f64v(9007199254740992.0))),
            (r#""NaN""#, Is(f64v(f64::NAN))),
            (r#""Infinity""#, Is(f64v(f64::INFINITY))),
            (r#""-Infinity""#, Is(f64v(f64::NEG_INFINITY))),
            (
                r#""nan""#,
                Refused(r#""nan" is a JSON string; DOUBLE reads JSON numbers"#),
            ),
            (r#""1.5""#, Refused("is a JSON string")),
            ("true", Refused("is a JSON boolean, not a number")),
        ],
    );
    check_all(
        Float,
        Rfc3339,
        vec![
            ("1.5", Is(f32v(1.5))),
            ("0.1", Is(f32v(0.1))),
            ("3.4028235e38", Is(f32v(f32::MAX))),
            ("3.5e38", Refused("3.5e38 is out of range for FLOAT")),
            ("1e309", Refused("out of range for FLOAT")),
            ("16777217", Is(f32v(16777216.0))),
            (r#""NaN""#, Is(f32v(f32::NAN))),
            (r#""-Infinity""#, Is(f32v(f32::NEG_INFINITY))),
            (r#""x""#, Refused("FLOAT reads JSON numbers")),
        ],
    );
}

#[test]
fn boolean_and_text() {
    check_all(
        Boolean,
        Rfc3339,
        vec![
            ("true", Is(Val::Bool(true))),
            ("false", Is(Val::Bool(false))),
            ("1", Refused("1 is a JSON number, not a boolean")),
            (r#""true""#, Refused("is a JSON string, not a boolean")),
        ],
    );
    check_all(
        Text,
        Rfc3339,
        vec![
            (r#""hi""#, Is(s("hi"))),
            (r#""""#, Is(s(""))),
            (r#""a\nb\u00e9\ud83d\ude00\/""#, Is(s("a\nbé😀/"))),
            (
                "12",
                Refused("12 is a JSON number, not a string; declare the column JSON"),
            ),
            (r#"{"a":1}"#, Refused("is a JSON object, not a string")),
            (r#""\ud800""#, Refused("is not a valid JSON string")),
        ],
    );
}

#[test]
fn json_is_canonical_text() {
    check_all(
        Json,
        Rfc3339,
        vec![
            (
                r#"{ "b" : 1, "a" : [true, null, {"y": 2, "x": "\u0041"}] }"#,
                Is(s(r#"{"a":[true,null,{"x":"A","y":2}],"b":1}"#)),
            ),
            (r#""x""#, Is(s(r#""x""#))),
            ("1.50", Is(s("1.50"))),
            ("12345678901234567890123", Is(s("12345678901234567890123"))),
            ("1e400", Is(s("1e400"))),
            ("false", Is(s("false"))),
            ("[]", Is(s("[]"))),
            ("null", Is(Val::Null)),
            // Keeping one of two values would silently drop the other.
            (
                r#"{"b": 1, "b": 2}"#,
                Refused("has key 'b' twice in a nested object"),
            ),
            (r#"[{"a": {"x": 1, "x": 1}}]"#, Refused("has key 'x' twice")),
        ],
    );
}

#[test]
fn timestamp_rfc3339() {
    let noon = 1_714_564_800; // 2024-05-01T12:00:00Z
    check_all(
        Timestamp,
        Rfc3339,
        vec![
            (r#""2024-05-01T12:00:00Z""#, Is(ts(noon, 0))),
            (
                r#""2024-05-01T12:00:00.123456789+02:00""#,
                Is(ts(noon - 7200, 123_456_789)),
            ),
            (r#""2024-05-01 12:00:00""#, Is(ts(noon, 0))),
            (r#""2024-05-01 12:00:00.5""#, Is(ts(noon, 500_000_000))),
            (r#""2024-05-01T12:00:00.1Z""#, Is(ts(noon, 100_000_000))),
            (
                r#""2024-05-01T12:00:00.1234567890Z""#,
                Refused("has 10 fractional digits; TIMESTAMP keeps at most 9"),
            ),
            (r#""2024-05-01T12:00:00""#, Refused("has no UTC offset")),
            (r#""2024-05-01""#, Refused("is not an RFC 3339 timestamp")),
            (r#""3000-01-01T00:00:00Z""#, Refused("is out of range")),
            (
                "1714550400",
                Refused("column 'v' (TIMESTAMP): JSON number 1714550400 needs 'json.timestamp-format' = 'epoch-seconds' (or another epoch-* unit); the default rfc3339 reads strings"),
            ),
            ("true", Refused("is a JSON boolean, not an RFC 3339 string")),
        ],
    );
}

#[test]
fn timestamp_epochs() {
    let s0 = 1_714_550_400;
    check_all(
        Timestamp,
        EpochSeconds,
        vec![
            ("1714550400", Is(ts(s0, 0))),
            (r#""1714550400""#, Is(ts(s0, 0))),
            ("-1", Is(ts(-1, 0))),
            (
                "1714550400.5",
                Refused(
                    "is not an integer; 'json.timestamp-format' = 'epoch-seconds' reads integers",
                ),
            ),
            (
                "9223372037",
                Refused("9223372037 is out of range (TIMESTAMP holds 1677-09-21"),
            ),
            ("-9223372037", Refused("is out of range")),
            (
                r#""2024-05-01T12:00:00Z""#,
                Refused("(use 'rfc3339' for date strings)"),
            ),
            ("{}", Refused("is a JSON object, not an integer")),
        ],
    );
    check(
        Timestamp,
        EpochMillis,
        "1714550400123",
        Is(ts(s0, 123_000_000)),
    );
    check(
        Timestamp,
        EpochMicros,
        "1714550400123456",
        Is(ts(s0, 123_456_000)),
    );
    check(
        Timestamp,
        EpochNanos,
        "9223372036854775807",
        Is(Val::Ts(i64::MAX)),
    );
    check(
        Timestamp,
        EpochNanos,
        r#""-9223372036854775808""#,
        Is(Val::Ts(i64::MIN)),
    );
    check(
        Timestamp,
        EpochMillis,
        "9223372036854776",
        Refused("out of range"),
    );
}

#[test]
fn bytea_is_base64() {
    check_all(
        Bytea,
        Rfc3339,
        vec![
            (r#""aGVsbG8=""#, Is(Val::Bytes(b"hello".to_vec()))),
            (r#""aGVsbG8""#, Is(Val::Bytes(b"hello".to_vec()))),
            (r#""+/8=""#, Is(Val::Bytes(vec![0xfb, 0xff]))),
            (r#""-_8=""#, Is(Val::Bytes(vec![0xfb, 0xff]))),
            (r#""-_8""#, Is(Val::Bytes(vec![0xfb, 0xff]))),
            (r#""""#, Is(Val::Bytes(vec![]))),
            (
                r#""not base64!""#,
                Refused(r#""not base64!" is not base64"#),
            ),
            ("5", Refused("is a JSON number, not a base64 string")),
        ],
    );
}

#[test]
fn offending_values_are_cut_to_about_100_characters() {
    let long = format!("\"{}\"", "x".repeat(5000));
    let schema = json_table(vec![col("v", Bigint)]);
    let e = decode_one(&schema, format!(r#"{{"v": {long}}}"#).as_bytes(), &[]).unwrap_err();
    assert!(e.len() < 250, "{e}");
    assert!(e.contains("... (5002 bytes) is not an integer"), "{e}");
}
