//! End-to-end tests of the source's full option set (issue 7) against the real emulator:
//! several subscriptions in one table, per-key ordering, subscription creation with a
//! dead-letter policy, start positions, and the run-time limits. Each test uses its own
//! topics. What the emulator cannot do (seek to a time) is tested with a fake admin stub in
//! `connector/src/source/start_position.rs`.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use pubsub_connector_core::{admin, client};
use support::*;

const LIMIT: Duration = Duration::from_secs(150);
const RUN: [&str; 6] = [
    "--workers",
    "2",
    "--checkpoint-interval",
    "1s",
    "--stop-when-idle",
    "5s",
];

/// The JSON rows of an output subscription (acks them).
async fn rows(sub: &str, expected: usize) -> Vec<serde_json::Value> {
    admin::drain(&profile(), sub, 2, Some(expected), Duration::from_secs(10))
        .await
        .unwrap()
        .values()
        .map(|p| serde_json::from_slice(p).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscriptions_of_one_topic_deliver_every_message_each_acked_on_its_own() {
    let p = profile();
    let t = topics("two-subs", 10).await;
    let second = unique("two-subs-b");
    admin::create_subscription(&p, &second, &t.input, 10)
        .await
        .unwrap();
    let ids = publish_seq(&t.input, 0..400).await;
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, mid TEXT NOT NULL METADATA FROM 'message-id',
                           sub TEXT NOT NULL METADATA FROM 'subscription') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{a};{second}',
            'emulator-endpoint' = '{e}');
         CREATE TABLE dst (seq BIGINT, mid TEXT, sub TEXT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO dst SELECT seq, mid, sub FROM src;",
        a = t.input_sub,
        e = endpoint(),
        out = t.output
    );
    let w = Workdir::new(&sql);
    let (code, stdout, stderr) = finish(w.spawn(&RUN), LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let got = rows(&t.output_sub, 800).await;
    let mut per_sub: BTreeMap<String, std::collections::HashSet<String>> = BTreeMap::new();
    for r in &got {
        per_sub
            .entry(r["sub"].as_str().unwrap().to_string())
            .or_default()
            .insert(r["mid"].as_str().unwrap().to_string());
    }
    for s in [&t.input_sub, &second] {
        let full = client::subscription_path(PROJECT, s);
        let seen = per_sub.get(&full).cloned().unwrap_or_default();
        assert_eq!(
            missing(&ids, &seen),
            0,
            "every message via {full}: {stdout}"
        );
    }
    assert!(
        summary_count(&stdout, "messages acknowledged:") >= 800,
        "{stdout}"
    );
    // Each copy was acknowledged on its own subscription: nothing comes back on either.
    for s in [&t.input_sub, &second] {
        let left = redelivered(s, Duration::from_secs(12)).await;
        assert!(left.is_empty(), "{s} redelivered {}", left.len());
    }
}

/// Polls (bounded by `LIMIT`) until the running source has created subscription `name`.
async fn wait_until_created(subs: &google_cloud_pubsub::client::SubscriptionAdmin, name: &str) {
    let start = std::time::Instant::now();
    while subs
        .get_subscription()
        .set_subscription(name)
        .send()
        .await
        .is_err()
    {
        assert!(start.elapsed() < LIMIT, "the source never created {name}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_ordering_keeps_each_keys_order_into_the_sink_topic() {
    let p = profile();
    let input = unique("order-in");
    let output = unique("order-out");
    let out_sub = unique("order-out-sub");
    admin::create_topic(&p, &input).await.unwrap();
    admin::create_topic(&p, &output).await.unwrap();
    let sub = unique("order-in-sub");
    // The source creates its subscription (with ordering) at start; publish after that.
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'scan.ordering-mode' = 'per-key',
            'scan.auto-create.topics' = '{sub}:{input}',
            'scan.auto-create.message-ordering.enabled' = 'true');
         CREATE TABLE dst (seq BIGINT, k TEXT METADATA FROM 'ordering-key') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{output}',
            'emulator-endpoint' = '{e}', 'sink.message-ordering.enabled' = 'true');
         INSERT INTO dst SELECT seq, k FROM src;",
        e = endpoint()
    );
    let subs = pubsub_connector_core::client::subscription_admin(&p)
        .await
        .unwrap();
    subs.create_subscription()
        .set_name(client::subscription_path(PROJECT, &out_sub))
        .set_topic(client::topic_path(PROJECT, &output))
        .set_enable_message_ordering(true)
        .send()
        .await
        .unwrap();
    let w = Workdir::new(&sql);
    let child = w.spawn(&RUN);
    let name = client::subscription_path(PROJECT, &sub);
    wait_until_created(&subs, &name).await;
    let created = subs
        .get_subscription()
        .set_subscription(name.clone())
        .send()
        .await
        .unwrap();
    assert!(created.enable_message_ordering, "created with ordering");
    publish_ordered(&input, &["a", "b", "c"], 300).await;
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let got = ordered(&out_sub, 300).await;
    assert_eq!(got.len(), 300, "every message arrived");
    let mut per_key: HashMap<String, Vec<i64>> = HashMap::new();
    for (k, seq) in got {
        per_key.entry(k).or_default().push(seq);
    }
    for k in ["a", "b", "c"] {
        let seqs = &per_key[k];
        let mut sorted = seqs.clone();
        sorted.sort();
        assert_eq!(seqs, &sorted, "key {k} kept its order");
        assert_eq!(seqs.len(), 100);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_created_subscription_with_dead_letter_policy_forwards_bad_messages() {
    let p = profile();
    let input = unique("dl-in");
    let dead = unique("dl-dead");
    let dead_sub = unique("dl-dead-sub");
    let output = unique("dl-out");
    let out_sub = unique("dl-out-sub");
    for t in [&input, &dead, &output] {
        admin::create_topic(&p, t).await.unwrap();
    }
    admin::create_subscription(&p, &dead_sub, &dead, 10)
        .await
        .unwrap();
    admin::create_subscription(&p, &out_sub, &output, 60)
        .await
        .unwrap();
    let sub = unique("dl-in-sub");
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, mid TEXT NOT NULL METADATA FROM 'message-id',
                           att BIGINT METADATA FROM 'delivery-attempt') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'scan.deserialization-failure-policy' = 'nack',
            'scan.auto-create.topics' = '{sub}:{input}',
            'scan.auto-create.ack-deadline' = '10s',
            'scan.auto-create.dead-letter.topic' = '{dead}',
            'scan.auto-create.dead-letter.max-delivery-attempts' = '5');
         CREATE TABLE dst (seq BIGINT, mid TEXT, att BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{output}',
            'emulator-endpoint' = '{e}');
         INSERT INTO dst SELECT seq, mid, att FROM src;",
        e = endpoint()
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&RUN);
    let subs = client::subscription_admin(&p).await.unwrap();
    let name = client::subscription_path(PROJECT, &sub);
    wait_until_created(&subs, &name).await;
    let mut payloads: Vec<Vec<u8>> = (0..10)
        .map(|i| format!("{{\"seq\": {i}}}").into_bytes())
        .collect();
    payloads.insert(3, b"{broken".to_vec());
    let ids = admin::publish_all(&p, &input, payloads, 100).await.unwrap();
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let got = rows(&out_sub, 10).await;
    assert_eq!(got.len(), 10, "the good messages flow: {got:?}");
    assert!(!got.iter().any(|r| r["mid"] == ids[3].as_str()));
    assert!(
        got.iter()
            .all(|r| r["att"].as_i64().is_some_and(|a| a >= 1)),
        "delivery-attempt is set under a dead-letter policy: {got:?}"
    );
    let dead_msgs = admin::drain(&p, &dead_sub, 1, Some(1), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        dead_msgs.values().any(|d| d.as_slice() == b"{broken"),
        "the bad message reached the dead-letter topic after its attempts: {dead_msgs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_subscription_without_create_options_names_the_fix() {
    let t = topics("missing-sub", 10).await;
    let gone = unique("never-made");
    let mut sql = pipeline_sql(&t, &endpoint(), "");
    sql = sql.replace(&t.input_sub, &gone);
    let w = Workdir::new(&sql);
    let (code, _stdout, stderr) = finish(w.spawn(&RUN), Duration::from_secs(60)).await;
    assert_eq!(code, 2, "no restart creates it: {stderr}");
    assert!(
        stderr.contains(&gone) && stderr.contains("scan.auto-create.topics"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_start_position_seeks_once_at_the_first_start_and_never_on_a_restore() {
    let t = topics("seek", 10).await;
    // The backlog before the job's first start: `latest` skips it.
    publish_seq(&t.input, 0..5).await;
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.startup.mode' = 'latest'",
    ));
    let (code, stdout, stderr) = finish(w.spawn(&RUN), LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    let sub = format!("projects/{PROJECT}/subscriptions/{}", t.input_sub);
    assert_eq!(
        stderr
            .matches(&format!("seeked subscription {sub} to "))
            .count(),
        1,
        "one seek at the first start: {stderr}"
    );
    assert_eq!(
        summary_count(&stdout, "messages read:"),
        0,
        "the backlog was skipped: {stdout}"
    );
    assert!(w.checkpoint_epoch().is_some(), "a checkpoint completed");
    let left = redelivered(&t.input_sub, Duration::from_secs(3)).await;
    assert!(
        left.is_empty(),
        "the seek marked the backlog acknowledged: {}",
        left.len()
    );
    // A restore from that checkpoint does not seek again: what was published meanwhile
    // is read, not skipped.
    let ids = publish_seq(&t.input, 5..10).await;
    let (code, stdout, stderr) = finish(w.spawn(&RUN), LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stderr.contains("seeked subscription"),
        "no second seek: {stderr}"
    );
    assert!(stderr.contains("a restore does not seek again"), "{stderr}");
    let got = sink_ids(&t.output_sub, Some(5), Duration::from_secs(10)).await;
    assert_eq!(missing(&ids, &got), 0, "{stdout}");
    // A restore with another mode and a subscription added to the table: only the added
    // one is positioned; the first one is not seeked again, and a WARN names both modes.
    let ids = publish_seq(&t.input, 10..15).await;
    let added = unique("seek-added");
    admin::create_subscription(&profile(), &added, &t.input, 10)
        .await
        .unwrap();
    let sql = pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.startup.mode' = 'earliest-retained'",
    )
    .replace(
        &format!("'subscription' = '{}'", t.input_sub),
        &format!("'subscription' = '{};{added}'", t.input_sub),
    );
    std::fs::write(w.pipeline(), sql).unwrap();
    let (code, stdout, stderr) = finish(w.spawn(&RUN), LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    let added_full = format!("projects/{PROJECT}/subscriptions/{added}");
    assert_eq!(
        stderr.matches("seeked subscription").count(),
        1,
        "one seek: {stderr}"
    );
    assert!(
        stderr.contains(&format!("seeked subscription {added_full} to ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "'scan.startup.mode' is 'earliest-retained' but the job's first start applied 'latest'"
        ),
        "{stderr}"
    );
    let got = sink_ids(&t.output_sub, Some(5), Duration::from_secs(10)).await;
    assert_eq!(missing(&ids, &got), 0, "{stdout}");
}

/// Options the job's start refuses, against the checkpoint interval or the subscription
/// as the server describes it: `run` exits 2 (no restart can fix them) before reading
/// anything, and `cluster` gives up at once instead of restarting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_refused_at_start_exits_2_and_is_not_restarted() {
    let t = topics("refused", 10).await;
    publish_seq(&t.input, 0..20).await;
    let interval = |d: &'static str| ["--workers", "1", "--checkpoint-interval", d];
    for (extra, args, expect) in [
        (
            ", 'scan.ordering-mode' = 'per-key'",
            interval("1s"),
            format!("option 'scan.ordering-mode' = 'per-key' needs message ordering on subscription projects/{PROJECT}/subscriptions/{}", t.input_sub),
        ),
        (
            ", 'scan.ack.max-extension-period' = '1s'",
            interval("1s"),
            "option 'scan.ack.max-extension-period' is invalid: must exceed the checkpoint interval (1s), or a held message's lease ends before its checkpoint commits and it is redelivered, was '1s'".to_string(),
        ),
        (
            ", 'scan.first-checkpoint-timeout' = '2s'",
            interval("20m"),
            "option 'scan.first-checkpoint-timeout' is invalid: must exceed the checkpoint interval (1200s) or be '0s' (off): the detector would fail the job before the first checkpoint can complete, was '2s'".to_string(),
        ),
    ] {
        let w = Workdir::new(&pipeline_sql(&t, &endpoint(), extra));
        let (code, stdout, stderr) = finish(w.spawn(&args), LIMIT).await;
        assert_eq!(code, 2, "{extra}: {stderr}");
        assert!(stderr.contains(&expect), "{extra}: {stderr}");
        assert_eq!(summary_count(&stdout, "messages read:"), 0, "{stdout}");
    }
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.ordering-mode' = 'per-key'",
    ));
    let cluster = tokio::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
        .arg("cluster")
        .arg(w.pipeline())
        .arg("--state-dir")
        .arg(w.state())
        .args(["--processes", "1", "--workers", "1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (code, _stdout, stderr) = finish(cluster, LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("a restart cannot fix this"), "{stderr}");
    assert!(!stderr.contains("restarting all"), "{stderr}");
    // Nothing was read, so nothing was acknowledged: all 20 are still there.
    let left = redelivered(&t.input_sub, Duration::from_secs(3)).await;
    assert_eq!(left.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_time_limits_deliver_everything_and_count_their_work() {
    let t = topics("limits", 10).await;
    let ids = publish_seq(&t.input, 0..150).await;
    // Each payload is 11..13 bytes: a 100-byte cap holds ~8 of them, so deliveries cross it.
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.subscriber-buffer.max-bytes' = '100', 'scan.max-records-per-fetch' = '7',
           'scan.rate-limit.messages-per-second' = '200', 'scan.shutdown-timeout' = '2s',
           'scan.ack.min-duration-per-extension' = '10s', 'scan.ack.max-duration-per-extension' = '20s'",
    ));
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "500ms",
        "--stop-when-idle",
        "12s",
    ]);
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let got = sink_ids(&t.output_sub, Some(150), Duration::from_secs(10)).await;
    assert_eq!(missing(&ids, &got), 0, "nothing lost: {stdout}");
    assert!(
        summary_count(&stdout, "messages rejected:") > 0,
        "the byte cap rejected deliveries: {stdout}"
    );
    let fetches = summary_count(&stdout, "fetches:");
    assert!(
        fetches >= 150 / 7,
        "at most 7 messages per fetch: {fetches} fetches, {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_are_rejected_at_plan_time_naming_the_sql_key() {
    let t = topics("bad-opt", 10).await;
    for (extra, expect) in [
        (
            ", 'scan.parallel-pull-count' = '0'",
            "option 'scan.parallel-pull-count' is invalid: must be positive, was '0'",
        ),
        (
            ", 'scan.ordering-mode' = 'per-key', 'scan.parallel-pull-count' = '2'",
            "'scan.ordering-mode'",
        ),
        (
            ", 'scan.ack.max-duration-per-extension' = '5s'",
            "option 'scan.ack.max-duration-per-extension' is invalid",
        ),
        (
            ", 'scan.startup.mode' = 'yesterday'",
            "option 'scan.startup.mode' is invalid",
        ),
        (
            ", 'scan.rate-limit.messages-per-second' = '0'",
            "option 'scan.rate-limit.messages-per-second' is invalid",
        ),
        (
            ", 'scan.parallel-pull-count' = '1000000'",
            "option 'scan.parallel-pull-count' is invalid: must be at most 64",
        ),
        // The value as written, not as the builder renders it ('0ms').
        (
            ", 'scan.shutdown-timeout' = '0s'",
            "option 'scan.shutdown-timeout' is invalid: must be at least 1ms, was '0s'",
        ),
        (
            ", 'scan.ack.max-duration-per-extension' = '5000ms'",
            "must be between 10s and 600s (the client's range), was '5000ms'",
        ),
    ] {
        let w = Workdir::new(&pipeline_sql(&t, &endpoint(), extra));
        let (code, _stdout, stderr) = finish(w.spawn(&[]), Duration::from_secs(30)).await;
        assert_eq!(code, 2, "{extra}: {stderr}");
        assert!(stderr.contains(expect), "{extra}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn await_ack_confirmation_needs_exactly_once_and_never_acks_unconfirmed() {
    let p = profile();
    let t = topics("confirm", 10).await;
    // Without exactly-once delivery on the subscription: refused at start, naming both.
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.ack.await-confirmation' = '5s'",
    ));
    let (code, _stdout, stderr) = finish(w.spawn(&RUN), Duration::from_secs(60)).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("'scan.ack.await-confirmation' needs exactly-once delivery")
            && stderr.contains(&t.input_sub),
        "{stderr}"
    );
    // With it: every ack is confirmed by the server at its commit.
    let eo = unique("confirm-eo");
    client::subscription_admin(&p)
        .await
        .unwrap()
        .create_subscription()
        .set_name(client::subscription_path(PROJECT, &eo))
        .set_topic(client::topic_path(PROJECT, &t.input))
        .set_ack_deadline_seconds(10)
        .set_enable_exactly_once_delivery(true)
        .send()
        .await
        .unwrap();
    let ids = publish_seq(&t.input, 0..50).await;
    let sql = pipeline_sql(&t, &endpoint(), ", 'scan.ack.await-confirmation' = '5s'").replace(
        &format!("'subscription' = '{}'", t.input_sub),
        &format!("'subscription' = '{eo}'"),
    );
    let w = Workdir::new(&sql);
    let (code, stdout, stderr) = finish(w.spawn(&RUN), LIMIT).await;
    // The emulator delivers exactly-once: every ack is confirmed before the commit ends.
    assert_eq!(code, 0, "{stderr}");
    let got = sink_ids(&t.output_sub, Some(50), Duration::from_secs(10)).await;
    assert_eq!(missing(&ids, &got), 0, "{stdout}");
    assert!(summary_count(&stdout, "acks confirmed:") >= 50, "{stdout}");
    let left = redelivered(&eo, Duration::from_secs(12)).await;
    assert!(
        left.is_empty(),
        "confirmed acks hold: {} redelivered",
        left.len()
    );
}
