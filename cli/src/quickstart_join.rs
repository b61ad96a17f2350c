//! The quickstart's check of `examples/join_rows.sql` (an updating join, issue 48): each
//! bid paired with the higher bids of the same bidder on the same auction.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use pubsub_connector_core::admin;

/// (auction, bidder, first price, raised to).
type Pair = (u64, u64, u64, u64);

/// Every pair of published bids (`bids`, JSON) of one bidder on one auction, the second
/// higher: what the join writes, with how often.
pub fn expected(bids: &[Vec<u8>]) -> anyhow::Result<BTreeMap<Pair, usize>> {
    let mut by: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for b in bids {
        let v: serde_json::Value = serde_json::from_slice(b)?;
        let n = |k: &str| {
            v[k].as_u64()
                .with_context(|| format!("a bid without {k}: {v}"))
        };
        by.entry((n("auction")?, n("bidder")?))
            .or_default()
            .push(n("price")?);
    }
    let mut out = BTreeMap::new();
    for ((auction, bidder), prices) in by {
        for a in &prices {
            for b in prices.iter().filter(|b| *b > a) {
                *out.entry((auction, bidder, *a, *b)).or_default() += 1;
            }
        }
    }
    Ok(out)
}

/// The changes written (`out`: message id -> payload) are creates of exactly the
/// `expected` pairs, and every bid was acknowledged.
pub async fn check(
    profile: &pubsub_schema::PubSubProfile,
    out: &std::collections::HashMap<String, Vec<u8>>,
    expected: &BTreeMap<Pair, usize>,
) -> anyhow::Result<()> {
    let mut got: BTreeMap<Pair, usize> = BTreeMap::new();
    for payload in out.values() {
        let v: serde_json::Value =
            serde_json::from_slice(payload).context("an output message is not JSON")?;
        anyhow::ensure!(v["op"] == "c", "a join of rows writes creates only: {v}");
        let a = &v["after"];
        let n = |k: &str| {
            a[k].as_u64()
                .with_context(|| format!("a change without {k}: {v}"))
        };
        *got.entry((
            n("auction")?,
            n("bidder")?,
            n("first_price")?,
            n("raised_to")?,
        ))
        .or_default() += 1;
    }
    let want: usize = expected.values().sum();
    println!("raises expected: {want}, written: {}", out.len());
    anyhow::ensure!(
        &got == expected,
        "the pairs written differ from the bids' own pairs ({} written, {want} expected)",
        out.len()
    );
    let left = admin::drain(profile, "bids-sub", 2, None, Duration::from_secs(5)).await?;
    anyhow::ensure!(
        left.is_empty(),
        "{} bids were not acknowledged on bids-sub",
        left.len()
    );
    println!("quickstart ok: each bid was joined with the higher bids of its bidder on its auction, and every bid was acknowledged");
    Ok(())
}
