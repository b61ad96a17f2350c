//! Goal 6: what SQL expressions cost per row. NEXMark bids -> blackhole twice in each
//! round, in alternating order: a bare projection of four columns, and the same four
//! columns computed by four expressions under a filter. Both encode the same number of
//! rows as JSON, so the difference in CPU per row is the filter and the expressions.

use super::{alternating, counters, metrics_addr, per_1k, run_pipeline, summary};
use crate::BenchArgs;

/// The bare projection: four columns as they come.
const BARE: &str = "SELECT auction, bidder, price, channel FROM bids";
/// The same four columns through four expressions (integer arithmetic, a string
/// function) under a filter of two predicates. Every generated bid has a positive price
/// and a channel, so the filter keeps every row (the planner cannot know that), and both
/// pipelines encode the same rows.
const EXPRESSIONS: &str = "SELECT auction % 1000, bidder * 2 + auction, price * 908 / 1000, \
     lower(channel) FROM bids WHERE price > 0 AND channel IS NOT NULL";

/// The `bids` table of examples/nexmark-blackhole.sql (everything after
/// `CREATE TABLE bids`) with `event-count` set to `n`.
pub(super) fn nexmark_bids(n: u64) -> String {
    let example = include_str!("../../../examples/nexmark-blackhole.sql");
    example
        .split("CREATE TABLE discard")
        .next()
        .and_then(|s| s.split("CREATE TABLE bids").nth(1))
        .expect("the nexmark example declares `bids` before `discard`")
        .replace(
            "'event-count' = '1000000'",
            &format!("'event-count' = '{n}'"),
        )
}

/// One pipeline of the comparison: `select` into a four-column blackhole table on one
/// worker. Returns CPU seconds per 1,000 rows, from the first bid generated to the last
/// row encoded.
async fn cpu_per_1k_rows(
    args: &BenchArgs,
    name: &str,
    select: &str,
    n: u64,
) -> anyhow::Result<f64> {
    let sql = format!(
        "CREATE TABLE bids{}
         CREATE TABLE discard (a BIGINT, b BIGINT, c BIGINT, d TEXT) \
           WITH ('connector' = 'blackhole', 'format' = 'json');
         INSERT INTO discard {select};",
        nexmark_bids(n)
    );
    let addr = metrics_addr()?;
    let run = run_pipeline(
        args,
        name,
        &sql,
        &["--workers", "1"],
        counters(&addr, ("messages_received", "rows_written", "rows_written")),
        None,
    )
    .await?;
    let written = super::process::count_after(&run.stdout, "rows written:");
    anyhow::ensure!(
        written == n,
        "{name}: {written} of {n} rows written (the filter must keep every bid)"
    );
    let streaming = run
        .streaming(n)
        .ok_or_else(|| anyhow::anyhow!("{name}: no bid was generated"))?;
    Ok(per_1k(streaming.cpu_s, n))
}

/// Goal 6: `--expression-rows` bids through each pipeline, `--rounds` times.
pub async fn expressions(args: &BenchArgs) -> anyhow::Result<()> {
    let n = args.expression_rows;
    println!(
        "expressions: {n} bids -> blackhole on 1 worker, rounds: {}; bare: {BARE}; \
         expressions: {EXPRESSIONS}",
        args.rounds
    );
    let (mut bare, mut expr) = (Vec::new(), Vec::new());
    for r in 0..args.rounds {
        let (e, b) = alternating(
            r,
            cpu_per_1k_rows(args, "expressions", EXPRESSIONS, n),
            cpu_per_1k_rows(args, "bare", BARE, n),
        )
        .await?;
        println!(
            "round {r}: bare projection {b:.4} s CPU per 1,000 rows; filter and four \
             expressions {e:.4} s CPU per 1,000 rows"
        );
        bare.push(b);
        expr.push(e);
    }
    let ratios: Vec<f64> = expr.iter().zip(&bare).map(|(e, b)| e / b).collect();
    println!(
        "{} s per 1,000 rows",
        summary("bare projection CPU", &bare, 4)
    );
    println!("{} s per 1,000 rows", summary("expressions CPU", &expr, 4));
    println!(
        "{}",
        summary("ratio CPU expressions/bare projection", &ratios, 2)
    );
    Ok(())
}
