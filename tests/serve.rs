//! `pubsub-connector serve` and `schema`: the REST API of the connection wizard against the
//! real emulator, through a real process and HTTP; and the statement it makes, run.

use crate::avro::bound_topic;
use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use google_cloud_pubsub::model::Message;
use pubsub_connector_core::{admin, client};
use serde_json::{json, Value};
use support::*;

const LIMIT: Duration = Duration::from_secs(180);

/// A running `serve` on a free port with its own data directory.
struct Server {
    base: String,
    http: reqwest::Client,
    data: tempfile::TempDir,
    /// The line `serve` printed at start.
    stdout: String,
    _child: tokio::process::Child,
}

impl Server {
    async fn start() -> Server {
        let data = tempfile::tempdir().unwrap();
        Self::start_in(data).await
    }

    async fn start_in(data: tempfile::TempDir) -> Server {
        Self::start_with(data, &["--listen", "127.0.0.1:0"], None).await
    }

    /// `serve --data-dir DATA` with `args`; stderr to `log` when given. Requests go to
    /// 127.0.0.1 and the printed port (also for a wildcard listen address).
    async fn start_with(
        data: tempfile::TempDir,
        args: &[&str],
        log: Option<&std::path::Path>,
    ) -> Server {
        use tokio::io::AsyncBufReadExt;
        let stderr = match log {
            Some(path) => std::process::Stdio::from(std::fs::File::create(path).unwrap()),
            None => std::process::Stdio::null(),
        };
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
            .arg("serve")
            .args(args)
            .arg("--data-dir")
            .arg(data.path())
            .env("RUST_LOG", "debug")
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(LIMIT, lines.next_line())
            .await
            .expect("serve prints its address")
            .unwrap()
            .expect("a line");
        let at = line.split("http://").nth(1).expect("an address");
        let port = at.split('/').next().unwrap().rsplit(':').next().unwrap();
        Server {
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            data,
            stdout: line,
            _child: child,
        }
    }

    fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// A request to `path` with extra headers: (status, body as JSON or as text).
    async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        if let Some(b) = body {
            r = r.json(b);
        }
        let r = r.send().await.unwrap();
        let code = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn delete(&self, path: &str) -> u16 {
        let r = self
            .http
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        r.status().as_u16()
    }

    /// The `data:` events of an SSE reply, parsed.
    async fn events(&self, path: &str, body: &Value) -> Vec<Value> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        let text = tokio::time::timeout(LIMIT, r.text())
            .await
            .unwrap()
            .unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect()
    }

    /// As [`Server::events`], running `publish` once the copy of the subscription exists
    /// (the "reading the copy" event): on the emulator only messages published then
    /// reach the sample (it does not replay a snapshot into a new subscription).
    async fn events_publishing<F: std::future::Future<Output = ()>>(
        &self,
        path: &str,
        body: &Value,
        publish: F,
    ) -> Vec<Value> {
        let mut r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let mut publish = Some(publish);
        let (mut text, mut events) = (String::new(), Vec::new());
        while let Some(chunk) = tokio::time::timeout(LIMIT, r.chunk())
            .await
            .unwrap()
            .unwrap()
        {
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(i) = text.find("\n\n") {
                let block: String = text.drain(..i + 2).collect();
                for d in block.lines().filter_map(|l| l.strip_prefix("data:")) {
                    let v: Value = serde_json::from_str(d.trim()).unwrap();
                    let copied = v["message"].as_str().unwrap().contains("reading the copy");
                    events.push(v);
                    if copied {
                        if let Some(p) = publish.take() {
                            p.await;
                        }
                    }
                }
            }
        }
        events
    }

    /// Saves an emulator profile named `name`; returns its id.
    async fn emulator_profile(&self, name: &str) -> String {
        let (code, v) = self
            .post("/v1/connection_profiles", &profile_body(name, &endpoint()))
            .await;
        assert_eq!(code, 200, "{v}");
        v["id"].as_str().unwrap().to_string()
    }
}

