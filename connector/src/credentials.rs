//! The one place that turns a [`PubSubProfile`] into what a client builder needs: an
//! endpoint override and credentials (SPEC 4, 5.3, 7, 10).
//!
//! - Emulator: `http://host:port` and anonymous credentials (the client ignores
//!   `PUBSUB_EMULATOR_HOST`).
//! - Service account key file: read here, when a client is built at job start (never at
//!   plan time), checked field by field, its private key tried once locally, then handed to
//!   `google_cloud_auth::credentials::service_account::Builder`.
//! - Application default credentials: nothing is set; the client finds them.
//!
//! A key file that cannot be used fails with a [`KeyFileError`]: a category that names the
//! option `'service-account-key-file'`, never the path, never any content of the file and
//! never the text of a library error (which could quote the content). Nothing here logs.

use std::fmt;
use std::io::Read;

use google_cloud_auth::credentials::{anonymous, service_account, Credentials};
use pubsub_schema::{Authentication, PubSubProfile};
use pubsub_table_options::SERVICE_ACCOUNT_KEY_FILE;
use serde_json::Value;

/// Key files Google issues are about 2.4 KB; a larger file is refused unread past this.
pub const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// The fields a service account key must hold as strings (what the client library reads).
const REQUIRED_FIELDS: [&str; 4] = [
    "client_email",
    "private_key_id",
    "private_key",
    "project_id",
];

/// Credential file types that are not service account keys, named in the error when found.
const OTHER_TYPES: [&str; 5] = [
    "authorized_user",
    "external_account",
    "external_account_authorized_user",
    "impersonated_service_account",
    "gdch_service_account",
];

/// What a client builder needs for a profile.
pub struct Access {
    /// Endpoint override (`http://host:port` of an emulator); `None`: the service's own.
    pub endpoint: Option<String>,
    /// Credentials to use; `None`: the client finds application default credentials.
    pub credentials: Option<Credentials>,
}

/// Shows the endpoint and whether credentials are set, never the credentials (the
/// library's own `Debug` of service account credentials shows fields of the key file).
impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("endpoint", &self.endpoint)
            .field(
                "credentials",
                &format_args!(
                    "{}",
                    if self.credentials.is_some() {
                        "<set>"
                    } else {
                        "<application default>"
                    }
                ),
            )
            .finish()
    }
}

/// The endpoint and credentials for `profile`. Reads a service account key file now. Call
/// it inside a Tokio runtime: the library starts refreshing a key's token at once.
pub fn access(profile: &PubSubProfile) -> Result<Access, KeyFileError> {
    match &profile.authentication {
        Authentication::Emulator { endpoint } => Ok(Access {
            endpoint: Some(format!("http://{endpoint}")),
            credentials: Some(anonymous::Builder::new().build()),
        }),
        Authentication::ApplicationDefault => Ok(Access {
            endpoint: None,
            credentials: None,
        }),
        Authentication::ServiceAccountKeyFile { path } => Ok(Access {
            endpoint: None,
            credentials: Some(load_key_file(path)?),
        }),
    }
}

