//! A windowed join (issue 48, part 1; decision 0055): `SELECT ... FROM (windowed aggregate
//! of a) x [INNER | LEFT | RIGHT | FULL] JOIN (windowed aggregate of b) y ON x.window =
//! y.window AND x.k = y.k [WHERE ...]`.
//!
//! Each side is planned as the windowed aggregate it is (`aggregate.rs`, its window kept
//! in its select list); DataFusion plans the whole statement for the join's type, its
//! condition and what is written from the joined rows, folded into one [`SelectPlan`].
//! Both sides' windows must be the same TUMBLE or HOP, and the condition must match the
//! windows and, pairwise, group keys of equal types: each side's rows are then routed by
//! those keys, so the groups that can match meet on one subtask.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use datafusion_common::DFSchema;
use datafusion_expr::planner::ContextProvider;
use datafusion_expr::utils::split_conjunction;
use datafusion_expr::{BinaryExpr, Expr, ExprSchemable, JoinType, LogicalPlan, Operator};
use datafusion_optimizer::analyzer::Analyzer;
use datafusion_physical_expr::expressions::Column as ColumnExpr;
use datafusion_sql::planner::SqlToRel;
use sqlparser::ast::{Query, SetExpr, Spanned, Statement, TableFactor};
use sqlparser::tokenizer::Location;

use super::aggregate::{fold, peel, plan_windowed_as};
use super::catalog::Catalog;
use super::clauses::at;
use super::error::SqlError;
use super::parse::InsertDef;
use super::plan::{event_time_of, visible};
use super::select::{output_item, schema_of, select_items, to_physical};
use super::window_fns::window_type;
use pubsub_engine_plan::type_words::sql_type;
use pubsub_engine_plan::{
    JoinKind, JoinPlan, JoinSide, PlannedQuery, PlannedTable, SelectPlan, WindowKind, WindowPlan,
};
use pubsub_engine_spi::record_id::{RECORD_ID_COLUMN, RECORD_KEY_COLUMN};
use pubsub_engine_spi::{ConnectionSchema, SourceField};

pub(super) const SIDE: [&str; 2] = ["left", "right"];

