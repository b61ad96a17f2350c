//! `cluster`: runs a pipeline as a Timely cluster of N `run` processes on this machine and
//! restarts the whole cluster from the last completed checkpoint when one process fails
//! (SPEC 2.1: Timely has no fault tolerance; if one process dies, all do).
//!
//! Each start writes a hosts file (`127.0.0.1:PORT` per line, fresh free ports unless
//! `--base-port`) in a new temp directory and spawns
//! `pubsub-connector run PIPELINE --processes N --process I --hosts FILE` plus the job
//! flags, with every output line prefixed `[pI] `.
//!
//! Exit codes: 0 when every process exited 0 (also after one SIGINT/SIGTERM, which is
//! forwarded to every process as SIGTERM for a graceful final checkpoint); 2 when a process
//! exited with 2 (the pipeline file cannot be read, parsed or planned, the job's start
//! refused its configuration, or the job failed in a way any restart repeats: see the
//! exit codes in docs/running.md); 1 when the restart budget is spent, on a second signal
//! (forwarded again, the processes abort) or when a process fails while the cluster is
//! stopping.

use std::collections::VecDeque;
use std::fmt;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use clap::builder::TypedValueParser;
use clap::Args;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::pipeline::{BadPipeline, EXIT_BAD_PIPELINE};

/// How long the other processes get to exit on their own after one failed (they notice a
/// dead peer within seconds), before they are killed.
pub const PEER_EXIT_WAIT: Duration = Duration::from_secs(10);
/// How long past its own stop deadline (`--shutdown-timeout` without progress) a process
/// may take to exit by itself: aborting, releasing what it holds, closing its tasks.
pub const STOP_GRACE: Duration = Duration::from_secs(30);
/// How long trailing output of exited processes is still copied.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Flags of `cluster`.
#[derive(Args, Clone, Debug)]
pub struct ClusterArgs {
    /// The pipeline file (SQL statements separated by `;`), run by every process.
    pub pipeline: PathBuf,
    /// Processes in the cluster (each runs --workers workers).
    #[arg(long, required = true, value_parser = clap::value_parser!(u16).range(1..=1024).map(usize::from))]
    pub processes: usize,
    /// Timely worker threads per process.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256).map(usize::from))]
    pub workers: usize,
    /// Time between checkpoints (e.g. 500ms, 10s, 5m; a bare number is seconds); at least 10ms.
    #[arg(long, default_value = "10s", value_parser = crate::parse_positive_duration)]
    pub checkpoint_interval: Duration,
    /// A checkpoint not complete this long after its barrier fails the job.
    #[arg(long, default_value = "10m", value_parser = crate::parse_positive_duration)]
    pub checkpoint_timeout: Duration,
    /// Where the last completed checkpoint is kept; every process of every start restores
    /// from it (a local directory or an object-store URL). Default: state/JOB_ID.
    #[arg(long)]
    pub state_dir: Option<String>,
    /// The job id (as `run`'s); passed to every process.
    #[arg(long, value_parser = crate::job::parse_job_id)]
    pub job_id: Option<String>,
    /// Stop gracefully once no message was received for this long while every source
    /// could pull.
    #[arg(long, value_parser = crate::parse_positive_duration)]
    pub stop_when_idle: Option<Duration>,
    /// On a graceful stop, advance the watermark to the end of time first, so that every
    /// open window fires before the final checkpoint (as `run --drain`).
    #[arg(long)]
    pub drain: bool,
    /// How long each process's start-up waits for every peer process before failing.
    #[arg(long, default_value = "30s", value_parser = crate::parse_positive_duration)]
    pub connect_timeout: Duration,
    /// How long a graceful stop may go without progress of its final checkpoint (each
    /// process fails then); processes are killed STOP_GRACE (30 s) after that.
    #[arg(long, default_value = "60s", value_parser = crate::parse_positive_duration)]
    pub shutdown_timeout: Duration,
    /// Rows read and not yet taken by a sink, per process (back-pressure bound).
    #[arg(long, default_value_t = 32_768, value_parser = clap::value_parser!(u32).range(1..=1_000_000_000).map(|n| n as usize))]
    pub max_inflight_rows: usize,
    /// The most memory the open windows of one worker's window operator may hold, in
    /// bytes (as `run`'s).
    #[arg(long, default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_window_state_bytes: u64,
    /// Restarts allowed within --restart-window; one more failure gives up.
    #[arg(long, default_value_t = 3)]
    pub max_restarts: u32,
    /// The sliding window --max-restarts counts restarts in.
    #[arg(long, default_value = "10m", value_parser = crate::parse_positive_duration)]
    pub restart_window: Duration,
    /// Process i listens on 127.0.0.1:(base-port + i) at every start. Default: free
    /// loopback ports picked afresh at each start.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub base_port: Option<u16>,
    /// Where `serve` saved the connection profiles that tables name with
    /// 'connection-profile'; passed to every process. Default: as `serve`'s.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Process i serves GET /metrics on HOST:(PORT + i) (Prometheus text format).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
}

