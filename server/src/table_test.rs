//! `POST /v1/connection_tables/test`: server-sent events while the table is tried. A
//! source reads up to `sampleSize` messages without acknowledging them (each is nacked
//! at once) and decodes each with the table's columns; a sink checks its topic. The body
//! is checked first, so a bad body gets the usual JSON error, not an event stream.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use bytes::Bytes;
use futures::Stream;
use pubsub_connector_core::explore::{self, Sampled};
use pubsub_engine::format::Deserializer;
use pubsub_engine::ConnectionSchema;
use pubsub_schema::{CreateDisposition, PubSubTable};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::tables::{check, TableBody};
use crate::AppState;

/// Messages read at most (`sampleSize`, default 5).
pub const MAX_SAMPLE: u64 = 100;
/// A read ends when no message came for this long.
pub const QUIET: Duration = Duration::from_secs(3);
/// The whole test gives up after this.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn test(
    State(state): State<AppState>,
    Json(body): Json<Value>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let size = match body.get("sampleSize") {
        None | Some(Value::Null) => 5,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_SAMPLE).contains(n))
            .ok_or_else(|| {
                ApiError::bad(
                    "/sampleSize",
                    format!("'sampleSize' must be 1..{MAX_SAMPLE}, was {v}"),
                )
            })?,
    };
    let b = check(&state, &body)?;
    let (tx, rx) = mpsc::channel::<Value>(16);
    tokio::spawn(async move {
        let steps = Steps(tx.clone());
        let end = match tokio::time::timeout(TEST_TIMEOUT, run(&b, size as usize, &steps)).await {
            Ok(Ok(summary)) => {
                json!({"error": false, "done": true, "message": summary, "row": null})
            }
            Ok(Err(e)) => {
                json!({"error": true, "done": true, "message": format!("{e:#}"), "row": null})
            }
            Err(_) => {
                json!({"error": true, "done": true, "message": format!("the test did not end within {TEST_TIMEOUT:?}"), "row": null})
            }
        };
        let _ = tx.send(end).await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let v = rx.recv().await?;
        let event = Event::default().data(v.to_string());
        Some((Ok(event), rx))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Sends the steps; a closed channel (the client left) is ignored.
struct Steps(mpsc::Sender<Value>);

impl Steps {
    async fn say(&self, error: bool, message: String, row: Value) {
        let _ = self
            .0
            .send(json!({"error": error, "done": false, "message": message, "row": row}))
            .await;
    }
}

/// Runs the test; the result is the summary of the last event.
async fn run(b: &TableBody, size: usize, steps: &Steps) -> anyhow::Result<String> {
    match &b.table {
        PubSubTable::Sink(s) => {
            let exists = explore::topic_exists(&b.profile, &s.topic).await?;
            Ok(match (exists, s.create_disposition) {
                (true, _) => format!("topic '{}' exists; nothing was published", s.topic),
                (false, CreateDisposition::CreateIfNeeded) => format!(
                    "topic '{}' does not exist yet; the job creates it at start (create-if-needed); nothing was published",
                    s.topic
                ),
                (false, CreateDisposition::CreateNever) => anyhow::bail!(
                    "topic '{}' does not exist and the table does not create it (create-never)",
                    s.topic
                ),
            })
        }
        PubSubTable::Source(s) => {
            let schema = b.columns.connection_schema();
            let (mut read, mut decoded, mut failed) = (0, 0, 0);
            for sub in &s.subscriptions {
                if read >= size {
                    break;
                }
                let name =
                    pubsub_connector_core::client::subscription_path(&b.profile.project, &sub.id);
                steps
                    .say(
                        false,
                        format!(
                            "connecting to subscription {name} at {}",
                            pubsub_connector_core::diagnose::endpoint(&b.profile)
                        ),
                        Value::Null,
                    )
                    .await;
                let got = explore::sample(&b.profile, &sub.id, size - read, QUIET).await?;
                steps
                    .say(false, format!("connected to subscription {name}: read {} messages, none acknowledged (all released for redelivery)", got.len()), Value::Null)
                    .await;
                for m in got {
                    read += 1;
                    match decode(&schema, &m, &sub.id) {
                        Ok(rows) => {
                            decoded += 1;
                            let n = rows.len();
                            let row = rows.into_iter().next().unwrap_or(Value::Null);
                            steps
                                .say(
                                    false,
                                    format!(
                                        "message {read} (id {}): decoded into {n} row{}",
                                        m.message.message_id,
                                        if n == 1 { "" } else { "s" }
                                    ),
                                    row,
                                )
                                .await;
                        }
                        Err(why) => {
                            failed += 1;
                            steps
                                .say(
                                    true,
                                    format!(
                                        "message {read} (id {}): cannot decode: {why}",
                                        m.message.message_id
                                    ),
                                    Value::Null,
                                )
                                .await;
                        }
                    }
                }
            }
            Ok(format!("read {read} messages without acknowledging them: {decoded} decoded, {failed} failed"))
        }
    }
}

/// The rows of one message as JSON objects, or why it cannot be decoded.
fn decode(
    schema: &ConnectionSchema,
    m: &Sampled,
    subscription: &str,
) -> Result<Vec<Value>, String> {
    let mut d = Deserializer::new(schema).map_err(|e| format!("{e:#}"))?;
    let keys = schema
        .fields
        .iter()
        .filter_map(|f| f.metadata_key.as_deref());
    let metadata = pubsub_connector_core::source::metadata_values(
        keys,
        &m.message,
        m.delivery_attempt,
        subscription,
    );
    d.deserialize(&Bytes::from(m.message.data.to_vec()), &metadata)
        .map_err(|e| e.reason)?;
    let Some(batch) = d.flush().map_err(|e| e.reason)? else {
        return Ok(Vec::new());
    };
    let mut w = arrow_json::ArrayWriter::new(Vec::new());
    w.write(&batch).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    serde_json::from_slice::<Vec<Value>>(&w.into_inner()).map_err(|e| e.to_string())
}
