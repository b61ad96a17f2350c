//! `POST /v1/pipelines/validate`: a pipeline's SQL parsed and planned as `run` plans it
//! (the role of Arroyo's `POST /api/v1/pipelines/validate_query`), answering each table's
//! columns; a sink table declared without columns shows those it takes from the query
//! writing it (issue 47). Planning only: nothing contacts Pub/Sub, nothing starts.
//! `'connection-profile' = 'name'` resolves against this server's saved profiles, as
//! `run --data-dir` resolves it against the same directory.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use pubsub_engine_plan::PlannedTable;
use pubsub_engine_spi::{ConnectionType, ErasedConnector, Format, SourceField};
use pubsub_engine_sql::{
    parse_pipeline, plan_pipeline, plan_tables, takes_query_columns, visible_columns, PipelineSql,
    TableDef,
};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::redact::REDACTED;
use crate::store::Store;
use crate::AppState;

/// The longest pipeline text taken (bytes).
pub const MAX_QUERY_BYTES: usize = 1 << 20;

/// Every connector `run` knows (the same list as the binary's): Pub/Sub, and the NEXMark
/// generator and the discarding sink of `docs/local.md`.
pub fn connectors() -> Vec<Arc<dyn ErasedConnector>> {
    vec![
        Arc::new(pubsub_connector_core::PubSubConnector),
        Arc::new(pubsub_nexmark::NexmarkConnector),
        Arc::new(pubsub_nexmark::BlackholeConnector),
    ]
}

/// 200 with `{"tables": [...], "queries": [...]}`; 400 naming `/query` with the parser's
/// or the planner's error (positions as they give them).
pub async fn validate(
    State(state): State<AppState>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    let query = match body.get("query") {
        Some(Value::String(q)) => q.clone(),
        _ => {
            return Err(ApiError::bad(
                "/query",
                "'query' is required (the pipeline's SQL: CREATE TABLE ...; INSERT INTO ... SELECT ...)",
            ))
        }
    };
    if query.len() > MAX_QUERY_BYTES {
        return Err(ApiError::bad(
            "/query",
            format!("'query' is longer than {MAX_QUERY_BYTES} bytes"),
        ));
    }
    let store = state.store.clone();
    // DataFusion plans on a blocking thread, which also carries the profile lookup.
    tokio::task::spawn_blocking(move || check(&store, &query))
        .await
        .map_err(ApiError::internal)?
        .map(Json)
}

/// The reply for pipeline text `query`, or the 400 naming `/query`. No secret (a key file
/// path written in the text or saved in a profile) is in either.
pub fn check(store: &Arc<Store>, query: &str) -> Result<Value, ApiError> {
    let mut secrets = written_key_files(query);
    secrets.extend(saved_key_files(store));
    let bad = |e: String| ApiError::bad("/query", redact_text(e, &secrets));
    let sql = parse_pipeline(query).map_err(|e| bad(e.to_string()))?;
    if let Some(t) = sql.tables.iter().find(|t| columns_from_topic_schema(t)) {
        return Err(bad(format!(
            "table '{}' takes its columns from its topic's Avro schema, which this check does not read (it plans the pipeline and contacts no Pub/Sub): declare the columns (the wizard's columns step reads them from the schema), or let `run` read them",
            t.name
        )));
    }
    let planned = crate::with_profiles_of(store, || -> Result<_, String> {
        let plan = plan_pipeline(&sql, &connectors()).map_err(|e| e.to_string())?;
        let mut tables: Vec<(String, PlannedTable)> = Vec::new();
        let mut seen = |t: &PlannedTable| {
            if !tables.iter().any(|(n, _)| *n == t.connection.name) {
                tables.push((t.connection.name.clone(), t.clone()));
            }
        };
        for q in &plan.queries {
            for t in q.tables() {
                seen(t);
            }
        }
        // A table no INSERT uses is planned alone (plan_pipeline checked it already).
        for t in &sql.tables {
            if !tables.iter().any(|(n, _)| *n == t.name) {
                let alone = PipelineSql {
                    tables: vec![t.clone()],
                    inserts: Vec::new(),
                };
                let mut p = plan_tables(&alone, &connectors()).map_err(|e| e.to_string())?;
                tables.push((t.name.clone(), p.remove(0)));
            }
        }
        let queries: Vec<Value> = plan
            .queries
            .iter()
            .map(|q| {
                json!({
                    "id": q.id,
                    "source": q.source.connection.name,
                    // A join's right side's table.
                    "joined": q.join.as_ref().map(|j| j.right_source.connection.name.clone()),
                    "sink": q.sink.connection.name,
                })
            })
            .collect();
        Ok((tables, queries))
    });
    let (tables, queries) = planned.map_err(bad)?;
    let tables: Vec<Value> = sql
        .tables
        .iter()
        .filter_map(|t| tables.iter().find(|(n, _)| *n == t.name))
        .map(|(name, p)| table_reply(name, p, takes_query_columns(&sql, name)))
        .collect();
    Ok(json!({ "tables": tables, "queries": queries }))
}

