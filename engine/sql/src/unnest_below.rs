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

use pubsub_engine_spi::{ConnectionSchema, SourceField};

use super::error::SqlError;
use super::select::to_physical;

/// The expanded rows' column that carries the event time.
pub(super) const EVENT_TIME: &str = "__unnest_event_time";

/// A `Projection <- Unnest <- Projection <- [Filter] <- [SubqueryAlias] <- TableScan`
/// below an aggregate, as SqlToRel plans a subquery with UNNEST.
pub(super) struct UnnestBelow {
    /// The select list above UNNEST: what each of the aggregate's input columns is.
    pub(super) above: Vec<Expr>,
    /// The select list below UNNEST, over `source`.
    pub(super) inner: Vec<Expr>,
    /// The event time's column in the source's rows (below an aggregate).
    pub(super) source_ts: Option<usize>,
    /// Which of `inner` are expanded.
    pub(super) lists: Vec<usize>,
    /// The WHERE below UNNEST, over `source`.
    pub(super) source_filter: Option<Expr>,
    /// The rows `inner` and `source_filter` read (the source table's columns, in order).
    pub(super) source: DFSchema,
    /// The expanded rows: UNNEST's columns, then the event time.
    pub rows: DFSchema,
    /// The event time's column in `rows` (below an aggregate).
    pub event_time: Option<usize>,
}

/// The UNNEST step `plan` (below the WHERE and the alias of the query reading it) holds,
/// if any; below an aggregate, the source's event time is its column `event_time`.
///
/// Errors: UNNEST of a STRUCT or of a list of lists, and anything but a table read
/// directly (with a WHERE) below UNNEST.
pub(super) fn of(
    plan: &LogicalPlan,
    event_time: Option<usize>,
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
    check_lists(u, inner, what)?;
    let (source_filter, table) = super::select::below_where(inner.input.as_ref());
    if !super::select::is_whole_table(table) {
        return Err(below_unnest(table, what));
    }
    let source = inner.input.schema().as_ref().clone();
    // The event time may be a column SQL does not see (the publish time): carried by
    // index, not by an expression.
    let rows = match event_time {
        None => u.schema.as_ref().clone(),
        Some(_) => {
            let ts = Field::new(
                EVENT_TIME,
                DataType::Timestamp(TimeUnit::Nanosecond, None),
                true,
            );
            let extra = DFSchema::try_from(Schema::new(vec![ts]))
                .map_err(|e| SqlError(format!("{what}: {}", message(&e))))?;
            u.schema
                .join(&extra)
                .map_err(|e| SqlError(format!("{what}: {}", message(&e))))?
        }
    };
    Ok(Some(UnnestBelow {
        above: above.expr.clone(),
        inner: inner.expr.clone(),
        source_ts: event_time,
        lists: u.list_type_columns.iter().map(|(i, _)| *i).collect(),
        source_filter,
        source,
        event_time: event_time.map(|_| rows.fields().len() - 1),
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
                carry: self.source_ts.into_iter().collect(),
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

/// `src` and, for each list UNNEST expands from a source column (`inner[i]` a bare column
/// of an array type, `i` in `lists`), its element column in `rows` with the element type:
/// so the element of a `JSON[]` stays JSON, as a bare `JSON` column does.
pub(super) fn with_elements(
    src: &ConnectionSchema,
    inner: &[Expr],
    lists: &[usize],
    rows: &DFSchema,
) -> ConnectionSchema {
    let mut out = src.clone();
    for &i in lists {
        let Expr::Column(c) = inner[i].clone().unalias() else {
            continue;
        };
        let element = src
            .fields
            .iter()
            .find(|f| f.name == c.name)
            .and_then(|f| f.field_type.element());
        if let Some(t) = element {
            out.fields
                .push(SourceField::new(rows.field(i).name().clone(), t));
        }
    }
    out
}

/// Refuses UNNEST (of `inner`'s columns) of anything but one level of a `List` or
/// `LargeList` (a fixed-size list would fail every row at run time), of a STRUCT, and
/// DataFusion's NULL-preserving variant (its rows differ).
pub(super) fn check_lists(
    u: &datafusion_expr::logical_plan::Unnest,
    inner: &datafusion_expr::logical_plan::Projection,
    what: &str,
) -> Result<(), SqlError> {
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
    if u.options.preserve_nulls {
        return Err(SqlError(format!(
            "{what}: UNNEST that keeps NULL lists is not supported"
        )));
    }
    for (i, _) in &u.list_type_columns {
        let t = u.input.schema().field(*i).data_type().clone();
        if !matches!(t, DataType::List(_) | DataType::LargeList(_)) {
            return Err(SqlError(format!(
                "{what}: UNNEST of {} is not supported; UNNEST an array column",
                pubsub_engine_plan::type_words::sql_type(&t)
            )));
        }
    }
    Ok(())
}
