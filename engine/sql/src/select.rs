//! One `SELECT <expressions> FROM source [WHERE <condition>]`, planned by DataFusion into
//! a physical filter and projection evaluated on each Arrow batch (SPEC 8, decision 0023).
//!
//! Planning order, and why: SqlToRel (names, functions) -> refuse what is not stateless
//! or not replay-safe -> type coercion (Analyzer) -> refuse coercions that could change a
//! value -> each function's own rewrite (`coalesce` into `CASE`; no constant folding) ->
//! physical expressions.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::{DFSchema, DataFusionError};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::planner::ContextProvider;
use datafusion_expr::{Expr, ExprSchemable, LogicalPlan, Volatility};
use datafusion_optimizer::analyzer::Analyzer;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_sql::planner::SqlToRel;
use sqlparser::ast::{
    Expr as SqlExpr, Query, SelectItem, SetExpr, Spanned, Statement, Visit, Visitor,
};
use sqlparser::tokenizer::Location;

use super::catalog::Catalog;
use super::clauses::at;
use super::error::SqlError;
use pubsub_engine_plan::coercion::find_lossy;
use pubsub_engine_plan::eval::checked_exprs;
use pubsub_engine_plan::type_words::{field_type, message, sql_type};
use pubsub_engine_plan::SelectPlan;
use pubsub_engine_spi::{ConnectionSchema, FieldType, SourceField};

/// Aggregate and window functions a user may reach for; each is refused as "not yet",
/// rather than "unknown function".
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "median",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "array_agg",
    "string_agg",
    "first_value",
    "last_value",
    "nth_value",
    "row_number",
    "rank",
    "dense_rank",
    "percent_rank",
    "cume_dist",
    "ntile",
    "lag",
    "lead",
    "approx_distinct",
    "approx_percentile_cont",
    "approx_median",
    "bool_and",
    "bool_or",
    "bit_and",
    "bit_or",
    "bit_xor",
    "corr",
    "covar",
    "covar_pop",
    "covar_samp",
    "regr_slope",
    "listagg",
];

