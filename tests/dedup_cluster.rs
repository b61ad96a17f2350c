//! `scan.dedup.*` on a cluster of processes (decision 0046): rows are exchanged by their
//! record id, so a copy is dropped whichever process read it, and the ids a checkpoint
//! holds carry over a change between one process and a cluster, both ways, and an edit
//! of the pipeline's queries. Real processes, against the emulator.

use crate::cluster::{hosts_file, spawn_process};
use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use pubsub_connector_core::admin;
use support::*;

const LIMIT: Duration = Duration::from_secs(240);
const RECORDS: usize = 120;

/// `seq` published with id `r{record}` (or none).
async fn publish(topic: &str, seq: usize, record: Option<usize>) {
    let attributes: HashMap<String, String> = record
        .map(|r| ("rid".to_string(), format!("r{r}")))
        .into_iter()
        .collect();
    publish_with_attributes(
        topic,
        format!("{{\"seq\": {seq}}}").into_bytes(),
        attributes,
    )
    .await;
}

/// The seqs on `sub`, acking them, until none came for 5 s.
async fn seqs(sub: &str) -> Vec<i64> {
    admin::drain_messages(&profile(), sub, 2, None, Duration::from_secs(5))
        .await
        .unwrap()
        .into_iter()
        .map(|m| {
            let v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
            v["seq"].as_i64().expect("seq")
        })
        .collect()
}

/// Runs the pipeline as 2 processes of 2 workers until idle; returns each process's
/// stdout (its run summary).
async fn cluster(w: &Workdir) -> [String; 2] {
    let (hosts, _) = hosts_file(w.dir.path(), 2);
    let args = [
        "--workers",
        "2",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "4s",
    ];
    let (p0, p1) = (
        spawn_process(w, &hosts, 2, 0, &args),
        spawn_process(w, &hosts, 2, 1, &args),
    );
    let ((c0, out0, err0), (c1, out1, err1)) = tokio::join!(finish(p0, LIMIT), finish(p1, LIMIT));
    assert_eq!(c0, 0, "process 0 stderr: {err0}");
    assert_eq!(c1, 0, "process 1 stderr: {err1}");
    [out0, out1]
}

/// The sum of counter `label` over both summaries (a summary leaves out a zero).
fn total(outs: &[String; 2], label: &str) -> usize {
    outs.iter()
        .filter(|o| o.contains(label))
        .map(|o| summary_count(o, label))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_drops_copies_whichever_process_reads_them_and_keeps_the_ids_across_a_change_of_processes(
) {
    let t = topics("dedup-cluster", 10).await;
    // Records r0..r119 twice each (seq i and RECORDS + i, interleaved so that copies
    // travel in different pulls), and 5 messages without an id.
    for i in 0..RECORDS {
        publish(&t.input, i, Some(i)).await;
        publish(&t.input, RECORDS + i, Some(i)).await;
    }
    for i in 0..5 {
        publish(&t.input, 10_000 + i, None).await;
    }
    let sql = format!(
        "CREATE TABLE src (seq BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'format' = 'json',
            'scan.dedup.attribute' = 'rid');
         CREATE TABLE dst (seq BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO dst SELECT seq FROM src;",
        sub = t.input_sub,
        out = t.output,
        e = endpoint()
    );
    let w = Workdir::new(&sql);
    let outs = cluster(&w).await;
    for (p, out) in outs.iter().enumerate() {
        assert!(
            summary_count(out, "messages read:") > 0,
            "process {p} read nothing: {out}"
        );
    }
    assert_eq!(
        total(&outs, "messages acknowledged:"),
        2 * RECORDS + 5,
        "{outs:?}"
    );
    assert_eq!(total(&outs, "messages deduplicated:"), RECORDS, "{outs:?}");
    assert_eq!(total(&outs, "rows written:"), RECORDS + 5, "{outs:?}");
    let got = seqs(&t.output_sub).await;
    // One copy of each record, whichever came first, and every message without an id.
    let mut by_record: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for s in &got {
        if *s < 10_000 {
            by_record.entry(s % RECORDS as i64).or_default().push(*s);
        }
    }
    let twice: Vec<_> = by_record.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(twice.is_empty(), "records written twice: {twice:?}");
    assert_eq!(by_record.len(), RECORDS, "{got:?}");
    assert_eq!(got.len(), RECORDS + 5, "{got:?}");

    // A third copy of every record, read by one process: all dropped, by the ids the
    // cluster's checkpoint holds.
    let one_process = [
        "--workers",
        "2",
        "--checkpoint-interval",
        "1s",
        "--stop-when-idle",
        "4s",
    ];
    copies_dropped(&t, 20_000, "one process", || async {
        summary_count(&w.run_ok(&one_process).await, "messages deduplicated:")
    })
    .await;
    // A fourth, read by the cluster again: dropped by the ids one process checkpointed.
    let on_cluster = || async { total(&cluster(&w).await, "messages deduplicated:") };
    copies_dropped(&t, 30_000, "the cluster", on_cluster).await;
    // A fifth, after an INSERT was added in front (the query is `q1` now): the ids are
    // the table's, whichever query held them.
    let added = sql.replace(
        "INSERT INTO dst SELECT seq FROM src;",
        "INSERT INTO dst SELECT seq FROM src WHERE seq < 0; INSERT INTO dst SELECT seq FROM src;",
    );
    std::fs::write(w.pipeline(), added).unwrap();
    copies_dropped(&t, 40_000, "the edited cluster", on_cluster).await;
    assert!(redelivered(&t.input_sub, Duration::from_secs(3))
        .await
        .is_empty());
}

/// Publishes one more copy of every record (seqs from `base`), runs `run` (returning
/// the messages it deduplicated) and checks it dropped them all, writing nothing.
async fn copies_dropped<F: std::future::Future<Output = usize>>(
    t: &Topics,
    base: usize,
    on: &str,
    run: impl FnOnce() -> F,
) {
    for i in 0..RECORDS {
        publish(&t.input, base + i, Some(i)).await;
    }
    assert_eq!(run().await, RECORDS, "copies deduplicated on {on}");
    assert!(
        seqs(&t.output_sub).await.is_empty(),
        "a copy passed on {on}"
    );
}

/// A windowed query over a deduplicating table cannot share its exchange by group key:
/// refused before anything is read, naming the option and the way on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_query_over_a_deduplicating_table_is_refused_on_a_cluster() {
    let t = topics("dedup-cluster-window", 10).await;
    let sql = format!(
        "CREATE TABLE src (seq BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{e}', 'format' = 'json', 'scan.dedup.attribute' = 'rid');
         CREATE TABLE dst (n BIGINT) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{e}');
         INSERT INTO dst SELECT n FROM (
            SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, count(*) AS n FROM src GROUP BY window);",
        sub = t.input_sub,
        out = t.output,
        e = endpoint()
    );
    let w = Workdir::new(&sql);
    let (hosts, _) = hosts_file(w.dir.path(), 2);
    let (code, _, stderr) = finish(spawn_process(&w, &hosts, 2, 0, &[]), LIMIT).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("'scan.dedup.attribute'"), "{stderr}");
    assert!(stderr.contains("as one process"), "{stderr}");
}
