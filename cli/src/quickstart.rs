//! `quickstart`: the whole product on a local emulator, checked end to end.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pubsub_connector_core::{admin, client};
use pubsub_emulator_tools::emulator::Emulator;
use pubsub_nexmark::events::{EventKind, Events};

use crate::pipeline;
use crate::quickstart_builds as builds;
use crate::RunArgs;

const PROJECT: &str = "quickstart";

pub async fn run(bids: usize, pipeline_path: PathBuf, workers: usize) -> anyhow::Result<()> {
    let emu = tokio::task::spawn_blocking(Emulator::start).await??;
    println!("emulator listening on {}", emu.endpoint());
    let profile = client::emulator_profile(PROJECT, &emu.endpoint());
    for t in ["bids", "bids-out"] {
        admin::create_topic(&profile, t).await?;
    }
    admin::create_subscription(&profile, "bids-sub", "bids", 60).await?;
    admin::create_subscription(&profile, "bids-out-sub", "bids-out", 60).await?;

    let payloads = bid_payloads(bids);
    let pairs = super::quickstart_join::expected(&payloads)?;
    let published: HashSet<String> = admin::publish_all(&profile, "bids", payloads, 5000)
        .await?
        .into_iter()
        .collect();
    println!("published {} NEXMark bids to topic bids", published.len());

    let mut sql = pipeline::load(&pipeline_path)?;
    pipeline::use_emulator(&mut sql, &emu.endpoint());
    // The UNNEST example reads Cloud Build notifications (one per 10 bids).
    let builds = sql
        .tables
        .iter()
        .any(|t| t.options.get("subscription") == Some(builds::SUBSCRIPTION));
    let mut steps = HashSet::new();
    if builds {
        admin::create_topic(&profile, "builds").await?;
        admin::create_subscription(&profile, builds::SUBSCRIPTION, "builds", 60).await?;
        let (payloads, expected) = builds::payloads(bids.div_ceil(10));
        let n = payloads.len();
        admin::publish_all(&profile, "builds", payloads, 5000).await?;
        println!("published {n} Cloud Build notifications to topic builds");
        steps = expected;
    }
    let windowed = sql.inserts.iter().any(|i| i.is_windowed());
    let changelog = sql
        .tables
        .iter()
        .any(|t| t.options.get("format") == Some("debezium_json"));
    let state =
        std::env::temp_dir().join(format!("pubsub-quickstart-state-{}", std::process::id()));
    let args = RunArgs {
        pipeline: pipeline_path.clone(),
        workers,
        checkpoint_interval: Duration::from_secs(2),
        state_dir: Some(state.display().to_string()),
        job_id: None,
        stop_when_idle: Some(Duration::from_secs(5)),
        // A windowed example writes every window before it stops.
        drain: windowed,
        checkpoint_timeout: Duration::from_secs(600),
        emulator: false,
        processes: 1,
        process: 0,
        hosts: None,
        connect_timeout: Duration::from_secs(30),
        shutdown_timeout: Duration::from_secs(60),
        max_inflight_rows: 32_768,
        max_window_state_bytes: 1 << 30,
        data_dir: None,
        metrics_addr: None,
    };
    let stop = pipeline::stop_on_signals();
    let summary = match pipeline::execute(&sql, &args, stop, false, Default::default()).await {
        Ok(s) => s,
        Err((e, s)) => {
            if let Some(s) = s {
                pipeline::print_summary(&s);
            }
            return Err(e).context("the quickstart pipeline failed");
        }
    };
    let _ = std::fs::remove_dir_all(&state);
    pipeline::print_summary(&summary);

    let out = admin::drain(
        &profile,
        "bids-out-sub",
        4,
        Some(summary.rows_written as usize),
        Duration::from_secs(10),
    )
    .await?;
    if changelog && sql.inserts.iter().any(|i| i.joined.is_some()) {
        return super::quickstart_join::check(&profile, &out, &pairs).await;
    }
    if changelog {
        return check_changelog(&profile, &out, published.len()).await;
    }
    if builds {
        return builds::check(&profile, &out, &steps).await;
    }
    let ranked = sql
        .inserts
        .iter()
        .any(|i| i.query.to_string().to_uppercase().contains(" OVER ("));
    if ranked {
        return check_top_n(&profile, &out).await;
    }
    if windowed {
        return check_windows(&profile, &out, published.len()).await;
    }
    let mut arrived = HashSet::new();
    for payload in out.values() {
        let v: serde_json::Value =
            serde_json::from_slice(payload).context("an output message is not JSON")?;
        if let Some(id) = v.get("message_id").and_then(|x| x.as_str()) {
            arrived.insert(id.to_string());
        }
    }
    let missing = published.difference(&arrived).count();
    let invented = arrived.difference(&published).count();
    let filters = sql.inserts.iter().any(|i| i.has_where());
    println!(
        "bids published: {}, bids read: {}, rows written: {}, distinct bids arrived: {}, {}: {missing}",
        published.len(),
        summary.messages_read,
        summary.rows_written,
        arrived.intersection(&published).count(),
        if filters { "not written (the WHERE dropped them)" } else { "missing" }
    );
    anyhow::ensure!(
        invented == 0,
        "{invented} rows in topic bids-out name no published bid"
    );
    if !filters {
        anyhow::ensure!(
            missing == 0,
            "{missing} bids did not arrive in topic bids-out"
        );
        println!("quickstart ok: every bid arrived");
        return Ok(());
    }
    // A filtering pipeline writes some bids only; every bid, kept or dropped, must still
    // have been acknowledged: nothing may come back on the input subscription.
    let left = admin::drain(&profile, "bids-sub", 2, None, Duration::from_secs(5)).await?;
    anyhow::ensure!(
        left.is_empty(),
        "{} bids were not acknowledged on bids-sub",
        left.len()
    );
    println!(
        "quickstart ok: {} of {} bids passed the pipeline's WHERE; every bid was acknowledged",
        arrived.len(),
        published.len()
    );
    Ok(())
}

