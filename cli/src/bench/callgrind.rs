//! Reading a callgrind output file (`callgrind.out`, format version 1): the total
//! instruction count and each function's own (exclusive) count, and the split of those
//! counts by component of the message path (issue 45, decision 0049).
//!
//! Exclusive counts sum to the total, so the split adds up; a function's callees are
//! counted under their own component. The component is read from the function's crate
//! (the first path segment of its demangled name) and, for this workspace's crates and the
//! client, from its module.

use std::collections::HashMap;

/// One callgrind dump: the `Ir` total and the exclusive `Ir` of each function by name.
#[derive(Debug, Default)]
pub struct Counts {
    pub total: u64,
    pub by_function: HashMap<String, u64>,
}

/// Parses the text of a callgrind output file written with the default events (`Ir`
/// first). Errors name the line that could not be read.
pub fn parse(text: &str) -> anyhow::Result<Counts> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut counts = Counts::default();
    let mut positions = 1usize;
    let mut current = String::from("(unknown)");
    // The cost line after `calls=` is the call's inclusive cost: the callee's, not ours.
    let mut skip_next_cost = false;
    for (i, line) in text.lines().enumerate() {
        let first = line.as_bytes().first().copied().unwrap_or(b'#');
        if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'*') {
            if std::mem::take(&mut skip_next_cost) {
                continue;
            }
            let ir = line
                .split_whitespace()
                .nth(positions)
                .map_or(Ok(0), str::parse::<u64>)
                .map_err(|e| anyhow::anyhow!("callgrind line {}: {e}: {line}", i + 1))?;
            *counts.by_function.entry(current.clone()).or_default() += ir;
        } else if let Some(spec) = line.strip_prefix("fn=") {
            current = resolve(&mut names, spec);
        } else if let Some(spec) = line.strip_prefix("cfn=") {
            resolve(&mut names, spec); // may define a compressed name first used later
        } else if line.starts_with("calls=") {
            skip_next_cost = true;
        } else if let Some(e) = line.strip_prefix("events:") {
            anyhow::ensure!(
                e.split_whitespace().next() == Some("Ir"),
                "callgrind line {}: the first event is not Ir (instructions): {line}",
                i + 1
            );
        } else if let Some(p) = line.strip_prefix("positions:") {
            positions = p.split_whitespace().count().max(1);
        } else if let Some(t) = line
            .strip_prefix("totals:")
            .or_else(|| line.strip_prefix("summary:"))
        {
            counts.total = t
                .split_whitespace()
                .next()
                .unwrap_or("0")
                .parse()
                .map_err(|e| anyhow::anyhow!("callgrind line {}: {e}: {line}", i + 1))?;
        }
    }
    let summed: u64 = counts.by_function.values().sum();
    if counts.total == 0 {
        counts.total = summed;
    }
    anyhow::ensure!(
        summed == counts.total,
        "callgrind file: functions sum to {summed} instructions, its total says {}",
        counts.total
    );
    Ok(counts)
}

/// `(id) name` defines a compressed name, `(id)` uses one, a bare `name` is itself.
fn resolve(names: &mut HashMap<String, String>, spec: &str) -> String {
    let Some(rest) = spec.strip_prefix('(') else {
        return spec.to_string();
    };
    let (id, name) = rest.split_once(')').unwrap_or((rest, ""));
    let name = name.trim();
    if name.is_empty() {
        names.get(id).cloned().unwrap_or_else(|| format!("({id})"))
    } else {
        names.insert(id.to_string(), name.to_string());
        name.to_string()
    }
}

/// The components, in the order they are printed.
pub const COMPONENTS: &[&str] = &[
    "client: streaming pull (subscriber, leases, acks)",
    "client: publisher",
    "client: other (gax, auth)",
    "gRPC transport (tonic, h2, hyper, prost, protos)",
    "connector: stream intake (pull tasks, splits)",
    "connector: decode (JSON -> Arrow)",
    "connector: ack bookkeeping (tracker, checkpoint)",
    "connector: source other (watermarks, flow)",
    "connector: encode (Arrow -> JSON)",
    "connector: sink (batches, publishes)",
    "engine: dataflow and hand-offs (Timely, channels)",
    "SQL and Arrow (DataFusion, arrow)",
    "async runtime (tokio, futures)",
    "allocator (malloc, free)",
    "memory copies (memcpy, memmove, memset)",
    "hash maps and hashing",
    "metrics and logging",
    "std, core and libc (other)",
    "other",
];

