//! Avro rows both ways, by revision, with the column contract (emulator-free; the
//! end-to-end tests publish through the emulator's own schema validation).

use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int32Type, Int64Type, TimestampNanosecondType};
use bytes::Bytes;

use super::*;
use crate::{Deserializer, Serializer};
use pubsub_engine_types::{ConnectionSchema, FieldType, Format, SourceField};

const V1: &str = r#"{"type":"record","name":"Bid","namespace":"ex","fields":[
  {"name":"auction","type":"long"},
  {"name":"price","type":["null","double"],"default":null},
  {"name":"channel","type":{"type":"enum","name":"Channel","symbols":["web","app"]}},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
  {"name":"tag","type":["null","bytes"],"default":null},
  {"name":"extra","type":["null",{"type":"record","name":"Extra","fields":[{"name":"n","type":"int"},{"name":"c","type":"Channel"}]}],"default":null}
]}"#;

/// V1 with an added optional field and `tag` dropped.
const V2: &str = r#"{"type":"record","name":"Bid","namespace":"ex","fields":[
  {"name":"auction","type":"long"},
  {"name":"price","type":["null","double"],"default":null},
  {"name":"channel","type":{"type":"enum","name":"Channel","symbols":["web","app"]}},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
  {"name":"extra","type":["null",{"type":"record","name":"Extra","fields":[{"name":"n","type":"int"},{"name":"c","type":"Channel"}]}],"default":null},
  {"name":"url","type":["null","string"],"default":null}
]}"#;

fn rev(def: &str, id: &str) -> Arc<AvroSchema> {
    Arc::new(AvroSchema::parse("projects/p/schemas/bids", id, def).unwrap())
}

fn table(cols: &[(&str, FieldType, bool)]) -> ConnectionSchema {
    let fields = cols
        .iter()
        .map(|(n, t, required)| {
            let mut f = SourceField::new(*n, *t);
            f.required = *required;
            f
        })
        .collect();
    ConnectionSchema::new(Format::Avro, fields)
}

fn bids() -> ConnectionSchema {
    table(&[
        ("auction", FieldType::Bigint, true),
        ("price", FieldType::Double, false),
        ("channel", FieldType::Text, false),
        ("at", FieldType::Timestamp, false),
        ("url", FieldType::Text, false),
        ("extra", FieldType::Json, false),
    ])
}

fn decode(
    schema: &ConnectionSchema,
    w: &AvroSchema,
    enc: AvroEncoding,
    payload: &[u8],
) -> Result<RecordBatch, String> {
    let mut d = Deserializer::new(schema).unwrap();
    d.deserialize_avro(&Bytes::copy_from_slice(payload), w, enc, &[])
        .map_err(|e| e.reason)?;
    Ok(d.flush().unwrap().unwrap())
}

#[test]
fn json_encoding_with_wrapped_unions_decodes_exactly() {
    let w = rev(V1, "r1");
    let b = decode(
        &bids(),
        &w,
        AvroEncoding::Json,
        br#"{"auction": 9007199254740993, "price": {"double": 2.5}, "channel": "app", "at": 1700000000123456, "tag": null, "extra": {"ex.Extra": {"n": 3, "c": "web"}}, "ignored": 1}"#,
    )
    .unwrap();
    assert_eq!(
        b.column(0).as_primitive::<Int64Type>().value(0),
        9007199254740993
    );
    assert_eq!(b.column(1).as_primitive::<Float64Type>().value(0), 2.5);
    assert_eq!(b.column(2).as_string::<i32>().value(0), "app");
    assert_eq!(
        b.column(3)
            .as_primitive::<TimestampNanosecondType>()
            .value(0),
        1_700_000_000_123_456_000
    );
    // V1 has no `url`: NULL.
    assert!(b.column(4).is_null(0));
    assert_eq!(
        b.column(5).as_string::<i32>().value(0),
        r#"{"c":"web","n":3}"#
    );
}

