//! The schemas tables are bound to outside the pipeline (issue 18: a topic's Avro
//! schema), read when the pipeline is planned: `CREATE TABLE t WITH ('format' = 'avro',
//! ...)` without columns takes them from the schema, and declared columns are checked
//! against it. The one planning step that does I/O, so it runs before
//! [`plan_pipeline`](super::plan_pipeline), which stays synchronous.

use std::sync::Arc;

use super::parse::PipelineSql;
use super::plan::table_head;
use pubsub_engine_spi::{ConfigError, ErasedConnector};

/// For every table of `sql`: one that declares no payload column (none at all, or only
/// `METADATA FROM` ones) gets the columns its connector derives
/// ([`ErasedConnector::derive_fields`]), in the schema's order, before its declared
/// metadata columns; one that declares them has them checked
/// ([`ErasedConnector::check_fields`]). A connector with nothing to derive or check
/// leaves the table as it is (planning then refuses a table without columns). Tables are
/// read one after the other; a pipeline whose connectors bind no schema does no I/O.
///
/// Errors name the table. A bad option or a schema the columns do not fit is a
/// [`ConfigError`] (no retry fixes it); a failure to reach the schema is not.
pub async fn resolve_schemas(
    sql: &mut PipelineSql,
    connectors: &[Arc<dyn ErasedConnector>],
) -> anyhow::Result<()> {
    for t in sql.tables.iter_mut() {
        let (connector, mut options, schema) =
            table_head(t, connectors).map_err(ConfigError::wrap)?;
        let connection = connector
            .from_options(&t.name, &mut options, &schema)
            .map_err(|e| ConfigError::wrap(anyhow::anyhow!("table '{}': {e:#}", t.name)))?;
        let (profile, table) = (
            connection.config["profile"].clone(),
            connection.config["table"].clone(),
        );
        // A ConfigError stays findable under the context (`ConfigError::is_in`).
        if t.fields.iter().any(|f| f.metadata_key.is_none()) {
            if let Some(check) = connector.check_fields(profile, table, &schema) {
                check.await.map_err(|e| {
                    e.context(format!(
                        "table '{}': its columns do not fit its schema",
                        t.name
                    ))
                })?;
            }
            continue;
        }
        let Some(derive) = connector.derive_fields(profile, table, &schema) else {
            continue;
        };
        let derived = derive.await.map_err(|e| {
            e.context(format!(
                "table '{}' declares no columns, and they cannot be read from its schema",
                t.name
            ))
        })?;
        for f in &derived {
            if t.fields.iter().any(|m| m.name == f.name) {
                return Err(ConfigError::wrap(anyhow::anyhow!(
                    "table '{}': its schema has a field '{}', the name of a declared METADATA column: rename the column",
                    t.name,
                    f.name
                )));
            }
        }
        let metadata = std::mem::take(&mut t.fields);
        t.fields = derived;
        t.fields.extend(metadata);
    }
    Ok(())
}
