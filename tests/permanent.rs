//! Failures a restart repeats exactly exit 2 from `run`, and `cluster` gives up on them at
//! once instead of restarting (each restart would republish the rows written since the
//! last checkpoint): a row too large to publish and an empty raw message under
//! `sink.failure-handler = fail`, a missing service account key file, and a state
//! directory another job holds (decision 0019).

use crate::support;

use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(120);

/// Runs `w` with `run`, then with `cluster --processes 1` (a budget of 3 restarts): both
/// must exit 2 with `want` in stderr, and `cluster` must not restart. `--stop-when-idle`
/// ends a job that does not fail (exit 0, so the assertion fails rather than hangs).
async fn refused_without_restart(w: &Workdir, want: &str) {
    let (code, _out, stderr) = finish(
        w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "10s"]),
        LIMIT,
    )
    .await;
    assert_eq!(code, 2, "run: {stderr}");
    assert!(stderr.contains(want), "run: want '{want}' in {stderr}");

    let (code, _out, stderr) = finish(
        w.spawn_cluster(&[
            "--processes",
            "1",
            "--max-restarts",
            "3",
            "--checkpoint-interval",
            "1s",
            "--stop-when-idle",
            "10s",
        ]),
        LIMIT,
    )
    .await;
    assert_eq!(code, 2, "cluster: {stderr}");
    assert!(stderr.contains(want), "cluster: want '{want}' in {stderr}");
    assert!(stderr.contains("a restart cannot fix this"), "{stderr}");
    assert!(!stderr.contains("restarting all"), "no restart: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_too_large_to_publish_under_failure_handler_fail_exits_2_without_restart() {
    let t = topics("perm-large", 60).await;
    // 10,600,000 bytes of data: over Pub/Sub's 10,485,760-byte publish request, which the
    // emulator does not enforce (it accepts up to about 11 MB), so it reaches the sink,
    // which refuses it.
    let row = serde_json::json!({"seq": 1, "pad": "x".repeat(10_600_000)});
    pubsub_connector_core::admin::publish_all(
        &profile(),
        &t.input,
        vec![row.to_string().into_bytes()],
        1,
    )
    .await
    .unwrap();
    let sql = format!(
        "CREATE TABLE src (seq BIGINT, pad TEXT) WITH ('connector' = 'pubsub',
            'project' = '{PROJECT}', 'subscription' = '{sub}', 'emulator-endpoint' = '{e}');
         CREATE TABLE dst (seq BIGINT, pad TEXT) WITH ('connector' = 'pubsub',
            'project' = '{PROJECT}', 'topic' = '{out}', 'emulator-endpoint' = '{e}',
            'sink.failure-handler' = 'fail');
         INSERT INTO dst SELECT seq, pad FROM src;",
        sub = t.input_sub,
        out = t.output,
        e = endpoint()
    );
    refused_without_restart(&Workdir::new(&sql), "'sink.failure-handler'").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_raw_message_under_failure_handler_fail_exits_2_without_restart() {
    let t = topics("perm-empty", 60).await;
    // No data, one attribute (Pub/Sub refuses a message with neither): a raw_string row
    // `value = ''`, which the raw_string sink would publish as an empty message.
    let publisher = pubsub_connector_core::client::publisher(
        &profile(),
        &pubsub_connector_core::client::topic_path(PROJECT, &t.input),
    )
    .unwrap()
    .build()
    .await
    .unwrap();
    publisher
        .publish(google_cloud_pubsub::model::Message::new().set_attributes([("a", "b")]))
        .await
        .unwrap();
    let sql = format!(
        "CREATE TABLE src (value TEXT) WITH ('connector' = 'pubsub', 'format' = 'raw_string',
            'project' = '{PROJECT}', 'subscription' = '{sub}', 'emulator-endpoint' = '{e}');
         CREATE TABLE dst (value TEXT) WITH ('connector' = 'pubsub', 'format' = 'raw_string',
            'project' = '{PROJECT}', 'topic' = '{out}', 'emulator-endpoint' = '{e}');
         INSERT INTO dst SELECT value FROM src;",
        sub = t.input_sub,
        out = t.output,
        e = endpoint()
    );
    refused_without_restart(&Workdir::new(&sql), "the message would be empty").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_file_exits_2_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("missing-key.json");
    let sql = format!(
        "CREATE TABLE src (seq BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p',
            'subscription' = 's', 'service-account-key-file' = '{}');
         CREATE TABLE dst (seq BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO dst SELECT seq FROM src;",
        key.display()
    );
    refused_without_restart(
        &Workdir::new(&sql),
        "the service account key file set by 'service-account-key-file' was not found",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_directory_locked_by_another_job_exits_2_without_restart() {
    let w = Workdir::new(
        "CREATE TABLE b (auction BIGINT) WITH ('connector' = 'nexmark', 'events-per-second' = '10');
         CREATE TABLE d (auction BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO d SELECT auction FROM b;",
    );
    // This test process plays the other job: it holds the lock as a running job does.
    std::fs::create_dir_all(w.state()).unwrap();
    let lock = std::fs::File::create(w.state().join("lock")).unwrap();
    lock.lock().unwrap();
    refused_without_restart(&w, "is in use by another pubsub-connector process").await;
    drop(lock);
}
