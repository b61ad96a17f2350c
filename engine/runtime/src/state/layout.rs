//! The names that tell the two layouts of a state location apart: a local directory
//! holds [`FILE`], an object store [`POINTER`]; each store names the other's to explain a
//! location written through the other kind of URL.

/// The local layout's checkpoint file, replaced as a whole.
pub(super) const FILE: &str = "checkpoint.json";
/// The object-store layout's pointer object under the prefix.
pub(super) const POINTER: &str = "latest";
