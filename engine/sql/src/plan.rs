//! Parsed SQL -> connections and queries, validated against the connector registry.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use super::error::SqlError;
use super::parse::{InsertDef, PipelineSql, TableDef};
use super::select::plan_select;
use pubsub_engine_plan::{PlannedQuery, PlannedTable, SelectPlan};
use pubsub_engine_spi::record_id::{RECORD_ID_COLUMN, RECORD_KEY, RECORD_KEY_COLUMN};
use pubsub_engine_spi::{
    BadData, ConnectionSchema, ConnectionType, ErasedConnector, FieldType, Format, SourceField,
    TimestampFormat,
};
use pubsub_engine_spi::{EVENT_TIME, EVENT_TIME_COLUMN};

/// When table `sink` stamps record ids ([`pubsub_engine_spi::Connector::sink_record_ids`]), has
/// source table `source` give its rows a record key: a hidden trailing column filled
/// from metadata key [`RECORD_KEY`] (see [`pubsub_engine_spi::record_id`]), once per table. Unknown
/// tables and a source used as a sink are left to the query's own checks.
pub(crate) fn give_record_keys(
    tables: &mut [(String, PlannedTable)],
    source: &str,
    sink: &str,
) -> Result<(), SqlError> {
    let stamps = tables.iter().any(|(n, t)| {
        n == sink
            && t.connection.connection_type == ConnectionType::Sink
            && t.connector.sink_record_ids(&t.connection)
    });
    let Some((_, src)) = tables
        .iter_mut()
        .find(|(n, t)| n == source && t.connection.connection_type == ConnectionType::Source)
    else {
        return Ok(());
    };
    if !stamps || record_key_index(&src.connection.schema).is_some() {
        return Ok(());
    }
    if has_column(&src.connection.schema, RECORD_KEY_COLUMN) {
        return Err(SqlError(format!(
            "table '{source}': column name '{RECORD_KEY_COLUMN}' is reserved for the record key its rows carry to '{sink}', which stamps record ids; rename the column"
        )));
    }
    if !src.connector.source_record_keys() {
        return Err(SqlError(format!(
            "table '{sink}' stamps record ids, but its source table '{source}' (connector '{}') gives its rows no identity that is the same on every replay; read from a Pub/Sub source, or do not stamp record ids",
            src.connector.name()
        )));
    }
    src.connection.schema.fields.push(SourceField {
        name: RECORD_KEY_COLUMN.to_string(),
        field_type: FieldType::Text,
        required: true,
        metadata_key: Some(RECORD_KEY.to_string()),
    });
    Ok(())
}

/// When `ins` is a windowed aggregate over a table without an event-time column
/// (`WATERMARK FOR`), has the table give its rows their event time (publish time, or
/// `scan.event-time.attribute`): a hidden trailing TIMESTAMP column filled from metadata
/// key [`EVENT_TIME`], once per table.
pub(crate) fn give_event_time(
    tables: &mut [(String, PlannedTable)],
    ins: &InsertDef,
) -> Result<(), SqlError> {
    // Windows need it, and an updating join keeps each row for a TTL of event time.
    if !super::aggregate::is_windowed(&ins.query) && !super::join_rows::joins_tables(&ins.query) {
        return Ok(());
    }
    for source in std::iter::once(&ins.source).chain(&ins.joined) {
        give_event_time_to(tables, ins, source)?;
    }
    Ok(())
}

fn give_event_time_to(
    tables: &mut [(String, PlannedTable)],
    ins: &InsertDef,
    source: &str,
) -> Result<(), SqlError> {
    let Some((_, src)) = tables
        .iter_mut()
        .find(|(n, t)| *n == source && t.connection.connection_type == ConnectionType::Source)
    else {
        return Ok(());
    };
    let schema = &src.connection.schema;
    if schema.event_time.is_some() || event_time_index(schema).is_some() {
        return Ok(());
    }
    if !src.connector.own_event_time() {
        let how = if src.connector.event_time_column() {
            ": declare one with WATERMARK FOR a TIMESTAMP column"
        } else {
            ""
        };
        return Err(SqlError(format!(
            "INSERT INTO {}: windows and joins of tables' rows need an event time, and table '{}' (connector '{}') gives its rows none{how}",
            ins.sink,
            source,
            src.connector.name()
        )));
    }
    if has_column(schema, EVENT_TIME_COLUMN) {
        return Err(SqlError(format!(
            "table '{}': column name '{EVENT_TIME_COLUMN}' is reserved for the event time its rows carry to windows; rename the column",
            source
        )));
    }
    src.connection.schema.fields.push(SourceField {
        name: EVENT_TIME_COLUMN.to_string(),
        field_type: FieldType::Timestamp,
        required: true,
        metadata_key: Some(EVENT_TIME.to_string()),
    });
    Ok(())
}

/// Index of the hidden event-time column of a source schema, if it has one.
fn event_time_index(schema: &ConnectionSchema) -> Option<usize> {
    schema
        .fields
        .iter()
        .position(|f| f.metadata_key.as_deref() == Some(EVENT_TIME))
}