/// `--metrics-addr` of process `process`: the port plus the process index (port 0 stays
/// 0: each picks a free one). Errors name the option: no `:PORT`, or a port past 65535.
pub fn process_metrics_addr(addr: &str, process: usize) -> anyhow::Result<String> {
    let bad = || anyhow::anyhow!("--metrics-addr {addr}: expected HOST:PORT");
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if port == 0 {
        return Ok(addr.to_string());
    }
    let p = port as usize + process;
    anyhow::ensure!(
        p <= u16::MAX as usize,
        "--metrics-addr {addr}: process {process} would need port {p}, past 65535"
    );
    Ok(format!("{host}:{p}"))
}

/// How one process of the cluster ended badly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The process index, `0..processes`.
    pub process: usize,
    /// `exit code 1`, `signal 9 (SIGKILL)`, or why it could not be waited for.
    pub status: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "process {} ({})", self.process, self.status)
    }
}

/// The restart policy: at most `max` restarts within any `window` (a sliding window).
/// Pure: time is passed in.
#[derive(Debug, Clone)]
pub struct RestartBudget {
    max: u32,
    window: Duration,
    /// When each restart within the window happened, oldest first.
    recent: VecDeque<Instant>,
    total: u32,
}

impl RestartBudget {
    pub fn new(max: u32, window: Duration) -> Self {
        RestartBudget {
            max,
            window,
            recent: VecDeque::new(),
            total: 0,
        }
    }

    /// Asks for a restart at `now` after `last` failed. `Ok` records it; `Err` is the
    /// give-up message when it would be more than `max` restarts within `window`.
    pub fn restart(&mut self, now: Instant, last: &Failure) -> Result<(), String> {
        while self
            .recent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.window)
        {
            self.recent.pop_front();
        }
        if self.recent.len() as u32 >= self.max {
            return Err(give_up_message(self.recent.len() as u32, self.window, last));
        }
        self.recent.push_back(now);
        self.total += 1;
        Ok(())
    }

    /// Restarts done so far, in all windows.
    pub fn total(&self) -> u32 {
        self.total
    }
}

/// The kill deadline of a graceful stop: `wait` after the stop began or after the last
/// progress any process reported, whichever is later. Pure: time is passed in.
#[derive(Debug, Clone, Copy)]
pub struct StopClock {
    wait: Duration,
    last: Instant,
}

impl StopClock {
    pub fn new(wait: Duration, now: Instant) -> Self {
        StopClock { wait, last: now }
    }

    /// A process reported progress at `now`.
    pub fn progress(&mut self, now: Instant) {
        self.last = self.last.max(now);
    }

    /// When the processes still running are killed.
    pub fn deadline(&self) -> Instant {
        self.last + self.wait
    }
}

/// `giving up: 3 restarts within 10m (--max-restarts 3, --restart-window 10m); the last
/// failure: process 1 (exit code 1)`.
pub fn give_up_message(count: u32, window: Duration, last: &Failure) -> String {
    format!(
        "giving up: {count} restart{} within {w} already (--max-restarts {count}, --restart-window {w}); the last failure: {last}",
        if count == 1 { "" } else { "s" },
        w = human(window)
    )
}

