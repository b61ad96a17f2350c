//! StreamingPull streams, each owned by one task that never cancels `next()` mid-open
//! (the client's `next()` is not cancel-safe while a stream opens) and forwards into a
//! small bounded channel. Not reading that channel pauses the streams.
//!
//! Streams are kept alive: a stream that ends, or fails with a retryable status, is
//! reopened from the same `Subscriber` after a jittered exponential backoff (100 ms
//! doubling to 10 s, reset after a delivery, see [`super::backoff`]). Before each reopen
//! the task probes the subscription with a bounded `GetSubscription`, so a dead endpoint
//! is waited out (and a deleted subscription is noticed) without spinning streams. The
//! client retries transport errors inside `next()` by itself; what reaches this layer is
//! the end of a stream or a status the client considers permanent.
//!
//! The client also retries transport errors *inside* `next()` silently (reopening with its
//! own backoff of up to 60 s), so a network cut is invisible at this layer. A monitor task
//! per subtask therefore probes the subscription (one bounded `GetSubscription`) whenever
//! no message arrived for [`QUIET_PROBE`]: a failing probe starts an incident (WARN,
//! `set_can_pull(false)`), probes then follow the backoff schedule, and the first
//! successful one ends it (INFO with the downtime) and, if nothing was delivered
//! meanwhile, replaces every stream so recovery does not wait for the client's backoff.
//! On the real service this costs at most one admin call per [`QUIET_PROBE`] per idle
//! subtask (the admin quota is 6,000 per minute per project).
//!
//! Held handles survive a reconnect: the client's lease task lives as long as a handle
//! or the stream does, and handles keep being extended, acked and nacked after their
//! stream was dropped (measured, `pubsub-client-notes.md`; in the crate's
//! `subscriber/lease_loop.rs` the default `ShutdownBehavior::WaitForProcessing` keeps a
//! clone of the message sender, so the loop runs until every handle is gone). Each stream's
//! lease loop is registered in the subtask's [`Leases`] until close, so the final acks and
//! nacks of old streams are flushed too, and each nack is counted against its stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::client::{Subscriber, SubscriptionAdmin};
use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::subscriber::handler::Handler;
use pubsub_engine_spi::Counter;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::lease::{Delivery, Leases};
use super::policy::is_retryable;
use super::tracker::AckHandle;

pub(super) enum Pulled {
    Message(Message, Delivery),
    /// Stream `stream` ended or failed with a retryable cause and is being reopened.
    /// Sent once per incident (not per attempt).
    Reconnecting {
        stream: usize,
        cause: String,
    },
    /// Stream `stream` is open again after being down for `down_for`.
    Recovered {
        stream: usize,
        down_for: Duration,
    },
    /// A permanent failure: the job must fail.
    Failed {
        code: Option<Code>,
        error: String,
    },
}

/// Stream settings, from the effective source config.
#[derive(Debug, Clone)]
pub(super) struct StreamSettings {
    pub streams: u32,
    pub max_outstanding_messages: u64,
    pub max_outstanding_bytes: u64,
    pub max_lease: Duration,
    pub max_lease_extension: Option<Duration>,
}

/// The stream ack deadline when `max_duration_per_ack_extension` is unset: the client's
/// default lease extension (see the client notes in `shared/reference`).
pub const DEFAULT_STREAM_ACK_DEADLINE: Duration = Duration::from_secs(60);
/// A subtask that received nothing for this long probes its subscription.
pub const QUIET_PROBE: Duration = Duration::from_secs(3);
/// Each probe gives up after this.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// The `stream` index the monitor reports incidents under.
pub(super) const MONITOR: usize = usize::MAX;

/// Events of every split of a subtask share one bounded channel, tagged with the split's
/// position in the subtask; not reading it pauses every stream.
pub(super) type Tagged = (usize, Pulled);

/// A sender that tags what it sends with its split.
#[derive(Clone)]
struct SplitTx {
    split: usize,
    tx: mpsc::Sender<Tagged>,
}

impl SplitTx {
    async fn send(&self, p: Pulled) -> Result<(), ()> {
        self.tx.send((self.split, p)).await.map_err(|_| ())
    }
}

