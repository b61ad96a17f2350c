//! `format = 'avro'` against the emulator's schema service: messages published through
//! the emulator's own validation (which adds the `googclient_schema*` attributes), two
//! revisions in flight together, JSON and BINARY encodings, and a round trip source ->
//! sink -> source of every supported type; plus each refusal.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use pubsub_connector_core::admin;
use serde_json::{json, Value};
use support::*;

const LIMIT: Duration = Duration::from_secs(240);

const FIELDS_V1: &str = r#"
  {"name":"id","type":"long"},
  {"name":"small","type":"int"},
  {"name":"ok","type":"boolean"},
  {"name":"ratio","type":"float"},
  {"name":"price","type":["null","double"],"default":null},
  {"name":"name","type":"string"},
  {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["bid","ask"]}},
  {"name":"raw","type":"bytes"},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
  {"name":"extra","type":["null",{"type":"record","name":"Extra","fields":[{"name":"n","type":"int"}]}],"default":null}"#;

fn v1() -> String {
    format!(r#"{{"type":"record","name":"Row","namespace":"test","fields":[{FIELDS_V1}]}}"#)
}

/// V1 and an optional field.
fn v2() -> String {
    format!(
        r#"{{"type":"record","name":"Row","namespace":"test","fields":[{FIELDS_V1},
  {{"name":"note","type":["null","string"],"default":null}}]}}"#
    )
}

/// Message `i` in Avro's JSON encoding; from revision 2 on with `note`.
fn message(i: i64, with_note: bool) -> Vec<u8> {
    let mut m = json!({
        "id": i,
        "small": -(i as i32) - 1,
        "ok": i % 2 == 0,
        "ratio": 0.5 + i as f64,
        "price": if i % 3 == 0 { Value::Null } else { json!({"double": 9007199254740993_i64 as f64 + i as f64}) },
        "name": format!("n\u{e9}{i}"),
        "kind": if i % 2 == 0 { "bid" } else { "ask" },
        "raw": "\u{0}\u{ff}A",
        "at": 1_700_000_000_000_001_i64 + i,
        "extra": if i % 4 == 0 { Value::Null } else { json!({"test.Extra": {"n": i}}) },
    });
    if with_note {
        m["note"] = if i % 2 == 0 {
            json!({"string": format!("note {i}")})
        } else {
            Value::Null
        };
    }
    serde_json::to_vec(&m).unwrap()
}

/// The row the JSON sink writes for message `i` (NULL columns left out).
fn expected(i: i64, with_note: bool) -> Value {
    let mut v = json!({
        "id": i,
        "small": -(i as i32) - 1,
        "ok": i % 2 == 0,
        "ratio": 0.5 + i as f64,
        "name": format!("n\u{e9}{i}"),
        "kind": if i % 2 == 0 { "bid" } else { "ask" },
        "raw": "AP9B",
        "at": format!("2023-11-14T22:13:20.{:06}Z", 1 + i),
    });
    if i % 3 != 0 {
        v["price"] = json!(9007199254740993_i64 as f64 + i as f64);
    }
    if i % 4 != 0 {
        v["extra"] = json!({"n": i});
    }
    if with_note && i % 2 == 0 {
        v["note"] = json!(format!("note {i}"));
    }
    v
}

fn with(endpoint: &str, rest: &str) -> String {
    format!("'connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{endpoint}', {rest}")
}

