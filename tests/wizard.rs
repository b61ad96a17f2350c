//! The connection wizard in a real browser (issue 9): `pubsub-connector serve` against the
//! Pub/Sub emulator, driven through Debian's headless `chromium` by `chromedriver`
//! (WebDriver, through `fantoccini`) the way a person uses it: fill the profile form,
//! test and save it, fill the table form (autocomplete lists the subscription and topic),
//! fill the columns, run the table test (a decoded sample row and the bad message's
//! decode error), create the table and read the `CREATE TABLE` statement, then check a
//! pipeline using it (a sink without columns shows those of its query). Bad values the
//! server refuses show its error next to their field. Screenshots are kept in
//! `target/wizard-artifacts/`.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (`.ci/run` installs them); the
//! test fails, never skips, without them.

use crate::support;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use pubsub_connector_core::admin;
use serde_json::{json, Value};
use support::*;
use tokio::process::{Child, Command};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Upper bound of every wait; each is a poll that ends as soon as its condition holds.
const WAIT: Duration = Duration::from_secs(60);

/// The good message: a real payload (a topic with an Avro schema, JSON encoding; see
/// `shared/fixtures/payloads/README.md`).
fn good_payload() -> String {
    String::from_utf8(fixture("pubsub-schema-avro-json.json")).expect("the fixture is UTF-8")
}
const BAD: &str = "this is not JSON";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Where artifacts go: `$CARGO_TARGET_DIR` or the workspace's `target/`.
fn artifacts_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("wizard-artifacts");
    std::fs::create_dir_all(&dir).expect("create target/wizard-artifacts");
    dir
}

fn require_browser() {
    for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
        assert!(
            Path::new(path).exists(),
            "{path} is missing (Debian package `{package}`): the wizard's browser test needs \
             headless Chromium and chromedriver. Run `.ci/run`, or \
             `apt-get update && apt-get install chromium chromium-driver`."
        );
    }
}