fn has_column(schema: &ConnectionSchema, name: &str) -> bool {
    schema.fields.iter().any(|f| f.name == name)
}

/// Index of the hidden record key column of a source schema, if it has one.
pub(crate) fn record_key_index(schema: &ConnectionSchema) -> Option<usize> {
    schema
        .fields
        .iter()
        .position(|f| f.metadata_key.as_deref() == Some(RECORD_KEY))
}

/// The columns SQL sees: every column but the hidden record key and event time.
pub(crate) fn visible(schema: &ConnectionSchema) -> ConnectionSchema {
    ConnectionSchema {
        fields: schema
            .fields
            .iter()
            .filter(|f| {
                !matches!(
                    f.metadata_key.as_deref(),
                    Some(
                        RECORD_KEY
                            | EVENT_TIME
                            | pubsub_engine_spi::dedup::DEDUP_KEY
                            | pubsub_engine_spi::dedup::DEDUP_MESSAGE
                            | pubsub_engine_spi::dedup::DEDUP_PUBLISHED
                    )
                )
            })
            .cloned()
            .collect(),
        ..schema.clone()
    }
}

/// Plans the tables of `sql` alone, as `run` would, without needing an INSERT: for a UI
/// that checks a `CREATE TABLE` statement it wrote. Errors as [`plan_pipeline`](crate::plan_pipeline)'s.
pub fn plan_tables(
    sql: &PipelineSql,
    connectors: &[Arc<dyn ErasedConnector>],
) -> Result<Vec<PlannedTable>, SqlError> {
    sql.tables
        .iter()
        .map(|t| plan_table(t, connectors))
        .collect()
}

/// Plans `ins` (whose tables are `source`, a source table, and `sink`, a sink table) as
/// query `id`: its projection (see [`plan_projection`]; `what` starts its errors), the
/// sink's Arrow schema and the column rows are routed by
/// ([`sink_key`](pubsub_engine_spi::Connector::sink_key)). `text` is `ins` in canonical form.
pub(crate) fn plan_query(
    id: String,
    ins: &InsertDef,
    what: &str,
    source: PlannedTable,
    sink: PlannedTable,
) -> Result<PlannedQuery, SqlError> {
    let record_ids = sink.connector.sink_record_ids(&sink.connection);
    if super::aggregate::is_windowed(&ins.query) {
        return plan_windowed_query(id, ins, what, source, sink, record_ids);
    }
    if is_changelog_source(&source) && sink.changelog.is_none() {
        return Err(refuse_changes_into(ins, what, &sink));
    }
    let mut select = plan_select(
        &ins.query,
        &ins.source,
        &visible(&source.connection.schema),
        what,
    )?;
    if select.unnest.is_some() && is_changelog_source(&source) {
        return Err(unnest_of_changes(ins, what));
    }
    let key = record_key_index(&source.connection.schema);
    if record_ids {
        if has_column(&sink.connection.schema, RECORD_ID_COLUMN) {
            return Err(SqlError(format!(
                "{what}: column name '{RECORD_ID_COLUMN}' of table '{}' is reserved for the record id it stamps; rename the column",
                ins.sink
            )));
        }
        let i = key.ok_or_else(|| {
            SqlError(format!(
                "{what}: the source table '{}' gives its rows no record key (plan its tables with plan_pipeline)",
                ins.source
            ))
        })?;
        select.carry = Some((i, with_column(&select.schema, RECORD_KEY_COLUMN)));
    }
    let (projection, sink_schema) = sink_side(
        ins,
        what,
        &mut select,
        &source.connection.schema,
        &sink,
        record_ids,
    )?;
    let route_by = sink
        .connector
        .sink_key(&sink.connection)
        .and_then(|name| sink_schema.index_of(&name).ok());
    if let Some(j) = route_by.filter(|_| is_changelog_source(&source)) {
        check_key_of_changes(ins, what, &select, &projection, j, &source, &sink_schema)?;
    }
    Ok(PlannedQuery {
        id,
        text: ins.to_string(),
        source,
        sink,
        select: Arc::new(select),
        projection,
        sink_schema,
        route_by,
        window: None,
        job: None,
        late: None,
        late_of: None,
        join: None,
    })
}

/// UNNEST over a changelog source: an update's old and new rows would expand to lists of
/// other lengths, and no change of a row stands for a change of its elements.
fn unnest_of_changes(ins: &InsertDef, what: &str) -> SqlError {
    let msg = format!(
        "{what}: UNNEST over table '{}', a changelog (format 'debezium_json'), is not supported: a change of a row is not a change of each of its elements",
        ins.source
    );
    match super::select::find_function(&ins.query, "unnest") {
        Some(l) => super::clauses::at(l, msg),
        None => SqlError(msg),
    }
}

