//! The columns of a `format = 'avro'` table that declares none, from its topic's Avro
//! schema (issue 18): one column per top-level field, named as the field, of the column
//! type that holds each of its values exactly, nullable when the field's type is a union
//! with `null`. The revision is the newest the topic accepts (its `last_revision_id`, else
//! the schema's newest), the one a sink writes with.

use pubsub_engine::{ConfigError, SourceField};
use pubsub_schema::{PubSubProfile, PubSubTable};

use crate::avro::{fetch_revision, require_avro_topic, SchemaReader};
use crate::client;
use crate::diagnose::bounded;

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
    let reader = SchemaReader::new(&profile).await?;
    let last = Some(first.last_revision_id.as_str()).filter(|r| !r.is_empty());
    let revision = fetch_revision(&reader, &first.schema, last)
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
