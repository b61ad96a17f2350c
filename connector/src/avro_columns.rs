//! The columns of a `format = 'avro'` table and its topic's Avro schema (issue 18), when
//! the pipeline is planned. A table that declares none gets one column per top-level
//! field, named as the field, of the column type that holds each of its values exactly,
//! nullable when the field's type is a union with `null`. A sink's declared columns are
//! checked against the revision it will write with. The revision is the newest the topic
//! accepts (its `last_revision_id`, else the schema's newest).

use std::sync::Arc;

use pubsub_engine_format::avro::{AvroEncoding, AvroSchema};
use pubsub_engine_format::Serializer;
use pubsub_engine_spi::{ConfigError, ConnectionSchema, SourceField};
use pubsub_schema::{PubSubProfile, PubSubTable, SinkConfig};

use crate::avro::{fetch_revision, require_avro_topic, SchemaReader, TopicSchema};
use crate::client;
use crate::diagnose::bounded;

/// The revision a sink of format `avro` writes `topic` (full name) with, and the topic's
/// encoding. Errors as [`require_avro_topic`]'s, and a [`ConfigError`] when the revision
/// cannot be read for good.
pub async fn sink_revision(
    profile: &PubSubProfile,
    topic: &str,
) -> anyhow::Result<(Arc<AvroSchema>, AvroEncoding)> {
    let binding = require_avro_topic(profile, topic, "the sink's topic").await?;
    let revision = accepted_revision(profile, &binding)
        .await?
        .map_err(|e| ConfigError::wrap(anyhow::anyhow!("topic {topic}: {e}")))?;
    Ok((Arc::new(revision), binding.encoding))
}

/// The revision `binding` accepts last; the inner error is for good.
async fn accepted_revision(
    profile: &PubSubProfile,
    binding: &TopicSchema,
) -> anyhow::Result<Result<AvroSchema, String>> {
    let reader = SchemaReader::new(profile).await?;
    let last = Some(binding.last_revision_id.as_str()).filter(|r| !r.is_empty());
    fetch_revision(&reader, &binding.schema, last).await
}

/// Whether a sink table's `schema` (format `avro`) can be written into its topic under
/// [`sink_revision`]: a [`ConfigError`] naming the column and the field otherwise.
pub async fn check_sink_columns(
    profile: PubSubProfile,
    config: SinkConfig,
    schema: ConnectionSchema,
) -> anyhow::Result<()> {
    let topic = client::topic_path(&profile.project, &config.topic);
    let (revision, encoding) = sink_revision(&profile, &topic).await?;
    Serializer::avro(&schema, revision, encoding).map_err(|e| {
        ConfigError::wrap(anyhow::anyhow!(
            "the sink table cannot be written into topic {topic} under its schema: {e}"
        ))
    })?;
    Ok(())
}

/// The columns of `table`'s topic schema (for a source, the topics of its
/// subscriptions, which must all be bound to one schema). Errors are
/// [`ConfigError`]s naming the topic, schema, revision or field, but for a failure to
/// ask: no schema, a Protocol Buffers schema, different schemas across subscriptions, a
/// field no column type holds exactly (e.g. `date`, `decimal`: declare the columns
/// instead, leaving it out).
pub async fn derived_columns(
    profile: PubSubProfile,
    table: PubSubTable,
) -> anyhow::Result<Vec<SourceField>> {
    let mut bindings = Vec::new();
    match &table {
        PubSubTable::Sink(config) => {
            let topic = client::topic_path(&profile.project, &config.topic);
            bindings.push(require_avro_topic(&profile, &topic, "the sink's topic").await?);
        }
        PubSubTable::Source(config) => {
            let admin = client::subscription_admin(&profile).await?;
            for s in &config.subscriptions {
                let name = client::subscription_path(&profile.project, &s.id);
                let sub = bounded(admin.get_subscription().set_subscription(name.clone()))
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot read subscription {name}: {e}"))?;
                let whose = format!("the topic of subscription {name}");
                bindings.push(require_avro_topic(&profile, &sub.topic, &whose).await?);
            }
        }
    }
    let Some(first) = bindings.first() else {
        return Err(ConfigError::wrap(anyhow::anyhow!(
            "the table names no subscription"
        )));
    };
    if let Some(other) = bindings.iter().find(|b| b.schema != first.schema) {
        return Err(ConfigError::wrap(anyhow::anyhow!(
            "its subscriptions read topics bound to different schemas ({} and {}): declare the columns",
            first.schema,
            other.schema
        )));
    }
    let revision = accepted_revision(&profile, first)
        .await?
        .map_err(|e| ConfigError::wrap(anyhow::anyhow!(e)))?;
    let fields = revision.fields();
    let unheld: Vec<String> = fields
        .iter()
        .filter(|f| f.column_type.is_none())
        .map(|f| format!("'{}' ({})", f.name, f.avro_type))
        .collect();
    if !unheld.is_empty() {
        return Err(ConfigError::wrap(anyhow::anyhow!(
            "{} has fields no column type holds exactly: {}; declare the columns, leaving these out",
            revision.describe(),
            unheld.join(", ")
        )));
    }
    Ok(fields
        .into_iter()
        .filter_map(|f| {
            let field = SourceField::new(f.name, f.column_type?);
            Some(if f.nullable { field } else { field.not_null() })
        })
        .collect())
}