/// Which select item fills each sink column (see [`PlannedQuery::projection`]), and the
/// sink's Arrow schema: its columns, marked with the source metadata key that fills them,
/// and the record id column when the sink stamps record ids. An item that fills a
/// narrower integer column is converted in `select` itself ([`narrow_into_sink`]).
pub(crate) fn sink_side(
    ins: &InsertDef,
    what: &str,
    select: &mut SelectPlan,
    source: &ConnectionSchema,
    sink: &PlannedTable,
    record_ids: bool,
) -> Result<(Vec<Option<usize>>, SchemaRef), SqlError> {
    let rows = ConnectionSchema {
        fields: select.fields.clone(),
        ..source.clone()
    };
    let column_of_source: Vec<Option<String>> = select
        .exprs
        .iter()
        .map(|(_, text)| {
            let bare = text.trim();
            source
                .fields
                .iter()
                .find(|f| f.name == bare)
                .map(|f| f.name.clone())
        })
        .collect();
    let projection = plan_projection(
        ins,
        what,
        &rows,
        &select.untyped_null,
        &column_of_source,
        &sink.connection.schema,
    )?;
    narrow_into_sink(select, &projection, &sink.connection.schema, &ins.sink);
    let mut sink_schema =
        mark_source_metadata(&sink.connection.schema.arrow_schema(), &projection, &rows);
    if record_ids {
        sink_schema = with_column(&sink_schema, RECORD_ID_COLUMN);
    }
    Ok((projection, sink_schema))
}

/// Converts each select item that fills a narrower integer sink column (see
/// [`is_checked_narrowing`]) into that column's type inside `select`, so that a value
/// that does not fit is a row failure of the SELECT: a source checks it before it emits
/// and sets the message aside under the table's policy (issue 17); in a window's output
/// there is no message to set aside and the job fails. The item reads `CAST(x AS INT)`
/// in errors, as if written.
fn narrow_into_sink(
    select: &mut SelectPlan,
    projection: &[Option<usize>],
    sink: &ConnectionSchema,
    sink_name: &str,
) {
    for (to, from) in projection.iter().enumerate() {
        let Some(i) = *from else { continue };
        let (have, want) = (select.fields[i].field_type, sink.fields[to].field_type);
        if !is_checked_narrowing(have, want) {
            continue;
        }
        let column = format!("column '{}' of table '{sink_name}'", sink.fields[to].name);
        let (expr, text) = &select.exprs[i];
        select.exprs[i] = (
            pubsub_engine_plan::into_sink_column(expr.clone(), want.arrow_type(), column),
            format!("CAST({text} AS {})", want.sql_name()),
        );
        select.fields[i].field_type = want;
        select.schema = retyped(&select.schema, i, want);
        if let Some((key, schema)) = &select.carry {
            select.carry = Some((*key, retyped(schema, i, want)));
        }
    }
}