/// Plans `query` (one SELECT reading table `source`, whose columns are `src`; clauses
/// were checked by `clauses.rs`) for `what` (`INSERT INTO sink`, starting errors).
///
/// Errors, each with a line and column where the SQL gives one: an unknown column or
/// function (with a did-you-mean), an aggregate, window or subquery, a function whose
/// result would differ on replay (`now()`, `random()`, `uuid()`), an implicit conversion
/// that could change a value, and an output type no column type holds.
pub(crate) fn plan_select(
    query: &Query,
    source: &str,
    src: &ConnectionSchema,
    what: &str,
) -> Result<SelectPlan, SqlError> {
    refuse_stateful(query, what)?;
    let catalog = Catalog::new([(source.to_string(), src.arrow_schema())]);
    let planner = SqlToRel::new(&catalog);
    let written = planner
        .sql_statement_to_plan(Statement::Query(Box::new(unique_item_names(query, src))))
        .map_err(|e| planning_error(e, query, what, &catalog, source, src))?;
    refuse_replay_unsafe(&written, query, what)?;
    let coerced = Analyzer::new()
        .execute_and_check(written.clone(), catalog.options(), |_, _| {})
        .map_err(|e| planning_error(e, query, what, &catalog, source, src))?;
    let (w_filter, w_exprs, _, w_unnest) = shape(&written, what)?;
    let (c_filter, c_exprs, input, c_unnest) = shape(&coerced, what)?;
    // The select list reads the rows UNNEST expands, when there is one.
    let rows = c_unnest.as_ref().map_or(&input, |u| &u.schema);
    let items = select_items(query, src);
    // The WHERE the filter below UNNEST stands for: this SELECT's, or the subquery's.
    let in_subquery = c_unnest.as_ref().is_some_and(|u| u.subquery);
    if let (true, SetExpr::Select(sel)) = (in_subquery, query.body.as_ref()) {
        // The output names of `*` come from the table (`select_items`), not the subquery.
        if sel.projection.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(_, _)
            )
        }) {
            return Err(at(
                sel.select_token.0.span.start,
                format!("{what}: SELECT * of a subquery or view of UNNEST is not supported; name its columns"),
            ));
        }
    }
    let where_at = match query.body.as_ref() {
        SetExpr::Select(s) if !in_subquery => s.selection.as_ref().map(|e| e.span().start),
        _ => None,
    };
    let filter_text = |f: &Expr| {
        if in_subquery {
            f.to_string()
        } else {
            where_text(query)
        }
    };
    // Each expression as written and as coerced, its text and position, and the rows it
    // reads: the WHERE and what UNNEST reads read the source's, the select list UNNEST's.
    let mut pairs: Vec<(&Expr, &Expr, String, Option<Location>, &DFSchema)> = Vec::new();
    if let (Some(w), Some(c)) = (&w_filter, &c_filter) {
        pairs.push((w, c, filter_text(w), where_at, &input));
    }
    for ((w, c), item) in w_exprs.iter().zip(c_exprs.iter()).zip(items.iter()) {
        pairs.push((w, c, item.0.clone(), Some(item.2), rows));
    }
    if let (Some(wu), Some(cu)) = (&w_unnest, &c_unnest) {
        for (w, c) in wu.inner.iter().zip(&cu.inner) {
            pairs.push((w, c, w.to_string(), None, &input));
        }
        if let (Some(w), Some(c)) = (&wu.filter, &cu.filter) {
            pairs.push((w, c, where_text(query), None, rows));
        }
    }
    for (w, c, text, loc, over) in pairs {
        if let Some(l) = find_lossy(w, c, over) {
            let msg = format!(
                "{what}: in `{text}`, `{}` would be converted from {} to {} without a CAST, which could change its value; write the CAST you mean (e.g. CAST({} AS {}))",
                l.expr,
                sql_type(&l.from),
                sql_type(&l.to),
                l.expr,
                sql_type(&l.to)
            );
            return Err(match loc {
                Some(loc) => at(loc, msg),
                None => SqlError(msg),
            });
        }
    }

    let physical =
        |e: &Expr, text: &str, loc: Option<Location>| to_physical(e, text, loc, &input, what);
    let filter = match c_filter {
        Some(f) => {
            let text = filter_text(&f);
            Some((physical(&f, &text, where_at)?.1, text))
        }
        None => None,
    };
    let mut exprs = Vec::new();
    let mut fields = Vec::new();
    let mut untyped_null = Vec::new();
    // An element of a `JSON[]` is JSON, as a bare JSON column is.
    let typed = c_unnest
        .as_ref()
        .map(|u| super::unnest_below::with_elements(src, &u.inner, &u.lists, &u.schema));
    let typed = typed.as_ref().unwrap_or(src);
    for (e, (text, name, loc)) in c_exprs.iter().zip(items) {
        let (field, p, null) = output_item(e, &text, &name, Some(loc), rows, typed, what)?;
        untyped_null.push(null);
        fields.push(field);
        exprs.push((p, text));
    }
    let schema = schema_of(&fields);
    let message_id = src
        .fields
        .iter()
        .position(|f| f.metadata_key.as_deref() == Some("message-id"));
    Ok(SelectPlan {
        filter,
        exprs,
        fields,
        schema,
        message_id,
        untyped_null,
        carry: None,
        keep_source: false,
        unnest: match &c_unnest {
            None => None,
            Some(u) => Some(Arc::new(pubsub_engine_plan::unnest::UnnestPlan {
                inner: u
                    .inner
                    .iter()
                    .map(|e| {
                        let text = e.to_string();
                        physical(e, &text, None).map(|(_, p)| (p, text))
                    })
                    .collect::<Result<_, _>>()?,
                lists: u.lists.clone(),
                carry: Vec::new(),
                schema: Arc::new(u.schema.as_arrow().clone()),
                filter: match &u.filter {
                    Some(f) => {
                        let text = where_text(query);
                        Some((to_physical(f, &text, None, rows, what)?.1, text))
                    }
                    None => None,
                },
            })),
        },
    })
}

