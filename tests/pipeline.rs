//! End-to-end tests of the `pubsub-connector` binary against the real Pub/Sub emulator.
//! Crash tests SIGKILL the real process; the ones that need the emulator to notice a dead
//! client go through the half-closing HTTP/2 proxy that `Emulator` puts in front of it
//! (`tools/emulator/src/emulator_proxy.rs`).

use crate::support;

use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_reach_the_sink_with_two_workers() {
    let t = topics("bulk", 10).await;
    let ids = publish_seq(&t.input, 0..10_000).await;
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.parallel-pull-count' = '2'",
    ));
    let child = w.spawn(&[
        "--workers",
        "2",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "3s",
    ]);
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    // Redeliveries may add to the counts, never subtract.
    assert!(
        summary_count(&stdout, "messages read:") >= 10_000,
        "{stdout}"
    );
    assert!(
        summary_count(&stdout, "messages acknowledged:") >= 10_000,
        "{stdout}"
    );
    let got = sink_ids(&t.output_sub, Some(ids.len()), Duration::from_secs(10)).await;
    assert_eq!(
        missing(&ids, &got),
        0,
        "every message id arrives in the sink topic"
    );
    // Nothing left to deliver: longer than the subscription's 10 s ack deadline.
    let left = redelivered(&t.input_sub, Duration::from_secs(12)).await;
    assert!(
        left.is_empty(),
        "{} messages were redelivered after a clean run",
        left.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_before_the_first_checkpoint_acknowledges_nothing() {
    let t = topics("kill-early", 10).await;
    let ids = publish_seq(&t.input, 0..2_000).await;
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.ack.max-duration-per-extension' = '10s', 'scan.first-checkpoint-timeout' = '0s'",
    ));
    let child = w.spawn(&["--checkpoint-interval", "30m"]);
    // Rows reach the sink before any checkpoint completes.
    let first = sink_ids(&t.output_sub, Some(500), Duration::from_secs(60)).await;
    assert!(
        !first.is_empty(),
        "the pipeline wrote nothing before the kill"
    );
    signal(&child, "KILL");
    let _ = finish(child, LIMIT).await;
    assert_eq!(
        w.checkpoint_epoch(),
        None,
        "no checkpoint may have completed"
    );
    let _ = sink_ids(&t.output_sub, None, Duration::from_secs(3)).await;

    // Restart from the same state dir: every message comes back (nothing was acked) and
    // reaches the sink.
    let (stdout, _stderr) = w.restart_until_idle().await;
    let second = sink_ids(&t.output_sub, None, Duration::from_secs(10)).await;
    assert_eq!(
        missing(&ids, &second),
        0,
        "the restart must redeliver every message: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_checkpoints_then_restart_loses_nothing() {
    let t = topics("kill-late", 10).await;
    let ids = publish_seq(&t.input, 0..4_000).await;
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.ack.max-duration-per-extension' = '10s', 'scan.flow-control.max-outstanding-element-count' = '300'",
    ));
    let child = w.spawn(&["--workers", "1", "--checkpoint-interval", "1s"]);
    wait_until("two completed checkpoints", LIMIT, || {
        w.checkpoint_epoch().unwrap_or(0) >= 2
    })
    .await;
    signal(&child, "KILL");
    let _ = finish(child, LIMIT).await;
    let killed_at = w.checkpoint_epoch().expect("a checkpoint completed");

    let (_stdout, stderr) = w.restart_until_idle().await;
    assert!(
        stderr.contains(&format!("restoring from checkpoint {killed_at}")),
        "{stderr}"
    );
    assert!(
        w.checkpoint_epoch().unwrap() > killed_at,
        "new epochs continue above the restored one"
    );
    // Drain until idle: duplicates mean more output messages than ids.
    let got = sink_ids(&t.output_sub, None, Duration::from_secs(10)).await;
    assert_eq!(
        missing(&ids, &got),
        0,
        "no message may be lost across the crash"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_stream_exits_zero_and_leaves_nothing_held() {
    pubsub_emulator_tools::wire_log::enable();
    // A 600 s ack deadline: only a nack brings a message back at once.
    let t = topics("term", 600).await;
    let ids = publish_seq(&t.input, 0..4_000).await;
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.flow-control.max-outstanding-element-count' = '300', 'scan.ack.max-duration-per-extension' = '10s'",
    ));
    let child = w.spawn(&["--workers", "1", "--checkpoint-interval", "1s"]);
    wait_until("a completed checkpoint", LIMIT, || {
        w.checkpoint_epoch().unwrap_or(0) >= 1
    })
    .await;
    signal(&child, "TERM");
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    let count = |label: &str| summary_count(&stdout, label);
    let (read, acked, released) = (
        count("messages read:"),
        count("messages acknowledged:"),
        count("messages released:"),
    );
    assert_eq!(
        read,
        acked + released,
        "every message the connector took was acked or nacked: {stdout}"
    );
    assert!(
        released > 0,
        "the stop came mid-stream, so messages held after the final barrier must be nacked: {stdout}"
    );
    let written = sink_ids(&t.output_sub, None, Duration::from_secs(5)).await;
    assert!(
        written.len() >= acked,
        "every acked message was written first"
    );
    // The summary counts exactly the nacks that reached the server (one per nack: a
    // message parked, nacked and redelivered during the run counts each time).
    assert_eq!(
        released,
        Wire::of(&t.input_sub).nacked.len(),
        "released, against the nacks on the wire: {stdout}"
    );
    // Nacked messages come back at once, well inside the 600 s ack deadline.
    let quick = redelivered(&t.input_sub, Duration::from_secs(3)).await;
    // Messages still in the client's HTTP/2 window when it closed were never handed to
    // the connector; they return after one lease extension (10 s here).
    let late = redelivered(&t.input_sub, Duration::from_secs(15)).await;
    let all: std::collections::HashSet<String> = written
        .into_iter()
        .chain(quick.into_keys())
        .chain(late.into_keys())
        .collect();
    assert_eq!(
        missing(&ids, &all),
        0,
        "no message may be lost by a graceful stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_publish_fails_the_checkpoint_and_acknowledges_nothing_of_it() {
    let t = topics("sink-fail", 600).await;
    let before = publish_seq(&t.input, 0..200).await;
    // Under create-never a deleted topic is a failure the sink cannot repair (under
    // create-if-needed it recreates the topic: tests/sink.rs).
    let w = Workdir::new(&pipeline_sql(&t, &endpoint(), "").replace(
        &format!("'topic' = '{}',", t.output),
        &format!(
            "'topic' = '{}', 'sink.create-disposition' = 'create-never',",
            t.output
        ),
    ));
    let child = w.spawn(&["--workers", "1", "--checkpoint-interval", "1s"]);
    let got = sink_ids(&t.output_sub, Some(before.len()), Duration::from_secs(60)).await;
    assert_eq!(missing(&before, &got), 0);
    let acked_epoch = w.checkpoint_epoch().unwrap_or(0);
    wait_until("a checkpoint after the first batch", LIMIT, || {
        w.checkpoint_epoch().unwrap_or(0) > acked_epoch
    })
    .await;

    pubsub_connector_core::admin::delete_topic(&profile(), &t.output)
        .await
        .unwrap();
    let after = publish_seq(&t.input, 200..400).await;
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_ne!(code, 0, "a failed publish must fail the job");
    // The checkpoint that fails is the first one after the last completed checkpoint,
    // and it is the epoch that held the lost publishes (after the topic was deleted).
    let failed: u64 = stderr
        .split("checkpoint ")
        .filter_map(|rest| rest.strip_suffix_failed())
        .next()
        .unwrap_or_else(|| panic!("no 'checkpoint N failed' in {stderr}"));
    let completed = w.checkpoint_epoch().unwrap_or(0);
    assert_eq!(failed, completed + 1, "{stderr}");
    assert!(failed > acked_epoch, "{stderr}");
    let back = redelivered(&t.input_sub, Duration::from_secs(5)).await;
    assert_eq!(
        missing(&after, &back.keys().cloned().collect()),
        0,
        "nothing of the failed epoch may be acked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_json_message_fails_the_job_naming_it_and_is_not_lost() {
    let t = topics("bad-json", 600).await;
    let p = profile();
    let good =
        pubsub_connector_core::admin::publish_all(&p, &t.input, vec![b"{\"seq\": 1}".to_vec()], 1)
            .await
            .unwrap();
    let bad = pubsub_connector_core::admin::publish_all(
        &p,
        &t.input,
        vec![b"this is not json".to_vec()],
        1,
    )
    .await
    .unwrap();
    let w = Workdir::new(&pipeline_sql(&t, &endpoint(), ""));
    let child = w.spawn(&["--workers", "1"]);
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&bad[0]),
        "the error names message {}: {stderr}",
        bad[0]
    );
    let back = redelivered(&t.input_sub, Duration::from_secs(5)).await;
    assert!(
        back.contains_key(&bad[0]) && back.contains_key(&good[0]),
        "both messages were released, none acked: got {:?}, want {good:?} {bad:?}; {stderr}",
        back.keys()
    );
}