/// `schema` with column `i` of type `to`.
fn retyped(schema: &SchemaRef, i: usize, to: FieldType) -> SchemaRef {
    let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
    fields[i] = Arc::new(fields[i].as_ref().clone().with_data_type(to.arrow_type()));
    Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// The column a windowed query reads its event time from (index and name): the
/// `WATERMARK FOR` column, or the hidden one the table gives its rows.
pub(crate) fn event_time_of(schema: &ConnectionSchema) -> Option<(usize, String)> {
    match &schema.event_time {
        Some(et) => schema.fields.iter().position(|f| f.name == et.column),
        None => event_time_index(schema),
    }
    .map(|i| (i, schema.fields[i].name.clone()))
}

/// [`plan_query`] of a windowed aggregate (`super::aggregate`).
fn plan_windowed_query(
    id: String,
    ins: &InsertDef,
    what: &str,
    source: PlannedTable,
    sink: PlannedTable,
    record_ids: bool,
) -> Result<PlannedQuery, SqlError> {
    let schema = &source.connection.schema;
    let event_time = event_time_of(schema).ok_or_else(|| {
        SqlError(format!(
            "{what}: table '{}' gives its rows no event time (plan its tables with plan_pipeline)",
            ins.source
        ))
    })?;
    if record_ids && has_column(&sink.connection.schema, RECORD_ID_COLUMN) {
        return Err(SqlError(format!(
            "{what}: column name '{RECORD_ID_COLUMN}' of table '{}' is reserved for the record id it stamps; rename the column",
            ins.sink
        )));
    }
    let changelog = sink.changelog.unwrap_or_default();
    let ns = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let (mut select, mut window) = super::aggregate::plan_windowed(
        &ins.query,
        &ins.source,
        &visible(schema),
        (event_time.0, &event_time.1),
        record_ids,
        (ns(changelog.flush_interval), ns(changelog.state_ttl)),
        what,
    )?;
    let updating = window.window_at.is_none();
    if is_changelog_source(&source) {
        if window.before.unnest.is_some() {
            return Err(unnest_of_changes(ins, what));
        }
        if !updating {
            let msg = format!(
                "{what}: table '{}' is a changelog (format 'debezium_json'), which windows do not read yet: aggregate it without a window (an updating aggregate retracts each change's old row)",
                ins.source
            );
            return Err(match from_at(&ins.query) {
                Some(l) => super::clauses::at(l, msg),
                None => SqlError(msg),
            });
        }
        if sink.changelog.is_none() {
            return Err(refuse_changes_into(ins, what, &sink));
        }
        // A group forgotten while it held rows would take a later retraction of one of
        // them out of the rows that came after: over a changelog, a group lives until
        // its rows are all retracted.
        if changelog.state_ttl != pubsub_engine_plan::ChangelogOptions::default().state_ttl {
            return Err(SqlError(format!(
                "{what}: option '{STATE_TTL_OPTION}' of table '{}' does not apply to an aggregate over a changelog (table '{}'): a group is kept until its rows are all deleted, since a group forgotten earlier would take a later delete out of the wrong rows",
                ins.sink, ins.source
            )));
        }
        if let pubsub_engine_plan::WindowKind::Updating { interval, .. } = window.kind {
            window.kind = pubsub_engine_plan::WindowKind::Updating {
                interval,
                ttl: i64::MAX,
            };
        }
        window.retracting = true;
    }
    if updating && sink.changelog.is_none() {
        let msg = format!(
            "{what}: an aggregate without a window is an updating aggregate: its rows change as rows arrive, which only a changelog can carry, and table '{}' has format '{}': declare it with 'format' = 'debezium_json' (or group by a window: TUMBLE(INTERVAL '1' MINUTE), HOP(slide, width) or SESSION(gap))",
            ins.sink,
            sink.connection.schema.format.name()
        );
        return Err(
            match super::aggregate::first_aggregate_at(&ins.query, &window) {
                Some(l) => super::clauses::at(l, msg),
                None => SqlError(msg),
            },
        );
    }
    // An updating aggregate's changes get their record ids from their group and change,
    // not from the rows' record keys.
    let (projection, sink_schema) = sink_side(
        ins,
        what,
        &mut select,
        schema,
        &sink,
        record_ids && !updating,
    )?;
    if let Some(key) = sink.connector.sink_key(&sink.connection) {
        // Each group's changes are written by the worker owning it, in order: an
        // ordering key made of the group key alone keeps them in order for a consumer.
        let from_group_key = updating
            && sink_schema
                .index_of(&key)
                .ok()
                .and_then(|j| projection[j])
                .is_some_and(|i| {
                    datafusion_physical_expr::utils::collect_columns(&select.exprs[i].0)
                        .iter()
                        .all(|c| c.index() < window.keys)
                });
        if !from_group_key {
            return Err(SqlError(format!(
                "{what}: a windowed aggregate cannot write yet to table '{}', which routes its rows by column '{key}' (its ordering key): its rows are written by the worker owning their group key (an updating aggregate can, when the ordering key is made of its GROUP BY columns alone)",
                ins.sink
            )));
        }
    }
    Ok(PlannedQuery {
        id,
        text: ins.to_string(),
        source,
        sink,
        select: Arc::new(select),
        projection,
        sink_schema,
        route_by: None,
        window: Some(Arc::new(window)),
        job: None,
        late: None,
        late_of: None,
        join: None,
    })
}

/// `schema` and a trailing non-null TEXT column `name`.
fn with_column(schema: &SchemaRef, name: &str) -> SchemaRef {
    let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow::datatypes::Field::new(
        name,
        arrow::datatypes::DataType::Utf8,
        false,
    )));
    Arc::new(arrow::datatypes::Schema::new(fields))
}

/// `schema` with [`SOURCE_METADATA_KEY`](pubsub_engine_spi::SOURCE_METADATA_KEY) on every column
/// that `projection` fills from a source metadata column, naming its key.
fn mark_source_metadata(
    schema: &SchemaRef,
    projection: &[Option<usize>],
    src: &ConnectionSchema,
) -> SchemaRef {
    let fields: Vec<arrow::datatypes::Field> = schema
        .fields()
        .iter()
        .zip(projection)
        .map(
            |(f, i)| match i.and_then(|i| src.fields[i].metadata_key.clone()) {
                Some(key) => f.as_ref().clone().with_metadata(
                    [(pubsub_engine_spi::SOURCE_METADATA_KEY.to_string(), key)].into(),
                ),
                None => f.as_ref().clone(),
            },
        )
        .collect();
    Arc::new(arrow::datatypes::Schema::new(fields))
}

/// Two source tables reading one exclusive resource (e.g. one Pub/Sub subscription) would
/// split its messages between them: each message reaches one reader only. `fix` ends the
/// error, saying what to do instead.
pub(crate) fn check_exclusive_sources(
    tables: &[(String, PlannedTable)],
    fix: &str,
) -> Result<(), SqlError> {
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (name, t) in tables {
        if t.connection.connection_type != ConnectionType::Source {
            continue;
        }
        for resource in t.connector.exclusive_resources(&t.connection) {
            if let Some((_, other)) = seen.iter().find(|(r, _)| *r == resource) {
                return Err(SqlError(format!(
                    "tables '{other}' and '{name}' both read {resource}: each message would reach only one of them; {fix}"
                )));
            }
            seen.push((resource, name));
        }
    }
    Ok(())
}

