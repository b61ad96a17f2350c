//! The markers of errors no restart can fix: [`ConfigError`] (found when a job starts)
//! and [`PermanentError`] (found while it runs). [`restart_cannot_fix`] finds either.

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

/// A failure while a job runs (or opens its resources) that a restart would repeat
/// exactly, because it comes from the job's data or from a local resource that the
/// restart finds in the same state: a row a sink must not publish under
/// `sink.failure-handler = fail` (oversized, empty), a message that cannot be decoded
/// under `scan.deserialization-failure-policy = fail` (Pub/Sub redelivers the same one),
/// a service account key file that is missing or not a key, a state directory locked by
/// another job. Restarting would only republish the rows written since the last
/// checkpoint, so the CLI exits 2 and `cluster` does not restart it (decision 0019).
///
/// Wrap at the failure's source with [`PermanentError::wrap`]; detect with
/// [`restart_cannot_fix`]. Displays as the error it wraps. Never wrap what may pass (a
/// timeout, UNAVAILABLE, an I/O error of unknown cause).
#[derive(Debug)]
pub struct PermanentError(anyhow::Error);

impl PermanentError {
    /// `error`, marked as repeated by any restart.
    pub fn wrap(error: impl Into<anyhow::Error>) -> anyhow::Error {
        anyhow::Error::new(PermanentError(error.into()))
    }

    /// Whether `error` or any error in its chain is a [`PermanentError`].
    pub fn is_in(error: &anyhow::Error) -> bool {
        error.chain().any(|e| e.is::<PermanentError>())
    }
}

impl fmt::Display for PermanentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for PermanentError {}

/// Whether `error` carries a [`ConfigError`] or a [`PermanentError`] anywhere in its
/// chain: the CLI exits 2 for it and `cluster` does not restart.
pub fn restart_cannot_fix(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|e| e.is::<ConfigError>() || e.is::<PermanentError>())
}

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

    #[test]
    fn either_marker_means_no_restart() {
        let e = PermanentError::wrap(anyhow::anyhow!("row 3 is too large"));
        let e: anyhow::Error = Err::<(), _>(e).context("sink 'd'").unwrap_err();
        assert!(restart_cannot_fix(&e) && PermanentError::is_in(&e));
        assert!(!ConfigError::is_in(&e));
        assert_eq!(format!("{e:#}"), "sink 'd': row 3 is too large");
        assert!(restart_cannot_fix(&ConfigError::wrap(anyhow::anyhow!("x"))));
        assert!(!restart_cannot_fix(&anyhow::anyhow!("unavailable")));
    }
}
