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
