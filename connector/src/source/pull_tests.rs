//! Against the real emulator (through its proxy, whose wire log shows what reached the
//! server): a stream is never dropped with deliveries the client decoded but did not hand
//! over, because the client would nack those itself, where no counter sees them.

use std::time::Duration;

use super::*;
use crate::{admin, client};
use pubsub_emulator_tools::{emulator::Emulator, wire_log};

/// The nacks (ModifyAckDeadline 0) the server received for `subscription` (full name).
fn nacks_on_wire(subscription: &str) -> usize {
    wire_log::events()
        .into_iter()
        .map(|e| match e.kind {
            wire_log::WireKind::Deadline {
                subscription: s,
                seconds: 0,
                ack_ids,
            } if s == subscription => ack_ids.len(),
            _ => 0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_short_hands_over_every_delivery_the_client_decoded_so_the_nacks_are_all_counted(
) {
    wire_log::enable();
    let emulator = Emulator::start().unwrap();
    let profile = client::emulator_profile("drain-test", &emulator.endpoint());
    admin::create_topic(&profile, "drain-topic").await.unwrap();
    admin::create_subscription(&profile, "drain-sub", "drain-topic", 600)
        .await
        .unwrap();
    let payloads = (0..2_000).map(|i| format!("{{\"seq\": {i}}}").into_bytes());
    admin::publish_all(&profile, "drain-topic", payloads.collect(), 100)
        .await
        .unwrap();
    let subscription = client::subscription_path("drain-test", "drain-sub");
    let subscriber = client::subscriber(&profile).await.unwrap();
    let settings = StreamSettings {
        streams: 1,
        max_outstanding_messages: 10_000,
        max_outstanding_bytes: 100 << 20,
        max_lease: Duration::from_secs(3600),
        max_lease_extension: None,
    };
    let mut stream = open(&subscriber, &subscription, &settings);
    // One delivery taken: the client now holds the rest of its response, decoded and
    // leased. A drain budget of zero is a stop whose drain ran out of time.
    let (_m, first) = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("a delivery within 30 s")
        .expect("the stream is open")
        .expect("a delivery");
    let rest = drain_within(&mut stream, Duration::ZERO).await;
    let token = stream.shutdown_token();
    drop(stream);
    let handed_over = 1 + rest.len();
    first.nack();
    rest.into_iter().for_each(|h| h.nack());
    tokio::time::timeout(Duration::from_secs(30), token.shutdown())
        .await
        .expect("the lease loop ends once every handler is gone");
    assert_eq!(
        nacks_on_wire(&subscription),
        handed_over,
        "every nack the server received is one the connector sent (and counts)"
    );
    assert!(
        handed_over > 1,
        "the emulator sends responses of many messages, so some were left in the client"
    );
}
