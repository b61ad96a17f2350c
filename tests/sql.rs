//! End-to-end tests of how a pipeline file is read and run as a whole: fan-out of one
//! source table to several queries, plan-time refusals, the state-directory lock, signals,
//! and the `emulator` command. Real emulator, real processes.

use crate::support;

use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(180);

/// Distinct `mid` values in an output subscription.
async fn mids(sub: &str, expected: usize) -> std::collections::HashSet<String> {
    sink_ids(sub, Some(expected), Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_table_read_by_two_inserts_delivers_every_message_to_both() {
    pubsub_emulator_tools::wire_log::enable();
    let t = topics("fanout", 60).await;
    let p = profile();
    let second = unique("fanout-out2");
    let second_sub = unique("fanout-out2-sub");
    pubsub_connector_core::admin::create_topic(&p, &second)
        .await
        .unwrap();
    pubsub_connector_core::admin::create_subscription(&p, &second_sub, &second, 60)
        .await
        .unwrap();
    let ids = publish_seq(&t.input, 0..3_000).await;
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, mid TEXT NOT NULL METADATA FROM 'message-id') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{ep}');
         CREATE TABLE a (seq BIGINT, mid TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
            'topic' = '{out}', 'emulator-endpoint' = '{ep}');
         CREATE TABLE b (mid TEXT, seq BIGINT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
            'topic' = '{second}', 'emulator-endpoint' = '{ep}');
         INSERT INTO a SELECT * FROM src;
         INSERT INTO b (seq, mid) SELECT seq, mid FROM src;",
        sub = t.input_sub,
        out = t.output,
        ep = endpoint()
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "3s"]);
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let a = mids(&t.output_sub, ids.len()).await;
    let b = mids(&second_sub, ids.len()).await;
    assert_eq!(missing(&ids, &a), 0, "table a misses messages: {stdout}");
    assert_eq!(missing(&ids, &b), 0, "table b misses messages: {stdout}");
    // Each message was acknowledged once, not once per query: by the summary and at the
    // server (the wire log of the proxy in this process).
    assert_eq!(
        summary_count(&stdout, "messages acknowledged:"),
        ids.len(),
        "{stdout}"
    );
    let wire = Wire::of(&t.input_sub);
    let acked = wire.acked_ids();
    assert_eq!(acked.len(), ids.len(), "{stdout}");
    assert!(
        acked.values().all(|n| *n == 1),
        "a message was acknowledged twice: {stdout}"
    );
    assert!(wire.nacked.is_empty(), "{stdout}");
}

