//! The source's `dead-letter` deserialization failure policy against the real emulator
//! (SPEC 5.3, 6.1): undecodable messages are published to the table's dead-letter topic
//! in the documented envelope and acknowledged with the checkpoint after that publish;
//! a dead-letter topic that disappears fails the job without acknowledging them; a
//! missing one fails the start, naming it.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use google_cloud_pubsub::model::Message;
use pubsub_connector_core::dead_letter::{
    ATTR_CONNECTOR, ATTR_DESTINATION, ATTR_DROPPED, ATTR_ERROR, ATTR_MESSAGE_ID, ATTR_ORDERING_KEY,
    ATTR_SUBTASK, ATTR_TIMESTAMP, MAX_ERROR_BYTES,
};
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

/// A real Cloud Build status message (pretty-printed JSON).
fn good_payload() -> Vec<u8> {
    fixture("cloud-build-success.json")
}

/// Payloads the table cannot decode, each distinct: not JSON, truncated JSON, not UTF-8,
/// and JSON missing the `NOT NULL` column.
fn bad_payloads() -> Vec<Vec<u8>> {
    vec![
        b"this is not json".to_vec(),
        b"{\"id\": \"truncated".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x01],
        b"{\"status\": \"SUCCESS\"}".to_vec(),
        b"<xml>nope</xml>".to_vec(),
    ]
}

/// The source (a Cloud Build table) -> sink pipeline with the dead-letter policy and
/// `dead` as its queue, on the emulator.
fn sql(t: &Topics, dead: &str, extra: &str) -> String {
    let e = endpoint();
    format!(
        "CREATE TABLE builds (id TEXT NOT NULL, status TEXT,
                              mid TEXT NOT NULL METADATA FROM 'message-id') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'format' = 'json',
            'scan.deserialization-failure-policy' = 'dead-letter',
            'scan.dead-letter.topic' = '{dead}',
            'scan.dead-letter.emulator-endpoint' = '{e}' {extra});
         CREATE TABLE out (id TEXT, status TEXT, mid TEXT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO out SELECT id, status, mid FROM builds;",
        sub = t.input_sub,
        out = t.output
    )
}

/// The dead letters on `sub`: every distinct message read until `at_least` arrived or
/// nothing came for `idle` (acknowledged; see [`admin::drain_messages`]).
async fn letters(sub: &str, at_least: usize, idle: Duration) -> Vec<Message> {
    admin::drain_messages(&profile(), sub, 1, Some(at_least), idle)
        .await
        .unwrap()
}

