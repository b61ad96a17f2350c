//! UNNEST below an aggregate (issue 48, part 3): `SELECT TUMBLE(...) AS window, tag,
//! count(*) FROM (SELECT UNNEST(tags) AS tag FROM src) GROUP BY window, tag`, the subquery
//! written out or read from a view. Stage 1 of the aggregate then runs on the expanded
//! rows: the WHERE below UNNEST on the source's rows, UNNEST, the WHERE above it on the
//! elements' rows, then the keys and the aggregates' arguments. Each element's row keeps
//! its source row's event time, carried through UNNEST as one more column.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion_common::DFSchema;
use datafusion_expr::{Expr, LogicalPlan};
use datafusion_physical_expr::PhysicalExpr;
use pubsub_engine_plan::type_words::message;
use pubsub_engine_plan::unnest::UnnestPlan;

use super::error::SqlError;
use super::select::to_physical;

/// The expanded rows' column that carries the event time.
pub(super) const EVENT_TIME: &str = "__unnest_event_time";

/// A `Projection <- Unnest <- Projection <- [Filter] <- [SubqueryAlias] <- TableScan`
/// below an aggregate, as SqlToRel plans a subquery with UNNEST.
pub(super) struct UnnestBelow {
    /// The select list above UNNEST: what each of the aggregate's input columns is.
    above: Vec<Expr>,
    /// The select list below UNNEST, over `source`.
    inner: Vec<Expr>,
    /// The event time's column in the source's rows.
    source_ts: usize,
    /// Which of `inner` are expanded.
    lists: Vec<usize>,
    /// The WHERE below UNNEST, over `source`.
    source_filter: Option<Expr>,
    /// The rows `inner` and `source_filter` read (the source table's columns, in order).
    source: DFSchema,
    /// The expanded rows: UNNEST's columns, then the event time.
    pub rows: DFSchema,
    /// The event time's column in `rows`.
    pub event_time: usize,
}

/// The UNNEST step `plan` (below the aggregate's WHERE and alias) holds, if any; the
/// source's event time is its column `event_time.0`.
///
/// Errors: UNNEST of a STRUCT or of a list of lists, and anything but a table read
/// directly (with a WHERE) below UNNEST.
pub(super) fn of(
    plan: &LogicalPlan,
    event_time: (usize, &str),
    what: &str,
) -> Result<Option<UnnestBelow>, SqlError> {
    let LogicalPlan::Projection(above) = plan else {
        return Ok(None);
    };
    let LogicalPlan::Unnest(u) = above.input.as_ref() else {
        return Ok(None);
    };
    let LogicalPlan::Projection(inner) = u.input.as_ref() else {
        return Err(below_unnest(u.input.as_ref(), what));
    };
    if !u.struct_type_columns.is_empty() {
        return Err(SqlError(format!(
            "{what}: UNNEST of a STRUCT is not supported; UNNEST a list"
        )));
    }
    if u.list_type_columns.iter().any(|(_, l)| l.depth != 1)
        || u.schema.fields().len() != inner.schema.fields().len()
    {
        return Err(SqlError(format!(
            "{what}: UNNEST of a list of lists is not supported; UNNEST one level"
        )));
    }
    let (source_filter, below) = match inner.input.as_ref() {
        LogicalPlan::Filter(f) => (Some(f.predicate.clone()), f.input.as_ref()),
        other => (None, other),
    };
    let table = match below {
        LogicalPlan::SubqueryAlias(a) => a.input.as_ref(),
        other => other,
    };
    match table {
        LogicalPlan::TableScan(t) if t.filters.is_empty() && t.fetch.is_none() => {}
        other => return Err(below_unnest(other, what)),
    }
    let source = inner.input.schema().as_ref().clone();
    // The event time may be a column SQL does not see (the publish time): carried by
    // index, not by an expression.
    let ts = Field::new(
        EVENT_TIME,
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        true,
    );
    let extra = DFSchema::try_from(Schema::new(vec![ts]))
        .map_err(|e| SqlError(format!("{what}: {}", message(&e))))?;
    let rows = u
        .schema
        .join(&extra)
        .map_err(|e| SqlError(format!("{what}: {}", message(&e))))?;
    Ok(Some(UnnestBelow {
        above: above.expr.clone(),
        inner: inner.expr.clone(),
        source_ts: event_time.0,
        lists: u.list_type_columns.iter().map(|(i, _)| *i).collect(),
        source_filter,
        source,
        event_time: rows.fields().len() - 1,
        rows,
    }))
}

impl UnnestBelow {
    /// `e`, over the aggregate's input columns (`columns`, one per expression above
    /// UNNEST), as an expression over the expanded rows.
    pub fn rewrite(&self, e: &Expr, columns: &DFSchema, what: &str) -> Result<Expr, SqlError> {
        super::aggregate::substitute(e, columns, &self.above)
            .map_err(|x| SqlError(format!("{what}: `{e}`: {}", message(&x))))
    }

    /// The UNNEST step of stage 1, with `after` (the aggregate's WHERE, over the expanded
    /// rows) as its filter; and the WHERE below UNNEST, over the source's rows.
    #[allow(clippy::type_complexity)]
    pub fn plan(
        self,
        after: Option<(Arc<dyn PhysicalExpr>, String)>,
        what: &str,
    ) -> Result<(UnnestPlan, Option<(Arc<dyn PhysicalExpr>, String)>), SqlError> {
        let inner = self
            .inner
            .iter()
            .map(|e| {
                let text = e.to_string();
                to_physical(e, &text, None, &self.source, what).map(|(_, p)| (p, text))
            })
            .collect::<Result<_, _>>()?;
        let below = match &self.source_filter {
            Some(f) => {
                let text = f.to_string();
                Some((to_physical(f, &text, None, &self.source, what)?.1, text))
            }
            None => None,
        };
        Ok((
            UnnestPlan {
                inner,
                lists: self.lists,
                carry: vec![self.source_ts],
                schema: Arc::new(self.rows.as_arrow().clone()),
                filter: after,
            },
            below,
        ))
    }
}

fn below_unnest(p: &LogicalPlan, what: &str) -> SqlError {
    SqlError(format!(
        "{what}: below UNNEST the query plans to a {} step; UNNEST reads its table directly (SELECT UNNEST(tags) AS tag, ... FROM src WHERE ...)",
        p.display()
    ))
}
