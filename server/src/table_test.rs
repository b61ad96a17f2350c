//! `POST /v1/connection_tables/test`: server-sent events while the table is tried. A
//! source reads up to `sampleSize` messages from a copy of each subscription (a snapshot
//! and a temporary subscription, deleted afterwards: the subscription itself delivers
//! nothing, so its dead-letter policy counts nothing) and decodes each with the table's
//! columns; with `select` (a `SELECT ... FROM <table> [WHERE ...]`), each row is shown
//! after it, or its row failure. A sink checks its topic. The body is checked first, so a bad body gets the
//! usual JSON error, not an event stream; at most [`MAX_RUNNING`] tests run at once.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use bytes::Bytes;
use futures::Stream;
use pubsub_connector_core::explore::{self, Sampled};
use pubsub_engine_format::Deserializer;
use pubsub_engine_plan::SelectPlan;
use pubsub_engine_spi::ConnectionSchema;
use pubsub_schema::{CreateDisposition, PubSubTable};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::tables::{check, TableBody};
use crate::AppState;

/// Messages read at most (`sampleSize`, default 5).
pub const MAX_SAMPLE: u64 = 100;
/// A read ends when no message came for this long after the last one...
pub const QUIET: Duration = Duration::from_secs(3);
/// ...or, before the first, for this long: a copy seeked to a snapshot may take a moment
/// to deliver, and on the emulator only messages published meanwhile arrive.
pub const FIRST_WAIT: Duration = Duration::from_secs(10);
/// The whole test gives up after this.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Table tests running at once; another is refused with 429. Each creates a snapshot and
/// a subscription and holds a stream, so a page clicking repeatedly cannot pile them up.
pub const MAX_RUNNING: usize = 2;

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
    let select = match body.get("select") {
        None | Some(Value::Null) => None,
        Some(Value::String(sql)) => {
            if matches!(b.table, PubSubTable::Sink(_)) {
                return Err(ApiError::bad(
                    "/select",
                    "'select' applies to a source table only",
                ));
            }
            let plan =
                pubsub_engine_sql::plan_sample_select(sql, &b.name, &b.columns.connection_schema())
                    .map_err(|e| ApiError::bad("/select", e.0))?;
            Some(std::sync::Arc::new(plan))
        }
        Some(v) => {
            return Err(ApiError::bad(
                "/select",
                format!("'select' must be a SELECT statement as text, was {v}"),
            ))
        }
    };
    let permit = state.table_tests.clone().try_acquire_owned().map_err(|_| ApiError {
        status: StatusCode::TOO_MANY_REQUESTS,
        error: format!("{MAX_RUNNING} table tests are running already (at most {MAX_RUNNING} at once); try again when one has ended"),
        field: None,
    })?;
    let (tx, rx) = mpsc::channel::<Value>(16);
    // The test runs to its end (and removes its copy) even if the client leaves.
    tokio::spawn(async move {
        let _permit = permit;
        let steps = Steps(tx.clone());
        let end = match tokio::time::timeout(
            TEST_TIMEOUT,
            run(&b, size as usize, select.as_deref(), &steps),
        )
        .await
        {
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
async fn run(
    b: &TableBody,
    size: usize,
    select: Option<&SelectPlan>,
    steps: &Steps,
) -> anyhow::Result<String> {
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
            // Format avro: each message's writer revision, read once (as a source does).
            let mut revisions = (schema.format == pubsub_engine_spi::Format::Avro)
                .then(|| pubsub_connector_core::avro::Revisions::new(b.profile.clone()));
            let (mut read, mut decoded, mut failed) = (0, 0, 0);
            let emulator = matches!(
                b.profile.authentication,
                pubsub_schema::Authentication::Emulator { .. }
            );
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
                            "copying subscription {name} at {} (a snapshot and a temporary subscription named {}…, deleted after the sample; the subscription itself delivers nothing)",
                            pubsub_connector_core::diagnose::endpoint(&b.profile),
                            explore::copy::PREFIX
                        ),
                        Value::Null,
                    )
                    .await;
                let copied = steps.say(
                    false,
                    format!("copied subscription {name} (snapshot and temporary subscription made); reading the copy"),
                    Value::Null,
                );
                let sample = explore::sample(
                    &b.profile,
                    &sub.id,
                    size - read,
                    (FIRST_WAIT, QUIET),
                    copied,
                )
                .await?;
                let got = sample.messages;
                if got.is_empty() && emulator {
                    anyhow::bail!("read 0 messages: the copy of subscription {name} was empty. On the Pub/Sub emulator it always is: the emulator does not replay a snapshot into a new subscription, so only messages published while the test reads reach the sample. The subscription itself is never read (each delivery would count towards its dead-letter policy), so its messages cannot be shown here; on Pub/Sub the copy holds the subscription's backlog");
                }
                steps
                    .say(false, format!("read {} messages from the copy of subscription {name}; the copy is deleted, the subscription is as it was", got.len()), Value::Null)
                    .await;
                for left in sample.leftovers {
                    steps.say(true, left, Value::Null).await;
                }
                for m in got {
                    read += 1;
                    if let Some(r) = revisions.as_mut() {
                        r.fetch(&m.message.attributes).await?;
                    }
                    match decode(&schema, &m, &sub.id, select, revisions.as_ref()) {
                        Ok((decoded_rows, rows)) => {
                            decoded += 1;
                            let n = rows.len();
                            let plural = |n: usize| if n == 1 { "" } else { "s" };
                            let what = match select {
                                None => format!("decoded into {n} row{}", plural(n)),
                                Some(_) => format!(
                                    "decoded into {decoded_rows} row{}, {n} after the SELECT",
                                    plural(decoded_rows)
                                ),
                            };
                            let row = rows.into_iter().next().unwrap_or(Value::Null);
                            steps
                                .say(
                                    false,
                                    format!("message {read} (id {}): {what}", m.message.message_id),
                                    row,
                                )
                                .await;
                        }
                        Err(why) => {
                            failed += 1;
                            steps
                                .say(
                                    true,
                                    format!("message {read} (id {}): {why}", m.message.message_id),
                                    Value::Null,
                                )
                                .await;
                        }
                    }
                }
            }
            Ok(format!("read {read} messages from a copy, leaving the subscription as it was: {decoded} decoded, {failed} failed"))
        }
    }
}

