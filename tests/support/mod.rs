//! Test fixtures: one real Pub/Sub emulator for the end-to-end test binary, unique
//! resource names, and helpers that run the real `pubsub-connector` binary as a child
//! process.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pubsub_connector_core::{admin, client};
use pubsub_emulator_tools::emulator::Emulator;
use pubsub_emulator_tools::wire_log::{self, WireKind};
use pubsub_schema::PubSubProfile;
use tokio::process::{Child, Command};

pub const PROJECT: &str = "test";

/// The emulator shared by every test of this binary (killed by its watchdog at exit).
pub fn emulator() -> &'static Emulator {
    static EMU: OnceLock<Emulator> = OnceLock::new();
    EMU.get_or_init(|| Emulator::start().expect("start the Pub/Sub emulator"))
}

/// `host:port` of the emulator as tables and clients should use it: through the
/// half-closing proxy that `Emulator` puts in front of it (see `emulator_proxy`).
pub fn endpoint() -> String {
    emulator().endpoint()
}

pub fn profile() -> PubSubProfile {
    client::emulator_profile(PROJECT, &endpoint())
}

/// A name unique within this test run.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// An input topic + subscription and an output topic + subscription.
pub struct Topics {
    pub input: String,
    pub input_sub: String,
    pub output: String,
    pub output_sub: String,
}

pub async fn topics(name: &str, input_ack_deadline_s: i32) -> Topics {
    let p = profile();
    let t = Topics {
        input: unique(&format!("{name}-in")),
        input_sub: unique(&format!("{name}-in-sub")),
        output: unique(&format!("{name}-out")),
        output_sub: unique(&format!("{name}-out-sub")),
    };
    admin::create_topic(&p, &t.input).await.unwrap();
    admin::create_topic(&p, &t.output).await.unwrap();
    admin::create_subscription(&p, &t.input_sub, &t.input, input_ack_deadline_s)
        .await
        .unwrap();
    admin::create_subscription(&p, &t.output_sub, &t.output, 60)
        .await
        .unwrap();
    t
}

/// Publishes `{"seq": i}` for i in 0..n; returns the message ids.
pub async fn publish_seq(topic: &str, range: std::ops::Range<usize>) -> Vec<String> {
    let payloads = range
        .map(|i| format!("{{\"seq\": {i}}}").into_bytes())
        .collect();
    admin::publish_all(&profile(), topic, payloads, 2000)
        .await
        .unwrap()
}

/// The pipeline SQL used by most tests: input subscription -> output topic, carrying the
/// source message id in column `mid`. `extra` adds source WITH options.
pub fn pipeline_sql(t: &Topics, endpoint: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE src (seq BIGINT, mid TEXT NOT NULL METADATA FROM 'message-id') WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{endpoint}', 'format' = 'json' {extra});
         CREATE TABLE dst (seq BIGINT, mid TEXT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{endpoint}');
         INSERT INTO dst SELECT seq, mid FROM src;",
        sub = t.input_sub,
        out = t.output
    )
}

/// A temp dir holding the pipeline file and the state dir.
pub struct Workdir {
    pub dir: tempfile::TempDir,
}

impl Workdir {
    pub fn new(sql: &str) -> Workdir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pipeline.sql"), sql).unwrap();
        Workdir { dir }
    }
    pub fn pipeline(&self) -> PathBuf {
        self.dir.path().join("pipeline.sql")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    /// The last completed checkpoint epoch, if any.
    pub fn checkpoint_epoch(&self) -> Option<u64> {
        let bytes = std::fs::read(self.state().join("checkpoint.json")).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        v["epoch"].as_u64()
    }
}