fn profile_body(name: &str, endpoint: &str) -> Value {
    json!({"name": name, "connector": "pubsub",
           "config": {"project": PROJECT, "authentication": {"type": "emulator", "endpoint": endpoint}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_command_prints_the_committed_files() {
    for which in ["profile", "table"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
            .args(["schema", which])
            .output()
            .unwrap();
        assert!(out.status.success());
        let file = format!("{}/../schema/{which}.json", env!("CARGO_MANIFEST_DIR"));
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            std::fs::read_to_string(file).unwrap()
        );
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
        .arg("schema")
        .output()
        .unwrap();
    let both: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(both["profile"]["title"], "Pub/Sub connection profile");
    assert_eq!(both["table"]["title"], "Pub/Sub table");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_are_tested_saved_listed_and_deleted_and_never_return_a_secret() {
    let s = Server::start().await;
    let (code, c) = s.get("/v1/connectors").await;
    assert_eq!(code, 200);
    let c = &c["data"][0];
    assert_eq!(c["id"], "pubsub");
    for k in ["connectionConfig", "tableConfig", "schemaConfig"] {
        assert!(c[k]["$schema"].is_string(), "{k}: {c}");
    }

    // A profile that reaches the emulator, and one that cannot reach anything.
    let (code, ok) = s
        .post(
            "/v1/connection_profiles/test",
            &profile_body("t", &endpoint()),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(ok["error"], false, "{ok}");
    assert!(
        ok["message"]
            .as_str()
            .unwrap()
            .contains("connected to project 'test'"),
        "{ok}"
    );
    let dead = format!("127.0.0.1:{}", closed_port());
    let (code, bad) = s
        .post("/v1/connection_profiles/test", &profile_body("t", &dead))
        .await;
    assert_eq!(code, 200);
    assert_eq!(bad["error"], true, "{bad}");
    let m = bad["message"].as_str().unwrap();
    assert!(
        m.contains("cannot reach Pub/Sub") && m.contains(&dead),
        "{m}"
    );

    // Bodies are checked field by field.
    let (code, e) = s
        .post("/v1/connection_profiles", &profile_body("x", "nohost"))
        .await;
    assert_eq!(code, 400);
    assert_eq!(e["field"], "/config/authentication/endpoint", "{e}");
    let (code, e) = s
        .post("/v1/connection_profiles", &json!({"name": "x", "connector": "pubsub", "config": {"project": "p", "authentication": {"type": "kerberos"}}}))
        .await;
    assert_eq!(code, 400);
    assert_eq!(e["field"], "/config/authentication", "{e}");
    let (code, e) = s
        .post(
            "/v1/connection_profiles",
            &json!({"name": "x", "connector": "kafka", "config": {}}),
        )
        .await;
    assert_eq!(
        (code, e["field"].as_str()),
        (400, Some("/connector")),
        "{e}"
    );

    // A key file path is kept, never returned.
    let secret = "/very/secret/key.json";
    let keyed = json!({"name": "prod", "connector": "pubsub",
        "config": {"project": "p", "authentication": {"type": "service-account-key-file", "path": secret}}});
    let (code, saved) = s.post("/v1/connection_profiles", &keyed).await;
    assert_eq!(code, 200, "{saved}");
    assert_eq!(saved["config"]["authentication"]["path"], "<redacted>");
    let (code, again) = s.post("/v1/connection_profiles", &keyed).await;
    assert_eq!(
        (code, again["field"].as_str()),
        (409, Some("/name")),
        "{again}"
    );
    let local = s.emulator_profile("local").await;
    let (_, all) = s.get("/v1/connection_profiles").await;
    let text = all.to_string();
    assert!(!text.contains("secret"), "{text}");
    assert_eq!(all["data"].as_array().unwrap().len(), 2, "{all}");
    let id = saved["id"].as_str().unwrap();
    assert_eq!(
        s.delete(&format!("/v1/connection_profiles/{id}")).await,
        200
    );
    assert_eq!(
        s.delete(&format!("/v1/connection_profiles/{id}")).await,
        404
    );
    assert_eq!(s.delete("/v1/connection_profiles/cp_x").await, 404);

    // Saved profiles survive a restart of the server.
    let data = s.data;
    let s = Server::start_in(data).await;
    let (_, all) = s.get("/v1/connection_profiles").await;
    assert_eq!(all["data"][0]["id"], local, "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autocomplete_lists_the_projects_topics_and_subscriptions() {
    let t = topics("autocomplete", 60).await;
    let s = Server::start().await;
    let id = s.emulator_profile("local").await;
    let (code, v) = s
        .get(&format!("/v1/connection_profiles/{id}/autocomplete"))
        .await;
    assert_eq!(code, 200);
    let has = |k: &str, x: &str| v["values"][k].as_array().unwrap().iter().any(|i| i == x);
    assert!(has("topics", &t.input) && has("topics", &t.output), "{v}");
    assert!(has("subscriptions", &t.input_sub), "{v}");
    let (code, _) = s.get("/v1/connection_profiles/cp_999/autocomplete").await;
    assert_eq!(code, 404);
}

fn gcs_columns() -> Value {
    json!({"format": "json", "fields": [
        {"name": "name", "type": "TEXT"},
        {"name": "bucket", "type": "TEXT", "nullable": false},
        {"name": "generation", "type": "BIGINT"},
        {"name": "mid", "type": "TEXT", "nullable": false, "metadataKey": "message-id"},
        {"name": "attrs", "type": "JSON", "metadataKey": "attributes"}
    ]})
}

/// Fresh topics `name` and a publisher to their input topic.
async fn topics_and_publisher(name: &str) -> (Topics, google_cloud_pubsub::client::Publisher) {
    let t = topics(name, 60).await;
    let publisher = client::publisher(&profile(), &client::topic_path(PROJECT, &t.input))
        .unwrap()
        .build()
        .await
        .unwrap();
    (t, publisher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_test_streams_a_decoded_row_and_a_decode_error_and_acknowledges_nothing() {
    let (t, publisher) = topics_and_publisher("tabletest").await;
    let attrs: HashMap<String, String> =
        serde_json::from_slice(&fixture("gcs-notification-json-api-v1.attrs.json")).unwrap();
    let ids = std::sync::Mutex::new(Vec::new());
    // Published once the copy exists, so the emulator's copy gets them too.
    let publish = async {
        let good = publisher.publish(
            Message::new()
                .set_data(fixture("gcs-notification-json-api-v1.json"))
                .set_attributes(attrs),
        );
        let bad =
            publisher.publish(Message::new().set_data(b"{\"name\": \"x\", \"bucket\": ".to_vec()));
        let (good, bad) = (good.await.unwrap(), bad.await.unwrap());
        ids.lock().unwrap().extend([good, bad]);
    };
    let s = Server::start().await;
    let id = s.emulator_profile("local").await;
    let body = json!({"name": "gcs", "connector": "pubsub", "connectionProfileId": id,
        "config": {"type": "source", "subscriptions": [{"id": t.input_sub}]},
        "schema": gcs_columns(), "sampleSize": 5});
    let events = s
        .events_publishing("/v1/connection_tables/test", &body, publish)
        .await;
    let (good, bad) = {
        let ids = ids.lock().unwrap();
        (ids[0].clone(), ids[1].clone())
    };
    let text = serde_json::to_string_pretty(&events).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["done"], true, "{text}");
    assert_eq!(last["error"], false, "{text}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("1 decoded, 1 failed"),
        "{text}"
    );
    let row = events
        .iter()
        .find(|e| e["row"].is_object())
        .unwrap_or_else(|| panic!("no decoded row: {text}"));
    assert_eq!(row["row"]["bucket"], "example-bucket", "{text}");
    assert_eq!(row["row"]["generation"], 1607428286395814i64, "{text}");
    assert_eq!(row["row"]["mid"], good.as_str(), "{text}");
    assert!(row["message"].as_str().unwrap().contains(&good), "{text}");
    let failed = events.iter().find(|e| e["error"] == true).unwrap();
    assert!(failed["message"].as_str().unwrap().contains(&bad), "{text}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("cannot decode"),
        "{text}"
    );
    // Nothing was acknowledged: both messages are still on the subscription.
    let back = redelivered(&t.input_sub, Duration::from_secs(5)).await;
    assert!(
        back.contains_key(&good) && back.contains_key(&bad),
        "{:?}",
        back.keys()
    );

    // A missing subscription ends the stream with an error event that says so.
    let mut missing = body.clone();
    missing["config"]["subscriptions"][0]["id"] = json!("no-such-sub");
    let events = s.events("/v1/connection_tables/test", &missing).await;
    let last = events.last().unwrap();
    assert_eq!(
        (last["done"].clone(), last["error"].clone()),
        (json!(true), json!(true)),
        "{events:?}"
    );
    assert!(
        last["message"].as_str().unwrap().contains("does not exist"),
        "{last}"
    );
}

/// `select` shows each sample row after the SELECT, a row failure names its expression,
/// and a SELECT that does not plan is refused before the test starts, naming `/select`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_test_shows_rows_after_a_select_and_its_row_failures() {
    let (t, publisher) = topics_and_publisher("tabletest-select").await;
    let ids = std::sync::Mutex::new(Vec::new());
    let publish = async {
        let good = publisher
            .publish(Message::new().set_data(fixture("gcs-notification-json-api-v1.json")));
        // generation 5: `100 / (generation - 5)` divides by zero.
        let failing = publisher.publish(
            Message::new()
                .set_data(b"{\"name\": \"x\", \"bucket\": \"b\", \"generation\": 5}".to_vec()),
        );
        let (good, failing) = (good.await.unwrap(), failing.await.unwrap());
        ids.lock().unwrap().extend([good, failing]);
    };
    let s = Server::start().await;
    let id = s.emulator_profile("local").await;
    let mut body = json!({"name": "gcs", "connector": "pubsub", "connectionProfileId": id,
        "config": {"type": "source", "subscriptions": [{"id": t.input_sub}]},
        "schema": gcs_columns(), "sampleSize": 5,
        "select": "SELECT upper(bucket) AS b, 100 / (generation - 5) AS q FROM gcs WHERE generation > 0"});
    let events = s
        .events_publishing("/v1/connection_tables/test", &body, publish)
        .await;
    let text = serde_json::to_string_pretty(&events).unwrap();
    let (good, failing) = {
        let ids = ids.lock().unwrap();
        (ids[0].clone(), ids[1].clone())
    };
    let row = events
        .iter()
        .find(|e| e["row"].is_object())
        .unwrap_or_else(|| panic!("no row: {text}"));
    assert_eq!(row["row"], json!({"b": "EXAMPLE-BUCKET", "q": 0}), "{text}");
    assert!(row["message"].as_str().unwrap().contains(&good), "{text}");
    assert!(
        row["message"]
            .as_str()
            .unwrap()
            .contains("1 after the SELECT"),
        "{text}"
    );
    let failed = events
        .iter()
        .find(|e| e["error"] == true)
        .unwrap_or_else(|| panic!("no row failure: {text}"));
    let m = failed["message"].as_str().unwrap();
    assert!(
        m.contains(&failing) && m.contains("row failure") && m.contains("100 / (generation - 5)"),
        "{text}"
    );
    // Refused before any event: the reply names the field and the SQL position.
    body["select"] = json!("SELECT bukket FROM gcs");
    let (code, e) = s.post("/v1/connection_tables/test", &body).await;
    assert_eq!((code, e["field"].as_str()), (400, Some("/select")), "{e}");
    assert!(e["error"].as_str().unwrap().contains("bukket"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_table_bodies_are_refused_naming_the_field() {
    let s = Server::start().await;
    let id = s.emulator_profile("local").await;
    let body = |config: Value, schema: Value| json!({"name": "t", "connector": "pubsub", "connectionProfileId": id, "config": config, "schema": schema});
    let cols = json!({"fields": [{"name": "a", "type": "BIGINT"}]});
    let cases = [
        (
            body(
                json!({"type": "source", "subscriptions": [{"id": "s"}], "subscriber": {"parallelPullCount": 0}}),
                cols.clone(),
            ),
            "/config/subscriber/parallelPullCount",
        ),
        (
            body(
                json!({"type": "source", "subscriptions": [{"id": "s"}], "subscriber": {"parallelPullCount": 65}}),
                cols.clone(),
            ),
            "/config/subscriber/parallelPullCount",
        ),
        (
            body(json!({"type": "source", "subscriptions": []}), cols.clone()),
            "/config/subscriptions",
        ),
        (
            body(
                json!({"type": "sink", "topic": "o", "publisher": {"batchingElementCountThreshold": 1001}}),
                cols.clone(),
            ),
            "/config/publisher/batchingElementCountThreshold",
        ),
        (
            body(
                json!({"type": "sink", "topic": "o", "publisher": {"messageOrdering": true, "retry": {"maxAttempts": 3}}}),
                cols.clone(),
            ),
            "/config/publisher/retry/maxAttempts",
        ),
        (
            body(
                json!({"type": "source", "subscriptions": [{"id": "s"}]}),
                json!({"fields": [{"name": "a", "type": "BIGINTEGER"}]}),
            ),
            "/schema/fields/0/type",
        ),
        (
            body(
                json!({"type": "source", "subscriptions": [{"id": "s"}]}),
                json!({"format": "raw_string", "fields": [{"name": "a", "type": "BIGINT"}]}),
            ),
            "/schema",
        ),
        (
            body(
                json!({"type": "sink", "topic": "o"}),
                json!({"fields": [{"name": "m", "type": "TEXT", "metadataKey": "message-id"}]}),
            ),
            "/schema",
        ),
    ];
    for (b, field) in cases {
        let (code, e) = s.post("/v1/connection_tables", &b).await;
        assert_eq!(
            (code, e["field"].as_str()),
            (400, Some(field)),
            "{b} -> {e}"
        );
        assert!(!e["error"].as_str().unwrap().is_empty());
    }
    let mut b = body(
        json!({"type": "source", "subscriptions": [{"id": "s"}]}),
        cols.clone(),
    );
    b["name"] = json!("2bad name");
    let (code, e) = s.post("/v1/connection_tables", &b).await;
    assert_eq!((code, e["field"].as_str()), (400, Some("/name")), "{e}");
    b["name"] = json!("t");
    b["connectionProfileId"] = json!("cp_404");
    let (code, e) = s.post("/v1/connection_tables", &b).await;
    assert_eq!(
        (code, e["field"].as_str()),
        (400, Some("/connectionProfileId")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_tables_give_statements_that_run_moves_every_message_with() {
    let t = topics("serve-run", 60).await;
    let ids = publish_seq(&t.input, 0..300).await;
    let s = Server::start().await;
    let id = s.emulator_profile("local").await;
    let cols = json!({"fields": [
        {"name": "seq", "type": "BIGINT"},
        {"name": "mid", "type": "TEXT", "nullable": false, "metadataKey": "message-id"}]});
    let (code, src) = s
        .post("/v1/connection_tables", &json!({"name": "src", "connector": "pubsub", "connectionProfileId": id,
            "config": {"type": "source", "subscriptions": [{"id": t.input_sub}], "subscriber": {"maxAckExtensionPeriodMs": 600000}},
            "schema": cols}))
        .await;
    assert_eq!(code, 200, "{src}");
    assert_eq!(src["tableType"], "source");
    let (code, dst) = s
        .post("/v1/connection_tables", &json!({"name": "dst", "connector": "pubsub", "connectionProfileId": id,
            "config": {"type": "sink", "topic": t.output, "createDisposition": "create-never"},
            "schema": {"fields": [{"name": "seq", "type": "BIGINT"}, {"name": "mid", "type": "TEXT"}]}}))
        .await;
    assert_eq!(code, 200, "{dst}");
    let sql = src["sql"].as_str().unwrap();
    assert!(
        sql.starts_with("CREATE TABLE src (") && sql.contains("'connector' = 'pubsub'"),
        "{sql}"
    );
    assert!(
        sql.contains(&format!("'subscription' = '{}'", t.input_sub)),
        "{sql}"
    );
    assert!(
        sql.contains("'scan.ack.max-extension-period' = '600000ms'"),
        "{sql}"
    );
    assert!(
        sql.contains("mid TEXT NOT NULL METADATA FROM 'message-id'"),
        "{sql}"
    );
    let (code, dup) = s
        .post("/v1/connection_tables", &json!({"name": "src", "connector": "pubsub", "connectionProfileId": id,
            "config": {"type": "source", "subscriptions": [{"id": "other"}]}, "schema": {"fields": [{"name": "a", "type": "TEXT"}]}}))
        .await;
    assert_eq!((code, dup["field"].as_str()), (409, Some("/name")), "{dup}");
    let (_, list) = s.get("/v1/connection_tables").await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2);
    // A profile used by a table is kept.
    assert_eq!(
        s.delete(&format!("/v1/connection_profiles/{id}")).await,
        409
    );

    // The statements, as the wizard shows them, run.
    let pipeline = format!(
        "{sql}\n{}\nINSERT INTO dst SELECT seq, mid FROM src;",
        dst["sql"].as_str().unwrap()
    );
    let w = Workdir::new(&pipeline);
    let child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "3s"]);
    let (code, _, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    let got = sink_ids(&t.output_sub, Some(ids.len()), Duration::from_secs(10)).await;
    assert_eq!(missing(&ids, &got), 0);

    // A key-file profile's statement names the saved profile, not the path.
    let (code, keyed) = s
        .post("/v1/connection_profiles", &json!({"name": "prod", "connector": "pubsub",
            "config": {"project": PROJECT, "authentication": {"type": "service-account-key-file", "path": "/very/secret/key.json"}}}))
        .await;
    assert_eq!(code, 200);
    let (code, t2) = s
        .post("/v1/connection_tables", &json!({"name": "keyed", "connector": "pubsub", "connectionProfileId": keyed["id"],
            "config": {"type": "sink", "topic": "x"}, "schema": {"fields": [{"name": "a", "type": "TEXT"}]}}))
        .await;
    assert_eq!(code, 200, "{t2}");
    let sql = t2["sql"].as_str().unwrap();
    assert!(
        sql.contains("'connection-profile' = 'prod'") && !sql.contains("secret"),
        "{sql}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_profile_is_used_by_name_in_sql_with_the_same_data_dir() {
    let t = topics("connprofile", 60).await;
    let ids = publish_seq(&t.input, 0..100).await;
    let s = Server::start().await;
    s.emulator_profile("local").await;
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, mid TEXT NOT NULL METADATA FROM 'message-id') WITH (
            'connector' = 'pubsub', 'connection-profile' = 'local', 'subscription' = '{}');
         CREATE TABLE dst (seq BIGINT, mid TEXT) WITH ('connector' = 'pubsub', 'connection-profile' = 'local', 'topic' = '{}');
         INSERT INTO dst SELECT seq, mid FROM src;",
        t.input_sub, t.output
    );
    let w = Workdir::new(&sql);
    let data = s.data.path().display().to_string();
    let child = w.spawn(&[
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "3s",
        "--data-dir",
        &data,
    ]);
    let (code, _, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    let got = sink_ids(&t.output_sub, Some(ids.len()), Duration::from_secs(10)).await;
    assert_eq!(missing(&ids, &got), 0);

    // An unknown name, or a profile next to its own project, exits 2 naming the key.
    let other = tempfile::tempdir().unwrap();
    let child = w.spawn(&["--data-dir", &other.path().display().to_string()]);
    let (code, _, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("'connection-profile'") && stderr.contains("'local'"),
        "{stderr}"
    );
    // A lookup only reads: no store is created where there was none.
    assert!(!other.path().join("connections.sqlite").exists());
    std::fs::write(
        w.pipeline(),
        sql.replacen(
            "'connection-profile' = 'local',",
            "'connection-profile' = 'local', 'project' = 'p',",
            1,
        ),
    )
    .unwrap();
    let child = w.spawn(&["--data-dir", &data]);
    let (code, _, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot both be set"), "{stderr}");
}

/// `POST /v1/pipelines/validate` (issue 47): a pipeline planned with this server's saved
/// profiles (its own --data-dir, not the default one), a sink table without columns shown
/// with those of its query, errors with their position, and no key file path in any
/// reply. Needs no emulator: nothing is contacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_is_validated_showing_the_columns_a_sink_takes_from_its_query() {
    let s = Server::start().await;
    let secret = "/very/secret/validate-key.json";
    let keyed = json!({"name": "prod", "connector": "pubsub",
        "config": {"project": "p", "authentication": {"type": "service-account-key-file", "path": secret}}});
    let (code, saved) = s.post("/v1/connection_profiles", &keyed).await;
    assert_eq!(code, 200, "{saved}");
    let (code, saved) = s
        .post(
            "/v1/connection_profiles",
            &profile_body("local", &format!("127.0.0.1:{}", closed_port())),
        )
        .await;
    assert_eq!(code, 200, "{saved}");
    let query = "CREATE TABLE bids (auction BIGINT NOT NULL, price BIGINT,
            mid TEXT NOT NULL METADATA FROM 'message-id')
        WITH ('connector' = 'pubsub', 'connection-profile' = 'prod', 'subscription' = 'bids-sub');
        CREATE TABLE out WITH ('connector' = 'pubsub', 'connection-profile' = 'local',
            'topic' = 'out', 'format' = 'json');
        INSERT INTO out SELECT auction, price * 2 AS doubled, mid FROM bids;";
    let (code, v) = s
        .post("/v1/pipelines/validate", &json!({ "query": query }))
        .await;
    assert_eq!(code, 200, "{v}");
    let out = &v["tables"][1];
    assert_eq!(
        (&out["name"], &out["role"], &out["derived"]),
        (&json!("out"), &json!("sink"), &json!(true)),
        "{v}"
    );
    assert_eq!(
        out["fields"],
        json!([
            {"name": "auction", "type": "BIGINT", "nullable": false},
            {"name": "doubled", "type": "BIGINT", "nullable": true},
            {"name": "mid", "type": "TEXT", "nullable": false}
        ]),
        "{v}"
    );
    assert_eq!(v["tables"][0]["derived"], false, "{v}");
    assert_eq!(v["queries"][0]["id"], "q0", "{v}");
    assert!(!v.to_string().contains("secret"), "{v}");

    // Invalid: the planner's text with its position, at /query; no path in it.
    let bad = query.replace("price * 2", "nope * 2");
    let (code, e) = s
        .post("/v1/pipelines/validate", &json!({ "query": bad }))
        .await;
    assert_eq!((code, e["field"].as_str()), (400, Some("/query")), "{e}");
    let error = e["error"].as_str().unwrap();
    assert!(
        error.contains("column 'nope' does not exist") && error.contains("(line 6, column"),
        "{e}"
    );
    let (code, e) = s
        .post(
            "/v1/pipelines/validate",
            &json!({ "query": "CREATE TABLE t (a BIGINT) WITH ('connector' = 'pubsub',\n 'topic' 'x');" }),
        )
        .await;
    assert_eq!(code, 400, "{e}");
    assert!(e["error"].as_str().unwrap().contains("Line: 2"), "{e}");
    let (code, e) = s
        .post(
            "/v1/pipelines/validate",
            &json!({ "query": query.replace("'bids-sub'", "'bids-sub', 'nope' = '1'") }),
        )
        .await;
    assert_eq!(code, 400, "{e}");
    assert!(!e.to_string().contains("secret"), "{e}");
    let (code, e) = s
        .post("/v1/pipelines/validate", &json!({ "sql": query }))
        .await;
    assert_eq!((code, e["field"].as_str()), (400, Some("/query")), "{e}");
}

// ---------------------------------------------------------------------------------------
// Who may use `serve` (issue 16): Host, Origin, Sec-Fetch-Site, the bearer token.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_naming_another_host_are_refused_even_for_the_page() {
    let s = Server::start().await;
    let id = s.emulator_profile("kept").await;
    let port = s.port();
    // What a page on attacker.example sends after pointing its name at 127.0.0.1.
    let evil = format!("attacker.example:{port}");
    for (method, path) in [
        ("GET", "/".to_string()),
        ("GET", "/assets/wizard.js".to_string()),
        ("GET", "/v1/connection_profiles".to_string()),
        ("DELETE", format!("/v1/connection_profiles/{id}")),
    ] {
        let (code, e) = s.raw(method, &path, &[("host", &evil)], None).await;
        assert_eq!(code, 421, "{method} {path}: {e}");
        let m = e["error"].as_str().unwrap_or_else(|| panic!("{e}"));
        assert!(
            m.contains(&evil) && m.contains(&format!("localhost:{port}")),
            "{m}"
        );
    }
    for (code_wanted, host) in [
        (421, format!("localhost:{}", port.wrapping_add(1))),
        (421, "localhost".to_string()),
        (200, format!("localhost:{port}")),
        (200, format!("127.0.0.1:{port}")),
        (200, format!("[::1]:{port}")),
    ] {
        let (code, v) = s
            .raw("GET", "/v1/connection_profiles", &[("host", &host)], None)
            .await;
        assert_eq!(code, code_wanted, "{host}: {v}");
    }
    // The refused DELETE deleted nothing.
    let (_, all) = s.get("/v1/connection_profiles").await;
    assert_eq!(all["data"][0]["id"], id.as_str(), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changes_from_another_sites_page_are_refused() {
    let s = Server::start().await;
    let id = s.emulator_profile("kept").await;
    let port = s.port();
    let foreign = [("origin", "http://attacker.example")];
    let (code, e) = s
        .raw(
            "POST",
            "/v1/connection_profiles",
            &foreign,
            Some(&profile_body("evil", &endpoint())),
        )
        .await;
    assert_eq!(code, 403, "{e}");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("http://attacker.example"),
        "{e}"
    );
    let path = format!("/v1/connection_profiles/{id}");
    for origin in [
        "http://attacker.example",
        "null",
        &format!("https://127.0.0.1:{port}"),
    ] {
        let (code, e) = s.raw("DELETE", &path, &[("origin", origin)], None).await;
        assert_eq!(code, 403, "{origin}: {e}");
    }
    // A GET another site's page makes (e.g. through <img>) is refused on the API.
    let (code, e) = s
        .raw(
            "GET",
            "/v1/connection_profiles",
            &[("sec-fetch-site", "cross-site")],
            None,
        )
        .await;
    assert_eq!(code, 403, "{e}");
    let (_, all) = s.get("/v1/connection_profiles").await;
    assert_eq!(
        all["data"].as_array().unwrap().len(),
        1,
        "nothing changed: {all}"
    );

    // The wizard's own requests: same origin, under any accepted name.
    let own = format!("http://127.0.0.1:{port}");
    let same = [("origin", own.as_str()), ("sec-fetch-site", "same-origin")];
    let (code, v) = s
        .raw(
            "POST",
            "/v1/connection_profiles",
            &same,
            Some(&profile_body("mine", &endpoint())),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    let own = format!("http://localhost:{port}");
    let (code, v) = s
        .raw("DELETE", &path, &[("origin", own.as_str())], None)
        .await;
    assert_eq!(code, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_listen_address_without_a_token_file_exits_2() {
    let data = tempfile::tempdir().unwrap();
    let empty = data.path().join("empty-token");
    std::fs::write(&empty, "\n").unwrap();
    let empty = empty.display().to_string();
    for (args, wanted) in [
        (vec!["--listen", "0.0.0.0:0"], "--auth-token-file"),
        (
            vec!["--listen", "0.0.0.0:0", "--auth-token-file", &empty],
            "empty",
        ),
    ] {
        let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
            .arg("serve")
            .args(&args)
            .arg("--data-dir")
            .arg(data.path())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .unwrap_or_else(|_| panic!("serve {args:?} must refuse to start, not serve"))
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(wanted) && stderr.contains("--auth-token-file"),
            "{args:?}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_file_every_api_request_needs_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let token = unique("tok3n-Zq8");
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let log = dir.path().join("serve.log");
    let file = file.display().to_string();
    let s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &["--listen", "0.0.0.0:0", "--auth-token-file", &file],
        Some(&log),
    )
    .await;
    let bearer = format!("Bearer {token}");
    for auth in [None, Some("Bearer wrong"), Some("Basic Zm9vOmJhcg==")] {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let (code, e) = s.raw("GET", "/v1/connectors", &headers, None).await;
        assert_eq!(code, 401, "{auth:?}: {e}");
        assert!(
            e["error"].as_str().unwrap().contains("--auth-token-file"),
            "{e}"
        );
        assert!(!e.to_string().contains(&token));
    }
    // Without the token, nothing is saved.
    let (code, _) = s
        .raw(
            "POST",
            "/v1/connection_profiles",
            &[],
            Some(&profile_body("x", &endpoint())),
        )
        .await;
    assert_eq!(code, 401);
    // The page holds no secret: it is served without the token, and asks for it.
    let (code, page) = s.raw("GET", "/", &[], None).await;
    assert_eq!(code, 200);
    assert!(page.as_str().unwrap().contains("token-form"));
    // With it, the API answers.
    let auth = [("authorization", bearer.as_str())];
    let (code, v) = s
        .raw(
            "POST",
            "/v1/connection_profiles",
            &auth,
            Some(&profile_body("x", &endpoint())),
        )
        .await;
    assert_eq!(code, 200, "{v}");
    let (code, v) = s.raw("GET", "/v1/connection_profiles", &auth, None).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
    // The token is in no reply, line or log.
    assert!(!v.to_string().contains(&token) && !s.stdout.contains(&token));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains(&token), "{logged}");
}

// ---------------------------------------------------------------------------------------
// The table test leaves the subscription as it was (issue 16).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_tests_leave_a_dead_letter_subscription_as_it_was() {
    let p = profile();
    let topic = unique("sample-dl-in");
    let dead = unique("sample-dl-dead");
    let sub = unique("sample-dl-sub");
    let dead_sub = unique("sample-dl-dead-sub");
    admin::create_topic(&p, &topic).await.unwrap();
    admin::create_topic(&p, &dead).await.unwrap();
    admin::create_subscription(&p, &dead_sub, &dead, 10)
        .await
        .unwrap();
    admin::create_subscription_with_dead_letter(&p, &sub, &topic, 10, &dead, 5)
        .await
        .unwrap();
    let ids = publish_seq(&topic, 0..3).await;
    let s = Server::start().await;
    let id = s.emulator_profile("local").await;
    let body = json!({"name": "t", "connector": "pubsub", "connectionProfileId": id,
        "config": {"type": "source", "subscriptions": [{"id": sub}]},
        "schema": {"fields": [{"name": "seq", "type": "BIGINT"}]}, "sampleSize": 5});
    // More tests than the dead-letter policy's 5 delivery attempts. The emulator replays
    // no snapshot into the copy, so each test says so instead of reading the backlog.
    for i in 0..6 {
        let events = s.events("/v1/connection_tables/test", &body).await;
        let last = events.last().unwrap();
        assert_eq!(last["done"], true, "test {i}: {events:?}");
        let m = last["message"].as_str().unwrap();
        assert!(
            m.contains("3 decoded") || m.contains("does not replay a snapshot"),
            "test {i}: {events:?}"
        );
    }
    // The subscription delivers each message for the first time.
    let subscriber = client::subscriber(&p).await.unwrap();
    let mut stream = subscriber
        .subscribe(client::subscription_path(PROJECT, &sub))
        .build();
    let mut attempts = HashMap::new();
    while attempts.len() < ids.len() {
        let next = tokio::time::timeout(Duration::from_secs(30), stream.next()).await;
        let Ok(Some(Ok((m, h)))) = next else {
            panic!("only {attempts:?} of {ids:?} came back");
        };
        attempts.insert(m.message_id.clone(), h.delivery_attempt());
        h.ack();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.shutdown_token().shutdown()).await;
    assert!(attempts.values().all(|a| *a == Some(1)), "{attempts:?}");
    let forwarded = redelivered(&dead_sub, Duration::from_secs(3)).await;
    assert!(forwarded.is_empty(), "{forwarded:?}");
    // Nothing is left behind: the topic has only its own subscription, and no snapshot.
    let topics = client::topic_admin(&p).await.unwrap();
    let subs = topics
        .list_topic_subscriptions()
        .set_topic(client::topic_path(PROJECT, &topic))
        .send()
        .await
        .unwrap();
    assert_eq!(
        subs.subscriptions,
        vec![client::subscription_path(PROJECT, &sub)]
    );
    let snapshots = client::subscription_admin(&p)
        .await
        .unwrap()
        .list_snapshots()
        .set_project(format!("projects/{PROJECT}"))
        .send()
        .await
        .unwrap();
    let ours: Vec<_> = snapshots
        .snapshots
        .iter()
        .filter(|x| x.topic == client::topic_path(PROJECT, &topic))
        .collect();
    assert!(ours.is_empty(), "{ours:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_table_test_at_once_is_refused_with_429() {
    // An endpoint that accepts connections and never answers: two tests wait on it.
    let hole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole_addr = hole.local_addr().unwrap().to_string();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    let accept = tokio::spawn(async move {
        while let Ok((c, _)) = hole.accept().await {
            keep.lock().unwrap().push(c);
        }
    });
    let s = Server::start().await;
    let (code, v) = s
        .post("/v1/connection_profiles", &profile_body("hole", &hole_addr))
        .await;
    assert_eq!(code, 200, "{v}");
    let body = json!({"name": "t", "connector": "pubsub", "connectionProfileId": v["id"],
        "config": {"type": "source", "subscriptions": [{"id": "s"}]},
        "schema": {"fields": [{"name": "a", "type": "TEXT"}]}});
    let url = format!("{}/v1/connection_tables/test", s.base);
    // The reply's head comes once the test holds its place.
    let first = s.http.post(&url).json(&body).send().await.unwrap();
    let second = s.http.post(&url).json(&body).send().await.unwrap();
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    let (code, e) = s.post("/v1/connection_tables/test", &body).await;
    assert_eq!(code, 429, "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("at most 2 at once"),
        "{e}"
    );
    // Once they end (the hole closed), tests are accepted again.
    drop((first, second));
    accept.abort();
    held.lock().unwrap().clear();
    let id = s.emulator_profile("local").await;
    let sink = json!({"name": "t", "connector": "pubsub", "connectionProfileId": id,
        "config": {"type": "sink", "topic": "any"}, "schema": {"fields": [{"name": "a", "type": "TEXT"}]}});
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let r = s.http.post(&url).json(&sink).send().await.unwrap();
        if r.status().as_u16() == 200 {
            break;
        }
        assert_eq!(r.status().as_u16(), 429);
        assert!(
            std::time::Instant::now() < deadline,
            "the two tests never ended"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `POST /v1/connection_tables/schema` answers the columns of a topic's Avro schema in
/// the shape of a table's `schema`; with them a table test decodes a message the
/// emulator validated against the schema. A topic without a schema is refused naming
/// `/config`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_columns_of_a_topic_schema_are_answered_and_a_table_test_decodes_avro() {
    let p = profile();
    let schema = unique("wizard-avro");
    admin::create_avro_schema(
        &p,
        &schema,
        r#"{"type":"record","name":"Bid","fields":[
            {"name":"auction","type":"long"},
            {"name":"price","type":["null","double"],"default":null},
            {"name":"bidder","type":"string"},
            {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#,
    )
    .await
    .unwrap();
    let (bound, bound_sub) = bound_topic(&schema, "JSON", "wizard-bound").await;
    let s = Server::start().await;
    let id = s.emulator_profile("local").await;
    let mut body = json!({"connector": "pubsub", "connectionProfileId": id,
        "config": {"type": "source", "subscriptions": [{"id": bound_sub}]}});
    let (code, columns) = s.post("/v1/connection_tables/schema", &body).await;
    assert_eq!(code, 200, "{columns}");
    assert_eq!(
        columns,
        json!({"format": "avro", "fields": [
            {"name": "auction", "type": "BIGINT", "nullable": false},
            {"name": "price", "type": "DOUBLE", "nullable": true},
            {"name": "bidder", "type": "TEXT", "nullable": false},
            {"name": "at", "type": "TIMESTAMP", "nullable": false}
        ]})
    );

    // The derived columns as a table's schema: a table test decodes an Avro message.
    let publisher = client::publisher(&p, &client::topic_path(PROJECT, &bound))
        .unwrap()
        .build()
        .await
        .unwrap();
    let publish = async {
        publisher
            .publish(Message::new().set_data(
                br#"{"auction": 7, "price": {"double": 2.5}, "bidder": "b1", "at": 1700000000123}"#
                    .to_vec(),
            ))
            .await
            .unwrap();
    };
    let mut test = body.clone();
    test["name"] = json!("bids");
    test["schema"] = columns.clone();
    let events = s
        .events_publishing("/v1/connection_tables/test", &test, publish)
        .await;
    let text = serde_json::to_string_pretty(&events).unwrap();
    let row = events
        .iter()
        .find(|e| e["row"].is_object())
        .unwrap_or_else(|| panic!("no decoded row: {text}"));
    assert_eq!(
        row["row"],
        json!({"auction": 7, "price": 2.5, "bidder": "b1", "at": "2023-11-14T22:13:20.123"}),
        "{text}"
    );

    // A topic without a schema gives no columns.
    let (plain, plain_sub) = (unique("wizard-plain"), unique("wizard-plain-sub"));
    admin::create_topic(&p, &plain).await.unwrap();
    admin::create_subscription(&p, &plain_sub, &plain, 60)
        .await
        .unwrap();
    body["config"]["subscriptions"][0]["id"] = json!(plain_sub);
    let (code, v) = s.post("/v1/connection_tables/schema", &body).await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["field"], "/config", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("format 'avro' needs a topic with a schema"),
        "{v}"
    );
}
