//! The real service's delivery order, on the emulator (issue 44, item 2). The emulator
//! delivers a subscription in publish order; the real service prefers older messages but
//! promises no order, and every nack, expired lease or second consumer puts old messages
//! back behind newer ones. An [`Interloper`] is that second consumer: a StreamingPull
//! stream of its own on the same subscription that keeps a seeded choice of deliveries
//! and gives each back after a seeded delay, by nack or by letting its lease expire. The
//! pipeline under test then receives them late, behind newer messages.
//!
//! What it reproduces: messages taken by another consumer and given back late (nack, or
//! lease expiry with [`GiveBack::LeaseExpiry`]); a backlog delivered out of publish order
//! within a horizon (keep a random share with hold delays up to the horizon); the
//! redelivery of messages whose lease expired while held. What it cannot: a redelivery of
//! a message already acknowledged (the emulator never does it), delivery order *within*
//! one stream (always publish order here), and server-closed streams (the half-closing
//! proxy of [`super::emulator_proxy`] and the TCP cutter do those).
//!
//! Give it a subscriber client of the emulator's half-closing proxy
//! ([`super::emulator_proxy`]): a stream whose connection just vanishes strands its
//! leases in the emulator for minutes, nacks sent before the close included.
//!
//! Seeded: the same seed keeps the same positions of the delivery sequence it sees and
//! draws the same delays; which messages those are depends on how the emulator shares
//! deliveries between streams, so a run is replayable in its choices, not to the message.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use google_cloud_pubsub::client::Subscriber;
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::ShutdownBehavior;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How a kept delivery goes back to the subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// Nacked when its hold delay is over: redelivered at once.
    Nack,
    /// Its lease is no longer extended after the shortest hold delay (at least 1 s; each
    /// extension lasts 10 s), so the service redelivers it at most 10 s after that; its
    /// handler is dropped [`EXPIRY_GRACE`] after its own hold delay, long after.
    LeaseExpiry,
}

/// Under [`GiveBack::LeaseExpiry`], a kept delivery's handler is dropped this long after
/// its hold delay: past its lease's expiry, so the drop's nack changes nothing.
pub const EXPIRY_GRACE: Duration = Duration::from_secs(12);

/// A delivery the interloper does not keep is nacked this long after it arrived: while
/// it is the subscription's only consumer, a nack at once would only bring the message
/// straight back to it, over and over.
pub const PASS_DELAY: Duration = Duration::from_millis(250);

/// What the interloper does.
#[derive(Debug, Clone)]
pub struct Interference {
    /// Seeds every choice.
    pub seed: u64,
    /// Keeps at most this many deliveries.
    pub take: usize,
    /// Keeps each delivery it sees with this probability (1.0: the first `take`).
    pub probability: f64,
    /// Holds each kept delivery for a delay drawn uniformly from this range.
    pub hold: (Duration, Duration),
    pub give_back: GiveBack,
    /// Keeps nothing more after this long (from the start).
    pub window: Duration,
}

/// What an interloper did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The message ids it kept and gave back late, in the order it kept them.
    pub kept: Vec<String>,
    /// Deliveries it passed on at once (nacked on arrival).
    pub passed: usize,
}

/// A second consumer of a subscription (see the module doc).
pub struct Interloper {
    kept: Arc<AtomicUsize>,
    task: JoinHandle<anyhow::Result<Report>>,
}

impl Interloper {
    /// Opens a stream on `subscription` (a full name) with `subscriber` (a client of the
    /// emulator, e.g. the connector's `client::subscriber`) and starts keeping.
    ///
    /// # Errors
    /// The hold range is empty.
    pub async fn start(
        subscriber: Subscriber,
        subscription: String,
        plan: Interference,
    ) -> anyhow::Result<Interloper> {
        anyhow::ensure!(
            plan.hold.0 <= plan.hold.1,
            "hold range {:?} is empty",
            plan.hold
        );
        let name = subscription;
        // Its stream is shut down only once everything kept went back, and the shutdown
        // nacks what the stream still buffered: nothing is left stranded in it.
        let mut builder = subscriber
            .subscribe(name)
            .set_max_lease_extension(Duration::from_secs(10))
            .set_shutdown_behavior(ShutdownBehavior::NackImmediately);
        if plan.give_back == GiveBack::LeaseExpiry {
            builder = builder.set_max_lease(plan.hold.0.max(Duration::from_secs(1)));
        }
        let stream = builder.build();
        let kept = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(run(stream, plan, kept.clone()));
        Ok(Interloper { kept, task })
    }

