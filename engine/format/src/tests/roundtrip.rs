//! The serializer: exact output text, decode(serialize(x)) == x for every type and
//! timestamp format, and refusals.

use super::*;
use crate::Serializer;
use pubsub_engine_types::FieldType::*;
use pubsub_engine_types::TimestampFormat::*;

fn every_type(tf: TimestampFormat) -> ConnectionSchema {
    table(
        Format::Json,
        tf,
        vec![
            col("t", Text),
            col("b", Bigint),
            col("i", Int),
            col("d", Double),
            col("f", Float),
            col("ok", Boolean),
            col("ts", Timestamp),
            col("raw", Bytea),
            col("j", Json),
            meta("mid", Text, "message-id", false),
        ],
    )
}

/// Decodes each payload as one message with a NULL message id; all rows in one batch.
fn decode_all(schema: &ConnectionSchema, payloads: &[Vec<u8>]) -> RecordBatch {
    let mut d = Deserializer::new(schema).unwrap();
    for p in payloads {
        d.deserialize(&Bytes::copy_from_slice(p), &[FieldValue::Null])
            .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(p)));
    }
    d.flush().unwrap().unwrap()
}

const ROWS: &str = r#"
{"t": "a \"q\" \n é", "b": -9223372036854775808, "i": 2147483647, "d": 0.1, "f": 0.1,
 "ok": true, "ts": "2024-05-01T12:00:00.123456789+02:00", "raw": "AP8=",
 "j": {"z": [1, 2.50, null], "a": "x"}}
{"t": "", "b": 9223372036854775807, "i": -1, "d": "NaN", "f": "Infinity", "ok": false,
 "ts": "1677-09-21T00:12:43.145224192Z", "raw": "", "j": "just a string"}
{"d": "-Infinity", "f": "-Infinity", "ts": "2024-05-01T00:00:00.5Z", "j": 12345678901234567890123}
{"d": 1e308, "f": 3.4028235e38, "ts": "2024-05-01 00:00:00.000001", "j": false}
{"d": -0.0, "f": 1e-45, "ts": "2262-04-11T23:47:16.854775807Z", "j": []}
{}
"#;

#[test]
fn json_output_text() {
    let schema = every_type(Rfc3339);
    let batch = decode_all(&schema, &[ROWS.as_bytes().to_vec()]);
    let out = Serializer::new(&schema).serialize(&batch).unwrap();
    let text: Vec<String> = out
        .into_iter()
        .map(|p| String::from_utf8(p).unwrap())
        .collect();
    assert_eq!(
        text,
        vec![
            r#"{"t":"a \"q\" \n é","b":-9223372036854775808,"i":2147483647,"d":0.1,"f":0.1,"ok":true,"ts":"2024-05-01T10:00:00.123456789Z","raw":"AP8=","j":{"a":"x","z":[1,2.50,null]}}"#,
            r#"{"t":"","b":9223372036854775807,"i":-1,"d":"NaN","f":"Infinity","ok":false,"ts":"1677-09-21T00:12:43.145224192Z","raw":"","j":"just a string"}"#,
            r#"{"d":"-Infinity","f":"-Infinity","ts":"2024-05-01T00:00:00.500Z","j":12345678901234567890123}"#,
            r#"{"d":1e+308,"f":3.4028235e+38,"ts":"2024-05-01T00:00:00.000001Z","j":false}"#,
            r#"{"d":-0.0,"f":1e-45,"ts":"2262-04-11T23:47:16.854775807Z","j":[]}"#,
            "{}",
        ]
    );
}

#[test]
fn decode_of_serialize_is_identity() {
    for tf in [Rfc3339, EpochNanos] {
        let schema = every_type(tf);
        let batch = decode_all(&every_type(Rfc3339), &[ROWS.as_bytes().to_vec()]);
        let out = Serializer::new(&schema).serialize(&batch).unwrap();
        assert_eq!(out.len(), 6);
        let again = decode_all(&schema, &out);
        assert_eq!(cells(&again), cells(&batch), "{tf:?}");
    }
}

#[test]
fn unsigned_columns_are_written_as_their_exact_numbers_and_read_back() {
    let schema = json_table(vec![col("u", UBigint), col("ui", UInt)]);
    let rows = r#"{"u": 18446744073709551615, "ui": 4294967295} {"u": 0, "ui": 0}
        {"u": 9007199254740993} {}"#;
    let batch = decode_all_raw(&schema, &[rows.as_bytes()]);
    let out = Serializer::new(&schema).serialize(&batch).unwrap();
    let text: Vec<String> = out
        .iter()
        .map(|p| String::from_utf8(p.clone()).unwrap())
        .collect();
    assert_eq!(
        text,
        vec![
            r#"{"u":18446744073709551615,"ui":4294967295}"#,
            r#"{"u":0,"ui":0}"#,
            r#"{"u":9007199254740993}"#,
            "{}",
        ]
    );
    assert_eq!(
        cells(&decode_all_raw(
            &schema,
            &[&out[0], &out[1], &out[2], &out[3]]
        )),
        cells(&batch)
    );
    assert_eq!(cell(&batch, "u", 0), Val::U64(u64::MAX));
}

