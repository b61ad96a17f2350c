//! The sink against the real emulator (SPEC 6): metadata columns, Pub/Sub's limits,
//! large messages, a topic deleted mid-run, a network cut.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use pubsub_connector_core::admin;
use pubsub_emulator_tools::emulator_proxy::{
    largest_publish_request, publish_requests, refuse_publish_containing,
};
use support::*;

const LIMIT: Duration = Duration::from_secs(240);

/// A source of JSON rows `{seq, attrs, k, pad}` and a sink writing `seq` and `pad` as the
/// payload, `attrs` as attributes and `k` as ordering key.
fn metadata_sql(t: &Topics, sink_endpoint: &str, sink_extra: &str) -> String {
    metadata_sql_ordering(t, sink_endpoint, true, sink_extra)
}

/// As [`metadata_sql`], with `sink.message-ordering.enabled` = `ordering`.
fn metadata_sql_ordering(
    t: &Topics,
    sink_endpoint: &str,
    ordering: bool,
    sink_extra: &str,
) -> String {
    format!(
        "CREATE TABLE src (seq BIGINT, attrs TEXT, k TEXT, pad TEXT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{ep}', 'format' = 'json');
         CREATE TABLE dst (seq BIGINT, pad TEXT, a TEXT METADATA FROM 'attributes',
                           k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{sink_endpoint}',
            'sink.message-ordering.enabled' = '{ordering}' {sink_extra});
         INSERT INTO dst SELECT seq, pad, attrs, k FROM src;",
        sub = t.input_sub,
        out = t.output,
        ep = endpoint(),
    )
}

async fn publish_json(topic: &str, rows: &[serde_json::Value]) {
    let payloads = rows.iter().map(|r| r.to_string().into_bytes()).collect();
    admin::publish_all(&profile(), topic, payloads, 100)
        .await
        .unwrap();
}

/// [`pipeline_sql`] with the sink behind `sink_endpoint` (a [`TcpCutter`]) and
/// `sink_extra` options; `src_extra` goes to the source.
fn via_sql(t: &Topics, sink_endpoint: &str, src_extra: &str, sink_extra: &str) -> String {
    let sql = pipeline_sql(t, &endpoint(), src_extra);
    let sink = format!("'emulator-endpoint' = '{}');\n         INSERT", endpoint());
    assert!(sql.contains(&sink), "{sql}");
    sql.replacen(
        &sink,
        &format!("'emulator-endpoint' = '{sink_endpoint}' {sink_extra});\n         INSERT"),
        1,
    )
}

/// Runs 600 messages through a sink (with `sink_opts`) whose network is cut for good once
/// 100 rows arrived; asserts the job fails and that nothing was acknowledged unpublished.
/// Returns its stderr.
async fn cut_for_good(prefix: &str, sink_opts: &str) -> String {
    let t = topics(prefix, 10).await;
    let ids = publish_seq(&t.input, 0..600).await;
    let proxy = TcpCutter::start(&endpoint()).await.unwrap();
    let sql = via_sql(
        &t,
        &proxy.endpoint(),
        ", 'scan.rate-limit.messages-per-second' = '100'",
        sink_opts,
    );
    let w = Workdir::new(&sql);
    let probe = probe(&t).await;
    let child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "30s"]);
    let seen = sink_ids(&probe, Some(100), Duration::from_secs(30)).await;
    assert!(seen.len() >= 100);
    proxy.cut();
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_ne!(code, 0, "{stderr}");
    let published = sink_ids(&t.output_sub, None, Duration::from_secs(3)).await;
    nothing_acknowledged_unpublished(&t, &ids, &published).await;
    stderr
}

