//! One seed of the campaign, in order: fresh topics and subscriptions; hop1 started and a
//! publisher under way; the fault schedule (`supervise.rs`); hop1's final run to
//! completion; hop2 (deduplicating hop1's output, without faults, on as many processes as
//! hop1) run to completion
//! while the campaign reads what is left; then the checks (`check.rs`, `rules.rs`).
//!
//! hop2 runs after hop1's final run, bounded by `--stop-when-idle`, rather than beside
//! hop1: the `recreate-sink-topic` fault gives hop1's output topic a new subscription
//! mid-run, which a running pipeline could not add to its table; run afterwards, hop2
//! reads every incarnation's subscription (a subscription keeps its backlog after its
//! topic is deleted) and sees every copy hop1 wrote, including copies written minutes
//! apart by a replay; and the 2 cores stay with hop1 while its faults are injected.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use google_cloud_pubsub::model::Message;
use pubsub_connector_core::{admin, client};

use super::check::{self, Msg, Observed, Outcome};
use super::outages::{self, Outages};
use super::payload::{payload, Format, AVRO_SCHEMA};
use super::pipeline::Pipeline;
use super::schedule::Schedule;
use super::supervise::{self, End, Topics};

pub const PROJECT: &str = "chaos";
/// The input subscription's ack deadline (s): shorter than the longest checkpoint interval.
const ACK_DEADLINE_S: i32 = 10;
/// A final run stops after this long without a message (and after any dead run's
/// leases, 10 s here).
const FINAL_IDLE: Duration = Duration::from_secs(3);
/// How long the input is read after the final run: past the pipeline's 10 s lease
/// extension, so a message still leased to a closed stream is found.
const UNREAD_IDLE: Duration = Duration::from_secs(11);
/// The bound of a run to completion (hop1's final run, hop2's run). Past it: a hang.
pub const FINAL_BOUND: Duration = Duration::from_secs(240);
/// hop2's checkpoint interval.
const HOP2_INTERVAL: Duration = Duration::from_secs(1);

/// Where a seed runs.
pub struct Env {
    /// The binary under test.
    pub exe: PathBuf,
    /// The emulator behind its half-closing proxy (what the pipeline reaches, through
    /// the cutters), and directly (the campaign's own publisher and readers).
    pub proxy: String,
    pub direct: String,
    pub dir: PathBuf,
}

