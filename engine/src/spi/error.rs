//! [`ConfigError`]: the marker of an error no restart can fix.

use std::fmt;

/// A configuration error found when a job starts: an option that does not fit the job
/// (e.g. the checkpoint interval) or the resources the server describes (e.g. per-key
/// ordering on a subscription without message ordering). Retrying the same job cannot
/// succeed, so the CLI exits 2 (as for a pipeline that cannot be planned) and `cluster`
/// does not restart it.
///
/// Wrap with [`ConfigError::wrap`] (e.g. in `Connector::prepare_source`); detect with
/// [`ConfigError::is_in`], which finds it under any `context` the runtime adds
/// (`table 'NAME': ...`). Displays as the error it wraps. Never wrap a transient failure
/// (an unreachable endpoint, UNAVAILABLE): a restart may fix those.
#[derive(Debug)]
pub struct ConfigError(anyhow::Error);

impl ConfigError {
    /// `error`, marked as not fixable by a restart.
    pub fn wrap(error: impl Into<anyhow::Error>) -> anyhow::Error {
        anyhow::Error::new(ConfigError(error.into()))
    }

    /// Whether `error` or any error in its chain is a [`ConfigError`].
    pub fn is_in(error: &anyhow::Error) -> bool {
        error.chain().any(|e| e.is::<ConfigError>())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

// No `source()`: the display already holds the wrapped chain, so `{:#}` shows it once.
impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn survives_context_and_displays_once() {
        let e = ConfigError::wrap(anyhow::anyhow!("option 'x' is invalid"));
        let e: anyhow::Error = Err::<(), _>(e).context("table 't'").unwrap_err();
        assert!(ConfigError::is_in(&e));
        assert_eq!(format!("{e:#}"), "table 't': option 'x' is invalid");
        assert!(!ConfigError::is_in(&anyhow::anyhow!("unavailable")));
    }
}
