//! Tests only (`checkpoint_protocol.rs`): the checkpoint protocol end to end, SQL planned
//! by the front end and run by the runtime with an in-memory connector. The runtime does
//! not depend on the SQL front end, so the tests that need both live here.
