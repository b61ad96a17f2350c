//! Event time and watermarks of the source (issue 32, decision 0035), against the
//! emulator: the watermark follows publish times, is kept in each checkpoint, and a restart
//! starts from it, so messages replayed from before it count as behind it.

use std::time::Duration;

use pubsub_connector_core::{admin, client};

use crate::support::*;

const S: i64 = 1_000_000_000;

fn publish_ns(t: Option<&google_cloud_wkt::Timestamp>) -> i64 {
    let t = t.expect("the service sets a publish time");
    t.seconds() * S + i64::from(t.nanos())
}

/// One subtask (so one watermark), checkpoints every 500 ms, stop when idle for 3 s.
const ONE_WORKER_SHORT_RUN: [&str; 6] = [
    "--workers",
    "1",
    "--checkpoint-interval",
    "500ms",
    "--stop-when-idle",
    "3s",
];

/// A one-subtask run ended with watermark `ns`, both checkpointed and at the sink, after
/// `in_error` failed messages and `written` rows.
fn assert_watermark_and_counts(w: &Workdir, out: &str, ns: i64, in_error: usize, written: usize) {
    assert_eq!(checkpointed_watermarks(w), vec![ns], "{out}");
    assert_eq!(
        summary_watermark_ms(out),
        Some((ns / 1_000_000) as u64),
        "{out}"
    );
    assert_eq!(summary_count(out, "records in error:"), in_error, "{out}");
    assert_eq!(summary_count(out, "rows written:"), written, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watermark_follows_publish_times_survives_a_restart_and_counts_a_replay_as_behind() {
    let p = profile();
    let t = topics("event-time", 10).await;
    // A second subscription shows the publish times the pipeline saw.
    let probe = unique("event-time-probe");
    admin::create_subscription(&p, &probe, &t.input, 60)
        .await
        .unwrap();
    // Two bursts more than the out-of-orderness (1 s) apart. The pause makes data, it
    // waits on nothing: every expectation below comes from the publish times read back,
    // and the second burst is published (and stamped by the service) after the pause.
    publish_seq(&t.input, 0..100).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    publish_seq(&t.input, 100..200).await;
    let subs = client::subscription_admin(&p).await.unwrap();
    let input = client::subscription_path(PROJECT, &t.input_sub);
    let snapshot = format!("projects/{PROJECT}/snapshots/{}", unique("event-time-snap"));
    subs.create_snapshot()
        .set_name(&snapshot)
        .set_subscription(&input)
        .send()
        .await
        .unwrap();

    let w = Workdir::new(&pipeline_sql(&t, &endpoint(), ""));
    let run = |workers: &'static str| {
        [
            "--workers",
            workers,
            "--checkpoint-interval",
            "500ms",
            "--stop-when-idle",
            "3s",
        ]
    };
    // One subtask: its watermark is the newest publish time less 1 s.
    let first = w.run_ok(&run("1")).await;
    let published = admin::drain_messages(&p, &probe, 1, Some(200), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(published.len(), 200);
    let times: Vec<i64> = published
        .iter()
        .map(|m| publish_ns(m.publish_time.as_ref()))
        .collect();
    let newest = *times.iter().max().unwrap();
    let marks = checkpointed_watermarks(&w);
    assert_eq!(marks, vec![newest - S], "{first}");
    // The same watermark went through the dataflow, after the rows, to the sink.
    assert_eq!(
        summary_watermark_ms(&first),
        Some((newest - S).div_euclid(1_000_000) as u64),
        "{first}"
    );

    // Replay everything on two subtasks: each starts from the checkpointed watermark,
    // which the replay cannot raise (its newest publish time is the same), so exactly the
    // messages published at or before it are behind (the first burst and more).
    subs.seek()
        .set_subscription(&input)
        .set_snapshot(&snapshot)
        .send()
        .await
        .unwrap();
    let expected = times.iter().filter(|t| **t <= newest - S).count();
    assert!(expected >= 100, "the first burst is behind: {expected}");
    let second = w.run_ok(&run("2")).await;
    assert_eq!(
        summary_count(&second, "messages behind watermark:"),
        expected,
        "{second}"
    );
    // Each sink subtask got its source subtask's restored watermark at the start, and the
    // replay raised it no further.
    assert_eq!(
        summary_watermark_ms(&second),
        Some((newest - S).div_euclid(1_000_000) as u64),
        "{second}"
    );
    // Never lowered across the restart.
    let again = checkpointed_watermarks(&w);
    assert!(
        !again.is_empty() && again.iter().all(|m| *m >= newest - S),
        "{again:?} after {marks:?}"
    );
    let _ = subs.delete_snapshot().set_snapshot(&snapshot).send().await;
}

/// Issue 32, item 1: `WATERMARK FOR ts AS ts - INTERVAL '10' SECOND` takes event time from a
/// payload column, out of order, with that bound: the watermark (checkpointed, and at the
/// sink) is the greatest `ts` less 10 s, whatever the publish times. A message whose `ts`
/// is NULL or missing is a row failure under `scan.deserialization-failure-policy`: dropped
/// (counted) under `drop`, the job fails naming the column under `fail`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermark_for_a_payload_column_follows_its_values_and_a_null_event_time_is_a_row_failure()
{
    const BASE: i64 = 1_796_342_400; // 2026-12-04T00:00:00Z, seconds
    let ts = |s: i64| format!("2026-12-04T00:00:{s:02}Z");
    let sql = |t: &Topics, policy: &str| {
        format!(
            "CREATE TABLE src (seq BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '10' SECOND) WITH (
                'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
                'emulator-endpoint' = '{e}', 'scan.deserialization-failure-policy' = '{policy}');
             CREATE TABLE dst (seq BIGINT, ts TIMESTAMP) WITH (
                'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
                'emulator-endpoint' = '{e}');
             INSERT INTO dst SELECT seq, ts FROM src;",
            sub = t.input_sub,
            out = t.output,
            e = endpoint()
        )
    };
    let args = ONE_WORKER_SHORT_RUN;
    // Event times out of order (a permutation of 0..50 s), unrelated to publish order;
    // the greatest, 49 s, is published first.
    let mut payloads: Vec<Vec<u8>> = (0..50i64)
        .map(|i| {
            format!(
                r#"{{"seq": {i}, "ts": "{}"}}"#,
                ts((49 - i * 7).rem_euclid(50))
            )
            .into_bytes()
        })
        .collect();
    payloads.push(br#"{"seq": 50, "ts": null}"#.to_vec());
    payloads.push(br#"{"seq": 51}"#.to_vec());
    let t = topics("event-col", 10).await;
    admin::publish_all(&profile(), &t.input, payloads.clone(), 100)
        .await
        .unwrap();
    let w = Workdir::new(&sql(&t, "drop"));
    let out = w.run_ok(&args).await;
    assert_watermark_and_counts(&w, &out, (BASE + 49 - 10) * S, 2, 50);

    // Under `fail`, the first message without an event time fails the job.
    let t = topics("event-col-fail", 10).await;
    admin::publish_all(&profile(), &t.input, payloads[48..].to_vec(), 100)
        .await
        .unwrap();
    let w = Workdir::new(&sql(&t, "fail"));
    let (code, _, stderr) = finish(w.spawn(&args), Duration::from_secs(120)).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the event-time column 'ts' is NULL"),
        "{stderr}"
    );
}

/// Issue 32, item 1: `scan.event-time.attribute` takes event time from an attribute, as
/// Cloud Storage notifications carry it (`eventTime`, RFC 3339 with microseconds; epoch
/// milliseconds work too), with `scan.watermark.out-of-orderness` as the bound. A message
/// without the attribute, or whose value is no timestamp, is a row failure under the
/// policy: dropped and counted under `drop`, dead-lettered quoting the value under
/// `dead-letter`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_time_attribute_gives_event_time_and_a_missing_or_bad_one_is_a_row_failure() {
    let payload = fixture("gcs-notification-json-api-v1.json");
    let base = fixture_attributes("gcs-notification-json-api-v1.attrs.json");
    // 2020-12-08T11:51:26.395668Z, the fixture's own event time.
    const FIXTURE_NS: i64 = 1_607_428_286_395_668_000;
    let with_time = |time: Option<&str>| {
        let mut a = base.clone();
        match time {
            Some(t) => a.insert("eventTime".into(), t.into()),
            None => a.remove("eventTime"),
        };
        a
    };
    let t = topics("event-attr", 10).await;
    // Out of order: the fixture's time, a minute later as epoch ms, 30 s earlier.
    let later_ms = FIXTURE_NS / 1_000_000 + 60_000;
    for time in [
        Some("2020-12-08T11:51:26.395668Z".to_string()),
        Some(later_ms.to_string()),
        Some("2020-12-08T11:50:56Z".to_string()),
        None,
        Some("yesterday".to_string()),
    ] {
        publish_with_attributes(&t.input, payload.clone(), with_time(time.as_deref())).await;
    }
    let dead = topics("event-attr-dead", 10).await;
    let sql = |policy: &str| {
        format!(
            "CREATE TABLE gcs (name TEXT, bucket TEXT) WITH (
                'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
                'emulator-endpoint' = '{e}', 'scan.event-time.attribute' = 'eventTime',
                'scan.watermark.out-of-orderness' = '5s',
                'scan.deserialization-failure-policy' = '{policy}'{dl});
             CREATE TABLE dst (name TEXT, bucket TEXT) WITH (
                'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
                'emulator-endpoint' = '{e}');
             INSERT INTO dst SELECT name, bucket FROM gcs;",
            sub = t.input_sub,
            out = t.output,
            e = endpoint(),
            dl = if policy == "dead-letter" {
                format!(
                    ", 'scan.dead-letter.topic' = '{}', 'scan.dead-letter.emulator-endpoint' = '{}'",
                    dead.input,
                    endpoint()
                )
            } else {
                String::new()
            }
        )
    };
    let args = ONE_WORKER_SHORT_RUN;
    let w = Workdir::new(&sql("drop"));
    let out = w.run_ok(&args).await;
    // The greatest event time (the epoch-ms one) less 5 s.
    assert_watermark_and_counts(&w, &out, later_ms * 1_000_000 - 5 * S, 2, 3);
    // A table switched from publish time to the attribute does not keep the publish-time
    // watermark (now) for times of 2020: it starts without one (found by a newcomer).
    let t3 = topics("event-attr-switch", 10).await;
    let on_t3 = sql("drop").replace(&t.input_sub, &t3.input_sub);
    let w = Workdir::new(&on_t3.replace("'scan.event-time.attribute' = 'eventTime',", ""));
    publish_with_attributes(&t3.input, payload.clone(), with_time(None)).await;
    let out = w.run_ok(&args).await;
    assert!(
        checkpointed_watermarks(&w)[0] > FIXTURE_NS + 365 * 86_400 * S,
        "publish time is now: {out}"
    );
    std::fs::write(w.pipeline(), &on_t3).unwrap();
    publish_with_attributes(
        &t3.input,
        payload.clone(),
        with_time(Some("2020-12-08T11:51:26.395668Z")),
    )
    .await;
    let out = w.run_ok(&args).await;
    assert_eq!(
        checkpointed_watermarks(&w),
        vec![FIXTURE_NS - 5 * S],
        "{out}"
    );
    assert_eq!(summary_count(&out, "rows written:"), 1, "{out}");
    // Counters print only when non-zero.
    assert!(!out.contains("messages behind watermark"), "{out}");

    // Under `dead-letter`, each letter says why, quoting the bad value.
    let t2 = topics("event-attr-dl", 10).await;
    publish_with_attributes(&t2.input, payload.clone(), with_time(None)).await;
    publish_with_attributes(&t2.input, payload.clone(), with_time(Some("12.5"))).await;
    let w = Workdir::new(&sql("dead-letter").replace(&t.input_sub, &t2.input_sub));
    let out = w.run_ok(&args).await;
    assert_eq!(summary_count(&out, "records in error:"), 2, "{out}");
    let letters = admin::drain_messages(
        &profile(),
        &dead.input_sub,
        1,
        Some(2),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let mut errors: Vec<String> = letters
        .iter()
        .map(|m| m.attributes.get("dlq-error").cloned().unwrap_or_default())
        .collect();
    errors.sort();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("has no event-time attribute 'eventTime'")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("has event-time attribute 'eventTime' = '12.5', which is not a TIMESTAMP (epoch milliseconds or RFC 3339)")),
        "{errors:?}"
    );
}
