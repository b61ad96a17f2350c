//! End-to-end tests of the Pub/Sub source against the real emulator: reconnects after a
//! network cut, permanent errors, the bad-message policy, default flow control, and
//! fail-fast start-up errors. Each test uses its own topics.

mod support;

use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(150);

/// Like `pipeline_sql`, with separate endpoints for the source and the sink.
fn split_sql(t: &Topics, source_endpoint: &str, sink_endpoint: &str, extra: &str) -> String {
    pipeline_sql(t, source_endpoint, extra).replacen(
        &format!("'topic' = '{}',\n            'emulator-endpoint' = '{source_endpoint}'", t.output),
        &format!("'topic' = '{}',\n            'emulator-endpoint' = '{sink_endpoint}'", t.output),
        1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_cut_mid_stream_reconnects_and_delivers_everything() {
    let t = topics("cut", 10).await;
    let ids = publish_seq(&t.input, 0..6_000).await;
    let proxy = TcpProxy::start(&endpoint()).await;
    // Only the source goes through the proxy; 500 held messages per 1 s checkpoint keep
    // it reading for ~12 s, so the cut lands mid-stream.
    let w = Workdir::new(&split_sql(
        &t,
        &proxy.endpoint(),
        &endpoint(),
        ", 'scan.flow-control.max-outstanding-element-count' = '500'",
    ));
    let child = w.spawn(&[
        "--workers",
        "1",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "10s",
    ]);
    // Cut once some rows reached the sink, well before the end (~1,950 msg/s per stream).
    let first = sink_ids(&t.output_sub, Some(1_500), Duration::from_secs(60)).await;
    assert!(!first.is_empty(), "nothing reached the sink before the cut");
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(6)).await;
    proxy.restore().await;
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
}