/// An input topic + subscription, an output topic + subscription, and a dead-letter topic
/// with a subscription to read it.
async fn setup(name: &str) -> (Topics, String, String) {
    let p = profile();
    let t = topics(name, 10).await;
    let dead = unique(&format!("{name}-dead"));
    let dead_sub = unique(&format!("{name}-dead-sub"));
    admin::create_topic(&p, &dead).await.unwrap();
    admin::create_subscription(&p, &dead_sub, &dead, 60)
        .await
        .unwrap();
    (t, dead, dead_sub)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_reach_the_dead_letter_topic_in_their_envelope_and_are_acked() {
    let p = profile();
    let (t, dead, dead_sub) = setup("dlq-ok").await;
    let good = good_payload();
    let bad = bad_payloads();
    // Good and bad interleaved.
    let mut payloads = Vec::new();
    for b in &bad {
        payloads.push(good.clone());
        payloads.push(b.clone());
    }
    let ids = admin::publish_all(&p, &t.input, payloads.clone(), 100)
        .await
        .unwrap();
    let good_ids: Vec<String> = ids.iter().step_by(2).cloned().collect();
    // Bad payload -> its message id.
    let bad_ids: HashMap<Vec<u8>, String> = ids
        .iter()
        .zip(&payloads)
        .skip(1)
        .step_by(2)
        .map(|(id, p)| (p.clone(), id.clone()))
        .collect();

    let w = Workdir::new(&sql(&t, &dead, ""));
    let (code, stdout, stderr) = finish(w.spawn(&RUN), LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(
        summary_count(&stdout, "dead letters published:"),
        bad.len(),
        "{stdout}"
    );

    // Good rows reach the sink.
    let got = sink_ids(&t.output_sub, Some(good_ids.len()), Duration::from_secs(10)).await;
    assert_eq!(missing(&good_ids, &got), 0, "good rows: {got:?}");
    assert_eq!(got.len(), good_ids.len(), "only good rows: {got:?}");

    // Every bad message is on the dead-letter topic, once, in its envelope.
    let letters = letters(&dead_sub, bad.len(), Duration::from_secs(10)).await;
    assert_eq!(letters.len(), bad.len(), "{letters:?}");
    let destination = client::subscription_path(PROJECT, &t.input_sub);
    let mut seen = HashSet::new();
    for m in &letters {
        let payload = m.data.to_vec();
        let id = bad_ids
            .get(&payload)
            .unwrap_or_else(|| panic!("unexpected dead letter {payload:?}"));
        assert!(
            seen.insert(payload.clone()),
            "dead-lettered twice: {payload:?}"
        );
        let mut keys: Vec<&str> = m.attributes.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                ATTR_CONNECTOR,
                ATTR_DESTINATION,
                ATTR_ERROR,
                ATTR_MESSAGE_ID,
                ATTR_SUBTASK,
                ATTR_TIMESTAMP
            ],
            "the five attributes and the message id (the original had no attribute)"
        );
        assert_eq!(&m.attributes[ATTR_MESSAGE_ID], id);
        assert_eq!(m.attributes[ATTR_CONNECTOR], "pubsub-source");
        assert_eq!(m.attributes[ATTR_DESTINATION], destination);
        let error = &m.attributes[ATTR_ERROR];
        assert!(
            !error.is_empty() && error.len() <= MAX_ERROR_BYTES,
            "{error}"
        );
        assert!(
            error.contains(id.as_str()),
            "the error names the message: {error}"
        );
        let ts = &m.attributes[ATTR_TIMESTAMP];
        assert!(
            ts.ends_with('Z') && google_cloud_wkt::Timestamp::try_from(ts.as_str()).is_ok(),
            "RFC 3339 UTC: {ts}"
        );
        let subtask: usize = m.attributes[ATTR_SUBTASK].parse().unwrap();
        assert!(subtask < 2, "subtask {subtask}");
    }

    // Nothing is left on the input subscription: every message, good or bad, was acked.
    let left = redelivered(&t.input_sub, Duration::from_secs(12)).await;
    assert!(left.is_empty(), "redelivered: {:?}", left.keys());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_dead_letter_topic_fails_the_job_and_acks_none_of_the_bad_messages() {
    let p = profile();
    let (t, dead, _dead_sub) = setup("dlq-gone").await;
    let w = Workdir::new(&sql(&t, &dead, ""));
    let child = w.spawn(&[
        "--workers",
        "2",
        "--checkpoint-interval",
        "30s",
        "--stop-when-idle",
        "5s",
    ]);
    // Once a good row went through, the queue is open (it opens before reading).
    let first = admin::publish_all(&p, &t.input, vec![good_payload()], 10)
        .await
        .unwrap();
    let got = sink_ids(&t.output_sub, Some(1), Duration::from_secs(60)).await;
    assert_eq!(missing(&first, &got), 0, "the pipeline runs: {got:?}");

    admin::delete_topic(&p, &dead).await.unwrap();
    let bad = bad_payloads();
    let bad_ids = admin::publish_all(&p, &t.input, bad.clone(), 100)
        .await
        .unwrap();

    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_ne!(code, 0, "the job fails: {stderr}");
    let full = client::topic_path(PROJECT, &dead);
    assert!(
        stderr.contains(&full) && stderr.contains("dead-letter") && stderr.contains("NOT_FOUND"),
        "the error names the dead-letter topic and the status: {stderr}"
    );

    // None of the bad messages was acknowledged: they come back on the input.
    let back = redelivered(&t.input_sub, Duration::from_secs(15)).await;
    assert_eq!(
        missing(&bad_ids, &back.keys().cloned().collect()),
        0,
        "bad messages redelivered: {:?}",
        back.keys()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_topic_fails_the_start_naming_it_and_reads_nothing() {
    let p = profile();
    let t = topics("dlq-missing", 10).await;
    let never = unique("dlq-never-made");
    let ids = admin::publish_all(&p, &t.input, vec![good_payload(), b"junk".to_vec()], 10)
        .await
        .unwrap();
    let w = Workdir::new(&sql(&t, &never, ""));
    let (code, _stdout, stderr) = finish(w.spawn(&RUN), Duration::from_secs(60)).await;
    assert_eq!(code, 2, "no restart creates it: {stderr}");
    assert!(
        stderr.contains(&client::topic_path(PROJECT, &never)) && stderr.contains("never creates"),
        "{stderr}"
    );
    // Nothing was read: both messages are still there.
    let left = admin::drain(
        &p,
        &t.input_sub,
        1,
        Some(ids.len()),
        Duration::from_secs(15),
    )
    .await
    .unwrap();
    assert_eq!(missing(&ids, &left.keys().cloned().collect()), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_and_queue_must_come_together_at_plan_time() {
    let t = Topics {
        input: "i".into(),
        input_sub: "s".into(),
        output: "o".into(),
        output_sub: "os".into(),
    };
    let no_queue = sql(&t, "d", "")
        .replace("'scan.dead-letter.topic' = 'd',", "")
        .replace(
            &format!("'scan.dead-letter.emulator-endpoint' = '{}'", endpoint()),
            "'scan.max-records-per-fetch' = '10'",
        );
    let no_policy =
        sql(&t, "d", "").replace("'scan.deserialization-failure-policy' = 'dead-letter',", "");
    let bad_endpoint = sql(&t, "d", "").replace(
        &format!("'scan.dead-letter.emulator-endpoint' = '{}'", endpoint()),
        "'scan.dead-letter.emulator-endpoint' = 'localhost:0'",
    );
    for (pipeline, expect) in [
        (no_queue, "option 'scan.deserialization-failure-policy' is invalid: needs a dead-letter queue: set 'scan.dead-letter.topic'"),
        (no_policy, "option 'scan.dead-letter.topic' is invalid: is set, but 'scan.deserialization-failure-policy' is 'fail'"),
        (bad_endpoint, "option 'scan.dead-letter.emulator-endpoint' is invalid: port must be 1..65535, was 'localhost:0'"),
    ] {
        let w = Workdir::new(&pipeline);
        let (code, _stdout, stderr) = finish(w.spawn(&[]), Duration::from_secs(30)).await;
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(expect), "want {expect:?} in {stderr}");
    }
}

/// The queue on its own against the emulator: how `max_in_flight_messages` bounds what an
/// offer leaves in flight, the counter, the envelope, and an offer failing under
/// write-through once the topic is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_bound_decides_when_an_offer_waits() {
    use pubsub_connector_core::dead_letter::{DeadLetter, PubSubDeadLetterQueue};
    let p = profile();
    let dead = unique("dlq-bound");
    let dead_sub = unique("dlq-bound-sub");
    admin::create_topic(&p, &dead).await.unwrap();
    admin::create_subscription(&p, &dead_sub, &dead, 60)
        .await
        .unwrap();
    let letter = |i: usize| DeadLetter {
        payload: bytes::Bytes::from(format!("letter {i}")),
        connector: "pubsub-sink",
        destination: client::topic_path(PROJECT, "meant-for"),
        error: "é".repeat(600),
        subtask: 1,
        attributes: Default::default(),
        ordering_key: String::new(),
        message_id: None,
    };
    let open = |max: i64| {
        let dead = dead.clone();
        async move {
            let mut q = PubSubDeadLetterQueue::builder()
                .project(PROJECT)
                .topic(dead)
                .emulator_endpoint(endpoint())
                .max_in_flight_messages(max)
                .build()
                .unwrap();
            let c = pubsub_engine_spi::Counter::default();
            q.set_counter(c.clone());
            q.open().await.unwrap();
            (q, c)
        }
    };
    // Write-through: every offer waits for its own publish.
    let (mut q, c) = open(0).await;
    for i in 0..3 {
        q.offer(letter(i)).await.unwrap();
        assert_eq!(q.in_flight(), 0);
        assert_eq!(c.get(), i as u64 + 1);
    }
    q.close().await;
    // A bound of 2: the second offer waits for both.
    let (mut q, c) = open(2).await;
    q.offer(letter(3)).await.unwrap();
    assert_eq!(q.in_flight(), 1);
    q.offer(letter(4)).await.unwrap();
    assert_eq!((q.in_flight(), c.get()), (0, 2));
    q.close().await;
    // Unbounded: nothing waits until the flush.
    let (mut q, c) = open(-1).await;
    for i in 5..10 {
        q.offer(letter(i)).await.unwrap();
    }
    assert_eq!(q.in_flight(), 5);
    q.flush().await.unwrap();
    assert_eq!((q.in_flight(), c.get()), (0, 5));

    let got = letters(&dead_sub, 10, Duration::from_secs(10)).await;
    let mut payloads: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8(m.data.to_vec()).unwrap())
        .collect();
    payloads.sort();
    payloads.dedup();
    assert_eq!(payloads.len(), 10, "{payloads:?}");
    for m in &got {
        assert_eq!(m.attributes[ATTR_CONNECTOR], "pubsub-sink");
        assert_eq!(m.attributes[ATTR_SUBTASK], "1");
        // 600 two-byte characters cut to 512 of them: 1024 bytes, valid UTF-8.
        assert_eq!(m.attributes[ATTR_ERROR], "é".repeat(512));
    }

    // Write-through to a deleted topic: the offer itself fails, naming topic and status.
    let (mut q, _) = open(0).await;
    admin::delete_topic(&p, &dead).await.unwrap();
    let e = q.offer(letter(10)).await.unwrap_err().to_string();
    assert!(
        e.contains(&client::topic_path(PROJECT, &dead)) && e.contains("NOT_FOUND"),
        "{e}"
    );
    q.close().await;
}

/// The queue with Pub/Sub out of reach (its network cut): a flush fails at the flush
/// timeout naming the option and the publishes not confirmed, and closing returns after
/// the shutdown timeout (the limit only catches a hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_and_close_are_bounded_by_their_timeouts_when_pubsub_is_out_of_reach() {
    use pubsub_connector_core::dead_letter::{DeadLetter, PubSubDeadLetterQueue};
    let p = profile();
    let dead = unique("dlq-cut");
    admin::create_topic(&p, &dead).await.unwrap();
    let proxy = TcpCutter::start(&endpoint()).await.unwrap();
    let open = || async {
        let mut q = PubSubDeadLetterQueue::builder()
            .project(PROJECT)
            .topic(dead.clone())
            .emulator_endpoint(proxy.endpoint())
            .max_in_flight_messages(-1)
            .flush_timeout(Duration::from_secs(2))
            .shutdown_timeout(Duration::from_secs(1))
            .build()
            .unwrap()
            .with_key_prefix("sink.");
        q.open().await.unwrap();
        q
    };
    let letter = |i: usize| DeadLetter {
        payload: bytes::Bytes::from(format!("letter {i}")),
        connector: "pubsub-sink",
        destination: client::topic_path(PROJECT, "meant-for"),
        error: "refused".into(),
        subtask: 0,
        attributes: Default::default(),
        ordering_key: String::new(),
        message_id: None,
    };
    let mut q = open().await;
    proxy.cut();
    for i in 0..3 {
        q.offer(letter(i)).await.unwrap();
    }
    let e = q.flush().await.unwrap_err().to_string();
    assert!(
        e.contains("3 of 3 publishes")
            && e.contains("flush timeout (2s, option 'sink.dead-letter.flush-timeout')"),
        "{e}"
    );
    tokio::time::timeout(Duration::from_secs(240), q.close())
        .await
        .expect("close is bounded by the shutdown timeout");
}

/// The attributes a Google product puts on its messages (`shared/fixtures/payloads`).
fn fixture_attrs(name: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(&fixture(name)).unwrap();
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// Publishes each (payload, attributes, ordering key) in order; returns the message ids.
async fn publish_with(
    topic: &str,
    messages: Vec<(Vec<u8>, Vec<(String, String)>, &str)>,
) -> Vec<String> {
    let publisher = client::publisher(&profile(), &client::topic_path(PROJECT, topic))
        .unwrap()
        .build()
        .await
        .unwrap();
    let futs: Vec<_> = messages
        .into_iter()
        .map(|(data, attrs, key)| {
            publisher.publish(
                Message::new()
                    .set_data(data)
                    .set_attributes(attrs)
                    .set_ordering_key(key),
            )
        })
        .collect();
    let mut ids = Vec::new();
    for f in futs {
        ids.push(f.await.unwrap());
    }
    ids
}

/// A source dead letter keeps its message's context: the original attributes (a real
/// GCS notification's and Cloud Build's) under their own keys, the ordering key and the
/// message id as `dlq-*` attributes; past Pub/Sub's 100 attributes the originals that do
/// not fit are dropped and named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_dead_letter_carries_the_original_attributes_and_ordering_key() {
    let (t, dead, dead_sub) = setup("dlq-ctx").await;
    let gcs = fixture_attrs("gcs-notification-none.attrs.json");
    let build = fixture_attrs("cloud-build-success.attrs.json");
    // 100 attributes: the originals that fit beside the dlq-* ones stay.
    let mut full = gcs.clone();
    full.extend((full.len()..100).map(|i| (format!("zz{i:03}"), "x".to_string())));
    let ids = publish_with(
        &t.input,
        vec![
            // A GCS notification without payload (all in its attributes) and a Cloud
            // Scheduler text body are no Cloud Build table rows.
            (
                fixture("gcs-notification-none.txt"),
                gcs.clone(),
                "bucket-a",
            ),
            (fixture("scheduler-plain-text.txt"), build.clone(), ""),
            (b"not json either".to_vec(), full.clone(), "bucket-b"),
        ],
    )
    .await;
    let w = Workdir::new(&sql(&t, &dead, ""));
    let (code, stdout, stderr) = finish(w.spawn(&RUN), LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(
        summary_count(&stdout, "dead letters published:"),
        3,
        "{stdout}"
    );
    let letters = letters(&dead_sub, 3, Duration::from_secs(10)).await;
    let by_id: HashMap<&str, &Message> = letters
        .iter()
        .map(|m| (m.attributes[ATTR_MESSAGE_ID].as_str(), m))
        .collect();
    let (first, second, third) = (
        by_id[ids[0].as_str()],
        by_id[ids[1].as_str()],
        by_id[ids[2].as_str()],
    );
    for (k, v) in &gcs {
        assert_eq!(first.attributes.get(k), Some(v), "{k} on {first:?}");
    }
    assert_eq!(first.attributes[ATTR_ORDERING_KEY], "bucket-a");
    assert_eq!(first.attributes.len(), 7 + gcs.len(), "{first:?}");
    assert!(
        first.ordering_key.is_empty(),
        "the letter itself is unordered"
    );
    for (k, v) in &build {
        assert_eq!(second.attributes.get(k), Some(v), "{k}");
    }
    assert!(!second.attributes.contains_key(ATTR_ORDERING_KEY));
    // 100 originals beside 7 dlq-* attributes: 92 kept, 8 dropped and named.
    assert_eq!(third.attributes.len(), 100, "{:?}", third.attributes.keys());
    for (k, v) in &gcs {
        assert_eq!(third.attributes.get(k), Some(v), "{k}");
    }
    let dropped = &third.attributes[ATTR_DROPPED];
    assert!(dropped.starts_with("8: zz092,"), "{dropped}");
    assert!(!third.attributes.contains_key("zz092"));
    let left = redelivered(&t.input_sub, Duration::from_secs(12)).await;
    assert!(left.is_empty(), "redelivered: {:?}", left.keys());
}

/// A sink dead letter names the source message its row was read from, when the pipeline
/// carries the source's `message-id` column into the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_dead_letter_names_the_source_message_of_its_row() {
    let p = profile();
    let (t, dead, dead_sub) = setup("dlq-sink-id").await;
    let e = endpoint();
    // `attrs` must be a JSON object of strings to become attributes: "[1]" is refused.
    let sql = format!(
        "CREATE TABLE src (n BIGINT, attrs TEXT, mid TEXT NOT NULL METADATA FROM 'message-id') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}');
         CREATE TABLE dst (n BIGINT, mid TEXT, a TEXT METADATA FROM 'attributes') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}', 'sink.failure-handler' = 'dead-letter',
            'sink.dead-letter.topic' = '{dead}', 'sink.dead-letter.emulator-endpoint' = '{e}');
         INSERT INTO dst SELECT n, mid, attrs FROM src;",
        sub = t.input_sub,
        out = t.output
    );
    let ids = admin::publish_all(
        &p,
        &t.input,
        vec![
            br#"{"n": 1, "attrs": "{\"ok\": \"1\"}"}"#.to_vec(),
            br#"{"n": 2, "attrs": "[1]"}"#.to_vec(),
        ],
        10,
    )
    .await
    .unwrap();
    let w = Workdir::new(&sql);
    let (code, stdout, stderr) = finish(w.spawn(&RUN), LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(
        summary_count(&stdout, "dead letters published:"),
        1,
        "{stdout}"
    );
    let letters = letters(&dead_sub, 1, Duration::from_secs(10)).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let m = &letters[0];
    assert_eq!(m.attributes[ATTR_CONNECTOR], "pubsub-sink");
    assert_eq!(m.attributes[ATTR_MESSAGE_ID], ids[1]);
    assert!(
        m.attributes[ATTR_ERROR].contains(&format!("(source message {})", ids[1])),
        "{:?}",
        m.attributes
    );
}

/// A queue without an endpoint of its own, on a table that uses an emulator, is refused
/// at start (exit 2) saying the queue does not inherit the endpoint and how to set it,
/// instead of failing on real Pub/Sub's credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_would_leave_the_tables_emulator_is_refused_naming_the_option() {
    let (t, dead, _) = setup("dlq-no-endpoint").await;
    let pipeline = sql(&t, &dead, "").replace(
        &format!(
            ",\n            'scan.dead-letter.emulator-endpoint' = '{}'",
            endpoint()
        ),
        "",
    );
    assert!(
        !pipeline.contains("dead-letter.emulator-endpoint"),
        "{pipeline}"
    );
    let w = Workdir::new(&pipeline);
    let (code, _stdout, stderr) = finish(w.spawn(&RUN), Duration::from_secs(60)).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("does not inherit the table's endpoint")
            && stderr.contains(&format!(
                "'scan.dead-letter.emulator-endpoint' = '{}'",
                endpoint()
            )),
        "{stderr}"
    );
}
