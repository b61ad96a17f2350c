//! A windowed aggregate (`SELECT TUMBLE(...) AS window, k, count(*) FROM src [WHERE ...]
//! GROUP BY window, k [HAVING ...]`, optionally under an outer `SELECT ... FROM (...)
//! [WHERE ...]`), planned by DataFusion into three stages (issue 32, item 3):
//!
//! 1. **Before** (a [`SelectPlan`] on each source batch, in the reading worker): the WHERE,
//!    then the group keys, the aggregates' arguments and the row's event time as columns.
//! 2. **The window** ([`WindowPlan`], run by the window state (`plan/src/window/`) on the worker owning each
//!    group key): DataFusion's own aggregate functions, state per window and key.
//! 3. **After** (a [`SelectPlan`] on the rows a window writes when it fires): HAVING, the
//!    outer query's WHERE and select list, folded into one filter and projection.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::DFSchema;
use datafusion_expr::planner::ContextProvider;
use datafusion_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion_optimizer::analyzer::Analyzer;
use datafusion_physical_expr::aggregate::AggregateExprBuilder;
use datafusion_physical_expr::expressions::{CastExpr, Column as ColumnExpr};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_sql::planner::SqlToRel;
use sqlparser::ast::{Query, SetExpr, Statement, TableFactor};
use sqlparser::tokenizer::Location;

use super::catalog::Catalog;
use super::clauses::at;
use super::error::SqlError;
use super::select::{
    find_function, output_item, planning_error, refuse_replay_unsafe, schema_of, select_items,
    to_physical, where_text,
};
use super::window_fns::{interval_ns, window_call, HOP, SESSION, TUMBLE};
use pubsub_engine_plan::coercion::find_lossy;
use pubsub_engine_plan::type_words::{field_type, sql_type};
use pubsub_engine_plan::{SelectPlan, WindowKind, WindowPlan};
use pubsub_engine_spi::{ConnectionSchema, SourceField};

/// Aggregates whose result depends on the order rows arrive in, which differs between a
/// run and its replay: refused, so that a window writes the same row after a restart.
const ORDER_DEPENDENT: &[&str] = &[
    "first_value",
    "last_value",
    "nth_value",
    "array_agg",
    "string_agg",
    "approx_percentile_cont",
    "approx_percentile_cont_with_weight",
    "approx_median",
];

/// The default flush interval and state TTL of an updating aggregate, in ns.
#[cfg(test)]
pub(crate) const DEFAULT_UPDATING: (i64, i64) = (1_000_000_000, 86_400_000_000_000);

/// Whether `query` asks for the aggregate planner: a GROUP BY, HAVING, a subquery in FROM
/// (but for a stateless one of UNNEST) or an aggregate function anywhere in it.
pub(crate) fn is_windowed(query: &Query) -> bool {
    super::select::calls_aggregate(query) || is_grouped(query)
}