/// Waits until something accepts connections on `port`, or panics naming `what`.
async fn wait_port(what: &str, port: u16, child: &mut Child) {
    let deadline = Instant::now() + WAIT;
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited ({status}) before listening on port {port}");
        }
        assert!(
            Instant::now() < deadline,
            "{what} does not listen on port {port} after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `script` (a function body returning a value) until it returns something other
/// than null/false/""; returns that. Panics naming `what` at the deadline.
async fn wait_js(c: &Client, what: &str, script: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let last;
        match c.execute(script, vec![]).await {
            Ok(v) if !matches!(v, Value::Null | Value::Bool(false)) && v != json!("") => return v,
            Ok(v) => last = v,
            Err(e) => last = json!(format!("script failed: {e}")),
        }
        if Instant::now() >= deadline {
            panic!("{what}: not seen within {WAIT:?} (last: {last})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn css(c: &Client, selector: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(selector))
        .await
        .unwrap_or_else(|e| panic!("no element '{selector}' within {WAIT:?}: {e}"))
}

async fn click(c: &Client, selector: &str) {
    css(c, selector)
        .await
        .click()
        .await
        .unwrap_or_else(|e| panic!("click '{selector}': {e}"));
}

/// Replaces the text of the input `selector`.
async fn fill(c: &Client, selector: &str, text: &str) {
    let e = css(c, selector).await;
    e.clear()
        .await
        .unwrap_or_else(|e| panic!("clear '{selector}': {e}"));
    e.send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("type into '{selector}': {e}"));
}

async fn text(c: &Client, selector: &str) -> String {
    css(c, selector).await.text().await.unwrap()
}

async fn screenshot(c: &Client, name: &str) -> PathBuf {
    let png = c.screenshot().await.expect("take a screenshot");
    let path = artifacts_dir().join(name);
    std::fs::write(&path, png).expect("write the screenshot");
    println!("screenshot: {}", path.display());
    path
}

/// The server's error for JSON pointer `field`: its text, after checking it stands right
/// after the input `input` (a selector) of that field.
async fn error_next_to(c: &Client, field: &str, input: &str) -> String {
    let selector = format!(".server-error[data-field='{field}']");
    let script = format!(
        "const e = document.querySelector({sel:?}); const i = document.querySelector({input:?});
         if (!e || !i || e.offsetParent === null) return null;
         return {{ text: e.textContent, nextToInput: e.previousElementSibling === i }};",
        sel = selector,
        input = input
    );
    let v = wait_js(c, &format!("the server's error for {field}"), &script).await;
    assert_eq!(
        v["nextToInput"],
        json!(true),
        "the error for {field} is not right after its input {input}: {v}"
    );
    let text = v["text"].as_str().unwrap_or_default().to_string();
    assert!(!text.trim().is_empty(), "empty error for {field}");
    text
}

/// Runs the wizard; the browser, chromedriver and the server are ended by `kill_on_drop`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wizard_creates_a_table_end_to_end() {
    require_browser();

    // A topic and a subscription; one good and one bad message come during the table test.
    let p = profile();
    let topic = unique("wiz-topic");
    let sub = unique("wiz-sub");
    admin::create_topic(&p, &topic).await.unwrap();
    admin::create_subscription(&p, &sub, &topic, 10)
        .await
        .unwrap();
    // The messages are published during the table test, once it has copied the
    // subscription: the emulator replays no snapshot into the copy (docs/decisions/0016).
    let good: Value = serde_json::from_str(&good_payload()).unwrap();

    // The server.
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let server_log = data.path().join("serve.log");
    let mut server = Command::new(env!("CARGO_BIN_EXE_pubsub-connector"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data.path().join("store"))
        .stdout(Stdio::from(std::fs::File::create(&server_log).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::options()
                .append(true)
                .open(&server_log)
                .unwrap(),
        ))
        .kill_on_drop(true)
        .spawn()
        .expect("start pubsub-connector serve");
    wait_port("pubsub-connector serve", port, &mut server).await;

    // chromedriver and a headless chromium of its own.
    let driver_port = free_port();
    let driver_log = data.path().join("chromedriver.log");
    let mut driver = Command::new(CHROMEDRIVER)
        .arg(format!("--port={driver_port}"))
        .stdout(Stdio::from(std::fs::File::create(&driver_log).unwrap()))
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromedriver");
    wait_port("chromedriver", driver_port, &mut driver).await;
    let profile_dir = tempfile::tempdir().unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1100,900",
                format!("--user-data-dir={}", profile_dir.path().display()),
            ],
        }),
    );
    let c = ClientBuilder::rustls()
        .expect("rustls client")
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{driver_port}"))
        .await
        .expect("start a chromium session through chromedriver");

    let run = drive(&c, port, &topic, &sub, &good);
    let outcome = tokio::time::timeout(Duration::from_secs(600), run).await;
    let failed = !matches!(outcome, Ok(Ok(())));
    if failed {
        // What the page showed and what the server said, for the CI log.
        if let Ok(png) = c.screenshot().await {
            let path = artifacts_dir().join("wizard-failure.png");
            if std::fs::write(&path, png).is_ok() {
                eprintln!("screenshot of the failure: {}", path.display());
            }
        }
        if let Ok(body) = c.execute("return document.body.innerText", vec![]).await {
            eprintln!("--- page text ---\n{}", body.as_str().unwrap_or_default());
        }
        eprintln!(
            "--- serve log ---\n{}",
            std::fs::read_to_string(&server_log).unwrap_or_default()
        );
    }
    let _ = c.close().await;
    drop(driver);
    drop(server);
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => std::panic::resume_unwind(e),
        Err(_) => panic!("the wizard did not finish within 600 s"),
    }
}

/// The steps, run as a task so that a failed assertion still lets the caller save a
/// screenshot and the server's log.
async fn drive(
    c: &Client,
    port: u16,
    topic: &str,
    sub: &str,
    good: &Value,
) -> Result<(), Box<dyn std::any::Any + Send>> {
    let (c, topic, sub, good) = (c.clone(), topic.to_string(), sub.to_string(), good.clone());
    tokio::spawn(async move { steps(&c, port, &topic, &sub, &good).await })
        .await
        .map_err(|e| e.into_panic())
}

