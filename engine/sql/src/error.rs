//! The one error type of the SQL front end.

use std::fmt;

/// A SQL error: syntax errors carry sqlparser's `Line: L, Column: C`; planning errors name
/// the table, column or option at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError(pub String);

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SqlError {}