/// Runs `schedule` in `env`: returns what was observed and checked.
pub async fn run(env: &Env, schedule: &Schedule) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let name = format!("chaos-{}-{}", schedule.seed, std::process::id());
    let direct = client::emulator_profile(PROJECT, &env.direct);
    let out = format!("{name}-out");
    let mut topics = Topics {
        input: format!("{name}-in"),
        input_sub: format!("{name}-in-sub"),
        witness_sub: format!("{name}-in-witness"),
        output_subs: vec![format!("{out}-sub")],
        hop2_subs: vec![format!("{out}-hop2")],
        output: out,
        dead_letter: format!("{name}-dlq"),
        dead_letter_sub: format!("{name}-dlq-sub"),
        last: format!("{name}-last"),
        last_sub: format!("{name}-last-sub"),
        windows: format!("{name}-win"),
        windows_sub: format!("{name}-win-sub"),
    };
    let schema = format!("{name}-schema");
    let mut extra_attributes = BTreeMap::new();
    match schedule.format {
        Format::Json => admin::create_topic(&direct, &topics.input).await?,
        Format::Avro => {
            let revision = admin::create_avro_schema(&direct, &schema, AVRO_SCHEMA).await?;
            admin::create_topic_with_schema(&direct, &topics.input, &schema, "JSON").await?;
            extra_attributes = BTreeMap::from([
                (
                    "googclient_schemaname".to_string(),
                    format!("projects/{PROJECT}/schemas/{schema}"),
                ),
                ("googclient_schemarevisionid".to_string(), revision),
                ("googclient_schemaencoding".to_string(), "JSON".to_string()),
            ]);
        }
    }
    for t in [
        &topics.output,
        &topics.dead_letter,
        &topics.last,
        &topics.windows,
    ] {
        admin::create_topic(&direct, t).await?;
    }
    let subs = [
        (&topics.input_sub, &topics.input, ACK_DEADLINE_S),
        (&topics.witness_sub, &topics.input, 60),
        (&topics.output_subs[0], &topics.output, 60),
        (&topics.hop2_subs[0], &topics.output, 60),
        (&topics.dead_letter_sub, &topics.dead_letter, 60),
        (&topics.last_sub, &topics.last, 60),
        (&topics.windows_sub, &topics.windows, 60),
    ];
    for (sub, topic, deadline) in subs {
        admin::create_subscription(&direct, sub, topic, deadline).await?;
    }

    let source = Outages::start(outages::Path::Source, &env.proxy).await?;
    let sink = Outages::start(outages::Path::Sink, &env.proxy).await?;
    let dead_letters = Outages::start(outages::Path::DeadLetter, &env.proxy).await?;
    let paths = vec![
        (
            outages::Path::Source,
            vec![source.endpoint(), topics.input_sub.clone()],
        ),
        (
            outages::Path::Sink,
            vec![sink.endpoint(), topics.output.clone()],
        ),
        (
            outages::Path::DeadLetter,
            vec![dead_letters.endpoint(), topics.dead_letter.clone()],
        ),
    ];
    let dir = env.dir.join(&name);
    std::fs::create_dir_all(&dir)?;
    let secret = format!("chaos-secret-{:016x}", rand::random::<u64>());
    let workers = 1 + (schedule.seed as usize / 2) % 2;
    let mut hop1 = Pipeline::new(
        &env.exe,
        &dir,
        "hop1",
        schedule.processes,
        workers,
        schedule.checkpoint_interval,
        &secret,
    );
    std::fs::write(
        hop1.file(),
        super::sql::hop1(&super::sql::Hop1 {
            project: PROJECT,
            format: schedule.format,
            input_sub: &topics.input_sub,
            output: &topics.output,
            dead_letter: &topics.dead_letter,
            source: &source.endpoint(),
            sink: &sink.endpoint(),
            dead_letter_endpoint: &dead_letters.endpoint(),
            windows: &topics.windows,
            windows_endpoint: &env.proxy,
        }),
    )?;
    std::fs::write(dir.join("schedule.txt"), schedule.to_string())?;

    hop1.start(None)?;
    let t0 = Instant::now();
    let publisher = tokio::spawn(publish(
        direct.clone(),
        topics.input.clone(),
        schedule.messages,
        schedule.publish_for,
        schedule.format,
    ));
    let mut record = supervise::run(
        supervise::Ctx {
            direct: &direct,
            proxied: &client::emulator_profile(PROJECT, &env.proxy),
            topics: &mut topics,
            source: &source,
            sink: &sink,
            dead_letters: &dead_letters,
            pipeline: &mut hop1,
        },
        schedule,
        t0,
        publisher,
    )
    .await?;

    // hop1 to completion.
    hop1.start(Some(FINAL_IDLE))?;
    let final_run = run_to_end(&mut hop1).await;

    // hop2 to completion, while what hop1 left is read: unread input (past the 10 s
    // lease extension: a message stranded in a stream that closed counts as unread, not
    // lost), every copy hop1 wrote, every dead letter. As many processes as hop1: on a
    // cluster, copies of one record reach either process and are dropped behind the
    // exchange by record id (decision 0046).
    let mut hop2 = Pipeline::new(
        &env.exe,
        &dir,
        "hop2",
        schedule.processes,
        workers,
        HOP2_INTERVAL,
        &secret,
    );
    std::fs::write(
        hop2.file(),
        super::sql::hop2(PROJECT, &topics.hop2_subs, &topics.last, &env.proxy),
    )?;
    let run_hop2 = async {
        if matches!(final_run, End::Hung { .. }) {
            return anyhow::Ok((None, Vec::new(), 0));
        }
        hop2.start(Some(FINAL_IDLE))?;
        let end = run_to_end(&mut hop2).await;
        let last = drain_msgs(&direct, &topics.last_sub);
        let left = async {
            let mut n = 0;
            for s in &topics.hop2_subs {
                n += admin::drain(&direct, s, 1, None, Duration::from_secs(3))
                    .await?
                    .len();
            }
            anyhow::Ok(n)
        };
        let (last, left) = tokio::try_join!(last, left)?;
        Ok((Some(end), last, left))
    };
    let unread = admin::drain(&direct, &topics.input_sub, 1, None, UNREAD_IDLE);
    let read_hop1 = async {
        let mut rows = Vec::new();
        for sub in &topics.output_subs {
            rows.extend(drain_msgs(&direct, sub).await?);
        }
        let letters = admin::drain_messages(
            &direct,
            &topics.dead_letter_sub,
            1,
            None,
            Duration::from_secs(3),
        )
        .await?;
        let windows = drain_msgs(&direct, &topics.windows_sub).await?;
        let witness = admin::drain_messages(
            &direct,
            &topics.witness_sub,
            2,
            None,
            Duration::from_secs(5),
        )
        .await?;
        anyhow::Ok((
            rows,
            letters.into_iter().map(msg).collect::<Vec<_>>(),
            windows,
            publish_times(&witness),
        ))
    };
    let ((hop2_end, last, hop2_unread), unread, (rows, dead_letters, windows, publish_ms)) =
        tokio::try_join!(run_hop2, unread, read_hop1)?;
    record.rows.extend(rows);

    let full = |kind: &str, id: &str| format!("projects/{PROJECT}/{kind}/{id}");
    let input_subscription = full("subscriptions", &topics.input_sub);
    let output_topic = full("topics", &topics.output);
    let dead_letter_topic = full("topics", &topics.dead_letter);
    // Everything of this seed leaves the wire log (hop2's too); hop1's is checked.
    let mine = format!("projects/{PROJECT}/subscriptions/{name}-");
    let mine_t = format!("projects/{PROJECT}/topics/{name}-");
    let wire = pubsub_emulator_tools::wire_log::take(|k| {
        k.resource().starts_with(&mine) || k.resource().starts_with(&mine_t)
    })
    .into_iter()
    .filter(|e| {
        let r = e.kind.resource();
        r == input_subscription || r == output_topic || r == dead_letter_topic
    })
    .collect();
    let mut logs = hop1.logs();
    logs.extend(hop2.logs());
    let obs = Observed {
        paths,
        format: schedule.format,
        extra_attributes,
        rows: std::mem::take(&mut record.rows),
        record,
        final_run,
        hop2: hop2_end,
        dead_letters,
        last,
        windows,
        publish_ms,
        unread: unread.into_keys().collect(),
        hop2_unread,
        wire,
        input_subscription,
        output_topic,
        dead_letter_topic,
        logs,
        secret,
        restarts: hop1.starts.saturating_sub(1),
    };
    let outcome = check::check(schedule, obs, started.elapsed());
    if outcome.violations.is_empty() && outcome.notes.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        let subs = topics.output_subs.iter().chain(&topics.hop2_subs).chain([
            &topics.input_sub,
            &topics.witness_sub,
            &topics.dead_letter_sub,
            &topics.last_sub,
            &topics.windows_sub,
        ]);
        for s in subs {
            let _ = admin::delete_subscription(&direct, s).await;
        }
        for t in [
            &topics.input,
            &topics.output,
            &topics.dead_letter,
            &topics.last,
            &topics.windows,
        ] {
            let _ = admin::delete_topic(&direct, t).await;
        }
    }
    Ok(outcome)
}