/// Plans `ins`, a join reading `tables` (left, right) into `sink`, as query `id`.
///
/// Errors, with the position of what they name: a side that is not a windowed aggregate
/// (or is a SESSION window, or ranks its rows), windows that differ, a condition that is
/// not equalities of a column of each side, no match of the windows, a key matched with a
/// non-key or with a key of another type, an aggregate or window function over the
/// joined rows, a changelog or late-rows table read, and every error of a side's
/// windowed aggregate.
pub(crate) fn plan_join(
    id: String,
    ins: &InsertDef,
    what: &str,
    tables: [PlannedTable; 2],
    sink: PlannedTable,
) -> Result<PlannedQuery, SqlError> {
    let record_ids = sink.connector.sink_record_ids(&sink.connection);
    if record_ids
        && sink
            .connection
            .schema
            .fields
            .iter()
            .any(|f| f.name == RECORD_ID_COLUMN)
    {
        return Err(SqlError(format!(
            "{what}: column name '{RECORD_ID_COLUMN}' of table '{}' is reserved for the record id it stamps; rename the column",
            ins.sink
        )));
    }
    let Parts {
        kind,
        planned,
        pairs,
        route,
        joined,
        mut select,
        updating,
    } = plan_parts(ins, what, [&tables[0], &tables[1]], record_ids)?;
    // An updating join keeps each side's rows for the changelog's state TTL (event time).
    let ttl = match (updating, sink.changelog) {
        (false, _) => None,
        (true, Some(c)) if c.flush_interval != pubsub_engine_plan::ChangelogOptions::default().flush_interval => {
            return Err(SqlError(format!(
                "{what}: option 'changelog.flush-interval' of table '{}' does not apply to a join of two tables' rows: it writes each pair as it matches; drop the option",
                ins.sink
            )))
        }
        (true, Some(c)) => Some(i64::try_from(c.state_ttl.as_nanos()).unwrap_or(i64::MAX)),
        (true, None) => {
            return Err(SqlError(format!(
                "{what}: a join of two tables' rows is an updating join, which writes a changelog: declare table '{}' with 'format' = 'debezium_json' (its 'changelog.state-ttl' is how long each side's rows are kept, in event time), or join two windowed aggregates",
                ins.sink
            )))
        }
    };
    let no_columns = ConnectionSchema {
        fields: Vec::new(),
        ..tables[0].connection.schema.clone()
    };
    let (projection, sink_schema) =
        super::plan::sink_side(ins, what, &mut select, &no_columns, &sink, record_ids)?;
    if let Some(key) = sink.connector.sink_key(&sink.connection) {
        return Err(SqlError(format!(
            "{what}: a join cannot write yet to table '{}', which routes its rows by column '{key}' (its ordering key): its rows are written by the worker owning their join key",
            ins.sink
        )));
    }
    let mut sides = Vec::new();
    for (s, (after, mut window)) in planned.into_iter().enumerate() {
        window.route = Some(route[s].clone());
        sides.push(JoinSide {
            window: Arc::new(window),
            after: Arc::new(after),
            on: pairs
                .iter()
                .map(|p| if s == 0 { p.0 } else { p.1 })
                .collect(),
        });
    }
    let right_side = sides.pop().expect("two sides");
    let left_side = sides.pop().expect("two sides");
    let [left, right] = tables;
    Ok(PlannedQuery {
        id,
        text: ins.to_string(),
        source: left,
        sink,
        select: Arc::new(select),
        projection,
        sink_schema,
        route_by: None,
        window: None,
        job: None,
        late: None,
        late_of: None,
        join: Some(Arc::new(JoinPlan {
            kind,
            right_source: right,
            sides: [left_side, right_side],
            schema: joined,
            text: ins.to_string(),
            ttl,
        })),
    })
}

/// A join planned up to its sink: each side, the matched columns, the keys each side
/// routes by, the joined rows' schema and what is written from them.
pub(crate) struct Parts {
    pub(super) kind: JoinKind,
    pub(super) planned: Vec<(SelectPlan, WindowPlan)>,
    pub(super) pairs: Vec<(usize, usize)>,
    pub(super) route: [Vec<usize>; 2],
    pub(super) joined: Arc<Schema>,
    /// The select list over the joined rows.
    pub select: SelectPlan,
    /// An updating join of two tables' rows (`join_rows.rs`).
    pub(super) updating: bool,
}