/// `500ms`, `30s`, `10m`, `2h`, or `90.5s`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if d.subsec_millis() != 0 || ms == 0 {
        if ms < 1000 {
            return format!("{ms}ms");
        }
        return format!("{}s", d.as_secs_f64());
    }
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// A duration as `run` parses it back exactly: whole seconds as `Ns`, else seconds with
/// nine fractional digits.
fn flag_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        // Exact to the nanosecond: a float would round long values.
        format!("{}.{:09}s", d.as_secs(), d.subsec_nanos())
    }
}

/// `exit code N` or `signal N (NAME)`.
pub fn describe_status(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s} ({})", signal_name(s)),
        _ => format!("{status}"),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGHUP => "SIGHUP",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}

/// The `run` arguments of process `process` (without the executable).
pub fn child_args(args: &ClusterArgs, process: usize, hosts: &Path) -> Vec<String> {
    let mut a = vec![
        "run".to_string(),
        args.pipeline.display().to_string(),
        "--processes".into(),
        args.processes.to_string(),
        "--process".into(),
        process.to_string(),
        "--hosts".into(),
        hosts.display().to_string(),
        "--workers".into(),
        args.workers.to_string(),
        "--checkpoint-interval".into(),
        flag_duration(args.checkpoint_interval),
        "--checkpoint-timeout".into(),
        flag_duration(args.checkpoint_timeout),
        "--connect-timeout".into(),
        flag_duration(args.connect_timeout),
        "--shutdown-timeout".into(),
        flag_duration(args.shutdown_timeout),
        "--max-inflight-rows".into(),
        args.max_inflight_rows.to_string(),
        "--max-window-state-bytes".into(),
        args.max_window_state_bytes.to_string(),
    ];
    if let Some(d) = &args.state_dir {
        a.push("--state-dir".into());
        a.push(d.clone());
    }
    if let Some(j) = &args.job_id {
        a.push("--job-id".into());
        a.push(j.clone());
    }
    if let Some(d) = args.stop_when_idle {
        a.push("--stop-when-idle".into());
        a.push(flag_duration(d));
    }
    if args.drain {
        a.push("--drain".into());
    }
    if let Some(d) = &args.data_dir {
        a.push("--data-dir".into());
        a.push(d.display().to_string());
    }
    if let Some(addr) = &args.metrics_addr {
        // Checked by `run` before any process starts.
        if let Ok(addr) = process_metrics_addr(addr, process) {
            a.push("--metrics-addr".into());
            a.push(addr);
        }
    }
    a
}

/// `127.0.0.1:PORT` for each process: `base + i`, or free ports (bound together so they
/// differ, then released for the children to take).
fn pick_hosts(processes: usize, base_port: Option<u16>) -> anyhow::Result<Vec<String>> {
    if let Some(base) = base_port {
        let last = base as usize + processes - 1;
        anyhow::ensure!(
            last <= u16::MAX as usize,
            "--base-port {base} leaves no room for {processes} processes (the last port would be {last})"
        );
        return Ok((0..processes)
            .map(|i| format!("127.0.0.1:{}", base as usize + i))
            .collect());
    }
    let listeners = (0..processes)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("cannot find free loopback ports for the cluster")?;
    listeners
        .iter()
        .map(|l| Ok(format!("127.0.0.1:{}", l.local_addr()?.port())))
        .collect()
}

/// SIGINT and SIGTERM to the supervisor, as one stream.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// What the supervisor asks of one child.
#[derive(Debug, Clone, Copy)]
enum Order {
    Term,
    Kill,
}

/// One started cluster: a watcher task per child, which owns it (so a signal never
/// reaches a reaped pid) and reports its exit.
struct Generation {
    orders: Vec<mpsc::UnboundedSender<Order>>,
    running: Vec<bool>,
    exits: mpsc::UnboundedReceiver<(usize, std::io::Result<ExitStatus>)>,
    /// A process logged that its graceful stop made progress.
    progress: mpsc::UnboundedReceiver<()>,
    pumps: Vec<tokio::task::JoinHandle<()>>,
    /// Holds the hosts file until every child is gone.
    _dir: tempfile::TempDir,
}