/// A select item `e` (coerced, over `input`; `text` as written, output `name`) as an output
/// column: its field, its checked physical expression (with the exact cast into its
/// column's type), and whether it is an untyped NULL.
pub(super) fn output_item(
    e: &Expr,
    text: &str,
    name: &str,
    loc: Option<Location>,
    input: &DFSchema,
    src: &ConnectionSchema,
    what: &str,
) -> Result<(SourceField, Arc<dyn PhysicalExpr>, bool), SqlError> {
    let (e, p) = to_physical(e, text, loc, input, what)?;
    let null = matches!(e.get_type(input), Ok(DataType::Null));
    let field = output_field(&e, input, src, name).map_err(|m| {
        let msg = format!("{what}: `{text}` {m}");
        match loc {
            Some(l) => at(l, msg),
            None => SqlError(msg),
        }
    })?;
    // A DATE or a coarser TIMESTAMP into its TIMESTAMP column, checked (issue 31).
    let from = p.data_type(input.as_arrow()).unwrap_or(DataType::Null);
    let p = pubsub_engine_plan::temporal::output_cast(p, &from, &field.field_type.arrow_type());
    Ok((field, p, null))
}

/// The Arrow schema of output columns `fields`.
pub(super) fn schema_of(fields: &[SourceField]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|f| Field::new(&f.name, f.field_type.arrow_type(), !f.required))
            .collect::<Vec<_>>(),
    ))
}

/// `e` (coerced, over `input`) as a checked physical expression, with `e` after its
/// functions' own rewrites. `text` and `loc` (the SQL it came from) start its errors.
pub(super) fn to_physical(
    e: &Expr,
    text: &str,
    loc: Option<Location>,
    input: &DFSchema,
    what: &str,
) -> Result<(Expr, Arc<dyn PhysicalExpr>), SqlError> {
    // No constant folding: DataFusion folds with wrapping arithmetic and fixes `now()`
    // at plan time; a constant costs one scalar per batch.
    let props = ExecutionProps::new();
    let input_ref = Arc::new(input.clone());
    let e = &function_rewrites(e.clone(), &props, &input_ref)
        .map_err(|x| SqlError(format!("{what}: `{text}`: {}", message(&x))))?;
    let p = datafusion_physical_expr::create_physical_expr(e, input, &props)
        .map_err(|x| SqlError(format!("{what}: `{text}`: {}", message(&x))))?;
    let p = checked_exprs(p, input.as_arrow());
    // Dates and times DataFusion would compute unchecked (issue 31).
    pubsub_engine_plan::temporal::refuse_unchecked(&p, input.as_arrow()).map_err(|m| {
        let msg = format!("{what}: in `{text}`, {m}");
        match loc {
            Some(l) => at(l, msg),
            None => SqlError(msg),
        }
    })?;
    Ok((e.clone(), p))
}

