//! The checkpoint protocol of the Timely runtime, end to end, with an in-memory test
//! connector (a fake by design: these tests are about the engine, not Pub/Sub).
//!
//! The memory source binds emitted rows to epochs like the Pub/Sub source and, on
//! `Commit`, checks that every row it is about to acknowledge is already durable in the
//! memory sink. Any ack-before-flush is recorded as a violation.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch};
use async_trait::async_trait;
use pubsub_engine::runtime::{run_pipeline, RuntimeConfig, StopHandle};
use pubsub_engine::sql::{parse_pipeline, plan_pipeline};
use pubsub_engine::*;
use serde::{Deserialize, Serialize};

#[derive(Default)]
struct Log {
    durable: Mutex<HashSet<i64>>,
    acked: Mutex<Vec<i64>>,
    violations: Mutex<Vec<String>>,
    /// Sink: key column value -> the sink subtasks that wrote it.
    writers: Mutex<HashMap<String, HashSet<usize>>>,
}

fn log(name: &str) -> Arc<Log> {
    static LOGS: OnceLock<Mutex<HashMap<String, Arc<Log>>>> = OnceLock::new();
    LOGS.get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(name.to_string())
        .or_default()
        .clone()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct MemTable {
    sink: bool,
    name: String,
    rows: i64,
    fail_from_epoch: u64,
    /// Sink: from this epoch on, a checkpoint never completes.
    hang_from_epoch: u64,
    /// Source: `on_start` never returns (an endpoint that never answers).
    hang_on_start: bool,
    /// Source: the sinks whose durability an ack requires (default: its own name).
    durable_in: Vec<String>,
    /// Sink: the column whose equal values one subtask must write.
    route_by: Option<String>,
}

struct MemoryConnector;

impl Connector for MemoryConnector {
    type ProfileT = ();
    type TableT = MemTable;

    fn name(&self) -> &'static str {
        "memory"
    }
    fn metadata(&self) -> ConnectorMetadata {
        ConnectorMetadata {
            id: "memory".into(),
            name: "memory".into(),
            description: "test".into(),
            source: true,
            sink: true,
            table_config: "{}".into(),
            connection_config: None,
        }
    }
    fn metadata_defs(&self) -> &'static [MetadataDef] {
        &[]
    }
    fn known_options(&self) -> &'static [&'static str] {
        &[
            "role",
            "name",
            "rows",
            "fail-from-epoch",
            "hang-from-epoch",
            "durable-in",
            "route-by",
        ]
    }
    fn sink_key(&self, _: &(), t: &MemTable, _: &ConnectionSchema) -> Option<String> {
        t.route_by.clone().filter(|_| t.sink)
    }
    fn table_type(&self, _: &(), t: &MemTable) -> ConnectionType {
        if t.sink {
            ConnectionType::Sink
        } else {
            ConnectionType::Source
        }
    }
    fn from_options(
        &self,
        name: &str,
        o: &mut ConnectorOptions,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        let table = MemTable {
            sink: o.pull_str("role")? == "sink",
            name: o.pull_str("name")?,
            rows: o.pull_opt_u64("rows")?.unwrap_or(0) as i64,
            fail_from_epoch: o.pull_opt_u64("fail-from-epoch")?.unwrap_or(u64::MAX),
            hang_from_epoch: o.pull_opt_u64("hang-from-epoch")?.unwrap_or(u64::MAX),
            hang_on_start: o.pull_opt_bool("hang-on-start")?.unwrap_or(false),
            durable_in: o
                .pull_opt_str("durable-in")?
                .map(|v| v.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
            route_by: o.pull_opt_str("route-by")?,
        };
        self.from_config(name, (), table, schema)
    }
    fn make_operator(
        &self,
        _: (),
        t: MemTable,
        _: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator> {
        Ok(if t.sink {
            ConstructedOperator::Operator(Box::new(MemSink {
                log: log(&t.name),
                pending: Vec::new(),
                fail_from: t.fail_from_epoch,
                hang_from: t.hang_from_epoch,
            }))
        } else {
            let sinks = if t.durable_in.is_empty() {
                vec![log(&t.name)]
            } else {
                t.durable_in.iter().map(|n| log(n)).collect()
            };
            ConstructedOperator::Source(Box::new(MemSource {
                log: log(&t.name),
                sinks,
                rows: t.rows,
                hang_on_start: t.hang_on_start,
            }))
        })
    }
}

struct MemSource {
    log: Arc<Log>,
    /// Every sink that must hold a row before it may be acked.
    sinks: Vec<Arc<Log>>,
    rows: i64,
    hang_on_start: bool,
}

#[async_trait]
impl SourceOperator for MemSource {
    fn name(&self) -> String {
        "memory-source".into()
    }
    async fn on_start(&mut self, _: &mut SourceContext) -> anyhow::Result<()> {
        if self.hang_on_start {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
    async fn run(
        &mut self,
        ctx: &mut SourceContext,
        collector: &mut SourceCollector,
    ) -> anyhow::Result<SourceFinishType> {
        let received = ctx.counter(MESSAGES_RECEIVED);
        let acked = ctx.counter(MESSAGES_ACKED);
        // Each subtask emits its own range of sequence numbers.
        let base = ctx.task_info.task_index as i64 * 1_000_000;
        let mut next = base;
        let end = base + self.rows;
        let mut staged = Vec::new();
        let mut bound: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
        let mut stopping = false;
        loop {
            tokio::select! {
                biased;
                ctrl = ctx.control_rx.recv() => match ctrl {
                    Some(ControlMessage::Checkpoint(b)) => {
                        bound.entry(b.epoch).or_default().append(&mut staged);
                        ctx.start_checkpoint(b, collector).await?;
                        stopping |= b.then_stop;
                    }
                    Some(ControlMessage::Commit { epoch }) => {
                        let later = bound.split_off(&(epoch + 1));
                        let done = std::mem::replace(&mut bound, later);
                        for seq in done.into_values().flatten() {
                            if self.sinks.iter().any(|s| !s.durable.lock().unwrap().contains(&seq)) {
                                self.log.violations.lock().unwrap().push(format!("{seq} acked at commit {epoch} before it was durable"));
                            }
                            self.log.acked.lock().unwrap().push(seq);
                            acked.add(1);
                        }
                    }
                    Some(ControlMessage::Stop { .. }) | None => return Ok(SourceFinishType::Graceful),
                },
                _ = tokio::time::sleep(Duration::from_millis(1)), if !stopping && next < end => {
                    let n = (end - next).min(10);
                    let seqs: Vec<i64> = (next..next + n).collect();
                    next += n;
                    let mut columns: Vec<arrow::array::ArrayRef> = vec![Arc::new(Int64Array::from(seqs.clone()))];
                    // A second column: a key shared by every 7th row.
                    if ctx.out_schema.fields().len() > 1 {
                        let keys: Vec<String> = seqs.iter().map(|s| format!("k{}", s % 7)).collect();
                        columns.push(Arc::new(arrow::array::StringArray::from(keys)));
                    }
                    let batch = RecordBatch::try_new(ctx.out_schema.clone(), columns)?;
                    collector.collect(batch).await?;
                    staged.extend(seqs);
                    received.add(n as u64);
                }
            }
        }
    }
}

struct MemSink {
    log: Arc<Log>,
    pending: Vec<i64>,
    fail_from: u64,
    hang_from: u64,
}

#[async_trait]
impl ArrowOperator for MemSink {
    fn name(&self) -> String {
        "memory-sink".into()
    }
    async fn process_batch(
        &mut self,
        batch: RecordBatch,
        ctx: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        if let Some(keys) = batch
            .column_by_name("k")
            .and_then(|c| c.as_any().downcast_ref::<arrow::array::StringArray>())
        {
            let mut w = self.log.writers.lock().unwrap();
            for k in keys.iter().flatten() {
                w.entry(k.to_string())
                    .or_default()
                    .insert(ctx.task_info.task_index);
            }
        }
        let col = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("BIGINT column");
        self.pending.extend(col.values().iter().copied());
        Ok(())
    }
    async fn handle_checkpoint(
        &mut self,
        b: CheckpointBarrier,
        _: &mut OperatorContext,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(b.epoch < self.fail_from, "injected sink failure");
        if b.epoch >= self.hang_from {
            std::future::pending::<()>().await;
        }
        self.log
            .durable
            .lock()
            .unwrap()
            .extend(self.pending.drain(..));
        Ok(())
    }
}

fn pipeline(name: &str, rows: i64, fail_from: Option<u64>) -> pubsub_engine::sql::PlannedPipeline {
    let fail = fail_from
        .map(|e| format!(", 'fail-from-epoch' = '{e}'"))
        .unwrap_or_default();
    let sql = format!(
        "CREATE TABLE src (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = '{name}', 'rows' = '{rows}');
         CREATE TABLE dst (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = '{name}' {fail});
         INSERT INTO dst SELECT seq FROM src;"
    );
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(MemoryConnector)];
    plan_pipeline(&parse_pipeline(&sql).unwrap(), &connectors).unwrap()
}

fn config(state: &std::path::Path) -> RuntimeConfig {
    RuntimeConfig {
        workers: 2,
        checkpoint_interval: Duration::from_millis(20),
        state_dir: state.display().to_string(),
        stop_when_idle: Some(Duration::from_millis(300)),
        max_inflight_rows: 100,
        ..RuntimeConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_is_acked_once_and_only_after_the_sink_made_it_durable() {
    let dir = tempfile::tempdir().unwrap();
    let summary = run_pipeline(
        pipeline("ok", 3000, None),
        config(dir.path()),
        StopHandle::new(),
    )
    .await
    .unwrap();
    let l = log("ok");
    assert!(
        l.violations.lock().unwrap().is_empty(),
        "{:?}",
        l.violations.lock().unwrap().first()
    );
    let mut acked = l.acked.lock().unwrap().clone();
    acked.sort();
    let expected: Vec<i64> = (0..3000).chain(1_000_000..1_003_000).collect();
    assert_eq!(acked, expected, "every row acked exactly once");
    assert!(summary.checkpoints_completed >= 3, "{summary:?}");
    assert_eq!(summary.messages_acked, 6000);

    // A restart from the same state continues above the stored epoch.
    let stored = CheckpointStoreProbe::epoch(dir.path()).await;
    assert_eq!(Some(stored), summary.last_completed_epoch);
    let again = run_pipeline(
        pipeline("ok-restart", 10, None),
        config(dir.path()),
        StopHandle::new(),
    )
    .await
    .unwrap();
    assert_eq!(again.restored_epoch, Some(stored));
    assert!(CheckpointStoreProbe::epoch(dir.path()).await > stored);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sink_checkpoint_fails_the_job_and_commits_nothing_of_its_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let err = run_pipeline(
        pipeline("fail", 3000, Some(4)),
        config(dir.path()),
        StopHandle::new(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("injected sink failure"), "{err}");
    let l = log("fail");
    assert!(
        l.violations.lock().unwrap().is_empty(),
        "{:?}",
        l.violations.lock().unwrap().first()
    );
    assert!(
        err.summary.last_completed_epoch.unwrap_or(0) < 4,
        "{:?}",
        err.summary
    );
    let acked: HashSet<i64> = l.acked.lock().unwrap().iter().copied().collect();
    assert!(
        acked.len() < 6000,
        "rows of the failed epoch must not be acked"
    );
}

struct CheckpointStoreProbe;

impl CheckpointStoreProbe {
    async fn epoch(dir: &std::path::Path) -> u64 {
        let store =
            pubsub_engine::runtime::CheckpointStore::open(&dir.display().to_string(), false)
                .await
                .unwrap();
        store
            .load()
            .await
            .unwrap()
            .expect("a completed checkpoint")
            .epoch
    }
}

#[test]
fn casts_that_could_fail_are_rejected_at_plan_time() {
    let sql = "CREATE TABLE src (user TEXT, amount BIGINT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'c');
               CREATE TABLE dst (user BIGINT, amount BOOLEAN) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'c');
               INSERT INTO dst SELECT user, amount FROM src;";
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(MemoryConnector)];
    let err = plan_pipeline(&parse_pipeline(sql).unwrap(), &connectors)
        .err()
        .expect("a lossy cast must be rejected");
    assert!(
        err.0
            .contains("column 'user' (TEXT) of 'src' cannot be written to column 'user' (BIGINT)"),
        "{err}"
    );
    let ok = "CREATE TABLE src (n INT, m BIGINT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'c');
              CREATE TABLE dst (n BIGINT, m TEXT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'c');
              INSERT INTO dst SELECT * FROM src;";
    assert!(plan_pipeline(&parse_pipeline(ok).unwrap(), &connectors).is_ok());
}

fn plan_err(sql: &str) -> String {
    match plan(sql) {
        Ok(_) => panic!("planning must fail: {sql}"),
        Err(e) => e,
    }
}

fn plan(sql: &str) -> Result<pubsub_engine::sql::PlannedPipeline, String> {
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(MemoryConnector)];
    plan_pipeline(&parse_pipeline(sql).map_err(|e| e.0)?, &connectors).map_err(|e| e.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_read_by_two_queries_reaches_both_and_acks_after_both_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(
        "CREATE TABLE src (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'fan', 'rows' = '2000', 'durable-in' = 'fan-a,fan-b');
         CREATE TABLE a (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'fan-a');
         CREATE TABLE b (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'fan-b');
         INSERT INTO a SELECT seq FROM src;
         INSERT INTO b SELECT * FROM src;",
    )
    .unwrap();
    assert_eq!(p.sources().len(), 1, "one reader set for the table");
    let summary = run_pipeline(p, config(dir.path()), StopHandle::new())
        .await
        .unwrap();
    let l = log("fan");
    assert!(
        l.violations.lock().unwrap().is_empty(),
        "{:?}",
        l.violations.lock().unwrap().first()
    );
    let expected: HashSet<i64> = (0..2000).chain(1_000_000..1_002_000).collect();
    for sink in ["fan-a", "fan-b"] {
        let got: HashSet<i64> = log(sink).durable.lock().unwrap().iter().copied().collect();
        assert_eq!(got, expected, "sink {sink} got every row");
    }
    let mut acked = l.acked.lock().unwrap().clone();
    acked.sort();
    assert_eq!(acked.len(), 4000, "each row acked once, not once per query");
    assert_eq!(summary.messages_acked, 4000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_that_never_completes_fails_the_job_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(
        "CREATE TABLE src (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'hang', 'rows' = '100000');
         CREATE TABLE dst (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'hang', 'hang-from-epoch' = '3');
         INSERT INTO dst SELECT seq FROM src;",
    )
    .unwrap();
    let cfg = RuntimeConfig {
        checkpoint_timeout: Duration::from_millis(500),
        stop_when_idle: None,
        shutdown_timeout: Duration::from_secs(5),
        ..config(dir.path())
    };
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        run_pipeline(p, cfg, StopHandle::new()),
    )
    .await
    .expect("the job must end by itself")
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("checkpoint 3 did not complete within --checkpoint-timeout")
            && msg.contains("sinks"),
        "{msg}"
    );
    assert_eq!(
        err.summary.last_completed_epoch,
        Some(2),
        "{:?}",
        err.summary
    );
    assert!(log("hang").violations.lock().unwrap().is_empty());
}

#[test]
fn insert_column_lists_are_honoured_and_mismatches_rejected() {
    let src = "CREATE TABLE o (first_name TEXT NOT NULL, last_name TEXT NOT NULL, age INT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'cols');";
    let sink = "CREATE TABLE s (last_name TEXT, first_name TEXT, age BIGINT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'cols');";
    let p = plan(&format!(
        "{src}{sink} INSERT INTO s (last_name, first_name) SELECT last_name, first_name FROM o;"
    ))
    .unwrap();
    // sink column i <- source column: last_name <- 1, first_name <- 0, age <- NULL.
    assert_eq!(p.queries[0].projection, vec![Some(1), Some(0), None]);
    let p = plan(&format!(
        "{src}{sink} INSERT INTO s (first_name, last_name, age) SELECT first_name, last_name, age FROM o;"
    ))
    .unwrap();
    assert_eq!(p.queries[0].projection, vec![Some(1), Some(0), Some(2)]);

    let e = plan_err(&format!(
        "{src}{sink} INSERT INTO s (last_name) SELECT first_name, last_name FROM o;"
    ));
    assert!(e.contains("names 1 target columns but selects 2"), "{e}");
    let e = plan_err(&format!(
        "{src}{sink} INSERT INTO s (nope) SELECT first_name FROM o;"
    ));
    assert!(
        e.contains("column 'nope' does not exist in table 's'"),
        "{e}"
    );
    let e = plan_err(&format!(
        "{src}{sink} INSERT INTO s (age, age) SELECT age, age FROM o;"
    ));
    assert!(e.contains("'age' is named twice"), "{e}");
    let e = plan_err(&format!(
        "{src}{sink} INSERT INTO s SELECT first_name FROM o;"
    ));
    assert!(e.contains("selects 1 columns but the table has 3"), "{e}");
}

#[test]
fn nullability_types_and_duplicate_columns_are_checked_when_planned() {
    let e = plan_err(
        "CREATE TABLE o (a TEXT, b TEXT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'n');
         CREATE TABLE s (a TEXT NOT NULL, b TEXT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'n');
         INSERT INTO s SELECT a, b FROM o;",
    )
    ;
    assert!(
        e.contains("column 'a' (TEXT) of 'o' may be NULL but column 'a' is TEXT NOT NULL"),
        "{e}"
    );
    let e = plan_err(
        "CREATE TABLE o (a TEXT NOT NULL) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'n');
         CREATE TABLE s (a TEXT, z BIGINT NOT NULL) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'n');
         INSERT INTO s (a) SELECT a FROM o;",
    );
    assert!(
        e.contains("column 'z' (BIGINT NOT NULL) is not filled"),
        "{e}"
    );
    let e = plan_err(
        "CREATE TABLE o (a TEXT, A BIGINT, a INT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'n');",
    );
    assert!(e.contains("declares column 'a' twice"), "{e}");
    // SQL type names, never Arrow's; lossy or failing conversions refused.
    for (from, to) in [
        ("BIGINT", "DOUBLE"),
        ("TEXT", "JSON"),
        ("BYTEA", "TEXT"),
        ("DOUBLE", "FLOAT"),
        ("BIGINT", "INT"),
    ] {
        let e = plan_err(&format!(
            "CREATE TABLE o (a {from}) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'n');
             CREATE TABLE s (a {to}) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'n');
             INSERT INTO s SELECT a FROM o;"
        ));
        assert!(
            e.contains(&format!(
                "column 'a' ({from}) of 'o' cannot be written to column 'a' ({to})"
            )),
            "{e}"
        );
        assert!(!e.contains("Int64") && !e.contains("Utf8"), "{e}");
    }
    for (from, to) in [
        ("INT", "BIGINT"),
        ("INT", "DOUBLE"),
        ("FLOAT", "DOUBLE"),
        ("JSON", "TEXT"),
        ("TIMESTAMP", "TEXT"),
    ] {
        plan(&format!(
            "CREATE TABLE o (a {from}) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'n');
             CREATE TABLE s (a {to}) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'n');
             INSERT INTO s SELECT a FROM o;"
        ))
        .unwrap_or_else(|e| panic!("{from} -> {to}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_start_up_ends_the_job_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(
        "CREATE TABLE src (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'start', 'rows' = '10', 'hang-on-start' = 'true');
         CREATE TABLE dst (seq BIGINT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'start');
         INSERT INTO dst SELECT seq FROM src;",
    )
    .unwrap();
    let stop = StopHandle::new();
    // A stop that arrives while a source is still starting (Ctrl-C during a slow connect).
    stop.stop();
    let cfg = RuntimeConfig {
        stop_when_idle: None,
        ..config(dir.path())
    };
    // The default shutdown timeout is 60 s: ending well inside it shows nothing waited.
    let err = tokio::time::timeout(Duration::from_secs(30), run_pipeline(p, cfg, stop))
        .await
        .expect("a stop during start-up must not wait for the source to connect")
        .unwrap_err();
    assert!(err.to_string().contains("stopped during start-up"), "{err}");
    assert_eq!(err.summary.messages_acked, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_with_one_key_are_written_by_one_sink_subtask() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(
        "CREATE TABLE src (seq BIGINT, k TEXT) WITH ('connector' = 'memory', 'role' = 'source', 'name' = 'route', 'rows' = '700');
         CREATE TABLE dst (seq BIGINT, k TEXT) WITH ('connector' = 'memory', 'role' = 'sink', 'name' = 'route', 'route-by' = 'k');
         INSERT INTO dst SELECT seq, k FROM src;",
    )
    .unwrap();
    assert_eq!(p.queries[0].route_by, Some(1));
    let cfg = RuntimeConfig {
        workers: 4,
        ..config(dir.path())
    };
    let summary = run_pipeline(p, cfg, StopHandle::new()).await.unwrap();
    let l = log("route");
    assert!(
        l.violations.lock().unwrap().is_empty(),
        "{:?}",
        l.violations.lock().unwrap()
    );
    assert_eq!(summary.messages_acked, 4 * 700);
    assert_eq!(
        l.durable.lock().unwrap().len(),
        4 * 700,
        "every row is durable"
    );
    let writers = l.writers.lock().unwrap();
    assert_eq!(writers.len(), 7, "{writers:?}");
    for (k, subtasks) in writers.iter() {
        assert_eq!(
            subtasks.len(),
            1,
            "key {k} was written by subtasks {subtasks:?}"
        );
    }
    // Every source subtask read every key: the keys moved between workers.
    let used: HashSet<usize> = writers.values().flatten().copied().collect();
    assert!(
        used.len() > 1,
        "all keys landed on one subtask: {writers:?}"
    );
}