impl Generation {
    fn start(args: &ClusterArgs) -> anyhow::Result<Generation> {
        let exe = std::env::current_exe()
            .context("cannot find this executable to start the processes")?;
        let dir = tempfile::Builder::new()
            .prefix("pubsub-connector-cluster-")
            .tempdir()
            .context("cannot create a temporary directory for the hosts file")?;
        let hosts = pick_hosts(args.processes, args.base_port)?;
        let hosts_file = dir.path().join("hosts");
        std::fs::write(&hosts_file, hosts.join("\n") + "\n")
            .with_context(|| format!("cannot write {}", hosts_file.display()))?;
        tracing::info!(
            "starting {} processes ({}), hosts file {}",
            args.processes,
            hosts.join(", "),
            hosts_file.display()
        );
        let (exit_tx, exits) = mpsc::unbounded_channel();
        let (progress_tx, progress) = mpsc::unbounded_channel();
        let mut generation = Generation {
            orders: Vec::new(),
            running: Vec::new(),
            exits,
            progress,
            pumps: Vec::new(),
            _dir: dir,
        };
        for i in 0..args.processes {
            let mut cmd = Command::new(&exe);
            cmd.args(child_args(args, i, &hosts_file))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                // A terminal's Ctrl-C reaches the supervisor only, which forwards one
                // SIGTERM: the children must not see the SIGINT as a second signal.
                .process_group(0)
                .kill_on_drop(true);
            // SAFETY: prctl is async-signal-safe; it only sets this child's parent-death
            // signal, so a supervisor killed outright leaves no orphan behind.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    generation.kill_all();
                    return Err(e)
                        .with_context(|| format!("cannot start process {i} ({})", exe.display()));
                }
            };
            let out = child.stdout.take().expect("piped");
            let err = child.stderr.take().expect("piped");
            generation
                .pumps
                .push(tokio::spawn(pump(out, i, false, progress_tx.clone())));
            generation
                .pumps
                .push(tokio::spawn(pump(err, i, true, progress_tx.clone())));
            let (order_tx, order_rx) = mpsc::unbounded_channel();
            tokio::spawn(watch(i, child, order_rx, exit_tx.clone()));
            generation.orders.push(order_tx);
            generation.running.push(true);
        }
        Ok(generation)
    }

    fn send_running(&self, order: Order) -> Vec<usize> {
        let mut sent = Vec::new();
        for (i, tx) in self.orders.iter().enumerate() {
            if self.running[i] {
                let _ = tx.send(order);
                sent.push(i);
            }
        }
        sent
    }

    fn kill_all(&self) {
        for tx in &self.orders {
            let _ = tx.send(Order::Kill);
        }
    }

    /// Waits (bounded) until what the children wrote is copied.
    async fn drain_output(self) {
        let all = futures::future::join_all(self.pumps);
        let _ = tokio::time::timeout(OUTPUT_DRAIN, all).await;
    }
}

/// Owns one child: carries out orders and reports its exit. A dropped order channel (the
/// supervisor is going away) kills it.
async fn watch(
    i: usize,
    mut child: Child,
    mut orders: mpsc::UnboundedReceiver<Order>,
    exits: mpsc::UnboundedSender<(usize, std::io::Result<ExitStatus>)>,
) {
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            order = orders.recv() => match order {
                Some(Order::Term) => {
                    if let Some(pid) = child.id() {
                        // SAFETY: kill(2) on our own unreaped child's pid.
                        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
                    }
                }
                Some(Order::Kill) | None => {
                    let _ = child.start_kill();
                    break child.wait().await;
                }
            }
        }
    };
    let _ = exits.send((i, status));
}

/// Copies a child's output line by line, each prefixed `[pI] `; tells `progress` of each
/// line saying the graceful stop advanced.
async fn pump(
    stream: impl AsyncRead + Unpin,
    i: usize,
    to_stderr: bool,
    progress: mpsc::UnboundedSender<()>,
) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    let prefix = format!("[p{i}] ");
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                let marker = pubsub_engine_runtime::STOP_PROGRESS_LOG.as_bytes();
                if line.windows(marker.len()).any(|w| w == marker) {
                    let _ = progress.send(());
                }
                let mut out = Vec::with_capacity(prefix.len() + line.len());
                out.extend_from_slice(prefix.as_bytes());
                out.extend_from_slice(&line);
                // One write per line under the lock: lines of processes never interleave.
                let _ = if to_stderr {
                    std::io::stderr().lock().write_all(&out)
                } else {
                    std::io::stdout().lock().write_all(&out)
                };
            }
        }
    }
}

