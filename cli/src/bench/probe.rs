//! The backlog probe's cost (issue 44, decision 0047): `--probes N` probes of a
//! subscription holding a backlog, one after another, from this process. Reports each
//! probe's round trip (a snapshot created, its expire time read, the snapshot deleted)
//! and this process's CPU per probe, and how far the reading is from the oldest unacked
//! message's publish time (known here: the first message published, read back from a
//! second subscription). A pipeline probes once per subscription per
//! `scan.watermark.backlog-probe-interval` (2 s by default), so the CPU it adds per second
//! is the CPU per probe divided by the interval.

use std::time::{Duration, Instant};

use pubsub_connector_core::source::backlog;
use pubsub_connector_core::{admin, client};
use pubsub_schema::PubSubProfile;

use super::process::cpu_seconds_of;
use super::BenchArgs;

pub async fn probes(args: &BenchArgs, profile: &PubSubProfile) -> anyhow::Result<()> {
    let n = args.probes;
    let id = format!("bench-probe-{}", std::process::id());
    let (topic, sub, witness) = (id.clone(), format!("{id}-sub"), format!("{id}-witness"));
    admin::create_topic(profile, &topic).await?;
    admin::create_subscription(profile, &sub, &topic, 60).await?;
    admin::create_subscription(profile, &witness, &topic, 60).await?;
    admin::publish_all(
        profile,
        &topic,
        (0..100).map(|i| format!("{i}").into_bytes()).collect(),
        100,
    )
    .await?;
    let oldest = admin::drain_messages(profile, &witness, 1, Some(100), Duration::from_secs(5))
        .await?
        .iter()
        .filter_map(|m| m.publish_time.as_ref())
        .map(|t| t.seconds() as i128 * 1_000_000_000 + i128::from(t.nanos()))
        .min()
        .ok_or_else(|| anyhow::anyhow!("the backlog was not published"))?;
    let admin_client = client::subscription_admin(profile).await?;
    let full = client::subscription_path(&profile.project, &sub);
    let me = std::process::id();
    let cpu0 = cpu_seconds_of(me);
    let (mut trips, mut errors) = (Vec::with_capacity(n), Vec::new());
    for _ in 0..n {
        let name = backlog::snapshot_name(&profile.project, &full, backlog::unix_ms());
        let t = Instant::now();
        match backlog::probe(&admin_client, &full, &name).await {
            Ok(backlog::Probed {
                oldest_unacked_ns: ns,
                left: None,
            }) => {
                trips.push(t.elapsed().as_secs_f64() * 1_000.0);
                let margin = backlog::RESOLUTION_MARGIN.as_nanos() as i128;
                errors.push(((i128::from(ns) + margin - oldest) as f64 / 1e6).abs());
            }
            Ok(backlog::Probed { left: Some(e), .. }) | Err((e, _)) => {
                anyhow::bail!("probe failed: {e}")
            }
        }
    }
    let cpu_ms = (cpu_seconds_of(me) - cpu0) * 1_000.0 / n.max(1) as f64;
    trips.sort_by(f64::total_cmp);
    let mean = trips.iter().sum::<f64>() / trips.len().max(1) as f64;
    let max_err = errors.iter().copied().fold(0.0, f64::max);
    println!(
        "backlog probe: {n} probes, round trip mean {mean:.1} ms, median {:.1} ms, max {:.1} ms; CPU of this process {cpu_ms:.2} ms per probe ({:.3}% of a core at one probe per 2 s); reading within {max_err:.0} ms of the oldest unacked publish time (before the {} ms margin)",
        trips[trips.len() / 2],
        trips[trips.len() - 1],
        cpu_ms / 20.0,
        backlog::RESOLUTION_MARGIN.as_millis()
    );
    let _ = admin::delete_subscription(profile, &sub).await;
    let _ = admin::delete_subscription(profile, &witness).await;
    let _ = admin::delete_topic(profile, &topic).await;
    Ok(())
}