/// Why a service account key file cannot be used. Holds categories and field names only:
/// neither the path nor anything read from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyFileError {
    /// Nothing at the path.
    NotFound,
    /// The path names a directory.
    IsDirectory,
    /// Not a regular file (a device, a pipe, a socket): refused before opening.
    NotARegularFile,
    /// The process may not read it.
    PermissionDenied,
    /// Another I/O failure, by kind.
    Unreadable(std::io::ErrorKind),
    /// Larger than [`MAX_KEY_FILE_BYTES`].
    TooLarge,
    /// Empty or only whitespace.
    Empty,
    /// Not JSON; the position of the first error.
    NotJson { line: usize, column: usize },
    /// JSON, but not an object.
    NotAnObject,
    /// A field the key needs is absent (or null).
    MissingField(&'static str),
    /// A field the key needs is not a string.
    FieldNotString(&'static str),
    /// A field the key needs is an empty string.
    EmptyField(&'static str),
    /// `type` is another known kind of credential file (named), or unknown (`None`).
    WrongType(Option<&'static str>),
    /// `private_key` is not a PEM PKCS#8 RSA private key that can sign.
    UnusablePrivateKey,
    /// The client library refused it for another reason (its text is not passed on).
    Rejected,
}

impl std::error::Error for KeyFileError {}

impl fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use KeyFileError::*;
        write!(
            f,
            "the service account key file set by '{SERVICE_ACCOUNT_KEY_FILE}' "
        )?;
        let where_read =
            "(it is read by the process that runs the job, on that machine; its path is not shown)";
        let not_a_key = "is not a service account key";
        match self {
            NotFound => write!(f, "was not found {where_read}"),
            IsDirectory => write!(f, "is not readable: it is a directory, not a file"),
            NotARegularFile => write!(
                f,
                "is not readable: it is not a regular file (a device, pipe or socket)"
            ),
            PermissionDenied => write!(f, "is not readable: permission denied {where_read}"),
            Unreadable(kind) => write!(f, "is not readable: {kind}"),
            TooLarge => write!(
                f,
                "{not_a_key}: it is larger than {} KiB",
                MAX_KEY_FILE_BYTES / 1024
            ),
            Empty => write!(f, "is not JSON: the file is empty"),
            NotJson { line, column } => {
                write!(f, "is not JSON: syntax error at line {line}, column {column}")
            }
            NotAnObject => write!(f, "{not_a_key}: it is JSON, but not an object"),
            MissingField(field) => write!(f, "{not_a_key} (missing field '{field}')"),
            FieldNotString(field) => write!(f, "{not_a_key} (field '{field}' is not a string)"),
            EmptyField(field) => write!(f, "{not_a_key} (field '{field}' is empty)"),
            WrongType(Some(t)) => write!(
                f,
                "{not_a_key}: its 'type' is '{t}', not 'service_account' (use such a file as application default credentials, GOOGLE_APPLICATION_CREDENTIALS, with '{SERVICE_ACCOUNT_KEY_FILE}' unset)"
            ),
            WrongType(None) => write!(f, "{not_a_key}: its 'type' is not 'service_account'"),
            UnusablePrivateKey => write!(
                f,
                "{not_a_key}: its 'private_key' is not a usable RSA private key in PEM (PKCS#8) form"
            ),
            Rejected => write!(f, "{not_a_key}: the client library refused its format"),
        }
    }
}

/// Reads, checks and loads a key file.
fn load_key_file(path: &str) -> Result<Credentials, KeyFileError> {
    let bytes = read_bounded(std::path::Path::new(path))?;
    let key = parse_key(&bytes)?;
    check_private_key(&key)?;
    service_account::Builder::new(key)
        .build()
        .map_err(|_| KeyFileError::Rejected)
}

fn io_error(e: std::io::Error) -> KeyFileError {
    match e.kind() {
        std::io::ErrorKind::NotFound => KeyFileError::NotFound,
        std::io::ErrorKind::PermissionDenied => KeyFileError::PermissionDenied,
        std::io::ErrorKind::IsADirectory => KeyFileError::IsDirectory,
        kind => KeyFileError::Unreadable(kind),
    }
}

/// At most [`MAX_KEY_FILE_BYTES`] of a regular file; a pipe or device is refused before it
/// is opened (opening a FIFO would block).
fn read_bounded(path: &std::path::Path) -> Result<Vec<u8>, KeyFileError> {
    let meta = std::fs::metadata(path).map_err(io_error)?;
    if meta.is_dir() {
        return Err(KeyFileError::IsDirectory);
    }
    if !meta.is_file() {
        return Err(KeyFileError::NotARegularFile);
    }
    let file = std::fs::File::open(path).map_err(io_error)?;
    let mut bytes = Vec::with_capacity(meta.len().min(MAX_KEY_FILE_BYTES) as usize);
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(KeyFileError::TooLarge);
    }
    Ok(bytes)
}

/// Parses the JSON and checks the fields the client library needs, by name only.
fn parse_key(bytes: &[u8]) -> Result<Value, KeyFileError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(KeyFileError::Empty);
    }
    // serde_json's message can quote the input; only its position is kept.
    let value: Value = serde_json::from_slice(bytes).map_err(|e| KeyFileError::NotJson {
        line: e.line(),
        column: e.column(),
    })?;
    let object = value.as_object().ok_or(KeyFileError::NotAnObject)?;
    let string = |field: &'static str| match object.get(field) {
        None | Some(Value::Null) => Err(KeyFileError::MissingField(field)),
        Some(Value::String(s)) if s.trim().is_empty() => Err(KeyFileError::EmptyField(field)),
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(_) => Err(KeyFileError::FieldNotString(field)),
    };
    let kind = string("type")?;
    if kind != "service_account" {
        return Err(KeyFileError::WrongType(
            OTHER_TYPES.iter().find(|t| **t == kind).copied(),
        ));
    }
    for field in REQUIRED_FIELDS {
        string(field)?;
    }
    Ok(value)
}

