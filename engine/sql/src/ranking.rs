//! Window functions over a windowed aggregate (issue 48, part 2; decision 0053): top-N
//! per window and DataFusion's other window functions, on the rows a window writes when
//! it fires (`plan/src/window/rank.rs` runs them).
//!
//! ```sql
//! SELECT * FROM (
//!   SELECT *, ROW_NUMBER() OVER (PARTITION BY window ORDER BY n DESC) AS row_num
//!   FROM (SELECT TUMBLE(INTERVAL '1' MINUTE) AS window, page, count(*) AS n
//!         FROM src GROUP BY window, page))
//! WHERE row_num <= 3
//! ```
//!
//! The PARTITION BY must hold the window and may hold GROUP BY keys: the window's
//! exchange then routes rows by those keys alone, so each partition is on one subtask.

use std::sync::Arc;

use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion_common::{Column, DFSchema};
use datafusion_expr::expr::WindowFunction;
use datafusion_expr::{Expr, LogicalPlan, WindowFunctionDefinition};
use datafusion_physical_expr::PhysicalSortExpr;
use sqlparser::ast::Query;

use super::aggregate::fold;
use super::clauses::at;
use super::error::SqlError;
use super::select::{find_function, to_physical};
use pubsub_engine_plan::window::{window_expr, BoundWindowFunction, RankPlan};
use pubsub_engine_plan::WindowKind;

/// The window functions of a query, planned onto its aggregate's fired rows.
pub(crate) struct Ranking {
    pub plan: RankPlan,
    /// The GROUP BY keys (indexes among the window's keys) in the PARTITION BY.
    pub route: Vec<usize>,
    /// The Window step's output columns as expressions over `schema`, and their names:
    /// what the steps above it read.
    pub exprs: Vec<Expr>,
    pub names: Vec<String>,
    /// The fired rows' columns (the aggregate's), then the functions' (`__wf{j}`).
    pub schema: DFSchema,
}

/// The aggregate the window functions rank.
pub(crate) struct Ranked<'a> {
    /// The aggregate's output: group items in GROUP BY order, then aggregates.
    pub schema: &'a DFSchema,
    pub kind: WindowKind,
    /// Where the window is among the group items (`None`: an updating aggregate).
    pub window_at: Option<usize>,
    /// How many GROUP BY keys besides the window.
    pub keys: usize,
    /// The fired rows end with the record key column.
    pub record_key: bool,
}