/// Maps each sink column to the select item that fills it (`src`: the items as columns;
/// `untyped_null`: which of them are a bare `NULL`, fit for any column that may be NULL),
/// checking counts, names, types and nullability. `what` starts the errors about the
/// sink's columns (SQL: `INSERT INTO sink`).
///
/// `column_of_source[i]`: item `i` is this column of the source table as it is (its
/// nullability is the table's to change); `None`: a value the query computes.
pub(crate) fn plan_projection(
    ins: &InsertDef,
    what: &str,
    src: &ConnectionSchema,
    untyped_null: &[bool],
    column_of_source: &[Option<String>],
    sink: &ConnectionSchema,
) -> Result<Vec<Option<usize>>, SqlError> {
    let sink_name = &ins.sink;
    let selected: Vec<usize> = (0..src.fields.len()).collect();
    // Which sink column each selected value goes to.
    let targets: Vec<usize> = match &ins.columns {
        None => {
            if selected.len() != sink.fields.len() {
                return Err(SqlError(format!(
                    "INSERT INTO {sink_name} selects {} columns but the table has {} ({}); name the target columns, e.g. INSERT INTO {sink_name} (a, b) SELECT ...",
                    selected.len(),
                    sink.fields.len(),
                    column_list(sink)
                )));
            }
            (0..sink.fields.len()).collect()
        }
        Some(cols) => {
            if cols.len() != selected.len() {
                return Err(SqlError(format!(
                    "INSERT INTO {sink_name} names {} target columns but selects {} values",
                    cols.len(),
                    selected.len()
                )));
            }
            let mut targets = Vec::new();
            for c in cols {
                let t = sink
                    .fields
                    .iter()
                    .position(|f| f.name == *c)
                    .ok_or_else(|| {
                        SqlError(format!(
                        "{what}: column '{c}' does not exist in table '{sink_name}' (columns: {})",
                        column_list(sink)
                    ))
                    })?;
                if targets.contains(&t) {
                    return Err(SqlError(format!("{what}: column '{c}' is named twice")));
                }
                targets.push(t);
            }
            targets
        }
    };
    let mut projection: Vec<Option<usize>> = vec![None; sink.fields.len()];
    for (from, to) in selected.iter().zip(&targets) {
        projection[*to] = Some(*from);
    }
    for (to, from) in projection.iter().enumerate() {
        let t = &sink.fields[to];
        let Some(from) = from else {
            if t.required {
                return Err(SqlError(format!(
                    "{what}: column '{}' ({} NOT NULL) is not filled by the INSERT, and no row could fill it",
                    t.name,
                    t.field_type.sql_name()
                )));
            }
            continue;
        };
        let f = &src.fields[*from];
        if untyped_null.get(*from) == Some(&true) {
            if t.required {
                return Err(SqlError(format!(
                    "{what}: NULL cannot fill column '{}' ({} NOT NULL)",
                    t.name,
                    t.field_type.sql_name()
                )));
            }
            continue; // a NULL of no type fits any column that may be NULL
        }
        if !is_exact_cast(f.field_type, t.field_type)
            && !is_checked_narrowing(f.field_type, t.field_type)
        {
            return Err(SqlError(format!(
                "{what}: column '{}' ({}) of '{}' cannot be written to column '{}' ({}): {}",
                f.name,
                f.field_type.sql_name(),
                ins.source,
                t.name,
                t.field_type.sql_name(),
                CAST_RULE
            )));
        }
        let source_column = column_of_source.get(*from).cloned().flatten();
        if t.required && !f.required && source_column.is_none() {
            return Err(SqlError(format!(
                "{what}: the query's column '{}' ({}) may be NULL but column '{}' is {} NOT NULL; drop NOT NULL from '{}', or make the value never NULL (e.g. with coalesce)",
                f.name,
                f.field_type.sql_name(),
                t.name,
                t.field_type.sql_name(),
                t.name
            )));
        }
        if t.required && !f.required {
            return Err(SqlError(format!(
                "{what}: column '{c}' ({}) of '{}' may be NULL but column '{}' is {} NOT NULL; declare '{c}' NOT NULL (a message without it is then refused) or drop NOT NULL from '{}'",
                f.field_type.sql_name(),
                ins.source,
                t.name,
                t.field_type.sql_name(),
                t.name,
                c = source_column.as_deref().unwrap_or(&f.name),
            )));
        }
    }
    Ok(projection)
}

fn column_list(s: &ConnectionSchema) -> String {
    s.fields
        .iter()
        .map(|f| format!("{} {}", f.name, f.field_type.sql_name()))
        .collect::<Vec<_>>()
        .join(", ")
}

const CAST_RULE: &str = "only the same type, exact conversions (INT -> BIGINT, INT UNSIGNED -> BIGINT/BIGINT UNSIGNED, INT/INT UNSIGNED/FLOAT -> DOUBLE, any type but BYTEA and arrays -> TEXT, JSON -> TEXT) and integers into narrower integers (checked: a value that does not fit fails its row) are allowed; for another, write the CAST, which fails the row whose value does not fit";

