//! How a batch of changes travels from an updating query to a changelog sink (format
//! `debezium_json`, issue 47): the sink table's declared columns hold each change's new
//! row (`after`), NULL in every column for a delete; then one column per declared
//! column, named [`BEFORE_PREFIX`] + its name, holds the old row, NULL for a create; then
//! [`OP_COLUMN`] says which (`c`, `u` or `d`); then, when the sink stamps record ids, the
//! record id column. Every column of such a batch may be NULL.
//!
//! A batch without [`OP_COLUMN`] (an append-only query) is all creates.
//!
//! A changelog source (format `debezium_json`) emits the same layout over all of its
//! columns, hidden ones included ([`crate::ConnectionSchema::rows_schema`]): a `u` holds
//! both rows, and a query reading it evaluates its SELECT on each row apart.

/// The column holding each change's operation: [`CREATE`], [`UPDATE`] or [`DELETE`].
pub const OP_COLUMN: &str = "__op";
/// The prefix of the columns holding each change's old row.
pub const BEFORE_PREFIX: &str = "__before.";
/// A row that did not exist: `before` is NULL.
pub const CREATE: &str = "c";
/// A row replaced by another with the same key.
pub const UPDATE: &str = "u";
/// A row that no longer exists: `after` is NULL.
pub const DELETE: &str = "d";
/// Debezium's snapshot read of an existing row: read as a create.
pub const READ: &str = "r";

/// The name of the column holding the old value of declared column `name`.
pub fn before_column(name: &str) -> String {
    format!("{BEFORE_PREFIX}{name}")
}