/// How one start of the cluster ended.
enum Ended {
    /// Every process exited 0 without a signal.
    Finished,
    /// A process failed, no signal came: restart (unless it exited with 2).
    Failed { first: Failure, bad_pipeline: bool },
    /// A stop was requested; `signals` is how many arrived, `failure` the first process
    /// that did not exit 0.
    Stopped {
        signals: u32,
        failure: Option<Failure>,
    },
}

/// Runs one start of the cluster until every process is gone.
async fn supervise(mut generation: Generation, signals: &mut Signals, args: &ClusterArgs) -> Ended {
    let mut failed: Option<(Failure, bool)> = None;
    let mut stop_signals = 0u32;
    let mut stop_failure: Option<Failure> = None;
    let mut kill_at: Option<Instant> = None;
    let mut stop_clock: Option<StopClock> = None;
    while generation.running.iter().any(|r| *r) {
        tokio::select! {
            exit = generation.exits.recv() => {
                let Some((i, status)) = exit else { break };
                generation.running[i] = false;
                let (ok, code2, status) = match &status {
                    Ok(s) => (s.success(), s.code() == Some(EXIT_BAD_PIPELINE as i32), describe_status(s)),
                    Err(e) => (false, false, format!("cannot be waited for: {e}")),
                };
                if ok {
                    tracing::info!("process {i} finished: exit code 0");
                    continue;
                }
                let failure = Failure { process: i, status };
                if stop_signals > 0 {
                    tracing::warn!("process {i} failed while the cluster was stopping: {}", failure.status);
                    stop_failure.get_or_insert(failure);
                } else if failed.is_none() {
                    let left: Vec<usize> = (0..generation.running.len()).filter(|j| generation.running[*j]).collect();
                    tracing::error!("process {i} failed: {}", failure.status);
                    if !left.is_empty() {
                        tracing::info!("waiting up to {} for processes {left:?} to exit on their own", human(PEER_EXIT_WAIT));
                    }
                    kill_at = Some(Instant::now() + PEER_EXIT_WAIT);
                    failed = Some((failure, code2));
                } else {
                    tracing::warn!("process {i} failed too: {}", failure.status);
                    // Process 0 refuses a bad configuration while the others still wait
                    // to connect; whichever failed first, exit 2 means no restart helps.
                    if code2 {
                        failed = Some((failure, true));
                    }
                }
            }
            _ = signals.recv() => {
                stop_signals += 1;
                if stop_signals == 1 {
                    let sent = generation.send_running(Order::Term);
                    tracing::info!("signal received: forwarding SIGTERM to processes {sent:?} (graceful stop with a final checkpoint; no restart); another signal aborts them");
                    let clock = StopClock::new(args.shutdown_timeout + STOP_GRACE, Instant::now());
                    kill_at = Some(clock.deadline());
                    stop_clock = Some(clock);
                } else {
                    let sent = generation.send_running(Order::Term);
                    tracing::warn!("second signal received: forwarding SIGTERM again to processes {sent:?} (they abort)");
                }
            }
            Some(()) = generation.progress.recv() => {
                // While the final checkpoint advances, the stop's deadline moves (as each
                // process's own does); a failure's kill deadline does not.
                if let (Some(clock), true) = (stop_clock.as_mut(), stop_signals == 1) {
                    clock.progress(Instant::now());
                    kill_at = Some(clock.deadline());
                }
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                let killed = generation.send_running(Order::Kill);
                tracing::warn!("processes {killed:?} still running: killing them (SIGKILL)");
                kill_at = None;
            }
        }
    }
    generation.drain_output().await;
    if stop_signals > 0 {
        return Ended::Stopped {
            signals: stop_signals,
            failure: stop_failure.or(failed.map(|(f, _)| f)),
        };
    }
    match failed {
        Some((first, bad_pipeline)) => Ended::Failed {
            first,
            bad_pipeline,
        },
        None => Ended::Finished,
    }
}

