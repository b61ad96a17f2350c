//! A seed's fault schedule: everything random about a run of the campaign comes from the
//! seed (ChaCha8, whose output is fixed for a seed on every platform), so `--seed S`
//! replays the same checkpoint interval, publishing pace and faults at the same instants.

use std::fmt;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::payload::Format;

/// One fault and when it is injected, counted from the pipeline's first start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub at: Duration,
    pub fault: Fault,
}

/// The faults of the campaign (issue 16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of process `process` (0 leads and writes checkpoints); it is restarted.
    Kill { process: usize },
    /// SIGTERM (a graceful stop), then a restart on the same state directory.
    TermRestart,
    /// The network between the source and the service is cut for `for_`.
    CutSource { for_: Duration },
    /// The network between the sink and the service is cut for `for_`.
    CutSink { for_: Duration },
    /// The sink's connection stalls (nothing moves, nothing closes) for `for_`.
    StallSink { for_: Duration },
    /// SIGTERM, a second SIGTERM `after` later (an abort), then a restart.
    Abort { after: Duration },
    /// SIGKILL of process 0 the moment its next checkpoint write is seen under way (the
    /// temp file beside `checkpoint.json`), or else as soon as the write landed.
    KillInCheckpointWrite,
    /// The sink's topic is deleted (what its subscription held is read first, the sink
    /// stalled meanwhile); `gap` later it is created again with a new subscription, the
    /// sink stalled again meanwhile so that it never publishes into a topic without one
    /// that it did not create itself.
    RecreateSinkTopic { gap: Duration },
    /// The network between the source's dead-letter queue and the service is cut.
    CutDeadLetter { for_: Duration },
    /// Another consumer of the input subscription keeps up to `keep` of the deliveries
    /// it is offered over `for_` (a seeded 30%) and nacks each 1 s to `hold` later: the
    /// real service's redeliveries behind newer messages (issue 44, `tools::delivery`).
    TakeAndNack {
        keep: usize,
        hold: Duration,
        for_: Duration,
    },
    /// As [`Fault::TakeAndNack`], but the kept deliveries' leases run out instead (no
    /// extension after 1 s; redelivered by the service up to 10 s later).
    ExpireLeases { keep: usize, for_: Duration },
}

impl Fault {
    /// The kind's name in the campaign's figures.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { .. } => "kill",
            Fault::TermRestart => "term-restart",
            Fault::CutSource { .. } => "cut-source",
            Fault::CutSink { .. } => "cut-sink",
            Fault::StallSink { .. } => "stall-sink",
            Fault::Abort { .. } => "abort",
            Fault::KillInCheckpointWrite => "kill-in-checkpoint-write",
            Fault::RecreateSinkTopic { .. } => "recreate-sink-topic",
            Fault::CutDeadLetter { .. } => "cut-dead-letter",
            Fault::TakeAndNack { .. } => "take-and-nack",
            Fault::ExpireLeases { .. } => "expire-leases",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Kill { process } => write!(f, "SIGKILL process {process}"),
            Fault::TermRestart => write!(f, "SIGTERM, then restart"),
            Fault::CutSource { for_ } => write!(f, "cut the source's network for {for_:?}"),
            Fault::CutSink { for_ } => write!(f, "cut the sink's network for {for_:?}"),
            Fault::StallSink { for_ } => write!(f, "stall the sink's connection for {for_:?}"),
            Fault::Abort { after } => {
                write!(f, "SIGTERM, a second SIGTERM {after:?} later, then restart")
            }
            Fault::KillInCheckpointWrite => {
                write!(f, "SIGKILL process 0 during its next checkpoint write")
            }
            Fault::RecreateSinkTopic { gap } => {
                write!(
                    f,
                    "delete the sink's topic, create it again with a subscription {gap:?} later"
                )
            }
            Fault::CutDeadLetter { for_ } => {
                write!(f, "cut the dead-letter queue's network for {for_:?}")
            }
            Fault::TakeAndNack { keep, hold, for_ } => write!(
                f,
                "another consumer keeps up to {keep} input messages over {for_:?}, nacks each within {hold:?}"
            ),
            Fault::ExpireLeases { keep, for_ } => write!(
                f,
                "another consumer keeps up to {keep} input messages over {for_:?}, lets their leases expire"
            ),
        }
    }
}

