//! The job id and the default state location of a pipeline (issue 31, items 2 and 5).
//!
//! A job id names a pipeline in its checkpoints (a job never restores another's) and in
//! the record ids its sinks stamp (two jobs never stamp one id). By default it is the
//! pipeline file's name without `.sql` (`pipelines/clicks.sql` -> `clicks`), so it does
//! not depend on the directory the job is started from or how the path is spelled; and
//! the state location defaults to `state/JOB_ID`, so two pipelines run from one folder
//! never meet in one checkpoint.

use std::path::Path;

/// The flag that sets the job id.
pub const FLAG: &str = "--job-id";

/// clap's parser for `--job-id`: the rules of `record_id::check_job_id`.
pub fn parse_job_id(s: &str) -> Result<String, String> {
    pubsub_engine_spi::record_id::check_job_id(s).map(|()| s.to_string())
}

/// The job id: `explicit` (already checked by [`parse_job_id`]) or the pipeline file's
/// stem. Errors: a stem that is no valid job id, naming the file and the flag to pass.
pub fn job_id(explicit: Option<&str>, pipeline: &Path) -> anyhow::Result<String> {
    if let Some(id) = explicit {
        return Ok(id.to_string());
    }
    let stem = pipeline
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    pubsub_engine_spi::record_id::check_job_id(&stem).map_err(|e| {
        anyhow::anyhow!(
            "the job id is the pipeline file's name without its extension, and {e}: rename {} or pass {FLAG} NAME",
            pipeline.display()
        )
    })?;
    Ok(stem)
}

/// The state location: `explicit` (`--state-dir`) or `state/JOB_ID`.
pub fn state_dir(explicit: Option<&str>, job_id: &str) -> String {
    explicit.map_or_else(|| format!("state/{job_id}"), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_job_is_the_file_name_and_owns_its_state() {
        let id = |p: &str| job_id(None, Path::new(p)).map_err(|e| e.to_string());
        assert_eq!(id("p1.sql").unwrap(), "p1");
        // However the path is spelled, one file is one job.
        assert_eq!(id("./dir/../p1.sql").unwrap(), "p1");
        assert_eq!(id("/abs/path/p1.sql").unwrap(), "p1");
        assert_eq!(id("examples/quickstart.sql").unwrap(), "quickstart");
        // Two pipelines in one folder get two locations.
        assert_ne!(state_dir(None, "p1"), state_dir(None, "p2"));
        assert_eq!(state_dir(None, "p1"), "state/p1");
        assert_eq!(state_dir(Some("/s"), "p1"), "/s");
        // An explicit id wins; a stem that cannot be an id names the flag.
        assert_eq!(
            job_id(Some("j"), Path::new("my pipeline.sql")).unwrap(),
            "j"
        );
        let e = id("my pipeline.sql").unwrap_err();
        assert!(
            e.contains("my pipeline.sql") && e.contains("--job-id"),
            "{e}"
        );
        assert!(parse_job_id("a/b").is_err());
    }
}
