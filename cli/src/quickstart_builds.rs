//! The quickstart's Cloud Build notifications, for the UNNEST example
//! (`examples/unnest.sql`): builds in the shape Cloud Build publishes to its
//! `cloud-builds` topic (as `shared/fixtures/payloads/cloud-build-success.json`), each
//! with a list of tags and of steps, read from subscription `builds-sub`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::Context;
use pubsub_connector_core::admin;
use serde_json::json;

/// The subscription a pipeline reads builds from; the quickstart publishes them when a
/// table names it.
pub const SUBSCRIPTION: &str = "builds-sub";

/// `n` notifications: build `i` has 1 to 3 steps, one or two tags, and fails when `i` is
/// a multiple of 5. Returns them and the (build id, step id) of every step of a
/// successful build.
pub fn payloads(n: usize) -> (Vec<Vec<u8>>, HashSet<(String, String)>) {
    let mut out = Vec::with_capacity(n);
    let mut steps_of_successes = HashSet::new();
    for i in 0..n {
        let id = format!("4c1e{i:04x}-8ded-4395-8c5b-4fcfbdca610d");
        let ok = i % 5 != 0;
        let steps: Vec<serde_json::Value> = (0..1 + i % 3)
            .map(|s| {
                json!({
                    "name": "gcr.io/cloud-builders/docker",
                    "args": ["build", "-t", format!("gcr.io/example-project/app:{i}-{s}"), "."],
                    "id": format!("step-{s}"),
                    "status": if ok { "SUCCESS" } else { "FAILURE" },
                })
            })
            .collect();
        if ok {
            for s in 0..steps.len() {
                steps_of_successes.insert((id.clone(), format!("step-{s}")));
            }
        }
        let mut tags = vec![format!("trigger-{}", i % 3)];
        if i % 2 == 0 {
            tags.push("nightly".to_string());
        }
        let build = json!({
            "name": format!("projects/123456789012/locations/global/builds/{id}"),
            "id": id,
            "projectId": "example-project",
            "status": if ok { "SUCCESS" } else { "FAILURE" },
            "steps": steps,
            "createTime": "2020-10-27T09:34:29.361518556Z",
            "logUrl": format!("https://console.cloud.google.com/cloud-build/builds/{id}?project=123456789012"),
            "tags": tags,
        });
        out.push(serde_json::to_vec(&build).expect("JSON"));
    }
    (out, steps_of_successes)
}

/// The UNNEST example's rows (`build_id`, `step`): exactly one per step of each
/// successful build, and every build was acknowledged.
pub async fn check(
    profile: &pubsub_schema::PubSubProfile,
    out: &HashMap<String, Vec<u8>>,
    expected: &HashSet<(String, String)>,
) -> anyhow::Result<()> {
    let mut got = HashSet::new();
    for payload in out.values() {
        let v: serde_json::Value =
            serde_json::from_slice(payload).context("an output message is not JSON")?;
        let row = v
            .get("build_id")
            .and_then(|x| x.as_str())
            .zip(v.get("step").and_then(|x| x.as_str()))
            .map(|(b, s)| (b.to_string(), s.to_string()))
            .context("a row has no build_id or step")?;
        anyhow::ensure!(got.insert(row.clone()), "step {row:?} was written twice");
    }
    let missing = expected.difference(&got).count();
    let invented = got.difference(expected).count();
    println!(
        "steps of successful builds: {}, rows written: {}, missing: {missing}, not a step of a successful build: {invented}",
        expected.len(),
        got.len()
    );
    anyhow::ensure!(missing == 0 && invented == 0, "the rows are not the steps");
    let left = admin::drain(profile, SUBSCRIPTION, 2, None, Duration::from_secs(5)).await?;
    anyhow::ensure!(
        left.is_empty(),
        "{} builds were not acknowledged on {SUBSCRIPTION}",
        left.len()
    );
    println!("quickstart ok: one row per step of each successful build, and every build was acknowledged");
    Ok(())
}
