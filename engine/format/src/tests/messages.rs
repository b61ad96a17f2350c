//! Whole messages: keys, NULLs, several objects, metadata, raw formats, and the
//! all-or-nothing contract of `deserialize`.

use super::*;
use pubsub_engine_types::FieldType::*;

fn two_columns() -> ConnectionSchema {
    json_table(vec![req("id", Bigint), col("name", Text)])
}

#[test]
fn null_and_missing_keys() {
    let t = two_columns();
    let b = decode_one(&t, br#"{"id": 1, "name": null}"#, &[]).unwrap();
    assert_eq!(cells(&b), vec![vec![Val::I64(1), Val::Null]]);
    let b = decode_one(&t, br#"{"id": 1, "extra": {"name": 2}}"#, &[]).unwrap();
    assert_eq!(cells(&b), vec![vec![Val::I64(1), Val::Null]]);
    assert_eq!(
        decode_one(&t, br#"{"name": "a"}"#, &[]).unwrap_err(),
        "column 'id' (BIGINT) is NOT NULL but the payload has no key 'id'"
    );
    assert_eq!(
        decode_one(&t, br#"{"id": null}"#, &[]).unwrap_err(),
        "column 'id' (BIGINT) is NOT NULL but the value is null"
    );
}

#[test]
fn keys_match_exactly_and_a_case_variant_is_refused() {
    let t = two_columns();
    let e = decode_one(&t, br#"{"id": 1, "Name": "a"}"#, &[]).unwrap_err();
    assert!(
        e.contains("column 'name' (TEXT): the payload has key 'Name' but not 'name'"),
        "{e}"
    );
    let e = decode_one(&t, br#"{"ID": 1}"#, &[]).unwrap_err();
    assert!(e.contains("key 'ID' but not 'id'"), "{e}");
    // Both spellings present: the exact one is used.
    let b = decode_one(&t, br#"{"id": 1, "Name": "x", "name": "a"}"#, &[]).unwrap();
    assert_eq!(cell(&b, "name", 0), s("a"));
    let e = decode_one(&t, br#"{"id": 1, "id": 2}"#, &[]).unwrap_err();
    assert!(e.contains("the payload has key 'id' twice"), "{e}");
}

#[test]
fn payload_shape() {
    let t = two_columns();
    for (payload, want) in [
        (&b""[..], "empty payload"),
        (b" \n\t ", "empty payload"),
        (b"[1, 2]", "payload is a JSON array, not an object: [1, 2]"),
        (b"42", "payload is a JSON number, not an object"),
        (b"Hello", "payload is not valid JSON"),
        (br#"{"id": 1"#, "payload is not valid JSON"),
        (br#"{"id": 1} junk"#, "payload is not valid JSON"),
        (
            br#"{"id": 1} [2]"#,
            "value 2 of the payload is a JSON array, not an object",
        ),
        (b"{\"id\": 1, \"name\": \"\xff\"}", "payload is not UTF-8"),
    ] {
        let e = decode_one(&t, payload, &[]).unwrap_err();
        assert!(
            e.contains(want),
            "{:?}: {e}",
            String::from_utf8_lossy(payload)
        );
    }
}

#[test]
fn several_objects_are_several_rows() {
    let t = two_columns();
    let b = decode_one(
        &t,
        b"{\"id\": 1}\n{\"id\": 2, \"name\": \"b\"}\n {\"id\":3}\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        cells(&b),
        vec![
            vec![Val::I64(1), Val::Null],
            vec![Val::I64(2), s("b")],
            vec![Val::I64(3), Val::Null],
        ]
    );
}

#[test]
fn a_refused_message_leaves_nothing_behind() {
    let t = json_table(vec![
        req("id", Bigint),
        col("name", Text),
        col("tags", Json),
        col("raw", Bytea),
        meta("mid", Text, "message-id", true),
    ]);
    let mut d = Deserializer::new(&t).unwrap();
    let m = |id: &str| vec![FieldValue::String(id.to_string())];
    let ok = Bytes::from_static(br#"{"id": 1, "name": "a", "tags": [1], "raw": "AQ=="}"#);
    assert_eq!(d.deserialize(&ok, &m("m0")).unwrap(), 1);
    // Two good rows, then a bad one, in one message: none of it is kept.
    let bad = Bytes::from_static(
        br#"{"id": 2, "name": "b", "tags": {}} {"id": 3, "raw": "AA=="} {"id": 4.5}"#,
    );
    let e = d.deserialize(&bad, &m("m1")).unwrap_err();
    assert_eq!(e.message_index, 1);
    assert_eq!(e.reason, "column 'id' (BIGINT): 4.5 is not an integer");
    // A bad metadata value also rolls back the payload rows.
    let e = d.deserialize(&ok, &[FieldValue::Null]).unwrap_err();
    assert_eq!(e.message_index, 1);
    assert!(
        e.reason
            .contains("metadata column 'mid' (TEXT) is NOT NULL"),
        "{e}"
    );
    assert!(d
        .deserialize(&ok, &[])
        .unwrap_err()
        .reason
        .contains("metadata values"));
    assert_eq!(d.deserialize(&ok, &m("m2")).unwrap(), 1);
    assert_eq!((d.buffered_messages(), d.buffered_rows()), (2, 2));
    let b = d.flush().unwrap().unwrap();
    let row = vec![Val::I64(1), s("a"), s("[1]"), Val::Bytes(vec![1])];
    let with = |mid: &str| [row.clone(), vec![s(mid)]].concat();
    assert_eq!(cells(&b), vec![with("m0"), with("m2")]);
    assert_eq!(d.flush().unwrap(), None);
    // The buffer is reusable after a flush.
    assert_eq!(d.deserialize(&ok, &m("m3")).unwrap(), 1);
    assert_eq!(cells(&d.flush().unwrap().unwrap()), vec![with("m3")]);
}

#[test]
fn metadata_repeats_for_each_row() {
    let t = json_table(vec![
        meta("mid", Text, "message-id", true),
        col("id", Int),
        meta("published", Timestamp, "publish-time", true),
        meta("attrs", Json, "attributes", true),
        meta("key", Text, "ordering-key", false),
        meta("attempt", Bigint, "delivery-attempt", false),
    ]);
    let md = vec![
        FieldValue::String("42".into()),
        FieldValue::TimestampNanos(7),
        FieldValue::String(r#"{"a":"b"}"#.into()),
        FieldValue::Null,
        FieldValue::Int64(3),
    ];
    let b = decode_one(&t, br#"{"id": 1} {"id": 2}"#, &md).unwrap();
    let row = |id| {
        vec![
            s("42"),
            Val::I32(id),
            Val::Ts(7),
            s(r#"{"a":"b"}"#),
            Val::Null,
            Val::I64(3),
        ]
    };
    assert_eq!(cells(&b), vec![row(1), row(2)]);
    let mut wrong = md.clone();
    wrong[1] = FieldValue::String("x".into());
    let e = decode_one(&t, br#"{"id": 1}"#, &wrong).unwrap_err();
    assert!(
        e.contains("metadata column 'published' (TIMESTAMP) cannot hold"),
        "{e}"
    );
}

#[test]
fn raw_formats() {
    use pubsub_engine_types::TimestampFormat::Rfc3339;
    let rs = table(Format::RawString, Rfc3339, vec![col("value", Text)]);
    let b = decode_one(&rs, b"Hello", &[]).unwrap();
    assert_eq!(cells(&b), vec![vec![s("Hello")]]);
    assert_eq!(
        cells(&decode_one(&rs, b"", &[]).unwrap()),
        vec![vec![s("")]]
    );
    assert!(decode_one(&rs, &[0xff, 0xfe], &[])
        .unwrap_err()
        .contains("payload is not UTF-8"));
    let rb = table(
        Format::RawBytes,
        Rfc3339,
        vec![meta("mid", Text, "message-id", true), req("value", Bytea)],
    );
    let md = [FieldValue::String("m".into())];
    let b = decode_one(&rb, &[0xff, 0, 1], &md).unwrap();
    assert_eq!(cells(&b), vec![vec![s("m"), Val::Bytes(vec![0xff, 0, 1])]]);
    let b = decode_one(&rb, b"", &md).unwrap();
    assert_eq!(cells(&b), vec![vec![s("m"), Val::Bytes(vec![])]]);
    for bad in [
        table(Format::RawString, Rfc3339, vec![col("value", Bytea)]),
        table(Format::RawString, Rfc3339, vec![col("v", Text)]),
        table(Format::RawBytes, Rfc3339, vec![col("value", Text)]),
        table(
            Format::RawBytes,
            Rfc3339,
            vec![col("value", Bytea), col("x", Text)],
        ),
    ] {
        let e = Deserializer::new(&bad).err().expect("refused").to_string();
        assert!(
            e.contains("needs exactly one non-metadata column: value"),
            "{e}"
        );
    }
    let e = Deserializer::new(&json_table(vec![meta("m", Boolean, "message-id", true)]))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("metadata column 'm' cannot have type BOOLEAN"),
        "{e}"
    );
}

/// Issue 32, item 1: the event time of a message is the greatest of its rows' event-time
/// column; a NULL there (or a value that is no timestamp) fails the message, nothing of it
/// stays buffered, and the next message decodes.
#[test]
fn event_time_from_a_column_is_the_greatest_of_the_message_and_never_null() {
    let mut t = json_table(vec![req("id", Bigint), col("ts", Timestamp)]);
    t.event_time = Some(pubsub_engine_types::EventTime {
        column: "ts".into(),
        out_of_orderness: std::time::Duration::ZERO,
    });
    let mut d = Deserializer::new(&t).unwrap();
    let msg = |p: &str| Bytes::copy_from_slice(p.as_bytes());
    let rows = d
        .deserialize(
            &msg(r#"{"id": 1, "ts": "2026-12-04T10:00:02Z"} {"id": 2, "ts": "2026-12-04T10:00:05Z"} {"id": 3, "ts": "2026-12-04T10:00:01Z"}"#),
            &[],
        )
        .unwrap();
    assert_eq!(rows, 3);
    let at = |s: &str| crate::timestamp::parse_rfc3339(s).unwrap();
    assert_eq!(d.last_event_time(), Some(at("2026-12-04T10:00:05Z")));
    for (payload, want) in [
        (
            r#"{"id": 4, "ts": null}"#,
            "the event-time column 'ts' is NULL (row 1 of the message)",
        ),
        (
            r#"{"id": 5, "ts": "2026-12-04T10:00:07Z"} {"id": 6}"#,
            "the event-time column 'ts' is NULL (row 2 of the message)",
        ),
        (r#"{"id": 7, "ts": "tomorrow"}"#, "column 'ts'"),
    ] {
        let e = d.deserialize(&msg(payload), &[]).unwrap_err();
        assert!(e.reason.contains(want), "{payload}: {}", e.reason);
        assert_eq!(d.last_event_time(), None, "{payload}");
    }
    d.deserialize(&msg(r#"{"id": 8, "ts": "2026-12-04T09:00:00Z"}"#), &[])
        .unwrap();
    assert_eq!(d.last_event_time(), Some(at("2026-12-04T09:00:00Z")));
    let b = d.flush().unwrap().unwrap();
    assert_eq!(b.num_rows(), 4, "the failed messages left nothing behind");
    // A table whose event-time column is not TIMESTAMP is refused when set up.
    t.event_time.as_mut().unwrap().column = "id".into();
    let e = Deserializer::new(&t).err().expect("refused").to_string();
    assert!(e.contains("'id' is not a TIMESTAMP column"), "{e}");
}