/// Conversions that never fail and never change a value: identity, integer widening,
/// INT, INT UNSIGNED and FLOAT to DOUBLE (exact), and any type but BYTEA (not always
/// UTF-8) and arrays to TEXT. BIGINT -> DOUBLE rounds beyond 2^53 and TEXT -> JSON may not be JSON:
/// refused. An integer into a narrower one is [`is_checked_narrowing`].
pub(crate) fn is_exact_cast(from: FieldType, to: FieldType) -> bool {
    use FieldType::*;
    from == to
        || matches!(
            (from, to),
            (Int, Bigint)
                | (Int, Double)
                | (UInt, Bigint)
                | (UInt, UBigint)
                | (UInt, Double)
                | (Float, Double)
                | (Json, Text)
        )
        // An array's TEXT would be Arrow's rendering (`[a, b]`), not JSON: refused.
        || (to == Text && !matches!(from, Bytea | Array(_)))
}

/// An integer into an integer column that does not hold all of its values (`BIGINT`
/// into `INT`, `BIGINT UNSIGNED` into `BIGINT`, a signed integer into an unsigned one):
/// allowed as Arroyo allows it, but checked, never wrapped (issue 47,
/// [`narrow_into_sink`]).
pub(crate) fn is_checked_narrowing(from: FieldType, to: FieldType) -> bool {
    use FieldType::*;
    let integer = |t| matches!(t, Int | Bigint | UInt | UBigint);
    integer(from) && integer(to) && !is_exact_cast(from, to)
}

pub(crate) fn plan_table(
    t: &TableDef,
    connectors: &[Arc<dyn ErasedConnector>],
) -> Result<PlannedTable, SqlError> {
    let e = |m: String| SqlError(format!("table '{}': {m}", t.name));
    let (connector, mut options, schema) = table_head(t, connectors)?;
    if schema.fields.is_empty() {
        return Err(e(
            "declares no columns (only a table of format 'avro' on a topic with a schema derives them; one with 'json.unstructured' = 'true' has the one column `value JSON`; a sink of format 'json' or 'debezium_json' takes those of the SELECT writing it)".into(),
        ));
    }
    let late_rows = late_rows_option(t, &mut options)?;
    let changelog = changelog_options(t, schema.format, &mut options)?;
    let connection = connector
        .from_options(&t.name, &mut options, &schema)
        .map_err(|x| e(format!("{x:#}")))?;
    if connection.schema.event_time.is_some() {
        let place = t.watermark.as_ref().map_or(String::new(), |w| {
            format!(" (line {}, column {})", w.at.line, w.at.column)
        });
        if connection.connection_type == ConnectionType::Sink {
            return Err(e(format!(
                "is a sink: WATERMARK FOR, 'event_time_field' and 'watermark_field' apply to a table that is read{place}"
            )));
        }
        if !connector.event_time_column() {
            return Err(e(format!(
                "connector '{}' does not read an event-time column: WATERMARK FOR, 'event_time_field' and 'watermark_field' are refused{place}",
                connector.name()
            )));
        }
    }
    // Every option the engine reads, so that a misspelt one gets a did-you-mean.
    let mut known = vec![
        "connector",
        "format",
        "json.timestamp-format",
        UNSTRUCTURED_OPTION,
        "event_time_field",
        "watermark_field",
        LATE_ROWS_OPTION,
        FLUSH_INTERVAL_OPTION,
        STATE_TTL_OPTION,
    ];
    known.extend_from_slice(connector.known_options());
    options.finish(&known).map_err(|x| e(x.to_string()))?;
    check_primary_key(t, &connection)?;
    if late_rows.is_some() && connection.connection_type == ConnectionType::Sink {
        return Err(e(format!(
            "is a sink: option '{}' applies to a table that is read",
            LATE_ROWS_OPTION
        )));
    }
    Ok(PlannedTable {
        connector,
        connection,
        late_rows,
        changelog,
        primary_key: t.primary_key.clone(),
    })
}

/// A changelog source (format `debezium_json`) needs a primary key and takes neither
/// metadata columns (a change's old row would carry the metadata of the message that
/// replaced it) nor an event time (no window reads a changelog); no other table takes a
/// primary key. Errors name the table.
fn check_primary_key(
    t: &TableDef,
    connection: &pubsub_engine_spi::Connection,
) -> Result<(), SqlError> {
    let e = |m: String| SqlError(format!("table '{}': {m}", t.name));
    let changelog = connection.schema.format == Format::DebeziumJson;
    let source = connection.connection_type == ConnectionType::Source;
    if !(changelog && source) {
        if !t.primary_key.is_empty() {
            return Err(e(format!(
                "PRIMARY KEY ({}) applies to a changelog source (a table read with 'format' = 'debezium_json'){}",
                t.primary_key.join(", "),
                if changelog {
                    ": a changelog sink orders each key's changes with 'sink.ordering-key'"
                } else {
                    ""
                }
            )));
        }
        return Ok(());
    }
    if t.primary_key.is_empty() {
        return Err(e(
            "a changelog source (format 'debezium_json') needs a primary key: declare the columns identifying a row, e.g. `id BIGINT PRIMARY KEY` or `PRIMARY KEY (id)`".into(),
        ));
    }
    if let Some(f) = t.fields.iter().find(|f| f.metadata_key.is_some()) {
        return Err(e(format!(
            "column '{}' reads metadata, which a changelog source (format 'debezium_json') does not take: a change's old row would carry the metadata of the message replacing it",
            f.name
        )));
    }
    if connection.schema.event_time.is_some() {
        return Err(e(
            "a changelog source (format 'debezium_json') has no event time: windows do not read changelogs yet (an aggregate without a window does)".into(),
        ));
    }
    Ok(())
}

