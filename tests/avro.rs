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
    pubsub_emulator_tools::wire_log::enable();
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
    pubsub_emulator_tools::wire_log::enable();
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
        "table 's': declares no columns (only a table of format 'avro' on a topic with a schema derives them;",
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

/// `id`, `name` and an optional `note`: what the sinks of the mid-run tests write.
const NOTED: &str = r#"{"type":"record","name":"Noted","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"note","type":["null","string"],"default":null}]}"#;

/// `NOTED` with an added optional field.
const NOTED_EXTRA: &str = r#"{"type":"record","name":"Noted","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"extra","type":["null","long"],"default":null}]}"#;

/// `NOTED` without `note`: the emulator's validation reads a payload of `NOTED` with it
/// (bytes after the record and unknown JSON keys are ignored) and names it so.
const UNNOTED: &str = r#"{"type":"record","name":"Noted","namespace":"test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"}]}"#;

/// The note of row `i`: none for every third.
fn note_of(i: i64) -> Option<String> {
    (i % 3 != 0).then(|| format!("note {i}"))
}

/// The JSON input rows `range` of the mid-run sinks.
async fn publish_noted(topic: &str, range: std::ops::Range<i64>) {
    let payloads = range
        .map(|i| {
            serde_json::to_vec(&json!({"id": i, "name": format!("n{i}"), "note": note_of(i)}))
                .unwrap()
        })
        .collect();
    admin::publish_all(&profile(), topic, payloads, 100)
        .await
        .unwrap();
}

/// Row `i` written under `NOTED` (`with_note`) or `UNNOTED`, in Avro's BINARY or JSON
/// encoding, as a sink bound to that revision writes it.
fn noted_payload(i: i64, with_note: bool, encoding: &str) -> Vec<u8> {
    let name = format!("n{i}");
    if encoding == "JSON" {
        let mut v = json!({"id": i, "name": name});
        if with_note {
            v["note"] = note_of(i).map_or(Value::Null, |n| json!({ "string": n }));
        }
        return serde_json::to_vec(&v).unwrap();
    }
    fn long(n: i64, out: &mut Vec<u8>) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }
    fn string(s: &str, out: &mut Vec<u8>) {
        long(s.len() as i64, out);
        out.extend_from_slice(s.as_bytes());
    }
    let mut out = Vec::new();
    long(i, &mut out);
    string(&name, &mut out);
    if with_note {
        match note_of(i) {
            None => long(0, &mut out),
            Some(n) => {
                long(1, &mut out);
                string(&n, &mut out);
            }
        }
    }
    out
}

