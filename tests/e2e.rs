//! The end-to-end tests: the real `pubsub-connector` binary as a child process against the
//! real Pub/Sub emulator. One test binary with a module per area (decision 0025): one link
//! instead of one per area, and one emulator shared by every test, each on its own topics
//! and subscriptions. Run one area with `cargo test --release --test e2e -- sink::`.

mod support;

mod alignment;
mod avro;
mod backlog;
mod changelog_source;
mod cluster;
mod credentials;
mod dead_letter;
mod decode;
mod dedup_cluster;
mod event_time;
mod exactly_once;
mod expressions;
mod graph;
mod join;
mod late_rows;
mod metrics;
mod permanent;
mod pipeline;
mod release;
mod restart;
mod serve;
mod sink;
mod source;
mod source_limits;
mod source_options;
mod sql;
mod supervisor;
mod unnest;
mod updating;
mod windows;
mod wizard;