    /// How many deliveries it keeps or kept so far.
    pub fn kept(&self) -> usize {
        self.kept.load(Ordering::Relaxed)
    }

    /// Waits until every kept delivery was given back and the stream closed (what it still
    /// buffered nacked).
    ///
    /// # Errors
    /// The stream failed.
    pub async fn finish(self) -> anyhow::Result<Report> {
        self.task.await?
    }
}

async fn run(
    mut stream: google_cloud_pubsub::subscriber::MessageStream,
    plan: Interference,
    count: Arc<AtomicUsize>,
) -> anyhow::Result<Report> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(plan.seed);
    let start = Instant::now();
    let token = stream.shutdown_token();
    let mut report = Report::default();
    // (when it goes back, its handler): kept ones, and passed ones (after [`PASS_DELAY`]).
    let mut held: Vec<(Instant, Handler)> = Vec::new();
    let mut passing: std::collections::VecDeque<(Instant, Handler)> = Default::default();
    let mut ended = false;
    loop {
        let full = report.kept.len() >= plan.take || start.elapsed() >= plan.window;
        if (full || ended) && held.is_empty() {
            // The stream stays open until here, so that nothing it received is left
            // unread; the shutdown nacks what it still buffers and the deliveries
            // waiting to be passed on (`NackImmediately`). Waiting for those to empty
            // could last for ever: the service keeps offering it redeliveries.
            token.shutdown().await;
            return Ok(report);
        }
        // The window's end is a wake-up too: on a subscription gone quiet nothing else
        // would come to end the run (found by chaos seeds 12 and 19, which hung here).
        let next_due = held
            .iter()
            .map(|(at, _)| *at)
            .chain(passing.front().map(|(at, _)| *at))
            .chain((!full).then_some(start + plan.window))
            .min();
        tokio::select! {
            d = stream.next(), if !ended => match d {
                Some(Ok((m, h))) => {
                    let keep = !full && rng.random_bool(plan.probability.clamp(0.0, 1.0));
                    if keep {
                        let delay = if plan.hold.0 == plan.hold.1 {
                            plan.hold.0
                        } else {
                            rng.random_range(plan.hold.0..plan.hold.1)
                        };
                        let grace = match plan.give_back {
                            GiveBack::Nack => Duration::ZERO,
                            GiveBack::LeaseExpiry => EXPIRY_GRACE,
                        };
                        held.push((Instant::now() + delay + grace, h));
                        report.kept.push(m.message_id);
                        count.fetch_add(1, Ordering::Relaxed);
                    } else {
                        passing.push_back((Instant::now() + PASS_DELAY, h));
                        report.passed += 1;
                    }
                }
                Some(Err(e)) => return Err(e.into()),
                None => ended = true,
            },
            _ = tokio::time::sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {
                let now = Instant::now();
                while passing.front().is_some_and(|(at, _)| *at <= now) {
                    if let Some((_, h)) = passing.pop_front() {
                        h.nack();
                    }
                }
                let (due, rest): (Vec<_>, Vec<_>) = held.drain(..).partition(|(at, _)| *at <= now);
                held = rest;
                for (_, h) in due {
                    match plan.give_back {
                        GiveBack::Nack => h.nack(),
                        // Its lease ran out long ago: dropping it changes nothing more.
                        GiveBack::LeaseExpiry => drop(h),
                    }
                }
            }
        }
    }
}
