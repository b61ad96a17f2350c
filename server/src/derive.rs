//! `POST /v1/connection_tables/schema`: the columns a table's topic schema gives (issue
//! 18), for the wizard to show instead of asking for them. Body: `connector`,
//! `connectionProfileId` and `config` as for a table; reply: the `schema` member of a
//! table body (`{"format": "avro", "fields": [...]}`), which the wizard then saves as the
//! table's columns.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use pubsub_connector_core::PubSubConnector;
use pubsub_engine_spi::{ConfigError, ConnectionSchema, ErasedConnector, Format};
use serde_json::{json, Value};

use crate::columns::{Column, ColumnFormat, Columns, SqlType};
use crate::error::ApiError;
use crate::profiles::{check_connector, CALL_TIMEOUT};
use crate::tables::{body_config, body_profile};
use crate::AppState;

/// 200 with the columns; 400 naming `/config` when the table is not one whose schema
/// gives columns (no schema on its topic, a Protocol Buffers schema, a field no column
/// type holds); 502 when Pub/Sub could not be asked (or gave no answer within
/// [`CALL_TIMEOUT`]).
pub async fn columns(
    State(state): State<AppState>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    check_connector(&body)?;
    let (_, profile) = body_profile(&state, &body)?;
    let config = body_config(&body)?;
    let table = state.validators.table_config(&profile, config)?;
    let derive = PubSubConnector
        .derive_fields(
            serde_json::to_value(&profile).map_err(ApiError::internal)?,
            serde_json::to_value(&table).map_err(ApiError::internal)?,
            &ConnectionSchema::new(Format::Avro, Vec::new()),
        )
        .ok_or_else(|| ApiError::internal("format 'avro' derives no columns"))?;
    let fields = match tokio::time::timeout(CALL_TIMEOUT, derive).await {
        Ok(Ok(fields)) => fields,
        Ok(Err(e)) if ConfigError::is_in(&e) => {
            return Err(ApiError::bad("/config", format!("{e:#}")))
        }
        Ok(Err(e)) => return Err(unreachable(format!("{e:#}"))),
        Err(_) => {
            return Err(unreachable(format!(
                "no answer from Pub/Sub within {CALL_TIMEOUT:?}"
            )))
        }
    };
    let columns = Columns {
        format: ColumnFormat::Avro,
        fields: fields
            .into_iter()
            .map(|f| {
                let (ty, array) = SqlType::of_column(f.field_type);
                Column {
                    name: f.name,
                    ty,
                    array,
                    nullable: !f.required,
                    metadata_key: None,
                }
            })
            .collect(),
    };
    Ok(Json(json!(columns)))
}

/// 502: Pub/Sub could not be asked.
fn unreachable(error: String) -> ApiError {
    ApiError {
        status: StatusCode::BAD_GATEWAY,
        error,
        field: None,
    }
}