async fn steps(c: &Client, port: u16, topic: &str, sub: &str, good: &Value) {
    let base = format!("http://127.0.0.1:{port}/");
    c.goto(&base).await.expect("open the wizard");

    // 1. The connector.
    click(c, "#connector-pubsub").await;

    // 2. The profile: a value the server refuses first (the schema only asks for a
    // string), shown next to the endpoint input.
    let project = "#profile-form [name='root[project]']";
    let endpoint_input = "#profile-form [name='root[authentication][endpoint]']";
    fill(c, project, PROJECT).await;
    css(
        c,
        "#profile-form select[data-role='variant'][data-field='/authentication']",
    )
    .await
    .select_by_label("Emulator")
    .await
    .expect("pick the Emulator authentication");
    fill(c, endpoint_input, "nohost").await;
    click(c, "#profile-test").await;
    let e = error_next_to(c, "/config/authentication/endpoint", endpoint_input).await;
    println!("server error next to the endpoint: {e}");
    screenshot(c, "wizard-profile-error.png").await;

    fill(c, endpoint_input, &endpoint()).await;
    click(c, "#profile-test").await;
    let outcome = wait_js(
        c,
        "the profile test's outcome",
        "return document.querySelector('#profile-test-result').getAttribute('data-outcome')",
    )
    .await;
    let result = text(c, "#profile-test-result").await;
    assert_eq!(outcome, json!("succeeded"), "profile test: {result}");
    assert!(
        c.find_all(Locator::Css("[data-testid=server-error]"))
            .await
            .unwrap()
            .is_empty(),
        "the endpoint's error is still shown after a good test"
    );
    println!("profile test: {result}");

    let profile_name = unique("wiz-profile");
    fill(c, "#profile-name", &profile_name).await;
    click(c, "#profile-save").await;

    // 3. The table: autocomplete lists the subscription and the topic.
    css(c, "#step-table:not([hidden])").await;
    wait_js(
        c,
        "autocomplete suggestions",
        "return document.querySelector('#autocomplete-status').dataset.state === 'loaded'",
    )
    .await;
    let listed = |id: &str| {
        format!("return Array.from(document.querySelectorAll('#{id} option')).map(o => o.value)")
    };
    let subs = c
        .execute(&listed("dl-subscriptions"), vec![])
        .await
        .unwrap();
    let topics = c.execute(&listed("dl-topics"), vec![]).await.unwrap();
    assert!(
        subs.as_array().unwrap().contains(&json!(sub)),
        "autocomplete does not list subscription {sub}: {subs}"
    );
    assert!(
        topics.as_array().unwrap().contains(&json!(topic)),
        "autocomplete does not list topic {topic}: {topics}"
    );
    let sub_input = "#table-form [name='root[subscriptions][0][id]']";
    assert_eq!(
        css(c, sub_input)
            .await
            .attr("list")
            .await
            .unwrap()
            .as_deref(),
        Some("dl-subscriptions"),
        "the subscription input is not attached to its suggestions"
    );
    let table_name = format!("wiz_{}", std::process::id());
    fill(c, "#table-name", &table_name).await;
    fill(c, sub_input, sub).await;
    // A parallel pull count the schema allows (minimum 1) and the connector refuses.
    click(
        c,
        "#table-form input[data-role='opt-in'][data-field='/subscriber']",
    )
    .await;
    let ppc_box =
        "#table-form input[data-role='opt-in'][data-field='/subscriber/parallelPullCount']";
    click(c, ppc_box).await;
    let ppc = "#table-form [name='root[subscriber][parallelPullCount]']";
    fill(c, ppc, "65").await;
    click(c, "#table-next").await;

    // 4. Columns: the payload's two keys.
    css(c, "#step-columns:not([hidden])").await;
    fill(c, "#columns-form [name='root[fields][0][name]']", "name").await;
    click(
        c,
        "#columns-form button[data-role='add'][data-field='/fields']",
    )
    .await;
    fill(
        c,
        "#columns-form [name='root[fields][1][name]']",
        "post_abbr",
    )
    .await;
    css(c, "#columns-form [name='root[fields][1][type]']")
        .await
        .select_by_value("TEXT")
        .await
        .unwrap();
    click(c, "#columns-next").await;

    // 5. The table test: refused for the pull count, shown next to it in the table step.
    css(c, "#step-test:not([hidden])").await;
    fill(c, "#sample-size", "2").await;
    click(c, "#table-test").await;
    let e = error_next_to(c, "/config/subscriber/parallelPullCount", ppc).await;
    assert!(
        e.contains("65"),
        "the pull count's error does not name the value: {e}"
    );
    println!("server error next to the parallel pull count: {e}");
    screenshot(c, "wizard-table-error.png").await;
    click(c, ppc_box).await; // back to the default
    click(c, "#table-next").await;
    css(c, "#step-columns:not([hidden])").await;
    // The topic has no schema: the button that reads the columns from it shows the
    // server's refusal in this step, and the typed columns stay.
    click(c, "#columns-derive").await;
    let refusal = wait_js(
        c,
        "the refusal to read columns from a topic without a schema",
        "const e = document.querySelector('#step-columns .server-error'); return e && e.textContent",
    )
    .await;
    assert!(
        refusal
            .as_str()
            .unwrap_or_default()
            .contains("format 'avro' needs a topic with a schema"),
        "{refusal}"
    );
    click(c, "#columns-next").await;
    css(c, "#step-test:not([hidden])").await;
    click(c, "#table-test").await;
    wait_js(
        c,
        "the table test's copy of the subscription",
        "return document.querySelector('#table-test-events').textContent.includes('reading the copy')",
    )
    .await;
    let payloads = vec![
        good_payload().trim().as_bytes().to_vec(),
        BAD.as_bytes().to_vec(),
    ];
    let ids = admin::publish_all(&profile(), topic, payloads, 10)
        .await
        .unwrap();
    let done = wait_js(
        c,
        "the table test's last event",
        "return document.querySelector('#table-test-events').getAttribute('data-done')",
    )
    .await;
    let events = text(c, "#table-test-events").await;
    println!("table test events:\n{events}");
    assert_eq!(done, json!("succeeded"), "table test: {events}");
    let row = wait_js(
        c,
        "a decoded sample row",
        "const r = document.querySelector('[data-testid=sample-row]'); if (!r) return null;
         const o = {}; for (const td of r.querySelectorAll('td')) o[td.dataset.column] = td.textContent; return o;",
    )
    .await;
    assert_eq!(row["name"], good["name"], "sample row: {row}");
    assert_eq!(row["post_abbr"], good["post_abbr"], "sample row: {row}");
    let failed: Vec<String> = c
        .execute(
            "return Array.from(document.querySelectorAll('[data-testid=table-test-event][data-error=true]')).map(e => e.textContent)",
            vec![],
        )
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect();
    // Events name a message as "(id ID)" (docs/rest-api.md).
    let (good_id, bad_id) = (format!("(id {})", ids[0]), format!("(id {})", ids[1]));
    assert!(
        failed
            .iter()
            .any(|m| m.contains(&bad_id) && m.contains("cannot decode")),
        "no decode error for the bad message {bad_id}: {failed:?}"
    );
    assert!(
        !failed.iter().any(|m| m.contains(&good_id)),
        "the good message {good_id} failed: {failed:?}"
    );
    screenshot(c, "wizard-table-test.png").await;

    // 6. Create: the SQL.
    click(c, "#table-create").await;
    css(c, "#step-done:not([hidden])").await;
    let sql = text(c, "#sql").await;
    println!("SQL shown:\n{sql}");
    for needle in [
        "CREATE TABLE",
        table_name.as_str(),
        "'connector' = 'pubsub'",
        sub,
    ] {
        assert!(sql.contains(needle), "the SQL lacks {needle:?}:\n{sql}");
    }
    click(c, "#sql-copy").await;
    let copied = wait_js(
        c,
        "the copy button's note",
        "return document.querySelector('#sql-copied').textContent",
    )
    .await;
    println!("copy: {copied}");
    let shot = screenshot(c, "wizard.png").await;
    println!("final page: {}", shot.display());

    // 7. Check a pipeline: the created table read into a sink declared without columns,
    // which takes those of its query; the saved profile is named, as in `run`.
    let out = format!("{table_name}_out");
    let pipeline = format!(
        "{sql}\nCREATE TABLE {out} WITH ('connector' = 'pubsub', 'connection-profile' = '{profile_name}', 'topic' = '{topic}', 'format' = 'json');\nINSERT INTO {out} SELECT name, upper(post_abbr) AS abbr FROM {table_name};"
    );
    fill(c, "#pipeline-sql", &pipeline).await;
    click(c, "#pipeline-validate").await;
    let outcome = wait_js(
        c,
        "the pipeline check's outcome",
        "return document.querySelector('#pipeline-result').getAttribute('data-outcome')",
    )
    .await;
    let shown = text(c, "#pipeline-result").await;
    println!("pipeline check:\n{shown}");
    assert_eq!(outcome, json!("succeeded"), "pipeline check: {shown}");
    let columns = c
        .execute(
            &format!(
                "return Array.from(document.querySelectorAll(\"[data-table='{out}'] [data-testid=pipeline-column]\")).map(r => [r.dataset.column, r.dataset.type, r.dataset.derived])"
            ),
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        columns,
        json!([["name", "TEXT", "true"], ["abbr", "TEXT", "true"]]),
        "{shown}"
    );
    assert!(shown.contains("from the query"), "{shown}");
    screenshot(c, "wizard-pipeline-check.png").await;
    // A pipeline that does not plan: the planner's error.
    fill(
        c,
        "#pipeline-sql",
        &format!("{sql}\nINSERT INTO nowhere SELECT name FROM {table_name};"),
    )
    .await;
    click(c, "#pipeline-validate").await;
    wait_js(
        c,
        "the pipeline check's refusal",
        "return document.querySelector('#pipeline-result').getAttribute('data-outcome') === 'failed'",
    )
    .await;
    let refusal = text(c, "[data-testid=pipeline-error]").await;
    println!("pipeline refused: {refusal}");
    assert!(refusal.contains("nowhere"), "{refusal}");
}
