//! `--state-dir` values: a directory path or an object-store URL, and how they are shown.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreScheme};
use url::Url;

use pubsub_engine_spi::redact::{redact_url as redact, url_scheme};

/// The option whose value a location is, for errors.
const OPTION: &str = "--state-dir";
/// What a user may pass, for errors.
const SUPPORTED: &str = "use a directory, file://, s3://, gs:// or az://";

/// A parsed `--state-dir`.
pub(super) enum Location {
    /// A plain path: the local state directory.
    Dir(PathBuf),
    /// An object store, the prefix in it, and the URL without credentials.
    Store {
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        describe: String,
    },
}

/// The error for `location`, naming the option and the (redacted) value.
fn invalid(location: &str, why: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{OPTION} '{}': {why}", redact(location))
}

/// Environment variables the object-store builders read for credentials and settings
/// (`AWS_*`, `GOOGLE_*`, `AZURE_*`, as each builder's `from_env` does), as options for
/// `parse_url_opts`.
fn env_options() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            ["AWS_", "GOOGLE_", "AZURE_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .collect()
}

/// Parses a `--state-dir` value. URLs are handed to object_store (`parse_url_opts`, with
/// credentials from the environment); `file://` gets a local file store that fsyncs every
/// write. No request is made here: an unreachable store or bad credentials show at the
/// first `load`.
pub(super) fn parse(location: &str) -> anyhow::Result<Location> {
    let Some(scheme) = url_scheme(location) else {
        if location.is_empty() {
            return Err(invalid(
                location,
                "empty (use a directory, file://, s3://, gs:// or az://)",
            ));
        }
        return Ok(Location::Dir(PathBuf::from(location)));
    };
    let scheme = scheme.to_ascii_lowercase();
    let url = Url::parse(location).map_err(|e| invalid(location, format!("malformed URL: {e}")))?;
    let (kind, prefix) = match ObjectStoreScheme::parse(&url) {
        Ok(parsed) => parsed,
        Err(e) => {
            let hint = match scheme.as_str() {
                "file" => "malformed URL: a file:// URL needs an absolute path and no host (file:///abs/path)".to_string(),
                "s3" | "s3a" | "gs" | "az" | "adl" | "azure" | "abfs" | "abfss" | "http" | "https" => {
                    format!("malformed URL: {scheme}:// needs a bucket or container ({scheme}://bucket/prefix): {e}")
                }
                _ => format!("unsupported URL scheme '{scheme}' ({SUPPORTED})"),
            };
            return Err(invalid(location, hint));
        }
    };
    let describe = redact(location);
    let (store, prefix): (Arc<dyn ObjectStore>, Path) = match kind {
        ObjectStoreScheme::Local => (
            Arc::new(object_store::local::LocalFileSystem::new().with_fsync(true)),
            prefix,
        ),
        ObjectStoreScheme::Memory => {
            return Err(invalid(
                location,
                format!("an in-memory store does not outlive the process, and a checkpoint is for the restart ({SUPPORTED})"),
            ))
        }
        ObjectStoreScheme::Http => {
            return Err(invalid(
                location,
                format!("unsupported URL scheme '{scheme}': plain HTTP/WebDAV stores are not built in ({SUPPORTED}; https URLs of S3 or Azure Blob Storage work)"),
            ))
        }
        _ => {
            let (store, prefix) = object_store::parse_url_opts(&url, env_options())
                .map_err(|e| invalid(location, format!("cannot configure the object store: {e}")))?;
            (Arc::from(store), prefix)
        }
    };
    Ok(Location::Store {
        store,
        prefix,
        describe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_and_urls_are_told_apart() {
        for path in [
            "state",
            "./state",
            "/var/lib/x",
            "C:/state",
            "a:b",
            "dir/with://inside",
            "state:x",
        ] {
            assert_eq!(url_scheme(path), None, "{path}");
        }
        assert_eq!(url_scheme("file:///tmp/x"), Some("file"));
        assert_eq!(url_scheme("file:/tmp/x"), Some("file"));
        assert_eq!(url_scheme("s3://b/p"), Some("s3"));
        assert_eq!(url_scheme("ftp://x"), Some("ftp"));
    }
}
