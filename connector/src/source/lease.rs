//! Which nacks reached the service (issue 16, finding 7). The client queues a nack and
//! sends it (ModifyAckDeadline 0) from the stream's lease loop within 100 ms; the loop
//! ends only after every handler of its stream is gone and every request it started
//! completed. So each stream's nacks are counted against it here, and a nack counts as
//! sent only once its stream's lease loop ended within the close's budget. Errors of the
//! request itself are not reported by the client (fire-and-forget).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::ShutdownToken;
use pubsub_engine_spi::Counter;

use super::tracker::AckHandle;

/// One opened stream's lease loop and the nacks of its deliveries.
pub(super) struct Lease {
    token: ShutdownToken,
    nacks: AtomicU64,
    ended: AtomicBool,
    /// `messages_nacked` of the subtask.
    nacked: Counter,
}

impl Lease {
    fn nacked(&self) {
        self.nacks.fetch_add(1, Ordering::Relaxed);
        self.nacked.add(1);
    }
}

/// Every lease loop a subtask opened, kept until its close.
#[derive(Clone, Default)]
pub(super) struct Leases(Arc<Mutex<Vec<Arc<Lease>>>>);

impl Leases {
    /// Registers the lease loop of a stream just opened; its deliveries count against it.
    pub fn open(&self, token: ShutdownToken, nacked: Counter) -> Arc<Lease> {
        let lease = Arc::new(Lease {
            token,
            nacks: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            nacked,
        });
        self.0.lock().expect("leases lock").push(lease.clone());
        lease
    }

    /// Shuts every lease loop down (each ends once its handlers are gone: ack or nack
    /// them all first) and waits at most `budget`. Returns how many nacks were not
    /// confirmed sent: those of the loops still running.
    pub async fn close(&self, budget: Duration) -> u64 {
        let leases = std::mem::take(&mut *self.0.lock().expect("leases lock"));
        let ends = leases.iter().map(|l| async move {
            l.token.shutdown().await;
            l.ended.store(true, Ordering::Release);
        });
        let _ = tokio::time::timeout(budget, futures::future::join_all(ends)).await;
        leases
            .iter()
            .filter(|l| !l.ended.load(Ordering::Acquire))
            .map(|l| l.nacks.load(Ordering::Relaxed))
            .sum()
    }
}

/// A delivery's handler, whose nack is counted against its stream's lease loop. Dropping
/// it nacks too (as the client's handler does), counted the same.
pub(super) struct Delivery {
    handler: Option<Handler>,
    lease: Arc<Lease>,
}

impl Delivery {
    pub fn new(handler: Handler, lease: Arc<Lease>) -> Self {
        Delivery {
            handler: Some(handler),
            lease,
        }
    }

    pub fn handler(&self) -> &Handler {
        self.handler.as_ref().expect("present until consumed")
    }

    /// The handler itself, to ack (e.g. with a confirmation); never to nack.
    pub fn into_ack_handler(mut self) -> Handler {
        self.handler.take().expect("present until consumed")
    }
}

impl AckHandle for Delivery {
    fn ack(self) {
        self.into_ack_handler().ack();
    }
    fn nack(mut self) {
        if let Some(h) = self.handler.take() {
            h.nack();
            self.lease.nacked();
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some(h) = self.handler.take() {
            h.nack();
            self.lease.nacked();
        }
    }
}
