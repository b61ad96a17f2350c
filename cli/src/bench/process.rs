//! CPU and memory readings of a process from /proc (Linux): the pipeline runs as its own
//! process so that its figures are its own; the raw loops run in this one.

use std::time::Duration;

/// CPU seconds (user + system) process `pid` used so far, from /proc/PID/stat. 0.0 when
/// the process is gone or the file cannot be read.
pub fn cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set size of process `pid` in KiB (VmHWM from /proc/PID/status).
pub fn peak_rss_kib_of(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// Current resident set size of process `pid` in KiB (VmRSS).
pub fn rss_kib_of(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// What a finished child run used: wall seconds, CPU seconds, peak RSS (KiB), its stdout,
/// and per sample (every `every`): seconds since start, RSS (KiB) and the watched counters.
pub struct ChildRun {
    pub wall_s: f64,
    pub cpu_s: f64,
    pub peak_kib: u64,
    pub stdout: String,
    pub samples: Vec<Sample>,
}

/// One reading of a running child.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the child started.
    pub at_s: f64,
    /// CPU seconds the child used so far.
    pub cpu_s: f64,
    pub rss_kib: u64,
    /// The sums of the series of the watched start, end and after counters (0 until the
    /// first scrape answers).
    pub started: u64,
    pub ended: u64,
    pub after: u64,
    /// The sums of the series of each watched gauge, in [`Watch::gauges`] order.
    pub gauges: Vec<u64>,
}

/// The counters a run is watched by: its metrics address, the counter whose first rise
/// starts the streaming time, the one whose reaching the count ends it, and one that
/// follows it (a source's acks follow the rows written by up to a checkpoint interval).
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    pub addr: &'a str,
    pub start: &'a str,
    pub end: &'a str,
    pub after: &'a str,
    /// Gauges recorded with each sample (e.g. `pending_acks`).
    pub gauges: &'a [&'a str],
}

impl ChildRun {
    /// Writes the samples as CSV (`at_s,cpu_s,rss_kib,<start>,<end>,<after>,<gauges>...`)
    /// to `path`.
    pub fn write_csv(&self, path: &std::path::Path, w: &Watch<'_>) -> std::io::Result<()> {
        let mut out = format!("at_s,cpu_s,rss_kib,{},{},{}", w.start, w.end, w.after);
        for g in w.gauges {
            out += &format!(",{g}");
        }
        out.push('\n');
        for s in &self.samples {
            out += &format!(
                "{:.3},{:.2},{},{},{},{}",
                s.at_s, s.cpu_s, s.rss_kib, s.started, s.ended, s.after
            );
            for g in &s.gauges {
                out += &format!(",{g}");
            }
            out.push('\n');
        }
        std::fs::write(path, out)
    }

    /// The streaming part of the run: from the sample before the start counter first rose
    /// to the first sample with the end counter at `n` or more (else the exit). It leaves
    /// out start-up, idle waits and shutdown. Its CPU runs on to the first sample with the
    /// after counter at `n` (else the exit), so that it holds all the work of the `n`
    /// messages. None when the start counter never rose.
    pub fn streaming(&self, n: u64) -> Option<Streaming> {
        let i = self.samples.iter().position(|s| s.started > 0)?;
        let first = &self.samples[i.saturating_sub(1)];
        let at = |reached: fn(&Sample) -> u64| {
            self.samples
                .iter()
                .find(|s| reached(s) >= n)
                .map_or((self.wall_s, self.cpu_s), |s| (s.at_s, s.cpu_s))
        };
        let (done_s, _) = at(|s| s.ended);
        let (after_s, after_cpu) = at(|s| s.after);
        Some(Streaming {
            start_s: first.at_s,
            wall_s: (done_s - first.at_s).max(0.02),
            cpu_s: after_cpu - first.cpu_s,
            after_s: (after_s - done_s).max(0.0),
        })
    }
}

/// See [`ChildRun::streaming`]: seconds from the child's start, streaming wall seconds,
/// the CPU seconds up to the after counter's reaching the count, and its lag after the
/// end.
#[derive(Debug, Clone, Copy)]
pub struct Streaming {
    pub start_s: f64,
    pub wall_s: f64,
    pub cpu_s: f64,
    /// Seconds from the end to the after counter's reaching the count.
    pub after_s: f64,
}

/// The sum of every series of counter `family` (`pubsub_connector_<family>_total`) in a
/// Prometheus text page.
pub fn counter_sum(page: &str, family: &str) -> u64 {
    metric_sum(page, &format!("pubsub_connector_{family}_total"))
}

