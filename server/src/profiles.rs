//! `/v1/connectors` and `/v1/connection_profiles*`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use pubsub_connector_core::explore;
use pubsub_engine_spi::Connector;
use pubsub_schema::PubSubProfile;
use serde_json::{json, Value};

use crate::columns::Columns;
use crate::error::ApiError;
use crate::redact::redact;
use crate::store::{ProfileRecord, StoreError};
use crate::{AppState, CONNECTOR};

/// A profile test or autocomplete gives up after this (each request inside is bounded
/// too, see `diagnose::bounded`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn connectors() -> Json<Value> {
    let m = pubsub_connector_core::PubSubConnector.metadata();
    let parse = |s: &str| serde_json::from_str::<Value>(s).expect("schemas are JSON");
    Json(json!({ "data": [{
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "source": m.source,
        "sink": m.sink,
        "testing": true,
        "connectionConfig": m.connection_config.as_deref().map(parse),
        "tableConfig": parse(&m.table_config),
        "schemaConfig": Columns::schema(),
    }]}))
}

/// A required string member of the body, trimmed of nothing: blank or surrounding
/// spaces are refused naming the member.
pub fn text_member(body: &Value, key: &str, max: usize) -> Result<String, ApiError> {
    let field = format!("/{key}");
    let v = body
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad(&field, format!("'{key}' is required (a string)")))?;
    if v.trim().is_empty() || v.trim() != v || v.chars().count() > max {
        return Err(ApiError::bad(
            &field,
            format!("'{key}' must be non-blank text of at most {max} characters without surrounding spaces, was '{v}'"),
        ));
    }
    Ok(v.to_string())
}

/// `connector` must be `pubsub`.
pub fn check_connector(body: &Value) -> Result<(), ApiError> {
    match body.get("connector").and_then(Value::as_str) {
        Some(CONNECTOR) => Ok(()),
        other => Err(ApiError::bad(
            "/connector",
            format!("'connector' must be '{CONNECTOR}', was {other:?}"),
        )),
    }
}

fn config_member(body: &Value) -> Result<&Value, ApiError> {
    body.get("config").ok_or_else(|| {
        ApiError::bad(
            "/config",
            "'config' is required (the profile, as schema/profile.json)",
        )
    })
}

/// `(name, profile)` of a profile body.
fn profile_body(state: &AppState, body: &Value) -> Result<(String, PubSubProfile), ApiError> {
    let name = text_member(body, "name", 100)?;
    check_connector(body)?;
    let profile = state.validators.profile(config_member(body)?)?;
    Ok((name, profile))
}

/// The row id of an API id (`cp_1`, `ct_1`): `prefix` then a number, else 404 naming
/// `what`.
pub fn row_id(id: &str, prefix: &str, what: &str) -> Result<i64, ApiError> {
    id.strip_prefix(prefix)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| ApiError::not_found(format!("{what} '{id}' not found")))
}

pub fn profile_id(id: &str) -> Result<i64, ApiError> {
    row_id(id, "cp_", "connection profile")
}

pub fn describe(p: &PubSubProfile) -> String {
    format!(
        "project '{}' at {}",
        p.project,
        pubsub_connector_core::diagnose::endpoint(p)
    )
}

fn reply(r: &ProfileRecord) -> Value {
    let description = serde_json::from_value::<PubSubProfile>(r.config.clone())
        .map(|p| describe(&p))
        .unwrap_or_default();
    json!({
        "id": format!("cp_{}", r.id),
        "name": r.name,
        "connector": r.connector,
        "config": redact(r.config.clone()),
        "description": description,
    })
}

pub fn store_error(e: StoreError, what: &str) -> ApiError {
    match e {
        StoreError::NameTaken => {
            ApiError::conflict(Some("/name"), format!("a {what} of that name exists"))
        }
        StoreError::NotFound => ApiError::not_found(format!("{what} not found")),
        StoreError::InUse(tables) => ApiError::conflict(
            None,
            format!("the {what} is used by tables {tables:?}: delete them first"),
        ),
        StoreError::Sqlite(e) => ApiError::internal(e),
    }
}

pub async fn test(
    State(state): State<AppState>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    let (_, profile) = profile_body(&state, &body)?;
    let (error, message) =
        match tokio::time::timeout(CALL_TIMEOUT, explore::test_profile(&profile)).await {
            Ok(Ok(m)) => (false, m),
            Ok(Err(e)) => (true, format!("{e:#}")),
            Err(_) => (
                true,
                format!(
                    "no answer from {} within {CALL_TIMEOUT:?}",
                    describe(&profile)
                ),
            ),
        };
    Ok(Json(
        json!({ "error": error, "done": true, "message": message }),
    ))
}

pub async fn create(
    State(state): State<AppState>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    let (name, _) = profile_body(&state, &body)?;
    let config = config_member(&body)?;
    let r = state
        .store
        .insert_profile(&name, CONNECTOR, config)
        .map_err(|e| store_error(e, "connection profile"))?;
    Ok(Json(reply(&r)))
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    listed(state.store.profiles(), "connection profile", reply)
}

/// `{"data": [...]}` of stored rows, or the store's error naming `what`.
pub fn listed<T>(
    rows: Result<Vec<T>, StoreError>,
    what: &str,
    reply: impl Fn(&T) -> Value,
) -> Result<Json<Value>, ApiError> {
    let rows = rows.map_err(|e| store_error(e, what))?;
    Ok(Json(
        json!({ "data": rows.iter().map(reply).collect::<Vec<_>>() }),
    ))
}

/// `{}` after a delete, or the store's error naming `what`.
pub fn deleted(done: Result<(), StoreError>, what: &str) -> Result<Json<Value>, ApiError> {
    done.map_err(|e| store_error(e, what))?;
    Ok(Json(json!({})))
}

pub async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let done = state.store.delete_profile(profile_id(&id)?);
    deleted(done, &format!("connection profile '{id}'"))
}

/// The saved profile `id`, typed.
pub fn load(state: &AppState, id: &str) -> Result<(ProfileRecord, PubSubProfile), ApiError> {
    let r = state
        .store
        .profile(profile_id(id)?)
        .map_err(|e| store_error(e, &format!("connection profile '{id}'")))?;
    let p = serde_json::from_value(r.config.clone()).map_err(ApiError::internal)?;
    Ok((r, p))
}

pub async fn autocomplete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (_, profile) = load(&state, &id)?;
    Ok(Json(
        match tokio::time::timeout(CALL_TIMEOUT, explore::list_resources(&profile)).await {
            Ok(Ok(r)) => {
                json!({ "values": { "topics": r.topics, "subscriptions": r.subscriptions } })
            }
            Ok(Err(e)) => json!({ "values": {}, "error": format!("{e:#}") }),
            Err(_) => {
                json!({ "values": {}, "error": format!("no answer from {} within {CALL_TIMEOUT:?}", describe(&profile)) })
            }
        },
    ))
}
