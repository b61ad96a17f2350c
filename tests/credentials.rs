//! End-to-end: `'service-account-key-file'` through the real `pubsub-connector run` binary.
//! A job whose key file cannot be used fails at start naming the option, and neither its
//! stdout nor its stderr ever holds the file's path or anything from its content. No test
//! here needs the emulator or a network: the one that gets as far as asking Google for a
//! token runs in a network namespace of its own where one exists (`unshare -n`), and every
//! run is bounded by a timeout that kills the child (a hang is a failure).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use support::{finish, Workdir};

/// Every run ends well within this; past it the child is killed and the test fails.
const LIMIT: Duration = Duration::from_secs(90);

/// A marker unique to this run, planted in the key file's content and in its path.
fn marker() -> String {
    format!("KEYFILE-MARKER-{}-{:x}", std::process::id(), rand_ish())
}

fn rand_ish() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A Pub/Sub source reading with the key file into a blackhole sink.
fn pipeline(key_file: &Path, extra: &str) -> String {
    format!(
        "CREATE TABLE src (seq BIGINT) WITH (
            'connector' = 'pubsub', 'project' = 'creds-test', 'subscription' = 'creds-sub',
            'service-account-key-file' = '{}', 'format' = 'json' {extra});
         CREATE TABLE dst (seq BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO dst SELECT seq FROM src;",
        key_file.display()
    )
}

/// A temp dir whose name holds the marker, so a leaked path is caught by either check.
fn key_dir(marker: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{marker}-"))
        .tempdir()
        .unwrap()
}

