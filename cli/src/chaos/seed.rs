//! One seed of the campaign: fresh topics and subscriptions, a publisher, the pipeline
//! under its fault schedule, then a final run to completion and the checks.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use google_cloud_pubsub::model::Message;
use pubsub_connector_core::tcp_cutter::TcpCutter;
use pubsub_connector_core::{admin, client};
use tokio::sync::Mutex;

use super::check::{self, Observed, Outcome};
use super::payload::payload;
use super::pipeline::Pipeline;
use super::schedule::{Fault, Schedule};

const PROJECT: &str = "chaos";
/// The input subscription's ack deadline (s): shorter than the longest checkpoint interval.
const ACK_DEADLINE_S: i32 = 10;
/// The final run stops after this long without a message (and after any dead run's
/// leases, 10 s here).
const FINAL_IDLE: Duration = Duration::from_secs(3);
/// How long the input is read after the final run: past the pipeline's 10 s lease
/// extension, so a message still leased to a closed stream is found.
const UNREAD_IDLE: Duration = Duration::from_secs(11);
/// Bounds: a graceful stop, and the final run to completion. Past them: a hang.
const STOP_BOUND: Duration = Duration::from_secs(120);
const FINAL_BOUND: Duration = Duration::from_secs(240);

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

/// Outages in progress on one cutter: each cut (or stall) ends when its last one ends.
#[derive(Clone)]
struct Outages {
    cutter: Arc<TcpCutter>,
    /// When the outage in progress ends, and whether it cut the port (a stall that
    /// overlaps a cut and ends last must still restore the port).
    until: Arc<Mutex<Option<(Instant, bool)>>>,
}

impl Outages {
    fn new(cutter: TcpCutter) -> Self {
        Outages {
            cutter: Arc::new(cutter),
            until: Default::default(),
        }
    }

    /// Cuts (or stalls) for `for_`; the returned task ends the outage. Overlapping outages
    /// merge into one that ends when the last one ends; a cut during a stall is not
    /// applied (the stall already holds everything).
    async fn begin(&self, for_: Duration, stall: bool) -> tokio::task::JoinHandle<()> {
        let end = Instant::now() + for_;
        {
            let mut until = self.until.lock().await;
            let cut = match *until {
                None if stall => {
                    self.cutter.stall(true);
                    false
                }
                None => {
                    self.cutter.cut();
                    true
                }
                Some((_, cut)) => cut,
            };
            *until = Some((until.map_or(end, |(u, _)| u.max(end)), cut));
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(end.into()).await;
            let mut until = me.until.lock().await;
            if let Some((u, cut)) = *until {
                if u <= Instant::now() {
                    *until = None;
                    me.cutter.stall(false);
                    if cut {
                        if let Err(e) = me.cutter.restore().await {
                            tracing::error!("chaos: {e:#}");
                        }
                    }
                }
            }
        })
    }

    /// Ends the stall [`recreate_sink_topic`] began (no cut was in progress then).
    async fn end(&self) {
        let mut until = self.until.lock().await;
        *until = None;
        self.cutter.stall(false);
    }
}

