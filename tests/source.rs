//! End-to-end tests of the `pubsub-connector` binary against the real Pub/Sub emulator.

mod support;