/// Waits for a run to completion, at most [`FINAL_BOUND`].
async fn run_to_end(p: &mut Pipeline) -> End {
    match p.wait_at_most(FINAL_BOUND).await {
        Some(status) => End::Exited {
            status,
            at: Instant::now(),
        },
        None => End::Hung { bound: FINAL_BOUND },
    }
}

fn msg(m: Message) -> Msg {
    Msg {
        data: m.data.to_vec(),
        attributes: m.attributes.into_iter().collect(),
    }
}

/// seq (attribute `seq`) -> publish time in ms since the Unix epoch.
fn publish_times(msgs: &[Message]) -> BTreeMap<u64, i64> {
    msgs.iter()
        .filter_map(|m| {
            let seq = m.attributes.get("seq")?.parse().ok()?;
            let t = m.publish_time.as_ref()?;
            Some((seq, t.seconds() * 1_000 + i64::from(t.nanos()) / 1_000_000))
        })
        .collect()
}

/// Every message on subscription `sub` (read and acknowledged); none if it is gone.
pub async fn drain_msgs(
    direct: &pubsub_schema::PubSubProfile,
    sub: &str,
) -> anyhow::Result<Vec<Msg>> {
    Ok(
        admin::drain_messages(direct, sub, 2, None, Duration::from_secs(5))
            .await?
            .into_iter()
            .map(msg)
            .collect(),
    )
}

/// Publishes messages 0..n in `format` evenly over `over`, as a real publisher would
/// (each retried by the client until confirmed). Returns seq -> message id.
async fn publish(
    profile: pubsub_schema::PubSubProfile,
    topic: String,
    n: usize,
    over: Duration,
    format: Format,
) -> anyhow::Result<BTreeMap<u64, String>> {
    let publisher = client::publisher(&profile, &client::topic_path(&profile.project, &topic))?
        .build()
        .await?;
    let start = tokio::time::Instant::now();
    let mut pending = Vec::with_capacity(n);
    for seq in 0..n as u64 {
        tokio::time::sleep_until(start + over.mul_f64(seq as f64 / n.max(1) as f64)).await;
        let p = payload(seq, format);
        let msg = Message::new().set_data(p.data).set_attributes(p.attributes);
        pending.push((seq, publisher.publish(msg)));
    }
    publisher.flush().await;
    let mut ids = BTreeMap::new();
    for (seq, fut) in pending {
        let id = fut
            .await
            .map_err(|e| anyhow::anyhow!("publish of seq {seq} failed: {e}"))?;
        ids.insert(seq, id);
    }
    Ok(ids)
}

/// Text of every log file (for the secret check).
pub fn read_logs(logs: &[PathBuf]) -> HashMap<PathBuf, String> {
    logs.iter()
        .map(|p| (p.clone(), std::fs::read_to_string(p).unwrap_or_default()))
        .collect()
}