/// `cluster`: starts the processes, restarts them all from the last completed checkpoint
/// after a failure within the restart budget, forwards stop signals. See the module docs
/// for exit codes.
pub async fn run(mut args: ClusterArgs) -> anyhow::Result<()> {
    // Resolved once, so every process and every message names the same job and state.
    let job = crate::job::job_id(args.job_id.as_deref(), &args.pipeline)
        .map_err(crate::pipeline::BadPipeline)?;
    args.state_dir = Some(crate::job::state_dir(args.state_dir.as_deref(), &job));
    args.job_id = Some(job);
    if let Some(addr) = &args.metrics_addr {
        process_metrics_addr(addr, args.processes - 1).map_err(crate::pipeline::BadPipeline)?;
    }
    let mut signals = Signals::install()?;
    let mut budget = RestartBudget::new(args.max_restarts, args.restart_window);
    loop {
        let generation = Generation::start(&args)?;
        match supervise(generation, &mut signals, &args).await {
            Ended::Finished => {
                println!(
                    "pubsub-connector cluster: {} processes finished, restarts: {}",
                    args.processes,
                    budget.total()
                );
                return Ok(());
            }
            Ended::Stopped {
                signals: 1,
                failure: None,
            } => {
                println!(
                    "pubsub-connector cluster: {} processes stopped, restarts: {}",
                    args.processes,
                    budget.total()
                );
                return Ok(());
            }
            Ended::Stopped { signals, failure } => {
                let why = match failure {
                    Some(f) => format!("process {} did not stop cleanly ({})", f.process, f.status),
                    None => "the processes were aborted".to_string(),
                };
                anyhow::bail!(
                    "stopped by {} signal{}: {why} (restarts: {})",
                    signals,
                    if signals == 1 { "" } else { "s" },
                    budget.total()
                );
            }
            Ended::Failed {
                first,
                bad_pipeline: true,
            } => {
                return Err(BadPipeline(anyhow::anyhow!(
                    "process {} exited with {}: the pipeline, its options or its data fail the same way on every start (see its error above); a restart cannot fix this", first.process, first.status
                ))
                .into());
            }
            Ended::Failed { first, .. } => {
                if let Err(msg) = budget.restart(Instant::now(), &first) {
                    anyhow::bail!("{msg}");
                }
                tracing::warn!(
                    "restarting all {} processes from the last completed checkpoint in {} (restart {} of at most {} within {})",
                    args.processes,
                    pubsub_engine_spi::redact_url(args.state_dir.as_deref().unwrap_or_default()),
                    budget.total(),
                    args.max_restarts,
                    human(args.restart_window)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(p: usize) -> Failure {
        Failure {
            process: p,
            status: "exit code 1".into(),
        }
    }

    #[test]
    fn restarts_within_the_window_are_limited() {
        let t0 = Instant::now();
        let mut b = RestartBudget::new(3, Duration::from_secs(600));
        for s in 0..3 {
            b.restart(t0 + Duration::from_secs(s), &failure(0)).unwrap();
        }
        let e = b
            .restart(t0 + Duration::from_secs(10), &failure(1))
            .unwrap_err();
        assert_eq!(
            e,
            "giving up: 3 restarts within 10m already (--max-restarts 3, --restart-window 10m); the last failure: process 1 (exit code 1)"
        );
        assert_eq!(b.total(), 3);
    }

    #[test]
    fn restarts_older_than_the_window_do_not_count() {
        let t0 = Instant::now();
        let mut b = RestartBudget::new(2, Duration::from_secs(60));
        b.restart(t0, &failure(0)).unwrap();
        b.restart(t0 + Duration::from_secs(30), &failure(0))
            .unwrap();
        // The first restart left the window at t0 + 60 s.
        b.restart(t0 + Duration::from_secs(60), &failure(0))
            .unwrap();
        assert!(b
            .restart(t0 + Duration::from_secs(61), &failure(0))
            .is_err());
        b.restart(t0 + Duration::from_secs(200), &failure(0))
            .unwrap();
        assert_eq!(b.total(), 4);
    }

    #[test]
    fn zero_restarts_gives_up_at_the_first_failure() {
        let mut b = RestartBudget::new(0, Duration::from_secs(1));
        let e = b
            .restart(
                Instant::now(),
                &Failure {
                    process: 2,
                    status: "signal 9 (SIGKILL)".into(),
                },
            )
            .unwrap_err();
        assert!(
            e.contains("0 restarts within 1s") && e.contains("process 2 (signal 9 (SIGKILL))"),
            "{e}"
        );
    }

    #[test]
    fn durations_read_back_and_print_short() {
        for d in ["10s", "500ms", "10m", "1.5s", "2h"] {
            let parsed = pubsub_engine_spi::duration::parse_duration(d).unwrap();
            assert_eq!(
                pubsub_engine_spi::duration::parse_duration(&flag_duration(parsed)).unwrap(),
                parsed,
                "{d}"
            );
            assert_eq!(human(parsed), d);
        }
        // More digits than a float keeps: passed on to each process unrounded.
        let long = pubsub_engine_spi::duration::parse_duration("100000000.123456789s").unwrap();
        assert_eq!(
            pubsub_engine_spi::duration::parse_duration(&flag_duration(long)).unwrap(),
            long
        );
    }

    #[test]
    fn children_get_the_cluster_and_job_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            c: ClusterArgs,
        }
        let t = T::parse_from([
            "x",
            "p.sql",
            "--processes",
            "3",
            "--stop-when-idle",
            "5s",
            "--state-dir",
            "/s",
        ]);
        let a = child_args(&t.c, 1, Path::new("/tmp/hosts")).join(" ");
        assert_eq!(
            a,
            "run p.sql --processes 3 --process 1 --hosts /tmp/hosts --workers 2 --checkpoint-interval 10s --checkpoint-timeout 600s --connect-timeout 30s --shutdown-timeout 60s --max-inflight-rows 32768 --max-window-state-bytes 1073741824 --state-dir /s --stop-when-idle 5s"
        );
        let t = T::parse_from([
            "x",
            "p.sql",
            "--processes",
            "2",
            "--shutdown-timeout",
            "2m",
            "--max-inflight-rows",
            "500",
        ]);
        let a = child_args(&t.c, 0, Path::new("/tmp/hosts")).join(" ");
        assert!(
            a.contains(" --shutdown-timeout 120s --max-inflight-rows 500"),
            "{a}"
        );
        assert_eq!(t.c.max_restarts, 3);
        assert_eq!(t.c.restart_window, Duration::from_secs(600));
    }

    #[test]
    fn a_stop_is_killed_only_after_a_whole_wait_without_progress() {
        let t0 = Instant::now();
        let wait = Duration::from_secs(90);
        let mut c = StopClock::new(wait, t0);
        assert_eq!(c.deadline(), t0 + wait);
        // Progress at 80 s: the stop may run to 170 s, past the first deadline.
        c.progress(t0 + Duration::from_secs(80));
        assert_eq!(c.deadline(), t0 + Duration::from_secs(170));
        // A report that arrives late never pulls the deadline in.
        c.progress(t0 + Duration::from_secs(10));
        assert_eq!(c.deadline(), t0 + Duration::from_secs(170));
    }

    #[test]
    fn each_process_serves_metrics_on_its_own_port() {
        assert_eq!(
            process_metrics_addr("127.0.0.1:9464", 2).unwrap(),
            "127.0.0.1:9466"
        );
        assert_eq!(process_metrics_addr("[::1]:9464", 1).unwrap(), "[::1]:9465");
        assert_eq!(process_metrics_addr("0.0.0.0:0", 3).unwrap(), "0.0.0.0:0");
        let e = process_metrics_addr("127.0.0.1:65535", 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--metrics-addr 127.0.0.1:65535") && e.contains("65536"),
            "{e}"
        );
        let e = process_metrics_addr("localhost", 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--metrics-addr localhost: expected HOST:PORT"),
            "{e}"
        );
    }
}
