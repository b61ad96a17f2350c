//! Issue 32, item 7: what a window costs. NEXMark bids -> blackhole twice in each round on
//! one worker, both reading the same bids with the same `WATERMARK FOR date_time` (so the
//! watermark work is on both sides): a stateless projection of every bid, and
//! `TUMBLE(10 s)` count and max price per auction, which writes one row per auction and
//! window. Printed: the ratio of their throughputs (bids generated over the time from the
//! first bid to the process's exit, final checkpoint included on both sides), CPU per
//! 1,000 bids, and the window state's bytes per open group at its peak (gauges
//! `window_state_bytes` and `window_groups`). A third run, the projection over a table
//! without `WATERMARK FOR`, gives what the watermarks cost the stateless pipeline. A
//! fourth, the tumble on a `cluster` of 2 processes x 1 worker (keys routed between them),
//! gives its throughput over twice the 1 x 1 tumble's: the fraction of 2 cores it reaches
//! (the bench itself and the sampling share those cores). A fifth, the updating
//! `count(*)` per auction into a Debezium changelog (issue 47), gives its throughput and
//! CPU per bid over the stateless projection's and its state bytes per group. A sixth,
//! a windowed join (issue 48) of two TUMBLE(10 s) aggregates of the bids per auction (a
//! count, and the high bids' count and top price), beside the same two aggregates
//! written apart: the join's throughput and CPU over theirs, and its state bytes per
//! open window and key (both sides' groups of one auction and window).

use super::{alternating, metrics_addr, per_1k, run_command, summary};
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

/// Issue 47: the updating aggregate (no window) writing a changelog of each auction's
/// count, flushed every second.
const UPDATING: &str = "CREATE TABLE out (auction BIGINT, bids BIGINT) \
       WITH ('connector' = 'blackhole', 'format' = 'debezium_json');
     INSERT INTO out SELECT auction, count(*) AS bids FROM bids GROUP BY auction;";

/// Issue 48: two windowed aggregates of the bids, joined on their window and auction.
const JOIN: &str = "CREATE TABLE out (auction BIGINT, bids BIGINT, high BIGINT, top BIGINT) \
       WITH ('connector' = 'blackhole', 'format' = 'json');
     INSERT INTO out SELECT a.auction, a.bids, h.high, h.top
     FROM (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction, count(*) AS bids
           FROM bids GROUP BY window, auction) a
     LEFT JOIN (SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction, count(*) AS high,
                       max(price) AS top
                FROM bids WHERE price >= 100000 GROUP BY window, auction) h
     ON a.window = h.window AND a.auction = h.auction;";

/// The join's two aggregates alone, each written to its own table.
const JOIN_SIDES: &str = "CREATE TABLE out_a (auction BIGINT, bids BIGINT) \
       WITH ('connector' = 'blackhole', 'format' = 'json');
     CREATE TABLE out_h (auction BIGINT, high BIGINT, top BIGINT) \
       WITH ('connector' = 'blackhole', 'format' = 'json');
     INSERT INTO out_a SELECT auction, bids FROM (
       SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction, count(*) AS bids
       FROM bids GROUP BY window, auction);
     INSERT INTO out_h SELECT auction, high, top FROM (
       SELECT TUMBLE(INTERVAL '10' SECOND) AS window, auction, count(*) AS high,
              max(price) AS top
       FROM bids WHERE price >= 100000 GROUP BY window, auction);";

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