/// The sum of every series of gauge `family` (`pubsub_connector_<family>`).
pub fn gauge_sum(page: &str, family: &str) -> u64 {
    metric_sum(page, &format!("pubsub_connector_{family}"))
}

fn metric_sum(page: &str, name: &str) -> u64 {
    page.lines()
        .filter(|l| l.starts_with(&name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// `GET /metrics` from `addr` over HTTP/1.0; empty when nothing answers yet.
pub async fn scrape(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await?;
        let mut page = String::new();
        s.read_to_string(&mut page).await?;
        std::io::Result::Ok(page)
    };
    match tokio::time::timeout(Duration::from_secs(1), get).await {
        Ok(Ok(page)) => page,
        _ => String::new(),
    }
}

/// Runs `cmd` to its end, sampling its CPU, RSS and the `watch` metrics every `every`.
/// When `stop` fires, the child gets SIGTERM (a graceful stop) and is sampled on to its
/// exit. Errors when it cannot start or exits unsuccessfully (the error holds its stdout).
pub async fn run_sampled(
    mut cmd: std::process::Command,
    every: Duration,
    watch: Watch<'_>,
    mut stop: Option<tokio::sync::oneshot::Receiver<()>>,
) -> anyhow::Result<ChildRun> {
    let t = std::time::Instant::now();
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn()?;
    let (mut cpu_s, mut peak_kib, mut samples) = (0.0f64, 0u64, Vec::new());
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if stop.as_mut().is_some_and(|s| s.try_recv().is_ok()) {
            stop = None;
            // SAFETY: kill(2) on our own child's pid; it has not been reaped (try_wait
            // above saw it running), so the pid cannot have been reused.
            let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) } == 0;
            anyhow::ensure!(
                sent,
                "cannot send SIGTERM to the pipeline: {}",
                std::io::Error::last_os_error()
            );
        }
        cpu_s = cpu_s.max(cpu_seconds_of(child.id()));
        peak_kib = peak_kib.max(peak_rss_kib_of(child.id()));
        let page = scrape(watch.addr).await;
        samples.push(Sample {
            at_s: t.elapsed().as_secs_f64(),
            cpu_s: cpu_seconds_of(child.id()),
            rss_kib: rss_kib_of(child.id()),
            started: counter_sum(&page, watch.start),
            ended: counter_sum(&page, watch.end),
            after: counter_sum(&page, watch.after),
            gauges: watch.gauges.iter().map(|g| gauge_sum(&page, g)).collect(),
        });
        tokio::time::sleep(every).await;
    };
    let wall_s = t.elapsed().as_secs_f64();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("piped"), &mut stdout)?;
    anyhow::ensure!(status.success(), "the pipeline failed ({status}): {stdout}");
    Ok(ChildRun {
        wall_s,
        cpu_s,
        peak_kib,
        stdout,
        samples,
    })
}

/// The number after `label` in a run's summary (`messages read: 50000, ...`); 0 if absent.
/// The sum of the numbers after every `label` in `stdout` (each process's summary of a
/// `cluster`).
pub fn count_all(stdout: &str, label: &str) -> u64 {
    stdout
        .split(label)
        .skip(1)
        .filter_map(|r| {
            r.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

pub fn count_after(stdout: &str, label: &str) -> u64 {
    stdout
        .split(label)
        .nth(1)
        .and_then(|r| {
            r.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_counter_is_summed_over_its_series_and_no_other_family() {
        let page = "# TYPE pubsub_connector_messages_acked counter\n\
            pubsub_connector_messages_acked_total{operator=\"src\",subtask=\"0\"} 10\n\
            pubsub_connector_messages_acked_total{operator=\"src\",subtask=\"1\"} 32\n\
            pubsub_connector_messages_acked_totals 5\n\
            pubsub_connector_messages_nacked_total 7\n";
        assert_eq!(super::counter_sum(page, "messages_acked"), 42);
        assert_eq!(super::counter_sum(page, "messages_nacked"), 7);
        assert_eq!(super::counter_sum(page, "rows_written"), 0);
        let gauges = "pubsub_connector_pending_acks{operator=\"src\",subtask=\"0\"} 3\n\
            pubsub_connector_pending_acks{operator=\"src\",subtask=\"1\"} 4\n\
            pubsub_connector_pending_acks_peak 99\n";
        assert_eq!(super::gauge_sum(gauges, "pending_acks"), 7);
    }
}