/// The streams of one split (one subscription) of a source subtask.
pub(super) struct PullStreams {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// The subtask's counters the streams count into, and its lease loops.
#[derive(Clone)]
pub(super) struct StreamShared {
    /// Every reopen attempt.
    pub reconnects: Counter,
    /// Deliveries the streams release themselves (at stop) count as received...
    pub received: Counter,
    /// ...and, as every nack of a delivery, as nacked (see [`Delivery`]).
    pub nacked: Counter,
    pub leases: Leases,
}

fn open(
    subscriber: &Subscriber,
    subscription: &str,
    s: &StreamSettings,
) -> google_cloud_pubsub::subscriber::MessageStream {
    let mut b = subscriber
        .subscribe(subscription.to_string())
        .set_max_outstanding_messages(s.max_outstanding_messages.min(i64::MAX as u64) as i64)
        .set_max_outstanding_bytes(s.max_outstanding_bytes.min(i64::MAX as u64) as i64)
        .set_max_lease(s.max_lease);
    if let Some(d) = s.max_lease_extension {
        b = b.set_max_lease_extension(d);
    }
    b.build()
}

/// One `GetSubscription` attempt of at most [`PROBE_TIMEOUT`]: Ok when the endpoint
/// answers and the subscription exists.
async fn probe(
    admin: &SubscriptionAdmin,
    subscription: &str,
) -> Result<(), google_cloud_pubsub::Error> {
    use google_cloud_gax::options::RequestOptionsBuilder;
    use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt};
    admin
        .get_subscription()
        .set_subscription(subscription.to_string())
        .with_attempt_timeout(PROBE_TIMEOUT)
        .with_retry_policy(Aip194Strict.with_attempt_limit(1))
        .send()
        .await
        .map(|_| ())
}

/// Milliseconds since `base` of the last delivery, shared by the stream tasks.
#[derive(Clone)]
struct LastDelivery {
    base: Instant,
    ms: Arc<AtomicU64>,
}

impl LastDelivery {
    fn touch(&self) {
        self.ms
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn since(&self) -> Duration {
        self.base
            .elapsed()
            .saturating_sub(Duration::from_millis(self.ms.load(Ordering::Relaxed)))
    }
}

impl PullStreams {
    /// Opens `settings.streams` streams for split `split`, forwarding into `tx`.
    pub fn start(
        subscriber: Subscriber,
        admin: SubscriptionAdmin,
        subscription: &str,
        settings: StreamSettings,
        shared: StreamShared,
        split: usize,
        tx: mpsc::Sender<Tagged>,
    ) -> Self {
        let tx = SplitTx { split, tx };
        let (stop, stop_rx) = watch::channel(false);
        let last = LastDelivery {
            base: Instant::now(),
            ms: Arc::new(AtomicU64::new(0)),
        };
        let (restart, restart_rx) = watch::channel(0u64);
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(
            Monitor {
                admin: admin.clone(),
                subscription: subscription.to_string(),
                tx: tx.clone(),
                stop: stop_rx.clone(),
                last: last.clone(),
                restart,
                reconnects: shared.reconnects.clone(),
            }
            .run(),
        ));
        for index in 0..settings.streams as usize {
            let task = StreamTask {
                index,
                subscriber: subscriber.clone(),
                admin: admin.clone(),
                subscription: subscription.to_string(),
                settings: settings.clone(),
                tx: tx.clone(),
                stop: stop_rx.clone(),
                shared: shared.clone(),
                last: last.clone(),
                restart: restart_rx.clone(),
            };
            tasks.push(tokio::spawn(task.run()));
        }
        PullStreams { stop, tasks }
    }