#[test]
fn epoch_units_round_trip_and_refuse_truncation() {
    let whole_seconds = r#"{"ts": "2024-05-01T12:00:00Z"} {"ts": "1969-12-31T23:59:59Z"}"#;
    let millis = r#"{"ts": "2024-05-01T12:00:00.123Z"}"#;
    for (tf, payload, first) in [
        (EpochSeconds, whole_seconds, "1714564800"),
        (EpochMillis, millis, "1714564800123"),
        (EpochMicros, millis, "1714564800123000"),
        (EpochNanos, millis, "1714564800123000000"),
    ] {
        let batch = decode_all(&every_type(Rfc3339), &[payload.as_bytes().to_vec()]);
        let schema = every_type(tf);
        let out = Serializer::new(&schema).serialize(&batch).unwrap();
        assert_eq!(
            String::from_utf8(out[0].clone()).unwrap(),
            format!(r#"{{"ts":{first}}}"#)
        );
        assert_eq!(cells(&decode_all(&schema, &out)), cells(&batch), "{tf:?}");
    }
    let batch = decode_all(
        &every_type(Rfc3339),
        &[br#"{"ts": "2024-05-01T12:00:00Z"} {"ts": "2024-05-01T12:00:00.5Z"}"#.to_vec()],
    );
    let e = Serializer::new(&every_type(EpochSeconds))
        .serialize(&batch)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "row 1 of the batch: column 'ts' (TIMESTAMP): 2024-05-01T12:00:00.500Z is not a whole number of the unit of 'json.timestamp-format' = 'epoch-seconds'; writing it would truncate it"
    );
}

#[test]
fn raw_formats_round_trip_and_never_send_empty_messages() {
    let rs = table(Format::RawString, Rfc3339, vec![col("value", Text)]);
    let batch = decode_all_raw(&rs, &[b"Hello", "é\n".as_bytes()]);
    let out = Serializer::new(&rs).serialize(&batch).unwrap();
    assert_eq!(out, vec![b"Hello".to_vec(), "é\n".as_bytes().to_vec()]);
    assert_eq!(
        cells(&decode_all_raw(&rs, &[&out[0], &out[1]])),
        cells(&batch)
    );

    let empty = decode_all_raw(&rs, &[b"x", b""]);
    let e = Serializer::new(&rs)
        .serialize(&empty)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "row 1 of the batch would be an empty message (Pub/Sub rejects a message without data or attributes)"
    );
    let nulls = RecordBatch::try_new(
        rs.arrow_schema(),
        vec![std::sync::Arc::new(arrow::array::StringArray::from(vec![
            None::<&str>,
        ]))],
    )
    .unwrap();
    let e = Serializer::new(&rs)
        .serialize(&nulls)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("row 0 of the batch would be an empty message"),
        "{e}"
    );

    let rb = table(Format::RawBytes, Rfc3339, vec![col("value", Bytea)]);
    let batch = decode_all_raw(&rb, &[&[0xff, 0], b"a"]);
    let out = Serializer::new(&rb).serialize(&batch).unwrap();
    assert_eq!(out, vec![vec![0xff, 0], b"a".to_vec()]);
    let empty = decode_all_raw(&rb, &[b""]);
    let e = Serializer::new(&rb)
        .serialize(&empty)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("row 0 of the batch would be an empty message"),
        "{e}"
    );

    let wrong = table(Format::RawBytes, Rfc3339, vec![col("value", Text)]);
    let e = Serializer::new(&wrong)
        .serialize(&batch)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("needs exactly one non-metadata column: value BYTEA"),
        "{e}"
    );
}

fn decode_all_raw(schema: &ConnectionSchema, payloads: &[&[u8]]) -> RecordBatch {
    let mut d = Deserializer::new(schema).unwrap();
    for p in payloads {
        d.deserialize(&Bytes::copy_from_slice(p), &[]).unwrap();
    }
    d.flush().unwrap().unwrap()
}

#[test]
fn invalid_json_text_and_mismatched_columns_are_refused() {
    let schema = json_table(vec![col("j", Json)]);
    let batch = RecordBatch::try_new(
        schema.arrow_schema(),
        vec![std::sync::Arc::new(arrow::array::StringArray::from(vec![
            r#"{"b": 1,  "a": 2}"#,
            "{not json",
        ]))],
    )
    .unwrap();
    let ser = Serializer::new(&schema);
    let e = ser.serialize(&batch).unwrap_err().to_string();
    assert!(
        e.starts_with("row 1 of the batch: column 'j' (JSON): value is not valid JSON"),
        "{e}"
    );
    let first = ser.serialize(&batch.slice(0, 1)).unwrap();
    assert_eq!(first, vec![br#"{"j":{"a":2,"b":1}}"#.to_vec()]);
    let other = json_table(vec![col("j", Bigint)]);
    let e = Serializer::new(&other)
        .serialize(&batch)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("column 'j' (BIGINT) arrives as Arrow Utf8"),
        "{e}"
    );
}