fn is_grouped(query: &Query) -> bool {
    fn body(b: &SetExpr) -> bool {
        match b {
            SetExpr::Select(s) => {
                let grouped = !matches!(&s.group_by,
                    sqlparser::ast::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
                grouped
                    || s.having.is_some()
                    // A subquery in FROM is read by an aggregate, but for one of UNNEST
                    // alone, which a stateless SELECT reads (`select.rs`).
                    || s.from.iter().any(|t| match &t.relation {
                        TableFactor::Derived { subquery, .. } => {
                            is_windowed(subquery)
                                || super::select::find_function(subquery, "unnest").is_none()
                        }
                        _ => false,
                    })
            }
            SetExpr::Query(q) => body(&q.body),
            _ => false,
        }
    }
    body(&query.body)
}

/// Plans a windowed `query` reading table `source` (columns `src`, as SQL sees them),
/// whose rows carry their event time in column `event_time` of the source batch (a
/// TIMESTAMP). `record_key`: append the record key column for a sink stamping record ids.
/// Returns stage 3 and stages 1–2.
///
/// Errors, with a position where the SQL gives one: no window or two in GROUP BY,
/// an interval that is not a positive constant of fixed length, a HOP
/// whose width is not a multiple of its slide, an aggregate whose result depends on row
/// order or with FILTER / ORDER BY, a window in the select list (write `window.start` and
/// `window.end` from an outer SELECT), and every error of a stateless SELECT.
pub(crate) fn plan_windowed(
    query: &Query,
    source: &str,
    src: &ConnectionSchema,
    event_time: (usize, &str),
    record_key: bool,
    updating: (i64, i64),
    what: &str,
) -> Result<(SelectPlan, WindowPlan), SqlError> {
    plan_windowed_as(
        query, source, src, event_time, record_key, updating, what, false,
    )
}

/// [`plan_windowed`]; with `join_side`, the select list may hold the window itself (a
/// join's side, matched on it): its column keeps the window's STRUCT type.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_windowed_as(
    query: &Query,
    source: &str,
    src: &ConnectionSchema,
    event_time: (usize, &str),
    record_key: bool,
    updating: (i64, i64),
    what: &str,
    join_side: bool,
) -> Result<(SelectPlan, WindowPlan), SqlError> {
    let catalog = Catalog::new([(source.to_string(), src.arrow_schema())]).with_windows();
    let planner = SqlToRel::new(&catalog);
    let plan_err = |e| planning_error(e, query, what, &catalog, source, src);
    let written = planner
        .sql_statement_to_plan(Statement::Query(Box::new(query.clone())))
        .map_err(plan_err)?;
    refuse_replay_unsafe(&written, query, what)?;
    let coerced = Analyzer::new()
        .execute_and_check(written.clone(), catalog.options(), |_, _| {})
        .map_err(|e| planning_error(e, query, what, &catalog, source, src))?;
    refuse_lossy(&written, &coerced, what)?;

    // Projection / Filter / SubqueryAlias nodes above the Aggregate, top first, and the
    // window functions over its rows (`ranking.rs`).
    let (above, node) = peel(&coerced, true);
    let agg = match node {
        LogicalPlan::Aggregate(a) => a,
            LogicalPlan::TableScan(_) => {
                return Err(SqlError(format!(
                    "{what}: a subquery in FROM is supported over a windowed aggregate only (SELECT ... FROM (SELECT TUMBLE(...) AS window, ... GROUP BY window, ...))"
                )))
            }
            other => return Err(unsupported_step(other, what)),
    };

    // Below: [Filter] <- [SubqueryAlias] <- TableScan, or UNNEST in a subquery or a view
    // (`unnest_below`): [Filter] <- SubqueryAlias <- Projection <- Unnest <- ... TableScan.
    let (where_expr, scan) = super::select::below_where(agg.input.as_ref());
    let unnest = super::unnest_below::of(scan, Some(event_time.0), what)?;
    if unnest.is_none() && !super::select::is_whole_table(scan) {
        return Err(unsupported_step(scan, what));
    }
    // What stage 1's expressions read: the source's rows, or UNNEST's expanded rows (the
    // aggregate's input columns then stand for the expressions computing them).
    let agg_input = agg.input.schema().as_ref().clone();
    let over_rows = |e: &Expr| -> Result<Expr, SqlError> {
        match &unnest {
            None => Ok(e.clone()),
            Some(u) => u.rewrite(e, &agg_input, what),
        }
    };
    let input = match &unnest {
        None => agg_input.clone(),
        Some(u) => u.rows.clone(),
    };
    // The source type each group key keeps when it is a bare column (JSON stays JSON): a
    // column of the table, or an element of one of its arrays, found on the rows stage 1
    // reads (a subquery's columns are renamed expressions, never matched by name).
    let typed = match &unnest {
        None => src.clone(),
        Some(u) => super::unnest_below::with_elements(src, &u.inner, &u.lists, &u.rows),
    };
    let key_types = agg
        .group_expr
        .iter()
        .map(|g| {
            Ok(match over_rows(g)?.unalias_nested().data {
                Expr::Column(c) => typed
                    .fields
                    .iter()
                    .find(|s| s.name == c.name)
                    .map(|s| s.field_type),
                _ => None,
            })
        })
        .collect::<Result<Vec<_>, SqlError>>()?;
    let event_time = match &unnest {
        None => event_time,
        Some(u) => (
            u.event_time.expect("carried below an aggregate"),
            super::unnest_below::EVENT_TIME,
        ),
    };
    let first_at = |name: &str| find_function(query, name);

    // The window and the keys.
    let mut kind = None;
    let mut window_at = None;
    let mut keys = Vec::new();
    for (i, g) in agg.group_expr.iter().enumerate() {
        if matches!(g, Expr::GroupingSet(_)) {
            return Err(SqlError(format!(
                "{what}: GROUPING SETS, CUBE and ROLLUP are not supported"
            )));
        }
        let Some((name, args)) = window_call(g) else {
            keys.push(g.clone());
            continue;
        };
        let fail = |m: String| -> SqlError {
            let msg = format!("{what}: {m}");
            match first_at(name) {
                Some(l) => at(l, msg),
                None => SqlError(msg),
            }
        };
        if kind.is_some() {
            return Err(fail(
                "GROUP BY has two windows; group by one TUMBLE or HOP".into(),
            ));
        }
        let arg = |k: usize, what_arg: &str| -> Result<i64, SqlError> {
            let ns = interval_ns(&args[k])
                .map_err(|m| fail(format!("the {what_arg} of {} {m}", name.to_uppercase())))?;
            if ns <= 0 {
                return Err(fail(format!(
                    "the {what_arg} of {} must be longer than zero, was {}",
                    name.to_uppercase(),
                    duration_text(ns)
                )));
            }
            Ok(ns)
        };
        kind = Some(match name {
            TUMBLE => WindowKind::Tumble {
                width: arg(0, "width")?,
            },
            HOP => {
                let (slide, width) = (arg(0, "slide")?, arg(1, "width")?);
                if width % slide != 0 {
                    return Err(fail(format!(
                        "the width of HOP ({}) must be a multiple of its slide ({})",
                        duration_text(width),
                        duration_text(slide)
                    )));
                }
                WindowKind::Hop { slide, width }
            }
            SESSION => WindowKind::Session {
                gap: arg(0, "gap")?,
            },
            _ => unreachable!("window_call returns window functions only"),
        });
        window_at = Some(i);
    }
    // Without a window: an updating aggregate (its sink must take a changelog: the
    // caller checks, where it knows the sink).
    let kind = kind.unwrap_or(WindowKind::Updating {
        interval: updating.0,
        ttl: updating.1,
    });
    let is_updating = window_at.is_none();
    let record_key = record_key && !is_updating;

    // Stage 1: WHERE, then [keys.., arguments.., event time].
    let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
    let mut fields: Vec<Field> = Vec::new();
    let push = |e: &Expr,
                exprs: &mut Vec<(Arc<dyn PhysicalExpr>, String)>,
                fields: &mut Vec<Field>|
     -> Result<usize, SqlError> {
        let text = e.to_string();
        let (_, p) = to_physical(&over_rows(e)?, &text, None, &input, what)?;
        let dt = p
            .data_type(input.as_arrow())
            .map_err(|x| SqlError(format!("{what}: `{text}`: {x}")))?;
        let nullable = p.nullable(input.as_arrow()).unwrap_or(true);
        fields.push(Field::new(format!("__c{}", fields.len()), dt, nullable));
        exprs.push((p, text));
        Ok(fields.len() - 1)
    };
    for k in &keys {
        push(k, &mut exprs, &mut fields)?;
    }
    let mut calls = Vec::new();
    let mut coerced_to: Vec<(usize, DataType)> = Vec::new();
    for a in &agg.aggr_expr {
        let inner = match a {
            Expr::Alias(x) => x.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(f) = inner else {
            return Err(SqlError(format!(
                "{what}: `{a}` is not an aggregate function"
            )));
        };
        let name = f.func.name().to_string();
        let fail = |m: String| -> SqlError {
            let msg = format!("{what}: {m}");
            match first_at(&name) {
                Some(l) => at(l, msg),
                None => SqlError(msg),
            }
        };
        if ORDER_DEPENDENT.contains(&name.as_str()) {
            return Err(fail(format!(
                "aggregate function {name} is not supported: its result depends on the order rows arrive in, which differs between a run and its replay"
            )));
        }
        if f.params.filter.is_some() {
            return Err(fail(format!(
                "{name}(...) FILTER (WHERE ...) is not supported yet: put the condition in the argument, e.g. count(CASE WHEN cond THEN 1 END) or sum(CASE WHEN cond THEN x END)"
            )));
        }
        if !f.params.order_by.is_empty() {
            return Err(fail(format!("{name}(... ORDER BY ...) is not supported")));
        }
        let written_args = written_aggregate_args(&written, calls.len());
        let mut cols = Vec::new();
        for (j, arg) in f.params.args.iter().enumerate() {
            // A cast the aggregate's own coercion added (`avg` of a BIGINT reads DOUBLE)
            // runs inside the aggregate: it is the function's definition, not a value
            // the query converts (which would be checked).
            let arg = match (arg, written_args.as_ref().and_then(|a| a.get(j))) {
                (Expr::Cast(c), Some(w)) if c.expr.as_ref() == w => {
                    coerced_to.push((cols.len(), c.data_type.clone()));
                    w
                }
                (a, _) => a,
            };
            // `count(*)` counts rows: a constant that is never NULL.
            #[allow(deprecated)]
            let arg = match arg {
                Expr::Wildcard { .. } => {
                    Expr::Literal(datafusion_common::ScalarValue::Int64(Some(1)), None)
                }
                other => other.clone(),
            };
            cols.push(push(&arg, &mut exprs, &mut fields)?);
        }
        calls.push((f.clone(), cols, std::mem::take(&mut coerced_to)));
    }
    let (ts_index, ts_name) = event_time;
    let ts_expr: Arc<dyn PhysicalExpr> = Arc::new(ColumnExpr::new(ts_name, ts_index));
    exprs.push((ts_expr, format!("event time ({ts_name})")));
    fields.push(Field::new(
        "__event_time",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        false,
    ));
    let before_schema = Arc::new(Schema::new(fields));
    let mut filter = match &where_expr {
        Some(w) => {
            let text = where_text_of(query);
            Some((
                to_physical(&over_rows(w)?, &text, None, &input, what)?.1,
                text,
            ))
        }
        None => None,
    };
    // With UNNEST, that WHERE reads the expanded rows; the one below UNNEST the source's.
    let unnest = match unnest {
        None => None,
        Some(u) => {
            let (plan, below) = u.plan(filter.take(), what)?;
            filter = below;
            Some(Arc::new(plan))
        }
    };
    let message_id = src
        .fields
        .iter()
        .position(|f| f.metadata_key.as_deref() == Some("message-id"));
    let before = SelectPlan {
        filter,
        untyped_null: vec![false; exprs.len()],
        fields: before_schema
            .fields()
            .iter()
            .map(|f| SourceField {
                name: f.name().clone(),
                field_type: field_type(f.data_type()).unwrap_or(pubsub_engine_spi::FieldType::Text),
                required: !f.is_nullable(),
                metadata_key: None,
            })
            .collect(),
        exprs,
        schema: before_schema.clone(),
        message_id,
        carry: None,
        keep_source: false,
        unnest,
    };

    // Stage 2: the aggregates, on stage 1's columns.
    let mut aggregates = Vec::new();
    for (f, cols, coerced) in calls {
        let name = f.func.name().to_string();
        let args: Vec<Arc<dyn PhysicalExpr>> = cols
            .iter()
            .enumerate()
            .map(|(j, &i)| {
                let mut c: Arc<dyn PhysicalExpr> =
                    Arc::new(ColumnExpr::new(before_schema.field(i).name(), i));
                if let Some((_, t)) = coerced.iter().find(|(k, _)| *k == j) {
                    let strict = arrow::compute::CastOptions {
                        safe: false,
                        ..Default::default()
                    };
                    c = Arc::new(CastExpr::new(c, t.clone(), Some(strict)));
                }
                // An integer sum on DECIMAL(38, 0): exact, and its cast back to the
                // column fails on an overflow instead of wrapping.
                if name == "sum" && before_schema.field(i).data_type().is_integer() {
                    Arc::new(CastExpr::new(c, DataType::Decimal128(38, 0), None))
                        as Arc<dyn PhysicalExpr>
                } else {
                    c
                }
            })
            .collect();
        let a = AggregateExprBuilder::new(f.func.clone(), args)
            .schema(before_schema.clone())
            .alias(format!("{name}#{}", aggregates.len()))
            .with_distinct(f.params.distinct)
            .build()
            .map_err(|e| {
                SqlError(format!(
                    "{what}: {name}: {}",
                    pubsub_engine_plan::type_words::message(&e)
                ))
            })?;
        aggregates.push(Arc::new(a));
    }

    // Stage 3: everything above the aggregate, folded onto its rows (above the window
    // functions, onto the rows they rank, with their columns).
    let agg_schema = agg.schema.as_ref().clone();
    let windows: Vec<usize> = (0..above.len())
        .filter(|i| matches!(above[*i], LogicalPlan::Window(_)))
        .collect();
    let (ranking, upper) = match windows.as_slice() {
        [] => (None, &above[..]),
        [i] => {
            let LogicalPlan::Window(w) = above[*i] else {
                unreachable!("found as a Window")
            };
            let ranked = super::ranking::Ranked {
                schema: &agg_schema,
                kind,
                window_at,
                keys: keys.len(),
                record_key,
            };
            let r = super::ranking::plan_ranking(w, &above[i + 1..], &ranked, query, what)?;
            (Some(r), &above[..*i])
        }
        [_, second, ..] => {
            // DataFusion plans one Window step per distinct OVER (...).
            let name =
                above[*second]
                    .expressions()
                    .iter()
                    .find_map(|e| match e.clone().unalias() {
                        Expr::WindowFunction(w) => Some(w.fun.name().to_string()),
                        _ => None,
                    });
            let msg = format!(
                "{what}: window functions with different OVER (...) clauses in one query are not supported: give them one PARTITION BY and ORDER BY"
            );
            return Err(match name.and_then(|n| find_function(query, &n)) {
                Some(l) => at(l, msg),
                None => SqlError(msg),
            });
        }
    };
    let (post_schema, start) = match &ranking {
        Some(r) => (r.schema.clone(), Some((r.exprs.clone(), r.names.clone()))),
        None => (agg_schema.clone(), None),
    };
    let (post_filter, post_exprs, names) = fold(upper, &agg_schema, start).map_err(|e| {
        SqlError(format!(
            "{what}: {}",
            pubsub_engine_plan::type_words::message(&e)
        ))
    })?;
    let mut out_fields: Vec<Field> = agg_schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    // The rows `after` reads: the record key follows the window functions' columns.
    let record_key_at = post_schema.fields().len();
    if record_key {
        out_fields.push(Field::new(
            pubsub_engine_spi::record_id::RECORD_KEY_COLUMN,
            DataType::Utf8,
            false,
        ));
    }
    let output = Arc::new(Schema::new(out_fields));
    // For output types: a bare key column keeps its source column's type (JSON stays JSON).
    let agg_src = ConnectionSchema {
        fields: agg_schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != window_at)
            .filter_map(|(i, f)| {
                let field_type = match key_types.get(i).copied().flatten() {
                    Some(t) => t,
                    None => field_type(f.data_type())?,
                };
                Some(SourceField {
                    name: f.name().clone(),
                    field_type,
                    required: !f.is_nullable(),
                    metadata_key: None,
                })
            })
            .chain(
                post_schema.fields()[agg_schema.fields().len()..]
                    .iter()
                    .filter_map(|f| {
                        Some(SourceField {
                            name: f.name().clone(),
                            field_type: field_type(f.data_type())?,
                            required: !f.is_nullable(),
                            metadata_key: None,
                        })
                    }),
            )
            .collect(),
        ..src.clone()
    };
    let items = select_items(query, src);
    let outer_derived = matches!(query.body.as_ref(), SetExpr::Select(s)
        if s.from.iter().any(|t| matches!(t.relation, TableFactor::Derived { .. })));
    let texts: Vec<(String, String, Option<Location>)> =
        if items.len() == names.len() && !outer_derived {
            items.into_iter().map(|(t, n, l)| (t, n, Some(l))).collect()
        } else {
            names.iter().map(|n| (n.clone(), n.clone(), None)).collect()
        };
    let post_filter = match post_filter {
        Some(f) => Some((
            to_physical(&f, &f.to_string(), None, &post_schema, what)?.1,
            "HAVING / WHERE over the aggregate".to_string(),
        )),
        None => None,
    };
    // An updating aggregate decides per group whether its row stands (a delete when it
    // no longer does): the condition runs apart from the select list.
    let (post_filter, having) = match is_updating {
        true => (None, post_filter),
        false => (post_filter, None),
    };
    let mut pexprs = Vec::new();
    let mut pfields = Vec::new();
    let mut untyped_null = Vec::new();
    let mut windows_out = Vec::new();
    for (e, (text, name, loc)) in post_exprs.iter().zip(texts) {
        let fail = |m: String| match loc {
            Some(l) => at(l, format!("{what}: `{text}` {m}")),
            None => SqlError(format!("{what}: `{text}` {m}")),
        };
        if e.get_type(&post_schema)
            .is_ok_and(|t| t == super::window_fns::window_type())
        {
            if join_side {
                // Never written: its SQL type is a stand-in, its Arrow type set below.
                windows_out.push(pfields.len());
                pfields.push(SourceField {
                    name: name.clone(),
                    field_type: pubsub_engine_spi::FieldType::Text,
                    required: true,
                    metadata_key: None,
                });
                untyped_null.push(false);
                pexprs.push((to_physical(e, &text, loc, &post_schema, what)?.1, text));
                continue;
            }
            return Err(fail(
                "is a window (start and end): write window.start and window.end in an outer SELECT, e.g. SELECT window.start, window.end, n FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, count(*) AS n FROM src GROUP BY window)".into(),
            ));
        }
        let (field, p, null) = output_item(e, &text, &name, loc, &post_schema, &agg_src, what)?;
        untyped_null.push(null);
        pfields.push(field);
        pexprs.push((p, text));
    }
    let mut schema = schema_of(&pfields);
    if !windows_out.is_empty() {
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| match windows_out.contains(&i) {
                true => Field::new(f.name(), super::window_fns::window_type(), false),
                false => f.as_ref().clone(),
            })
            .collect();
        schema = Arc::new(Schema::new(fields));
    }
    let carry = record_key.then(|| {
        let mut fs: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fs.push(Field::new(
            pubsub_engine_spi::record_id::RECORD_KEY_COLUMN,
            DataType::Utf8,
            false,
        ));
        (record_key_at, Arc::new(Schema::new(fs)))
    });
    let after = SelectPlan {
        filter: post_filter,
        exprs: pexprs,
        fields: pfields,
        schema,
        message_id: None,
        untyped_null,
        carry,
        keep_source: false,
        unnest: None,
    };
    Ok((
        after,
        WindowPlan {
            kind,
            before: Arc::new(before),
            keys: keys.len(),
            aggregates,
            output,
            window_at,
            having,
            text: what.to_string(),
            retracting: false,
            route: ranking.as_ref().map(|r| r.route.clone()),
            rank: ranking.map(|r| Arc::new(r.plan)),
        },
    ))
}

