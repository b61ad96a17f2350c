//! Columns a table leaves out, read from the schema its resource is bound to (issue 18):
//! `CREATE TABLE t WITH ('format' = 'avro', ...)` on a topic with an Avro schema. The one
//! planning step that does I/O, so it runs before [`plan_pipeline`](super::plan_pipeline),
//! which stays synchronous.

use std::sync::Arc;

use super::parse::PipelineSql;
use super::plan::table_head;
use crate::spi::{ConfigError, ErasedConnector};

/// Gives every table of `sql` that declares no payload column (none at all, or only
/// `METADATA FROM` ones) the columns its connector derives
/// ([`ErasedConnector::derive_fields`]), in the schema's order, before its declared
/// metadata columns. A table whose connector derives none is left as it is (planning then
/// refuses a table without columns). Tables are asked one after the other.
///
/// Errors name the table. A bad option or a schema that cannot give columns is a
/// [`ConfigError`] (no retry fixes it); a failure to reach the schema is not.
pub async fn derive_columns(
    sql: &mut PipelineSql,
    connectors: &[Arc<dyn ErasedConnector>],
) -> anyhow::Result<()> {
    for t in sql.tables.iter_mut() {
        if t.fields.iter().any(|f| f.metadata_key.is_none()) {
            continue;
        }
        let (connector, mut options, schema) =
            table_head(t, connectors).map_err(ConfigError::wrap)?;
        let connection = connector
            .from_options(&t.name, &mut options, &schema)
            .map_err(|e| ConfigError::wrap(anyhow::anyhow!("table '{}': {e:#}", t.name)))?;
        let derive = connector.derive_fields(
            connection.config["profile"].clone(),
            connection.config["table"].clone(),
            &schema,
        );
        let Some(derive) = derive else { continue };
        // A ConfigError stays findable under the context (`ConfigError::is_in`).
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
