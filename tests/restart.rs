//! Restarts after an unclean stop, against the real emulator (issue 16, finding 15): the
//! messages a killed run held stay leased to it until their leases run out, so a restarted
//! `--stop-when-idle` run must not take the quiet before then for "caught up".

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use support::*;

const LIMIT: Duration = Duration::from_secs(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_the_idle_stop_waits_out_the_dead_runs_leases() {
    let t = topics("unclean", 10).await;
    let ids = publish_seq(&t.input, 0..2_000).await;
    // A short lease extension keeps the dead run's leases (the horizon) at 10 s.
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.ack.max-duration-per-extension' = '10s'",
    ));
    // No checkpoint completes before the kill: everything read is still held.
    let mut child = w.spawn(&["--workers", "1", "--checkpoint-interval", "60s"]);
    let first = sink_ids(&t.output_sub, Some(1), Duration::from_secs(60)).await;
    assert!(!first.is_empty(), "the first run wrote rows");
    signal(&child, "KILL");
    child.wait().await.unwrap();
    assert_eq!(w.checkpoint_epoch(), None, "no checkpoint completed");

    // The restart stops after 3 s without a message; the dead run's messages come back
    // only after up to 10 s.
    let restarted = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "3s"]);
    let (code, stdout, stderr) = finish(restarted, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stderr.contains("did not stop cleanly"),
        "the restart says why it waits: {stderr}"
    );
    let rest = sink_ids(&t.output_sub, None, Duration::from_secs(5)).await;
    let got: HashSet<String> = first.union(&rest).cloned().collect();
    assert_eq!(
        missing(&ids, &got),
        0,
        "exit 0 means caught up: every message reached the sink; stdout: {stdout}"
    );
    let left = redelivered(&t.input_sub, Duration::from_secs(12)).await;
    assert!(
        left.is_empty(),
        "{} messages left unacknowledged",
        left.len()
    );

    // That run stopped cleanly more than one lease extension (10 s) ago (the read-back
    // above took 12 s): nothing it held can still be leased, so the next one does not wait.
    let again = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "2s"]);
    let (code, _, stderr) = finish(again, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        !stderr.contains("may still hold messages leased"),
        "{stderr}"
    );
}

/// Issue 16, finding 1: `scan.startup.mode = 'latest'` and a crash before the first
/// checkpoint completes. The restart must seek to the instant the first start recorded,
/// not to a new "now" (which would acknowledge everything published in between, rows
/// never written among them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_then_a_crash_before_the_first_checkpoint_loses_nothing_published_since() {
    let t = topics("latest-crash", 10).await;
    publish_seq(&t.input, 0..5).await; // the backlog `latest` skips
    let w = Workdir::new(&pipeline_sql(
        &t,
        &endpoint(),
        ", 'scan.startup.mode' = 'latest', 'scan.ack.max-duration-per-extension' = '10s'",
    ));
    let mut child = w.spawn(&["--workers", "1", "--checkpoint-interval", "60s"]);
    let lines = collect_lines(child.stderr.take().unwrap());
    wait_until("the first start's seek", LIMIT, || {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("seeked subscription"))
    })
    .await;
    // Read and written by the first run, never acknowledged: it dies first.
    let mut ids = publish_seq(&t.input, 5..10).await;
    let first = sink_ids(&t.output_sub, Some(5), Duration::from_secs(60)).await;
    assert_eq!(
        first.len(),
        5,
        "the first run wrote what was published after its seek"
    );
    signal(&child, "KILL");
    child.wait().await.unwrap();
    assert_eq!(w.checkpoint_epoch(), None, "no checkpoint completed");
    // Published while the job is down, after the first start's instant.
    ids.extend(publish_seq(&t.input, 10..15).await);

    let restarted = w.spawn(&["--checkpoint-interval", "1s", "--stop-when-idle", "3s"]);
    let (code, stdout, stderr) = finish(restarted, LIMIT).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stderr.contains("repeating the seek to"),
        "the restart repeats the recorded instant: {stderr}"
    );
    let rest = sink_ids(&t.output_sub, None, Duration::from_secs(5)).await;
    let got: HashSet<String> = first.union(&rest).cloned().collect();
    assert_eq!(
        missing(&ids, &got),
        0,
        "every message published after the first start reached the sink; stdout: {stdout}"
    );
}

/// Issue 31, item 5, the reported sequence: two pipelines with a deduplicating source
/// table of one name, run one after the other from one folder without --state-dir. The
/// second restored the first one's checkpoint with a WARN and took each of its messages
/// for a copy (rows written 0, all acknowledged). Now each pipeline has its own default
/// location (state/p1, state/p2), and a location written by another job is refused with
/// exit 2 naming both jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pipelines_in_one_folder_never_share_a_checkpoint() {
    const N: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let endpoint = endpoint();
    let dedup = ", 'scan.dedup.attribute' = 'rid'";
    let mut outputs = Vec::new();
    for name in ["p1", "p2"] {
        let t = topics(&format!("own-state-{name}"), 10).await;
        for i in 0..N {
            let rid = std::collections::HashMap::from([("rid".to_string(), format!("r{i}"))]);
            publish_with_attributes(&t.input, format!("{{\"seq\": {i}}}").into_bytes(), rid).await;
        }
        let file = dir.path().join(format!("{name}.sql"));
        std::fs::write(&file, pipeline_sql(&t, &endpoint, dedup)).unwrap();
        outputs.push(t.output_sub);
    }
    let run = |args: &[&str]| finish(spawn_bin_in(dir.path(), args), LIMIT);
    let idle = ["--checkpoint-interval", "1s", "--stop-when-idle", "5s"];
    for (name, out) in ["p1", "p2"].iter().zip(&outputs) {
        let file = format!("{name}.sql");
        let args: Vec<&str> = ["run", file.as_str()].into_iter().chain(idle).collect();
        let (code, stdout, stderr) = run(&args).await;
        assert_eq!(code, 0, "{name}: {stderr}");
        assert_eq!(
            summary_count(&stdout, "rows written:"),
            N,
            "{name}: {stdout}"
        );
        assert_eq!(
            sink_ids(out, Some(N), Duration::from_secs(5)).await.len(),
            N
        );
        assert!(dir
            .path()
            .join("state")
            .join(name)
            .join("checkpoint.json")
            .exists());
    }
    // p2 pointed at p1's location: refused before anything is read, naming both jobs.
    let args: Vec<&str> = ["run", "p2.sql", "--state-dir", "state/p1"]
        .into_iter()
        .chain(idle)
        .collect();
    let (code, _, stderr) = run(&args).await;
    assert_eq!(code, 2, "{stderr}");
    for part in ["job 'p1'", "job 'p2'", "--job-id p1"] {
        assert!(stderr.contains(part), "{part}: {stderr}");
    }
}
