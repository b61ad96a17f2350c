//! End-to-end tests of the Pub/Sub source against the real emulator: reconnects after a
//! network cut, permanent errors, the bad-message policy, default flow control, and
//! fail-fast start-up errors. Each test uses its own topics.

use crate::support;

use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(150);

/// Like `pipeline_sql`, with separate endpoints for the source and the sink.
fn split_sql(t: &Topics, source_endpoint: &str, sink_endpoint: &str, extra: &str) -> String {
    pipeline_sql(t, source_endpoint, extra).replacen(
        &format!(
            "'topic' = '{}',\n            'emulator-endpoint' = '{source_endpoint}'",
            t.output
        ),
        &format!(
            "'topic' = '{}',\n            'emulator-endpoint' = '{sink_endpoint}'",
            t.output
        ),
        1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_cut_mid_stream_reconnects_and_delivers_everything() {
    let t = topics("cut", 10).await;
    let mut ids = publish_seq(&t.input, 0..3_000).await;
    let proxy = TcpCutter::start(&endpoint()).await.unwrap();
    // Only the source goes through the proxy.
    let w = Workdir::new(&split_sql(&t, &proxy.endpoint(), &endpoint(), ""));
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "10s",
    ]);
    let first = sink_ids(&t.output_sub, Some(3_000), Duration::from_secs(60)).await;
    assert_eq!(first.len(), 3_000, "the first half reached the sink");
    // Cut for 6 s; the second half is published meanwhile, so the source can only get it
    // over a reconnected stream (the client buffers what the server already pushed).
    proxy.cut();
    let started = std::time::Instant::now();
    ids.extend(publish_seq(&t.input, 3_000..6_000).await);
    // The outage length is the reported input (a 6 s cut), not a wait for a condition.
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(started.elapsed())).await;
    proxy.restore().await.unwrap();
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let rest = sink_ids(&t.output_sub, None, Duration::from_secs(5)).await;
    let got: std::collections::HashSet<String> = first.union(&rest).cloned().collect();
    assert_eq!(
        missing(&ids, &got),
        0,
        "every message id reaches the sink; stderr: {stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains(&t.input_sub)),
        "a WARN names the subscription: {stderr}"
    );
    assert!(
        stderr.contains("reconnected after"),
        "an INFO reports the recovery: {stderr}"
    );
}

/// Publishes raw payloads to `topic`; returns their message ids.
async fn publish_raw(topic: &str, payloads: Vec<&[u8]>) -> Vec<String> {
    pubsub_connector_core::admin::publish_all(
        &profile(),
        topic,
        payloads.into_iter().map(<[u8]>::to_vec).collect(),
        100,
    )
    .await
    .unwrap()
}

fn ten_good() -> Vec<&'static [u8]> {
    vec![
        b"{\"seq\": 0}",
        b"{\"seq\": 1}",
        b"{\"seq\": 2}",
        b"{\"seq\": 3}",
        b"{\"seq\": 4}",
        b"{\"seq\": 5}",
        b"{\"seq\": 6}",
        b"{\"seq\": 7}",
        b"{\"seq\": 8}",
        b"{\"seq\": 9}",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_deleted_mid_run_fails_the_job_naming_it() {
    let t = topics("deleted", 10).await;
    publish_seq(&t.input, 0..200).await;
    let w = Workdir::new(&pipeline_sql(&t, &endpoint(), ""));
    let child = w.spawn(&["--workers", "1", "--checkpoint-interval", "1s"]);
    let first = sink_ids(&t.output_sub, Some(200), Duration::from_secs(60)).await;
    assert!(!first.is_empty(), "nothing reached the sink");
    pubsub_connector_core::admin::delete_subscription(&profile(), &t.input_sub)
        .await
        .unwrap();
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_ne!(code, 0, "stderr: {stderr}");
    let last = stderr.lines().rev().take(20).collect::<Vec<_>>().join("\n");
    assert!(
        stderr.contains(&t.input_sub) && stderr.contains("NotFound"),
        "the error names the subscription and the status: {last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_policy_acknowledges_the_bad_message_and_writes_the_rest() {
    let t = topics("drop", 10).await;
    let mut payloads = ten_good();
    // In the middle: rows decoded before and after it in the same batch must all arrive.
    payloads.insert(5, b"not json at all");
    let ids = publish_raw(&t.input, payloads).await;
    let bad = ids[5].clone();
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.deserialization-failure-policy' = 'drop'",
    ));
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "3s",
    ]);
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stderr.contains(&format!("dropped message {bad}")),
        "the drop is logged with the id: {stderr}"
    );
    let got = sink_ids(&t.output_sub, Some(10), Duration::from_secs(10)).await;
    assert_eq!(got.len(), 10, "{got:?}");
    assert!(!got.contains(&bad));
    // Longer than the 10 s ack deadline: nothing, the bad message included, comes back.
    let left = redelivered(&t.input_sub, Duration::from_secs(12)).await;
    assert!(left.is_empty(), "redelivered: {:?}", left.keys());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_policy_sends_the_bad_message_to_the_dead_letter_topic() {
    let p = profile();
    let t = topics("nack", 10).await;
    let dlq = unique("nack-dlq");
    let dlq_sub = unique("nack-dlq-sub");
    let sub = unique("nack-in-dl-sub");
    pubsub_connector_core::admin::create_topic(&p, &dlq)
        .await
        .unwrap();
    pubsub_connector_core::admin::create_subscription(&p, &dlq_sub, &dlq, 10)
        .await
        .unwrap();
    pubsub_connector_core::admin::create_subscription_with_dead_letter(
        &p, &sub, &t.input, 10, &dlq, 5,
    )
    .await
    .unwrap();
    let mut payloads = ten_good();
    payloads.insert(5, b"{broken");
    let ids = publish_raw(&t.input, payloads).await;
    let bad = ids[5].clone();
    let t2 = Topics {
        input: t.input.clone(),
        input_sub: sub.clone(),
        output: t.output.clone(),
        output_sub: t.output_sub.clone(),
    };
    let w = Workdir::new(&pipeline_sql(
        &t2,
        &endpoint(),
        ", 'scan.deserialization-failure-policy' = 'nack'",
    ));
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "5s",
    ]);
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stderr.contains(&format!("nacked message {bad}")),
        "{stderr}"
    );
    let got = sink_ids(&t.output_sub, Some(10), Duration::from_secs(10)).await;
    assert_eq!(got.len(), 10, "{got:?}");
    // The dead-letter topic gets a copy under a new message id: match the payload.
    let dead = admin_drain_payloads(&dlq_sub, 1).await;
    assert!(
        dead.iter().any(|p| p.as_slice() == b"{broken"),
        "the bad message reaches the dead-letter topic: {dead:?}"
    );
}