/// Applies each function's own rewrite (`ScalarUDFImpl::simplify`), as DataFusion's
/// optimizer would: some functions only run rewritten (`coalesce`, `nvl2` and `arrow_cast`
/// fail when invoked as written). Only the functions' rewrites: no constant folding.
fn function_rewrites(
    e: Expr,
    props: &ExecutionProps,
    schema: &Arc<DFSchema>,
) -> datafusion_common::Result<Expr> {
    use datafusion_common::tree_node::Transformed;
    use datafusion_expr::simplify::{ExprSimplifyResult, SimplifyContext};
    let info = SimplifyContext::new(props).with_schema(schema.clone());
    e.transform_up(|x| match x {
        Expr::ScalarFunction(f) => match f.func.simplify(f.args, &info)? {
            ExprSimplifyResult::Simplified(e) => Ok(Transformed::yes(e)),
            ExprSimplifyResult::Original(args) => Ok(Transformed::no(Expr::ScalarFunction(
                datafusion_expr::expr::ScalarFunction::new_udf(f.func, args),
            ))),
        },
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

/// `query` with each select item whose output name is repeated (`SELECT seq, mid, mid`,
/// `SELECT mid, *`) given a private alias: DataFusion refuses a projection with two
/// expressions of one name, but an INSERT maps items to sink columns by position, and the
/// output names come from `select_items`, not from DataFusion.
fn unique_item_names(query: &Query, src: &ConnectionSchema) -> Query {
    let names: Vec<String> = select_items(query, src).into_iter().map(|i| i.1).collect();
    let mut q = query.clone();
    let SetExpr::Select(select) = q.body.as_mut() else {
        return q;
    };
    let repeated = |n: &str| names.iter().filter(|m| m.as_str() == n).count() > 1;
    let mut k = 0;
    for (i, item) in select.projection.iter_mut().enumerate() {
        let expr = match item {
            SelectItem::UnnamedExpr(e) => e.clone(),
            SelectItem::ExprWithAlias { expr, .. } => expr.clone(),
            // A wildcard stands for several names; it keeps them.
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(_, _) => {
                k += src.fields.len();
                continue;
            }
        };
        // An expression also gets one: DataFusion names `CAST(price AS BIGINT)` of a
        // BIGINT column `price`, the name of the column itself.
        let bare = matches!(
            expr,
            sqlparser::ast::Expr::Identifier(_) | sqlparser::ast::Expr::CompoundIdentifier(_)
        );
        if names.get(k).is_some_and(|n| repeated(n)) || !bare {
            *item = SelectItem::ExprWithAlias {
                expr,
                alias: sqlparser::ast::Ident::new(format!("__item_{i}")),
            };
        }
        k += 1;
    }
    q
}

pub(super) fn select_items(
    query: &Query,
    src: &ConnectionSchema,
) -> Vec<(String, String, Location)> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Vec::new();
    };
    let start = |e: &SqlExpr| e.span().start;
    let mut out = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) => {
                let name = match e {
                    SqlExpr::Identifier(i) => i.value.clone(),
                    SqlExpr::CompoundIdentifier(p) => {
                        p.last().map(|i| i.value.clone()).unwrap_or_default()
                    }
                    other => other.to_string(),
                };
                out.push((e.to_string(), name, start(e)));
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                out.push((expr.to_string(), alias.value.clone(), start(expr)))
            }
            // The planner expands it into the table's columns, in order.
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(_, _) => {
                for f in &src.fields {
                    out.push((
                        f.name.clone(),
                        f.name.clone(),
                        select.select_token.0.span.start,
                    ))
                }
            }
        }
    }
    out
}

