//! Against the real emulator: a drain that stops early (at its expected count) returns
//! every message it acknowledged, so a test or the fault campaign that reads a
//! subscription in parts never loses a message to its own reader.

use std::collections::HashSet;
use std::time::Duration;

use super::*;
use pubsub_emulator_tools::emulator::Emulator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_stopped_at_its_count_returns_every_message_it_acknowledged() {
    let emulator = Emulator::start().unwrap();
    let profile = client::emulator_profile("drain-count", &emulator.endpoint());
    create_topic(&profile, "drain-topic").await.unwrap();
    // 10 s: a message leased but not acknowledged by a partial drain comes back within
    // the final drain's idle wait.
    create_subscription(&profile, "drain-sub", "drain-topic", 10)
        .await
        .unwrap();
    let n = 3_000;
    let payloads = (0..n).map(|i| format!("{i}").into_bytes()).collect();
    let ids = publish_all(&profile, "drain-topic", payloads, 500)
        .await
        .unwrap();
    // Many small partial reads: each stops while its streams still deliver. (A part may
    // come back empty: the previous part's streams may hold the rest leased.)
    let mut got: HashSet<String> = HashSet::new();
    for _ in 0..40 {
        let part = drain(&profile, "drain-sub", 2, Some(7), Duration::from_secs(2))
            .await
            .unwrap();
        got.extend(part.into_keys());
    }
    let rest = drain(&profile, "drain-sub", 2, None, Duration::from_secs(15))
        .await
        .unwrap();
    got.extend(rest.into_keys());
    let lost: Vec<&String> = ids.iter().filter(|id| !got.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of {n} messages acknowledged by a drain and not returned: {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
}
