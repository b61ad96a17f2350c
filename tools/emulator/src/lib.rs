//! Local tools around the connector, not the connector: what the end-to-end tests, the
//! fault campaign (`pubsub-connector chaos`), the benches and the local commands
//! (`emulator`, `--emulator`, `quickstart`) use to run against the Pub/Sub emulator. The
//! emulator launcher ([`emulator`]), the half-closing HTTP/2 proxy in front of it
//! ([`emulator_proxy`]), a TCP forwarder a fault test can cut ([`tcp_cutter`]) and a log
//! of the RPCs the proxy forwards ([`wire_log`]), and a second consumer that makes the
//! emulator deliver as the real service does ([`delivery`]). Nothing in the source or the sink
//! depends on them.

pub mod delivery;
pub mod emulator;
pub mod emulator_proxy;
pub mod tcp_cutter;
pub mod wire_log;