const COLUMNS: &str = "id BIGINT NOT NULL, small INT, ok BOOLEAN, ratio FLOAT, price DOUBLE, name TEXT, kind TEXT, raw BYTEA, at TIMESTAMP, extra JSON, note TEXT";
const SELECT: &str = "id, small, ok, ratio, price, name, kind, raw, at, extra, note";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_revisions_in_json_and_binary_round_trip_through_source_sink_and_source() {
    pubsub_connector_core::wire_log::enable();
    let p = profile();
    let schema = unique("rows-avro");
    let rev1 = admin::create_avro_schema(&p, &schema, &v1()).await.unwrap();
    let (input, input_sub) = bound_topic(&schema, "JSON", "avro-in").await;
    let (mid, mid_sub) = bound_topic(&schema, "BINARY", "avro-mid").await;
    let (out, out_sub) = (unique("avro-out"), unique("avro-out-sub"));
    admin::create_topic(&p, &out).await.unwrap();
    admin::create_subscription(&p, &out_sub, &out, 60)
        .await
        .unwrap();

    // Ten messages under revision 1, then ten with the optional field under revision 2:
    // all twenty wait in the subscription together.
    let first: Vec<Vec<u8>> = (0..10).map(|i| message(i, false)).collect();
    admin::publish_all(&p, &input, first, 100).await.unwrap();
    let rev2 = admin::commit_avro_revision(&p, &schema, &v2())
        .await
        .unwrap();
    let second: Vec<Vec<u8>> = (10..20).map(|i| message(i, true)).collect();
    admin::publish_all(&p, &input, second, 100).await.unwrap();

    let e = endpoint();
    let sql = format!(
        "CREATE TABLE src ({COLUMNS}, attrs JSON METADATA FROM 'attributes') WITH ({src});
         CREATE TABLE mid ({COLUMNS}) WITH ({mid});
         CREATE TABLE mid_src ({COLUMNS}, attrs JSON METADATA FROM 'attributes') WITH ({mid_src});
         CREATE TABLE dst ({COLUMNS}, src_attrs JSON, mid_attrs JSON) WITH ({dst});
         CREATE TABLE seen (id BIGINT, attrs JSON) WITH ({seen});
         INSERT INTO mid SELECT {SELECT} FROM src;
         INSERT INTO seen SELECT id, attrs FROM src;
         INSERT INTO dst SELECT {SELECT}, attrs, attrs FROM mid_src;",
        src = with(
            &e,
            &format!("'subscription' = '{input_sub}', 'format' = 'avro'")
        ),
        mid = with(&e, &format!("'topic' = '{mid}', 'format' = 'avro'")),
        mid_src = with(
            &e,
            &format!("'subscription' = '{mid_sub}', 'format' = 'avro'")
        ),
        dst = with(&e, &format!("'topic' = '{out}'")),
        seen = with(&e, &format!("'topic' = '{out}'")),
    );
    let w = Workdir::new(&sql);
    let stdout = w
        .run_ok(&["--checkpoint-interval", "1s", "--stop-when-idle", "5s"])
        .await;
    assert!(!stdout.is_empty());

    let got: Vec<Value> = admin::drain(&p, &out_sub, 1, Some(40), Duration::from_secs(10))
        .await
        .unwrap()
        .values()
        .map(|v| serde_json::from_slice(v).unwrap())
        .collect();
    assert_eq!(got.len(), 40, "{got:?}");
    let mut rows: HashMap<i64, Value> = HashMap::new();
    let mut revisions: HashMap<i64, String> = HashMap::new();
    for v in got {
        let id = v["id"].as_i64().unwrap();
        if v.get("mid_attrs").is_some() {
            let mut row = v.clone();
            let mid_attrs = row.as_object_mut().unwrap().remove("mid_attrs").unwrap();
            row.as_object_mut().unwrap().remove("src_attrs");
            assert_eq!(
                mid_attrs["googclient_schemaencoding"], "BINARY",
                "{mid_attrs}"
            );
            assert!(rows.insert(id, row).is_none(), "row {id} twice");
        } else {
            let attrs = &v["attrs"];
            assert_eq!(attrs["googclient_schemaencoding"], "JSON", "{attrs}");
            assert!(attrs["googclient_schemaname"]
                .as_str()
                .unwrap()
                .ends_with(&schema));
            let rev = attrs["googclient_schemarevisionid"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(revisions.insert(id, rev).is_none(), "message {id} twice");
        }
    }
    for i in 0..20 {
        assert_eq!(rows[&i], expected(i, i >= 10), "row {i}");
        let want = if i < 10 { &rev1 } else { &rev2 };
        assert_eq!(&revisions[&i], want, "revision of message {i}");
    }
    assert_all_acked(&input_sub);
    assert_all_acked(&mid_sub);
}

/// A topic named after `name` bound to `schema` in `encoding` (`JSON` or `BINARY`), and a
/// subscription on it (ack deadline 60 s): (topic, subscription).
pub(crate) async fn bound_topic(schema: &str, encoding: &str, name: &str) -> (String, String) {
    let p = profile();
    let (topic, sub) = (unique(name), unique(&format!("{name}-sub")));
    admin::create_topic_with_schema(&p, &topic, schema, encoding)
        .await
        .unwrap();
    admin::create_subscription(&p, &sub, &topic, 60)
        .await
        .unwrap();
    (topic, sub)
}

/// `INSERT INTO d (id BIGINT) SELECT id FROM s`, with `s` declaring `columns` (none when
/// empty) and the tables' options `src` and `dst`: refused with exit 2 and `want`.
async fn refused_copy(columns: &str, src: &str, dst: &str, want: &str) {
    let columns = if columns.is_empty() {
        String::new()
    } else {
        format!("({columns}) ")
    };
    refused(
        &format!(
            "CREATE TABLE s {columns}WITH ({src});
             CREATE TABLE d (id BIGINT) WITH ({dst});
             INSERT INTO d SELECT id FROM s;"
        ),
        2,
        want,
    )
    .await;
}

/// Runs `sql` and expects exit `code` with `want` in stderr.
async fn refused(sql: &str, code: i32, want: &str) {
    let w = Workdir::new(sql);
    let child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "5s"]);
    let (got, _out, stderr) = finish(child, LIMIT).await;
    assert_eq!(got, code, "{want}: {stderr}");
    assert!(stderr.contains(want), "want {want:?} in: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_refuses_a_topic_without_schema_a_column_without_field_and_a_deleted_revision() {
    let p = profile();
    let e = endpoint();
    let schema = unique("refuse-avro");
    let rev1 = admin::create_avro_schema(&p, &schema, &v1()).await.unwrap();
    let (plain, plain_sub) = (unique("plain"), unique("plain-sub"));
    admin::create_topic(&p, &plain).await.unwrap();
    admin::create_subscription(&p, &plain_sub, &plain, 60)
        .await
        .unwrap();
    let (bound, bound_sub) = bound_topic(&schema, "JSON", "bound").await;

    // A source on a topic without a schema.
    refused_copy(
        "id BIGINT",
        &with(&e, &format!("'subscription' = '{plain_sub}', 'format' = 'avro'")),
        &with(&e, &format!("'topic' = '{plain}'")),
        &format!("format 'avro' needs a topic with a schema, and topic projects/{PROJECT}/topics/{plain}"),
    )
    .await;
    // A sink column the schema has no field for, and a NOT NULL field without column:
    // refused when the pipeline is planned, before anything starts.
    for (columns, want) in [
        // Revision 1 has no `note`.
        (
            COLUMNS.to_string(),
            "table 'd': its columns do not fit its schema: the sink table cannot be written into topic",
        ),
        (COLUMNS.to_string(), "column 'note' has no field in schema"),
        ("name TEXT".to_string(), "field 'id' (\"long\") of schema"),
    ] {
        refused(
            &format!(
                "CREATE TABLE s ({columns}) WITH ({});
                 CREATE TABLE d ({columns}) WITH ({});
                 INSERT INTO d SELECT * FROM s;",
                with(&e, &format!("'subscription' = '{plain_sub}'")),
                with(&e, &format!("'topic' = '{bound}', 'format' = 'avro'")),
            ),
            2,
            want,
        )
        .await;
    }
    // A message whose revision was deleted: a decode failure naming it.
    admin::publish_all(&p, &bound, vec![message(1, false)], 10)
        .await
        .unwrap();
    admin::commit_avro_revision(&p, &schema, &v2())
        .await
        .unwrap();
    // Pub/Sub then marks the message's revision as deleted.
    admin::delete_schema_revision(&p, &schema, &rev1)
        .await
        .unwrap();
    refused_copy(
        COLUMNS,
        &with(&e, &format!("'subscription' = '{bound_sub}', 'format' = 'avro'")),
        &with(&e, &format!("'topic' = '{plain}'")),
        &format!("was written with a revision of schema projects/{PROJECT}/schemas/{schema} that was deleted since"),
    )
    .await;
}