fn bad_pipeline(sql: &str) -> (i32, String) {
    let w = Workdir::new(sql);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
        .arg("run")
        .arg(w.pipeline())
        .arg("--state-dir")
        .arg(w.state())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unknown_with_keys_are_rejected_together() {
    let (code, err) = bad_pipeline(
        "CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 's',
            'emulator-endpoint' = '127.0.0.1:1', 'scan.paralel-pull-count' = '2', 'colour' = 'blue');
         CREATE TABLE d (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'topic' = 't', 'emulator-endpoint' = '127.0.0.1:1');
         INSERT INTO d SELECT a FROM s;",
    );
    assert_ne!(code, 0);
    assert!(err.contains("'colour'"), "{err}");
    assert!(
        err.contains("'scan.paralel-pull-count' (did you mean 'scan.parallel-pull-count'?)"),
        "{err}"
    );
}

#[test]
fn emulator_endpoint_without_port_is_rejected_naming_option_and_value() {
    let (code, err) = bad_pipeline(
        "CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'subscription' = 's', 'emulator-endpoint' = 'localhost');
         CREATE TABLE d (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'topic' = 't', 'emulator-endpoint' = '127.0.0.1:1');
         INSERT INTO d SELECT a FROM s;",
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("option 'emulator-endpoint' is invalid") && err.contains("'localhost'"),
        "{err}"
    );
}

#[test]
fn sql_syntax_error_points_at_line_and_column() {
    let (code, err) = bad_pipeline(
        "CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub');\n\nINSERT INTO d SELEC a FROM s;",
    );
    assert_ne!(code, 0);
    assert!(err.contains("Line: 3, Column"), "{err}");
}

trait FailedEpoch {
    /// `"N failed..."` -> N.
    fn strip_suffix_failed(&self) -> Option<u64>;
}

impl FailedEpoch for &str {
    fn strip_suffix_failed(&self) -> Option<u64> {
        let digits: String = self.chars().take_while(char::is_ascii_digit).collect();
        let rest = &self[digits.len()..];
        if digits.is_empty() || !rest.starts_with(" failed") {
            return None;
        }
        digits.parse().ok()
    }
}
