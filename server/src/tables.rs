//! `/v1/connection_tables`: a table is checked as `run` would check its statement, then
//! saved with the `CREATE TABLE` made for it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use pubsub_engine_spi::ErasedConnector;
use pubsub_schema::{Authentication, PubSubProfile, PubSubTable};
use serde_json::{json, Value};

use crate::columns::Columns;
use crate::error::ApiError;
use crate::profiles::{check_connector, deleted, listed, load, row_id, store_error, text_member};
use crate::redact::redact;
use crate::sql::{create_table, shown_ref, ProfileRef};
use crate::store::TableRecord;
use crate::{AppState, CONNECTOR};

/// A checked table body.
pub struct TableBody {
    pub name: String,
    pub profile_id: i64,
    pub profile_name: String,
    pub profile: PubSubProfile,
    pub table: PubSubTable,
    pub columns: Columns,
}

/// The saved profile a body's `connectionProfileId` names; a 400 naming that field when
/// it is missing or names none.
pub fn body_profile(
    state: &AppState,
    body: &Value,
) -> Result<(crate::store::ProfileRecord, PubSubProfile), ApiError> {
    let id = body
        .get("connectionProfileId")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ApiError::bad(
                "/connectionProfileId",
                "'connectionProfileId' is required (a saved profile's id, e.g. 'cp_1')",
            )
        })?;
    load(state, id).map_err(|e| ApiError {
        field: Some("/connectionProfileId".into()),
        status: axum::http::StatusCode::BAD_REQUEST,
        ..e
    })
}

/// A body's `config` (the table config, unchecked); a 400 naming it when missing.
pub fn body_config(body: &Value) -> Result<&Value, ApiError> {
    body.get("config").ok_or_else(|| {
        ApiError::bad(
            "/config",
            "'config' is required (the table, as schema/table.json)",
        )
    })
}

/// Checks a table body: name, connector, profile, config and columns against the
/// schemas and the connector's rules, and that `run` accepts its statement.
pub fn check(state: &AppState, body: &Value) -> Result<TableBody, ApiError> {
    let name = text_member(body, "name", 128)?;
    let identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier {
        return Err(ApiError::bad(
            "/name",
            format!("'name' must be a SQL table name (letters, digits and '_', not starting with a digit), was '{name}'"),
        ));
    }
    check_connector(body)?;
    let (record, profile) = body_profile(state, body)?;
    let config = body_config(body)?;
    let columns = body
        .get("schema")
        .ok_or_else(|| ApiError::bad("/schema", "'schema' is required (the columns)"))?;
    let (table, columns) = state.validators.table(&profile, config, columns)?;
    let dead_letter = match &table {
        PubSubTable::Source(s) => s.dead_letter.as_ref(),
        PubSubTable::Sink(s) => s.dead_letter.as_ref(),
    };
    if let Some(d) = dead_letter {
        if matches!(
            d.authentication,
            Authentication::ServiceAccountKeyFile { .. }
        ) {
            return Err(ApiError::bad(
                "/config/deadLetter/authentication",
                "a dead-letter queue with its own key file cannot be saved here (its path would be part of the statement): use the profile's credentials, or write 'dead-letter.service-account-key-file' in SQL",
            ));
        }
    }
    let body = TableBody {
        name,
        profile_id: record.id,
        profile_name: record.name,
        profile,
        table,
        columns,
    };
    plan(&body)?;
    Ok(body)
}

/// Plans the table's statement (profile inline) as `run` would.
fn plan(b: &TableBody) -> Result<(), ApiError> {
    let sql = create_table(
        &b.name,
        ProfileRef::Inline(&b.profile),
        &b.table,
        &b.columns,
    )
    .map_err(|e| ApiError::bad(format!("/config{}", e.field), e.message))?;
    let parsed = pubsub_engine_sql::parse_pipeline(&sql).map_err(|e| {
        ApiError::internal(format!(
            "the statement made for the table does not parse: {e}"
        ))
    })?;
    let connectors: Vec<Arc<dyn ErasedConnector>> =
        vec![Arc::new(pubsub_connector_core::PubSubConnector)];
    pubsub_engine_sql::plan_tables(&parsed, &connectors)
        .map_err(|e| ApiError::bad("/schema", e.to_string()))?;
    Ok(())
}

fn reply(r: &TableRecord) -> Value {
    let table_type = r.config.get("type").cloned().unwrap_or(Value::Null);
    json!({
        "id": format!("ct_{}", r.id),
        "name": r.name,
        "connector": r.connector,
        "connectionProfileId": format!("cp_{}", r.profile_id),
        "tableType": table_type,
        "config": redact(r.config.clone()),
        "schema": r.schema,
        "sql": r.sql,
    })
}

pub async fn create(
    State(state): State<AppState>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    let b = check(&state, &body)?;
    let sql = create_table(
        &b.name,
        shown_ref(&b.profile_name, &b.profile),
        &b.table,
        &b.columns,
    )
    .map_err(|e| ApiError::bad(format!("/config{}", e.field), e.message))?;
    let record = TableRecord {
        id: 0,
        name: b.name.clone(),
        connector: CONNECTOR.into(),
        profile_id: b.profile_id,
        config: serde_json::to_value(&b.table).map_err(ApiError::internal)?,
        schema: serde_json::to_value(&b.columns).map_err(ApiError::internal)?,
        sql,
    };
    let saved = state
        .store
        .insert_table(&record)
        .map_err(|e| store_error(e, "connection table"))?;
    Ok(Json(reply(&saved)))
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    listed(state.store.tables(), "connection table", reply)
}

pub async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let done = state
        .store
        .delete_table(row_id(&id, "ct_", "connection table")?);
    deleted(done, &format!("connection table '{id}'"))
}
