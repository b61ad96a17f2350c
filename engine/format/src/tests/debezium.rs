//! Format `debezium_json` read (issue 47): Debezium change events as Debezium Server's
//! Pub/Sub sink publishes them (PostgreSQL connector), with and without Kafka Connect's
//! schema envelope, into the changelog layout (`ConnectionSchema::rows_schema`).

use super::*;

/// `inventory.customers` after an update (`u`), as Debezium 2.x writes it without schemas.
const UPDATE_EVENT: &str = r#"{"before":{"id":1004,"first_name":"Anne","last_name":"Kretchmar","email":"annek@noanswer.org"},"after":{"id":1004,"first_name":"Anne Marie","last_name":"Kretchmar","email":"annek@noanswer.org"},"source":{"version":"2.5.0.Final","connector":"postgresql","name":"dbserver1","ts_ms":1706000000000,"snapshot":"false","db":"postgres","sequence":"[\"24023128\",\"24023184\"]","schema":"inventory","table":"customers","txId":555,"lsn":24023184,"xmin":null},"op":"u","ts_ms":1706000000123,"transaction":null}"#;

/// The same table's delete, inside Kafka Connect's schema envelope (`schemas.enable`).
const DELETE_EVENT: &str = r#"{"schema":{"type":"struct","fields":[],"optional":false,"name":"dbserver1.inventory.customers.Envelope","version":1},"payload":{"before":{"id":1004,"first_name":"Anne Marie","last_name":"Kretchmar","email":"annek@noanswer.org"},"after":null,"source":{"version":"2.5.0.Final","connector":"postgresql","name":"dbserver1","ts_ms":1706000001000,"snapshot":"false","db":"postgres","schema":"inventory","table":"customers","txId":556,"lsn":24023300},"op":"d","ts_ms":1706000001100,"transaction":null}}"#;

/// A snapshot read (`r`).
const READ_EVENT: &str = r#"{"before":null,"after":{"id":1001,"first_name":"Sally","last_name":"Thomas","email":"sally.thomas@acme.com"},"source":{"connector":"postgresql","snapshot":"true"},"op":"r","ts_ms":1706000000000}"#;

fn customers() -> ConnectionSchema {
    table(
        Format::DebeziumJson,
        TimestampFormat::Rfc3339,
        vec![
            req("id", FieldType::Bigint),
            col("first_name", FieldType::Text),
            col("email", FieldType::Text),
        ],
    )
}

fn decode(payload: &str) -> Result<Vec<Vec<String>>, String> {
    let schema = customers();
    let mut d = Deserializer::new(&schema).expect("a changelog decoder");
    d.deserialize(&Bytes::copy_from_slice(payload.as_bytes()), &[])
        .map_err(|e| e.reason)?;
    let b = d.flush().expect("flush").expect("rows");
    assert_eq!(b.schema(), schema.rows_schema());
    Ok((0..b.num_rows())
        .map(|r| {
            b.columns()
                .iter()
                .map(|c| arrow::util::display::array_value_to_string(c, r).unwrap())
                .collect()
        })
        .collect())
}

#[test]
fn changes_decode_into_both_rows_and_their_operation() {
    let row = |cells: &[&str]| vec![cells.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    assert_eq!(
        decode(UPDATE_EVENT).unwrap(),
        row(&[
            "1004",
            "Anne Marie",
            "annek@noanswer.org",
            "1004",
            "Anne",
            "annek@noanswer.org",
            "u"
        ])
    );
    assert_eq!(
        decode(DELETE_EVENT).unwrap(),
        row(&["", "", "", "1004", "Anne Marie", "annek@noanswer.org", "d"])
    );
    // A snapshot read is a create.
    assert_eq!(
        decode(READ_EVENT).unwrap(),
        row(&["1001", "Sally", "sally.thomas@acme.com", "", "", "", "c"])
    );
}

#[test]
fn events_that_change_no_row_exactly_are_refused_naming_why() {
    for (payload, needle) in [
        (
            r#"{"before":null,"after":{"id":1},"op":"u"}"#,
            "has no 'before' row: the source database must log whole old rows (PostgreSQL: REPLICA IDENTITY FULL",
        ),
        (r#"{"before":null,"after":null,"op":"d"}"#, "has no 'before' row"),
        (r#"{"before":{"id":1},"after":{"id":1},"op":"c"}"#, "has a 'before' row, which op 'c' does not have"),
        (r#"{"before":{"id":1},"after":null}"#, "has no 'op'"),
        (r#"{"op":"t","before":null,"after":null}"#, "op is \"t\": only c, r, u and d change rows"),
        (r#"{"before":null,"after":{"id":"x"},"op":"c"}"#, "'after': column 'id' (BIGINT)"),
        (r#"{"before":null,"after":{"first_name":"x"},"op":"c"}"#, "'after': column 'id' (BIGINT) is NOT NULL"),
        (r#"{"before":null,"after":[1],"op":"c"}"#, "'after': payload is a JSON array, not an object"),
        (r#"[1]"#, "payload is not a Debezium change event"),
    ] {
        let e = decode(payload).unwrap_err();
        assert!(e.contains(needle), "{payload}: {e}");
    }
}

#[test]
fn a_refused_event_leaves_the_buffer_as_it_was() {
    let schema = customers();
    let mut d = Deserializer::new(&schema).unwrap();
    let msg = |s: &str| Bytes::copy_from_slice(s.as_bytes());
    d.deserialize(&msg(READ_EVENT), &[]).unwrap();
    // Its before row decodes, its after row does not.
    let bad = r#"{"before":{"id":1},"after":{"id":"x"},"op":"u"}"#;
    assert!(d.deserialize(&msg(bad), &[]).is_err());
    d.deserialize(&msg(UPDATE_EVENT), &[]).unwrap();
    let b = d.flush().unwrap().unwrap();
    assert_eq!(b.num_rows(), 2);
    let ops = b.column(6).as_string::<i32>();
    assert_eq!((ops.value(0), ops.value(1)), ("c", "u"));
}

#[test]
fn a_tombstone_is_a_message_of_no_row() {
    let schema = customers();
    let mut d = Deserializer::new(&schema).unwrap();
    for tombstone in ["", "null", " null\n"] {
        assert_eq!(
            d.deserialize(&Bytes::copy_from_slice(tombstone.as_bytes()), &[]),
            Ok(0),
            "{tombstone:?}"
        );
    }
    d.deserialize(&Bytes::copy_from_slice(READ_EVENT.as_bytes()), &[])
        .unwrap();
    assert_eq!(d.flush().unwrap().unwrap().num_rows(), 1);
}
