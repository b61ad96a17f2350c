//! An updating join (issue 48, part 1; decision 0056): `SELECT ... FROM a [INNER] JOIN b
//! ON a.k = b.k [AND ...] [WHERE ...]`, two tables' rows joined as they arrive, each row
//! kept for the sink's `changelog.state-ttl` of event time (see
//! `pubsub_engine_plan::join_rows`), written into a changelog table.
//!
//! DataFusion plans the whole statement (the join's type, its condition, what is written
//! from the joined rows); each side's first stage is its join keys, its columns and its
//! event time, routed by the keys.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use datafusion_expr::JoinType;
use datafusion_physical_expr::expressions::Column as ColumnExpr;
use datafusion_physical_expr::PhysicalExpr;
use sqlparser::ast::{Query, SetExpr, TableFactor};

use super::error::SqlError;
use super::join::{
    after_join, check_sides, conditions, equated, join_of, plan_statement, Equated, Parts, SIDE,
};
use super::parse::InsertDef;
use super::plan::{event_time_of, record_key_index, visible};
use pubsub_engine_plan::type_words::sql_type;
use pubsub_engine_plan::{JoinKind, PlannedTable, SelectPlan, WindowKind, WindowPlan};
use pubsub_engine_spi::record_id::RECORD_KEY_COLUMN;
use pubsub_engine_spi::SourceField;

/// Whether `query` joins two tables (not subqueries): an updating join.
pub(crate) fn joins_tables(query: &Query) -> bool {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    let Some(from) = select.from.first() else {
        return false;
    };
    let table = |f: &TableFactor| matches!(f, TableFactor::Table { .. });
    table(&from.relation) && from.joins.first().is_some_and(|j| table(&j.relation))
}

/// Plans the updating join `ins` over `tables` (left, right) up to its sink.
///
/// Errors: a changelog or late-rows table read, a table without an event time, a join
/// that is not inner, a condition that is not equalities of a column of each side (of one
/// type), no condition, an aggregate or window function over the joined rows, and the
/// errors of the select list over the joined rows.
pub(crate) fn plan_parts(
    ins: &InsertDef,
    what: &str,
    tables: [&PlannedTable; 2],
    record_ids: bool,
) -> Result<Parts, SqlError> {
    let names = [ins.source.clone(), ins.joined.clone().unwrap_or_default()];
    let mut event_times = Vec::new();
    for s in 0..2 {
        let (table, name) = (tables[s], &names[s]);
        let refuse = |m: String| SqlError(format!("{what}: the {} side of the join {m}", SIDE[s]));
        if table.connection.schema.format == pubsub_engine_spi::Format::DebeziumJson {
            return Err(refuse(format!(
                "reads table '{name}', a changelog (format 'debezium_json'), which joins do not read yet"
            )));
        }
        if let Some(late) = &table.late_rows {
            return Err(refuse(format!(
                "reads table '{name}', which writes its late rows to '{late}' ('scan.late-rows.table'): a join does not write late rows yet; drop the option or read another table"
            )));
        }
        event_times.push(event_time_of(&table.connection.schema).ok_or_else(|| {
            SqlError(format!(
                "{what}: table '{name}' gives its rows no event time (plan its tables with plan_pipeline)"
            ))
        })?);
    }

    let coerced = plan_statement(ins, what, &names, tables)?;
    let (above, join) = join_of(&coerced, what)?;
    if join.join_type != JoinType::Inner {
        return Err(SqlError(format!(
            "{what}: a {} join of two tables' rows is not supported: without a window it would write a row with NULLs and retract it when a match arrives; write [INNER] JOIN, or join two windowed aggregates",
            join.join_type
        )));
    }
    let visible_of = |s: usize| visible(&tables[s].connection.schema).arrow_schema();
    check_sides(join, [visible_of(0).as_ref(), visible_of(1).as_ref()], what)?;

    // The condition: equalities of a column of each side, ANDed.
    let conditions = conditions(join);
    let (ls, rs) = (join.left.schema(), join.right.schema());
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for c in &conditions {
        match equated(c, ls, rs) {
            Equated::Columns(l, r) => pairs.push((l, r)),
            Equated::Cast(l, r) => {
                return Err(SqlError(format!(
                    "{what}: the join matches '{}' ({}) with '{}' ({}): columns of one type match; declare both tables' columns with one type",
                    ls.field(l).name(),
                    sql_type(ls.field(l).data_type()),
                    rs.field(r).name(),
                    sql_type(rs.field(r).data_type()),
                )))
            }
            Equated::Other => {
                return Err(SqlError(format!(
                    "{what}: the join condition `{c}` is not supported: ON takes equalities of a column of each side, ANDed (write other conditions in WHERE)"
                )))
            }
        }
    }
    if pairs.is_empty() {
        return Err(SqlError(format!(
            "{what}: a join of two tables' rows needs ON equalities of a column of each side (its keys), e.g. ON a.k = b.k"
        )));
    }

    // Each side: its first stage and its columns as joined.
    let mut planned = Vec::new();
    for s in 0..2 {
        let keys: Vec<usize> = pairs
            .iter()
            .map(|p| if s == 0 { p.0 } else { p.1 })
            .collect();
        planned.push(side(
            ins,
            what,
            tables[s],
            &names[s],
            &keys,
            &event_times[s],
            record_ids,
        )?);
    }

    let mut fields: Vec<Field> = Vec::new();
    for (after, _) in &planned {
        fields.extend(after.schema.fields().iter().map(|f| f.as_ref().clone()));
    }
    let record_key_at = fields.len();
    fields.push(Field::new(RECORD_KEY_COLUMN, DataType::Utf8, false));
    let joined = Arc::new(Schema::new(fields));
    let select = after_join(
        ins,
        what,
        &above,
        &join.schema,
        &planned,
        &tables[0].connection.schema,
        record_ids,
        record_key_at,
    )?;
    let n = pairs.len();
    Ok(Parts {
        kind: JoinKind::Inner,
        planned,
        pairs: (0..n).map(|i| (i, i)).collect(),
        route: [(0..n).collect(), (0..n).collect()],
        joined,
        select,
        updating: true,
    })
}