/// `CREATE TABLE t WITH (...)` without columns on schema-bound topics: a source and a
/// sink take their columns from the schema (a source declaring only a METADATA column
/// gets them too), and the rows go through as with declared columns. Refused with exit 2:
/// no columns and format `json`; no columns and a topic without a schema; a schema with a
/// field no column type holds exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_come_from_the_topic_schema_when_a_table_declares_none() {
    pubsub_connector_core::wire_log::enable();
    let p = profile();
    let e = endpoint();
    let schema = unique("derive-avro");
    admin::create_avro_schema(&p, &schema, &v2()).await.unwrap();
    let (input, input_sub) = bound_topic(&schema, "JSON", "derive-in").await;
    let (mid, mid_sub) = bound_topic(&schema, "BINARY", "derive-mid").await;
    let (out, out_sub) = (unique("derive-out"), unique("derive-out-sub"));
    admin::create_topic(&p, &out).await.unwrap();
    admin::create_subscription(&p, &out_sub, &out, 60)
        .await
        .unwrap();
    let messages: Vec<Vec<u8>> = (0..8).map(|i| message(i, true)).collect();
    admin::publish_all(&p, &input, messages, 100).await.unwrap();

    let sql = format!(
        "CREATE TABLE src WITH ({src});
         CREATE TABLE mid WITH ({mid});
         CREATE TABLE mid_src (mid_id TEXT METADATA FROM 'message-id') WITH ({mid_src});
         CREATE TABLE dst ({COLUMNS}, mid_id TEXT) WITH ({dst});
         INSERT INTO mid SELECT * FROM src;
         INSERT INTO dst SELECT {SELECT}, mid_id FROM mid_src;",
        src = with(
            &e,
            &format!("'subscription' = '{input_sub}', 'format' = 'avro'")
        ),
        mid = with(&e, &format!("'topic' = '{mid}', 'format' = 'avro'")),
        mid_src = with(
            &e,
            &format!("'subscription' = '{mid_sub}', 'format' = 'avro'")
        ),
        dst = with(&e, &format!("'topic' = '{out}'")),
    );
    Workdir::new(&sql)
        .run_ok(&["--checkpoint-interval", "1s", "--stop-when-idle", "5s"])
        .await;
    let got: Vec<Value> = admin::drain(&p, &out_sub, 1, Some(8), Duration::from_secs(10))
        .await
        .unwrap()
        .values()
        .map(|v| serde_json::from_slice(v).unwrap())
        .collect();
    assert_eq!(got.len(), 8, "{got:?}");
    let mut rows: HashMap<i64, Value> = HashMap::new();
    for mut v in got {
        let mid_id = v.as_object_mut().unwrap().remove("mid_id").unwrap();
        assert!(mid_id.as_str().is_some_and(|s| !s.is_empty()), "{v}");
        assert!(rows.insert(v["id"].as_i64().unwrap(), v).is_none());
    }
    for i in 0..8 {
        assert_eq!(rows[&i], expected(i, true), "row {i}");
    }
    assert_all_acked(&input_sub);
    assert_all_acked(&mid_sub);

    let dst = with(&e, &format!("'topic' = '{out}'"));
    // Format json derives nothing.
    refused_copy(
        "",
        &with(&e, &format!("'subscription' = '{input_sub}'")),
        &dst,
        "table 's': declares no columns (only a table of format 'avro' on a topic with a schema derives them)",
    )
    .await;
    // A topic without a schema.
    refused_copy(
        "",
        &with(&e, &format!("'subscription' = '{out_sub}', 'format' = 'avro'")),
        &dst,
        &format!("table 's' declares no columns, and they cannot be read from its schema: format 'avro' needs a topic with a schema, and topic projects/{PROJECT}/topics/{out}"),
    )
    .await;
    // An Avro sink never creates its topic (it would have no schema).
    let missing = unique("derive-missing");
    refused_copy(
        "id BIGINT",
        &with(&e, &format!("'subscription' = '{out_sub}'")),
        &with(&e, &format!("'topic' = '{missing}', 'format' = 'avro'")),
        &format!("topic projects/{PROJECT}/topics/{missing} does not exist, and format 'avro' reads its schema from it"),
    )
    .await;
    let topics = pubsub_connector_core::client::topic_admin(&p)
        .await
        .unwrap();
    let got = topics
        .get_topic()
        .set_topic(pubsub_connector_core::client::topic_path(PROJECT, &missing))
        .send()
        .await;
    assert!(got.is_err(), "the avro sink created its topic: {got:?}");
    // A field no column type holds exactly.
    let dated = unique("dated-avro");
    admin::create_avro_schema(
        &p,
        &dated,
        r#"{"type":"record","name":"D","fields":[{"name":"id","type":"long"},{"name":"day","type":{"type":"int","logicalType":"date"}}]}"#,
    )
    .await
    .unwrap();
    let (_, dated_sub) = bound_topic(&dated, "JSON", "dated").await;
    refused(
        &format!(
            "CREATE TABLE s WITH ({});
             CREATE TABLE d (id BIGINT) WITH ({dst});
             INSERT INTO d SELECT id FROM s;",
            with(
                &e,
                &format!("'subscription' = '{dated_sub}', 'format' = 'avro'")
            ),
        ),
        2,
        "has fields no column type holds exactly: 'day' (",
    )
    .await;
}