/// A windowed example (`examples/windows.sql`) counts the bids of each window and
/// auction in column `bids`: their sum is every bid published, and every bid was
/// acknowledged (nothing comes back on the input subscription).
async fn check_windows(
    profile: &pubsub_schema::PubSubProfile,
    out: &std::collections::HashMap<String, Vec<u8>>,
    published: usize,
) -> anyhow::Result<()> {
    let mut counted = 0u64;
    for payload in out.values() {
        let v: serde_json::Value =
            serde_json::from_slice(payload).context("an output message is not JSON")?;
        counted += v
            .get("bids")
            .and_then(|x| x.as_u64())
            .context("a window row has no count in column 'bids'")?;
    }
    let left = admin::drain(profile, "bids-sub", 2, None, Duration::from_secs(5)).await?;
    println!(
        "bids published: {published}, window rows: {}, bids counted in them: {counted}",
        out.len()
    );
    anyhow::ensure!(
        counted == published as u64,
        "the windows counted {counted} bids of {published}"
    );
    anyhow::ensure!(
        left.is_empty(),
        "{} bids were not acknowledged on bids-sub",
        left.len()
    );
    println!("quickstart ok: every bid was counted in exactly one window and acknowledged");
    Ok(())
}

/// A top-N example (`examples/top_n.sql`) ranks each window's auctions in column
/// `row_num` by `bids`: each window's rows are numbered 1, 2, ... without a gap, at most
/// three, by bids non-increasing, and every bid was acknowledged.
async fn check_top_n(
    profile: &pubsub_schema::PubSubProfile,
    out: &std::collections::HashMap<String, Vec<u8>>,
) -> anyhow::Result<()> {
    let mut windows: std::collections::BTreeMap<String, Vec<(u64, u64)>> = Default::default();
    for payload in out.values() {
        let v: serde_json::Value =
            serde_json::from_slice(payload).context("an output message is not JSON")?;
        let (start, rank, bids) = v
            .get("window_start")
            .and_then(|x| x.as_str())
            .zip(v.get("row_num").and_then(|x| x.as_u64()))
            .zip(v.get("bids").and_then(|x| x.as_u64()))
            .map(|((s, r), b)| (s.to_string(), r, b))
            .context("a row has no window_start, row_num or bids")?;
        windows.entry(start).or_default().push((rank, bids));
    }
    for (start, rows) in &mut windows {
        rows.sort();
        let ranks: Vec<u64> = rows.iter().map(|r| r.0).collect();
        anyhow::ensure!(
            ranks == (1..=ranks.len() as u64).collect::<Vec<_>>() && ranks.len() <= 3,
            "window {start} has ranks {ranks:?}"
        );
        anyhow::ensure!(
            rows.windows(2).all(|w| w[0].1 >= w[1].1),
            "window {start} is not ranked by bids: {rows:?}"
        );
    }
    let left = admin::drain(profile, "bids-sub", 2, None, Duration::from_secs(5)).await?;
    println!(
        "windows ranked: {}, rows: {}",
        windows.len(),
        windows.values().map(Vec::len).sum::<usize>()
    );
    anyhow::ensure!(
        left.is_empty(),
        "{} bids were not acknowledged on bids-sub",
        left.len()
    );
    println!("quickstart ok: each window's top auctions are ranked by bids, and every bid was acknowledged");
    Ok(())
}