impl Workdir {
    /// Starts `pubsub-connector run` on this pipeline and state dir with `args`; stdout
    /// and stderr are piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        spawn_run(&self.pipeline(), &self.state(), args)
    }

    /// Starts `pubsub-connector cluster` on this pipeline and state dir with `args`.
    pub fn spawn_cluster(&self, args: &[&str]) -> Child {
        let (pipeline, state) = (self.pipeline(), self.state());
        let (pipeline, state) = (pipeline.display().to_string(), state.display().to_string());
        let mut all = vec!["cluster", pipeline.as_str(), "--state-dir", state.as_str()];
        all.extend_from_slice(args);
        spawn_bin(&all)
    }

    /// Runs the pipeline on this state dir with `args` (which should end it, e.g.
    /// `--stop-when-idle`) within 300 s; asserts exit 0 and returns stdout.
    pub async fn run_ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = finish(self.spawn(args), Duration::from_secs(300)).await;
        assert_eq!(code, 0, "stderr: {stderr}");
        stdout
    }

    /// Restarts the pipeline from this state dir (1 s checkpoints) and runs it until no
    /// message arrived for 15 s, longer than the 10 s lease extension after which a killed
    /// run's messages come back. Asserts exit 0; returns (stdout, stderr).
    pub async fn restart_until_idle(&self) -> (String, String) {
        let child = self.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "15s"]);
        let (code, stdout, stderr) = finish(child, Duration::from_secs(180)).await;
        assert_eq!(code, 0, "stderr: {stderr}");
        (stdout, stderr)
    }
}

fn spawn_run(pipeline: &Path, state: &Path, args: &[&str]) -> Child {
    let (pipeline, state) = (pipeline.display().to_string(), state.display().to_string());
    let mut all = vec!["run", pipeline.as_str(), "--state-dir", state.as_str()];
    all.extend_from_slice(args);
    spawn_bin(&all)
}

/// Starts the `pubsub-connector` binary with `args` (`RUST_LOG=info`); stdout and stderr
/// are piped, and it is killed when the handle drops.
/// `quickstart --bids 3000 --pipeline examples/NAME`, as the README runs it: its stdout,
/// once it exited 0 (panics with both outputs otherwise).
pub async fn run_example(name: &str) -> String {
    let example = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let child = spawn_bin(&["quickstart", "--bids", "3000", "--pipeline", &example]);
    let (code, stdout, stderr) = finish(child, Duration::from_secs(180)).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    stdout
}

pub fn spawn_bin(args: &[&str]) -> Child {
    spawn_bin_in(Path::new("."), args)
}

/// [`spawn_bin`] in working directory `dir` (where defaults such as `state/JOB_ID` land).
pub fn spawn_bin_in(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
        .current_dir(dir)
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn pubsub-connector")
}