fn plan_error(sql: &str) -> String {
    let w = Workdir::new(sql);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
        .arg("run")
        .arg(w.pipeline())
        .arg("--state-dir")
        .arg(w.state())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn two_tables_on_one_subscription_are_rejected_naming_both() {
    let e = plan_error(
        "CREATE TABLE s1 (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 'sub', 'emulator-endpoint' = '127.0.0.1:1');
         CREATE TABLE s2 (b BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 'sub', 'emulator-endpoint' = '127.0.0.1:1');
         CREATE TABLE d (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'topic' = 't', 'emulator-endpoint' = '127.0.0.1:1');
         INSERT INTO d SELECT a FROM s1;
         INSERT INTO d SELECT b FROM s2;",
    );
    assert!(
        e.contains("tables 's1' and 's2' both read subscription projects/p/subscriptions/sub"),
        "{e}"
    );
    // One shared subscription among several is enough.
    let e = plan_error(
        "CREATE TABLE s1 (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 'x;sub', 'emulator-endpoint' = '127.0.0.1:1');
         CREATE TABLE s2 (b BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 'sub;y', 'emulator-endpoint' = '127.0.0.1:1');
         CREATE TABLE d (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'topic' = 't', 'emulator-endpoint' = '127.0.0.1:1');
         INSERT INTO d SELECT a FROM s1;
         INSERT INTO d SELECT b FROM s2;",
    );
    assert!(
        e.contains("tables 's1' and 's2' both read subscription projects/p/subscriptions/sub"),
        "{e}"
    );
}

#[test]
fn metadata_keys_and_types_are_checked_at_plan_time() {
    let e = plan_error(
        "CREATE TABLE s (a BIGINT, n TEXT METADATA FROM 'delivery-attempt') WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 's', 'emulator-endpoint' = '127.0.0.1:1');",
    );
    assert!(
        e.contains("column 'n' is METADATA FROM 'delivery-attempt', which is BIGINT"),
        "{e}"
    );
    let e = plan_error(
        "CREATE TABLE s (a BIGINT, n TEXT METADATA FROM 'delivery-count') WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 's', 'emulator-endpoint' = '127.0.0.1:1');",
    );
    assert!(
        e.contains("unknown metadata field 'delivery-count' for column 'n'")
            && e.contains("subscription, delivery-attempt"),
        "{e}"
    );
}

#[test]
fn sql_is_read_as_written() {
    let e = plan_error(
        "CREATE TABLE o (first_name TEXT, first_name TEXT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 's', 'emulator-endpoint' = '127.0.0.1:1');",
    );
    assert!(e.contains("declares column 'first_name' twice"), "{e}");
    let e = plan_error(
        "CREATE TABLE o (n BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 's', 'emulator-endpoint' = '127.0.0.1:1');
         CREATE TABLE d (n DOUBLE) WITH ('connector' = 'pubsub', 'project' = 'p', 'topic' = 't', 'emulator-endpoint' = '127.0.0.1:1');
         INSERT INTO d SELECT n FROM o;",
    );
    assert!(
        e.contains("column 'n' (BIGINT) of 'o' cannot be written to column 'n' (DOUBLE)"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_one_state_dir_is_refused() {
    let t = topics("lock", 60).await;
    let w = Workdir::new(&pipeline_sql(&t, &endpoint(), ""));
    let first = w.spawn(&["--checkpoint-interval", "1s"]);
    wait_until("the first job's first checkpoint", LIMIT, || {
        w.checkpoint_epoch().is_some()
    })
    .await;
    assert!(w.state().join("lock").exists());
    let second = w.spawn(&[]);
    let (code, _out, stderr) = finish(second, LIMIT).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("is in use by another pubsub-connector process"),
        "{stderr}"
    );
    signal(&first, "TERM");
    let (code, _out, stderr) = finish(first, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_aborts_at_once_and_releases_what_is_held() {
    // A 600 s ack deadline: only a nack brings a message back at once. The sink writes
    // through a proxy that the test cuts while rows still flow, so the first SIGTERM's
    // final checkpoint cannot complete; the second signal goes only after the first was
    // seen (the OS merges two signals sent before the handler runs into one).
    let t = topics("abort", 600).await;
    let ids = publish_seq(&t.input, 0..20_000).await;
    let proxy = TcpCutter::start(&endpoint()).await.unwrap();
    let sql = pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.ack.max-duration-per-extension' = '10s', 'scan.first-checkpoint-timeout' = '0s',
          'scan.rate-limit.messages-per-second' = '2000'",
    );
    let at = sql.rfind(&endpoint()).unwrap();
    let sql = format!(
        "{}{}{}",
        &sql[..at],
        proxy.endpoint(),
        &sql[at + endpoint().len()..]
    );
    let w = Workdir::new(&sql);
    let mut child = w.spawn(&["--workers", "1", "--checkpoint-interval", "30m"]);
    let lines = collect_lines(child.stderr.take().unwrap());
    let logged = |text: &'static str| {
        let lines = lines.clone();
        move || lines.lock().unwrap().iter().any(|l| l.contains(text))
    };
    let _ = sink_ids(&t.output_sub, Some(200), Duration::from_secs(60)).await;
    proxy.cut();
    signal(&child, "TERM");
    wait_until(
        "the first signal",
        LIMIT,
        logged("signal received: stopping"),
    )
    .await;
    signal(&child, "TERM");
    let (code, stdout, _) = finish(child, LIMIT).await;
    let stderr = lines.lock().unwrap().join("\n");
    assert_ne!(code, 0, "an aborted job does not exit 0: {stderr}");
    assert!(stderr.contains("second signal received"), "{stderr}");
    let released = summary_count(&stdout, "messages released:");
    let back = redelivered(&t.input_sub, Duration::from_secs(5)).await;
    assert!(released > 0, "{stdout}");
    assert!(
        back.len() >= released.min(ids.len()) / 2,
        "released {released}, back {}",
        back.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emulator_command_creates_what_a_pipeline_names_and_a_pipeline_runs_on_it() {
    let port = pubsub_emulator_tools::emulator::free_port().unwrap();
    let sub = format!("{}-sub", unique("emucmd"));
    let topic = sub.strip_suffix("-sub").unwrap().to_string();
    let out = unique("emucmd-out");
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, mid TEXT NOT NULL METADATA FROM 'message-id') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}');
         CREATE TABLE dst (seq BIGINT, mid TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}');
         INSERT INTO dst SELECT * FROM src;"
    );
    let w = Workdir::new(&sql);
    let mut emu = tokio::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
        .args(["emulator", "--port", &port.to_string(), "--create"])
        .arg(w.pipeline())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(emu.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let endpoint = format!("127.0.0.1:{port}");
    tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            let ready = l.contains("ready at");
            printed.push(l);
            if ready {
                break;
            }
        }
    })
    .await
    .expect("the emulator command reports ready");
    let text = printed.join("\n");
    assert!(text.contains(&endpoint), "{text}");
    assert!(
        text.contains(&format!(
            "subscriptions/{sub} on topic projects/{PROJECT}/topics/{topic}"
        )),
        "{text}"
    );

    // The sink topic gets a subscription to read the output from, named in the output.
    let sink_sub = format!("{out}-read");
    assert!(
        text.contains(&format!(
            "topic projects/{PROJECT}/topics/{out}; read what the job writes from subscription projects/{PROJECT}/subscriptions/{sink_sub}"
        )) && text.contains(&format!("http://{endpoint}/v1/projects/{PROJECT}/subscriptions/{sink_sub}:pull")),
        "{text}"
    );
    let p = pubsub_connector_core::client::emulator_profile(PROJECT, &endpoint);
    let payloads = (0..500)
        .map(|i| format!("{{\"seq\": {i}}}").into_bytes())
        .collect();
    let ids = pubsub_connector_core::admin::publish_all(&p, &topic, payloads, 500)
        .await
        .unwrap();
    let sql_with_endpoint = sql.replace(
        &format!("'project' = '{PROJECT}',"),
        &format!("'project' = '{PROJECT}', 'emulator-endpoint' = '{endpoint}',"),
    );
    std::fs::write(w.pipeline(), sql_with_endpoint).unwrap();
    // Two runs in a row: the second resumes at once (the proxy releases stopped streams).
    for _ in 0..2 {
        let child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "2s"]);
        let (code, _stdout, stderr) = finish(child, LIMIT).await;
        assert_eq!(code, 0, "{stderr}");
    }
    let got: std::collections::HashSet<String> = pubsub_connector_core::admin::drain(
        &p,
        &sink_sub,
        1,
        Some(ids.len()),
        Duration::from_secs(5),
    )
    .await
    .unwrap()
    .values()
    .filter_map(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
    .filter_map(|v| v["mid"].as_str().map(str::to_string))
    .collect();
    assert_eq!(missing(&ids, &got), 0);
    signal_tokio(&emu, "INT");
    let status = tokio::time::timeout(Duration::from_secs(30), emu.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}

/// Runs `sql` with `run --emulator` until idle for 2 s; asserts exit 0, returns stderr.
async fn run_on_emulator(sql: &str) -> String {
    let w = Workdir::new(sql);
    let child = w.spawn(&[
        "--emulator",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "2s",
    ]);
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    stderr
}

/// `run --emulator` refuses a table with a service account key file (exit 2, naming it)
/// before starting anything, and creates the subscription of a `per-key` table with
/// message ordering, so such a pipeline runs on the private emulator as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_emulator_refuses_key_files_and_creates_ordered_subscriptions_for_per_key() {
    let keyed = "CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p',
            'subscription' = 'in-sub', 'service-account-key-file' = '/nonexistent/key.json');
         CREATE TABLE d (a BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO d SELECT a FROM s;";
    let w = Workdir::new(keyed);
    let (code, _stdout, stderr) = finish(w.spawn(&["--emulator"]), LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("table 's' sets 'service-account-key-file'"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("/nonexistent"),
        "the path is never shown: {stderr}"
    );

    let ordered = format!(
        "CREATE TABLE s (a BIGINT, k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = 'ord-sub',
            'scan.ordering-mode' = 'per-key');
         CREATE TABLE d (a BIGINT, k TEXT) WITH ('connector' = 'blackhole');
         INSERT INTO d SELECT a, k FROM s;"
    );
    let stderr = run_on_emulator(&ordered).await;
    assert!(
        stderr.contains("subscriptions/ord-sub (message ordering) on topic"),
        "{stderr}"
    );

    // Dead-letter queues go to the same emulator, their topics created there; a queue's
    // own key file is refused like the table's.
    let dead = format!(
        "CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
            'subscription' = 'dl-in-sub', 'scan.deserialization-failure-policy' = 'dead-letter',
            'scan.dead-letter.topic' = 'dl-scan-dead');
         CREATE TABLE d (a BIGINT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
            'topic' = 'dl-out', 'sink.failure-handler' = 'dead-letter',
            'sink.dead-letter.topic' = 'projects/other/topics/dl-sink-dead');
         INSERT INTO d SELECT a FROM s;"
    );
    let stderr = run_on_emulator(&dead).await;
    assert!(
        stderr.contains("table 's': dead-letter topic projects/test/topics/dl-scan-dead"),
        "{stderr}"
    );
    assert!(
        stderr.contains("table 'd': dead-letter topic projects/other/topics/dl-sink-dead"),
        "{stderr}"
    );
    // The sink topic gets a subscription to read the output from, named in an INFO line,
    // which also says the private emulator ends with the job and how to keep one.
    assert!(
        stderr.contains(&format!(
            "read what the job writes from subscription projects/{PROJECT}/subscriptions/dl-out-read"
        )) && stderr.contains("pubsub-connector emulator --port 8085 --create"),
        "{stderr}"
    );
    // A table with its own endpoint keeps it, and so does its queue: the queue's topic
    // is created where the queue publishes (found by a newcomer: it was created on the
    // table's emulator while the queue published to the private one).
    let own = unique("dl-own-dead");
    let stderr = run_on_emulator(
        &dead
            .replace(
                "'topic' = 'dl-out',",
                &format!(
                    "'topic' = 'dl-out', 'emulator-endpoint' = '{}',",
                    endpoint()
                ),
            )
            .replace("projects/other/topics/dl-sink-dead", &own),
    )
    .await;
    assert!(
        stderr.contains(&format!(
            "table 'd': dead-letter topic projects/{PROJECT}/topics/{own}"
        )),
        "{stderr}"
    );
    let topics = pubsub_connector_core::client::topic_admin(&profile())
        .await
        .unwrap();
    topics
        .get_topic()
        .set_topic(format!("projects/{PROJECT}/topics/{own}"))
        .send()
        .await
        .expect("the queue's topic is on the table's emulator");

    let w = Workdir::new(&dead.replace(
        "'sink.dead-letter.topic' =",
        "'sink.dead-letter.service-account-key-file' = '/nonexistent/key.json', 'sink.dead-letter.topic' =",
    ));
    let (code, _stdout, stderr) = finish(w.spawn(&["--emulator"]), LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("table 'd' sets 'sink.dead-letter.service-account-key-file'"),
        "{stderr}"
    );
    assert!(!stderr.contains("/nonexistent"), "{stderr}");
}