/// A changelog example (`examples/changelog.sql`) counts each auction's bids in column
/// `bids` of its rows: only creates and updates (counts only grow), the last row of each
/// auction (its highest count, whatever order the changes arrive in) sums to every bid
/// published, and every bid was acknowledged.
async fn check_changelog(
    profile: &pubsub_schema::PubSubProfile,
    out: &std::collections::HashMap<String, Vec<u8>>,
    published: usize,
) -> anyhow::Result<()> {
    let mut last: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for payload in out.values() {
        let v: serde_json::Value =
            serde_json::from_slice(payload).context("an output message is not JSON")?;
        let op = v.get("op").and_then(|x| x.as_str()).unwrap_or_default();
        anyhow::ensure!(
            op == "c" || op == "u",
            "a change of op '{op}' in a changelog of counts that only grow: {v}"
        );
        let after = &v["after"];
        let (auction, bids) = after
            .get("auction")
            .and_then(|x| x.as_u64())
            .zip(after.get("bids").and_then(|x| x.as_u64()))
            .context("a change has no auction or bids in its new row")?;
        let e = last.entry(auction).or_default();
        *e = (*e).max(bids);
    }
    let counted: u64 = last.values().sum();
    let left = admin::drain(profile, "bids-sub", 2, None, Duration::from_secs(5)).await?;
    println!(
        "bids published: {published}, changes: {}, auctions: {}, bids counted in their last rows: {counted}",
        out.len(),
        last.len()
    );
    anyhow::ensure!(
        counted == published as u64,
        "the last rows counted {counted} bids of {published}"
    );
    anyhow::ensure!(
        left.is_empty(),
        "{} bids were not acknowledged on bids-sub",
        left.len()
    );
    println!(
        "quickstart ok: every auction's last row counts its bids, and every bid was acknowledged"
    );
    Ok(())
}

/// `n` NEXMark bids as JSON, from the generator the in-process `nexmark` source uses
/// (`Events`): each bid is its own event. `nexmark::EventGenerator::default()` is not
/// that: its derived `Default` has step 0 and repeats event 0 forever.
fn bid_payloads(n: usize) -> Vec<Vec<u8>> {
    let mut events = Events::new(EventKind::Bid, 0, 1);
    (0..n).map(|_| events.next_json().to_vec()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quickstart_bids_vary() {
        let bids: Vec<serde_json::Value> = bid_payloads(1000)
            .iter()
            .map(|p| serde_json::from_slice(p).unwrap())
            .collect();
        let distinct = |field: &str| {
            let mut v: Vec<String> = bids.iter().map(|b| b[field].to_string()).collect();
            v.sort();
            v.dedup();
            v.len()
        };
        // Prices are drawn per bid (about 950 distinct of 1,000 measured); a WHERE on
        // them keeps some bids, not all or none.
        assert!(distinct("price") > 900, "prices: {}", distinct("price"));
        assert!(
            distinct("channel") > 100,
            "channels: {}",
            distinct("channel")
        );
        let over_10_dollars = bids
            .iter()
            .filter(|b| b["price"].as_u64().unwrap() > 1000)
            .count();
        assert!((500..1000).contains(&over_10_dollars), "{over_10_dollars}");
    }
}