/// Whether `table` is read as a changelog (format `debezium_json`): its rows are changes.
fn is_changelog_source(table: &PlannedTable) -> bool {
    table.connection.connection_type == ConnectionType::Source
        && table.connection.schema.format == Format::DebeziumJson
}

/// Where `query` reads its table (the FROM's table name), for errors.
fn from_at(query: &sqlparser::ast::Query) -> Option<sqlparser::tokenizer::Location> {
    use sqlparser::ast::{SetExpr, Spanned, TableFactor};
    let SetExpr::Select(s) = query.body.as_ref() else {
        return None;
    };
    match &s.from.first()?.relation {
        TableFactor::Table { name, .. } => Some(name.span().start),
        TableFactor::Derived { subquery, .. } => from_at(subquery),
        _ => None,
    }
}

/// A stateless query over a changelog orders its changes by the sink's ordering key
/// (sink column `j`): only a key computed from the source's primary key alone keeps one
/// row's changes on one key, and so in order for a consumer. Errors otherwise.
fn check_key_of_changes(
    ins: &InsertDef,
    what: &str,
    select: &SelectPlan,
    projection: &[Option<usize>],
    j: usize,
    source: &PlannedTable,
    sink_schema: &SchemaRef,
) -> Result<(), SqlError> {
    let fields = &source.connection.schema.fields;
    let key: Vec<usize> = source
        .primary_key
        .iter()
        .filter_map(|k| fields.iter().position(|f| &f.name == k))
        .collect();
    let of_key = projection[j].is_some_and(|i| {
        datafusion_physical_expr::utils::collect_columns(&select.exprs[i].0)
            .iter()
            .all(|c| key.contains(&c.index()))
    });
    if of_key {
        return Ok(());
    }
    Err(SqlError(format!(
        "{what}: column '{}' of table '{}' is its ordering key, and over a changelog (table '{}') it must be computed from the primary key ({}) alone: a row's changes must keep one ordering key to reach a consumer in order",
        sink_schema.field(j).name(),
        ins.sink,
        ins.source,
        source.primary_key.join(", ")
    )))
}

/// A changelog's rows into a table that is no changelog: refused, with the way on.
fn refuse_changes_into(ins: &InsertDef, what: &str, sink: &PlannedTable) -> SqlError {
    let msg = format!(
        "{what}: table '{}' is a changelog (format 'debezium_json'): its rows are changes (creates, updates and deletes), which only a changelog can carry, and table '{}' has format '{}': declare it with 'format' = 'debezium_json'",
        ins.source,
        ins.sink,
        sink.connection.schema.format.name()
    );
    match from_at(&ins.query) {
        Some(l) => super::clauses::at(l, msg),
        None => SqlError(msg),
    }
}

/// A changelog table's option: how often an updating query writes its changes.
pub const FLUSH_INTERVAL_OPTION: &str = "changelog.flush-interval";
/// A changelog table's option: how long an updating query keeps a group no row reaches.
pub const STATE_TTL_OPTION: &str = "changelog.state-ttl";

/// The changelog options of a table of format `debezium_json` (defaults for those not
/// given), `None` for another format. Errors name the table, the option and the value:
/// an option on another format, a duration that does not parse or is zero.
fn changelog_options(
    t: &TableDef,
    format: Format,
    options: &mut pubsub_engine_spi::ConnectorOptions,
) -> Result<Option<pubsub_engine_plan::ChangelogOptions>, SqlError> {
    let e = |m: String| SqlError(format!("table '{}': {m}", t.name));
    if format == Format::DebeziumJson {
        use pubsub_engine_spi::changelog::{BEFORE_PREFIX, OP_COLUMN};
        if let Some(f) = t
            .fields
            .iter()
            .find(|f| f.name == OP_COLUMN || f.name.starts_with(BEFORE_PREFIX))
        {
            return Err(e(format!(
                "column name '{}' is reserved in a changelog (format 'debezium_json': '{OP_COLUMN}' and names starting '{BEFORE_PREFIX}' carry each change's operation and old row); rename the column",
                f.name
            )));
        }
    }
    let mut out = pubsub_engine_plan::ChangelogOptions::default();
    for (key, slot) in [
        (FLUSH_INTERVAL_OPTION, &mut out.flush_interval),
        (STATE_TTL_OPTION, &mut out.state_ttl),
    ] {
        let raw = options.get(key).map(str::to_string);
        let Some(d) = options
            .pull_opt_duration(key)
            .map_err(|x| e(x.to_string()))?
        else {
            continue;
        };
        let raw = raw.unwrap_or_default();
        if format != Format::DebeziumJson {
            return Err(e(format!(
                "option '{key}' applies to format 'debezium_json' only (a changelog), was '{raw}'"
            )));
        }
        if d < std::time::Duration::from_millis(1) {
            return Err(e(format!(
                "option '{key}' is invalid: must be at least 1 ms, was '{raw}'"
            )));
        }
        *slot = d;
    }
    Ok((format == Format::DebeziumJson).then_some(out))
}