async fn admin_drain_payloads(sub: &str, expected: usize) -> Vec<Vec<u8>> {
    let rows = pubsub_connector_core::admin::drain(
        &profile(),
        sub,
        1,
        Some(expected),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    rows.into_values().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_policy_without_dead_letter_policy_is_a_startup_error_naming_the_fix() {
    let t = topics("nack-nodlq", 10).await;
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.deserialization-failure-policy' = 'nack'",
    ));
    let (code, _stdout, stderr) = finish(w.spawn(&[]), Duration::from_secs(30)).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("scan.deserialization-failure-policy")
            && stderr.contains(&t.input_sub)
            && stderr.contains("set a dead-letter topic on the subscription, or use 'drop'"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_options_do_not_throttle_a_waiting_backlog() {
    let t = topics("defaults", 60).await;
    let ids = publish_seq(&t.input, 0..5_000).await;
    let w = Workdir::new(&pipeline_sql(&t, &endpoint(), ""));
    // The default 10 s checkpoint interval and the default flow control.
    let child = w.spawn(&["--stop-when-idle", "5s"]);
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let got = sink_ids(&t.output_sub, Some(ids.len()), Duration::from_secs(10)).await;
    assert_eq!(missing(&ids, &got), 0, "{stdout}\n{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_port_fails_fast_naming_the_endpoint() {
    let t = topics("closed", 10).await;
    let dead = format!("127.0.0.1:{}", closed_port());
    let w = Workdir::new(&pipeline_sql(&t, &dead, ""));
    // The test's own limit: well under the client's default minute of retries.
    let (code, _stdout, stderr) = finish(w.spawn(&[]), Duration::from_secs(30)).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&dead) && stderr.contains("cannot reach"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_subscription_is_named_with_the_fix() {
    let t = topics("missing", 10).await;
    let mut t2 = Topics { ..t };
    t2.input_sub = unique("no-such-sub");
    let w = Workdir::new(&pipeline_sql(&t2, &endpoint(), ""));
    let (code, _stdout, stderr) = finish(w.spawn(&[]), Duration::from_secs(30)).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&t2.input_sub) && stderr.contains("does not exist: create it"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misspelled_subscription_key_gets_did_you_mean() {
    let t = topics("typo", 10).await;
    let sql = pipeline_sql(&t, &endpoint(), "").replacen("'subscription'", "'subscripton'", 1);
    let w = Workdir::new(&sql);
    let (code, _stdout, stderr) = finish(w.spawn(&[]), Duration::from_secs(30)).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("'subscripton'") && stderr.contains("did you mean 'subscription'"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attributes_metadata_may_be_declared_json_or_text() {
    let t = topics("attrs", 10).await;
    publish_seq(&t.input, 0..3).await;
    for ty in ["JSON", "TEXT"] {
        let sql = pipeline_sql(&t, &endpoint(), "").replacen(
            "mid TEXT NOT NULL METADATA FROM 'message-id')",
            &format!("mid TEXT NOT NULL METADATA FROM 'message-id', attrs {ty} METADATA FROM 'attributes')"),
            1,
        );
        assert!(sql.contains("attrs"), "{sql}");
        let w = Workdir::new(&sql);
        let child = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "2s"]);
        let (code, _stdout, stderr) = finish(child, LIMIT).await;
        assert_eq!(code, 0, "attributes declared {ty}: {stderr}");
    }
    let got = sink_ids(&t.output_sub, Some(3), Duration::from_secs(10)).await;
    assert_eq!(got.len(), 3, "the first run wrote every row");
}