#[test]
fn json_encoding_refuses_what_is_not_exact() {
    let w = rev(V1, "r1");
    let base = |auction: &str, price: &str| {
        format!(
            r#"{{"auction": {auction}, "price": {price}, "channel": "web", "at": 0, "tag": null, "extra": null}}"#
        )
    };
    for (payload, want) in [
        (base("1.5", "null"), "is not a \"long\""),
        (base("9223372036854775808", "null"), "is not a \"long\""),
        (base("1", "2.5"), "not a union value"),
        (base("1", r#"{"float": 2.5}"#), "'float' is not a branch"),
        (r#"{"auction": 1, "auction": 2, "price": null, "channel": "web", "at": 0, "tag": null, "extra": null}"#.to_string(), "key 'auction' twice"),
        (r#"{"auction": 1, "channel": "web", "at": 0, "tag": null, "extra": null}"#.to_string(), "has no field 'price'"),
        (base("1", "null").replace("\"web\"", "\"tv\""), "not a symbol of enum Channel"),
    ] {
        let e = decode(&bids(), &w, AvroEncoding::Json, payload.as_bytes()).unwrap_err();
        assert!(e.contains(want), "{payload}: {e}");
        assert!(e.contains("schema projects/p/schemas/bids revision r1"), "{e}");
    }
}

#[test]
fn an_older_and_a_newer_revision_both_decode_into_the_table() {
    let (v1, v2) = (rev(V1, "r1"), rev(V2, "r2"));
    let schema = bids();
    // Written by the sink under each revision, read back under the same one.
    for (w, url) in [(&v1, None), (&v2, Some("https://x"))] {
        let out = table(&[
            ("auction", FieldType::Bigint, true),
            ("channel", FieldType::Text, true),
            ("at", FieldType::Timestamp, true),
        ]);
        let mut json = format!(r#"{{"auction":7,"price":null,"channel":"web","at":5,"extra":null"#);
        if w.revision() == "r1" {
            json.push_str(r#","tag":{"bytes":"\u00ff\u0000"}}"#);
        } else {
            json.push_str(&format!(r#","url":{{"string":"{}"}}}}"#, url.unwrap()));
        }
        let b = decode(&schema, w, AvroEncoding::Json, json.as_bytes()).unwrap();
        assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), 7);
        assert_eq!(b.column(4).is_null(0), url.is_none());
        let _ = out;
    }
}

#[test]
fn binary_round_trip_through_the_sink_writer_and_the_source_reader() {
    let w = rev(V2, "r2");
    let sink = table(&[
        ("auction", FieldType::Bigint, true),
        ("price", FieldType::Double, false),
        ("channel", FieldType::Text, true),
        ("at", FieldType::Timestamp, true),
        ("extra", FieldType::Json, false),
    ]);
    let rows = decode(
        &sink,
        &w,
        AvroEncoding::Json,
        br#"{"auction":-3,"price":{"double":1e300},"channel":"app","at":-1,"extra":{"ex.Extra":{"n":1,"c":"app"}},"url":null}"#,
    )
    .unwrap();
    for enc in [AvroEncoding::Binary, AvroEncoding::Json] {
        let s = Serializer::avro(&sink, w.clone(), enc).unwrap();
        let payloads = s.serialize(&rows).unwrap();
        let back = decode(&sink, &w, enc, &payloads[0]).unwrap();
        assert_eq!(back, rows, "{enc}");
    }
}

#[test]
fn the_sink_writer_refuses_columns_the_revision_cannot_hold() {
    let w = rev(V1, "r1");
    let cases = [
        (
            vec![
                ("auction", FieldType::Bigint, true),
                ("nope", FieldType::Text, false),
            ],
            "column 'nope' has no field",
        ),
        (
            vec![
                ("channel", FieldType::Text, true),
                ("at", FieldType::Timestamp, true),
            ],
            "field 'auction' (\"long\")",
        ),
        (
            vec![
                ("auction", FieldType::Text, true),
                ("channel", FieldType::Text, true),
                ("at", FieldType::Timestamp, true),
            ],
            "column 'auction' (TEXT) cannot be written into field 'auction'",
        ),
    ];
    for (cols, want) in cases {
        let Err(e) = Serializer::avro(&table(&cols), w.clone(), AvroEncoding::Binary) else {
            panic!("{want}: accepted")
        };
        assert!(e.contains(want), "{e}");
        assert!(e.contains("revision r1"), "{e}");
    }
}

#[test]
fn the_sink_writer_fails_a_row_whose_value_does_not_fit() {
    let w = rev(
        r#"{"type":"record","name":"R","fields":[{"name":"n","type":"int"},{"name":"t","type":["null",{"type":"long","logicalType":"timestamp-millis"}]}]}"#,
        "r1",
    );
    let schema = table(&[
        ("n", FieldType::Bigint, false),
        ("t", FieldType::Timestamp, false),
    ]);
    let batch = RecordBatch::try_new(
        schema.arrow_schema(),
        vec![
            Arc::new(arrow::array::Int64Array::from(vec![
                Some(1),
                Some(1 << 40),
                None,
                Some(2),
            ])),
            Arc::new(arrow::array::TimestampNanosecondArray::from(vec![
                Some(2_000_000),
                None,
                None,
                Some(1),
            ])),
        ],
    )
    .unwrap();
    let s = Serializer::avro(&schema, w.clone(), AvroEncoding::Binary).unwrap();
    let rows = s.serialize_rows(&batch).unwrap();
    assert!(rows[0].is_ok());
    assert!(
        rows[1]
            .as_ref()
            .unwrap_err()
            .contains("1099511627776 does not fit \"int\""),
        "{:?}",
        rows[1]
    );
    assert!(
        rows[2]
            .as_ref()
            .unwrap_err()
            .contains("NULL cannot be written into field 'n'"),
        "{:?}",
        rows[2]
    );
    assert!(
        rows[3].as_ref().unwrap_err().contains("would truncate"),
        "{:?}",
        rows[3]
    );
    let back = decode(&schema, &w, AvroEncoding::Binary, rows[0].as_ref().unwrap()).unwrap();
    assert_eq!(
        back.column(1)
            .as_primitive::<TimestampNanosecondType>()
            .value(0),
        2_000_000
    );
}

/// `u` and `ui` as `long`, `small` as `int`: unsigned columns read every Avro integer
/// that is theirs exactly, and refuse a negative one or one above INT UNSIGNED.
const UNSIGNED: &str = r#"{"type":"record","name":"U","fields":[
  {"name":"u","type":"long"},{"name":"ui","type":["null","long"],"default":null},
  {"name":"small","type":"int"}]}"#;

fn unsigned_table() -> ConnectionSchema {
    table(&[
        ("u", FieldType::UBigint, true),
        ("ui", FieldType::UInt, false),
        ("small", FieldType::UInt, true),
    ])
}

#[test]
fn unsigned_columns_read_avro_integers_exactly_or_refuse_them() {
    use arrow::datatypes::{UInt32Type, UInt64Type};
    let w = rev(UNSIGNED, "r1");
    let json =
        |u: &str, ui: &str, small: &str| format!(r#"{{"u": {u}, "ui": {ui}, "small": {small}}}"#);
    let b = decode(
        &unsigned_table(),
        &w,
        AvroEncoding::Json,
        json(
            "9223372036854775807",
            r#"{"long": 4294967295}"#,
            "2147483647",
        )
        .as_bytes(),
    )
    .unwrap();
    assert_eq!(
        b.column(0).as_primitive::<UInt64Type>().value(0),
        i64::MAX as u64
    );
    assert_eq!(b.column(1).as_primitive::<UInt32Type>().value(0), u32::MAX);
    assert_eq!(
        b.column(2).as_primitive::<UInt32Type>().value(0),
        i32::MAX as u32
    );
    let b = decode(
        &unsigned_table(),
        &w,
        AvroEncoding::Json,
        json("0", "null", "0").as_bytes(),
    )
    .unwrap();
    assert_eq!(b.column(0).as_primitive::<UInt64Type>().value(0), 0);
    assert!(b.column(1).is_null(0));
    for (payload, want) in [
        (
            json("-1", "null", "0"),
            "column 'u' (BIGINT UNSIGNED): field 'u' (\"long\") of schema projects/p/schemas/bids revision r1: long -1 is out of range for BIGINT UNSIGNED (0..=18446744073709551615)",
        ),
        (
            json("1", r#"{"long": 4294967296}"#, "0"),
            "column 'ui' (INT UNSIGNED): field 'ui' ([\"null\",\"long\"]) of schema projects/p/schemas/bids revision r1: long 4294967296 is out of range for INT UNSIGNED (0..=4294967295)",
        ),
        (
            json("1", r#"{"long": -1}"#, "0"),
            "long -1 is out of range for INT UNSIGNED",
        ),
        (json("1", "null", "-1"), "int -1 is out of range for INT UNSIGNED"),
        // What a `long` cannot hold never reaches the column.
        (json("18446744073709551616", "null", "0"), "is not a \"long\""),
        (json("1.5", "null", "0"), "is not a \"long\""),
    ] {
        let e = decode(&unsigned_table(), &w, AvroEncoding::Json, payload.as_bytes()).unwrap_err();
        assert!(e.contains(want), "{payload}: {e}");
    }
}

#[test]
fn int_unsigned_round_trips_through_a_long_and_bigint_unsigned_is_refused_when_planned() {
    use arrow::array::UInt32Array;
    let w = rev(UNSIGNED, "r1");
    let sink = table(&[
        ("u", FieldType::Bigint, true),
        ("ui", FieldType::UInt, false),
        ("small", FieldType::UInt, true),
    ]);
    let batch = RecordBatch::try_new(
        sink.arrow_schema(),
        vec![
            Arc::new(arrow::array::Int64Array::from(vec![1, 2, 3])),
            Arc::new(UInt32Array::from(vec![Some(u32::MAX), None, Some(0)])),
            Arc::new(UInt32Array::from(vec![0, i32::MAX as u32, u32::MAX])),
        ],
    )
    .unwrap();
    for enc in [AvroEncoding::Binary, AvroEncoding::Json] {
        let s = Serializer::avro(&sink, w.clone(), enc).unwrap();
        let rows = s.serialize_rows(&batch).unwrap();
        // `small` is an `int`: 4294967295 fails its row, never wraps.
        let e = rows[2].as_ref().unwrap_err();
        assert!(
            e.contains("column 'small' (INT UNSIGNED): field 'small' (\"int\")")
                && e.contains("4294967295 does not fit \"int\""),
            "{e}"
        );
        for row in 0..2 {
            let back = decode(&sink, &w, enc, rows[row].as_ref().unwrap()).unwrap();
            assert_eq!(back, batch.slice(row, 1), "{enc} row {row}");
        }
    }
    let Err(e) = Serializer::avro(&unsigned_table(), w, AvroEncoding::Binary) else {
        panic!("a BIGINT UNSIGNED column into a long was accepted")
    };
    assert!(
        e.starts_with("column 'u' (BIGINT UNSIGNED) cannot be written into field 'u' (\"long\") of schema projects/p/schemas/bids revision r1: no Avro type holds every BIGINT UNSIGNED value exactly"),
        "{e}"
    );
}

#[test]
fn binary_decoding_checks_values_against_the_columns() {
    let w = rev(
        r#"{"type":"record","name":"R","fields":[{"name":"n","type":"long"},{"name":"f","type":"long"}]}"#,
        "r1",
    );
    let s = table(&[("n", FieldType::Int, true), ("f", FieldType::Double, true)]);
    let enc = |n: i64, f: i64| {
        apache_avro::to_avro_datum(
            &w.schema,
            apache_avro::types::Value::Record(vec![
                ("n".into(), apache_avro::types::Value::Long(n)),
                ("f".into(), apache_avro::types::Value::Long(f)),
            ]),
        )
        .unwrap()
    };
    let b = decode(&s, &w, AvroEncoding::Binary, &enc(5, 1 << 53)).unwrap();
    assert_eq!(b.column(0).as_primitive::<Int32Type>().value(0), 5);
    let e = decode(&s, &w, AvroEncoding::Binary, &enc(1 << 31, 0)).unwrap_err();
    assert!(
        e.contains("column 'n' (INT): field 'n' (\"long\")")
            && e.contains("long 2147483648 does not fit"),
        "{e}"
    );
    let e = decode(&s, &w, AvroEncoding::Binary, &enc(0, (1 << 53) + 1)).unwrap_err();
    assert!(e.contains("column 'f' (DOUBLE)"), "{e}");
    let mut long = enc(1, 1);
    long.push(0);
    assert!(decode(&s, &w, AvroEncoding::Binary, &long)
        .unwrap_err()
        .contains("1 bytes after"));
    assert!(decode(&s, &w, AvroEncoding::Binary, &[0x80])
        .unwrap_err()
        .contains("not Avro BINARY"));
    // A NOT NULL column the revision lacks.
    let s = table(&[
        ("n", FieldType::Bigint, true),
        ("gone", FieldType::Text, true),
    ]);
    let e = decode(&s, &w, AvroEncoding::Binary, &enc(1, 1)).unwrap_err();
    assert!(e.contains("column 'gone' (TEXT) is NOT NULL but schema projects/p/schemas/bids revision r1 has no field 'gone'"), "{e}");
}

#[test]
fn fields_map_to_column_types() {
    let f = rev(V1, "r1").fields();
    let t: Vec<(&str, Option<FieldType>, bool)> = f
        .iter()
        .map(|f| (f.name.as_str(), f.column_type, f.nullable))
        .collect();
    assert_eq!(
        t,
        vec![
            ("auction", Some(FieldType::Bigint), false),
            ("price", Some(FieldType::Double), true),
            ("channel", Some(FieldType::Text), false),
            ("at", Some(FieldType::Timestamp), false),
            ("tag", Some(FieldType::Bytea), true),
            ("extra", Some(FieldType::Json), true),
        ]
    );
    let e = AvroSchema::parse("s", "r", r#""long""#).unwrap_err();
    assert!(e.contains("is not an Avro record"), "{e}");
    let e = AvroSchema::parse("s", "r", r#"{"type":"record"}"#).unwrap_err();
    assert!(e.contains("schema s revision r is not valid Avro"), "{e}");
    let d = rev(
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"int","logicalType":"date"}}]}"#,
        "r",
    );
    assert_eq!(d.fields()[0].column_type, None);
}

/// Bytes inside a nested record go into a JSON column as base64 and come back out of it
/// as the same bytes, in both encodings (a newcomer saw `\u0001\u0002` written back as the
/// four bytes `AQI=`); text that is not base64 fails the row.
#[test]
fn nested_bytes_round_trip_through_a_json_column() {
    let w = rev(
        r#"{"type":"record","name":"R","fields":[
          {"name":"nested","type":{"type":"record","name":"N","fields":[
            {"name":"b","type":["null","bytes"]},
            {"name":"f","type":{"type":"fixed","name":"F","size":2}}]}}]}"#,
        "r1",
    );
    let cols = table(&[("nested", FieldType::Json, true)]);
    let rows = decode(
        &cols,
        &w,
        AvroEncoding::Json,
        br#"{"nested":{"b":{"bytes":"\u0001\u0002"},"f":"\u00ff\u0000"}}"#,
    )
    .unwrap();
    assert_eq!(
        rows.column(0).as_string::<i32>().value(0),
        r#"{"b":"AQI=","f":"/wA="}"#
    );
    for enc in [AvroEncoding::Binary, AvroEncoding::Json] {
        let s = Serializer::avro(&cols, w.clone(), enc).unwrap();
        let payloads = s.serialize(&rows).unwrap();
        let back = decode(&cols, &w, enc, &payloads[0]).unwrap();
        assert_eq!(back, rows, "{enc}");
    }
    let json = Serializer::avro(&cols, w.clone(), AvroEncoding::Json).unwrap();
    let payload = json.serialize(&rows).unwrap().remove(0);
    assert!(
        String::from_utf8_lossy(&payload).contains(r#""b":{"bytes":"\u0001\u0002"}"#),
        "{}",
        String::from_utf8_lossy(&payload)
    );
    let bad = RecordBatch::try_new(
        cols.arrow_schema(),
        vec![Arc::new(arrow::array::StringArray::from(vec![
            r#"{"b":"not base64!","f":"/wA="}"#,
        ]))],
    )
    .unwrap();
    let failed = format!("{:?}", json.serialize_rows(&bad).unwrap()[0]);
    assert!(
        failed.contains("field 'b'") && failed.contains("not base64!"),
        "{failed}"
    );
}

/// Revision `id` of schema `bids` with `siblings` (decision 0031).
fn rev_among(def: &str, id: &str, siblings: &[&Arc<AvroSchema>]) -> Arc<AvroSchema> {
    Arc::new(
        AvroSchema::parse("projects/p/schemas/bids", id, def)
            .unwrap()
            .with_siblings(siblings.iter().map(|s| Arc::clone(s)).collect()),
    )
}

/// `id`, `name` and an optional `note`.
const WITH_NOTE: &str = r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"},{"name":"note","type":["null","string"],"default":null}]}"#;
/// `WITH_NOTE` without `note`: Pub/Sub's validation reads a payload of `WITH_NOTE` with
/// it (the emulator ignores the bytes after the record and the keys it lacks) and names it.
const WITHOUT_NOTE: &str = r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"},{"name":"name","type":"string"}]}"#;

fn notes() -> ConnectionSchema {
    table(&[
        ("id", FieldType::Bigint, true),
        ("name", FieldType::Text, true),
        ("note", FieldType::Text, false),
    ])
}

/// (id, name, note) of the one row of `b`.
fn note_row(b: &RecordBatch) -> (i64, String, Option<String>) {
    let note = b.column(2).as_string::<i32>();
    (
        b.column(0).as_primitive::<Int64Type>().value(0),
        b.column(1).as_string::<i32>().value(0).to_string(),
        note.is_valid(0).then(|| note.value(0).to_string()),
    )
}

#[test]
fn a_payload_named_with_a_revision_that_does_not_read_it_whole_decodes_by_the_one_that_does() {
    let with = rev(WITH_NOTE, "with");
    let bare_without = rev(WITHOUT_NOTE, "without");
    let without = rev_among(WITHOUT_NOTE, "without", &[&with]);
    let with_named = rev_among(WITH_NOTE, "with", &[&bare_without]);
    let binary = {
        let mut b = apache_avro::to_avro_datum(
            &with.schema,
            apache_avro::types::Value::Record(vec![
                ("id".into(), apache_avro::types::Value::Long(7)),
                ("name".into(), apache_avro::types::Value::String("a".into())),
                (
                    "note".into(),
                    apache_avro::types::Value::Union(
                        1,
                        Box::new(apache_avro::types::Value::String("x".into())),
                    ),
                ),
            ]),
        )
        .unwrap();
        (b.clone(), {
            b.truncate(b.len() - 3);
            b
        })
    };
    let want = (7, "a".to_string(), Some("x".to_string()));
    // Written with `note`, named `without` (a revision without it committed meanwhile).
    let b = decode(&notes(), &without, AvroEncoding::Binary, &binary.0).unwrap();
    assert_eq!(note_row(&b), want);
    let json = br#"{"id": 7, "name": "a", "note": {"string": "x"}}"#;
    let b = decode(&notes(), &without, AvroEncoding::Json, json).unwrap();
    assert_eq!(note_row(&b), want);
    // Without the other revisions: never decoded by `without` (`note` would be NULL).
    let e = decode(&notes(), &bare_without, AvroEncoding::Binary, &binary.0).unwrap_err();
    assert!(e.contains("3 bytes after the Avro BINARY record of schema projects/p/schemas/bids revision without"), "{e}");
    let e = decode(&notes(), &bare_without, AvroEncoding::Json, json).unwrap_err();
    assert!(e.contains("payload has key 'note' that schema projects/p/schemas/bids revision without has no field for"), "{e}");
    // Written without `note` and named so: read by that revision, `note` NULL.
    let b = decode(&notes(), &without, AvroEncoding::Binary, &binary.1).unwrap();
    assert_eq!(note_row(&b), (7, "a".to_string(), None));
    // A JSON record without `note` named `with` (a validation that filled the default):
    // the revision without the field wrote it.
    let short = br#"{"id": 7, "name": "a"}"#;
    let b = decode(&notes(), &with_named, AvroEncoding::Json, short).unwrap();
    assert_eq!(note_row(&b), (7, "a".to_string(), None));
    let e = decode(&notes(), &with, AvroEncoding::Json, short).unwrap_err();
    assert!(e.contains("has no field 'note'"), "{e}");
    // BINARY bytes of `without` named `with`: one byte short for `with`.
    let b = decode(&notes(), &with_named, AvroEncoding::Binary, &binary.1).unwrap();
    assert_eq!(note_row(&b), (7, "a".to_string(), None));
}

#[test]
fn json_keys_no_revision_has_are_ignored_unless_they_name_a_column() {
    let with = rev(WITH_NOTE, "with");
    let without = rev_among(WITHOUT_NOTE, "without", &[&with]);
    // `zzz` is in no revision and no column: ignored, as Pub/Sub's validation does.
    let b = decode(
        &notes(),
        &without,
        AvroEncoding::Json,
        br#"{"id": 1, "name": "a", "zzz": 5}"#,
    )
    .unwrap();
    assert_eq!(note_row(&b), (1, "a".to_string(), None));
    // `note` and `zzz`: no revision has both, and `note` names a column.
    let e = decode(
        &notes(),
        &without,
        AvroEncoding::Json,
        br#"{"id": 1, "name": "a", "note": {"string": "x"}, "zzz": 5}"#,
    )
    .unwrap_err();
    assert!(
        e.contains("payload has keys 'note', 'zzz' that schema projects/p/schemas/bids revision without has no field for, and no other revision of schema projects/p/schemas/bids reads it whole"),
        "{e}"
    );
    // A table without a `note` column loses nothing by ignoring it.
    let ids = table(&[("id", FieldType::Bigint, true)]);
    let b = decode(
        &ids,
        &without,
        AvroEncoding::Json,
        br#"{"id": 1, "name": "a", "note": {"string": "x"}, "zzz": 5}"#,
    )
    .unwrap();
    assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), 1);
}

#[test]
fn revisions_that_read_a_payload_whole_with_different_values_refuse_it() {
    let ab = rev(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"b","type":"long"}]}"#,
        "ab",
    );
    let ba = rev(
        r#"{"type":"record","name":"R","fields":[{"name":"b","type":"long"},{"name":"a","type":"long"}]}"#,
        "ba",
    );
    let a_only = rev_among(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}"#,
        "a",
        &[&ab, &ba],
    );
    // 1 then 2: `a` reads one byte of two; `ab` and `ba` both read both, swapped.
    let payload = [2u8, 4];
    let both = table(&[
        ("a", FieldType::Bigint, true),
        ("b", FieldType::Bigint, false),
    ]);
    let e = decode(&both, &a_only, AvroEncoding::Binary, &payload).unwrap_err();
    assert!(
        e.contains("revisions ab and ba of schema projects/p/schemas/bids both read it whole, with different values"),
        "{e}"
    );
    // A column on which they agree (neither has `c`): no doubt left.
    let c = table(&[("c", FieldType::Bigint, false)]);
    let b = decode(&c, &a_only, AvroEncoding::Binary, &payload).unwrap();
    assert!(b.column(0).is_null(0));
}