/// The table's connector, its options less `connector`, `format` and
/// `json.timestamp-format`, and its schema (format and declared columns). Errors name
/// the table and the option.
pub(crate) fn table_head(
    t: &TableDef,
    connectors: &[Arc<dyn ErasedConnector>],
) -> Result<
    (
        Arc<dyn ErasedConnector>,
        pubsub_engine_spi::ConnectorOptions,
        ConnectionSchema,
    ),
    SqlError,
> {
    let e = |m: String| SqlError(format!("table '{}': {m}", t.name));
    let mut options = t.options.clone();
    let name = options
        .pull_str("connector")
        .map_err(|x| e(x.to_string()))?;
    let connector = connectors
        .iter()
        .find(|c| c.name() == name)
        .cloned()
        .ok_or_else(|| {
            let known: Vec<&str> = connectors.iter().map(|c| c.name()).collect();
            e(format!(
                "option 'connector' is invalid: unknown connector, was '{name}' (known: {})",
                known.join(", ")
            ))
        })?;
    let format = match options
        .pull_opt_str("format")
        .map_err(|x| e(x.to_string()))?
    {
        None => Format::Json,
        Some(f) => Format::parse(&f).ok_or_else(|| {
            e(format!(
                "option 'format' is invalid: must be {}, was '{f}'",
                Format::VALUES
            ))
        })?,
    };
    let timestamp_format = match options
        .pull_opt_str("json.timestamp-format")
        .map_err(|x| e(x.to_string()))?
    {
        None => TimestampFormat::default(),
        Some(v) => {
            if !matches!(format, Format::Json | Format::DebeziumJson) {
                return Err(e(format!(
                    "option 'json.timestamp-format' applies to formats 'json' and 'debezium_json' only, was '{v}'"
                )));
            }
            TimestampFormat::parse(&v).ok_or_else(|| {
                e(format!(
                    "option 'json.timestamp-format' is invalid: must be one of {}, was '{v}'",
                    TimestampFormat::VALUES
                ))
            })?
        }
    };
    let (format, fields) = unstructured(t, format, &mut options)?;
    let event_time =
        super::watermark::event_time(&t.name, &fields, t.watermark.as_ref(), &mut options)?;
    let schema = ConnectionSchema {
        format,
        timestamp_format,
        bad_data: BadData::Fail,
        fields,
        event_time,
    };
    Ok((connector, options, schema))
}

/// A `json` table's option: the whole payload in one JSON column `value`.
pub const UNSTRUCTURED_OPTION: &str = "json.unstructured";

/// Applies [`UNSTRUCTURED_OPTION`]: with `'true'` on a `json` table, format
/// `JsonUnstructured` and the columns `value JSON` when none are declared (the declared
/// ones otherwise: the decoder then checks for exactly one payload column `value JSON`).
/// Errors name the table, the option and the value: not a boolean, or on another format.
fn unstructured(
    t: &TableDef,
    format: Format,
    options: &mut pubsub_engine_spi::ConnectorOptions,
) -> Result<(Format, Vec<SourceField>), SqlError> {
    let e = |m: String| SqlError(format!("table '{}': {m}", t.name));
    let raw = options.get(UNSTRUCTURED_OPTION).map(str::to_string);
    let on = options
        .pull_opt_bool(UNSTRUCTURED_OPTION)
        .map_err(|x| e(x.to_string()))?;
    match on {
        Some(true) if format != Format::Json => Err(e(format!(
            "option '{UNSTRUCTURED_OPTION}' applies to format 'json' only, was '{}' with format '{}'",
            raw.unwrap_or_default(),
            format.name()
        ))),
        Some(true) => {
            let fields = if t.fields.is_empty() {
                vec![SourceField::new("value", FieldType::Json)]
            } else {
                t.fields.clone()
            };
            Ok((Format::JsonUnstructured, fields))
        }
        _ => Ok((format, t.fields.clone())),
    }
}

/// A source table's option naming the sink table its late rows go to (decision 0045).
pub const LATE_ROWS_OPTION: &str = "scan.late-rows.table";

/// Pulls [`LATE_ROWS_OPTION`] from a table's options. Errors: an empty value (naming the table).
fn late_rows_option(
    t: &TableDef,
    options: &mut pubsub_engine_spi::ConnectorOptions,
) -> Result<Option<String>, SqlError> {
    let value = options
        .pull_opt_str(LATE_ROWS_OPTION)
        .map_err(|x| SqlError(format!("table '{}': {x}", t.name)))?;
    match value {
        Some(v) if v.trim().is_empty() => Err(SqlError(format!(
            "table '{}': option '{LATE_ROWS_OPTION}' is invalid: must name a sink table, was '{v}'",
            t.name
        ))),
        v => Ok(v),
    }
}