/// Runs `schedule` in `env`: returns what was observed and checked.
pub async fn run(env: &Env, schedule: &Schedule) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let name = format!("chaos-{}-{}", schedule.seed, std::process::id());
    let direct = client::emulator_profile(PROJECT, &env.direct);
    let (input, output) = (format!("{name}-in"), format!("{name}-out"));
    let dead_letter = format!("{name}-dlq");
    let (input_sub, output_sub) = (format!("{input}-sub"), format!("{output}-sub"));
    let dead_letter_sub = format!("{dead_letter}-sub");
    admin::create_topic(&direct, &input).await?;
    admin::create_topic(&direct, &output).await?;
    admin::create_topic(&direct, &dead_letter).await?;
    admin::create_subscription(&direct, &input_sub, &input, ACK_DEADLINE_S).await?;
    admin::create_subscription(&direct, &output_sub, &output, 60).await?;
    admin::create_subscription(&direct, &dead_letter_sub, &dead_letter, 60).await?;
    // Every subscription of the output topic, old ones included: a recreated topic gets a
    // new one each time.
    let mut output_subs = vec![output_sub.clone()];

    let source = Outages::new(TcpCutter::start(&env.proxy).await?);
    let sink = Outages::new(TcpCutter::start(&env.proxy).await?);
    let dead_letters = Outages::new(TcpCutter::start(&env.proxy).await?);
    let dir = env.dir.join(&name);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("pipeline.sql"),
        sql(
            &input_sub,
            &output,
            &dead_letter,
            &Endpoints {
                source: source.cutter.endpoint(),
                sink: sink.cutter.endpoint(),
                dead_letter: dead_letters.cutter.endpoint(),
            },
        ),
    )?;
    std::fs::write(dir.join("schedule.txt"), schedule.to_string())?;
    let secret = format!("chaos-secret-{:016x}", rand::random::<u64>());
    let workers = 1 + (schedule.seed as usize / 2) % 2;
    let mut pipeline = Pipeline::new(
        &env.exe,
        &dir,
        schedule.processes,
        workers,
        schedule.checkpoint_interval,
        &secret,
    );

    let mut obs = Observed::default();
    pipeline.start(None)?;
    let t0 = Instant::now();
    let publisher = tokio::spawn(publish(
        direct.clone(),
        input.clone(),
        schedule.messages,
        schedule.publish_for,
    ));

    // The fault schedule, supervising the pipeline meanwhile (a `run` that ends by itself
    // is restarted, as `cluster` restarts its children).
    let mut restores = Vec::new();
    for timed in &schedule.faults {
        let at = tokio::time::Instant::from(t0 + timed.at);
        loop {
            tokio::select! {
                status = pipeline.wait() => {
                    obs.unexpected_exit(status.ok().and_then(|s| s.code()), &pipeline.logs());
                    pipeline.start(None)?;
                }
                _ = tokio::time::sleep_until(at) => break,
            }
        }
        let injected = match &timed.fault {
            Fault::Kill { process } => {
                let done = pipeline.kill_process(*process);
                if done && schedule.processes == 1 {
                    pipeline.wait().await.ok();
                    pipeline.start(None)?;
                }
                done
            }
            Fault::TermRestart => {
                let done = pipeline.signal(libc::SIGTERM);
                if done {
                    match pipeline.wait_at_most(STOP_BOUND).await {
                        None => obs.hang(format!(
                            "a graceful stop (SIGTERM at {:?}) did not end within {STOP_BOUND:?}",
                            timed.at
                        )),
                        Some(s) if s.code() != Some(0) => obs.note(format!(
                            "the graceful stop at {:?} exited {:?}",
                            timed.at,
                            s.code()
                        )),
                        Some(_) => {}
                    }
                    pipeline.start(None)?;
                }
                done
            }
            Fault::CutSource { for_ } => {
                restores.push(source.begin(*for_, false).await);
                true
            }
            Fault::CutSink { for_ } => {
                restores.push(sink.begin(*for_, false).await);
                true
            }
            Fault::StallSink { for_ } => {
                restores.push(sink.begin(*for_, true).await);
                true
            }
            Fault::CutDeadLetter { for_ } => {
                restores.push(dead_letters.begin(*for_, false).await);
                true
            }
            Fault::Abort { after } => {
                let done = pipeline.signal(libc::SIGTERM);
                if done {
                    tokio::time::sleep(*after).await;
                    pipeline.signal(libc::SIGTERM);
                    // Non-zero by design (0 when the graceful stop ended first).
                    if pipeline.wait_at_most(STOP_BOUND).await.is_none() {
                        obs.hang(format!(
                            "an abort (second SIGTERM at {:?}) did not end within {STOP_BOUND:?}",
                            timed.at + *after
                        ));
                    }
                    pipeline.start(None)?;
                }
                done
            }
            Fault::KillInCheckpointWrite => {
                let target = pipeline.pid_of(0);
                let caught = match target {
                    Some(_) => checkpoint_write(&dir.join("state"), WRITE_WATCH).await,
                    None => None,
                };
                let done = target.is_some_and(super::pipeline::kill);
                match caught {
                    Some(w) => tracing::info!("chaos: seed {}: SIGKILL {w}", schedule.seed),
                    None if done => obs.note(format!(
                        "no checkpoint write was seen within {WRITE_WATCH:?} of {:?}: process 0 was killed then",
                        timed.at
                    )),
                    None => {}
                }
                if done && schedule.processes == 1 {
                    pipeline.wait().await.ok();
                    pipeline.start(None)?;
                }
                done
            }
            Fault::RecreateSinkTopic { gap } => {
                recreate_sink_topic(&direct, &sink, &output, &mut output_subs, *gap, &mut obs)
                    .await?;
                true
            }
        };
        if injected {
            obs.faults.push(timed.fault.clone());
        }
    }
    // Every outage ends and every message is published before the final run.
    let mut publisher = publisher;
    let published = loop {
        tokio::select! {
            status = pipeline.wait() => {
                obs.unexpected_exit(status.ok().and_then(|s| s.code()), &pipeline.logs());
                pipeline.start(None)?;
            }
            p = &mut publisher => break p??,
        }
    };
    for r in restores {
        r.await?;
    }
    if pipeline.signal(libc::SIGTERM) {
        match pipeline.wait_at_most(STOP_BOUND).await {
            None => obs.hang(format!(
                "the graceful stop before the final run did not end within {STOP_BOUND:?}"
            )),
            Some(s) if s.code() != Some(0) => obs.note(format!(
                "the graceful stop before the final run exited {:?}",
                s.code()
            )),
            Some(_) => {}
        }
    }
    pipeline.start(Some(FINAL_IDLE))?;
    match pipeline.wait_at_most(FINAL_BOUND).await {
        None => obs.hang(format!(
            "the final run (--stop-when-idle {FINAL_IDLE:?}) did not end within {FINAL_BOUND:?}"
        )),
        Some(s) => obs.final_exit = s.code(),
    }

    // What is left: unread input (must be nothing after an exit 0), every output row.
    // Read for longer than the 10 s lease extension: a message stranded in a stream that
    // closed counts as unread, not lost.
    obs.unread = admin::drain(&direct, &input_sub, 1, None, UNREAD_IDLE)
        .await?
        .into_keys()
        .collect();
    for sub in &output_subs {
        obs.rows.extend(drain_rows(&direct, sub).await?);
    }
    obs.dead_letters =
        admin::drain_messages(&direct, &dead_letter_sub, 1, None, Duration::from_secs(3))
            .await?
            .into_iter()
            .map(|m| (m.data.to_vec(), m.attributes.into_iter().collect()))
            .collect();
    obs.published = published;
    let full = |kind: &str, id: &str| format!("projects/{PROJECT}/{kind}/{id}");
    let (in_sub, out_topic) = (full("subscriptions", &input_sub), full("topics", &output));
    let dl_topic = full("topics", &dead_letter);
    obs.wire = pubsub_connector_core::wire_log::take(|k| {
        k.resource() == in_sub || k.resource() == out_topic || k.resource() == dl_topic
    });
    obs.input_subscription = in_sub;
    obs.output_topic = out_topic;
    obs.dead_letter_topic = dl_topic;
    obs.logs = pipeline.logs();
    obs.secret = secret;
    obs.restarts = pipeline.starts.saturating_sub(1);
    let outcome = check::check(schedule, obs, started.elapsed());
    if outcome.violations.is_empty() && outcome.notes.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        for s in output_subs.iter().chain([&input_sub, &dead_letter_sub]) {
            let _ = admin::delete_subscription(&direct, s).await;
        }
        for t in [&input, &output, &dead_letter] {
            let _ = admin::delete_topic(&direct, t).await;
        }
    }
    Ok(outcome)
}