/// Signs a probe with the key through the library's own signer (local, no network), so a
/// bad key fails now with a category, not at the first token request with a library
/// message that could quote a line of the PEM.
fn check_private_key(key: &Value) -> Result<(), KeyFileError> {
    let signer = service_account::Builder::new(key.clone())
        .build_signer()
        .map_err(|_| KeyFileError::Rejected)?;
    // The service account signer computes locally and never awaits I/O.
    futures::executor::block_on(signer.sign(b"pubsub-connector key check"))
        .map(|_| ())
        .map_err(|_| KeyFileError::UnusablePrivateKey)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    const MARKER: &str = "MARKER-7f3e9b21-do-not-print";

    fn key_file_profile(path: &Path) -> PubSubProfile {
        PubSubProfile {
            project: "p".into(),
            authentication: Authentication::ServiceAccountKeyFile {
                path: path.to_str().unwrap().to_string(),
            },
        }
    }

    /// A directory whose name carries the marker too, so a leaked path is caught.
    fn dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("creds-{MARKER}-"))
            .tempdir()
            .unwrap()
    }

    /// Loads `path` and returns the error message, asserting it names the option and
    /// holds neither the path nor the marker; the `Debug` forms are checked too.
    fn failure(path: &Path) -> (KeyFileError, String) {
        let profile = key_file_profile(path);
        let e = access(&profile).unwrap_err();
        let msg = e.to_string();
        for shown in [&msg, &format!("{e:?}"), &format!("{profile:?}")] {
            assert!(!shown.contains(MARKER), "leaks the marker: {shown}");
            assert!(
                !shown.contains(path.to_str().unwrap()),
                "leaks the path: {shown}"
            );
        }
        assert!(msg.contains("'service-account-key-file'"), "{msg}");
        (e, msg)
    }

    fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// A well-formed fake service account key with a fresh RSA key from `openssl`.
    pub(crate) fn fake_key(dir: &Path) -> Value {
        let pem_path = dir.join("rsa.pem");
        let out = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .arg("-out")
            .arg(&pem_path)
            .output()
            .expect("openssl is needed to make a throwaway RSA key");
        assert!(out.status.success(), "openssl genpkey failed");
        let pem = std::fs::read_to_string(&pem_path).unwrap();
        std::fs::remove_file(&pem_path).unwrap();
        serde_json::json!({
            "type": "service_account",
            "project_id": "fake-project",
            "private_key_id": format!("{MARKER}-key-id"),
            "private_key": pem,
            "client_email": format!("{MARKER}@fake-project.iam.gserviceaccount.com"),
            "client_id": "1",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": "https://oauth2.googleapis.com/token",
            "universe_domain": "googleapis.com"
        })
    }

    #[test]
    fn missing_file_is_not_found() {
        let d = dir();
        let (e, msg) = failure(&d.path().join("absent.json"));
        assert_eq!(e, KeyFileError::NotFound);
        assert!(msg.contains("was not found"), "{msg}");
    }

    #[test]
    fn directory_is_not_readable() {
        let d = dir();
        let sub = d.path().join(format!("{MARKER}.json"));
        std::fs::create_dir(&sub).unwrap();
        let (e, msg) = failure(&sub);
        assert_eq!(e, KeyFileError::IsDirectory);
        assert!(msg.contains("is not readable: it is a directory"), "{msg}");
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let d = dir();
        let fifo = d.path().join("key.fifo");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(ok.success());
        let (e, msg) = failure(&fifo);
        assert_eq!(e, KeyFileError::NotARegularFile);
        assert!(msg.contains("is not readable"), "{msg}");
    }

    #[test]
    fn unreadable_file_is_not_readable() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir();
        let p = write(d.path(), "key.json", &format!("{{\"x\": \"{MARKER}\"}}"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&p).is_ok() {
            return; // root reads anything: nothing to test here
        }
        let (e, msg) = failure(&p);
        assert_eq!(e, KeyFileError::PermissionDenied);
        assert!(msg.contains("is not readable: permission denied"), "{msg}");
    }

    #[test]
    fn not_json_names_the_position_only() {
        let d = dir();
        for (content, want) in [
            (
                format!("private_key = {MARKER}\n"),
                "is not JSON: syntax error at line 1, column 1",
            ),
            (
                format!("{{\"private_key\": \"{MARKER}\"\n"),
                "is not JSON: syntax error at line 2, column 0",
            ),
            (format!("{{\"a\": {MARKER}}}"), "is not JSON: syntax error"),
            (" \n".to_string(), "is not JSON: the file is empty"),
        ] {
            let p = write(d.path(), "key.json", &content);
            let (e, msg) = failure(&p);
            assert!(matches!(
                e,
                KeyFileError::NotJson { .. } | KeyFileError::Empty
            ));
            assert!(msg.contains(want), "{msg}");
        }
    }

    #[test]
    fn json_that_is_not_a_service_account_key_names_the_missing_field() {
        let d = dir();
        let full = fake_key(d.path());
        let cases: Vec<(Value, &str)> = vec![
            (
                serde_json::json!([MARKER]),
                "is not a service account key: it is JSON, but not an object",
            ),
            (
                serde_json::json!({"note": MARKER}),
                "is not a service account key (missing field 'type')",
            ),
            (
                serde_json::json!({"type": "authorized_user", "client_id": MARKER, "client_secret": MARKER, "refresh_token": MARKER}),
                "its 'type' is 'authorized_user', not 'service_account'",
            ),
            (
                serde_json::json!({"type": MARKER}),
                "its 'type' is not 'service_account'",
            ),
            (
                {
                    let mut v = full.clone();
                    v.as_object_mut().unwrap().remove("private_key");
                    v
                },
                "is not a service account key (missing field 'private_key')",
            ),
            (
                {
                    let mut v = full.clone();
                    v.as_object_mut().unwrap().remove("client_email");
                    v
                },
                "is not a service account key (missing field 'client_email')",
            ),
            (
                {
                    let mut v = full.clone();
                    v["project_id"] = serde_json::json!(42);
                    v
                },
                "is not a service account key (field 'project_id' is not a string)",
            ),
            (
                {
                    let mut v = full.clone();
                    v["private_key"] = serde_json::json!(format!(
                        "-----BEGIN PRIVATE KEY-----\n{MARKER}\n-----END PRIVATE KEY-----\n"
                    ));
                    v
                },
                "its 'private_key' is not a usable RSA private key",
            ),
            (
                {
                    let mut v = full.clone();
                    v["private_key"] = serde_json::json!(format!("{MARKER}\n"));
                    v
                },
                "its 'private_key' is not a usable RSA private key",
            ),
        ];
        for (content, want) in cases {
            let p = write(d.path(), "key.json", &content.to_string());
            let (_, msg) = failure(&p);
            assert!(msg.contains(want), "want '{want}' in: {msg}");
        }
    }

    #[test]
    fn oversized_file_is_refused() {
        let d = dir();
        let big = format!(
            "{{\"pad\": \"{}\", \"m\": \"{MARKER}\"}}",
            "x".repeat(MAX_KEY_FILE_BYTES as usize)
        );
        let p = write(d.path(), "key.json", &big);
        let (e, _) = failure(&p);
        assert_eq!(e, KeyFileError::TooLarge);
    }

    /// The library spawns its token refresh task on the runtime when the credentials are
    /// built; on this single-threaded runtime it never runs, as the test never yields.
    #[tokio::test(flavor = "current_thread")]
    async fn well_formed_key_builds_credentials_without_network() {
        let d = dir();
        let p = write(d.path(), "key.json", &fake_key(d.path()).to_string());
        let profile = key_file_profile(&p);
        let a = access(&profile).unwrap();
        assert!(a.endpoint.is_none() && a.credentials.is_some());
        let shown = format!("{a:?} {profile:?}");
        assert!(
            !shown.contains(MARKER) && !shown.contains(p.to_str().unwrap()),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn emulator_and_application_default() {
        let a = access(&crate::client::emulator_profile("p", "127.0.0.1:8085")).unwrap();
        assert_eq!(a.endpoint.as_deref(), Some("http://127.0.0.1:8085"));
        assert!(a.credentials.is_some());
        let a = access(&PubSubProfile {
            project: "p".into(),
            authentication: Authentication::ApplicationDefault,
        })
        .unwrap();
        assert!(a.endpoint.is_none() && a.credentials.is_none());
    }
}