/// A declared `T[]` column reads an Avro `array` element by element under T's rules (a
/// `long` into `INT[]` only when it fits), and the sink refuses to write one by name.
#[test]
fn avro_arrays_read_into_array_columns_and_are_refused_for_writing() {
    const TAGGED: &str = r#"{"type":"record","name":"Tagged","namespace":"ex","fields":[
      {"name":"id","type":"long"},
      {"name":"tags","type":["null",{"type":"array","items":["null","string"]}],"default":null},
      {"name":"ns","type":{"type":"array","items":"long"}}
    ]}"#;
    let w = rev(TAGGED, "r1");
    let schema = table(&[
        ("id", FieldType::Bigint, true),
        (
            "tags",
            FieldType::Array(pubsub_engine_types::ArrayOf::Text),
            false,
        ),
        (
            "ns",
            FieldType::Array(pubsub_engine_types::ArrayOf::Int),
            false,
        ),
    ]);
    let b = decode(
        &schema,
        &w,
        AvroEncoding::Json,
        br#"{"id": 1, "tags": {"array": [{"string": "a"}, null]}, "ns": [1, -2]}"#,
    )
    .unwrap();
    let tags = b.column(1).as_list::<i32>().value(0);
    let tags = tags.as_string::<i32>();
    assert_eq!((tags.len(), tags.value(0), tags.is_null(1)), (2, "a", true));
    let ns = b.column(2).as_list::<i32>().value(0);
    assert_eq!(ns.as_primitive::<Int32Type>().values(), &[1, -2]);
    let e = decode(
        &schema,
        &w,
        AvroEncoding::Json,
        br#"{"id": 2, "tags": null, "ns": [1, 4294967296]}"#,
    )
    .unwrap_err();
    assert!(e.contains("element 1 (INT)"), "{e}");
    let Err(e) = Serializer::avro(&schema, w.clone(), AvroEncoding::Binary) else {
        panic!("an array column written to Avro")
    };
    assert!(
        e.contains("column 'tags' (TEXT[])")
            && e.contains("ARRAY columns are not written to Avro yet"),
        "{e}"
    );
}
