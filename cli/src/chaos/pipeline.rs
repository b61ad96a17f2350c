//! The pipeline under test as real processes: `pubsub-connector run` (one process, which
//! the campaign restarts as a supervisor would) or `pubsub-connector cluster --processes
//! 2` (which restarts its own children). Output goes to one log file per start. Each hop
//! of the campaign is one `Pipeline`: its file `NAME.sql`, job id `NAME`, state
//! directory `state-NAME` and logs `NAME-run-N.out` / `.err` in the seed's directory.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};

/// The environment variable holding a fake secret in every pipeline process: no output
/// may contain its value.
pub const SECRET_ENV: &str = "AWS_SECRET_ACCESS_KEY";

pub struct Pipeline {
    exe: PathBuf,
    dir: PathBuf,
    /// The hop's name: its file, job id, state directory and log prefix.
    pub name: &'static str,
    processes: usize,
    workers: usize,
    checkpoint_interval: Duration,
    secret: String,
    child: Option<Child>,
    /// Starts so far; start `n` logs to `NAME-run-n.out` / `NAME-run-n.err`.
    pub starts: usize,
    /// When the running start was spawned.
    pub started: Option<Instant>,
}

impl Pipeline {
    pub fn new(
        exe: &Path,
        dir: &Path,
        name: &'static str,
        processes: usize,
        workers: usize,
        checkpoint_interval: Duration,
        secret: &str,
    ) -> Self {
        Pipeline {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            name,
            processes,
            workers,
            checkpoint_interval,
            secret: secret.to_string(),
            child: None,
            starts: 0,
            started: None,
        }
    }

    /// The pipeline file.
    pub fn file(&self) -> PathBuf {
        self.dir.join(format!("{}.sql", self.name))
    }

    /// The state directory (local: the campaign watches its checkpoint writes).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join(format!("state-{}", self.name))
    }

    /// The log files of start `n` (stdout, stderr).
    pub fn log_of(&self, n: usize) -> (PathBuf, PathBuf) {
        let f = |x: &str| self.dir.join(format!("{}-run-{n}.{x}", self.name));
        (f("out"), f("err"))
    }

    /// The log files of the running (or last) start.
    pub fn current_log(&self) -> (PathBuf, PathBuf) {
        self.log_of(self.starts)
    }

    /// Starts the pipeline on its state directory; `stop_when_idle` for the final run.
    pub fn start(&mut self, stop_when_idle: Option<Duration>) -> anyhow::Result<()> {
        self.starts += 1;
        let (out, err) = self.log_of(self.starts);
        let (out, err) = (std::fs::File::create(out)?, std::fs::File::create(err)?);
        let mut cmd = Command::new(&self.exe);
        if self.processes == 1 {
            cmd.arg("run");
        } else {
            cmd.arg("cluster")
                .args(["--processes", &self.processes.to_string()])
                // The campaign's kills must not exhaust the restart budget.
                .args(["--max-restarts", "100"]);
        }
        cmd.arg(self.file())
            .args(["--job-id", self.name])
            .arg("--state-dir")
            .arg(self.state_dir())
            .args(["--workers", &self.workers.to_string()])
            .arg("--checkpoint-interval")
            .arg(format!("{}ms", self.checkpoint_interval.as_millis()));
        if let Some(idle) = stop_when_idle {
            // A run to completion fires every open window before it stops.
            cmd.arg("--stop-when-idle")
                .arg(format!("{}ms", idle.as_millis()))
                .arg("--drain");
        }
        let child = cmd
            .env("RUST_LOG", "info")
            .env(SECRET_ENV, &self.secret)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", self.exe.display()))?;
        self.child = Some(child);
        self.started = Some(Instant::now());
        Ok(())
    }

    /// Waits for the running start to end (pending forever when none runs).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self.child.as_mut() {
            Some(c) => {
                let s = c.wait().await;
                self.child = None;
                s
            }
            None => std::future::pending().await,
        }
    }

    /// The running start's exit status if it has ended (reaped then), without waiting.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    /// Sends `signal` to the supervised process (`run`, or `cluster`, which forwards
    /// SIGTERM to its children). False when none runs.
    pub fn signal(&self, signal: libc::c_int) -> bool {
        match self.child.as_ref().and_then(|c| c.id()) {
            Some(pid) => unsafe { libc::kill(pid as i32, signal) == 0 },
            None => false,
        }
    }

    /// SIGKILL of process `process` of the pipeline: the `run` itself, or the `run`
    /// child of `cluster` started with `--process {process}`. False when there is none
    /// (e.g. the cluster is between restarts).
    pub fn kill_process(&self, process: usize) -> bool {
        self.pid_of(process).is_some_and(kill)
    }

    /// The pid of process `process`: the `run`, or the `cluster` child with
    /// `--process {process}`; `None` when there is none.
    pub fn pid_of(&self, process: usize) -> Option<u32> {
        let pid = self.child.as_ref().and_then(|c| c.id())?;
        if self.processes == 1 {
            return Some(pid);
        }
        children(pid).into_iter().find(|c| {
            let cmdline = std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.windows(2)
                .any(|w| w[0] == b"--process" && w[1] == process.to_string().as_bytes())
        })
    }

    /// Waits at most `limit` for the running start to end; `None` if it did not (it is
    /// then killed, with its children).
    pub async fn wait_at_most(&mut self, limit: Duration) -> Option<ExitStatus> {
        match tokio::time::timeout(limit, self.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                self.kill_all().await;
                None
            }
        }
    }

    /// SIGKILL of the supervised process and its children; waits for it.
    pub async fn kill_all(&mut self) {
        if let Some(pid) = self.child.as_ref().and_then(|c| c.id()) {
            for c in children(pid) {
                unsafe { libc::kill(c as i32, libc::SIGKILL) };
            }
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let _ = self.wait().await;
        }
    }

    /// Every log file written so far, in start order.
    pub fn logs(&self) -> Vec<PathBuf> {
        (1..=self.starts)
            .flat_map(|n| {
                let (out, err) = self.log_of(n);
                [out, err]
            })
            .collect()
    }
}

/// SIGKILL of `pid`; false when it is gone.
pub fn kill(pid: u32) -> bool {
    unsafe { libc::kill(pid as i32, libc::SIGKILL) == 0 }
}

/// The pids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // `pid (comm) state ppid ...`; comm may hold spaces, so split after ')'.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}