/// Whether this process may make a network namespace (`unshare -n` needs CAP_SYS_ADMIN).
fn netns_available() -> bool {
    std::process::Command::new("unshare")
        .args(["-n", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Runs `pubsub-connector run` on the workdir's pipeline (in a network namespace of its
/// own if `isolated` and possible) with trace logging; returns (code, stdout, stderr).
/// A hang is caught by [`LIMIT`].
async fn run(w: &Workdir, isolated: bool) -> (i32, String, String) {
    let bin = env!("CARGO_BIN_EXE_pubsub-connector");
    let mut cmd = if isolated && netns_available() {
        let mut c = tokio::process::Command::new("unshare");
        c.arg("-n").arg(bin);
        c
    } else {
        tokio::process::Command::new(bin)
    };
    cmd.arg("run")
        .arg(w.pipeline())
        .arg("--state-dir")
        .arg(w.state())
        .args(["--stop-when-idle", "5s"])
        // Every log line of every crate, as verbose as it gets.
        .env("RUST_LOG", "trace")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().expect("spawn pubsub-connector");
    finish(child, LIMIT).await
}

fn assert_no_leak(what: &str, out: &str, path: &Path, marker: &str) {
    let p = path.to_str().unwrap();
    assert!(!out.contains(marker), "{what} holds the marker:\n{out}");
    assert!(!out.contains(p), "{what} holds the key file path:\n{out}");
    let dir = path.parent().unwrap().to_str().unwrap();
    assert!(
        !out.contains(dir),
        "{what} holds the key file's directory:\n{out}"
    );
}

/// A well-formed fake service account key, with a fresh RSA key from `openssl`; the
/// marker is in its `client_email` and `private_key_id`.
fn fake_key(dir: &Path, marker: &str) -> serde_json::Value {
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
        "project_id": "creds-test",
        "private_key_id": format!("{marker}-key-id"),
        "private_key": pem,
        "client_email": format!("{marker}@creds-test.iam.gserviceaccount.com"),
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
        "universe_domain": "googleapis.com"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_file_that_cannot_be_used_fails_the_job_at_start_naming_the_option_only() {
    let marker = marker();
    let dir = key_dir(&marker);
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        (
            "not JSON",
            Some(format!("private_key: {marker}\n")),
            "is not JSON: syntax error at line 1, column 1",
        ),
        (
            "JSON but not a service account key",
            Some(
                serde_json::json!({"type": "service_account", "client_email": marker, "private_key_id": marker, "project_id": marker})
                    .to_string(),
            ),
            "is not a service account key (missing field 'private_key')",
        ),
        ("missing", None, "was not found"),
    ];
    for (case, content, want) in cases {
        let key = dir.path().join(format!("{marker}-key.json"));
        let _ = std::fs::remove_file(&key);
        if let Some(c) = &content {
            std::fs::write(&key, c).unwrap();
        }
        let w = Workdir::new(&pipeline(&key, ""));
        let (code, stdout, stderr) = run(&w, true).await;
        // No restart fixes the file: exit 2, which `cluster` does not restart.
        assert_eq!(code, 2, "{case}: exit 2\nstderr: {stderr}");
        assert!(
            stderr.contains("'service-account-key-file'") && stderr.contains(want),
            "{case}: want '{want}' naming the option in stderr:\n{stderr}"
        );
        // At start: before any checkpoint.
        assert_eq!(w.checkpoint_epoch(), None, "{case}: no checkpoint");
        assert_no_leak(&format!("{case}: stdout"), &stdout, &key, &marker);
        assert_no_leak(&format!("{case}: stderr"), &stderr, &key, &marker);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_well_formed_key_fails_at_start_without_a_network_naming_the_option_only() {
    let marker = marker();
    let dir = key_dir(&marker);
    let key = dir.path().join(format!("{marker}-key.json"));
    std::fs::write(&key, fake_key(dir.path(), &marker).to_string()).unwrap();
    let w = Workdir::new(&pipeline(&key, ""));
    let (code, stdout, stderr) = run(&w, true).await;
    assert_eq!(code, 1, "a failed job exits 1\nstderr: {stderr}");
    // The key loads; the start-up check cannot reach Google (no network here), within its
    // bound of 3 attempts of 5 s, and names the credentials by their option.
    assert!(
        stderr.contains("the service account key file set by 'service-account-key-file'"),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("subscription projects/creds-test/subscriptions/creds-sub"),
        "the start-up check names the subscription: {stderr}"
    );
    assert_eq!(w.checkpoint_epoch(), None, "no checkpoint");
    assert_no_leak("stdout", &stdout, &key, &marker);
    assert_no_leak("stderr", &stderr, &key, &marker);
    // Nor the key's own fields (the marker covers client_email and private_key_id).
    assert!(!stderr.contains("PRIVATE KEY"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_endpoint_and_key_file_together_are_refused_at_plan_time_naming_both() {
    let marker = marker();
    let dir = key_dir(&marker);
    let key: PathBuf = dir.path().join(format!("{marker}-key.json"));
    let w = Workdir::new(&pipeline(&key, ", 'emulator-endpoint' = '127.0.0.1:1'"));
    let (code, stdout, stderr) = run(&w, false).await;
    assert_eq!(code, 2, "a bad pipeline exits 2: {stderr}");
    assert!(
        stderr.contains(
            "options 'emulator-endpoint' and 'service-account-key-file' cannot both be set"
        ),
        "{stderr}"
    );
    assert_no_leak("stdout", &stdout, &key, &marker);
    assert_no_leak("stderr", &stderr, &key, &marker);
}

/// A dead-letter queue's own key file: refused at start naming the queue's option (not
/// the table's), never its path or content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_queue_key_file_that_cannot_be_used_is_named_by_its_own_option() {
    let marker = marker();
    let dir = key_dir(&marker);
    let key = dir.path().join(format!("{marker}-key.json"));
    std::fs::write(&key, format!("private_key: {marker}\n")).unwrap();
    let sql = format!(
        "CREATE TABLE src (seq BIGINT) WITH (
            'connector' = 'pubsub', 'project' = 'creds-test', 'subscription' = 'creds-sub',
            'emulator-endpoint' = '127.0.0.1:1', 'format' = 'json',
            'scan.deserialization-failure-policy' = 'dead-letter',
            'scan.dead-letter.topic' = 'dead',
            'scan.dead-letter.service-account-key-file' = '{}');
         CREATE TABLE dst (seq BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO dst SELECT seq FROM src;",
        key.display()
    );
    let w = Workdir::new(&sql);
    let (code, stdout, stderr) = run(&w, true).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("'scan.dead-letter.service-account-key-file'")
            && stderr.contains("is not JSON"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("by 'service-account-key-file'"),
        "{stderr}"
    );
    assert_eq!(w.checkpoint_epoch(), None);
    assert_no_leak("stdout", &stdout, &key, &marker);
    assert_no_leak("stderr", &stderr, &key, &marker);
}
