//! `scan.dedup.*` in a cluster (decision 0046): a deduplicating source table gets three
//! hidden columns, its rows' key, message and publish time, which each query's route
//! hashes and its sink operator checks, so a copy is dropped whichever process read it.

use crate::pipeline::{PlannedPipeline, PlannedTable};
use pubsub_engine_spi::dedup::{
    DedupSpec, DEDUP_KEY, DEDUP_KEY_COLUMN, DEDUP_MESSAGE, DEDUP_MESSAGE_COLUMN, DEDUP_PUBLISHED,
    DEDUP_PUBLISHED_COLUMN,
};
use pubsub_engine_spi::{FieldType, SourceField};

/// Where a query's sink operator finds what it checks copies by.
#[derive(Debug, Clone)]
pub struct DedupColumns {
    pub spec: DedupSpec,
    /// Index of the hidden key column (TEXT `ID#N`, NULL for a message without an id:
    /// never a copy) in the source's rows.
    pub key: usize,
    /// Index of the hidden message column (TEXT, the delivery's subscription and id).
    pub message: usize,
    /// Index of the hidden publish-time column (TIMESTAMP, ns) in the source's rows.
    pub published: usize,
}

/// The deduplication columns of source table `table`, once
/// [`PlannedPipeline::dedup_in_dataflow`] gave them (a cluster); `None` otherwise.
pub fn dedup_columns(table: &PlannedTable) -> Option<DedupColumns> {
    let spec = table.connector.source_dedup(&table.connection)?;
    let at = |key: &str| {
        table
            .connection
            .schema
            .fields
            .iter()
            .position(|f| f.metadata_key.as_deref() == Some(key))
    };
    Some(DedupColumns {
        spec,
        key: at(DEDUP_KEY)?,
        message: at(DEDUP_MESSAGE)?,
        published: at(DEDUP_PUBLISHED)?,
    })
}

impl PlannedPipeline {
    /// For a cluster of several processes: every deduplicating source table
    /// ([`pubsub_engine_spi::Connector::source_dedup`]) gets its hidden key, message and publish-time columns,
    /// which its queries' routes hash and their sink operators check.
    ///
    /// Errors (nothing runs): a windowed query or a sink routed by an ordering key over
    /// such a table (their rows go through a keyed exchange of their own; the ids cannot
    /// share it), or a declared column with a reserved name; each names the query, the
    /// table and the way on (one process, any `--workers`).
    pub fn dedup_in_dataflow(&mut self) -> Result<(), String> {
        for q in &mut self.queries {
            if let Some(j) = &q.join {
                for t in [&q.source, &j.right_source] {
                    if let Some(spec) = t.connector.source_dedup(&t.connection) {
                        return Err(format!(
                            "{}: table '{}' drops copies by record id ('{}'), which in a cluster of several processes runs behind an exchange by record id; a join (its rows are exchanged by their join key) cannot share it yet: run the job as one process (any --workers)",
                            q.text, t.connection.name, spec.attribute_option
                        ));
                    }
                }
                continue;
            }
            let table = &q.source;
            let Some(spec) = table.connector.source_dedup(&table.connection) else {
                continue;
            };
            let name = table.connection.name.clone();
            let why = if q.window.is_some() || q.late_of.is_some() {
                Some("a windowed query (its rows are exchanged by their group key)")
            } else if q.route_by.is_some() {
                Some("a query whose sink routes its rows by an ordering key (an exchange by that key)")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(format!(
                    "{}: table '{name}' drops copies by record id ('{}'), which in a cluster of several processes runs behind an exchange by record id; {why} cannot share it yet: run the job as one process (any --workers)",
                    q.text, spec.attribute_option
                ));
            }
            let schema = &mut q.source.connection.schema;
            for (column, key, field_type) in [
                (DEDUP_KEY_COLUMN, DEDUP_KEY, FieldType::Text),
                (DEDUP_MESSAGE_COLUMN, DEDUP_MESSAGE, FieldType::Text),
                (
                    DEDUP_PUBLISHED_COLUMN,
                    DEDUP_PUBLISHED,
                    FieldType::Timestamp,
                ),
            ] {
                if schema
                    .fields
                    .iter()
                    .any(|f| f.metadata_key.as_deref() == Some(key))
                {
                    continue;
                }
                if schema.fields.iter().any(|f| f.name == column) {
                    return Err(format!(
                        "table '{name}': column name '{column}' is reserved for the deduplication its rows go through in a cluster; rename the column"
                    ));
                }
                schema.fields.push(SourceField {
                    name: column.to_string(),
                    field_type,
                    required: false,
                    metadata_key: Some(key.to_string()),
                });
            }
        }
        Ok(())
    }
}