/// One run of `query` over `n` bids: on one process of one worker, or with `processes`
/// > 1 a `cluster` of that many processes of one worker each (group keys routed between
/// them).
async fn measure(
    args: &BenchArgs,
    name: &str,
    query: &str,
    n: u64,
    watermark: bool,
    processes: usize,
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
    let p = processes.to_string();
    let run = if processes > 1 {
        let extra = ["--processes", p.as_str(), "--workers", "1", "--drain"];
        run_command(args, "cluster", name, &sql, &extra, watch, None).await?
    } else {
        let extra = ["--workers", "1", "--drain"];
        run_command(args, "run", name, &sql, &extra, watch, None).await?
    };
    let written = super::process::count_all(&run.stdout, "rows written:");
    let read = super::process::count_all(&run.stdout, "messages read:");
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
    let (mut plain_cpu, mut watermark_cost, mut scaling) = (vec![], vec![], vec![]);
    let (mut upd_ratio, mut upd_cpu, mut upd_bytes) = (vec![], vec![], vec![]);
    let (mut join_ratio, mut join_cpu, mut join_bytes) = (vec![], vec![], vec![]);
    for r in 0..args.rounds {
        // The windowed join beside its two aggregates written apart.
        let (j, apart) = alternating(
            r,
            measure(args, "join", JOIN, n, true, 1),
            measure(args, "join-sides", JOIN_SIDES, n, true, 1),
        )
        .await?;
        anyhow::ensure!(j.written > 0, "join: no row was written");
        // The join writes one row per auction and window: the count side's rows.
        let per_window_key = 2.0 * j.bytes_per_group;
        println!(
            "round {r}: windowed join {:.0} bids/s, {:.4} s CPU per 1,000, {} rows; its two \
             aggregates apart {:.0} bids/s, {:.4} s CPU per 1,000, {} rows; join state peak \
             {} groups, {:.0} bytes per open window and key (both sides)",
            j.rate,
            j.cpu_1k,
            j.written,
            apart.rate,
            apart.cpu_1k,
            apart.written,
            j.peak_groups,
            per_window_key
        );
        join_ratio.push(j.rate / apart.rate);
        join_cpu.push(j.cpu_1k / apart.cpu_1k);
        join_bytes.push(per_window_key);
        let (w, s) = alternating(
            r,
            measure(args, "tumble", TUMBLE, n, true, 1),
            measure(args, "stateless", STATELESS, n, true, 1),
        )
        .await?;
        // The updating count per auction, beside the same stateless projection.
        let u = measure(args, "updating", UPDATING, n, true, 1).await?;
        anyhow::ensure!(u.written > 0, "updating: no change was written");
        println!(
            "round {r}: updating count(*) per auction {:.0} bids/s, {:.4} s CPU per 1,000, \
             {} changes, peak {} groups at {:.0} bytes each",
            u.rate, u.cpu_1k, u.written, u.peak_groups, u.bytes_per_group
        );
        upd_ratio.push(u.rate / s.rate);
        upd_cpu.push(u.cpu_1k / s.cpu_1k);
        upd_bytes.push(u.bytes_per_group);
        // The same projection without WATERMARK FOR: what the watermarks cost.
        let plain = measure(args, "plain", STATELESS, n, false, 1).await?;
        // The windows on 2 processes of 1 worker: keys cross the processes.
        let two = measure(args, "tumble-2x1", TUMBLE, n, true, 2).await?;
        anyhow::ensure!(
            two.written == w.written,
            "tumble on 2 processes wrote {} window rows, on 1 process {}",
            two.written,
            w.written
        );
        scaling.push(two.rate / (2.0 * w.rate));
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
             peak {} open groups at {:.0} bytes each; tumble on 2 processes x 1 worker \
             {:.0} bids/s",
            s.rate,
            s.cpu_1k,
            plain.cpu_1k,
            w.rate,
            w.cpu_1k,
            w.written,
            w.peak_groups,
            w.bytes_per_group,
            two.rate
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
    println!(
        "{}",
        summary("ratio throughput updating/stateless", &upd_ratio, 2)
    );
    println!(
        "{}",
        summary("ratio CPU per bid updating/stateless", &upd_cpu, 2)
    );
    println!(
        "{} bytes (window_state_bytes / window_groups at the peak)",
        summary("updating state per group", &upd_bytes, 0)
    );
    println!(
        "{}",
        summary(
            "ratio throughput join/its two aggregates apart",
            &join_ratio,
            2
        )
    );
    println!(
        "{}",
        summary(
            "ratio CPU per bid join/its two aggregates apart",
            &join_cpu,
            2
        )
    );
    println!(
        "{} bytes (2 x window_state_bytes / window_groups at the peak: a count-side and a \
         high-side group per key when both hold one)",
        summary("join state per open window and key", &join_bytes, 0)
    );
    println!(
        "{} (throughput of tumble on 2 processes x 1 worker over twice 1 x 1: the fraction \
         of 2 cores' worth it reaches)",
        summary("scaling tumble 2x1 / (2 x 1x1)", &scaling, 2)
    );
    Ok(())
}