/// One table of the reply: the columns SQL sees (hidden ones left out).
fn table_reply(name: &str, p: &PlannedTable, derived: bool) -> Value {
    let schema = visible_columns(&p.connection.schema);
    let role = match p.connection.connection_type {
        ConnectionType::Source => "source",
        ConnectionType::Sink => "sink",
    };
    let mut v = json!({
        "name": name,
        "connector": p.connection.connector,
        "role": role,
        "format": schema.format.name(),
        "derived": derived,
        "fields": schema.fields.iter().map(field_reply).collect::<Vec<_>>(),
    });
    if schema.format == Format::JsonUnstructured {
        v["unstructured"] = json!(true);
    }
    v
}

fn field_reply(f: &SourceField) -> Value {
    let mut v = json!({
        "name": f.name,
        "type": f.field_type.sql_name(),
        "nullable": !f.required,
    });
    if let Some(k) = &f.metadata_key {
        v["metadataKey"] = json!(k);
    }
    v
}

/// A table of format `avro` declaring no payload column: `run` reads its columns from the
/// topic's schema (`resolve_schemas`, I/O), which this check does not.
fn columns_from_topic_schema(t: &TableDef) -> bool {
    t.options.get("format") == Some("avro") && t.fields.iter().all(|f| f.metadata_key.is_some())
}

/// The values of every `...service-account-key-file' = '...'` option written in `text`
/// (also when the text does not parse, whose error may quote one).
fn written_key_files(text: &str) -> Vec<String> {
    let mut out = pubsub_engine_sql::written_option_values(text, "service-account-key-file")
        .unwrap_or_default();
    let key = "service-account-key-file'";
    let mut rest = text;
    while let Some(i) = rest.find(key) {
        rest = &rest[i + key.len()..];
        let after = rest.trim_start();
        let Some(after) = after.strip_prefix('=') else {
            continue;
        };
        let Some(lit) = after.trim_start().strip_prefix('\'') else {
            continue;
        };
        let mut value = String::new();
        let mut chars = lit.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                } else {
                    break;
                }
            }
            value.push(c);
        }
        if !value.trim().is_empty() && !out.contains(&value) {
            out.push(value);
        }
    }
    out
}

