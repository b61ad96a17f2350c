//! `pubsub-connector cluster`, the one-machine supervisor, run as the real binary: it
//! restarts a failing cluster within its budget and then gives up naming the budget and
//! the last failure, gives up at once on a pipeline no restart can fix (exit 2), finishes
//! with its children, forwards SIGTERM for a graceful stop, leaves no orphan when it is
//! killed, and never prints a credential of its `--state-dir` URL. No emulator: failing
//! pipelines point at a closed port, working ones use the `nexmark` and `blackhole`
//! connectors.

use crate::support;

use std::time::Duration;

use support::{closed_port, finish, signal, spawn_bin, wait_until, Workdir};

const LIMIT: Duration = Duration::from_secs(120);

/// A pipeline whose source cannot reach its endpoint: every `run` fails within a second.
fn unreachable_sql() -> String {
    format!(
        "CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p',
             'subscription' = 'sub', 'emulator-endpoint' = '127.0.0.1:{}');
         CREATE TABLE d (a BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO d SELECT a FROM s;",
        closed_port()
    )
}

/// NEXMark bids into a blackhole; `options` go into the source's WITH.
fn nexmark_sql(options: &str) -> String {
    format!(
        "CREATE TABLE b (auction BIGINT, price BIGINT, date_time BIGINT)
             WITH ('connector' = 'nexmark' {options});
         CREATE TABLE d (auction BIGINT, price BIGINT, date_time BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO d SELECT * FROM b;"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_exits_2_when_the_pipeline_cannot_be_read_parsed_or_planned() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let missing = dir.path().join("missing.sql").display().to_string();
    let (code, _, stderr) =
        finish(spawn_bin(&["run", &missing, "--state-dir", &state]), LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot read pipeline file"), "{stderr}");
    for sql in [
        "CREATE TABLE oops (".to_string(),
        nexmark_sql(", 'event-type' = 'bids'"),
    ] {
        let w = Workdir::new(&sql);
        let (code, _, stderr) = finish(w.spawn(&[]), LIMIT).await;
        assert_eq!(code, 2, "{sql}: {stderr}");
    }
    // A failure at run time may go away on a restart: exit 1.
    let w = Workdir::new(&unreachable_sql());
    let (code, _, stderr) = finish(w.spawn(&[]), LIMIT).await;
    assert_eq!(code, 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_cluster_is_restarted_then_given_up_naming_the_budget() {
    let w = Workdir::new(&unreachable_sql());
    let child = w.spawn_cluster(&[
        "--processes",
        "2",
        "--max-restarts",
        "2",
        "--restart-window",
        "10m",
    ]);
    let (code, _stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr
            .matches("restarting all 2 processes from the last completed checkpoint")
            .count(),
        2,
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "giving up: 2 restarts within 10m already (--max-restarts 2, --restart-window 10m); the last failure: process "
        ) && stderr.contains("(exit code 1)"),
        "{stderr}"
    );
    // Every child's lines arrive, prefixed with its index.
    assert!(
        stderr.contains("[p0] ") && stderr.contains("[p1] "),
        "{stderr}"
    );
    assert!(stderr.contains("cannot reach Pub/Sub"), "{stderr}");
}

/// A credential in the `--state-dir` URL (a SAS token in the query) is in no output line:
/// not in the supervisor's restart lines, not in its children's logs, not in the final
/// error. The failing pipeline makes the supervisor restart once, then give up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_in_the_state_dir_url_is_never_printed() {
    let w = Workdir::new(&unreachable_sql());
    let state = format!("file://{}?sv=2024&sig=SECRET", w.state().display());
    std::fs::create_dir_all(w.state()).unwrap();
    let pipeline = w.pipeline().display().to_string();
    let child = spawn_bin(&[
        "cluster",
        &pipeline,
        "--state-dir",
        &state,
        "--processes",
        "1",
        "--max-restarts",
        "1",
    ]);
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("restarting all 1 processes"), "{stderr}");
    assert!(
        stderr.contains("?sv=***&sig=***"),
        "the location is shown, redacted: {stderr}"
    );
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(!line.contains("SECRET"), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_no_restart_can_fix_is_not_restarted() {
    let w = Workdir::new(&nexmark_sql(", 'events-per-second' = 'fast'"));
    let (code, _stdout, stderr) = finish(w.spawn_cluster(&["--processes", "2"]), LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("a restart cannot fix this"), "{stderr}");
    assert!(
        stderr.contains("[p0] error: table 'b': option 'events-per-second' is invalid"),
        "{stderr}"
    );
    assert!(!stderr.contains("restarting all"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_pipeline_finishes_and_the_cluster_exits_0() {
    let w = Workdir::new(&nexmark_sql(
        ", 'events-per-second' = '0', 'event-count' = '2000'",
    ));
    let (code, stdout, stderr) = finish(
        w.spawn_cluster(&["--processes", "1", "--checkpoint-interval", "200ms"]),
        LIMIT,
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("[p0] pubsub-connector: messages read: 2000, rows written: 2000"),
        "{stdout}"
    );
    assert!(
        stdout.contains("pubsub-connector cluster: 1 processes finished, restarts: 0"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_forwarded_for_a_graceful_stop_without_restart() {
    let w = Workdir::new(&nexmark_sql(", 'events-per-second' = '1000'"));
    let child = w.spawn_cluster(&["--processes", "1", "--checkpoint-interval", "200ms"]);
    wait_until("a first checkpoint", LIMIT, || {
        w.checkpoint_epoch().is_some()
    })
    .await;
    signal(&child, "TERM");
    let (code, stdout, stderr) = finish(child, LIMIT).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("forwarding SIGTERM to processes [0]"),
        "{stderr}"
    );
    assert!(
        stdout.contains("[p0] pubsub-connector: messages read: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("pubsub-connector cluster: 1 processes stopped, restarts: 0"),
        "{stdout}"
    );
    assert!(!stderr.contains("restarting all"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_supervisor_leaves_no_orphan() {
    let w = Workdir::new(&nexmark_sql(", 'events-per-second' = '1000'"));
    let child = w.spawn_cluster(&["--processes", "1", "--checkpoint-interval", "200ms"]);
    wait_until("a first checkpoint", LIMIT, || {
        w.checkpoint_epoch().is_some()
    })
    .await;
    // The running process holds the state directory's lock and wrote its pid there.
    let pid = std::fs::read_to_string(w.state().join("lock")).unwrap();
    let stat = std::path::PathBuf::from(format!("/proc/{}/stat", pid.trim()));
    // Alive unless gone or a zombie (an init that does not reap leaves one behind).
    let alive = || {
        std::fs::read_to_string(&stat).is_ok_and(|s| {
            s.rsplit(") ")
                .next()
                .is_some_and(|rest| !rest.starts_with('Z'))
        })
    };
    assert!(alive(), "process {pid} runs");
    signal(&child, "KILL");
    let _ = finish(child, LIMIT).await;
    wait_until(
        "the child to die with its supervisor",
        Duration::from_secs(10),
        || !alive(),
    )
    .await;
}