/// One side of an updating join: its columns as joined (`after`, reading the first
/// stage's rows) and its first stage (`[keys.., columns.., event time]`, the record key
/// carried when the sink stamps record ids) as a window plan's (used for its first stage
/// and routing only).
fn side(
    ins: &InsertDef,
    what: &str,
    table: &PlannedTable,
    name: &str,
    keys: &[usize],
    event_time: &(usize, String),
    record_ids: bool,
) -> Result<(SelectPlan, WindowPlan), SqlError> {
    let schema = &table.connection.schema;
    let shown = visible(schema);
    let arrow = schema.arrow_schema();
    // A visible column's index among the table's rows (hidden columns trail, but look).
    let at = |f: &SourceField| -> usize {
        schema
            .fields
            .iter()
            .position(|g| g.name == f.name)
            .expect("a visible column is a column")
    };
    let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
    let mut fields: Vec<SourceField> = Vec::new();
    let mut push = |f: &SourceField, out_name: String, text: String, exprs: &mut Vec<_>| {
        exprs.push((
            Arc::new(ColumnExpr::new(&f.name, at(f))) as Arc<dyn PhysicalExpr>,
            text,
        ));
        fields.push(SourceField {
            name: out_name,
            ..f.clone()
        });
    };
    for (i, &k) in keys.iter().enumerate() {
        let f = &shown.fields[k];
        push(
            f,
            format!("__key{i}"),
            format!("{name}.{}", f.name),
            &mut exprs,
        );
    }
    for f in &shown.fields {
        push(f, f.name.clone(), format!("{name}.{}", f.name), &mut exprs);
    }
    exprs.push((
        Arc::new(ColumnExpr::new(&event_time.1, event_time.0)),
        format!("event time ({})", event_time.1),
    ));
    fields.push(SourceField {
        name: "__event_time".into(),
        field_type: pubsub_engine_spi::FieldType::Timestamp,
        required: true,
        metadata_key: None,
    });
    let field_of = |f: &SourceField, i: usize| {
        Field::new(&f.name, arrow.field(i).data_type().clone(), !f.required)
    };
    let sources: Vec<usize> = keys
        .iter()
        .map(|&k| at(&shown.fields[k]))
        .chain(shown.fields.iter().map(at))
        .chain([event_time.0])
        .collect();
    let before_schema = Arc::new(Schema::new(
        fields
            .iter()
            .zip(&sources)
            .map(|(f, &i)| field_of(f, i))
            .collect::<Vec<_>>(),
    ));
    let carry = match record_ids {
        false => None,
        true => {
            let i = record_key_index(schema).ok_or_else(|| {
                SqlError(format!(
                    "{what}: the source table '{name}' gives its rows no record key (plan its tables with plan_pipeline)"
                ))
            })?;
            let mut fs: Vec<Field> = before_schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            fs.push(Field::new(RECORD_KEY_COLUMN, DataType::Utf8, false));
            Some((i, Arc::new(Schema::new(fs))))
        }
    };
    let before = SelectPlan {
        filter: None,
        untyped_null: vec![false; exprs.len()],
        exprs,
        fields,
        schema: before_schema.clone(),
        message_id: schema
            .fields
            .iter()
            .position(|f| f.metadata_key.as_deref() == Some("message-id")),
        carry,
        keep_source: false,
        unnest: None,
    };
    // Its columns as joined: the first stage's after the keys.
    let n = keys.len();
    let after = SelectPlan {
        filter: None,
        exprs: shown
            .fields
            .iter()
            .enumerate()
            .map(|(j, f)| {
                (
                    Arc::new(ColumnExpr::new(&f.name, n + j)) as Arc<dyn PhysicalExpr>,
                    f.name.clone(),
                )
            })
            .collect(),
        untyped_null: vec![false; shown.fields.len()],
        fields: shown.fields.clone(),
        schema: shown.arrow_schema(),
        message_id: None,
        carry: None,
        keep_source: false,
        unnest: None,
    };
    let window = WindowPlan {
        kind: WindowKind::Updating {
            interval: 0,
            ttl: 0,
        },
        before: Arc::new(before),
        keys: n,
        aggregates: Vec::new(),
        output: before_schema,
        window_at: None,
        having: None,
        text: ins.to_string(),
        retracting: false,
        route: None,
        rank: None,
    };
    Ok((after, window))
}
