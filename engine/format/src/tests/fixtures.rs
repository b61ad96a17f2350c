//! Real Google payloads (`shared/fixtures/payloads/`, see its README) decoded into declared
//! tables, every field checked.

use super::*;
use pubsub_engine_types::FieldType::*;
use pubsub_engine_types::TimestampFormat::Rfc3339;

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/payloads/"
);

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{DIR}{name}")).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn fixture_text(name: &str) -> String {
    String::from_utf8(fixture(name)).unwrap()
}

/// What `serde_json::Value` makes of a JSON text: the canonical form for plain values.
fn value_text(json: &str) -> String {
    serde_json::to_string(&serde_json::from_str::<serde_json::Value>(json).unwrap()).unwrap()
}

/// The fixture's value at `path` as canonical JSON text.
fn sub(json: &str, path: &str) -> Val {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    s(&serde_json::to_string(v.pointer(path).unwrap()).unwrap())
}

#[test]
fn gcs_notification_json_api_v1() {
    let body = fixture("gcs-notification-json-api-v1.json");
    let attrs = attrs_json(&fixture_text("gcs-notification-json-api-v1.attrs.json"));
    let t = json_table(vec![
        meta("message_id", Text, "message-id", true),
        meta("attributes", Json, "attributes", true),
        req("kind", Text),
        req("id", Text),
        req("name", Text),
        req("bucket", Text),
        req("generation", Bigint),
        req("metageneration", Int),
        req("size", Bigint),
        col("contentType", Text),
        req("timeCreated", Timestamp),
        col("updated", Timestamp),
        col("md5Hash", Bytea),
        col("crc32c", Bytea),
        col("etag", Text),
        col("mediaLink", Text),
        col("timeDeleted", Timestamp),
    ]);
    let md = [
        FieldValue::String("2070443601311540".into()),
        FieldValue::String(attrs.clone()),
    ];
    let b = decode_one(&t, &body, &md).unwrap();
    assert_eq!(b.num_rows(), 1);
    let created = ts(1_607_428_286, 395_000_000);
    assert_eq!(
        cells(&b)[0],
        vec![
            s("2070443601311540"),
            s(&attrs),
            s("storage#object"),
            s("example-bucket/test_full_1.csv/1607428286395814"),
            s("test_full_1.csv"),
            s("example-bucket"),
            Val::I64(1_607_428_286_395_814),
            Val::I32(1),
            Val::I64(5),
            s("text/csv"),
            created.clone(),
            created,
            Val::Bytes(vec![
                195, 43, 32, 87, 185, 189, 98, 202, 168, 53, 56, 99, 70, 23, 121, 53
            ]),
            Val::Bytes(vec![185, 48, 60, 7]),
            s("CKbrjICpvu0CEAE="),
            s("https://www.googleapis.com/download/storage/v1/b/example-bucket/o/test_full_1.csv?generation=1607428286395814&alt=media"),
            Val::Null,
        ]
    );
    // The attribute map is canonical JSON: keys sorted, no whitespace.
    assert!(attrs.starts_with(r#"{"bucketId":"example-bucket","eventTime":"#));
}

#[test]
fn gcs_attributes_decode_as_a_table_too() {
    // The attribute maps are JSON objects of strings: microsecond times and int64 strings.
    let t = json_table(vec![
        req("eventTime", Timestamp),
        req("eventType", Text),
        req("objectGeneration", Bigint),
        col("overwroteGeneration", Bigint),
        col("overwrittenByGeneration", Bigint),
        req("payloadFormat", Text),
    ]);
    let b = decode_one(&t, &fixture("gcs-notification-json-api-v1.attrs.json"), &[]).unwrap();
    let event_time = ts(1_607_428_286, 395_668_000);
    assert_eq!(
        cells(&b)[0],
        vec![
            event_time.clone(),
            s("OBJECT_FINALIZE"),
            Val::I64(1_607_428_286_395_814),
            Val::I64(1_607_423_100_840_561),
            Val::Null,
            s("JSON_API_V1"),
        ]
    );
    let b = decode_one(&t, &fixture("gcs-notification-none.attrs.json"), &[]).unwrap();
    assert_eq!(
        cells(&b)[0],
        vec![
            event_time,
            s("OBJECT_DELETE"),
            Val::I64(1_607_423_100_840_561),
            Val::Null,
            Val::I64(1_607_428_286_395_814),
            s("NONE"),
        ]
    );
}

#[test]
fn gcs_notification_none_has_an_empty_body() {
    let body = fixture("gcs-notification-none.txt");
    assert!(body.is_empty());
    let attrs = attrs_json(&fixture_text("gcs-notification-none.attrs.json"));
    let md = [FieldValue::String(attrs.clone())];
    let e = decode_one(
        &json_table(vec![col("name", Text), meta("a", Json, "attributes", true)]),
        &body,
        &md,
    )
    .unwrap_err();
    assert!(e.starts_with("empty payload"), "{e}");
    let rs = table(
        Format::RawString,
        Rfc3339,
        vec![col("value", Text), meta("a", Text, "attributes", true)],
    );
    let b = decode_one(&rs, &body, &md).unwrap();
    assert_eq!(cells(&b), vec![vec![s(""), s(&attrs)]]);
    let rb = table(Format::RawBytes, Rfc3339, vec![col("value", Bytea)]);
    let b = decode_one(&rb, &body, &[]).unwrap();
    assert_eq!(cells(&b), vec![vec![Val::Bytes(vec![])]]);
}

#[test]
fn logging_sink_audit_log() {
    let text = fixture_text("logging-sink-auditlog.json");
    let t = json_table(vec![
        req("insertId", Text),
        req("logName", Text),
        req("severity", Text),
        req("timestamp", Timestamp),
        req("receiveTimestamp", Timestamp),
        req("resource", Json),
        req("protoPayload", Json),
        col("labels", Json),
        col("trace", Text),
    ]);
    let b = decode_one(&t, text.as_bytes(), &[]).unwrap();
    assert_eq!(
        cells(&b)[0],
        vec![
            s("15cp9rve72xt1"),
            s("projects/example-project/logs/cloudaudit.googleapis.com%2Factivity"),
            s("NOTICE"),
            ts(1_589_516_922, 237_027_213),
            ts(1_589_516_922, 900_626_148),
            s(
                r#"{"labels":{"bucket_name":"example-bucket","location":"us","project_id":"example-project"},"type":"gcs_bucket"}"#
            ),
            sub(&text, "/protoPayload"),
            Val::Null,
            Val::Null,
        ]
    );
    let Val::Str(proto) = cell(&b, "protoPayload", 0) else {
        panic!()
    };
    assert!(proto.starts_with(r#"{"@type":"type.googleapis.com/google.cloud.audit.AuditLog","authenticationInfo":{"principalEmail":"user@example.com"},"authorizationInfo":[{"granted":true,"#), "{proto}");
    assert_eq!(proto, value_text(&proto));
    // The attribute carries the same 9-digit time.
    let attrs = fixture_text("logging-sink-auditlog.attrs.json");
    let at = json_table(vec![req("logging.googleapis.com/timestamp", Timestamp)]);
    let b = decode_one(&at, attrs.as_bytes(), &[]).unwrap();
    assert_eq!(cells(&b)[0], vec![ts(1_589_516_922, 237_027_213)]);
}

#[test]
fn cloud_build_status() {
    let text = fixture_text("cloud-build-success.json");
    let t = json_table(vec![
        req("id", Text),
        req("projectId", Text),
        req("status", Text),
        req("steps", Json),
        col("results", Json),
        req("createTime", Timestamp),
        col("startTime", Timestamp),
        col("finishTime", Timestamp),
        col("timeout", Text),
        col("tags", Json),
        col("options", Json),
        col("substitutions", Json),
        col("sourceProvenance", Json),
        col("failureInfo", Json),
        col("statusDetail", Text),
    ]);
    let b = decode_one(&t, text.as_bytes(), &[]).unwrap();
    assert_eq!(
        cells(&b)[0],
        vec![
            s("2b4d61d6-8ded-4395-8c5b-4fcfbdca610d"),
            s("example-project"),
            s("SUCCESS"),
            sub(&text, "/steps"),
            s(r#"{"buildStepImages":["",""],"buildStepOutputs":["",""]}"#),
            ts(1_603_791_216, 588_802_999),
            ts(1_603_791_265, 527_055_121),
            ts(1_603_791_633, 337_406_000),
            s("600s"),
            s(r#"["trigger-f9de2b60-3dc5-4b09-85f9-61d2aafd1a22"]"#),
            s(
                r#"{"dynamicSubstitutions":true,"logging":"LEGACY","machineType":"N1_HIGHCPU_8","substitutionOption":"ALLOW_LOOSE"}"#
            ),
            sub(&text, "/substitutions"),
            sub(&text, "/sourceProvenance"),
            Val::Null,
            Val::Null,
        ]
    );
    let Val::Str(steps) = cell(&b, "steps", 0) else {
        panic!()
    };
    assert!(steps.starts_with(r#"[{"args":["clean","compile","install","-DskipTests"],"entrypoint":"mvn","id":"maven-compile-install","#), "{steps}");
    // Durations are strings, not numbers: refused as BIGINT, with the value named.
    let e = decode_one(
        &json_table(vec![col("timeout", Bigint)]),
        text.as_bytes(),
        &[],
    )
    .unwrap_err();
    assert_eq!(e, r#"column 'timeout' (BIGINT): "600s" is not an integer"#);
}

#[test]
fn pubsub_schema_avro_json() {
    let attrs = attrs_json(&fixture_text("pubsub-schema-avro-json.attrs.json"));
    let t = json_table(vec![
        req("name", Text),
        req("post_abbr", Text),
        meta("attributes", Json, "attributes", true),
    ]);
    let b = decode_one(
        &t,
        &fixture("pubsub-schema-avro-json.json"),
        &[FieldValue::String(attrs.clone())],
    )
    .unwrap();
    assert_eq!(cells(&b), vec![vec![s("Alaska"), s("AK"), s(&attrs)]]);
    assert_eq!(
        attrs,
        r#"{"googclient_schemaencoding":"JSON","googclient_schemaname":"projects/example-project/schemas/us-states-avro","googclient_schemarevisionid":"0a0b0c0d"}"#
    );
}

#[test]
fn scheduler_plain_text() {
    let body = fixture("scheduler-plain-text.txt");
    let rs = table(Format::RawString, Rfc3339, vec![req("value", Text)]);
    assert_eq!(
        cells(&decode_one(&rs, &body, &[]).unwrap()),
        vec![vec![s("Hello")]]
    );
    let e = decode_one(&json_table(vec![col("value", Text)]), &body, &[]).unwrap_err();
    assert!(e.starts_with("payload is not valid JSON"), "{e}");
}