/// Asserts that every input message acknowledged upstream (not redelivered within 15 s,
/// longer than the 10 s ack deadline) was published to the output.
async fn nothing_acknowledged_unpublished(t: &Topics, ids: &[String], published: &HashSet<String>) {
    let back = redelivered(&t.input_sub, Duration::from_secs(15)).await;
    let lost: Vec<&String> = ids
        .iter()
        .filter(|id| !back.contains_key(*id) && !published.contains(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged but never published, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
}

/// The `seq` of up to `expected` messages drained from `sub` (JSON payloads), sorted.
async fn sorted_seqs(sub: &str, expected: usize) -> Vec<i64> {
    let out = admin::drain_messages(&profile(), sub, 2, Some(expected), Duration::from_secs(10))
        .await
        .unwrap();
    let mut seqs: Vec<i64> = out
        .iter()
        .map(|m| {
            serde_json::from_slice::<serde_json::Value>(&m.data).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    seqs.sort();
    seqs
}

/// A dead-letter topic with a subscription: (topic, subscription, the sink options that
/// route rejected rows there).
async fn dead_letter_topic(prefix: &str) -> (String, String, String) {
    let (dlq, dlq_sub) = (unique(prefix), unique(&format!("{prefix}-sub")));
    admin::create_topic(&profile(), &dlq).await.unwrap();
    admin::create_subscription(&profile(), &dlq_sub, &dlq, 60)
        .await
        .unwrap();
    let opts = format!(
        ", 'sink.failure-handler' = 'dead-letter', 'sink.dead-letter.topic' = '{dlq}', 'sink.dead-letter.emulator-endpoint' = '{}'",
        endpoint()
    );
    (dlq, dlq_sub, opts)
}

/// Runs `rows` rows `{seq, pad}` (`pad_bytes` long) through a sink with `sink_opts`;
/// asserts every row was written and returns the size of each Publish request sent.
async fn publish_requests_of_run(
    prefix: &str,
    rows: usize,
    pad_bytes: usize,
    sink_opts: &str,
) -> Vec<usize> {
    let t = topics(prefix, 10).await;
    let pad = "x".repeat(pad_bytes);
    let payloads: Vec<serde_json::Value> = (0..rows)
        .map(|i| serde_json::json!({"seq": i, "pad": pad}))
        .collect();
    publish_json(&t.input, &payloads).await;
    let w = Workdir::new(&metadata_sql(&t, &endpoint(), sink_opts));
    let (code, stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "rows written:"), rows, "{stdout}");
    publish_requests(&format!("projects/{PROJECT}/topics/{}", t.output))
}

async fn run(w: &Workdir, idle: &str) -> (i32, String, String) {
    let child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", idle]);
    finish(child, LIMIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attributes_and_ordering_keys_are_written_exactly_and_rows_over_a_limit_are_routed_alone() {
    pubsub_emulator_tools::wire_log::enable();
    let t = topics("sink-meta", 10).await;
    let mut rows: Vec<serde_json::Value> = (0..60)
        .map(|i| {
            let attrs = serde_json::json!({"n": i.to_string(), "é": "ü", "empty": ""});
            serde_json::json!({"seq": i, "attrs": attrs.to_string(), "k": format!("k{}", i % 3)})
        })
        .collect();
    // Each over one of Pub/Sub's limits, counted in UTF-8 bytes: a value of 600 'é'
    // (1,200 bytes), a 257-byte key, 101 attributes; and one that would be empty.
    let over: [serde_json::Value; 3] = [
        serde_json::json!({"v": "é".repeat(600)}),
        serde_json::json!({"k".repeat(257): "v"}),
        serde_json::Value::Object((0..101).map(|i| (format!("a{i}"), "v".into())).collect()),
    ];
    for (i, a) in over.iter().enumerate() {
        rows.insert(
            10 + 20 * i,
            serde_json::json!({"seq": 1000 + i, "attrs": a.to_string(), "k": "k0"}),
        );
    }
    publish_json(&t.input, &rows).await;
    let w = Workdir::new(&metadata_sql(
        &t,
        &endpoint(),
        ", 'sink.failure-handler' = 'log-and-drop'",
    ));
    let (code, stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "records skipped:"), 3, "{stdout}");
    assert_eq!(summary_count(&stdout, "rows written:"), 60, "{stdout}");
    assert!(stderr.contains("1200 bytes (UTF-8)"), "{stderr}");
    let out = admin::drain_messages(
        &profile(),
        &t.output_sub,
        2,
        Some(60),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(out.len(), 60);
    for m in &out {
        let v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        let seq = v["seq"].as_i64().unwrap();
        // The metadata columns are not in the payload; NULL `pad` is omitted.
        assert_eq!(v, serde_json::json!({"seq": seq}));
        let want: HashMap<String, String> = [
            ("n".to_string(), seq.to_string()),
            ("é".to_string(), "ü".to_string()),
            ("empty".to_string(), String::new()),
        ]
        .into();
        assert_eq!(m.attributes, want);
        assert_eq!(m.ordering_key, format!("k{}", seq % 3));
    }
    assert_all_acked(&t.input_sub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordering_key_column_without_message_ordering_is_refused_naming_the_option() {
    let t = topics("sink-nokey", 10).await;
    publish_json(&t.input, &[serde_json::json!({"seq": 1, "k": "a"})]).await;
    let w = Workdir::new(&metadata_sql_ordering(&t, &endpoint(), false, ""));
    let (code, _stdout, stderr) = run(&w, "5s").await;
    // Refused when the pipeline is planned: a configuration error (exit 2).
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("'sink.message-ordering.enabled' is false"),
        "{stderr}"
    );
    // Nothing was published, so nothing was acknowledged.
    assert_eq!(
        redelivered(&t.input_sub, Duration::from_secs(3))
            .await
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_are_published_in_requests_within_10_mib_and_one_over_it_is_routed() {
    use pubsub_connector_core::sink::limits::{violation, MAX_REQUEST_BYTES};
    // What the service enforces (its refusal names 10485760 bytes), not the docs' 10 MB.
    assert_eq!(MAX_REQUEST_BYTES, 10_485_760);
    let t = topics("sink-large", 60).await;
    let topic = format!("projects/{PROJECT}/topics/{}", t.output);
    // The largest data whose one-message request is exactly Pub/Sub's 10,485,760 bytes.
    let none = HashMap::new();
    let at_limit = (MAX_REQUEST_BYTES - 200..MAX_REQUEST_BYTES)
        .rev()
        .find(|d| violation(&topic, *d, &none, "").is_none())
        .unwrap();
    // raw_string: the row's value is the message data, byte for byte.
    let sizes = [
        600 * 1024,
        8 * 1024 * 1024,
        10_380_902, // 9.9 MiB: issue 16's message, which Pub/Sub accepts
        at_limit,
        at_limit + 1, // one byte over: routed alone
    ];
    let payloads: Vec<Vec<u8>> = sizes.iter().map(|n| vec![b'x'; *n]).collect();
    admin::publish_all(&profile(), &t.input, payloads, 10)
        .await
        .unwrap();
    let sql = format!(
        "CREATE TABLE src (value TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
            'subscription' = '{sub}', 'emulator-endpoint' = '{ep}', 'format' = 'raw_string');
         CREATE TABLE dst (value TEXT) WITH ('connector' = 'pubsub', 'project' = '{PROJECT}',
            'topic' = '{out}', 'emulator-endpoint' = '{ep}', 'format' = 'raw_string',
            'sink.failure-handler' = 'log-and-drop');
         INSERT INTO dst SELECT value FROM src;",
        sub = t.input_sub,
        out = t.output,
        ep = endpoint(),
    );
    let w = Workdir::new(&sql);
    let (code, stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "rows written:"), 4, "{stdout}");
    assert_eq!(summary_count(&stdout, "records skipped:"), 1, "{stdout}");
    assert!(
        stderr.contains(&format!(
            "a publish request of {} bytes, more than Pub/Sub's 10485760",
            MAX_REQUEST_BYTES + 1
        )),
        "{stderr}"
    );
    let out = admin::drain_messages(
        &profile(),
        &t.output_sub,
        2,
        Some(4),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let mut got: Vec<usize> = out.iter().map(|m| m.data.len()).collect();
    got.sort();
    assert_eq!(got, sizes[..4].to_vec());
    // The request at the limit reached the emulator whole, and none was larger.
    assert_eq!(largest_publish_request(&topic), MAX_REQUEST_BYTES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batching_fills_requests_up_to_the_byte_threshold() {
    let t = topics("sink-batch", 60).await;
    let pad = "x".repeat(600 * 1024);
    let rows: Vec<serde_json::Value> = (0..20)
        .map(|i| serde_json::json!({"seq": i, "pad": pad}))
        .collect();
    publish_json(&t.input, &rows).await;
    let w = Workdir::new(&metadata_sql(
        &t,
        &endpoint(),
        ", 'sink.batching.request-byte-threshold' = '10000000'",
    ));
    let (code, stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "rows written:"), 20, "{stdout}");
    let largest = largest_publish_request(&format!("projects/{PROJECT}/topics/{}", t.output));
    // Several 600 KiB messages shared a request, within the client's 10^7 threshold.
    assert!(largest > 9_000_000, "largest request {largest} bytes");
    assert!(largest <= 10_485_760, "a request of {largest} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_exactly_at_each_limit_passes_and_one_byte_over_is_routed_alone() {
    let t = topics("sink-edges", 10).await;
    let attrs = |pairs: Vec<(String, String)>| {
        serde_json::Value::Object(pairs.into_iter().map(|(k, v)| (k, v.into())).collect())
            .to_string()
    };
    let one = |k: &str, v: String| attrs(vec![(k.to_string(), v)]);
    let many = |n: usize| attrs((0..n).map(|i| (format!("a{i}"), "v".into())).collect());
    // (seq, attributes, ordering key): even seqs at a limit, odd ones a byte over it.
    let rows = [
        (0, one("v", "é".repeat(512)), "k".to_string()), // a value of 1,024 bytes
        (
            1,
            one("v", format!("{}x", "é".repeat(512))),
            "k".to_string(),
        ),
        (2, one(&"ä".repeat(128), "v".into()), "k".to_string()), // a key of 256 bytes
        (
            3,
            one(&format!("{}x", "ä".repeat(128)), "v".into()),
            "k".to_string(),
        ),
        (4, many(100), "k".to_string()),
        (5, many(101), "k".to_string()),
        (6, one("a", "v".into()), "ö".repeat(512)), // an ordering key of 1,024 bytes
        (7, one("a", "v".into()), format!("{}x", "ö".repeat(512))),
    ];
    let json: Vec<serde_json::Value> = rows
        .iter()
        .map(|(seq, a, k)| serde_json::json!({"seq": seq, "attrs": a, "k": k}))
        .collect();
    publish_json(&t.input, &json).await;
    let w = Workdir::new(&metadata_sql(
        &t,
        &endpoint(),
        ", 'sink.failure-handler' = 'log-and-drop'",
    ));
    let (code, stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "rows written:"), 4, "{stdout}");
    assert_eq!(summary_count(&stdout, "records skipped:"), 4, "{stdout}");
    for why in [
        "is 1025 bytes (UTF-8), more than Pub/Sub's 1024",
        "is 257 bytes (UTF-8), more than Pub/Sub's 256",
        "101 attributes, more than Pub/Sub's 100",
        "the ordering key is 1025 bytes (UTF-8), more than Pub/Sub's 1024",
    ] {
        assert!(stderr.contains(why), "{why}: {stderr}");
    }
    assert_eq!(sorted_seqs(&t.output_sub, 4).await, vec![0, 2, 4, 6]);
}

/// Polls until `topic` exists again (the sink recreated it), within [`LIMIT`].
async fn until_recreated(topic: &str) {
    let admin = pubsub_connector_core::client::topic_admin(&profile())
        .await
        .unwrap();
    let name = pubsub_connector_core::client::topic_path(PROJECT, topic);
    let start = std::time::Instant::now();
    while admin
        .get_topic()
        .set_topic(name.clone())
        .send()
        .await
        .is_err()
    {
        assert!(start.elapsed() < LIMIT, "the sink never recreated {name}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A second subscription on the output topic that only shows progress, so the output
/// subscription is read once, at the end: a read stopped at a count leaves what its
/// streams had in flight leased for up to their ack deadline (10 s; see
/// `admin::drain_messages`), and a short read after it would miss those rows.
async fn probe(t: &Topics) -> String {
    let probe = unique("sink-probe");
    admin::create_subscription(&profile(), &probe, &t.output, 10)
        .await
        .unwrap();
    probe
}

/// Waits until the job has written at least 50 rows (seen on `probe`) before the topic is
/// deleted.
async fn written_before_deletion(probe: &str) {
    let seen = sink_ids(probe, Some(50), Duration::from_secs(30)).await;
    assert!(seen.len() >= 50, "{}", seen.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_recreated_mid_run_with_a_subscription_gets_every_row_readable_there() {
    pubsub_emulator_tools::wire_log::enable();
    let t = topics("sink-recreate", 10).await;
    let probe = probe(&t).await;
    let ids = publish_seq(&t.input, 0..300).await;
    // One sink subtask, whose republish after the recreation would come 1-2 ms later
    // (recovery backoff 1 ms): before this test can add the subscription below, so the
    // rows would be discarded unless the sink waits for a subscription.
    let w = Workdir::new(&via_sql(
        &t,
        &endpoint(),
        ", 'scan.rate-limit.messages-per-second' = '100'",
        ", 'sink.recovery.initial-backoff' = '1ms', 'sink.recovery.max-backoff' = '2s', 'sink.recovery.max-attempts' = '20'",
    ));
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "500ms",
        "--stop-when-idle",
        "5s",
    ]);
    written_before_deletion(&probe).await;
    // As a fault campaign does: delete the topic, then recreate it (unless the sink was
    // first) with a subscription through the admin API.
    admin::delete_topic(&profile(), &t.output).await.unwrap();
    until_recreated(&t.output).await;
    let _ = admin::create_topic(&profile(), &t.output).await;
    let sub = unique("sink-recreate-sub2");
    admin::create_subscription(&profile(), &sub, &t.output, 60)
        .await
        .unwrap();
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "topics created:"), 1, "{stdout}");
    // Rows confirmed before the deletion are on the old subscription; every later one is
    // readable on the new one.
    let mut got = sink_ids(&t.output_sub, None, Duration::from_secs(3)).await;
    got.extend(sink_ids(&sub, None, Duration::from_secs(5)).await);
    assert_eq!(missing(&ids, &got), 0, "{stderr}");
    assert_all_acked(&t.input_sub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_recreated_mid_run_without_a_subscription_fails_the_job_and_acknowledges_no_lost_row(
) {
    let t = topics("sink-recreate-none", 10).await;
    let probe = probe(&t).await;
    let ids = publish_seq(&t.input, 0..300).await;
    let w = Workdir::new(&via_sql(
        &t,
        &endpoint(),
        ", 'scan.rate-limit.messages-per-second' = '100'",
        ", 'sink.recovery.initial-backoff' = '10ms', 'sink.recovery.max-attempts' = '3'",
    ));
    let child = w.spawn(&["--checkpoint-interval", "500ms", "--stop-when-idle", "5s"]);
    written_before_deletion(&probe).await;
    admin::delete_topic(&profile(), &t.output).await.unwrap();
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_ne!(
        code, 0,
        "the job went on into a topic without subscription: {stdout}"
    );
    assert!(stderr.contains("ERROR"), "{stderr}");
    assert!(
        stderr.contains("has no subscription") && stderr.contains("Create a subscription"),
        "{stderr}"
    );
    // Every row is readable (on the old subscription, written before the deletion) or
    // still unacknowledged on the input subscription.
    let got = sink_ids(&t.output_sub, None, Duration::from_secs(3)).await;
    let back: HashSet<String> = redelivered(&t.input_sub, Duration::from_secs(15))
        .await
        .into_keys()
        .collect();
    let lost: Vec<&String> = ids
        .iter()
        .filter(|id| !got.contains(*id) && !back.contains(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} rows neither readable nor redelivered: {stderr}",
        lost.len()
    );
    // A restart without a subscription is refused again, naming the topic.
    let (code, _, stderr) = finish(
        w.spawn(&["--checkpoint-interval", "500ms", "--stop-when-idle", "5s"]),
        LIMIT,
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&t.output) && stderr.contains("has no subscription"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_between_runs_is_not_written_without_a_subscription_at_the_restart() {
    // The kind of finding 6 across a restart: the job wrote (and checkpointed) into the
    // topic, which is then deleted while the job is down. The restart used to create it
    // as at a first start, without a subscription, and publish the new rows into it:
    // discarded by Pub/Sub, acknowledged upstream, exit 0.
    let t = topics("sink-gone-between", 10).await;
    let first = publish_seq(&t.input, 0..100).await;
    // A 10 s lease extension: each restart waits out the previous run's leases.
    let w = Workdir::new(&via_sql(
        &t,
        &endpoint(),
        ", 'scan.ack.max-duration-per-extension' = '10s'",
        "",
    ));
    let args = ["--checkpoint-interval", "500ms", "--stop-when-idle", "3s"];
    let (code, _, stderr) = finish(w.spawn(&args), LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(w.checkpoint_epoch().is_some());
    let got = sink_ids(&t.output_sub, Some(100), Duration::from_secs(30)).await;
    assert_eq!(missing(&first, &got), 0);
    admin::delete_topic(&profile(), &t.output).await.unwrap();
    let second = publish_seq(&t.input, 100..200).await;
    refused_until_subscribed(&t, &w, &args, &second).await;
}

/// The run after the sink's topic was deleted must refuse to start (naming the topic),
/// not create it without a subscription; once a subscription exists, the next run writes
/// every one of `ids` there (the refused run acknowledged none of them).
async fn refused_until_subscribed(t: &Topics, w: &Workdir, args: &[&str], ids: &[String]) {
    let (code, stdout, stderr) = finish(w.spawn(args), LIMIT).await;
    assert_ne!(
        code, 0,
        "the run wrote into a topic without a subscription: {stdout}"
    );
    assert!(
        stderr.contains(&t.output) && stderr.contains("has no subscription"),
        "{stderr}"
    );
    let sub = unique(&format!("{}-sub2", t.output));
    admin::create_subscription(&profile(), &sub, &t.output, 60)
        .await
        .unwrap();
    let (code, _, stderr) = finish(w.spawn(args), LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    let got = sink_ids(&sub, Some(ids.len()), Duration::from_secs(30)).await;
    assert_eq!(missing(ids, &got), 0, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_after_a_killed_run_without_a_checkpoint_is_not_written_without_a_subscription(
) {
    // Found by the fault campaign (seed 39): the first run wrote rows and died before its
    // first checkpoint; the topic was deleted; the next run, restoring nothing, created it
    // as at a first start and acknowledged rows published into a topic without a
    // subscription. Any run after the first counts as mid-job (the job record's runs).
    let t = topics("sink-gone-nockpt", 10).await;
    let ids = publish_seq(&t.input, 0..100).await;
    let w = Workdir::new(&via_sql(
        &t,
        &endpoint(),
        ", 'scan.ack.max-duration-per-extension' = '10s'",
        "",
    ));
    let mut first = w.spawn(&["--checkpoint-interval", "60s"]);
    let early = sink_ids(&t.output_sub, Some(1), Duration::from_secs(30)).await;
    assert!(!early.is_empty(), "the first run wrote rows");
    signal(&first, "KILL");
    first.wait().await.unwrap();
    assert_eq!(w.checkpoint_epoch(), None, "no checkpoint completed");
    admin::delete_topic(&profile(), &t.output).await.unwrap();
    let args = ["--checkpoint-interval", "500ms", "--stop-when-idle", "3s"];
    refused_until_subscribed(&t, &w, &args, &ids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_cut_of_5s_under_the_sink_is_outlasted_and_nothing_is_lost() {
    pubsub_emulator_tools::wire_log::enable();
    let t = topics("sink-cut", 10).await;
    let ids = publish_seq(&t.input, 0..1500).await;
    let proxy = TcpCutter::start(&endpoint()).await.unwrap();
    let sql = via_sql(
        &t,
        &proxy.endpoint(),
        ", 'scan.rate-limit.messages-per-second' = '200'",
        "",
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "10s"]);
    let early = sink_ids(&t.output_sub, Some(200), Duration::from_secs(30)).await;
    assert!(early.len() >= 200);
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(5)).await;
    proxy.restore().await.unwrap();
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    let mut got = early;
    got.extend(sink_ids(&t.output_sub, None, Duration::from_secs(10)).await);
    assert_eq!(missing(&ids, &got), 0, "{stderr}");
    assert_all_acked(&t.input_sub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_keeps_each_keys_order_and_keys_whose_publish_failed_resume_after_repair() {
    pubsub_emulator_tools::wire_log::enable();
    let p = profile();
    let (input, output) = (unique("sink-ord-in"), unique("sink-ord-out"));
    let (in_sub, out_sub, out_sub2) = (
        unique("sink-ord-in-sub"),
        unique("sink-ord-out-sub"),
        unique("sink-ord-out-sub2"),
    );
    admin::create_topic(&p, &input).await.unwrap();
    admin::create_topic(&p, &output).await.unwrap();
    let subs = pubsub_connector_core::client::subscription_admin(&p)
        .await
        .unwrap();
    let ordered_sub = |name: &str, topic: &str| {
        subs.create_subscription()
            .set_name(pubsub_connector_core::client::subscription_path(
                PROJECT, name,
            ))
            .set_topic(pubsub_connector_core::client::topic_path(PROJECT, topic))
            .set_enable_message_ordering(true)
            .set_ack_deadline_seconds(10)
            .send()
    };
    ordered_sub(&in_sub, &input).await.unwrap();
    ordered_sub(&out_sub, &output).await.unwrap();
    publish_ordered(&input, &["a", "b", "c"], 300).await;
    // One worker, so one sink subtask: the first publish after the deletion fails, that
    // subtask recreates the topic, and its republish waits the recovery backoff (4-8 s
    // here), time for the test to subscribe to the recreated topic first. With two
    // subtasks the other one would publish to the recreated topic at once, before any
    // subscription exists, and Pub/Sub keeps no message for a topic without one.
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{in_sub}',
            'emulator-endpoint' = '{e}', 'scan.ordering-mode' = 'per-key',
            'scan.rate-limit.messages-per-second' = '40');
         CREATE TABLE dst (seq BIGINT, k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{output}',
            'emulator-endpoint' = '{e}', 'sink.message-ordering.enabled' = 'true',
            'sink.recovery.initial-backoff' = '8s', 'sink.recovery.max-backoff' = '20s');
         INSERT INTO dst SELECT seq, k FROM src;",
        e = endpoint()
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "8s",
    ]);
    // 60 rows confirmed, seen on the wire: reading them here would strand what the
    // reader's client buffered beyond them, which the emulator then redelivers out of
    // order on its key.
    let out_topic = pubsub_connector_core::client::topic_path(PROJECT, &output);
    wait_until("60 rows published", LIMIT, || {
        pubsub_emulator_tools::wire_log::events()
            .into_iter()
            .filter_map(|e| match e.kind {
                pubsub_emulator_tools::wire_log::WireKind::Published { topic, data }
                    if topic == out_topic =>
                {
                    Some(data.len())
                }
                _ => None,
            })
            .sum::<usize>()
            >= 60
    })
    .await;
    // Every key's next publish fails (NOT_FOUND) and pauses the key.
    admin::delete_topic(&p, &output).await.unwrap();
    let topics = pubsub_connector_core::client::topic_admin(&p)
        .await
        .unwrap();
    let name = pubsub_connector_core::client::topic_path(PROJECT, &output);
    let start = std::time::Instant::now();
    while topics
        .get_topic()
        .set_topic(name.clone())
        .send()
        .await
        .is_err()
    {
        assert!(start.elapsed() < LIMIT, "the sink never recreated {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ordered_sub(&out_sub2, &output).await.unwrap();
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        summary_count(&stdout, "send errors NOT FOUND:") >= 1,
        "{stdout}"
    );
    let mut got = ordered(&out_sub, 300).await;
    let before = got.len();
    got.extend(ordered(&out_sub2, 300).await);
    assert!(
        got.len() > before,
        "rows after the repair reached the recreated topic"
    );
    let mut per_key: HashMap<String, Vec<i64>> = HashMap::new();
    for (k, seq) in got {
        per_key.entry(k).or_default().push(seq);
    }
    for (i, k) in ["a", "b", "c"].iter().enumerate() {
        let want: Vec<i64> = (0..300).filter(|s| s % 3 == i as i64).collect();
        assert_eq!(per_key[*k], want, "key {k}: every row, in order, once");
    }
    assert_all_acked(&in_sub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_rows_reach_the_dead_letter_topic_with_five_attributes_and_a_flush_failure_fails_the_checkpoint(
) {
    pubsub_emulator_tools::wire_log::enable();
    let t = topics("sink-dlq", 10).await;
    let (dlq, dlq_sub, dlq_opts) = dead_letter_topic("sink-dlq-dead").await;
    // 40 good rows; 2 over a limit (a 1,200-byte value, a 257-byte key) and 1 whose
    // attributes column is not an object of strings.
    let mut rows: Vec<serde_json::Value> = (0..40)
        .map(|i| serde_json::json!({"seq": i, "attrs": "{\"ok\":\"1\"}"}))
        .collect();
    rows.push(serde_json::json!({"seq": 100, "attrs": serde_json::json!({"v": "é".repeat(600)}).to_string()}));
    rows.push(serde_json::json!({"seq": 101, "attrs": serde_json::json!({"k".repeat(257): "v"}).to_string()}));
    rows.push(serde_json::json!({"seq": 102, "attrs": "{\"n\": 7}"}));
    publish_json(&t.input, &rows).await;
    let w = Workdir::new(&metadata_sql(&t, &endpoint(), &dlq_opts));
    let (code, stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "rows written:"), 40, "{stdout}");
    assert_eq!(
        summary_count(&stdout, "dead letters published:"),
        3,
        "{stdout}"
    );
    let letters = admin::drain_messages(&profile(), &dlq_sub, 1, Some(3), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(letters.len(), 3);
    let topic = format!("projects/{PROJECT}/topics/{}", t.output);
    let mut seqs = Vec::new();
    for m in &letters {
        let mut keys: Vec<&str> = m.attributes.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "dlq-connector",
                "dlq-destination",
                "dlq-error",
                "dlq-subtask",
                "dlq-timestamp"
            ]
        );
        assert_eq!(m.attributes["dlq-connector"], "pubsub-sink");
        assert_eq!(m.attributes["dlq-destination"], topic);
        let err = &m.attributes["dlq-error"];
        assert!(!err.is_empty() && err.len() <= 1024, "{err}");
        assert!(m.attributes["dlq-timestamp"].ends_with('Z'));
        m.attributes["dlq-subtask"].parse::<usize>().unwrap();
        // The original payload: the row as the sink encoded it.
        let v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        seqs.push(v["seq"].as_i64().unwrap());
    }
    seqs.sort();
    assert_eq!(seqs, [100, 101, 102]);
    assert_all_acked(&t.input_sub);

    // The dead-letter topic deleted: the next flush fails the checkpoint, and the rows of
    // that checkpoint are not acknowledged.
    admin::delete_topic(&profile(), &dlq).await.unwrap();
    publish_json(
        &t.input,
        &[serde_json::json!({"seq": 200, "attrs": "{\"n\": 7}"})],
    )
    .await;
    let w = Workdir::new(&metadata_sql(&t, &endpoint(), &dlq_opts));
    let (code, _stdout, stderr) = run(&w, "5s").await;
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&dlq),
        "the error names the dead-letter topic: {stderr}"
    );
    // Released by the failed run, or back after its lease (up to one 60 s extension).
    let back = admin::drain(
        &profile(),
        &t.input_sub,
        1,
        Some(1),
        Duration::from_secs(70),
    )
    .await
    .unwrap();
    assert_eq!(back.len(), 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_rejections_in_a_row_fail_the_job_naming_the_option() {
    let t = topics("sink-rejections", 10).await;
    let rows: Vec<serde_json::Value> = (0..5)
        .map(|i| serde_json::json!({"seq": i, "attrs": "{\"n\": 1}"}))
        .collect();
    publish_json(&t.input, &rows).await;
    let w = Workdir::new(&metadata_sql(
        &t,
        &endpoint(),
        ", 'sink.failure-handler' = 'log-and-drop', 'sink.max-consecutive-rejections' = '3'",
    ));
    let (code, _stdout, stderr) = run(&w, "5s").await;
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("more than 'sink.max-consecutive-rejections' = 3"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_is_created_at_start_with_the_create_options() {
    let t = topics("sink-create", 10).await;
    admin::delete_topic(&profile(), &t.output).await.unwrap();
    publish_seq(&t.input, 0..10).await;
    let w = Workdir::new(&pipeline_sql(&t, &endpoint(), "").replace(
        &format!("'topic' = '{}',", t.output),
        &format!(
            "'topic' = '{}', 'sink.auto-create.message-retention' = '1 day',
             'sink.auto-create.allowed-persistence-regions' = 'europe-west1,europe-west4',
             'sink.auto-create.enforce-in-transit' = 'true',
             'sink.auto-create.kms-key-name' = '{KMS_KEY}',",
            t.output
        ),
    ));
    let (code, stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "topics created:"), 1, "{stdout}");
    let topics = pubsub_connector_core::client::topic_admin(&profile())
        .await
        .unwrap();
    let created = topics
        .get_topic()
        .set_topic(format!("projects/{PROJECT}/topics/{}", t.output))
        .send()
        .await
        .unwrap();
    let policy = created.message_storage_policy.expect("a storage policy");
    assert_eq!(
        policy.allowed_persistence_regions,
        ["europe-west1", "europe-west4"]
    );
    assert!(policy.enforce_in_transit);
    assert_eq!(
        created.message_retention_duration.map(|d| d.seconds()),
        Some(86_400)
    );
    // The emulator stores the key name (it encrypts nothing).
    assert_eq!(created.kms_key_name, KMS_KEY);
}

const KMS_KEY: &str = "projects/test/locations/europe-west1/keyRings/ring/cryptoKeys/key";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_argument_from_a_fake_proxy_republishes_the_batch_alone_and_routes_only_the_message_refused_on_its_own(
) {
    pubsub_emulator_tools::wire_log::enable();
    let t = topics("sink-invalid", 10).await;
    let (_, dlq_sub, dlq_opts) = dead_letter_topic("sink-inv-dead").await;
    let topic = format!("projects/{PROJECT}/topics/{}", t.output);
    // The emulator refuses no request (see `sink::limits`): the test's proxy refuses
    // every Publish request to the output topic that carries the marker, as Pub/Sub
    // refuses a request with a message it finds invalid.
    refuse_publish_containing(&topic, b"POISON");
    let rows: Vec<serde_json::Value> = (0..60)
        .map(|i| {
            let pad = if i == 17 || i == 42 { "POISON" } else { "fine" };
            serde_json::json!({"seq": i, "pad": pad})
        })
        .collect();
    publish_json(&t.input, &rows).await;
    let w = Workdir::new(&metadata_sql(&t, &endpoint(), &dlq_opts));
    let (code, stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(summary_count(&stdout, "rows written:"), 58, "{stdout}");
    assert_eq!(
        summary_count(&stdout, "dead letters published:"),
        2,
        "{stdout}"
    );
    // At least one refused batch and the two messages refused on their own.
    assert!(
        summary_count(&stdout, "send errors INVALID ARGUMENT:") >= 3,
        "{stdout}"
    );
    let seqs = sorted_seqs(&t.output_sub, 58).await;
    let want: Vec<i64> = (0..60).filter(|i| *i != 17 && *i != 42).collect();
    assert_eq!(seqs, want, "every good row once, the refused ones not");
    let letters = admin::drain_messages(&profile(), &dlq_sub, 1, Some(2), Duration::from_secs(5))
        .await
        .unwrap();
    let mut dead: Vec<i64> = letters
        .iter()
        .map(|m| {
            let err = &m.attributes["dlq-error"];
            assert!(
                err.contains("refused the message on its own (INVALID_ARGUMENT)"),
                "{err}"
            );
            serde_json::from_slice::<serde_json::Value>(&m.data).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    dead.sort();
    assert_eq!(dead, [17, 42]);
    assert_all_acked(&t.input_sub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_caps_bound_the_messages_and_bytes_outstanding() {
    // One message in flight at a time: every message goes in a request of its own,
    // where the defaults would batch them.
    let requests = publish_requests_of_run(
        "sink-inflight-n",
        30,
        0,
        ", 'sink.in-flight.max-messages' = '1'",
    )
    .await;
    assert_eq!(requests.len(), 30);
    // 400 KiB in flight: 300 KiB messages go one at a time.
    let requests = publish_requests_of_run(
        "sink-inflight-b",
        10,
        300 * 1024,
        ", 'sink.in-flight.max-bytes' = '400 KiB'",
    )
    .await;
    assert_eq!(requests.len(), 10);
    assert!(requests.iter().all(|b| *b < 400 * 1024), "{requests:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_publish_that_makes_no_progress_fails_at_the_progress_timeout_and_acknowledges_nothing_unpublished(
) {
    // With ordering the client retries without end; only the progress timeout ends it.
    let stderr = cut_for_good(
        "sink-stall",
        ", 'sink.message-ordering.enabled' = 'true', 'sink.publish-progress-timeout' = '5s'",
    )
    .await;
    assert!(
        stderr.contains("completed for 5s ('sink.publish-progress-timeout')"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(a tenth of 'sink.publish-progress-timeout' = 5s)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_recovery_caps_end_a_publish_that_cannot_reach_pubsub_naming_the_option() {
    // Without the retry caps the client would retry for its default 600 s; with them each
    // publish gives up within about 2 s, and the sink republishes twice before failing.
    let stderr = cut_for_good(
        "sink-retry",
        ", 'sink.retry.total-timeout' = '2s', 'sink.retry.max-attempts' = '4',
           'sink.retry.initial-delay' = '100ms', 'sink.retry.delay-multiplier' = '2',
           'sink.retry.max-delay' = '400ms', 'sink.retry.initial-rpc-timeout' = '500ms',
           'sink.retry.rpc-timeout-multiplier' = '1.5', 'sink.retry.max-rpc-timeout' = '1s',
           'sink.recovery.initial-backoff' = '100ms', 'sink.recovery.max-backoff' = '200ms',
           'sink.recovery.max-attempts' = '2'",
    )
    .await;
    assert!(
        stderr.contains("failed 3 times in a row ('sink.recovery.max-attempts' = 2)"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("'sink.publish-progress-timeout'"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_under_create_never_or_a_missing_dead_letter_topic_is_refused_at_start_with_exit_2(
) {
    let t = topics("sink-refused", 10).await;
    admin::delete_topic(&profile(), &t.output).await.unwrap();
    publish_seq(&t.input, 0..5).await;
    let sql = pipeline_sql(&t, &endpoint(), "");
    let out = format!("'topic' = '{}',", t.output);
    let w = Workdir::new(&sql.replace(
        &out,
        &format!("{out} 'sink.create-disposition' = 'create-never',"),
    ));
    let (code, _stdout, stderr) = run(&w, "5s").await;
    // A configuration error: no restart fixes it, so `cluster` does not retry it.
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("'sink.create-disposition' is 'create-never'"),
        "{stderr}"
    );
    // A topic name Pub/Sub refuses (too short), for the output and the dead-letter topic.
    for bad in [
        "'topic' = 'o3',".to_string(),
        format!(
            "{out} 'sink.failure-handler' = 'dead-letter', 'sink.dead-letter.topic' = 'dl',
             'sink.dead-letter.emulator-endpoint' = '{}',",
            endpoint()
        ),
    ] {
        let w = Workdir::new(&sql.replace(&out, &bad));
        let (code, _stdout, stderr) = run(&w, "5s").await;
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("INVALID_ARGUMENT") || stderr.contains("Invalid"),
            "{stderr}"
        );
    }

    let w = Workdir::new(&sql.replace(
        &out,
        &format!(
            "{out} 'sink.failure-handler' = 'dead-letter', 'sink.dead-letter.topic' = 'no-such-dead-letters',
             'sink.dead-letter.emulator-endpoint' = '{}',",
            endpoint()
        ),
    ));
    let (code, _stdout, stderr) = run(&w, "5s").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("fix option 'sink.dead-letter.topic'"),
        "{stderr}"
    );
    // Refused before the output topic was created.
    let topics = pubsub_connector_core::client::topic_admin(&profile())
        .await
        .unwrap();
    let missing = topics
        .get_topic()
        .set_topic(format!("projects/{PROJECT}/topics/{}", t.output))
        .send()
        .await
        .unwrap_err();
    assert!(format!("{missing:?}").contains("NotFound"), "{missing:?}");
    // Nothing is lost: the five messages are all still there. If the source had leased
    // them, they come back once the emulator lets the lease go: wait for all five, and
    // fail only after 90 s without any.
    let back = admin::drain(
        &profile(),
        &t.input_sub,
        2,
        Some(5),
        Duration::from_secs(90),
    )
    .await
    .unwrap();
    assert_eq!(back.len(), 5);
}

/// Through the Rust API (the operator itself): closing with publishes that cannot
/// complete waits `sink.shutdown-timeout`, not the 600 s progress timeout. Those
/// publishes belong to no completed checkpoint; their rows are read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_with_publishes_in_flight_waits_at_most_the_shutdown_timeout() {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use pubsub_connector_core::sink::SinkWriter;
    use pubsub_engine_spi::{
        ArrowOperator, BadData, ConnectionSchema, FieldType, Format, Metrics, OperatorConfig,
        OperatorContext, OperatorState, SourceField, TaskInfo,
    };
    use pubsub_schema::{Authentication, PubSubProfile, SinkConfig};

    let output = unique("sink-close");
    admin::create_topic(&profile(), &output).await.unwrap();
    let proxy = TcpCutter::start(&endpoint()).await.unwrap();
    let sink_profile = PubSubProfile {
        project: PROJECT.into(),
        authentication: Authentication::Emulator {
            endpoint: proxy.endpoint(),
        },
    };
    let mut config = SinkConfig::new(output.clone());
    // An ordered publisher retries without end: only a timeout ends the wait.
    config.publisher.message_ordering = true;
    config.publisher.shutdown_timeout_ms = 1_000;
    let schema = ConnectionSchema::json(vec![SourceField::new("seq", FieldType::Bigint)]);
    let op = OperatorConfig {
        drop_replays: false,
        dedup_in_dataflow: false,
        format: Format::Json,
        bad_data: BadData::Fail,
        schema,
        metadata_fields: vec![],
    };
    let mut writer = SinkWriter::new(sink_profile, config, op).unwrap();
    let arrow_schema = Arc::new(Schema::new(vec![Field::new("seq", DataType::Int64, true)]));
    let metrics = Metrics::default();
    let mut ctx = OperatorContext {
        task_info: TaskInfo {
            job_id: "test".into(),
            operator_id: "sink".into(),
            operator_name: "sink".into(),
            task_index: 0,
            parallelism: 1,
            run: 1,
        },
        in_schema: arrow_schema.clone(),
        metrics: metrics.clone(),
        state: OperatorState::default(),
        first_run: true,
    };
    writer.on_start(&mut ctx).await.unwrap();
    proxy.cut();
    let batch = RecordBatch::try_new(
        arrow_schema,
        vec![Arc::new(Int64Array::from_iter_values(0..5))],
    )
    .unwrap();
    writer.process_batch(batch, &mut ctx).await.unwrap();
    assert_eq!(
        ctx.gauge(pubsub_connector_core::sink::metrics::IN_FLIGHT_MESSAGES)
            .get(),
        5
    );
    // Returns once the shutdown timeout passed (the limit only catches a hang).
    tokio::time::timeout(LIMIT, writer.on_close(&mut ctx))
        .await
        .expect("on_close is bounded by sink.shutdown-timeout")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_element_count_threshold_bounds_the_messages_of_each_request() {
    let requests = publish_requests_of_run(
        "sink-count",
        30,
        1000,
        ", 'sink.batching.element-count-threshold' = '5', 'sink.batching.delay-threshold' = '1s'",
    )
    .await;
    // A message is about 1,030 bytes on the wire: five fit in 5,400 bytes, six do not.
    assert!(requests.len() >= 6, "{requests:?}");
    assert!(requests.iter().all(|b| *b < 5_400), "{requests:?}");
    assert!(requests.iter().any(|b| *b > 4_000), "batched: {requests:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_idle_for_longer_than_the_progress_timeout_does_not_fail_on_its_next_row() {
    // Progress means "something in flight completed": the clock must not run while
    // nothing is in flight. Idle for 3x the 2 s timeout, then more rows.
    let t = topics("sink-idle", 10).await;
    let first = publish_seq(&t.input, 0..20).await;
    let sql = via_sql(
        &t,
        &endpoint(),
        "",
        // One publish in flight at a time: each next row waits for a result under the
        // progress clock at once, so a clock that ran through the idle time fails it.
        ", 'sink.publish-progress-timeout' = '2s', 'sink.in-flight.max-messages' = '1'",
    );
    let w = Workdir::new(&sql);
    let mut child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "30s"]);
    let mut got = sink_ids(&t.output_sub, Some(first.len()), Duration::from_secs(30)).await;
    assert_eq!(missing(&first, &got), 0);
    // The idle time is the point of the test: a bounded wait on wall time, polling that
    // the job is still running.
    let idle_since = std::time::Instant::now();
    wait_until("6 s of idle sink", Duration::from_secs(30), || {
        let running = child.try_wait().expect("poll the job").is_none();
        assert!(running, "the job ended while idle");
        idle_since.elapsed() >= Duration::from_secs(6)
    })
    .await;
    let second = publish_seq(&t.input, 20..40).await;
    got.extend(sink_ids(&t.output_sub, Some(second.len()), Duration::from_secs(30)).await);
    assert_eq!(
        missing(&second, &got),
        0,
        "rows after the idle time are missing"
    );
    signal(&child, "TERM");
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("completed for 2s"), "{stderr}");
    assert_eq!(summary_count(&stdout, "rows written:"), 40, "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emulator_accepts_a_request_over_pubsubs_10_mib_so_the_sink_checks_it_itself() {
    // A measurement (decision 0017): the emulator takes requests up to about 11,000,000
    // bytes, which Pub/Sub refuses, so only the sink's own check (sink::limits, unit
    // tested) keeps a request within 10,485,760; this shows the check is needed.
    let topic = unique("emulator-over");
    admin::create_topic(&profile(), &topic).await.unwrap();
    let over = 10_485_760 + 1;
    admin::publish_all(&profile(), &topic, vec![vec![b'x'; over]], 1)
        .await
        .unwrap();
    let full = format!("projects/{PROJECT}/topics/{topic}");
    assert!(largest_publish_request(&full) > 10_485_760);
}

/// A sink's endpoint cut for an outage: starts `w` (its sink behind `proxy`, the source
/// not cut) with `args` and `rust_log`, waits for its first checkpoint (every source and
/// sink connected), cuts the sink's endpoint, publishes `n` messages (the source reads
/// them all at once; the sink can publish none of them, so none is written twice), waits
/// `outage` and restores the endpoint. Returns the job, its stderr lines, the index of
/// the first line logged after the restore, when the endpoint came back and the input's
/// message ids.
async fn sink_outage(
    w: &Workdir,
    proxy: &TcpCutter,
    input: &str,
    args: &[&str],
    rust_log: &str,
    n: usize,
    outage: Duration,
) -> (
    tokio::process::Child,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    usize,
    std::time::Instant,
    Vec<String>,
) {
    let (pipeline, state) = (w.pipeline(), w.state());
    let mut all = vec![
        "run".to_string(),
        pipeline.display().to_string(),
        "--state-dir".to_string(),
        state.display().to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
        .args(&all)
        .env("RUST_LOG", rust_log)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn pubsub-connector");
    let lines = collect_lines(child.stderr.take().unwrap());
    wait_until("the first checkpoint", LIMIT, || {
        w.checkpoint_epoch().is_some()
    })
    .await;
    proxy.cut();
    let ids = publish_seq(input, 0..n).await;
    // The outage is the scenario, not a measurement: the job sees it for this long.
    tokio::time::sleep(outage).await;
    let after = lines.lock().unwrap().len();
    proxy.restore().await.unwrap();
    (child, lines, after, std::time::Instant::now(), ids)
}

/// Adds to `n` every output row's source message id (`mid`), once per time it was
/// written (drains the subscription: `expected` rows, or until it is quiet for `idle`).
async fn count_written(
    n: &mut HashMap<String, usize>,
    sub: &str,
    expected: Option<usize>,
    idle: Duration,
) {
    let out = admin::drain_messages(&profile(), sub, 2, expected, idle)
        .await
        .unwrap();
    for m in out {
        let v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        *n.entry(v["mid"].as_str().unwrap().to_string()).or_default() += 1;
    }
}

/// Asserts that every id of `ids` was written exactly once and nothing else was.
fn exactly_once(written: &HashMap<String, usize>, ids: &[String]) {
    let missing = missing(ids, &written.keys().cloned().collect());
    let twice = written.values().filter(|c| **c > 1).count();
    assert_eq!(
        (missing, twice, written.len()),
        (0, 0, ids.len()),
        "(missing, written more than once, distinct written)"
    );
}

/// Issue 31 (a): `--stop-when-idle` means caught up end to end, not "the source read
/// nothing new". The sink's endpoint is cut while the source reads 2,000 messages (all
/// within flow control and `--max-inflight-rows`, so the source is never held back) and
/// then sits idle far longer than the 4 s idle time; the endpoint comes back after 12 s.
/// The final checkpoint must begin only after that, the run exit 0 and every message be
/// written exactly once. Before: the final checkpoint began during the cut (4 s after the
/// last message was read) with nothing written, and the stop's progress deadline (60 s)
/// decided the rest (with 20,000 messages and a 45 s cut: exit 1, 15,001 written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stop_waits_for_a_sink_whose_endpoint_is_cut_and_every_message_is_written_once() {
    pubsub_emulator_tools::wire_log::enable();
    let t = topics("sink-idle-cut", 10).await;
    let proxy = TcpCutter::start(&endpoint()).await.unwrap();
    let w = Workdir::new(&via_sql(&t, &proxy.endpoint(), "", ""));
    let (child, lines, restored_at, _, ids) = sink_outage(
        &w,
        &proxy,
        &t.input,
        &["--checkpoint-interval", "1s", "--stop-when-idle", "4s"],
        "info",
        2_000,
        Duration::from_secs(12),
    )
    .await;
    let (code, stdout, _) = finish(child, LIMIT).await;
    let lines = lines.lock().unwrap().clone();
    assert_eq!(code, 0, "{}", lines.join("\n"));
    let stop = lines
        .iter()
        .position(|l| l.contains("taking a final checkpoint"))
        .unwrap_or_else(|| panic!("no final checkpoint: {}", lines.join("\n")));
    assert!(
        stop >= restored_at,
        "the final checkpoint began during the sink's outage (line {stop}, the endpoint came back at line {restored_at}): {}",
        lines.join("\n")
    );
    assert!(
        lines[..restored_at]
            .iter()
            .any(|l| l.contains("but the pipeline is not caught up")),
        "{}",
        lines.join("\n")
    );
    assert_eq!(
        summary_count(&stdout, "rows written:"),
        ids.len(),
        "{stdout}"
    );
    let mut written = HashMap::new();
    count_written(&mut written, &t.output_sub, None, Duration::from_secs(5)).await;
    exactly_once(&written, &ids);
    assert_all_acked(&t.input_sub);
}

/// Issue 31 (b): once its endpoint is back, a sink publishes again within
/// `PUBLISH_RETRY_MAX_DELAY` (2 s) plus one attempt: the client waits at most that long
/// between two attempts of a request, and never skips a retry. Checked on what the client
/// did, not on a clock: every wait it scheduled during a 10 s cut (logged at DEBUG) is
/// within the bound, and every message is written exactly once. The time from the
/// endpoint's return to the last row read at the output is printed as a measurement.
/// Before: waits of up to 60 s (100 ms growing 4x, drawn below it), and the client's
/// throttler skipped most retries after the outage, each skip another wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_whose_endpoint_returns_retries_within_the_resume_bound_and_writes_every_row_once() {
    use pubsub_connector_core::client::PUBLISH_RETRY_MAX_DELAY;
    let t = topics("sink-resume", 10).await;
    let proxy = TcpCutter::start(&endpoint()).await.unwrap();
    let w = Workdir::new(&via_sql(&t, &proxy.endpoint(), "", ""));
    let outage = Duration::from_secs(10);
    let (child, lines, restored_at, back, ids) = sink_outage(
        &w,
        &proxy,
        &t.input,
        &["--checkpoint-interval", "1s"],
        "info,pubsub_connector_core::sink::publisher=debug",
        2_000,
        outage,
    )
    .await;
    let mut written = HashMap::new();
    count_written(&mut written, &t.output_sub, Some(ids.len()), LIMIT).await;
    let resumed = back.elapsed();
    signal(&child, "TERM");
    let (code, stdout, _) = finish(child, LIMIT).await;
    let lines = lines.lock().unwrap().clone();
    assert_eq!(code, 0, "{}", lines.join("\n"));
    // Every wait the client scheduled between two attempts of a request.
    let waits: Vec<u64> = lines
        .iter()
        .filter(|l| l.contains("the next attempt, if the error is retryable, waits"))
        .map(|l| {
            let v = l.split("delay_ms=").nth(1).expect("delay_ms field");
            v.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok())
                .expect("delay_ms value")
        })
        .collect();
    let during = lines[..restored_at]
        .iter()
        .filter(|l| l.contains("the next attempt, if the error is retryable, waits"))
        .count();
    let attempts = lines
        .iter()
        .filter_map(|l| l.split("attempt=").nth(1))
        .filter_map(|v| {
            v.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u32>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    let longest = waits.iter().max().copied().unwrap_or(0);
    eprintln!(
        "measurement: {} retries scheduled ({during} during the {outage:?} outage), at most {attempts} attempts of one request, longest wait {longest} ms (bound {} ms); every row read at the output {:.1} s after the endpoint came back = {:.2} x the bound, {:.2} x the outage",
        waits.len(),
        PUBLISH_RETRY_MAX_DELAY.as_millis(),
        resumed.as_secs_f64(),
        resumed.as_secs_f64() / PUBLISH_RETRY_MAX_DELAY.as_secs_f64(),
        resumed.as_secs_f64() / outage.as_secs_f64(),
    );
    assert!(
        during > 0,
        "the client logged no retry during the outage: {}",
        lines.join("\n")
    );
    assert!(
        longest <= PUBLISH_RETRY_MAX_DELAY.as_millis() as u64,
        "a wait of {longest} ms between two attempts of a request, over the bound of {PUBLISH_RETRY_MAX_DELAY:?}"
    );
    assert_eq!(
        summary_count(&stdout, "rows written:"),
        ids.len(),
        "{stdout}"
    );
    count_written(&mut written, &t.output_sub, None, Duration::from_secs(5)).await;
    exactly_once(&written, &ids);
}

/// The runtime's idle stop reads the gauge the Pub/Sub source reports its held messages in.
#[test]
fn the_idle_stop_reads_the_gauge_the_source_reports_held_messages_in() {
    assert_eq!(
        pubsub_connector_core::source::PENDING_ACKS,
        pubsub_engine_spi::PENDING_ACKS
    );
}