/// The Projection, Filter and SubqueryAlias nodes (with `windows`, Window nodes too) from
/// the top of `plan` down, top first, and the first node of another kind below them.
pub(super) fn peel(plan: &LogicalPlan, windows: bool) -> (Vec<&LogicalPlan>, &LogicalPlan) {
    let mut above = Vec::new();
    let mut node = plan;
    loop {
        let input = match node {
            LogicalPlan::Projection(p) => &p.input,
            LogicalPlan::Filter(f) => &f.input,
            LogicalPlan::SubqueryAlias(s) => &s.input,
            LogicalPlan::Window(w) if windows => &w.input,
            _ => return (above, node),
        };
        above.push(node);
        node = input.as_ref();
    }
}

/// Where the first aggregate function of `plan` is written in `query`.
pub(crate) fn first_aggregate_at(query: &Query, plan: &WindowPlan) -> Option<Location> {
    plan.aggregates
        .iter()
        .find_map(|a| find_function(query, a.fun().name()))
}

/// The arguments of aggregate `k` of the first Aggregate in `written` (the plan before
/// type coercion), to tell the casts coercion added from the query's own.
fn written_aggregate_args(written: &LogicalPlan, k: usize) -> Option<Vec<Expr>> {
    let mut found = None;
    let _ = written.apply(|n| {
        if let LogicalPlan::Aggregate(a) = n {
            if let Some(Expr::AggregateFunction(f)) =
                a.aggr_expr.get(k).map(|e| e.clone().unalias())
            {
                found = Some(f.params.args.clone());
            }
            return Ok(datafusion_common::tree_node::TreeNodeRecursion::Stop);
        }
        Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

/// The WHERE of the SELECT that reads the source table (the innermost one).
fn where_text_of(query: &Query) -> String {
    match query.body.as_ref() {
        SetExpr::Select(s) => match s.from.first().map(|t| &t.relation) {
            Some(TableFactor::Derived { subquery, .. }) => where_text_of(subquery),
            _ => where_text(query),
        },
        SetExpr::Query(q) => where_text_of(q),
        _ => String::new(),
    }
}

/// A duration in nanoseconds as its largest exact unit: `10 s`, `1500 ms`, `-2 s`.
fn duration_text(ns: i64) -> String {
    for (unit, per) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns % per == 0 {
            return format!("{} {unit}", ns / per);
        }
    }
    format!("{ns} ns")
}

fn unsupported_step(p: &LogicalPlan, what: &str) -> SqlError {
    // A window computed anywhere but in the GROUP BY of the aggregating SELECT.
    if let Some(name) = p.expressions().iter().find_map(|e| {
        let mut found = None;
        let _ = e.apply(|x| {
            if let Some((n, _)) = window_call(x) {
                found = Some(n.to_uppercase());
                return Ok(datafusion_common::tree_node::TreeNodeRecursion::Stop);
            }
            Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
        });
        found
    }) {
        return SqlError(format!(
            "{what}: {name} is a window: it belongs in the GROUP BY of the SELECT that aggregates (SELECT TUMBLE(...) AS window, k, count(*) AS n FROM src GROUP BY window, k), not in a subquery below it"
        ));
    }
    if matches!(p, LogicalPlan::Unnest(_)) {
        return SqlError(format!(
            "{what}: an aggregate reads UNNEST from a subquery or a view in its FROM only: SELECT TUMBLE(...) AS window, tag, count(*) FROM (SELECT UNNEST(tags) AS tag FROM src) GROUP BY window, tag"
        ));
    }
    let step = match p {
        LogicalPlan::Projection(_) => "select list below the aggregate".to_string(),
        other => other.display().to_string(),
    };
    SqlError(format!(
        "{what}: the query plans to a {step} step, which is not supported (a windowed aggregate reads its source table directly)"
    ))
}

/// `e` (over `schema`) with each column replaced by its expression in `exprs` (one per
/// column of `schema`).
pub(super) fn substitute(
    e: &Expr,
    schema: &DFSchema,
    exprs: &[Expr],
) -> datafusion_common::Result<Expr> {
    e.clone()
        .transform_up(|x| match x {
            Expr::Column(c) => {
                let i = schema.index_of_column(&c)?;
                Ok(Transformed::yes(exprs[i].clone().unalias()))
            }
            other => Ok(Transformed::no(other)),
        })
        .map(|t| t.data)
}

/// Folds Projection / Filter / SubqueryAlias nodes (`above`, top first) onto the rows of
/// the aggregate (`agg`), or onto `start` (the columns of the step below `above` as
/// expressions, and their names): one filter (their conditions, ANDed) and one select
/// list, each over those rows' columns, and the output names.
pub(super) fn fold(
    above: &[&LogicalPlan],
    agg: &DFSchema,
    start: Option<(Vec<Expr>, Vec<String>)>,
) -> datafusion_common::Result<(Option<Expr>, Vec<Expr>, Vec<String>)> {
    let (mut exprs, mut names) = start.unwrap_or_else(|| {
        (
            agg.columns().into_iter().map(Expr::Column).collect(),
            agg.fields().iter().map(|f| f.name().clone()).collect(),
        )
    });
    let mut filter: Option<Expr> = None;
    for node in above.iter().rev() {
        match node {
            LogicalPlan::Filter(f) => {
                let p = substitute(&f.predicate, f.input.schema(), &exprs)?;
                filter = Some(match filter {
                    Some(q) => q.and(p),
                    None => p,
                });
            }
            LogicalPlan::Projection(p) => {
                exprs = p
                    .expr
                    .iter()
                    .map(|e| substitute(e, p.input.schema(), &exprs))
                    .collect::<datafusion_common::Result<_>>()?;
                names = p.schema.fields().iter().map(|f| f.name().clone()).collect();
            }
            _ => {}
        }
    }
    Ok((filter, exprs, names))
}

/// Refuses an implicit conversion that could change a value anywhere in the plan but in
/// the aggregates' own arguments (an aggregate's coercion is its definition: `avg` of a
/// BIGINT is a DOUBLE).
pub(super) fn refuse_lossy(
    written: &LogicalPlan,
    coerced: &LogicalPlan,
    what: &str,
) -> Result<(), SqlError> {
    let mut w_nodes = Vec::new();
    let mut c_nodes = Vec::new();
    let _ = written.apply(|n| {
        w_nodes.push(n.clone());
        Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
    });
    let _ = coerced.apply(|n| {
        c_nodes.push(n.clone());
        Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
    });
    for (w, c) in w_nodes.iter().zip(&c_nodes) {
        let Some(input) = c.inputs().first().map(|i| i.schema().clone()) else {
            continue;
        };
        let pairs: Vec<(Expr, Expr)> = match (w, c) {
            (LogicalPlan::Aggregate(wa), LogicalPlan::Aggregate(ca)) => wa
                .group_expr
                .iter()
                .cloned()
                .zip(ca.group_expr.iter().cloned())
                .collect(),
            _ => w.expressions().into_iter().zip(c.expressions()).collect(),
        };
        for (we, ce) in pairs {
            if let Some(l) = find_lossy(&we, &ce, &input) {
                return Err(SqlError(format!(
                    "{what}: in `{we}`, `{}` would be converted from {} to {} without a CAST, which could change its value; write the CAST you mean (e.g. CAST({} AS {}))",
                    l.expr,
                    sql_type(&l.from),
                    sql_type(&l.to),
                    l.expr,
                    sql_type(&l.to)
                )));
            }
        }
    }
    Ok(())
}
