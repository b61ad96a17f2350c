//! `UNNEST` of ARRAY columns against the emulator (issue 48, part 3): real Cloud Build
//! notifications whose `tags` (TEXT[]) and `steps` (JSON[]) are expanded in step, one row
//! per element, on a two-process cluster one of whose processes is SIGKILLed. Every
//! element's row is written, and a row written again (a replay) carries the same record
//! id, so a reader that drops repeated ids sees each element exactly once.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use pubsub_connector_core::admin;
use rand::{Rng, SeedableRng};

use crate::support::*;

/// One written row: (build id, tag, step id).
type Row = (String, Option<String>, Option<String>);

/// `n` Cloud Build notifications (the fixture, its id replaced): each has 0 to 3 tags
/// (unique, the first sometimes `null`), the list sometimes `null` or absent, and the
/// fixture's first 0 to 2 steps (or `null`). Returns the payloads and the oracle's rows:
/// for each build, as many rows as its longer list, the shorter padded with NULL.
fn builds(seed: u64, n: usize) -> (Vec<Vec<u8>>, Vec<Row>) {
    let fixture: serde_json::Value =
        serde_json::from_slice(&fixture("cloud-build-success.json")).unwrap();
    let all_steps = fixture["steps"].as_array().unwrap().clone();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut payloads = Vec::new();
    let mut rows = Vec::new();
    for i in 0..n {
        let id = format!("build-{i}");
        let mut b = fixture.clone();
        b["id"] = id.clone().into();
        let tags: Option<Vec<Option<String>>> = match rng.random_range(0..6) {
            0 => None,
            k => Some(
                (0..k.min(4) - 1)
                    .map(|t| (t > 0 || rng.random_range(0..4) > 0).then(|| format!("t{i}-{t}")))
                    .collect(),
            ),
        };
        match &tags {
            Some(t) => b["tags"] = serde_json::json!(t),
            None if rng.random_bool(0.5) => b["tags"] = serde_json::Value::Null,
            None => {
                b.as_object_mut().unwrap().remove("tags");
            }
        }
        let steps: Option<Vec<String>> = match rng.random_range(0..4) {
            0 => None,
            k => Some(
                (0..k - 1)
                    .map(|s| all_steps[s]["id"].as_str().unwrap().to_string())
                    .collect(),
            ),
        };
        b["steps"] = match &steps {
            Some(s) => serde_json::Value::Array(all_steps[..s.len()].to_vec()),
            None => serde_json::Value::Null,
        };
        let tags = tags.unwrap_or_default();
        let steps = steps.unwrap_or_default();
        for e in 0..tags.len().max(steps.len()) {
            rows.push((
                id.clone(),
                tags.get(e).cloned().flatten(),
                steps.get(e).cloned(),
            ));
        }
        payloads.push(serde_json::to_vec(&b).unwrap());
    }
    (payloads, rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unnest_writes_each_element_once_by_record_id_on_two_processes_after_one_is_sigkilled() {
    let t = topics("unnest", 10).await;
    let (payloads, expected) = builds(48, 1_500);
    admin::publish_all(&profile(), &t.input, payloads, 1_000)
        .await
        .unwrap();
    let ep = endpoint();
    let w = Workdir::new(&format!(
        "CREATE TABLE builds (id TEXT NOT NULL, status TEXT, tags TEXT[], steps JSON[]) WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'subscription' = '{sub}',
            'emulator-endpoint' = '{ep}', 'scan.ack.max-duration-per-extension' = '10s',
            'scan.flow-control.max-outstanding-element-count' = '100');
         CREATE TABLE build_steps WITH (
            'connector' = 'pubsub', 'project' = '{PROJECT}', 'topic' = '{out}',
            'emulator-endpoint' = '{ep}', 'sink.record-id-attribute' = 'rid');
         INSERT INTO build_steps
         SELECT id, UNNEST(tags) AS tag, json_get_str(UNNEST(steps), 'id') AS step
         FROM builds WHERE status = 'SUCCESS';",
        sub = t.input_sub,
        out = t.output,
    ));
    crate::cluster::run_killing_process_1(&w, &[]).await;
    let msgs = admin::drain_messages(&profile(), &t.output_sub, 2, None, Duration::from_secs(5))
        .await
        .unwrap();
    // Each record id stands for one row: a replay writes the same row under it.
    let mut by_id: HashMap<String, Row> = HashMap::new();
    for m in &msgs {
        let v: serde_json::Value = serde_json::from_slice(&m.data).unwrap();
        let text = |k: &str| v[k].as_str().map(str::to_string);
        let row = (text("id").expect("id"), text("tag"), text("step"));
        let rid = m.attributes.get("rid").expect("a record id").clone();
        if let Some(before) = by_id.insert(rid.clone(), row.clone()) {
            assert_eq!(before, row, "record id {rid} was written with two rows");
        }
    }
    let count = |rows: &mut dyn Iterator<Item = Row>| {
        let mut c: BTreeMap<Row, usize> = BTreeMap::new();
        for r in rows {
            *c.entry(r).or_default() += 1;
        }
        c
    };
    let got = count(&mut by_id.into_values());
    let want = count(&mut expected.into_iter());
    let missing: Vec<_> = want
        .iter()
        .filter(|(r, n)| got.get(*r) != Some(n))
        .take(10)
        .collect();
    assert!(
        missing.is_empty(),
        "rows missing or repeated under other ids: {missing:?}"
    );
    assert_eq!(got, want);
}

/// `examples/unnest.sql`, as the docs run it: one row per step of each of the quickstart's
/// successful Cloud Build notifications, and every notification acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unnest_example_runs_on_the_quickstart_builds() {
    let stdout = run_example("unnest.sql").await;
    assert!(
        stdout.contains("quickstart ok: one row per step of each successful build"),
        "{stdout}"
    );
}