/// Everything a seed decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub seed: u64,
    pub processes: usize,
    /// How the input is published and read: JSON, or Avro on a schema-bound topic.
    pub format: Format,
    pub messages: usize,
    pub checkpoint_interval: Duration,
    /// The messages are published evenly over this long, from the pipeline's start.
    pub publish_for: Duration,
    pub faults: Vec<Timed>,
}

/// Checkpoint intervals drawn from: short ones make many checkpoints and many commit
/// windows to crash in; 12 s is longer than the input subscription's 10 s ack deadline.
const INTERVALS_MS: [u64; 5] = [200, 500, 1_000, 3_000, 12_000];

/// How many kinds of [`Fault`] there are; each is drawn with the same chance.
const KINDS: u32 = 11;

impl Schedule {
    /// The schedule of `seed`: 1 to 4 faults at instants within the publishing window
    /// plus 5 s, each of a kind drawn evenly; outages of 1 to 8 s.
    pub fn of(seed: u64, processes: usize, format: Format, messages: usize) -> Schedule {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let checkpoint_interval =
            Duration::from_millis(INTERVALS_MS[rng.random_range(0..INTERVALS_MS.len())]);
        let publish_for = Duration::from_millis(rng.random_range(3_000..10_000));
        let window = publish_for.as_millis() as u64 + 5_000;
        let mut faults: Vec<Timed> = (0..rng.random_range(1..=4))
            .map(|_| {
                let at = Duration::from_millis(rng.random_range(500..window));
                let for_ = Duration::from_millis(rng.random_range(1_000..8_000));
                let fault = match rng.random_range(0..KINDS) {
                    0 => Fault::Kill {
                        process: rng.random_range(0..processes),
                    },
                    1 => Fault::TermRestart,
                    2 => Fault::CutSource { for_ },
                    3 => Fault::CutSink { for_ },
                    4 => Fault::StallSink { for_ },
                    5 => Fault::Abort {
                        after: Duration::from_millis(rng.random_range(0..2_000)),
                    },
                    6 => Fault::KillInCheckpointWrite,
                    7 => Fault::RecreateSinkTopic {
                        gap: Duration::from_millis(rng.random_range(200..3_000)),
                    },
                    8 => Fault::CutDeadLetter { for_ },
                    9 => Fault::TakeAndNack {
                        keep: rng.random_range(20..200),
                        hold: Duration::from_millis(rng.random_range(1_000..8_000)),
                        for_,
                    },
                    _ => Fault::ExpireLeases {
                        keep: rng.random_range(20..200),
                        for_,
                    },
                };
                Timed { at, fault }
            })
            .collect();
        faults.sort_by_key(|t| t.at);
        Schedule {
            seed,
            processes,
            format,
            messages,
            checkpoint_interval,
            publish_for,
            faults,
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {}: {}, {} input, {} messages published over {:?}, checkpoint interval {:?}",
            self.seed,
            super::check::count(self.processes, "process", "processes"),
            self.format.name(),
            self.messages,
            self.publish_for,
            self.checkpoint_interval
        )?;
        for t in &self.faults {
            writeln!(f, "  at {:>6.1}s: {}", t.at.as_secs_f64(), t.fault)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_schedule_and_seeds_differ() {
        assert_eq!(
            Schedule::of(7, 2, Format::Json, 100),
            Schedule::of(7, 2, Format::Json, 100)
        );
        let all: Vec<Schedule> = (0..50)
            .map(|s| Schedule::of(s, 2, Format::Json, 100))
            .collect();
        assert!(all.windows(2).any(|w| w[0].faults != w[1].faults));
        let kinds: std::collections::BTreeSet<&str> = all
            .iter()
            .flat_map(|s| s.faults.iter().map(|t| t.fault.kind()))
            .collect();
        assert_eq!(
            kinds.len(),
            KINDS as usize,
            "every kind is drawn: {kinds:?}"
        );
        for s in &all {
            assert!((1..=4).contains(&s.faults.len()));
            assert!(s.faults.windows(2).all(|w| w[0].at <= w[1].at));
            for t in &s.faults {
                if let Fault::Kill { process } = t.fault {
                    assert!(process < 2);
                }
            }
        }
        // One process: every kill is of process 0.
        assert!((0..50)
            .flat_map(|s| Schedule::of(s, 1, Format::Avro, 10).faults)
            .all(|t| t.fault != Fault::Kill { process: 1 }));
    }
}