    /// Stops every stream and waits for its task to end. Deliveries already forwarded stay
    /// in the shared channel: the reader takes and releases them.
    pub async fn stop_reading(&mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

struct StreamTask {
    index: usize,
    subscriber: Subscriber,
    admin: SubscriptionAdmin,
    subscription: String,
    settings: StreamSettings,
    tx: SplitTx,
    stop: watch::Receiver<bool>,
    shared: StreamShared,
    last: LastDelivery,
    /// Bumped by the monitor to replace every stream after an outage.
    restart: watch::Receiver<u64>,
}

/// How a stream's read loop ended.
enum End {
    Stopped,
    Retry(String),
    /// The monitor asked for a fresh stream (it already reported the incident).
    Restart,
}

impl StreamTask {
    async fn run(mut self) {
        let seed = std::process::id() as u64
            ^ ((self.index as u64 + 1) << 32)
            ^ Instant::now().elapsed().as_nanos() as u64;
        let mut backoff = Backoff::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        loop {
            let cause = match self.read(&mut backoff).await {
                End::Stopped => return,
                End::Retry(cause) => cause,
                End::Restart => {
                    self.shared.reconnects.add(1);
                    continue;
                }
            };
            // One incident: report it once, then retry until the endpoint answers.
            let down_since = Instant::now();
            if !self
                .send(Pulled::Reconnecting {
                    stream: self.index,
                    cause,
                })
                .await
            {
                return;
            }
            loop {
                let delay = backoff.next_delay();
                let mut stop = self.stop.clone();
                tokio::select! {
                    biased;
                    _ = stop.wait_for(|s| *s) => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                self.shared.reconnects.add(1);
                let probed = tokio::select! {
                    biased;
                    _ = stop.wait_for(|s| *s) => return,
                    r = probe(&self.admin, &self.subscription) => r,
                };
                match probed {
                    Ok(()) => break,
                    Err(e) => {
                        if let Some(failed) = permanent_failure(&e) {
                            let _ = self.send(failed).await;
                            return;
                        }
                        tracing::debug!(subscription = %self.subscription, "still unreachable: {e}");
                    }
                }
            }
            if !self
                .send(Pulled::Recovered {
                    stream: self.index,
                    down_for: down_since.elapsed(),
                })
                .await
            {
                return;
            }
        }
    }

    /// Forwards into the channel unless reading stopped (a delivery not forwarded is
    /// released). False when the task must end.
    async fn send(&mut self, p: Pulled) -> bool {
        // Room in the channel and reading not stopped: no select, no waker (the common
        // case costs one try instead of two futures; decision 0049).
        if !*self.stop.borrow() {
            if let Ok(permit) = self.tx.tx.try_reserve() {
                permit.send((self.tx.split, p));
                return true;
            }
        }
        let mut stop = self.stop.clone();
        let permit = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => None,
            permit = self.tx.tx.reserve() => permit.ok(),
        };
        match permit {
            Some(permit) => {
                permit.send((self.tx.split, p));
                true
            }
            None => {
                if let Pulled::Message(_, d) = p {
                    self.shared.received.add(1);
                    d.nack();
                }
                false
            }
        }
    }

    /// Opens one stream and forwards its deliveries until it ends.
    async fn read(&mut self, backoff: &mut Backoff) -> End {
        let mut stream = open(&self.subscriber, &self.subscription, &self.settings);
        let lease = self
            .shared
            .leases
            .open(stream.shutdown_token(), self.shared.nacked.clone());
        self.restart.mark_unchanged();
        let end = loop {
            let mut stop = self.stop.clone();
            let item = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break End::Stopped,
                // Dropping a stream whose connection died (see the monitor).
                _ = self.restart.changed() => break End::Restart,
                item = stream.next() => item,
            };
            match item {
                Some(Ok((m, h))) => {
                    backoff.reset();
                    self.last.touch();
                    let d = Delivery::new(h, lease.clone());
                    if !self.send(Pulled::Message(m, d)).await {
                        break End::Stopped;
                    }
                }
                Some(Err(e)) => {
                    if let Some(failed) = permanent_failure(&e) {
                        let _ = self.send(failed).await;
                        break End::Stopped;
                    }
                    break End::Retry(format!("the stream failed: {e}"));
                }
                None => break End::Retry("the server ended the stream".to_string()),
            }
        };
        // On stop, take what the client already received but did not hand over (its
        // HTTP/2 window): dropped with the stream, those would come back only after the
        // stream's ack deadline (60 s by default), stranding them for the next run.
        // On a restart or a failure, take at least what the client already decoded: the
        // client nacks what it leased but never handed over when the stream is dropped,
        // and no counter of ours would see those nacks.
        let buffered = if matches!(end, End::Stopped) {
            drain_buffered(&mut stream).await
        } else {
            take_ready(&mut stream)
        };
        // The stream is dropped here, before any nack, so nacked messages are not
        // redelivered into this same stream. Its handles keep their leases.
        drop(stream);
        if !buffered.is_empty() {
            tracing::debug!(subscription = %self.subscription, "released {} deliveries buffered in the client at stop", buffered.len());
        }
        for h in buffered {
            self.shared.received.add(1);
            Delivery::new(h, lease.clone()).nack();
        }
        end
    }
}

/// The `Pulled::Failed` for `e` if its status is one reopening cannot fix (see
/// `is_retryable`), else `None`.
fn permanent_failure(e: &google_cloud_pubsub::Error) -> Option<Pulled> {
    let code = e.status().map(|s| s.code);
    (!is_retryable(code)).then(|| Pulled::Failed {
        code,
        error: e.to_string(),
    })
}

/// How long a stopping stream is drained in all, and the quiet gap that ends it early.
const DRAIN_MAX: Duration = Duration::from_secs(1);
const DRAIN_QUIET: Duration = Duration::from_millis(150);

/// Takes the deliveries a stopping stream has already received, until it is quiet for
/// [`DRAIN_QUIET`] or [`DRAIN_MAX`] passed, then whatever it can still hand over without
/// waiting ([`take_ready`]). The caller nacks them after dropping the stream. Cancelling
/// `next()` here is fine: the stream is dropped right after.
pub(crate) async fn drain_buffered(
    stream: &mut google_cloud_pubsub::subscriber::MessageStream,
) -> Vec<Handler> {
    drain_within(stream, DRAIN_MAX).await
}

/// [`drain_buffered`] with a drain budget of `max`.
pub(crate) async fn drain_within(
    stream: &mut google_cloud_pubsub::subscriber::MessageStream,
    max: Duration,
) -> Vec<Handler> {
    let deadline = tokio::time::Instant::now() + max;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        match tokio::time::timeout(left.min(DRAIN_QUIET), stream.next()).await {
            Ok(Some(Ok((_m, h)))) => out.push(h),
            _ => break,
        }
    }
    out.extend(take_ready(stream));
    out
}

