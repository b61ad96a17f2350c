//! ARRAY columns (`TEXT[]`, issue 48): JSON arrays read element by element under the
//! element type's rules, refused whole when one element does not fit, written back as
//! the same JSON.

use super::*;
use crate::Serializer;
use pubsub_engine_types::ArrayOf;
use Val::*;

fn array(e: ArrayOf) -> FieldType {
    FieldType::Array(e)
}

/// The real Cloud Build notification: `tags` as TEXT[], `steps` as JSON[] (one canonical
/// JSON object per step), `images` absent (NULL).
#[test]
fn a_cloud_build_notification_reads_its_arrays() {
    let payload = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/payloads/cloud-build-success.json"
    ))
    .unwrap();
    let schema = json_table(vec![
        col("id", FieldType::Text),
        col("tags", array(ArrayOf::Text)),
        col("steps", array(ArrayOf::Json)),
        col("images", array(ArrayOf::Text)),
    ]);
    let b = decode_one(&schema, &payload, &[]).unwrap();
    assert_eq!(
        cell(&b, "tags", 0),
        List(vec![s("trigger-f9de2b60-3dc5-4b09-85f9-61d2aafd1a22")])
    );
    let List(steps) = cell(&b, "steps", 0) else {
        panic!("steps is not a list");
    };
    assert_eq!(steps.len(), 2);
    let Str(first) = &steps[0] else {
        panic!("a step is not JSON text");
    };
    let step: serde_json::Value = serde_json::from_str(first).unwrap();
    assert_eq!(step["id"], "maven-compile-install");
    assert_eq!(step["args"][3], "-DskipTests");
    assert_eq!(cell(&b, "images", 0), Null);
}

#[test]
fn elements_follow_their_types_rules_and_null_elements_stay() {
    let schema = json_table(vec![
        col("n", array(ArrayOf::Bigint)),
        col("u", array(ArrayOf::UInt)),
        col("ts", array(ArrayOf::Timestamp)),
        col("ok", array(ArrayOf::Boolean)),
    ]);
    let b = decode_one(
        &schema,
        br#"{"n": [1, "-9223372036854775808", null, 2e3], "u": [], "ts": ["1970-01-01T00:00:01Z"], "ok": null}"#,
        &[],
    )
    .unwrap();
    assert_eq!(
        cells(&b),
        vec![vec![
            List(vec![I64(1), I64(i64::MIN), Null, I64(2000)]),
            List(vec![]),
            List(vec![ts(1, 0)]),
            Null,
        ]]
    );
}

/// One element that does not fit refuses the whole message, naming the column, the
/// element's position and type, and nothing of it is left in the next batch.
#[test]
fn an_element_that_does_not_fit_refuses_the_message_and_leaves_nothing() {
    let schema = json_table(vec![
        col("k", FieldType::Text),
        col("n", array(ArrayOf::Int)),
    ]);
    let mut d = Deserializer::new(&schema).unwrap();
    for (payload, want) in [
        (
            r#"{"k": "a", "n": [1, 2, 2147483648]}"#,
            "column 'n' (INT[]): element 2 (INT): 2147483648 is out of range for INT",
        ),
        (
            r#"{"k": "a", "n": [1, "x"]}"#,
            "column 'n' (INT[]): element 1 (INT): \"x\" is not an integer",
        ),
        (
            r#"{"k": "a", "n": 5}"#,
            "column 'n' (INT[]): 5 is a JSON number, not an array",
        ),
        (
            r#"{"k": "a", "n": [[1]]}"#,
            "column 'n' (INT[]): element 0 (INT): [1] is a JSON array, not an integer",
        ),
    ] {
        let e = d
            .deserialize(&bytes::Bytes::copy_from_slice(payload.as_bytes()), &[])
            .expect_err(payload);
        assert!(e.reason.starts_with(want), "{payload}: {}", e.reason);
    }
    // The array read whole, then a later value refused: the message's elements go too.
    let e = d
        .deserialize(
            &bytes::Bytes::from_static(br#"{"n": [1, 2, 3], "k": 5}"#),
            &[],
        )
        .expect_err("k is not TEXT");
    assert!(e.reason.starts_with("column 'k' (TEXT)"), "{}", e.reason);
    let e = d
        .deserialize(
            &bytes::Bytes::from_static(br#"{"k": "a", "n": ["x"]}"#),
            &[],
        )
        .expect_err("x is not TEXT");
    assert!(e.reason.contains("element 0 (INT)"), "{}", e.reason);
    d.deserialize(&bytes::Bytes::from_static(br#"{"k": "b", "n": [7]}"#), &[])
        .unwrap();
    let b = d.flush().unwrap().unwrap();
    assert_eq!(cells(&b), vec![vec![s("b"), List(vec![I32(7)])]]);
}

/// decode(serialize(x)) == x, and the text written is the JSON array of the elements
/// as each element type is written.
#[test]
fn arrays_round_trip_through_json() {
    let schema = json_table(vec![
        col("t", array(ArrayOf::Text)),
        col("d", array(ArrayOf::Double)),
        col("j", array(ArrayOf::Json)),
        col("raw", array(ArrayOf::Bytea)),
    ]);
    let input = br#"{"t": ["a", null, "\"q\""], "d": [0.1, "NaN"], "j": [{"b": 1, "a": [2]}, null, "x"], "raw": ["AP8="]}"#;
    let b = decode_one(&schema, input, &[]).unwrap();
    let out = Serializer::new(&schema).serialize(&b).unwrap();
    assert_eq!(
        String::from_utf8(out[0].clone()).unwrap(),
        r#"{"t":["a",null,"\"q\""],"d":[0.1,"NaN"],"j":[{"a":[2],"b":1},null,"x"],"raw":["AP8="]}"#
    );
    let again = decode_one(&schema, &out[0], &[]).unwrap();
    assert_eq!(cells(&again), cells(&b));
}

#[test]
fn a_text_element_that_is_not_a_string_names_the_array_type_to_declare() {
    let schema = json_table(vec![col("t", array(ArrayOf::Text))]);
    let e = decode_one(&schema, br#"{"t": ["a", {"b": 1}]}"#, &[]).unwrap_err();
    assert!(
        e.starts_with("column 't' (TEXT[]): element 1 (TEXT): {\"b\": 1} is a JSON object, not a string; declare the column JSON[]"),
        "{e}"
    );
}