/// Two schema-bound topics (BINARY and JSON) on schema `schema`, their subscriptions, a
/// plain input topic for the sink job and a plain output topic for the source job.
struct MidRun {
    input: String,
    input_sub: String,
    /// (encoding, topic, subscription)
    bound: Vec<(&'static str, String, String)>,
    out_sub: String,
    sink_sql: String,
    source_sql: String,
}

async fn mid_run(schema: &str, name: &str) -> MidRun {
    let p = profile();
    let e = endpoint();
    let (input, input_sub) = (
        unique(&format!("{name}-in")),
        unique(&format!("{name}-in-sub")),
    );
    admin::create_topic(&p, &input).await.unwrap();
    admin::create_subscription(&p, &input_sub, &input, 60)
        .await
        .unwrap();
    let (out, out_sub) = (
        unique(&format!("{name}-out")),
        unique(&format!("{name}-out-sub")),
    );
    admin::create_topic(&p, &out).await.unwrap();
    admin::create_subscription(&p, &out_sub, &out, 60)
        .await
        .unwrap();
    let mut bound = Vec::new();
    for encoding in ["BINARY", "JSON"] {
        let (t, s) = bound_topic(
            schema,
            encoding,
            &format!("{name}-{}", encoding.to_lowercase()),
        )
        .await;
        bound.push((encoding, t, s));
    }
    let cols = "id BIGINT NOT NULL, name TEXT NOT NULL, note TEXT";
    let mut sink_sql = format!(
        "CREATE TABLE src ({cols}) WITH ({});",
        with(
            &e,
            &format!("'subscription' = '{input_sub}', 'format' = 'json'")
        )
    );
    let mut source_sql = format!(
        "CREATE TABLE out (id BIGINT, name TEXT, note TEXT, extra BIGINT, attrs JSON) WITH ({});",
        with(&e, &format!("'topic' = '{out}'"))
    );
    for (i, (_, topic, sub)) in bound.iter().enumerate() {
        sink_sql.push_str(&format!(
            "CREATE TABLE t{i} ({cols}) WITH ({});
             INSERT INTO t{i} SELECT id, name, note FROM src;",
            with(&e, &format!("'topic' = '{topic}', 'format' = 'avro'"))
        ));
        source_sql.push_str(&format!(
            "CREATE TABLE s{i} ({cols}, extra BIGINT, attrs JSON METADATA FROM 'attributes') WITH ({});
             INSERT INTO out SELECT id, name, note, extra, attrs FROM s{i};",
            with(&e, &format!("'subscription' = '{sub}', 'format' = 'avro'"))
        ));
    }
    MidRun {
        input,
        input_sub,
        bound,
        out_sub,
        sink_sql,
        source_sql,
    }
}

/// Reads `n` more rows of the source job's output: encoding -> id -> (row without
/// `attrs`, the revision Pub/Sub named). A row seen twice fails.
async fn read_out(
    out_sub: &str,
    n: usize,
    rows: &mut HashMap<String, HashMap<i64, (Value, String)>>,
) {
    let got = admin::drain(&profile(), out_sub, 1, Some(n), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got.len(), n, "rows of the source job");
    for payload in got.values() {
        let mut v: Value = serde_json::from_slice(payload).unwrap();
        let attrs = v.as_object_mut().unwrap().remove("attrs").unwrap();
        let encoding = attrs["googclient_schemaencoding"]
            .as_str()
            .unwrap()
            .to_string();
        let revision = attrs["googclient_schemarevisionid"]
            .as_str()
            .unwrap()
            .to_string();
        let id = v["id"].as_i64().unwrap();
        let seen = rows.entry(encoding).or_default().insert(id, (v, revision));
        assert!(seen.is_none(), "row {id} twice");
    }
}

/// Waits until every subtask of both sinks of `m` (two workers) has read that Pub/Sub
/// validates with revision `rev` of `schema` first (the line comes after the sink can
/// see it).
async fn await_binding(
    sink_log: &std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    m: &MidRun,
    schema: &str,
    rev: &str,
) {
    for (encoding, topic, _) in &m.bound {
        let line = format!(
            "topic projects/{PROJECT}/topics/{topic}: Pub/Sub now validates its messages with schema projects/{PROJECT}/schemas/{schema} revision {rev} ({encoding}) first"
        );
        wait_until(
            &format!("both sink subtasks of {topic} to read revision {rev}"),
            LIMIT,
            || {
                sink_log
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|l| l.contains(&line))
                    .count()
                    >= 2
            },
        )
        .await;
    }
}

/// The row the source job writes for row `i` (NULL columns left out).
fn noted_row(i: i64) -> Value {
    let mut v = json!({"id": i, "name": format!("n{i}")});
    if let Some(n) = note_of(i) {
        v["note"] = json!(n);
    }
    v
}

/// Issue 31, item 7: a revision (an added optional field) committed while a sink job
/// writes the schema-bound topics and a source job reads them. Each sink subtask re-binds
/// to the new revision (the one Pub/Sub validates first); every message is named with the
/// revision that wrote it, and decoded by it: each row once, exact, `note` never NULL
/// where it was written, `extra` NULL (no sink writes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_committed_mid_run_rebinds_the_sink_and_each_message_decodes_by_its_own() {
    pubsub_emulator_tools::wire_log::enable();
    let p = profile();
    let schema = unique("midrun-avro");
    let rev1 = admin::create_avro_schema(&p, &schema, NOTED).await.unwrap();
    let m = mid_run(&schema, "midrun").await;
    let args = ["--workers", "2", "--checkpoint-interval", "1s"];
    let sink_job = Workdir::new(&m.sink_sql);
    let mut sink = sink_job.spawn(&args);
    let sink_log = collect_lines(sink.stderr.take().unwrap());
    let source_job = Workdir::new(&m.source_sql);
    let source = source_job.spawn(&args);

    let mut rows = HashMap::new();
    publish_noted(&m.input, 0..30).await;
    read_out(&m.out_sub, 60, &mut rows).await;

    let rev2 = admin::commit_avro_revision(&p, &schema, NOTED_EXTRA)
        .await
        .unwrap();
    // Both subtasks of both sinks (two workers) have read the new binding; the rows
    // published from here on are written under it.
    await_binding(&sink_log, &m, &schema, &rev2).await;
    publish_noted(&m.input, 30..60).await;
    read_out(&m.out_sub, 60, &mut rows).await;

    for job in [&sink, &source] {
        signal(job, "TERM");
    }
    let (code, _, _) = finish(sink, LIMIT).await;
    assert_eq!(code, 0, "sink job: {}", sink_log.lock().unwrap().join("\n"));
    let (code, _, stderr) = finish(source, LIMIT).await;
    assert_eq!(code, 0, "source job: {stderr}");
    for (encoding, _, _) in &m.bound {
        let got = &rows[*encoding];
        for i in 0..60 {
            let (row, revision) = &got[&i];
            assert_eq!(row, &noted_row(i), "{encoding} row {i}");
            let want = if i < 30 { &rev1 } else { &rev2 };
            assert_eq!(
                revision, want,
                "{encoding} row {i}: the revision Pub/Sub named"
            );
        }
        assert_eq!(got.len(), 60, "{encoding}");
    }
    assert_all_acked(&m.input_sub);
    for (_, _, sub) in &m.bound {
        assert_all_acked(sub);
    }
}

