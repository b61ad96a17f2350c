//! Issue 32, item 7: what a window costs. NEXMark bids -> blackhole twice in each round on
//! one worker, both reading the same bids with the same `WATERMARK FOR date_time` (so the
//! watermark work is on both sides): a stateless projection of every bid, and
//! `TUMBLE(10 s)` count and max price per auction, which writes one row per auction and
//! window. Printed: the ratio of their throughputs (bids generated over the time from the
//! first bid to the process's exit, final checkpoint included on both sides), CPU per
//! 1,000 bids, and the window state's bytes per open group at its peak (gauges
//! `window_state_bytes` and `window_groups`). A third run, the projection over a table
//! without `WATERMARK FOR`, gives what the watermarks cost the stateless pipeline.

use super::{alternating, metrics_addr, per_1k, run_pipeline, summary};
use crate::bench::process::Watch;
use crate::BenchArgs;

const STATELESS: &str = "CREATE TABLE out (auction BIGINT, price BIGINT) \
       WITH ('connector' = 'blackhole', 'format' = 'json');
     INSERT INTO out SELECT auction, price FROM bids;";

const TUMBLE: &str = "CREATE TABLE out (auction BIGINT, bids BIGINT, max_price BIGINT) \
       WITH ('connector' = 'blackhole', 'format' = 'json');
     INSERT INTO out SELECT auction, bids, max_price FROM (
       SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction, count(*) AS bids,
              max(price) AS max_price
       FROM bids GROUP BY window, auction);";

/// One run's measures.
struct Measured {
    rate: f64,
    cpu_1k: f64,
    /// Peak `window_state_bytes` over `window_groups` at that sample (0 without windows).
    bytes_per_group: f64,
    peak_groups: u64,
    written: u64,
}

/// The `bids` table of the nexmark example with `n` bids and, with `watermark`, event
/// time `date_time`, 5 s out of order at most.
fn bids(n: u64, watermark: bool) -> String {
    let table = super::expressions::nexmark_bids(n);
    if !watermark {
        return format!("CREATE TABLE bids{table}");
    }
    let (columns, with) = table
        .split_once(") WITH (")
        .expect("the nexmark example declares columns, then WITH");
    format!(
        "CREATE TABLE bids{columns},\n    WATERMARK FOR date_time AS date_time - INTERVAL '5' SECOND\n) WITH ({with}"
    )
}

async fn measure(
    args: &BenchArgs,
    name: &str,
    query: &str,
    n: u64,
    watermark: bool,
) -> anyhow::Result<Measured> {
    let sql = format!("{}\n{query}", bids(n, watermark));
    let addr = metrics_addr()?;
    let watch = Watch {
        addr: &addr,
        start: "messages_received",
        end: "messages_received",
        after: "messages_received",
        gauges: &["window_groups", "window_state_bytes"],
    };
    // Every window fires at the end of input (--drain): both write all they will.
    let run = run_pipeline(
        args,
        name,
        &sql,
        &["--workers", "1", "--drain"],
        watch,
        None,
    )
    .await?;
    let written = super::process::count_after(&run.stdout, "rows written:");
    let read = super::process::count_after(&run.stdout, "messages read:");
    anyhow::ensure!(read == n, "{name}: {read} of {n} bids read");
    let streaming = run
        .streaming(n)
        .ok_or_else(|| anyhow::anyhow!("{name}: no bid was generated"))?;
    let peak = run
        .samples
        .iter()
        .max_by_key(|s| s.gauges[1])
        .map(|s| (s.gauges[0], s.gauges[1]))
        .unwrap_or((0, 0));
    Ok(Measured {
        rate: n as f64 / (run.wall_s - streaming.start_s).max(0.001),
        cpu_1k: per_1k(run.cpu_s, n),
        bytes_per_group: if peak.0 == 0 {
            0.0
        } else {
            peak.1 as f64 / peak.0 as f64
        },
        peak_groups: peak.0,
        written,
    })
}

/// `--window-rows` bids through each pipeline, `--rounds` times.
pub async fn windows(args: &BenchArgs) -> anyhow::Result<()> {
    let n = args.window_rows;
    println!(
        "windows: {n} bids -> blackhole on 1 worker, rounds: {}; stateless projection beside \
         TUMBLE(10 s) count and max price per auction",
        args.rounds
    );
    let (mut ratio, mut cpu, mut stateless_cpu, mut per_group) = (vec![], vec![], vec![], vec![]);
    let (mut plain_cpu, mut watermark_cost) = (vec![], vec![]);
    for r in 0..args.rounds {
        let (w, s) = alternating(
            r,
            measure(args, "tumble", TUMBLE, n, true),
            measure(args, "stateless", STATELESS, n, true),
        )
        .await?;
        // The same projection without WATERMARK FOR: what the watermarks cost.
        let plain = measure(args, "plain", STATELESS, n, false).await?;
        plain_cpu.push(plain.cpu_1k);
        watermark_cost.push(s.cpu_1k / plain.cpu_1k);
        anyhow::ensure!(
            s.written == n,
            "stateless: {} of {n} rows written",
            s.written
        );
        anyhow::ensure!(w.written > 0, "tumble: no window was written");
        println!(
            "round {r}: stateless {:.0} bids/s, {:.4} s CPU per 1,000 ({:.4} without \
             WATERMARK FOR); tumble {:.0} bids/s, {:.4} s CPU per 1,000, {} window rows, \
             peak {} open groups at {:.0} bytes each",
            s.rate,
            s.cpu_1k,
            plain.cpu_1k,
            w.rate,
            w.cpu_1k,
            w.written,
            w.peak_groups,
            w.bytes_per_group
        );
        ratio.push(w.rate / s.rate);
        cpu.push(w.cpu_1k);
        stateless_cpu.push(s.cpu_1k);
        per_group.push(w.bytes_per_group);
    }
    println!(
        "{}",
        summary("ratio throughput tumble/stateless", &ratio, 2)
    );
    println!(
        "{} s per 1,000 bids",
        summary("stateless CPU", &stateless_cpu, 4)
    );
    println!("{} s per 1,000 bids", summary("tumble CPU", &cpu, 4));
    println!(
        "{} s per 1,000 bids",
        summary("stateless CPU without WATERMARK FOR", &plain_cpu, 4)
    );
    println!(
        "{}",
        summary(
            "ratio CPU stateless with/without watermarks",
            &watermark_cost,
            2
        )
    );
    println!(
        "{} bytes (window_state_bytes / window_groups at the peak)",
        summary("state per open group", &per_group, 0)
    );
    Ok(())
}