/// The component of the function named `name` (a demangled Rust path, a C symbol, or
/// `0x...` for an address without a symbol).
pub fn component(name: &str) -> &'static str {
    let c = |i: usize| COMPONENTS[i];
    let path = owner_path(name);
    let krate = path.split("::").next().unwrap_or("");
    let module = |m: &str| path.starts_with(m);
    let bare = !name.contains("::");
    // `__rustc::__rust_alloc`, `__rustc::__rdl_realloc`: the allocator shims.
    if bare && is_allocator(name) || krate == "__rustc" || module("alloc::alloc::") {
        return c(13);
    }
    if bare
        && ["memcpy", "memmove", "memset", "mempcpy"]
            .iter()
            .any(|m| name.contains(m))
    {
        return c(14);
    }
    match krate {
        "google_cloud_pubsub" if module("google_cloud_pubsub::subscriber") => c(0),
        "google_cloud_pubsub" if module("google_cloud_pubsub::publisher") => c(1),
        "google_cloud_pubsub" if module("google_cloud_pubsub::generated") => c(3),
        "google_cloud_pubsub"
        | "google_cloud_gax"
        | "google_cloud_gax_internal"
        | "google_cloud_auth"
        | "google_cloud_wkt"
        | "gaxi" => c(2),
        "tonic" | "h2" | "hyper" | "hyper_util" | "prost" | "tower" | "http" | "http_body"
        | "http_body_util" | "bytes" | "httparse" | "pin_project_lite" => c(3),
        "pubsub_connector_core" => connector(path),
        "pubsub_engine_format" if module("pubsub_engine_format::ser") => c(8),
        // `json_str` writes string literals (encode) and reads and shows them (decode).
        "pubsub_engine_format"
            if module("pubsub_engine_format::json_str::json_string")
                || module("pubsub_engine_format::json_str::show") =>
        {
            c(5)
        }
        "pubsub_engine_format" if module("pubsub_engine_format::json_str") => c(8),
        "pubsub_engine_format" => c(5),
        "serde_json" | "serde" | "itoa" | "ryu" | "memchr" | "simdutf8" => c(5),
        // The window state runs in the dataflow's window operator (as before issue 46);
        // the window stage's plan (`WindowKind`) was the SQL layer's.
        "pubsub_engine_plan" if module("pubsub_engine_plan::window::stage") => c(11),
        "pubsub_engine_plan" if module("pubsub_engine_plan::window") => c(10),
        "pubsub_engine_plan" | "pubsub_engine_sql" => c(11),
        "pubsub_engine_spi"
        | "pubsub_engine_types"
        | "pubsub_engine_runtime"
        | "timely"
        | "timely_communication"
        | "timely_container"
        | "timely_bytes"
        | "timely_logging"
        | "crossbeam_channel"
        | "crossbeam_utils"
        | "crossbeam_queue"
        | "crossbeam_epoch"
        | "columnation"
        | "abomonation" => c(10),
        k if k.starts_with("datafusion") || k.starts_with("arrow") => c(11),
        "tokio" | "futures_util" | "futures_core" | "futures_channel" | "futures_executor"
        | "async_stream" | "tokio_util" | "tokio_stream" | "parking_lot" | "parking_lot_core" => {
            c(12)
        }
        "hashbrown" | "ahash" | "foldhash" | "siphasher" | "indexmap" => c(15),
        "std" if module("std::collections::hash") || module("std::hash") => c(15),
        "core" if module("core::hash") => c(15),
        "tracing" | "tracing_core" | "tracing_subscriber" | "prometheus" | "metrics"
        | "prometheus_client" => c(16),
        "std" | "core" | "alloc" => c(17),
        _ if bare => c(17),
        _ => c(18),
    }
}

fn connector(path: &str) -> &'static str {
    let c = |i: usize| COMPONENTS[i];
    let m = |p: &str| path.starts_with(&format!("pubsub_connector_core::{p}"));
    if m("source::pull") || m("source::lease") || m("source::splits") || m("source::reader::intake")
    {
        c(4)
    } else if m("source::reader::decode") || m("source::metadata") || m("source::event_time") {
        c(5)
    } else if m("source::tracker") || m("source::reader::checkpoint") || m("source::reader::dedup")
    {
        c(6)
    } else if m("source") {
        c(7)
    } else if m("sink::encode") {
        c(8)
    } else if m("sink") {
        c(9)
    } else {
        c(18)
    }
}