/// Plans Window step `win`, whose input is the aggregate's rows under `lower`
/// (Projection / Filter / SubqueryAlias steps, top first).
///
/// Errors, at the function's position: a SESSION window or no window, an aggregate
/// function or a FILTER over a window, two different OVER clauses, a PARTITION BY without
/// the window or with anything but GROUP BY keys, arguments the function refuses.
pub(crate) fn plan_ranking(
    win: &datafusion_expr::logical_plan::Window,
    lower: &[&LogicalPlan],
    agg: &Ranked<'_>,
    query: &Query,
    what: &str,
) -> Result<Ranking, SqlError> {
    let (lower_filter, lower_exprs, _) = fold(lower, agg.schema, None).map_err(|e| {
        SqlError(format!(
            "{what}: {}",
            pubsub_engine_plan::type_words::message(&e)
        ))
    })?;
    let substitute = |e: &Expr| -> Result<Expr, SqlError> {
        super::aggregate::substitute(e, win.input.schema(), &lower_exprs).map_err(|e| {
            SqlError(format!(
                "{what}: {}",
                pubsub_engine_plan::type_words::message(&e)
            ))
        })
    };
    let physical = |e: &Expr| to_physical(e, &e.to_string(), None, agg.schema, what).map(|p| p.1);
    let mut over: Option<(Vec<Expr>, Vec<datafusion_expr::SortExpr>)> = None;
    // The first function's name and PARTITION BY as written, for errors.
    let mut first = String::new();
    let mut written_partition: Vec<Expr> = Vec::new();
    let mut functions = Vec::new();
    let mut fields: Vec<Field> = Vec::new();
    for (j, e) in win.window_expr.iter().enumerate() {
        let Expr::WindowFunction(wf) = e.clone().unalias() else {
            return Err(SqlError(format!("{what}: `{e}` is not a window function")));
        };
        let WindowFunction { fun, params } = *wf;
        let name = fun.name().to_string();
        let fail = |m: String| -> SqlError {
            let msg = format!("{what}: {m}");
            match find_function(query, &name) {
                Some(l) => at(l, msg),
                None => SqlError(msg),
            }
        };
        let udwf = match &fun {
            WindowFunctionDefinition::WindowUDF(u) => u.clone(),
            WindowFunctionDefinition::AggregateUDF(_) => {
                return Err(fail(format!(
                    "aggregate function {name} over a window (OVER) is not supported yet; the window functions are row_number, rank, dense_rank, percent_rank, cume_dist, ntile, lag, lead, first_value, last_value and nth_value"
                )))
            }
        };
        match (agg.kind, agg.window_at) {
            (WindowKind::Session { .. }, _) => {
                return Err(fail(format!(
                    "window function {name} over a SESSION window's rows is not supported: each group has sessions of its own, so there are no rows of one window to rank; use TUMBLE or HOP"
                )))
            }
            (_, None) => {
                return Err(fail(format!(
                    "window function {name} over an aggregate without a window is not supported yet: its rows change, and a ranking of them would have to be retracted; rank the rows of a TUMBLE or HOP window"
                )))
            }
            _ => {}
        }
        if params.filter.is_some() {
            return Err(fail(format!(
                "{name}(...) FILTER (WHERE ...) is not supported"
            )));
        }
        if params.distinct {
            return Err(fail(format!("{name}(DISTINCT ...) is not supported")));
        }
        let partition = params
            .partition_by
            .iter()
            .map(&substitute)
            .collect::<Result<Vec<_>, _>>()?;
        let order = params
            .order_by
            .iter()
            .map(|s| {
                Ok(datafusion_expr::SortExpr {
                    expr: substitute(&s.expr)?,
                    ..s.clone()
                })
            })
            .collect::<Result<Vec<_>, SqlError>>()?;
        match &over {
            None => {
                first = name.clone();
                written_partition = params.partition_by.clone();
                over = Some((partition, order))
            }
            Some(o) if *o == (partition, order) => {}
            Some(_) => {
                return Err(fail(
                    "window functions with different OVER (...) clauses in one query are not supported: give them one PARTITION BY and ORDER BY".into(),
                ))
            }
        }
        let args = params
            .args
            .iter()
            .map(|a| physical(&substitute(a)?))
            .collect::<Result<Vec<_>, _>>()?;
        let ignore_nulls = matches!(
            params.null_treatment,
            Some(datafusion_expr::expr::NullTreatment::IgnoreNulls)
        );
        let bound = BoundWindowFunction::new(
            udwf,
            args,
            agg.schema.as_arrow(),
            format!("__wf{j}"),
            ignore_nulls,
        )
        .map_err(|e| {
            fail(format!(
                "{name}: {}",
                pubsub_engine_plan::type_words::message(&e)
            ))
        })?;
        let field = {
            use datafusion_physical_expr::window::StandardWindowFunctionExpr;
            bound.field().map_err(|e| {
                fail(format!(
                    "{name}: {}",
                    pubsub_engine_plan::type_words::message(&e)
                ))
            })?
        };
        fields.push(Field::new(
            format!("__wf{j}"),
            field.data_type().clone(),
            field.is_nullable(),
        ));
        functions.push((bound, Arc::new(params.window_frame)));
    }
    let (partition, order) = over.unwrap_or_default();
    let fail = |m: String| -> SqlError {
        let msg = format!("{what}: {m}");
        match find_function(query, &first) {
            Some(l) => at(l, msg),
            None => SqlError(msg),
        }
    };
    // The window and GROUP BY keys: each partition is one window's rows of some keys.
    let window_at = agg.window_at.expect("checked: a window");
    let mut has_window = false;
    let mut route = Vec::new();
    let mut partition_exprs = Vec::new();
    for (p, written) in partition.iter().zip(&written_partition) {
        let i = match p {
            Expr::Column(c) => agg.schema.index_of_column(c).ok(),
            _ => None,
        };
        match i {
            Some(i) if i == window_at => has_window = true,
            Some(i) if i <= agg.keys => {
                route.push(if i > window_at { i - 1 } else { i });
                partition_exprs.push(physical(p)?);
            }
            _ => {
                return Err(fail(format!(
                    "PARTITION BY {}: a partition is made of the window and GROUP BY keys of the aggregate below (PARTITION BY window, k)",
                    written.clone().unalias()
                )))
            }
        }
    }
    if !has_window {
        return Err(fail(
            "the PARTITION BY must hold the window (PARTITION BY window, ...): a window's rows are ranked when it fires, never across windows".into(),
        ));
    }
    let order_exprs = order
        .iter()
        .map(|s| {
            Ok(PhysicalSortExpr {
                expr: physical(&s.expr)?,
                options: SortOptions {
                    descending: !s.asc,
                    nulls_first: s.nulls_first,
                },
            })
        })
        .collect::<Result<Vec<_>, SqlError>>()?;
    let functions = functions
        .into_iter()
        .map(|(f, frame)| window_expr(f, &order_exprs, frame))
        .collect();
    let filter = match lower_filter {
        Some(f) => Some((
            physical(&f)?,
            "HAVING / WHERE below the window functions".to_string(),
        )),
        None => None,
    };
    let width = agg.schema.fields().len();
    let mut out: Vec<Field> = agg
        .schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    out.extend(fields.iter().cloned());
    if agg.record_key {
        out.push(Field::new(
            pubsub_engine_spi::record_id::RECORD_KEY_COLUMN,
            DataType::Utf8,
            false,
        ));
    }
    let functions_schema = DFSchema::try_from(Schema::new(fields.clone()))
        .map_err(|e| SqlError(format!("{what}: {e}")))?;
    let schema = agg
        .schema
        .join(&functions_schema)
        .map_err(|e| SqlError(format!("{what}: {e}")))?;
    let mut exprs = lower_exprs;
    exprs.extend(
        fields
            .iter()
            .map(|f| Expr::Column(Column::from_name(f.name().clone()))),
    );
    let names = win
        .schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    Ok(Ranking {
        plan: RankPlan {
            filter,
            partition: partition_exprs,
            order: order_exprs,
            keys: (0..=agg.keys).filter(|i| *i != window_at).collect(),
            functions,
            width,
            output: Arc::new(Schema::new(out)),
        },
        route,
        exprs,
        names,
        schema,
    })
}
