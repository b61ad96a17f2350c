//! A sink table declared without columns takes them from the query that writes it
//! (issue 47, item 3; Arroyo's): the name and type of each select item, in order, NULL
//! allowed where the item may be NULL. For the formats that write declared columns
//! (`json`, `debezium_json`); `avro` takes them from the topic's schema
//! (`schemas.rs`), `raw_*` and `json.unstructured` have their one `value` column.

use pubsub_engine_plan::PlannedTable;
use pubsub_engine_spi::{ConnectionType, SourceField};

use super::error::SqlError;
use super::parse::{InsertDef, PipelineSql, TableDef};
use super::plan::{event_time_of, visible, UNSTRUCTURED_OPTION};

/// Whether `t` takes its columns from the query writing it: it declares no payload
/// column (only `METADATA FROM` ones, or none), an INSERT writes it, and its format
/// writes declared columns.
pub(crate) fn takes_query_columns(t: &TableDef, sql: &PipelineSql) -> bool {
    let format = t.options.get("format").unwrap_or("json");
    let unstructured = t
        .options
        .get(UNSTRUCTURED_OPTION)
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "yes"));
    t.fields.iter().all(|f| f.metadata_key.is_some())
        && matches!(format, "json" | "debezium_json")
        && !unstructured
        && sql.inserts.iter().any(|i| i.sink == t.name)
}

/// `t` with the columns of the first INSERT writing it (its other INSERTs must then fit
/// them, as into any table), in select order: an item named like a declared metadata
/// column fills it (`ok TEXT METADATA FROM 'ordering-key'` and `... AS ok`), declared
/// columns no item names follow. `tables`: the planned source tables, with their event
/// time given.
///
/// Errors, naming the table: an INSERT with a column list (there is nothing to list),
/// a source that is not a planned source table, and every error planning the SELECT has.
pub(crate) fn with_query_columns(
    t: &TableDef,
    sql: &PipelineSql,
    tables: &[(String, PlannedTable)],
) -> Result<TableDef, SqlError> {
    let ins = sql
        .inserts
        .iter()
        .find(|i| i.sink == t.name)
        .expect("takes_query_columns found an INSERT");
    let what = format!("INSERT INTO {}", ins.sink);
    if ins.columns.is_some() {
        return Err(SqlError(format!(
            "{what}: table '{}' declares no columns, so it takes the select list's names and types: write the INSERT without a column list, or declare the columns",
            t.name
        )));
    }
    let source = tables
        .iter()
        .find(|(n, p)| {
            *n == ins.source && p.connection.connection_type == ConnectionType::Source
        })
        .map(|(_, p)| p)
        .ok_or_else(|| {
            SqlError(format!(
                "{what}: table '{}' declares no columns, and its SELECT reads '{}', which is not a source table of the pipeline",
                t.name, ins.source
            ))
        })?;
    let joined = ins.joined.as_ref().and_then(|j| {
        tables
            .iter()
            .find(|(n, p)| n == j && p.connection.connection_type == ConnectionType::Source)
            .map(|(_, p)| p)
    });
    let select = select_of(ins, source, joined, &what)?;
    // In select order; an item named like a declared (metadata) column fills that one,
    // and declared columns no item names follow.
    let mut fields: Vec<SourceField> = select
        .fields
        .iter()
        .map(|f| match t.fields.iter().find(|d| d.name == f.name) {
            Some(declared) => declared.clone(),
            None => SourceField {
                name: f.name.clone(),
                field_type: f.field_type,
                required: f.required,
                metadata_key: None,
            },
        })
        .collect();
    fields.extend(
        t.fields
            .iter()
            .filter(|d| !select.fields.iter().any(|f| f.name == d.name))
            .cloned(),
    );
    Ok(TableDef {
        fields,
        ..t.clone()
    })
}

/// The SELECT of `ins` planned over `source` (windowed or not) for its output columns
/// only: what a table taking its columns from that query gets. `what` names the INSERT.
pub(crate) fn select_of(
    ins: &InsertDef,
    source: &PlannedTable,
    joined: Option<&PlannedTable>,
    what: &str,
) -> Result<pubsub_engine_plan::SelectPlan, SqlError> {
    if let Some(name) = &ins.joined {
        let right = joined.ok_or_else(|| {
            SqlError(format!(
                "{what}: its join reads '{name}', which is not a source table of the pipeline"
            ))
        })?;
        return Ok(super::join::plan_parts(ins, what, [source, right], false)?.select);
    }
    let schema = &source.connection.schema;
    if !super::aggregate::is_windowed(&ins.query) {
        return super::select::plan_select(&ins.query, &ins.source, &visible(schema), what);
    }
    let event_time = event_time_of(schema).ok_or_else(|| {
        SqlError(format!(
            "{what}: table '{}' gives its rows no event time",
            ins.source
        ))
    })?;
    // The flush options do not change the columns.
    let updating = (1_000_000_000, 86_400_000_000_000);
    Ok(super::aggregate::plan_windowed(
        &ins.query,
        &ins.source,
        &visible(schema),
        (event_time.0, &event_time.1),
        false,
        updating,
        what,
    )?
    .0)
}