/// The path that owns `name`: `<T as Trait>::f` is `T`'s; `core::ptr::drop_in_place<T>`
/// (a type's drop glue) and `core::ptr::...<T>` helpers are `T`'s.
fn owner_path(name: &str) -> &str {
    let mut s = name.trim_start_matches('<').trim_start_matches('&');
    s = s.trim_start_matches("mut ").trim_start_matches("dyn ");
    if let Some(inner) = s.strip_prefix("core::ptr::drop_in_place<") {
        return owner_path(inner);
    }
    s
}

fn is_allocator(name: &str) -> bool {
    let n = name.trim_start_matches('_');
    [
        "malloc",
        "free",
        "realloc",
        "calloc",
        "int_malloc",
        "int_free",
        "int_realloc",
        "libc_malloc",
        "libc_free",
        "libc_realloc",
        "libc_calloc",
        "posix_memalign",
        "mid_memalign",
        "memalign",
        "cfree",
        "tcache",
        "unlink_chunk",
        "rust_alloc",
        "rust_dealloc",
        "rust_realloc",
        "rust_alloc_zeroed",
        "rdl_alloc",
        "rdl_dealloc",
        "rdl_realloc",
        "sysmalloc",
        "alloc_perturb",
        "checked_request2size",
    ]
    .iter()
    .any(|a| n.starts_with(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in callgrind's own compressed form (names defined at first use, by `fn=`
    /// or `cfn=`; a call's inclusive cost after `calls=` is not the caller's own).
    const SAMPLE: &str = "\
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir
summary: 1000

ob=(1) /bin/x
fl=(1) ???
fn=(1) pubsub_engine_format::de::decode
0 300
cfn=(2) malloc
calls=2 0
0 100
fn=(2)
0 100
fn=(3) <h2::proto::Conn as core::future::Future>::poll
+3 250
* 50
fn=(4) core::ptr::drop_in_place<pubsub_connector_core::source::tracker::Tracker>
0 200
fn=(5) __memcpy_avx_unaligned_erms
0 100
totals: 1000
";

    #[test]
    fn exclusive_counts_sum_to_the_total_and_calls_are_the_callees() {
        let c = parse(SAMPLE).unwrap();
        assert_eq!(c.total, 1000);
        assert_eq!(c.by_function["pubsub_engine_format::de::decode"], 300);
        assert_eq!(
            c.by_function["malloc"], 100,
            "the call line's 100 is not decode's"
        );
        assert_eq!(
            c.by_function["<h2::proto::Conn as core::future::Future>::poll"],
            300
        );
    }

    #[test]
    fn a_file_of_other_events_is_refused() {
        let e = parse(&SAMPLE.replace("events: Ir", "events: Dr")).unwrap_err();
        assert!(e.to_string().contains("not Ir"), "{e}");
    }

    #[test]
    fn a_file_whose_functions_do_not_sum_to_its_total_is_refused() {
        let e = parse(&SAMPLE.replace("totals: 1000", "totals: 999")).unwrap_err();
        assert!(e.to_string().contains("sum to 1000"), "{e}");
    }

    #[test]
    fn functions_fall_in_their_component() {
        let c = parse(SAMPLE).unwrap();
        let of = |n: &str| component(n);
        assert_eq!(of("pubsub_engine_format::de::decode"), COMPONENTS[5]);
        assert_eq!(of("malloc"), COMPONENTS[13]);
        assert_eq!(of("__rustc::__rdl_realloc"), COMPONENTS[13]);
        assert_eq!(of("_int_free"), COMPONENTS[13]);
        assert_eq!(
            of("<h2::proto::Conn as core::future::Future>::poll"),
            COMPONENTS[3]
        );
        assert_eq!(
            of("core::ptr::drop_in_place<pubsub_connector_core::source::tracker::Tracker>"),
            COMPONENTS[6]
        );
        assert_eq!(of("__memcpy_avx_unaligned_erms"), COMPONENTS[14]);
        assert_eq!(of("pubsub_engine_format::json_str::write"), COMPONENTS[8]);
        assert_eq!(
            of("pubsub_engine_format::json_str::json_string"),
            COMPONENTS[5]
        );
        assert_eq!(
            of("pubsub_engine_plan::window::WindowState::update"),
            COMPONENTS[10]
        );
        assert_eq!(
            of("pubsub_engine_plan::eval::checked_exprs"),
            COMPONENTS[11]
        );
        assert_eq!(
            of("google_cloud_pubsub::subscriber::stream::Stream::next"),
            COMPONENTS[0]
        );
        assert_eq!(
            of("timely::dataflow::operators::Input::input"),
            COMPONENTS[10]
        );
        assert_eq!(of("some_unknown_crate::f"), COMPONENTS[18]);
        let total: u64 = c.by_function.values().sum();
        assert_eq!(total, c.total);
    }
}
