//! The baselines: the `google-cloud-pubsub` client with no engine, doing what a pipeline
//! does (decision 0029). Each returns how many messages it finished.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::model::Message;
use pubsub_connector_core::{admin, client};
use pubsub_schema::PubSubProfile;

/// The batching both a baseline and its pipeline publish with.
#[derive(Clone, Copy)]
pub struct Batching {
    /// Messages per publish request.
    pub messages: u32,
    /// Bytes per publish request.
    pub bytes: u32,
    /// Longest wait for a batch to fill.
    pub delay: Duration,
}

async fn publisher(p: &PubSubProfile, topic: &str, b: Batching) -> anyhow::Result<Publisher> {
    Ok(
        client::publisher(p, &client::topic_path(&p.project, topic))?
            .set_message_count_threshold(b.messages)
            .set_byte_threshold(b.bytes)
            .set_delay_threshold(b.delay)
            .build()
            .await?,
    )
}

/// Consume only: `streams` streaming pulls of `sub` ack each message as it arrives, until
/// `n` distinct messages came (or none for 15 s).
pub async fn consume(
    p: &PubSubProfile,
    sub: &str,
    streams: usize,
    n: usize,
) -> anyhow::Result<usize> {
    Ok(
        admin::drain(p, sub, streams, Some(n), Duration::from_secs(15))
            .await?
            .len(),
    )
}

/// The same work as a `subscription -> topic` pipeline: `streams` streaming pulls of
/// `sub`, each message's payload published to `topic` with `batching`, and the message
/// acked once its publish is confirmed. Ends when `n` were acked or none for 15 s.
/// Returns how many were acked and the seconds from the first message to the last ack.
pub async fn same_work(
    p: &PubSubProfile,
    sub: &str,
    topic: &str,
    streams: usize,
    n: usize,
    outstanding: i64,
    batching: Batching,
) -> anyhow::Result<(usize, f64)> {
    let subscriber = client::subscriber(p).await?;
    let first = Arc::new(std::sync::OnceLock::new());
    let publisher = publisher(p, topic, batching).await?;
    let acked = Arc::new(AtomicUsize::new(0));
    // Woken by the ack that makes `n`: a polling wait would add its own CPU to the
    // baseline's.
    let all_acked = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    let mut tokens = Vec::new();
    for _ in 0..streams.max(1) {
        let mut stream = subscriber
            .subscribe(client::subscription_path(&p.project, sub))
            .set_max_outstanding_messages(outstanding)
            .build();
        tokens.push(stream.shutdown_token());
        let (publisher, acked, first) = (publisher.clone(), acked.clone(), first.clone());
        let all_acked = all_acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut in_flight = FuturesUnordered::new();
            loop {
                tokio::select! {
                    m = stream.next() => {
                        let Some(Ok((m, h))) = m else { break };
                        first.get_or_init(std::time::Instant::now);
                        let f = publisher.publish(Message::new().set_data(m.data));
                        in_flight.push(async move { (f.await, h) });
                    }
                    Some((r, h)) = in_flight.next(), if !in_flight.is_empty() => {
                        r.map_err(|e| anyhow::anyhow!("publish failed: {e}"))?;
                        h.ack();
                        if acked.fetch_add(1, Ordering::Relaxed) + 1 == n {
                            all_acked.notify_one();
                        }
                    }
                }
            }
            anyhow::Ok(())
        }));
    }
    // Until all are acked, or no ack came for 15 s.
    let mut last = usize::MAX;
    while tokio::time::timeout(Duration::from_secs(15), all_acked.notified())
        .await
        .is_err()
    {
        let now = acked.load(Ordering::Relaxed);
        if now == last {
            break;
        }
        last = now;
    }
    let end = std::time::Instant::now();
    let streaming_s = first
        .get()
        .map_or(0.0, |f| end.duration_since(*f).as_secs_f64());
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        futures::future::join_all(tokens.iter().map(|t| t.shutdown())),
    )
    .await;
    for t in tasks {
        if t.is_finished() {
            t.await??;
        } else {
            t.abort();
        }
    }
    Ok((acked.load(Ordering::Relaxed), streaming_s.max(0.001)))
}

/// Publishes `n` NEXMark bids, generated and encoded as JSON here (the bytes a
/// `nexmark` table reads), to `topic` with `batching` and waits for every confirmation.
pub async fn publish_generated(
    p: &PubSubProfile,
    topic: &str,
    n: u64,
    batching: Batching,
    max_in_flight: usize,
) -> anyhow::Result<usize> {
    let publisher = publisher(p, topic, batching).await?;
    let mut events =
        pubsub_nexmark::events::Events::new(pubsub_nexmark::events::EventKind::Bid, 0, 1);
    // At most `max_in_flight` unconfirmed, as the sink's `sink.in-flight.max-messages`.
    let mut in_flight = FuturesUnordered::new();
    let mut done = 0;
    for _ in 0..n {
        if in_flight.len() >= max_in_flight.max(1) {
            let r: Result<String, _> = in_flight.next().await.expect("non-empty");
            r.map_err(|e| anyhow::anyhow!("publish failed: {e}"))?;
            done += 1;
        }
        in_flight.push(publisher.publish(Message::new().set_data(events.next_json())));
    }
    while let Some(r) = in_flight.next().await {
        r.map_err(|e| anyhow::anyhow!("publish failed: {e}"))?;
        done += 1;
    }
    Ok(done)
}