/// Plans the join `ins` over `tables` (left, right) up to its sink (see [`plan_join`]).
pub(crate) fn plan_parts(
    ins: &InsertDef,
    what: &str,
    tables: [&PlannedTable; 2],
    record_ids: bool,
) -> Result<Parts, SqlError> {
    if super::join_rows::joins_tables(&ins.query) {
        return super::join_rows::plan_parts(ins, what, tables, record_ids);
    }
    let names = [ins.source.clone(), ins.joined.clone().unwrap_or_default()];
    let subqueries = side_queries(&ins.query).ok_or_else(|| {
        SqlError(format!(
            "{what}: a join must join two subqueries, each a windowed aggregate"
        ))
    })?;

    // Each side: its windowed aggregate, with the window in its select list.
    let mut planned: Vec<(SelectPlan, WindowPlan)> = Vec::new();
    for s in 0..2 {
        let (table, name, (subquery, loc)) = (&tables[s], &names[s], subqueries[s]);
        let refuse = |m: String| at(loc, format!("{what}: the {} side of the join {m}", SIDE[s]));
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
        let schema = &table.connection.schema;
        let event_time = event_time_of(schema).ok_or_else(|| {
            SqlError(format!(
                "{what}: table '{name}' gives its rows no event time (plan its tables with plan_pipeline)"
            ))
        })?;
        let (after, window) = plan_windowed_as(
            subquery,
            name,
            &visible(schema),
            (event_time.0, &event_time.1),
            true,
            (1, 1),
            what,
            true,
        )?;
        match window.kind {
            WindowKind::Tumble { .. } | WindowKind::Hop { .. } => {}
            WindowKind::Session { .. } => {
                return Err(refuse("is a SESSION window, whose bounds differ from side to side: join TUMBLE or HOP windows".into()))
            }
            WindowKind::Updating { .. } => {
                return Err(refuse("is an aggregate without a window: each side of a join must group by the same TUMBLE or HOP window (an updating join is not built yet)".into()))
            }
        }
        if window.rank.is_some() {
            return Err(refuse(
                "ranks its rows (a window function): rank the joined rows' table instead".into(),
            ));
        }
        planned.push((after, window));
    }
    if planned[0].1.kind != planned[1].1.kind {
        return Err(at(
            subqueries[1].1,
            format!(
                "{what}: both sides of a join must group by the same window, and the left groups by {} while the right groups by {}",
                window_text(&planned[0].1.kind),
                window_text(&planned[1].1.kind)
            ),
        ));
    }

    // The whole statement, for the join's type, condition and select list.
    let coerced = plan_statement(ins, what, &names, tables)?;
    let (above, join) = join_of(&coerced, what)?;
    let kind = match join.join_type {
        JoinType::Inner => JoinKind::Inner,
        JoinType::Left => JoinKind::Left,
        JoinType::Right => JoinKind::Right,
        JoinType::Full => JoinKind::Full,
        other => {
            return Err(SqlError(format!(
                "{what}: a {other} join is not supported: write [INNER], LEFT, RIGHT or FULL JOIN"
            )))
        }
    };
    // Each side's columns as DataFusion sees them are its select list's, in order.
    check_sides(
        join,
        [planned[0].0.schema.as_ref(), planned[1].0.schema.as_ref()],
        what,
    )?;

    // The condition: equalities of a column of each side, ANDed.
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    let conditions = conditions(join);
    let ls = join.left.schema();
    let rs = join.right.schema();
    for c in &conditions {
        let pair = match equated(c, ls, rs) {
            Equated::Columns(l, r) => (l, r),
            Equated::Cast(l, r) => {
                return Err(SqlError(format!(
                    "{what}: the join matches '{}' ({}) with '{}' ({}): group keys of one type match; CAST one side's key in its GROUP BY",
                    ls.field(l).name(),
                    sql_type(ls.field(l).data_type()),
                    rs.field(r).name(),
                    sql_type(rs.field(r).data_type()),
                )))
            }
            Equated::Other => {
                return Err(SqlError(format!(
                    "{what}: the join condition `{c}` is not supported: ON takes equalities of a column of each side (their windows and group keys), ANDed"
                )))
            }
        };
        pairs.push(pair);
    }
    let is_window = |s: usize, i: usize| planned[s].0.schema.field(i).data_type() == &window_type();
    if !pairs
        .iter()
        .any(|&(l, r)| is_window(0, l) && is_window(1, r))
    {
        return Err(SqlError(format!(
            "{what}: a join must match the two sides' windows, so that each window's rows are joined once it closed: add ON x.window = y.window (with the sides' aliases)"
        )));
    }
    // The key (among each side's group keys) of every other matched column.
    let mut route: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    for &(l, r) in &pairs {
        if is_window(0, l) && is_window(1, r) {
            continue;
        }
        let mut keys = [0; 2];
        for (s, i) in [(0, l), (1, r)] {
            let (after, window) = &planned[s];
            keys[s] = group_key(after, window, i).ok_or_else(|| {
                SqlError(format!(
                    "{what}: the join matches column '{}' of its {} side, which is not one of the side's GROUP BY columns: a join matches the windows and group keys, as written in each side's select list",
                    after.schema.field(i).name(),
                    SIDE[s]
                ))
            })?;
        }
        let types = [0, 1].map(|s| {
            planned[s]
                .1
                .before
                .schema
                .field(keys[s])
                .data_type()
                .clone()
        });
        if types[0] != types[1] {
            return Err(SqlError(format!(
                "{what}: the join matches '{}' ({}) with '{}' ({}): group keys of one type match; CAST one side's key in its GROUP BY",
                planned[0].0.schema.field(l).name(),
                sql_type(&types[0]),
                planned[1].0.schema.field(r).name(),
                sql_type(&types[1]),
            )));
        }
        route[0].push(keys[0]);
        route[1].push(keys[1]);
    }

    // The joined rows: the left side's columns, then the right's, then the record key.
    let mut fields: Vec<Field> = Vec::new();
    for (s, (after, _)) in planned.iter().enumerate() {
        let missing = match kind {
            JoinKind::Full => true,
            JoinKind::Left => s == 1,
            JoinKind::Right => s == 0,
            JoinKind::Inner => false,
        };
        for f in after.schema.fields() {
            fields.push(f.as_ref().clone().with_nullable(f.is_nullable() || missing));
        }
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
    Ok(Parts {
        kind,
        planned,
        pairs,
        route,
        joined,
        select,
        updating: false,
    })
}

/// The join statement `ins` over `tables` (read as `names`: left, right) as DataFusion
/// plans it, its implicit casts applied. Errors: DataFusion's, and a replay-unsafe
/// function or a lossy implicit cast (refused as in any SELECT).
pub(super) fn plan_statement(
    ins: &InsertDef,
    what: &str,
    names: &[String; 2],
    tables: [&PlannedTable; 2],
) -> Result<LogicalPlan, SqlError> {
    let arrow = |t: &PlannedTable| visible(&t.connection.schema).arrow_schema();
    // With the aggregate functions, so that one over the joined rows is refused by name.
    let catalog = Catalog::new([
        (names[0].clone(), arrow(tables[0])),
        (names[1].clone(), arrow(tables[1])),
    ])
    .with_windows();
    let df_err = |e: datafusion_common::DataFusionError| {
        SqlError(format!(
            "{what}: {}",
            pubsub_engine_plan::type_words::message(&e)
        ))
    };
    let written = SqlToRel::new(&catalog)
        .sql_statement_to_plan(Statement::Query(ins.query.clone()))
        .map_err(df_err)?;
    super::select::refuse_replay_unsafe(&written, &ins.query, what)?;
    let coerced = Analyzer::new()
        .execute_and_check(written.clone(), catalog.options(), |_, _| {})
        .map_err(df_err)?;
    super::aggregate::refuse_lossy(&written, &coerced, what)?;
    Ok(coerced)
}

/// The join under `plan`'s projections, filters and aliases, and those nodes (top
/// first). Errors: an aggregate, ORDER BY, LIMIT or window function over the joined rows.
pub(super) fn join_of<'a>(
    plan: &'a LogicalPlan,
    what: &str,
) -> Result<
    (
        Vec<&'a LogicalPlan>,
        &'a datafusion_expr::logical_plan::Join,
    ),
    SqlError,