/// The number of rows one message decodes into, and its rows (after `select`, if given)
/// as JSON objects; or why it cannot be decoded, or the SELECT's row failure. Format
/// `avro` decodes with the writer revision `revisions` fetched for the message.
fn decode(
    schema: &ConnectionSchema,
    m: &Sampled,
    subscription: &str,
    select: Option<&SelectPlan>,
    revisions: Option<&pubsub_connector_core::avro::Revisions>,
) -> Result<(usize, Vec<Value>), String> {
    let mut d = Deserializer::new(schema).map_err(|e| format!("cannot decode: {e:#}"))?;
    let keys = schema
        .fields
        .iter()
        .filter_map(|f| f.metadata_key.as_deref());
    let metadata = pubsub_connector_core::source::metadata_values(
        keys,
        &m.message,
        m.delivery_attempt,
        subscription,
        None,
    );
    let cannot = |e: pubsub_engine_format::DeserializeError| format!("cannot decode: {}", e.reason);
    let payload = Bytes::from(m.message.data.to_vec());
    match revisions {
        Some(r) => {
            let (writer, encoding) = r
                .writer(&m.message.attributes)
                .map_err(|e| format!("cannot decode: {e}"))?;
            d.deserialize_avro(&payload, &writer, encoding, &metadata)
        }
        None => d.deserialize(&payload, &metadata),
    }
    .map_err(cannot)?;
    let Some(batch) = d.flush().map_err(cannot)? else {
        return Ok((0, Vec::new()));
    };
    let decoded = batch.num_rows();
    let batch = match select {
        None => batch,
        Some(plan) => plan
            .evaluate(&batch)
            .map_err(|f| format!("row failure in the SELECT: {f}"))?,
    };
    let mut w = arrow_json::ArrayWriter::new(Vec::new());
    w.write(&batch).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    let rows = serde_json::from_slice::<Vec<Value>>(&w.into_inner()).map_err(|e| e.to_string())?;
    Ok((decoded, rows))
}
