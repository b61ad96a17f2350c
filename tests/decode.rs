//! Real Google payloads (`shared/fixtures/payloads/`, published with their documented
//! attributes) through the real binary and the real emulator: each table declared for a
//! product decodes every field to the right value, and the sink writes it back exactly
//! (timestamps as RFC 3339 `Z`, int64 strings as numbers, JSON columns as nested JSON).

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use pubsub_connector_core::admin;
use serde_json::{json, Value};
use support::*;

const LIMIT: Duration = Duration::from_secs(180);

/// A source topic + subscription and a sink topic + subscription.
async fn pair(name: &str) -> (String, String, String, String) {
    let p = profile();
    let (t, s, o, os) = (
        unique(&format!("{name}-in")),
        unique(&format!("{name}-in-sub")),
        unique(&format!("{name}-out")),
        unique(&format!("{name}-out-sub")),
    );
    admin::create_topic(&p, &t).await.unwrap();
    admin::create_topic(&p, &o).await.unwrap();
    admin::create_subscription(&p, &s, &t, 60).await.unwrap();
    admin::create_subscription(&p, &os, &o, 60).await.unwrap();
    (t, s, o, os)
}

async fn rows(sub: &str, n: usize) -> Vec<Value> {
    admin::drain(&profile(), sub, 1, Some(n), Duration::from_secs(10))
        .await
        .unwrap()
        .values()
        .map(|v| serde_json::from_slice(v).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_payloads_decode_every_field_exactly() {
    let (gcs_t, gcs_s, gcs_o, gcs_os) = pair("gcs").await;
    let (log_t, log_s, log_o, log_os) = pair("log").await;
    let (bld_t, bld_s, bld_o, bld_os) = pair("build").await;
    let (txt_t, txt_s, txt_o, txt_os) = pair("text").await;
    let (avr_t, avr_s, avr_o, avr_os) = pair("avro").await;

    let gcs_id = publish_with_attributes(
        &gcs_t,
        fixture("gcs-notification-json-api-v1.json"),
        fixture_attributes("gcs-notification-json-api-v1.attrs.json"),
    )
    .await;
    publish_with_attributes(
        &log_t,
        fixture("logging-sink-auditlog.json"),
        fixture_attributes("logging-sink-auditlog.attrs.json"),
    )
    .await;
    publish_with_attributes(
        &bld_t,
        fixture("cloud-build-success.json"),
        fixture_attributes("cloud-build-success.attrs.json"),
    )
    .await;
    publish_with_attributes(&txt_t, fixture("scheduler-plain-text.txt"), HashMap::new()).await;
    publish_with_attributes(
        &txt_t,
        fixture("gcs-notification-none.txt"),
        fixture_attributes("gcs-notification-none.attrs.json"),
    )
    .await;
    publish_with_attributes(
        &avr_t,
        fixture("pubsub-schema-avro-json.json"),
        fixture_attributes("pubsub-schema-avro-json.attrs.json"),
    )
    .await;

    let ep = endpoint();
    let with = |x: &str| {
        format!(
            "'connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{ep}', {x}"
        )
    };
    let sql = format!(
        r#"
        CREATE TABLE gcs (name TEXT NOT NULL, bucket TEXT, generation BIGINT NOT NULL, size BIGINT,
            "timeCreated" TIMESTAMP, id TEXT, "md5Hash" TEXT,
            mid TEXT NOT NULL METADATA FROM 'message-id', attrs JSON NOT NULL METADATA FROM 'attributes')
            WITH ({gcs_in});
        CREATE TABLE gcs_out (name TEXT NOT NULL, bucket TEXT, generation BIGINT NOT NULL, size BIGINT,
            "timeCreated" TIMESTAMP, id TEXT, "md5Hash" TEXT, mid TEXT NOT NULL, attrs JSON NOT NULL)
            WITH ({gcs_out});
        CREATE TABLE logs ("protoPayload" JSON, resource JSON, "timestamp" TIMESTAMP NOT NULL,
            severity TEXT, "logName" TEXT, "receiveTimestamp" TIMESTAMP, "insertId" TEXT) WITH ({log_in});
        CREATE TABLE logs_out ("protoPayload" JSON, resource JSON, "timestamp" TIMESTAMP NOT NULL,
            severity TEXT, "logName" TEXT, "receiveTimestamp" TIMESTAMP, "insertId" TEXT) WITH ({log_out});
        CREATE TABLE builds (id TEXT NOT NULL, status TEXT, steps JSON, timeout TEXT,
            "createTime" TIMESTAMP, "finishTime" TIMESTAMP, tags JSON) WITH ({bld_in});
        CREATE TABLE builds_out (id TEXT NOT NULL, status TEXT, steps JSON, timeout TEXT,
            "createTime" TIMESTAMP, "finishTime" TIMESTAMP, tags JSON) WITH ({bld_out});
        CREATE TABLE lines (value TEXT, attrs JSON NOT NULL METADATA FROM 'attributes') WITH ({txt_in});
        CREATE TABLE lines_out (value TEXT, attrs JSON NOT NULL) WITH ({txt_out});
        CREATE TABLE states (name TEXT, post_abbr TEXT, attrs TEXT METADATA FROM 'attributes') WITH ({avr_in});
        CREATE TABLE states_out (name TEXT, post_abbr TEXT, attrs TEXT) WITH ({avr_out});
        INSERT INTO gcs_out SELECT * FROM gcs;
        INSERT INTO logs_out SELECT * FROM logs;
        INSERT INTO builds_out SELECT * FROM builds;
        INSERT INTO lines_out SELECT * FROM lines;
        INSERT INTO states_out SELECT * FROM states;
        "#,
        gcs_in = with(&format!("'subscription' = '{gcs_s}'")),
        gcs_out = with(&format!("'topic' = '{gcs_o}'")),
        log_in = with(&format!("'subscription' = '{log_s}'")),
        log_out = with(&format!("'topic' = '{log_o}'")),
        bld_in = with(&format!("'subscription' = '{bld_s}'")),
        bld_out = with(&format!("'topic' = '{bld_o}'")),
        txt_in = with(&format!(
            "'subscription' = '{txt_s}', 'format' = 'raw_string'"
        )),
        txt_out = with(&format!("'topic' = '{txt_o}'")),
        avr_in = with(&format!("'subscription' = '{avr_s}'")),
        avr_out = with(&format!("'topic' = '{avr_o}'")),
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "3s",
    ]);
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(summary_count(&stdout, "rows written:"), 6, "{stdout}");

    let gcs = rows(&gcs_os, 1).await;
    let attrs_gcs: Value =
        serde_json::from_slice(&fixture("gcs-notification-json-api-v1.attrs.json")).unwrap();
    assert_eq!(
        gcs,
        vec![json!({
            "name": "test_full_1.csv",
            "bucket": "example-bucket",
            "generation": 1607428286395814i64,
            "size": 5,
            "timeCreated": "2020-12-08T11:51:26.395Z",
            "id": "example-bucket/test_full_1.csv/1607428286395814",
            "md5Hash": "wysgV7m9YsqoNThjRhd5NQ==",
            "mid": gcs_id,
            "attrs": attrs_gcs,
        })]
    );

    let log_in: Value = serde_json::from_slice(&fixture("logging-sink-auditlog.json")).unwrap();
    let logs = rows(&log_os, 1).await;
    assert_eq!(
        logs,
        vec![json!({
            "protoPayload": log_in["protoPayload"],
            "resource": log_in["resource"],
            "timestamp": "2020-05-15T04:28:42.237027213Z",
            "severity": "NOTICE",
            "logName": "projects/example-project/logs/cloudaudit.googleapis.com%2Factivity",
            "receiveTimestamp": "2020-05-15T04:28:42.900626148Z",
            "insertId": "15cp9rve72xt1",
        })]
    );

    let bld_in: Value = serde_json::from_slice(&fixture("cloud-build-success.json")).unwrap();
    let builds = rows(&bld_os, 1).await;
    assert_eq!(
        builds,
        vec![json!({
            "id": "2b4d61d6-8ded-4395-8c5b-4fcfbdca610d",
            "status": "SUCCESS",
            "steps": bld_in["steps"],
            "timeout": "600s",
            "createTime": "2020-10-27T09:33:36.588802999Z",
            "finishTime": "2020-10-27T09:40:33.337406Z",
            "tags": bld_in["tags"],
        })]
    );

    let mut lines = rows(&txt_os, 2).await;
    lines.sort_by_key(|v| v["value"].as_str().map(str::to_string));
    let none_attrs: Value =
        serde_json::from_slice(&fixture("gcs-notification-none.attrs.json")).unwrap();
    assert_eq!(
        lines,
        vec![
            json!({"value": "", "attrs": none_attrs}),
            json!({"value": "Hello", "attrs": {}}),
        ],
        "an empty body with attributes is a row with an empty value"
    );

    let states = rows(&avr_os, 1).await;
    assert_eq!(states.len(), 1);
    assert_eq!(states[0]["name"], "Alaska");
    assert_eq!(states[0]["post_abbr"], "AK");
    let a: Value = serde_json::from_str(states[0]["attrs"].as_str().unwrap()).unwrap();
    assert_eq!(
        a,
        serde_json::from_slice::<Value>(&fixture("pubsub-schema-avro-json.attrs.json")).unwrap()
    );
}

/// One value per case, with the row the sink must write or `None` for a refusal; refused
/// messages are dropped by the policy (and acknowledged), the rest arrive exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_value_decodes_exactly_or_is_refused() {
    pubsub_emulator_tools::wire_log::enable();
    let cases: Vec<(&str, Option<Value>)> = vec![
        (r#"{"id": 1, "b": 100.01}"#, None),
        (r#"{"id": 2, "b": -0.9}"#, None),
        (r#"{"id": 3, "i": 1.5}"#, None),
        (r#"{"id": 4, "t": 1714550400}"#, None),
        (
            r#"{"id": 5, "d": "NaN"}"#,
            Some(json!({"id": 5, "d": "NaN"})),
        ),
        (r#"{"id": 6, "d": 1e400}"#, None),
        (
            r#"{"id": 7, "b": "9223372036854775807"}"#,
            Some(json!({"id": 7, "b": 9223372036854775807i64})),
        ),
        (r#"{"id": 8, "b": 9223372036854775808}"#, None),
        (r#"{"id": 9, "i": 2147483648}"#, None),
        (
            r#"{"id": 10, "i": 2147483647}"#,
            Some(json!({"id": 10, "i": 2147483647})),
        ),
        (
            r#"{"id": 11, "t": "2024-05-01T12:00:00.123456789+02:00"}"#,
            Some(json!({"id": 11, "t": "2024-05-01T10:00:00.123456789Z"})),
        ),
        (
            r#"{"id": 12, "t": "2024-05-01 12:00:00"}"#,
            Some(json!({"id": 12, "t": "2024-05-01T12:00:00Z"})),
        ),
        (
            r#"{"id": 13, "t": "2024-05-01T12:00:00.1234567891Z"}"#,
            None,
        ),
        (r#"{"id": 14, "f": 3.5e38}"#, None),
        (
            r#"{"id": 15, "j": {"b": 1, "a": [1, 2.50]}}"#,
            Some(json!({"id": 15, "j": {"a": [1, 2.5], "b": 1}})),
        ),
        (
            r#"{"id": 16, "x": "aGVsbG8="}"#,
            Some(json!({"id": 16, "x": "aGVsbG8="})),
        ),
        (r#"{"id": 17, "s": 5}"#, None),
        (r#"{"id": 18, "S": "x"}"#, None),
        (
            r#"{"id": 19, "b": 100.0, "f": 0.5, "ok": true}"#,
            Some(json!({"id": 19, "b": 100, "f": 0.5, "ok": true})),
        ),
        ("", None),
        (r#"{"b": 1}"#, None),
    ];
    let (t, s, o, os) = pair("values").await;
    let payloads = cases
        .iter()
        .filter(|(p, _)| !p.is_empty())
        .map(|(p, _)| p.as_bytes().to_vec())
        .collect();
    admin::publish_all(&profile(), &t, payloads, 100)
        .await
        .unwrap();
    // Pub/Sub takes an empty body only with attributes.
    publish_with_attributes(
        &t,
        Vec::new(),
        HashMap::from([("k".to_string(), "v".to_string())]),
    )
    .await;
    let ep = endpoint();
    let cols = "id BIGINT NOT NULL, b BIGINT, i INT, d DOUBLE, f FLOAT, t TIMESTAMP, j JSON, x BYTEA, s TEXT, ok BOOLEAN";
    let sql = format!(
        "CREATE TABLE v ({cols}) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{ep}',
            'subscription' = '{s}', 'scan.deserialization-failure-policy' = 'drop');
         CREATE TABLE w ({cols}) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{ep}', 'topic' = '{o}');
         INSERT INTO w SELECT * FROM v;"
    );
    let wd = Workdir::new(&sql);
    let child = wd.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "3s",
    ]);
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let expected: Vec<Value> = cases.iter().filter_map(|(_, e)| e.clone()).collect();
    let mut got = rows(&os, expected.len()).await;
    got.sort_by_key(|v| v["id"].as_i64());
    assert_eq!(got, expected, "{stdout}");
    let refused = cases.len() - expected.len();
    assert!(
        stderr.matches("dropped message").count() >= refused.min(10),
        "{stderr}"
    );
    assert!(stderr.contains("is not an integer"), "{stderr}");
    assert!(stderr.contains("json.timestamp-format"), "{stderr}");
    // Dropped means acknowledged: nothing comes back.
    assert_all_acked(&s);
}

/// Runs `sql` on one worker until idle: (exit code, stdout, stderr).
async fn run_one_worker(sql: &str) -> (i32, String, String) {
    let wd = Workdir::new(sql);
    let child = wd.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "3s",
    ]);
    finish(child, LIMIT).await
}

/// Issue 31: one wrong column type under policy `drop` used to drop (and acknowledge)
/// every message and exit 0. More failed messages in a row than
/// `scan.max-consecutive-failures` (default 100) fail the job instead (exit 2), naming the
/// option, the count, the policy and the last failure; only the failures handled before
/// the bound was passed are dropped, nothing after them is acknowledged. Both kinds of
/// failure count: a row that fails in SQL (a CAST, the default bound) and a value that
/// does not decode (a TEXT column over numbers, the bound set to 50).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_failed_messages_past_the_bound_fails_the_job_without_acknowledging_the_rest() {
    pubsub_emulator_tools::wire_log::enable();
    let ep = endpoint();
    for (case, bound) in [("sql", None), ("decode", Some(50))] {
        let (t, s, o, _os) = pair(&format!("run-{case}")).await;
        let payloads = (0..300)
            .map(|i| match case {
                "decode" => format!(r#"{{"id": {i}, "name": {i}}}"#),
                _ => format!(r#"{{"id": {i}, "name": "x{i}"}}"#),
            })
            .map(String::into_bytes)
            .collect();
        admin::publish_all(&profile(), &t, payloads, 300)
            .await
            .unwrap();
        let option = bound
            .map(|n| format!(", 'scan.max-consecutive-failures' = '{n}'"))
            .unwrap_or_default();
        let select = match case {
            "decode" => "id, name",
            _ => "id, CAST(name AS BIGINT)",
        };
        let sql = format!(
            "CREATE TABLE v (id BIGINT NOT NULL, name TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{ep}',
                'subscription' = '{s}', 'scan.deserialization-failure-policy' = 'drop' {option});
             CREATE TABLE w (id BIGINT NOT NULL, n TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{ep}', 'topic' = '{o}');
             INSERT INTO w SELECT {select} FROM v;"
        );
        let sql = if case == "sql" {
            sql.replace("n TEXT", "n BIGINT")
        } else {
            sql
        };
        let (code, stdout, stderr) = run_one_worker(&sql).await;
        let max = bound.unwrap_or(100);
        assert_eq!(code, 2, "{case}: stderr: {stderr}");
        let said = format!(
            "{} messages in a row failed in source subtask 0 (more than 'scan.max-consecutive-failures' = {max}) under 'scan.deserialization-failure-policy' = 'drop'",
            max + 1
        );
        assert!(stderr.contains(&said), "{case}: {said}: {stderr}");
        let last = match case {
            "decode" => "could not be decoded as Json",
            _ => "failed in SQL",
        };
        assert!(
            stderr.contains("the last: message ") && stderr.contains(last),
            "{case}: the last failure is named: {stderr}"
        );
        // Exactly the failures before the bound were handled; nothing went out.
        assert_eq!(
            summary_count(&stdout, "messages dropped:"),
            max,
            "{case}: {stdout}"
        );
        assert_eq!(
            summary_count(&stdout, "rows written:"),
            0,
            "{case}: {stdout}"
        );
        let acked = summary_count(&stdout, "messages acknowledged:");
        let wire = Wire::of(&s);
        let acked_at_server = wire.acked_ids().len();
        assert!(
            acked <= max && acked_at_server <= max,
            "{case}: at most the {max} dropped are acknowledged, not {acked} ({acked_at_server} at the server): {stdout}"
        );
        // Everything else is still on the subscription.
        let left = admin::drain(
            &profile(),
            &s,
            1,
            Some(300 - acked_at_server),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(left.len(), 300 - acked_at_server, "{case}");
    }
}

/// Failures interleaved with messages whose rows go out stay within the bound, however
/// many fail in all: 200 of 210 messages (a TEXT column over numbers), never more than 20
/// in a row, pass `scan.max-consecutive-failures` = 50 (and the default 100): the job
/// ends with exit 0, the 10 good rows written and every message acknowledged. This is the
/// bound's limit: it catches a fault that fails every message, not one that fails most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_interleaved_with_good_messages_within_the_bound_pass() {
    pubsub_emulator_tools::wire_log::enable();
    let ep = endpoint();
    let (t, s, o, os) = pair("run-mixed").await;
    let good = |i: usize| i % 21 == 20;
    let payloads = (0..210)
        .map(|i| {
            if good(i) {
                format!(r#"{{"id": {i}, "name": "n{i}"}}"#)
            } else {
                format!(r#"{{"id": {i}, "name": {i}}}"#)
            }
        })
        .map(String::into_bytes)
        .collect();
    admin::publish_all(&profile(), &t, payloads, 210)
        .await
        .unwrap();
    let sql = format!(
        "CREATE TABLE v (id BIGINT NOT NULL, name TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{ep}',
            'subscription' = '{s}', 'scan.deserialization-failure-policy' = 'drop', 'scan.max-consecutive-failures' = '50');
         CREATE TABLE w (id BIGINT NOT NULL, name TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'emulator-endpoint' = '{ep}', 'topic' = '{o}');
         INSERT INTO w SELECT id, name FROM v;"
    );
    let (code, stdout, stderr) = run_one_worker(&sql).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(summary_count(&stdout, "messages dropped:"), 200, "{stdout}");
    assert_eq!(summary_count(&stdout, "rows written:"), 10, "{stdout}");
    let mut got: Vec<i64> = rows(&os, 10)
        .await
        .iter()
        .map(|v| v["id"].as_i64().unwrap())
        .collect();
    got.sort();
    let want: Vec<i64> = (0..210).filter(|i| good(*i)).map(|i| i as i64).collect();
    assert_eq!(got, want);
    assert_all_acked(&s);
}

/// `'json.unstructured' = 'true'` (issue 47): a table without columns reads each payload
/// as one `JSON` column `value` (canonical JSON: keys sorted, no spaces), which the JSON
/// getters read; a payload that is not JSON is a row failure under the table's policy
/// (dropped here, and acknowledged); a sink with it writes its `value` as the payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unstructured_json_table_reads_the_whole_payload_as_one_json_column() {
    pubsub_emulator_tools::wire_log::enable();
    let (t, s, o, os) = pair("unstructured").await;
    let (_, _, o2, os2) = pair("unstructured-copy").await;
    publish_with_attributes(&t, fixture("logging-sink-auditlog.json"), HashMap::new()).await;
    publish_with_attributes(&t, fixture("scheduler-plain-text.txt"), HashMap::new()).await;
    publish_with_attributes(&t, b"[1, {\"b\": 2, \"a\": 1}]".to_vec(), HashMap::new()).await;
    let sql = format!(
        "CREATE TABLE logs WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{s}',
            'emulator-endpoint' = '{e}', 'json.unstructured' = 'true',
            'scan.deserialization-failure-policy' = 'drop');
         CREATE TABLE methods (method TEXT, who TEXT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{o}',
            'emulator-endpoint' = '{e}');
         CREATE TABLE copies (value JSON) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{o2}',
            'emulator-endpoint' = '{e}', 'json.unstructured' = 'true');
         INSERT INTO methods
         SELECT json_get_str(value, 'protoPayload', 'methodName'),
                json_get_str(value, 'protoPayload', 'authenticationInfo', 'principalEmail')
         FROM logs;
         INSERT INTO copies SELECT value FROM logs;",
        e = endpoint()
    );
    let (code, stdout, stderr) = run_one_worker(&sql).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let mut got = rows(&os, 2).await;
    got.sort_by_key(|v| v.to_string());
    assert_eq!(
        got,
        vec![
            json!({"method": "storage.setIamPermissions", "who": "user@example.com"}),
            json!({}),
        ],
        "{stdout}"
    );
    let copies = admin::drain(&profile(), &os2, 1, Some(2), Duration::from_secs(10))
        .await
        .unwrap();
    let mut texts: Vec<String> = copies
        .values()
        .map(|v| String::from_utf8(v.clone()).unwrap())
        .collect();
    texts.sort();
    assert_eq!(texts[0], "[1,{\"a\":1,\"b\":2}]");
    let audit: Value = serde_json::from_slice(&fixture("logging-sink-auditlog.json")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&texts[1]).unwrap(), audit);
    assert!(stderr.contains("payload is not JSON"), "{stderr}");
    assert_all_acked(&s);
}