/// Issue 31, item 7: a revision that drops a trailing field the sink writes. The emulator
/// names bytes written under the old revision with the new one (it reads the record and
/// ignores the rest: BINARY bytes after it, JSON keys it lacks), which is what a sink bound
/// to the old revision publishes until it reads the topic again. The source decodes those
/// by the revision that wrote them (never `note` NULL where one was written, never a
/// decode failure), and the sink, whose `note` column the new revision cannot hold, fails
/// as its start would (exit 2) instead of writing bytes named with a revision that drops
/// its values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_named_with_a_newer_revision_decode_by_the_writer_and_the_sink_refuses_it() {
    pubsub_emulator_tools::wire_log::enable();
    let p = profile();
    let schema = unique("dropped-avro");
    let rev1 = admin::create_avro_schema(&p, &schema, NOTED).await.unwrap();
    let m = mid_run(&schema, "dropped").await;
    let args = ["--workers", "2", "--checkpoint-interval", "1s"];
    let sink_job = Workdir::new(&m.sink_sql);
    let mut sink = sink_job.spawn(&args);
    let sink_log = collect_lines(sink.stderr.take().unwrap());
    let source_job = Workdir::new(&m.source_sql);
    let source = source_job.spawn(&args);

    let mut rows = HashMap::new();
    publish_noted(&m.input, 0..10).await;
    read_out(&m.out_sub, 20, &mut rows).await;

    let rev2 = admin::commit_avro_revision(&p, &schema, UNNOTED)
        .await
        .unwrap();
    await_binding(&sink_log, &m, &schema, &rev2).await;
    // Rows for it now: the sink fails rather than write them under revision 1.
    publish_noted(&m.input, 100..103).await;
    let code = tokio::time::timeout(LIMIT, sink.wait())
        .await
        .expect("the sink job did not end")
        .unwrap()
        .code();
    let want = format!("under its schema (its binding changed while the job ran): column 'note' has no field in schema projects/{PROJECT}/schemas/{schema} revision {rev2}");
    wait_until("the sink job's error", LIMIT, || {
        sink_log.lock().unwrap().iter().any(|l| l.contains(&want))
    })
    .await;
    assert_eq!(code, Some(2), "the sink job's exit code");
    // What a sink bound to revision 1 writes until it reads the topic again (rows 10..20),
    // then rows written under revision 2 (20..25).
    for (encoding, topic, _) in &m.bound {
        let payloads = (10..20)
            .map(|i| noted_payload(i, true, encoding))
            .chain((20..25).map(|i| noted_payload(i, false, encoding)))
            .collect();
        admin::publish_all(&p, topic, payloads, 100).await.unwrap();
    }
    read_out(&m.out_sub, 30, &mut rows).await;
    signal(&source, "TERM");
    let (code, _, stderr) = finish(source, LIMIT).await;
    assert_eq!(code, 0, "the source job: {stderr}");
    for (encoding, _, _) in &m.bound {
        let got = &rows[*encoding];
        for i in 0..25 {
            let (row, revision) = &got[&i];
            let mut want = noted_row(i);
            if i >= 20 {
                // Written without the field.
                want.as_object_mut().unwrap().remove("note");
            }
            assert_eq!(row, &want, "{encoding} row {i}");
            // The premise: the emulator named rows 10..20 with revision 2, which did not
            // write them.
            let named = if i < 10 { &rev1 } else { &rev2 };
            assert_eq!(
                revision, named,
                "{encoding} row {i}: the revision Pub/Sub named"
            );
        }
        assert_eq!(got.len(), 25, "{encoding}");
    }
    for (_, _, sub) in &m.bound {
        assert_all_acked(sub);
    }
}