/// The key file paths of the saved profiles.
fn saved_key_files(store: &Store) -> Vec<String> {
    let Ok(profiles) = store.profiles() else {
        return Vec::new();
    };
    profiles
        .iter()
        .filter(|p| p.config["authentication"]["type"] == "service-account-key-file")
        .filter_map(|p| p.config["authentication"]["path"].as_str())
        .filter(|p| !p.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// `text` with each secret replaced by `<redacted>`, longest first.
fn redact_text(mut text: String, secrets: &[String]) -> String {
    let mut secrets: Vec<&String> = secrets.iter().collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for s in secrets {
        text = text.replace(s.as_str(), REDACTED);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "/very/secret/validate-key.json";

    /// A store with a key-file profile `prod` and an emulator profile `local`.
    fn store() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        s.insert_profile(
            "prod",
            "pubsub",
            &json!({"project": "prod-project",
            "authentication": {"type": "service-account-key-file", "path": SECRET}}),
        )
        .unwrap();
        s.insert_profile(
            "local",
            "pubsub",
            &json!({"project": "test",
            "authentication": {"type": "emulator", "endpoint": "127.0.0.1:1"}}),
        )
        .unwrap();
        (dir, Arc::new(s))
    }

    const SRC: &str = "CREATE TABLE bids (
            auction BIGINT NOT NULL, price BIGINT, bidder TEXT,
            mid TEXT NOT NULL METADATA FROM 'message-id'
        ) WITH ('connector' = 'pubsub', 'connection-profile' = 'prod',
                'subscription' = 'bids-sub', 'format' = 'json');";

    fn table<'a>(reply: &'a Value, name: &str) -> &'a Value {
        reply["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no table {name}: {reply}"))
    }

    fn columns(t: &Value) -> Vec<(String, String, bool)> {
        t["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["name"].as_str().unwrap().to_string(),
                    f["type"].as_str().unwrap().to_string(),
                    f["nullable"].as_bool().unwrap(),
                )
            })
            .collect()
    }

    fn col(name: &str, ty: &str, nullable: bool) -> (String, String, bool) {
        (name.into(), ty.into(), nullable)
    }

    #[test]
    fn a_sink_without_columns_shows_those_of_its_query_and_no_secret() {
        let (_dir, store) = store();
        let sql = format!(
            "{SRC}
             CREATE TABLE out WITH ('connector' = 'pubsub', 'connection-profile' = 'local',
                                    'topic' = 'bids-out', 'format' = 'json');
             INSERT INTO out SELECT auction, price * 2 AS doubled, upper(bidder) AS who, mid FROM bids;"
        );
        let reply = check(&store, &sql).unwrap();
        let out = table(&reply, "out");
        assert_eq!(out["role"], "sink", "{reply}");
        assert_eq!(out["derived"], true, "{reply}");
        assert_eq!(out["format"], "json", "{reply}");
        assert_eq!(
            columns(out),
            vec![
                col("auction", "BIGINT", false),
                col("doubled", "BIGINT", true),
                col("who", "TEXT", true),
                col("mid", "TEXT", false),
            ],
            "{reply}"
        );
        let bids = table(&reply, "bids");
        assert_eq!(
            (&bids["role"], &bids["derived"]),
            (&json!("source"), &json!(false))
        );
        assert_eq!(
            columns(bids),
            vec![
                col("auction", "BIGINT", false),
                col("price", "BIGINT", true),
                col("bidder", "TEXT", true),
                col("mid", "TEXT", false),
            ]
        );
        assert_eq!(bids["fields"][3]["metadataKey"], "message-id");
        assert_eq!(reply["queries"][0]["id"], "q0", "{reply}");
        assert_eq!(reply["queries"][0]["sink"], "out", "{reply}");
        let text = reply.to_string();
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn an_updating_aggregate_into_a_changelog_sink_gives_its_output_columns() {
        let (_dir, store) = store();
        let sql = format!(
            "{SRC}
             CREATE TABLE per_auction WITH ('connector' = 'pubsub', 'connection-profile' = 'local',
                                            'topic' = 'per-auction', 'format' = 'debezium_json');
             INSERT INTO per_auction SELECT auction, count(*) AS bids, max(price) AS top FROM bids GROUP BY auction;"
        );
        let reply = check(&store, &sql).unwrap();
        let t = table(&reply, "per_auction");
        assert_eq!(
            (&t["format"], &t["derived"]),
            (&json!("debezium_json"), &json!(true)),
            "{reply}"
        );
        assert_eq!(
            columns(t),
            vec![
                col("auction", "BIGINT", false),
                col("bids", "BIGINT", false),
                col("top", "BIGINT", true),
            ],
            "{reply}"
        );
        // Hidden columns planning adds (the windows' event time) are not shown.
        let sql = format!(
            "{SRC}
             CREATE TABLE per_minute (auction BIGINT, n BIGINT) WITH ('connector' = 'pubsub',
                 'connection-profile' = 'local', 'topic' = 'per-minute');
             INSERT INTO per_minute SELECT auction, n FROM (
                 SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, auction, count(*) AS n
                 FROM bids GROUP BY window, auction);"
        );
        let reply = check(&store, &sql).unwrap();
        assert_eq!(columns(table(&reply, "bids")).len(), 4, "{reply}");
        assert_eq!(table(&reply, "per_minute")["derived"], false, "{reply}");
    }

    #[test]
    fn an_invalid_pipeline_is_refused_with_the_planners_text_and_its_position() {
        let (_dir, store) = store();
        let e = check(&store, "CREATE TABLE t (a BIGINT) WITH ('connector' = 'pubsub',\n  'topic' = 'x' 'format' = 'json');").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(e.field.as_deref(), Some("/query"));
        assert!(
            e.error.contains("line 2") || e.error.contains("Line: 2"),
            "{}",
            e.error
        );
        let sql = format!(
            "{SRC}
             CREATE TABLE out WITH ('connector' = 'pubsub', 'connection-profile' = 'local', 'topic' = 'o');
             INSERT INTO out SELECT auction, nope FROM bids;"
        );
        let e = check(&store, &sql).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("/query"));
        assert!(
            e.error.contains("column 'nope' does not exist") && e.error.contains("(line 7, column"),
            "{}",
            e.error
        );
        // An unknown saved profile names the option and the name.
        let e = check(&store, &SRC.replace("'prod'", "'nowhere'")).unwrap_err();
        assert!(
            e.error.contains("'connection-profile'") && e.error.contains("nowhere"),
            "{}",
            e.error
        );
        // A topic's Avro schema is not read here.
        let sql = format!(
            "{SRC}
             CREATE TABLE a WITH ('connector' = 'pubsub', 'connection-profile' = 'local', 'subscription' = 's', 'format' = 'avro');
             CREATE TABLE out (auction BIGINT) WITH ('connector' = 'pubsub', 'connection-profile' = 'local', 'topic' = 'o');
             INSERT INTO out SELECT auction FROM bids;"
        );
        let e = check(&store, &sql).unwrap_err();
        assert!(
            e.error.contains("table 'a'") && e.error.contains("Avro schema"),
            "{}",
            e.error
        );
    }

    #[test]
    fn a_key_file_path_is_in_no_error() {
        let (_dir, store) = store();
        let written = "/written/secret/k.json";
        // Refused while planning (an unknown option), and while parsing (at the path).
        for sql in [
            format!("CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'project' = 'p', 'service-account-key-file' = '{written}', 'subscription' = 's', 'no-such-option' = '{written}');
                     CREATE TABLE o (a BIGINT) WITH ('connector' = 'pubsub', 'connection-profile' = 'prod', 'topic' = 't', 'bogus' = '{SECRET}');
                     INSERT INTO o SELECT a FROM s;"),
            format!("CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'service-account-key-file' = '{written}' '{written}');"),
            // Without its `=`, the parser's error quotes the path.
            format!("CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'service-account-key-file' '{written}');"),
            format!("CREATE TABLE s (a BIGINT) WITH ('connector' = 'pubsub', 'service-account-key-file' /* k */ = \"{written}\" x);"),
        ] {
            let e = check(&store, &sql).unwrap_err();
            assert!(!e.error.contains("secret"), "{}", e.error);
        }
        assert_eq!(
            written_key_files("x 'sink.dead-letter.service-account-key-file' =  'a''b' y"),
            vec!["a'b"]
        );
    }
}