/// Where each path of the pipeline reaches the service: its own cutter.
struct Endpoints {
    source: String,
    sink: String,
    dead_letter: String,
}

/// The pipeline: every column of a real payload, its message id and attributes, from the
/// input subscription (through the source's cutter) to the output topic (through the
/// sink's); a message that does not decode goes to the dead-letter topic (through the
/// queue's). A 10 s lease extension keeps a dead run's leases at 10 s.
fn sql(input_sub: &str, output: &str, dead_letter: &str, at: &Endpoints) -> String {
    let Endpoints {
        source,
        sink,
        dead_letter: dlq,
    } = at;
    format!(
        "CREATE TABLE src (seq BIGINT NOT NULL, body JSON, mid TEXT NOT NULL METADATA FROM 'message-id', attrs JSON NOT NULL METADATA FROM 'attributes')
         WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{input_sub}', 'emulator-endpoint' = '{source}',
               'format' = 'json', 'scan.ack.max-duration-per-extension' = '10s',
               'scan.deserialization-failure-policy' = 'dead-letter', 'scan.dead-letter.topic' = '{dead_letter}',
               'scan.dead-letter.emulator-endpoint' = '{dlq}');
         CREATE TABLE dst (seq BIGINT NOT NULL, body JSON, mid TEXT NOT NULL, attrs JSON NOT NULL)
         WITH ('connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{output}', 'emulator-endpoint' = '{sink}', 'format' = 'json');
         INSERT INTO dst SELECT seq, body, mid, attrs FROM src;\n"
    )
}