/// Runs to completion within `limit`: (exit code, stdout, stderr). Past `limit` it kills
/// the child and fails with the end of what it printed.
pub async fn finish(mut child: Child, limit: Duration) -> (i32, String, String) {
    use tokio::io::AsyncReadExt;
    fn drain(
        pipe: Option<impl tokio::io::AsyncRead + Unpin + Send + 'static>,
    ) -> tokio::task::JoinHandle<String> {
        tokio::spawn(async move {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf).await;
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    }
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let status = tokio::time::timeout(limit, child.wait()).await;
    if status.is_err() {
        let _ = child.kill().await;
    }
    let (out, err) = (out.await.unwrap(), err.await.unwrap());
    match status {
        Ok(status) => (
            status.expect("wait for pipeline").code().unwrap_or(-1),
            out,
            err,
        ),
        Err(_) => {
            let tail = |s: &str| {
                let mut i = s.len().saturating_sub(6_000);
                while !s.is_char_boundary(i) {
                    i += 1;
                }
                s[i..].to_string()
            };
            let file = std::env::temp_dir().join(unique("pipeline-timeout") + ".log");
            let _ = std::fs::write(&file, format!("{out}\n---- stderr ----\n{err}"));
            panic!(
                "pipeline did not end within {limit:?} (all it printed: {}); stdout:\n{}\nstderr (end):\n{}",
                file.display(),
                tail(&out),
                tail(&err)
            )
        }
    }
}

/// Waits until `cond` holds, polling every 100 ms, failing after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Distinct `mid` values of the JSON rows in the output subscription (acks them).
pub async fn sink_ids(sub: &str, expected: Option<usize>, idle: Duration) -> HashSet<String> {
    let rows = admin::drain(&profile(), sub, 2, expected, idle)
        .await
        .unwrap();
    rows.values()
        .filter_map(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
        .filter_map(|v| v["mid"].as_str().map(str::to_string))
        .collect()
}

/// Message ids redelivered on a subscription now (acks them).
pub async fn redelivered(sub: &str, idle: Duration) -> HashMap<String, Vec<u8>> {
    admin::drain(&profile(), sub, 2, None, idle).await.unwrap()
}

/// Sends `signal` (e.g. "KILL", "TERM") to a child.
pub fn signal(child: &Child, signal: &str) {
    let pid = child.id().expect("child is running");
    let ok = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(ok.success(), "kill -{signal} {pid}");
}

pub fn missing(expected: &[String], got: &HashSet<String>) -> usize {
    expected.iter().filter(|id| !got.contains(*id)).count()
}

/// The number after `label` in the binary's summary line.
pub fn summary_count(stdout: &str, label: &str) -> usize {
    let rest = stdout
        .split(label)
        .nth(1)
        .unwrap_or_else(|| panic!("no '{label}' in {stdout}"));
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after '{label}' in {stdout}"))
}

/// Every source subtask's checkpointed watermark (key `watermark`; null: none yet) in
/// the state dir.
pub fn checkpointed_watermark_slots(w: &Workdir) -> Vec<Option<i64>> {
    fn walk(v: &serde_json::Value, out: &mut Vec<Option<i64>>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("watermark", serde_json::Value::Null) => out.push(None),
                        ("watermark", v) if v.is_i64() => out.push(v.as_i64()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let bytes = std::fs::read(w.state().join("checkpoint.json")).expect("a checkpoint");
    let mut out = Vec::new();
    walk(&serde_json::from_slice(&bytes).unwrap(), &mut out);
    out
}

/// The source subtasks' checkpointed watermarks that are set.
pub fn checkpointed_watermarks(w: &Workdir) -> Vec<i64> {
    checkpointed_watermark_slots(w)
        .into_iter()
        .flatten()
        .collect()
}

/// The `watermark: N ms` of the binary's summary line (its sinks' lowest input
/// watermark), if it printed one.
pub fn summary_watermark_ms(stdout: &str) -> Option<u64> {
    // After a comma: "messages behind watermark: N" is another counter.
    stdout
        .contains(", watermark: ")
        .then(|| summary_count(stdout, ", watermark: ") as u64)
}

/// A TCP forwarder a test can cut, restore and stall (in front of the emulator proxy).
pub use pubsub_emulator_tools::tcp_cutter::TcpCutter;

/// A closed TCP port on 127.0.0.1 (bound, then released).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Publishes `n` messages `{"seq": i}` round-robin on `keys` ordering keys, in order.
pub async fn publish_ordered(topic: &str, keys: &[&str], n: usize) {
    let publisher = client::publisher(&profile(), &client::topic_path(PROJECT, topic))
        .unwrap()
        .build()
        .await
        .unwrap();
    let futs: Vec<_> = (0..n)
        .map(|i| {
            publisher.publish(
                google_cloud_pubsub::model::Message::new()
                    .set_data(format!("{{\"seq\": {i}}}"))
                    .set_ordering_key(keys[i % keys.len()]),
            )
        })
        .collect();
    for f in futs {
        f.await.unwrap();
    }
}

/// Reads an ordering subscription with one stream, in delivery order: (key, seq) of each
/// first delivery.
pub async fn ordered(sub: &str, expected: usize) -> Vec<(String, i64)> {
    let subscriber = client::subscriber(&profile()).await.unwrap();
    let mut stream = subscriber
        .subscribe(client::subscription_path(PROJECT, sub))
        .set_max_lease_extension(Duration::from_secs(30))
        .build();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    while out.len() < expected {
        let Ok(Some(Ok((m, h)))) =
            tokio::time::timeout(Duration::from_secs(20), stream.next()).await
        else {
            break;
        };
        h.ack();
        if seen.insert(m.message_id.clone()) {
            let v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
            out.push((m.ordering_key.clone(), v["seq"].as_i64().unwrap()));
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.shutdown_token().shutdown()).await;
    out
}

/// Lines of a child's stderr as they arrive, for tests that act on what it logs.
pub fn collect_lines(
    stream: tokio::process::ChildStderr,
) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use tokio::io::AsyncBufReadExt;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stream).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            let plain: String = strip_ansi(&line);
            sink.lock().unwrap().push(plain);
        }
    });
    lines
}

pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A payload as a Google product publishes it (`shared/fixtures/payloads/NAME`).
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../shared/fixtures/payloads/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The full name of subscription `sub` of the test project.
pub fn full_subscription(sub: &str) -> String {
    pubsub_connector_core::client::subscription_path(PROJECT, sub)
}

/// What the wire log saw on one subscription (the emulator proxy of this test process;
/// record with `wire_log::enable()` first): ack ID -> message id of every delivery,
/// and the ack IDs nacked (ModifyAckDeadline 0) and acked.
#[derive(Default)]
pub struct Wire {
    pub delivered: HashMap<String, String>,
    pub nacked: Vec<String>,
    pub acked: Vec<String>,
}

impl Wire {
    pub fn of(sub: &str) -> Wire {
        let name = full_subscription(sub);
        let mut w = Wire::default();
        for e in wire_log::events() {
            match e.kind {
                WireKind::Delivered {
                    subscription,
                    messages,
                } if subscription == name => {
                    for m in messages {
                        w.delivered.insert(m.ack_id, m.message_id);
                    }
                }
                WireKind::Deadline {
                    subscription,
                    seconds: 0,
                    ack_ids,
                } if subscription == name => w.nacked.extend(ack_ids),
                WireKind::Acked {
                    subscription,
                    ack_ids,
                } if subscription == name => w.acked.extend(ack_ids),
                _ => {}
            }
        }
        w
    }

    pub fn delivered_ids(&self) -> HashSet<&String> {
        self.delivered.values().collect()
    }

    pub fn nacked_ids(&self) -> HashSet<&String> {
        self.nacked
            .iter()
            .filter_map(|a| self.delivered.get(a))
            .collect()
    }

    /// Message ids of the ack IDs acknowledged, with how many times each was.
    pub fn acked_ids(&self) -> HashMap<&String, usize> {
        let mut n = HashMap::new();
        for id in self.acked.iter().filter_map(|a| self.delivered.get(a)) {
            *n.entry(id).or_default() += 1;
        }
        n
    }
}

/// Asserts that every message the server delivered on `sub` was acknowledged there (the
/// wire log; `wire_log::enable()` before the run; a nack during the run is fine if a
/// redelivery was acknowledged): nothing of it can come back. A read-back could show a message left unacknowledged only after the lease
/// of the job that held it ran out (its lease extension, 60 s by default), however short
/// the subscription's ack deadline.
pub fn assert_all_acked(sub: &str) {
    let w = Wire::of(sub);
    assert!(
        !w.delivered.is_empty(),
        "the wire log saw no delivery on {sub}: enable it before the run"
    );
    let acked = w.acked_ids();
    let unacked = w
        .delivered_ids()
        .into_iter()
        .filter(|id| !acked.contains_key(id))
        .count();
    assert_eq!(
        unacked,
        0,
        "of {} messages delivered on {sub}, {unacked} were never acknowledged at the server",
        w.delivered_ids().len()
    );
}

/// Publishes one message with `attributes` to `topic`; returns its message id.
pub async fn publish_with_attributes(
    topic: &str,
    data: Vec<u8>,
    attributes: HashMap<String, String>,
) -> String {
    use google_cloud_pubsub::model::Message;
    let publisher = client::publisher(&profile(), &client::topic_path(PROJECT, topic))
        .unwrap()
        .build()
        .await
        .unwrap();
    let id = publisher
        .publish(Message::new().set_data(data).set_attributes(attributes))
        .await
        .unwrap();
    publisher.flush().await;
    id
}

/// The attributes in fixture `name` (a JSON object of strings).
pub fn fixture_attributes(name: &str) -> HashMap<String, String> {
    serde_json::from_slice(&fixture(name)).unwrap()
}