> {
    match peel(plan, false) {
        (above, LogicalPlan::Join(j)) => Ok((above, j)),
        (_, other) => Err(SqlError(format!(
            "{what}: {} over the joined rows is not supported yet: a join's rows are written as they are (with WHERE and expressions); write them into a table and aggregate that",
            step_name(other)
        ))),
    }
}

/// Checks that each side's columns as the join reads them are `ours` (left, right), in
/// order: an internal error otherwise.
pub(super) fn check_sides(
    join: &datafusion_expr::logical_plan::Join,
    ours: [&Schema; 2],
    what: &str,
) -> Result<(), SqlError> {
    for (s, input) in [&join.left, &join.right].into_iter().enumerate() {
        let types = |fs: &arrow::datatypes::Fields| -> Vec<DataType> {
            fs.iter().map(|f| f.data_type().clone()).collect()
        };
        let (theirs, ours) = (
            types(input.schema().as_arrow().fields()),
            types(ours[s].fields()),
        );
        if theirs != ours {
            return Err(SqlError(format!(
                "{what}: internal error: the {} side's columns planned as {ours:?}, joined as {theirs:?} (please report this)",
                SIDE[s]
            )));
        }
    }
    Ok(())
}

/// What a term of a join's condition equates.
pub(super) enum Equated {
    /// Column `l` of the left side with column `r` of the right, of one type.
    Columns(usize, usize),
    /// The same, of two types (DataFusion casts one side to compare them).
    Cast(usize, usize),
    /// Anything else.
    Other,
}

