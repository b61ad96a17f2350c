//! Watermark alignment against the emulator (issue 32, items 2 and 8; decision 0042): two
//! sources in one group whose event times drift apart. The fast one pauses, parks at its
//! paused-buffer cap (its messages nacked), resumes as the slow one catches up, and runs
//! free once the slow one is idle. Every message of both is written exactly once.

use std::collections::BTreeMap;
use std::time::Duration;

use pubsub_connector_core::admin;

use crate::support::*;

const N: usize = 300;
/// `{"k": "{prefix}{i}", "ts": 2026-12-04T00:00:00Z + start_s + i s}` for i in 0..N.
fn payloads(prefix: &str, start_s: usize) -> Vec<Vec<u8>> {
    (0..N)
        .map(|i| {
            let t = start_s + i;
            let ts = format!(
                "2026-12-04T{:02}:{:02}:{:02}Z",
                t / 3600,
                t / 60 % 60,
                t % 60
            );
            format!("{{\"k\": \"{prefix}{i}\", \"ts\": \"{ts}\"}}").into_bytes()
        })
        .collect()
}

/// A table of the group `g` (10 s drift), idle after `idle`.
fn table(name: &str, sub: &str, idle: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE {name} (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}',
            'scan.watermark.alignment.group' = 'g', 'scan.watermark.alignment.max-drift' = '10s',
            'scan.watermark.alignment.update-interval' = '100ms',
            'scan.watermark.idle-timeout' = '{idle}'{extra});\n",
        e = endpoint()
    )
}

/// Tables `slow` and `fast` (their DDL) both written to topic `out`.
fn pipeline(slow: &str, fast: &str, out: &str) -> String {
    format!(
        "{slow}{fast}CREATE TABLE out (k TEXT, ts TIMESTAMP) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO out SELECT k, ts FROM slow;
         INSERT INTO out SELECT k, ts FROM fast;",
        e = endpoint()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_ahead_of_its_group_pauses_parks_and_resumes_and_writes_every_message_once() {
    let slow = topics("align-slow", 10).await;
    let fast = topics("align-fast", 10).await;
    // A second subscription on the output: it shows when the slow source is under way.
    let probe = unique("align-probe");
    admin::create_subscription(&profile(), &probe, &slow.output, 60)
        .await
        .unwrap();
    admin::publish_all(&profile(), &slow.input, payloads("s", 0), 2000)
        .await
        .unwrap();
    // The slow source reads its backlog at 50 messages (50 s of event time) per second;
    // the fast one is 200 s ahead, with a paused buffer of 20 messages, and its stopped
    // streams' deliveries return after 10 s (the stream ack deadline).
    let sql = pipeline(
        &table(
            "slow",
            &slow.input_sub,
            "3s",
            ", 'scan.rate-limit.messages-per-second' = '50'",
        ),
        &table(
            "fast",
            &fast.input_sub,
            "3s",
            ", 'scan.paused-split-buffer.max-messages' = '20', 'scan.ack.max-duration-per-extension' = '10s'",
        ),
        &slow.output,
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&["--checkpoint-interval", "500ms", "--stop-when-idle", "5s"]);
    // Once the slow source wrote a row, its watermark is known to the group (within one
    // update interval): the fast source is paused at its first message.
    let first = admin::drain_messages(&profile(), &probe, 1, Some(1), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!first.is_empty(), "the slow source wrote a row");
    tokio::time::sleep(Duration::from_millis(500)).await;
    admin::publish_all(&profile(), &fast.input, payloads("f", 200), 2000)
        .await
        .unwrap();
    let (code, out, err) = finish(child, Duration::from_secs(240)).await;
    assert_eq!(code, 0, "{err}");
    assert!(summary_count(&out, "alignment pauses:") >= 1, "{out}");
    assert!(
        err.contains("is paused by watermark alignment and its paused buffer is full"),
        "the fast split was parked at its cap: {out}"
    );
    assert_eq!(summary_count(&out, "rows written:"), 2 * N, "{out}");

    let rows = admin::drain_messages(
        &profile(),
        &slow.output_sub,
        1,
        Some(2 * N),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for m in &rows {
        let r: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        *seen
            .entry(r["k"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "written twice: {twice:?}");
    for p in ["s", "f"] {
        let missing: Vec<_> = (0..N)
            .map(|i| format!("{p}{i}"))
            .filter(|k| !seen.contains_key(k))
            .collect();
        assert!(missing.is_empty(), "never written: {missing:?}; {out}");
    }
    println!("alignment: {}", out.lines().last().unwrap_or_default());
}

/// A member that has not read yet holds its group at the start (Flink's initial minimum):
/// a backlog 200 s ahead writes no more than the message each split learns its watermark
/// from before the slow source's first message. Before, it ran free (all 300) until the
/// slow source reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_without_a_watermark_yet_holds_its_group_at_the_start() {
    let slow = topics("align-held-slow", 10).await;
    let fast = topics("align-held-fast", 10).await;
    admin::publish_all(&profile(), &fast.input, payloads("f", 200), 2000)
        .await
        .unwrap();
    let sql = pipeline(
        &table("slow", &slow.input_sub, "20s", ""),
        &table("fast", &fast.input_sub, "3s", ""),
        &slow.output,
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&[
        "--workers",
        "2",
        "--checkpoint-interval",
        "500ms",
        "--stop-when-idle",
        "5s",
    ]);
    wait_until("two checkpoints", Duration::from_secs(60), || {
        w.checkpoint_epoch().is_some_and(|e| e >= 2)
    })
    .await;
    let early = admin::drain_messages(
        &profile(),
        &slow.output_sub,
        1,
        None,
        Duration::from_secs(3),
    )
    .await
    .unwrap();
    // A split learns its watermark from the message it decodes: each of the fast
    // source's two splits (one per worker) writes that one, then pauses.
    assert!(
        early.len() <= 2,
        "{} rows written while the slow source had no watermark",
        early.len()
    );
    // The slow source's first 20 s of event time: the fast one (200 s ahead, 10 s drift)
    // stays paused until the slow one is idle (20 s), then writes everything.
    let first: Vec<Vec<u8>> = payloads("s", 0).into_iter().take(20).collect();
    admin::publish_all(&profile(), &slow.input, first, 2000)
        .await
        .unwrap();
    let (code, out, err) = finish(child, Duration::from_secs(240)).await;
    assert_eq!(code, 0, "{err}");
    assert!(summary_count(&out, "alignment pauses:") >= 1, "{out}");
    assert_eq!(summary_count(&out, "rows written:"), N + 20, "{out}");
}
