//! StreamingPull streams, each owned by one task that never cancels `next()` mid-open
//! (the client's `next()` is not cancel-safe while a stream opens) and forwards into a
//! small bounded channel. Not reading that channel pauses the streams.

use std::time::Duration;

use google_cloud_pubsub::client::Subscriber;
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::ShutdownToken;
use pubsub_schema::SourceConfig;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub(super) enum Pulled {
    Message(Message, Handler),
    Failed(String),
}

/// The streams of one source subtask.
pub(super) struct PullStreams {
    rx: mpsc::Receiver<Pulled>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    tokens: Vec<ShutdownToken>,
}

impl PullStreams {
    /// Opens `parallel_pull_count` streams. The client's max lease is set to the ack
    /// extension period (it ends lease extension silently after it).
    pub fn start(subscriber: &Subscriber, subscription: &str, config: &SourceConfig) -> Self {
        let (tx, rx) = mpsc::channel(64);
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut tokens = Vec::new();
        for _ in 0..config.parallel_pull_count {
            let mut b = subscriber
                .subscribe(subscription.to_string())
                .set_max_outstanding_messages(
                    config.max_outstanding_messages.min(i64::MAX as u64) as i64
                )
                .set_max_outstanding_bytes(config.max_outstanding_bytes.min(i64::MAX as u64) as i64)
                .set_max_lease(Duration::from_millis(config.max_ack_extension_period_ms));
            if let Some(ms) = config.max_duration_per_ack_extension_ms {
                b = b.set_max_lease_extension(Duration::from_millis(ms));
            }
            let mut stream = b.build();
            tokens.push(stream.shutdown_token());
            let tx = tx.clone();
            let mut stop_rx = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let item = tokio::select! {
                        biased;
                        _ = stop_rx.wait_for(|s| *s) => break,
                        item = stream.next() => item,
                    };
                    let out = match item {
                        Some(Ok((m, h))) => Pulled::Message(m, h),
                        Some(Err(e)) => Pulled::Failed(e.to_string()),
                        None => break,
                    };
                    let failed = matches!(out, Pulled::Failed(_));
                    tokio::select! {
                        biased;
                        _ = stop_rx.wait_for(|s| *s) => break, // dropping `out` nacks its handle
                        sent = tx.send(out) => if sent.is_err() { break },
                    }
                    if failed {
                        break;
                    }
                }
                // The stream is dropped here, before any nack, so nacked messages are not
                // redelivered into this same stream.
            }));
        }
        PullStreams {
            rx,
            stop,
            tasks,
            tokens,
        }
    }

    /// The next delivery from any stream. Pending forever once reading stopped.
    pub async fn next(&mut self) -> Pulled {
        match self.rx.recv().await {
            Some(p) => p,
            None => std::future::pending().await,
        }
    }

    /// Stops every stream and returns the deliveries already forwarded but not taken.
    pub async fn stop_reading(&mut self) -> Vec<(Message, Handler)> {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        let mut stray = Vec::new();
        while let Ok(p) = self.rx.try_recv() {
            if let Pulled::Message(m, h) = p {
                stray.push((m, h));
            }
        }
        stray
    }

    /// Awaits each subscriber's shutdown, which flushes pending acks and nacks; bounded by
    /// `timeout` for all streams together. Call after the last ack or nack.
    pub async fn shutdown(mut self, timeout: Duration) {
        let _ = self.stop_reading().await;
        let all = futures::future::join_all(self.tokens.iter().map(|t| t.shutdown()));
        if tokio::time::timeout(timeout, all).await.is_err() {
            tracing::warn!("subscriber shutdown did not finish within {timeout:?}");
        }
    }
}