/// What term `c` of a join's condition equates, over its sides' columns `left`, `right`.
pub(super) fn equated(c: &Expr, left: &DFSchema, right: &DFSchema) -> Equated {
    let Expr::BinaryExpr(BinaryExpr {
        left: a,
        op: Operator::Eq,
        right: b,
    }) = c
    else {
        return Equated::Other;
    };
    let sides = |a: &Expr, b: &Expr| match (column_at(a, left, right), column_at(b, left, right)) {
        (Some((0, l)), Some((1, r))) | (Some((1, r)), Some((0, l))) => Some((l, r)),
        _ => None,
    };
    if let Some((l, r)) = sides(a, b) {
        return Equated::Columns(l, r);
    }
    match sides(&uncast(a), &uncast(b)) {
        Some((l, r)) => Equated::Cast(l, r),
        None => Equated::Other,
    }
}

/// The join's condition as its ANDed terms: ON's equalities, then the rest of it.
pub(super) fn conditions(join: &datafusion_expr::logical_plan::Join) -> Vec<Expr> {
    let mut out: Vec<Expr> = join
        .on
        .iter()
        .map(|(l, r)| l.clone().eq(r.clone()))
        .collect();
    if let Some(f) = &join.filter {
        out.extend(split_conjunction(f).into_iter().cloned());
    }
    out
}

/// The two sides' subqueries of `query`'s join, with where each starts.
fn side_queries(query: &Query) -> Option<[(&Query, Location); 2]> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let from = select.from.first()?;
    Some([
        derived(&from.relation)?,
        derived(&from.joins.first()?.relation)?,
    ])
}

fn derived(f: &TableFactor) -> Option<(&Query, Location)> {
    match f {
        TableFactor::Derived { subquery, .. } => Some((subquery.as_ref(), f.span().start)),
        _ => None,
    }
}

/// `e` without the casts around it.
fn uncast(e: &Expr) -> Expr {
    match e {
        Expr::Cast(c) => uncast(&c.expr),
        Expr::TryCast(c) => uncast(&c.expr),
        other => other.clone(),
    }
}

/// Which side (0 or 1) column `e` is of, and its index there.
fn column_at(e: &Expr, left: &DFSchema, right: &DFSchema) -> Option<(usize, usize)> {
    let Expr::Column(c) = e.clone().unalias_nested().data else {
        return None;
    };
    match (left.index_of_column(&c), right.index_of_column(&c)) {
        (Ok(i), Err(_)) => Some((0, i)),
        (Err(_), Ok(i)) => Some((1, i)),
        _ => None,
    }
}

/// The group key (index among `window`'s keys) that column `i` of a side's select list
/// writes as it is, if it does.
fn group_key(after: &SelectPlan, window: &WindowPlan, i: usize) -> Option<usize> {
    let c = after.exprs[i].0.as_any().downcast_ref::<ColumnExpr>()?;
    let at = window.window_at?;
    let (j, groups) = (c.index(), window.keys + 1);
    match j {
        j if j == at || j >= groups => None,
        j if j > at => Some(j - 1),
        j => Some(j),
    }
}