fn signal_tokio(child: &tokio::process::Child, sig: &str) {
    let pid = child.id().expect("running");
    std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
}

/// A job that fails because of one table must release everything every other table took or
/// its streams had buffered: all of it comes back, at the latest after the closed stream's
/// ack deadline (10 s here), none of it acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_releases_what_other_tables_streams_had_buffered() {
    let a = topics("fail-a", 600).await;
    let b = topics("fail-b", 600).await;
    let ids = publish_seq(&b.input, 0..2_000).await;
    let ep = endpoint();
    let sql = format!(
        "CREATE TABLE sa (seq BIGINT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
            'subscription' = '{sa}', 'emulator-endpoint' = '{ep}',
            'scan.first-checkpoint-timeout' = '0s');
         CREATE TABLE sb (seq BIGINT, mid TEXT NOT NULL METADATA FROM 'message-id') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sb}',
            'emulator-endpoint' = '{ep}', 'scan.flow-control.max-outstanding-element-count' = '50',
            'scan.ack.max-duration-per-extension' = '10s', 'scan.first-checkpoint-timeout' = '0s');
         CREATE TABLE oa (seq BIGINT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{oa}', 'emulator-endpoint' = '{ep}');
         CREATE TABLE ob (seq BIGINT, mid TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{ob}', 'emulator-endpoint' = '{ep}');
         INSERT INTO oa SELECT * FROM sa;
         INSERT INTO ob SELECT * FROM sb;",
        sa = a.input_sub,
        sb = b.input_sub,
        oa = a.output,
        ob = b.output,
    );
    let w = Workdir::new(&sql);
    // No checkpoint completes: nothing of b may be acknowledged, everything must come back.
    let child = w.spawn(&["--workers", "1", "--checkpoint-interval", "30m"]);
    let first = sink_ids(&b.output_sub, Some(10), Duration::from_secs(60)).await;
    assert!(!first.is_empty(), "table sb is reading");
    let p = profile();
    pubsub_connector_core::admin::publish_all(&p, &a.input, vec![br#"{"seq": 1.5}"#.to_vec()], 1)
        .await
        .unwrap();
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("1.5 is not an integer"), "{stderr}");
    let back = redelivered(&b.input_sub, Duration::from_secs(12)).await;
    assert_eq!(
        missing(&ids, &back.keys().cloned().collect()),
        0,
        "{} of {} came back",
        back.len(),
        ids.len()
    );
}

/// A sink table declared without columns takes the name and type of each select item
/// of the INSERT writing it (issue 47): the JSON rows carry exactly those keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_without_columns_writes_the_select_lists_columns() {
    let t = topics("derived", 60).await;
    publish_seq(&t.input, 0..50).await;
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, mid TEXT NOT NULL METADATA FROM 'message-id') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{ep}');
         CREATE TABLE out WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
            'topic' = '{out}', 'emulator-endpoint' = '{ep}');
         INSERT INTO out SELECT seq, seq * 2 AS twice, mid FROM src;",
        sub = t.input_sub,
        out = t.output,
        ep = endpoint()
    );
    let wd = Workdir::new(&sql);
    wd.run_ok(&["--checkpoint-interval", "1s", "--stop-when-idle", "3s"])
        .await;
    let rows = pubsub_connector_core::admin::drain(
        &profile(),
        &t.output_sub,
        1,
        Some(50),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 50);
    for payload in rows.values() {
        let v: serde_json::Value = serde_json::from_slice(payload).unwrap();
        let seq = v["seq"].as_i64().unwrap();
        assert_eq!(v["twice"].as_i64(), Some(2 * seq), "{v}");
        assert!(v["mid"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert_eq!(v.as_object().unwrap().len(), 3, "{v}");
    }
}