/// How long a kill aimed at a checkpoint write waits for one.
const WRITE_WATCH: Duration = Duration::from_secs(30);

/// Waits (polling every millisecond, up to `limit`) for process 0's next checkpoint
/// write in the local state directory `state`: its temp file appearing (under way), or
/// else `checkpoint.json` replaced (landed, its acknowledgements maybe not sent yet).
/// Returns which, or `None` after `limit`.
async fn checkpoint_write(state: &Path, limit: Duration) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt;
    let (file, tmp) = (
        state.join("checkpoint.json"),
        state.join("checkpoint.json.tmp"),
    );
    let stamp = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.ino(), m.mtime_nsec()));
    let before = stamp(&file);
    let _ = std::fs::remove_file(&tmp); // left by an earlier kill
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if tmp.exists() {
            return Some("during a checkpoint write (temp file written, not yet renamed)");
        }
        if stamp(&file) != before {
            return Some("right after a checkpoint write landed");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// Deletes the sink's topic and creates it again `gap` later with a new subscription
/// (pushed onto `subs`). The sink is stalled while what the old subscription holds is
/// read (into `obs.rows`) and the topic deleted, and again while it is created with its
/// subscription: in between, the sink finds it gone (and may create it itself).
async fn recreate_sink_topic(
    direct: &pubsub_schema::PubSubProfile,
    sink: &Outages,
    output: &str,
    subs: &mut Vec<String>,
    gap: Duration,
    obs: &mut Observed,
) -> anyhow::Result<()> {
    // An outage in progress ends first (its restore must not be overtaken).
    while sink.until.lock().await.is_some() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let hold = sink.begin(Duration::from_secs(3600), true).await;
    hold.abort();
    let old = subs
        .last()
        .expect("the output topic's first subscription")
        .clone();
    obs.rows.extend(drain_rows(direct, &old).await?);
    admin::delete_topic(direct, output).await?;
    sink.end().await;
    tokio::time::sleep(gap).await;
    let hold = sink.begin(Duration::from_secs(3600), true).await;
    hold.abort();
    // The sink may have created it meanwhile (create-if-needed): then it waits for a
    // subscription, which this gives it.
    if let Err(e) = admin::create_topic(direct, output).await {
        tracing::info!("chaos: {output} not created here: {e:#}");
    }
    let sub = format!("{output}-sub-r{}", subs.len());
    admin::create_subscription(direct, &sub, output, 60).await?;
    subs.push(sub);
    sink.end().await;
    Ok(())
}

/// Every row on the output subscription `sub` (read and acknowledged); none if it is gone.
async fn drain_rows(
    direct: &pubsub_schema::PubSubProfile,
    sub: &str,
) -> anyhow::Result<Vec<Vec<u8>>> {
    Ok(
        admin::drain_messages(direct, sub, 2, None, Duration::from_secs(5))
            .await?
            .into_iter()
            .map(|m| m.data.to_vec())
            .collect(),
    )
}

/// Publishes messages 0..n evenly over `over`, as a real publisher would (each retried
/// by the client until confirmed). Returns seq -> message id.
async fn publish(
    profile: pubsub_schema::PubSubProfile,
    topic: String,
    n: usize,
    over: Duration,
) -> anyhow::Result<BTreeMap<u64, String>> {
    let publisher = client::publisher(&profile, &client::topic_path(&profile.project, &topic))?
        .build()
        .await?;
    let start = tokio::time::Instant::now();
    let mut pending = Vec::with_capacity(n);
    for seq in 0..n as u64 {
        tokio::time::sleep_until(start + over.mul_f64(seq as f64 / n.max(1) as f64)).await;
        let p = payload(seq);
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

/// Text of every log file (for the secret check and failure reports).
pub fn read_logs(logs: &[PathBuf]) -> HashMap<PathBuf, String> {
    logs.iter()
        .map(|p| (p.clone(), std::fs::read_to_string(p).unwrap_or_default()))
        .collect()
}

/// The last `n` lines of `path`.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