/// The select list and WHERE over the joined rows (`join`'s schema: the sides' columns),
/// with the record key carried from column `record_key_at` when the sink stamps ids.
#[allow(clippy::too_many_arguments)]
pub(super) fn after_join(
    ins: &InsertDef,
    what: &str,
    above: &[&LogicalPlan],
    join: &DFSchema,
    planned: &[(SelectPlan, WindowPlan)],
    left: &ConnectionSchema,
    record_ids: bool,
    record_key_at: usize,
) -> Result<SelectPlan, SqlError> {
    let (filter, exprs, names) = fold(above, join, None).map_err(|e| {
        SqlError(format!(
            "{what}: {}",
            pubsub_engine_plan::type_words::message(&e)
        ))
    })?;
    // A bare column keeps its side's SQL type (JSON stays JSON) and the join's
    // nullability; a name both sides hold is looked up by nobody (a bare column is found
    // by its name alone), so its item takes its expression's type and nullability.
    let sides: Vec<&SourceField> = planned.iter().flat_map(|(a, _)| a.fields.iter()).collect();
    let unique = |n: &String| join.fields().iter().filter(|f| f.name() == n).count() == 1;
    let src = ConnectionSchema {
        fields: join
            .fields()
            .iter()
            .zip(&sides)
            .filter(|(f, _)| f.data_type() != &window_type() && unique(f.name()))
            .map(|(f, s)| SourceField {
                name: f.name().clone(),
                field_type: s.field_type,
                required: !f.is_nullable(),
                metadata_key: None,
            })
            .collect(),
        ..left.clone()
    };
    let items = select_items(&ins.query, &src);
    let texts: Vec<(String, String, Option<Location>)> = if items.len() == names.len() {
        items.into_iter().map(|(t, n, l)| (t, n, Some(l))).collect()
    } else {
        names.iter().map(|n| (n.clone(), n.clone(), None)).collect()
    };
    let filter = match filter {
        Some(f) => Some((
            to_physical(&f, &f.to_string(), None, join, what)?.1,
            "WHERE over the joined rows".to_string(),
        )),
        None => None,
    };
    let mut pexprs = Vec::new();
    let mut pfields = Vec::new();
    let mut untyped_null = Vec::new();
    for (e, (text, name, loc)) in exprs.iter().zip(texts) {
        if e.get_type(join).is_ok_and(|t| t == window_type()) {
            let msg = format!(
                "{what}: `{text}` is a window (start and end): write its start and end, e.g. x.window.start, x.window.end"
            );
            return Err(match loc {
                Some(l) => at(l, msg),
                None => SqlError(msg),
            });
        }
        let (field, p, null) = output_item(e, &text, &name, loc, join, &src, what)?;
        untyped_null.push(null);
        pfields.push(field);
        pexprs.push((p, text));
    }
    let schema = schema_of(&pfields);
    let carry = record_ids.then(|| {
        let mut fs: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fs.push(Field::new(RECORD_KEY_COLUMN, DataType::Utf8, false));
        (record_key_at, Arc::new(Schema::new(fs)))
    });
    Ok(SelectPlan {
        filter,
        exprs: pexprs,
        fields: pfields,
        schema,
        message_id: None,
        untyped_null,
        carry,
        keep_source: false,
        unnest: None,
    })
}

/// A plan step in words, for a refusal.
pub(super) fn step_name(p: &LogicalPlan) -> &'static str {
    match p {
        LogicalPlan::Aggregate(_) => "an aggregate (GROUP BY)",
        LogicalPlan::Window(_) => "a window function",
        LogicalPlan::Sort(_) => "ORDER BY",
        LogicalPlan::Limit(_) => "LIMIT",
        LogicalPlan::Distinct(_) => "DISTINCT",
        LogicalPlan::Unnest(_) => "UNNEST",
        _ => "this step",
    }
}

/// A window as SQL writes it.
fn window_text(k: &WindowKind) -> String {
    let s = |ns: i64| format!("INTERVAL '{}' SECOND", ns as f64 / 1e9);
    match *k {
        WindowKind::Tumble { width } => format!("TUMBLE({})", s(width)),
        WindowKind::Hop { slide, width } => format!("HOP({}, {})", s(slide), s(width)),
        WindowKind::Session { gap } => format!("SESSION({})", s(gap)),
        WindowKind::Updating { .. } => "no window".into(),
    }
}