/// The WHERE condition as written.
pub(super) fn where_text(query: &Query) -> String {
    match query.body.as_ref() {
        SetExpr::Select(s) => s
            .selection
            .as_ref()
            .map(|e| e.to_string())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// An UNNEST step of a SELECT: the expressions below it (over the filtered source rows),
/// which of their columns it expands, and the rows it gives.
pub(super) struct UnnestShape {
    pub inner: Vec<Expr>,
    pub lists: Vec<usize>,
    pub schema: DFSchema,
    /// A WHERE over the expanded rows (of a query reading a subquery or view of UNNEST).
    pub filter: Option<Expr>,
    /// UNNEST is in a subquery or a view: the filter below it is that subquery's WHERE.
    pub subquery: bool,
}

/// Projection <- [Unnest <- Projection] <- [Filter] <- [SubqueryAlias] <- TableScan, as
/// SqlToRel plans a SELECT that `clauses.rs` let through, or a SELECT of a subquery or view
/// of UNNEST (`unnest_below.rs`): (filter, select list, the schema the filter reads, the
/// UNNEST step). The select list reads the UNNEST step's rows when there is one, else the
/// filter's.
#[allow(clippy::type_complexity)]
fn shape(
    plan: &LogicalPlan,
    what: &str,
) -> Result<(Option<Expr>, Vec<Expr>, DFSchema, Option<UnnestShape>), SqlError> {
    let unexpected = |p: &LogicalPlan| {
        SqlError(format!(
            "{what}: the query plans to a {} step, which a stateless pipeline cannot run",
            p.display()
        ))
    };
    let LogicalPlan::Projection(top) = plan else {
        return Err(unexpected(plan));
    };
    // A subquery or view of UNNEST: Projection <- [Filter] <- SubqueryAlias <- (UNNEST's
    // SELECT); the select list and the WHERE are rewritten onto the expanded rows.
    let (outer_filter, aliased) = match top.input.as_ref() {
        LogicalPlan::Filter(f) => (Some(&f.predicate), f.input.as_ref()),
        other => (None, other),
    };
    // DataFusion aliases a subquery only when it is named (a view is).
    let subquery = match aliased {
        LogicalPlan::SubqueryAlias(a) => Some(a.input.as_ref()),
        LogicalPlan::Projection(p) if matches!(p.input.as_ref(), LogicalPlan::Unnest(_)) => {
            Some(aliased)
        }
        _ => None,
    };
    if let Some(sub) = subquery {
        if let Some(u) = super::unnest_below::of(sub, None, what)? {
            let columns = aliased.schema().as_ref();
            let exprs = top
                .expr
                .iter()
                .map(|e| u.rewrite(e, columns, what))
                .collect::<Result<Vec<_>, _>>()?;
            let filter = outer_filter
                .map(|f| u.rewrite(f, columns, what))
                .transpose()?;
            let shape = UnnestShape {
                inner: u.inner,
                lists: u.lists,
                schema: u.rows,
                filter,
                subquery: true,
            };
            return Ok((u.source_filter, exprs, u.source, Some(shape)));
        }
    }
    let (proj, unnest) = match top.input.as_ref() {
        LogicalPlan::Unnest(u) => {
            let LogicalPlan::Projection(inner) = u.input.as_ref() else {
                return Err(unexpected(u.input.as_ref()));
            };
            super::unnest_below::check_lists(u, inner, what)?;
            let shape = UnnestShape {
                inner: inner.expr.clone(),
                lists: u.list_type_columns.iter().map(|(i, _)| *i).collect(),
                schema: u.schema.as_ref().clone(),
                filter: None,
                subquery: false,
            };
            (inner, Some(shape))
        }
        _ => (top, None),
    };
    let (filter, scan) = below_where(proj.input.as_ref());
    if !is_whole_table(scan) {
        return Err(unexpected(scan));
    }
    let input = match proj.input.as_ref() {
        LogicalPlan::Filter(f) => f.input.schema().as_ref().clone(),
        other => other.schema().as_ref().clone(),
    };
    Ok((filter, top.expr.clone(), input, unnest))
}

/// `[Filter] <- [SubqueryAlias] <- node`, as SqlToRel plans a SELECT's WHERE and FROM:
/// the WHERE, and the node below.
pub(super) fn below_where(plan: &LogicalPlan) -> (Option<Expr>, &LogicalPlan) {
    let (filter, below) = match plan {
        LogicalPlan::Filter(f) => (Some(f.predicate.clone()), f.input.as_ref()),
        other => (None, other),
    };
    match below {
        LogicalPlan::SubqueryAlias(a) => (filter, a.input.as_ref()),
        other => (filter, other),
    }
}

/// A table read whole: no filter, projection or limit pushed into its scan.
pub(super) fn is_whole_table(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::TableScan(t)
        if t.filters.is_empty() && t.projection.is_none() && t.fetch.is_none())
}

/// Whether `query` calls an aggregate function (not as a window function, `OVER`)
/// anywhere: without GROUP BY, an aggregate over the whole stream.
pub(crate) fn calls_aggregate(query: &Query) -> bool {
    struct Find(bool);
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &SqlExpr) -> std::ops::ControlFlow<()> {
            if let SqlExpr::Function(f) = e {
                if f.over.is_none()
                    && AGGREGATES.contains(&f.name.to_string().to_lowercase().as_str())
                {
                    self.0 = true;
                    return std::ops::ControlFlow::Break(());
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut f = Find(false);
    let _ = query.visit(&mut f);
    f.0
}

/// Aggregates, window functions and subqueries, refused before name resolution so that
/// the error says "not supported yet", not "unknown function".
fn refuse_stateful(query: &Query, what: &str) -> Result<(), SqlError> {
    struct Find(Option<SqlError>, String);
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &SqlExpr) -> std::ops::ControlFlow<()> {
            let what = &self.1;
            let found = match e {
                SqlExpr::Function(f) if f.over.is_some() => Some(format!(
                    "{what}: window function {} runs over the rows of a windowed aggregate only: SELECT *, {}() OVER (PARTITION BY window ORDER BY n DESC) AS row_num FROM (SELECT TUMBLE(...) AS window, k, count(*) AS n FROM src GROUP BY window, k)",
                    f.name, f.name
                )),
                SqlExpr::Function(f)
                    if AGGREGATES.contains(&f.name.to_string().to_lowercase().as_str()) =>
                {
                    Some(format!(
                        "{what}: aggregate function {} needs a window: GROUP BY TUMBLE(INTERVAL '1' MINUTE), HOP(slide, width) or SESSION(gap) (aggregates without a window are not supported yet)",
                        f.name
                    ))
                }
                SqlExpr::Function(f)
                    if ["tumble", "hop", "session"]
                        .contains(&f.name.to_string().to_lowercase().as_str()) =>
                {
                    Some(format!(
                        "{what}: {} is a window: it belongs in GROUP BY, with an aggregate (SELECT ... FROM (SELECT TUMBLE(...) AS window, count(*) AS n FROM src GROUP BY window))",
                        f.name
                    ))
                }
                SqlExpr::Subquery(_) | SqlExpr::InSubquery { .. } | SqlExpr::Exists { .. } => {
                    Some(format!("{what}: subqueries are not supported yet"))
                }
                _ => None,
            };
            match found {
                Some(m) => {
                    self.0 = Some(at(e.span().start, m));
                    std::ops::ControlFlow::Break(())
                }
                None => std::ops::ControlFlow::Continue(()),
            }
        }
    }
    let mut f = Find(None, what.to_string());
    let _ = query.visit(&mut f);
    f.0.map_or(Ok(()), Err)
}

/// Functions whose value would differ between a run and its replay from a checkpoint
/// (SPEC 8; issue 17): volatile ones (`random()`, `uuid()`) and stable ones (`now()`,
/// `current_date`), which DataFusion would fix at the plan's start time.
pub(super) fn refuse_replay_unsafe(
    plan: &LogicalPlan,
    query: &Query,
    what: &str,
) -> Result<(), SqlError> {
    let mut found: Option<String> = None;
    let _ = plan.apply(|node| {
        node.apply_expressions(|e| {
            e.apply(|x| {
                if let Expr::ScalarFunction(f) = x {
                    if f.func.signature().volatility != Volatility::Immutable {
                        found = Some(f.func.name().to_string());
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                if matches!(x, Expr::ScalarVariable(..) | Expr::Placeholder(_)) {
                    found = Some(x.to_string());
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    let Some(name) = found else {
        return Ok(());
    };
    let why = match name.as_str() {
        "now" | "current_timestamp" | "current_date" | "current_time" | "today" => {
            "it is the time of planning, not of the row, and would differ between a run and its replay; use a metadata column such as publish-time (METADATA FROM 'publish-time')"
        }
        _ => "its value would differ between a run and its replay after a restart, so a replayed row would not match the one written",
    };
    let loc = find_function(query, &name);
    let msg = format!("{what}: {name} is not supported: {why}");
    Err(match loc {
        Some(l) => at(l, msg),
        None => SqlError(msg),
    })
}

/// Where a call of function `name` is written in `query`.
pub(super) fn find_function(query: &Query, name: &str) -> Option<Location> {
    struct Find<'a>(&'a str, Option<Location>);
    impl Visitor for Find<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &SqlExpr) -> std::ops::ControlFlow<()> {
            if let SqlExpr::Function(f) = e {
                if f.name.to_string().eq_ignore_ascii_case(self.0) {
                    self.1 = Some(e.span().start);
                    return std::ops::ControlFlow::Break(());
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut f = Find(name, None);
    let _ = query.visit(&mut f);
    f.1
}

/// A DataFusion planning error in this project's words: an unknown column gets a
/// did-you-mean and its position; other errors keep DataFusion's message and its
/// position when it reports one.
pub(super) fn planning_error(
    e: DataFusionError,
    query: &Query,
    what: &str,
    catalog: &Catalog,
    source: &str,
    src: &ConnectionSchema,
) -> SqlError {
    let loc = e.diagnostic().and_then(|d| d.span).map(|s| Location {
        line: s.start.line,
        column: s.start.column,
    });
    let root = e.find_root();
    let not_found = match root {
        DataFusionError::SchemaError(e, _) => match e.as_ref() {
            datafusion_common::SchemaError::FieldNotFound { field, .. } => Some(field),
            _ => None,
        },
        _ => None,
    };
    let msg = match not_found {
        Some(field) => {
            let refs: Vec<&str> = src.fields.iter().map(|f| f.name.as_str()).collect();
            let hint = pubsub_engine_spi::suggest(&field.name, &refs)
                .map(|s| format!(" (did you mean '{s}'?)"))
                .unwrap_or_default();
            let columns: Vec<String> = src
                .fields
                .iter()
                .map(|f| format!("{} {}", f.name, f.field_type.sql_name()))
                .collect();
            format!(
                "{what}: column '{}' does not exist in table '{source}'{hint} (columns: {})",
                field.name,
                columns.join(", ")
            )
        }
        None => {
            let m = message(root);
            let unknown_fn = m
                .strip_prefix("Invalid function '")
                .and_then(|r| r.split_once('\''));
            match unknown_fn {
                Some((name, _)) => {
                    let names = catalog.function_names();
                    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                    let hint = pubsub_engine_spi::suggest(&name.to_lowercase(), &refs)
                        .map(|s| format!(" (did you mean '{s}'?)"))
                        .unwrap_or_default();
                    format!("{what}: unknown function '{name}'{hint}")
                }
                None => match unnest_words(&m) {
                    // UNNEST's own refusals, in this project's words, at the first UNNEST.
                    Some(words) => {
                        let msg = format!("{what}: {words}");
                        return match find_function(query, "unnest") {
                            Some(l) => at(l, msg),
                            None => SqlError(msg),
                        };
                    }
                    None => format!("{what}: {m}"),
                },
            }
        }
    };
    let loc = loc.or_else(|| {
        // A position from the SQL when DataFusion gives none: the function or column named.
        let name = msg.split('\'').nth(1)?;
        find_function(query, name)
    });
    match loc {
        Some(l) if l.line > 0 => at(l, msg),
        _ => SqlError(msg),
    }
}

/// DataFusion's planning errors about UNNEST, said as what to write instead.
fn unnest_words(m: &str) -> Option<&'static str> {
    if m.contains("Unnest should be rewritten") {
        Some("UNNEST is allowed in a SELECT list only; to keep some elements, UNNEST in a subquery or a view and write the WHERE above it (SELECT tag FROM (SELECT UNNEST(tags) AS tag FROM src) WHERE tag <> 'x')")
    } else if m.contains("unnest() can only be applied to") {
        Some("UNNEST takes an array column (TEXT[], JSON[], ...) of one level; arrays of arrays and STRUCTs are not supported")
    } else {
        None
    }
}

/// The column an expression's result becomes: its SQL type, nullability, and for a bare
/// source column its declared type and metadata key (JSON stays JSON, not TEXT).
pub(super) fn output_field(
    e: &Expr,
    input: &DFSchema,
    src: &ConnectionSchema,
    name: &str,
) -> Result<SourceField, String> {
    // `mid AS m` is as bare as `mid`: it keeps the column's type and metadata key (an
    // UNNEST's element is aliased twice: `placeholder AS UNNEST(t.c) AS name`).
    let mut inner = e;
    while let Expr::Alias(a) = inner {
        inner = a.expr.as_ref();
    }
    let bare = match inner {
        Expr::Column(c) => src.fields.iter().find(|f| f.name == c.name),
        _ => None,
    };
    let (ty, nullable) = {
        let (_, f) = e.to_field(input).map_err(|x| message(&x))?;
        (f.data_type().clone(), f.is_nullable())
    };
    if let Some(f) = bare {
        return Ok(SourceField {
            name: name.to_string(),
            ..f.clone()
        });
    }
    let json = matches!(inner, Expr::ScalarFunction(f) if f.func.name() == pubsub_engine_plan::json::JSON_GET_JSON);
    let field_type = if json {
        Some(FieldType::Json)
    } else {
        field_type(&ty)
    };
    let field_type = field_type.ok_or_else(|| {
        format!(
            "has type {}, which no column type holds; CAST it to TEXT, BIGINT, INT, BIGINT UNSIGNED, INT UNSIGNED, DOUBLE, FLOAT, BOOLEAN, TIMESTAMP or BYTEA",
            sql_type(&ty)
        )
    })?;
    Ok(SourceField {
        name: name.to_string(),
        field_type,
        required: !nullable,
        metadata_key: None,
    })
}
