//! Every nack reaches the server before the process exits or its stream closes (issue
//! 16, finding 7): after an abort, after a graceful stop; a table-test sample does not
//! touch the subscription at all.
//! The server side is observed exactly by the wire log of the emulator proxy in this test
//! process (`wire_log`): the ModifyAckDeadline(0) ack IDs it forwarded. Subscriptions
//! have a 60 s ack deadline and the read-back's idle window is 10 s, so a message whose
//! nack was lost cannot pass as released.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use pubsub_emulator_tools::wire_log;
use support::*;

const LIMIT: Duration = Duration::from_secs(180);
/// Shorter than the subscriptions' 60 s ack deadline: only a nack brings a message back
/// within it.
const IDLE: Duration = Duration::from_secs(10);

/// `pipeline_sql` with the sink writing through `sink_endpoint`.
fn sink_through(t: &Topics, sink_endpoint: &str, extra: &str) -> String {
    let sql = pipeline_sql(t, &endpoint(), extra);
    let at = sql.rfind(&endpoint()).unwrap();
    format!(
        "{}{}{}",
        &sql[..at],
        sink_endpoint,
        &sql[at + endpoint().len()..]
    )
}

/// Reads `sub` back until it is quiet for [`IDLE`]: distinct message ids (acks them).
async fn read_back(sub: &str) -> HashSet<String> {
    redelivered(sub, IDLE).await.into_keys().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_sends_every_nack_and_everything_held_comes_back_at_once() {
    wire_log::enable();
    let t = topics("abort-held", 60).await;
    let ids = publish_seq(&t.input, 0..2_500).await;
    // Every row is written (so every message is held, staged for the next checkpoint),
    // then the sink's connection is cut and one more message arrives: its row cannot be
    // written, so the first signal's final checkpoint cannot complete and nothing is
    // committed.
    let cutter = TcpCutter::start(&endpoint()).await.unwrap();
    let w = Workdir::new(&sink_through(
        &t,
        &cutter.endpoint(),
        ", 'scan.first-checkpoint-timeout' = '0s'",
    ));
    let mut child = w.spawn(&["--checkpoint-interval", "60s"]);
    let lines = collect_lines(child.stderr.take().unwrap());
    let written = sink_ids(&t.output_sub, Some(ids.len()), Duration::from_secs(30)).await;
    assert_eq!(missing(&ids, &written), 0, "every row was written");
    cutter.cut();
    let mut ids = ids;
    ids.extend(publish_seq(&t.input, 2_500..2_501).await);
    wait_until("every message delivered to the job", LIMIT, || {
        Wire::of(&t.input_sub).delivered_ids().len() >= ids.len()
    })
    .await;
    signal(&child, "TERM");
    let logged = lines.clone();
    wait_until("the first signal", LIMIT, move || {
        logged
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("signal received: stopping"))
    })
    .await;
    signal(&child, "TERM");
    let (code, stdout, _) = finish(child, LIMIT).await;
    let stderr = lines.lock().unwrap().join("\n");
    assert_ne!(code, 0, "an aborted job does not exit 0: {stderr}");
    assert!(stderr.contains("second signal received"), "{stderr}");
    assert_eq!(
        w.checkpoint_epoch(),
        None,
        "nothing was committed: {stdout}"
    );
    assert_eq!(
        summary_count(&stdout, "messages acknowledged:"),
        0,
        "{stdout}"
    );
    let wire = Wire::of(&t.input_sub);
    let released = summary_count(&stdout, "messages released:");
    assert_eq!(
        released,
        wire.nacked.len(),
        "the summary counts exactly the nacks that reached the server: {stdout}"
    );
    assert_eq!(
        wire.nacked_ids().len(),
        ids.len(),
        "every held message was nacked at the server: {stdout}\n{stderr}"
    );
    let back = read_back(&t.input_sub).await;
    assert_eq!(
        missing(&ids, &back),
        0,
        "every held message came back within {IDLE:?} (ack deadline 60 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_sends_every_nack_of_what_the_final_checkpoint_does_not_cover() {
    wire_log::enable();
    let t = topics("stop-held", 60).await;
    let ids = publish_seq(&t.input, 0..2_500).await;
    // The rate limit leaves most deliveries waiting, held, when the final barrier comes.
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.rate-limit.messages-per-second' = '400'",
    ));
    let mut child = w.spawn(&["--workers", "1", "--checkpoint-interval", "60s"]);
    let lines = collect_lines(child.stderr.take().unwrap());
    wait_until("every message delivered to the job", LIMIT, || {
        Wire::of(&t.input_sub).delivered_ids().len() >= ids.len()
    })
    .await;
    signal(&child, "TERM");
    let (code, stdout, _) = finish(child, LIMIT).await;
    let stderr = lines.lock().unwrap().join("\n");
    assert_eq!(code, 0, "{stderr}");
    let acked = summary_count(&stdout, "messages acknowledged:");
    let released = summary_count(&stdout, "messages released:");
    assert!(released > 0, "the stop came with messages held: {stdout}");
    let wire = Wire::of(&t.input_sub);
    assert_eq!(
        released,
        wire.nacked.len(),
        "the summary counts exactly the nacks that reached the server: {stdout}"
    );
    assert_eq!(acked, wire.acked.len(), "{stdout}");
    let written = sink_ids(&t.output_sub, None, Duration::from_secs(5)).await;
    let back = read_back(&t.input_sub).await;
    let all: HashSet<String> = written.iter().chain(&back).cloned().collect();
    assert_eq!(
        missing(&ids, &all),
        0,
        "every message was written or came back within {IDLE:?} (ack deadline 60 s): {stdout}\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_test_samples_leave_the_subscription_untouched() {
    // Seven wizard table tests used to lease and nack the subscription's own messages
    // (finding 7): a pipeline started right after read none of them within its idle
    // window. Samples now read a temporary copy (finding 5): the subscription delivers
    // nothing to them. The emulator does not replay a snapshot, so each round publishes
    // its 20 messages once the copy exists.
    wire_log::enable();
    let t = topics("sample-held", 60).await;
    let p = profile();
    let mut ids = Vec::new();
    for round in 0..7usize {
        let published = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = published.clone();
        let input = t.input.clone();
        let got = pubsub_connector_core::explore::sample(
            &p,
            &t.input_sub,
            20,
            (Duration::from_secs(10), Duration::from_secs(2)),
            async move {
                let n = round * 20;
                *sink.lock().unwrap() = publish_seq(&input, n..n + 20).await;
            },
        )
        .await
        .unwrap();
        assert_eq!(
            got.messages.len(),
            20,
            "round {round}: the sample read the copy"
        );
        ids.extend(published.lock().unwrap().drain(..));
        let wire = Wire::of(&t.input_sub);
        assert!(
            wire.delivered.is_empty() && wire.nacked.is_empty(),
            "round {round}: the subscription itself delivered to a sample"
        );
    }
    let back = read_back(&t.input_sub).await;
    assert_eq!(
        missing(&ids, &back),
        0,
        "every message is on the subscription for the next reader, within {IDLE:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nacks_that_cannot_be_sent_are_not_counted_as_released() {
    wire_log::enable();
    let t = topics("unsent", 60).await;
    let ids = publish_seq(&t.input, 0..2_500).await;
    // Only the source goes through the cutter; the rate limit leaves most deliveries
    // held, waiting, when the stop comes.
    let cutter = TcpCutter::start(&endpoint()).await.unwrap();
    let sql = pipeline_sql(
        &t,
        &cutter.endpoint(),
        ", 'scan.rate-limit.messages-per-second' = '400', 'scan.shutdown-timeout' = '2s'",
    );
    let sink_at = sql.rfind(&cutter.endpoint()).unwrap();
    let sql = format!(
        "{}{}{}",
        &sql[..sink_at],
        endpoint(),
        &sql[sink_at + cutter.endpoint().len()..]
    );
    let w = Workdir::new(&sql);
    let child = w.spawn(&["--workers", "1", "--checkpoint-interval", "60s"]);
    wait_until("every message delivered to the job", LIMIT, || {
        Wire::of(&t.input_sub).delivered_ids().len() >= ids.len()
    })
    .await;
    // Nothing the source sends from now on reaches the server.
    cutter.stall(true);
    signal(&child, "TERM");
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    let wire = Wire::of(&t.input_sub);
    assert!(wire.nacked.is_empty(), "the stall let nacks through");
    assert_eq!(
        summary_count(&stdout, "messages released:"),
        0,
        "no nack reached the server: {stdout}"
    );
    let unsent = summary_count(&stdout, "messages not released:");
    assert!(unsent > 0, "{stdout}");
    assert!(
        stderr.contains(&format!("{unsent} nacks were not confirmed sent")),
        "{stderr}"
    );
    cutter.stall(false);
}