/// At most this many deliveries are taken without waiting: a guard against a server
/// that refills the stream as fast as it is read (an HTTP/2 window of 5 MiB holds fewer
/// messages than this).
const READY_MAX: usize = 1_000_000;

/// The deliveries `stream` hands over without waiting. The client decodes and leases a
/// whole StreamingPull response (up to thousands of messages) at once and serves it one
/// `next()` at a time; dropping the stream makes its lease loop nack the rest itself,
/// uncounted, so a stream is never dropped with any left (the summary's `messages
/// released` must equal the nacks the server received).
pub(crate) fn take_ready(
    stream: &mut google_cloud_pubsub::subscriber::MessageStream,
) -> Vec<Handler> {
    use futures::FutureExt;
    let mut out = Vec::new();
    while out.len() < READY_MAX {
        match stream.next().now_or_never() {
            Some(Some(Ok((_m, h)))) => out.push(h),
            _ => break,
        }
    }
    out
}

/// Probes the subscription while nothing arrives; see the module docs.
struct Monitor {
    admin: SubscriptionAdmin,
    subscription: String,
    tx: SplitTx,
    stop: watch::Receiver<bool>,
    last: LastDelivery,
    restart: watch::Sender<u64>,
    reconnects: Counter,
}

impl Monitor {
    async fn run(mut self) {
        let mut backoff = Backoff::new(std::process::id() as u64 ^ 0x5DEE_CE66);
        let mut down_since: Option<Instant> = None;
        loop {
            let wait = if down_since.is_some() {
                backoff.next_delay()
            } else {
                QUIET_PROBE
            };
            let mut stop = self.stop.clone();
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(wait) => {}
            }
            if down_since.is_none() && self.last.since() < QUIET_PROBE {
                continue;
            }
            if down_since.is_some() {
                self.reconnects.add(1);
            }
            let probed = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                r = probe(&self.admin, &self.subscription) => r,
            };
            match probed {
                Ok(()) => {
                    if let Some(since) = down_since.take() {
                        backoff.reset();
                        // Nothing arrived during the outage: the streams may sit in the
                        // client's own backoff (up to 60 s); open fresh ones now.
                        if self.last.since() >= since.elapsed() {
                            self.restart.send_modify(|g| *g += 1);
                        }
                        let p = Pulled::Recovered {
                            stream: MONITOR,
                            down_for: since.elapsed(),
                        };
                        if !self.send(p).await {
                            return;
                        }
                    }
                }
                Err(e) => {
                    if let Some(failed) = permanent_failure(&e) {
                        let _ = self.send(failed).await;
                        return;
                    }
                    if down_since.is_none() {
                        down_since = Some(Instant::now());
                        let p = Pulled::Reconnecting {
                            stream: MONITOR,
                            cause: format!("the endpoint does not answer: {e}"),
                        };
                        if !self.send(p).await {
                            return;
                        }
                    }
                }
            }
        }
    }

    async fn send(&mut self, p: Pulled) -> bool {
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => false,
            sent = self.tx.send(p) => sent.is_ok(),
        }
    }
}

#[cfg(test)]
#[path = "pull_tests.rs"]
mod tests;
