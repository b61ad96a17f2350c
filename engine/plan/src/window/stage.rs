//! The window stage of a windowed query: which windows a row belongs to and the
//! aggregates each window computes (planned by the SQL front end's `aggregate.rs`, run by
//! [`WindowState`](super::WindowState)).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::select::SelectPlan;

/// Which windows a row belongs to (bounds in nanoseconds since the epoch, aligned to the
/// epoch: Arroyo's and Flink's default offset of zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// `[k * width, (k + 1) * width)`: one window per row.
    Tumble { width: i64 },
    /// Windows of `width` starting every `slide` (`width` a multiple of `slide`): each row
    /// is in `width / slide` of them.
    Hop { slide: i64, width: i64 },
    /// Per group key, rows less than `gap` apart in event time share a window, from its
    /// first row's time to its last row's time plus `gap` (Flink's and Arroyo's session
    /// window). Windows merge when a row bridges them.
    Session { gap: i64 },
    /// No window: an updating aggregate (issue 47). Each group's row is kept up to date
    /// and every `interval` (ns, processing time) the groups that changed write their
    /// change (see [`updating`](super::updating)); a group no row reached for `ttl` (ns,
    /// processing time) is forgotten.
    Updating { interval: i64, ttl: i64 },
}

impl WindowKind {
    /// The start of every window holding event time `t`, earliest first (none for a
    /// session window: its bounds depend on the other rows).
    pub fn starts(&self, t: i64) -> impl Iterator<Item = i64> {
        let (slide, width) = match *self {
            WindowKind::Tumble { width } => (width, width),
            WindowKind::Hop { slide, width } => (slide, width),
            WindowKind::Session { .. } | WindowKind::Updating { .. } => (1, 0),
        };
        let last = t.div_euclid(slide) * slide;
        let n = width / slide;
        (0..n).rev().map(move |k| last - k * slide)
    }

    /// A window's length; for a session window, the gap (its shortest length); for an
    /// updating aggregate, its interval.
    pub fn width(&self) -> i64 {
        match *self {
            WindowKind::Tumble { width } | WindowKind::Hop { width, .. } => width,
            WindowKind::Session { gap } => gap,
            WindowKind::Updating { interval, .. } => interval,
        }
    }
}

/// The window stage of a windowed query.
pub struct WindowPlan {
    pub kind: WindowKind,
    /// Stage 1: rows out are `[keys.., arguments.., event time]`.
    pub before: Arc<SelectPlan>,
    /// How many leading columns of `before`'s rows are the group key.
    pub keys: usize,
    /// One per aggregate, reading `before`'s rows; its value is cast exactly to the
    /// aggregate's column of `output` (a `sum` of integers runs on DECIMAL(38, 0), so
    /// that an overflow fails instead of wrapping).
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// The rows a firing window writes: the group items in GROUP BY order (the window,
    /// `STRUCT<start, end>`, at `window_at`), then the aggregates, then the record key
    /// (`__record_key`, TEXT) when the sink stamps record ids (never for an updating
    /// aggregate: its changes are keyed by group and change).
    pub output: SchemaRef,
    /// Where the window is among the group items; `None` for an updating aggregate.
    pub window_at: Option<usize>,
    /// An updating aggregate's HAVING and outer WHERE, on `output`'s rows: a group whose
    /// row fails it has no row in the changelog (a delete when it had one). A windowed
    /// aggregate folds them into the query's SELECT instead.
    pub having: Option<(
        std::sync::Arc<dyn datafusion_physical_expr::PhysicalExpr>,
        String,
    )>,
    /// The query's statement text, for errors.
    pub text: String,
    /// Its source is a changelog (format `debezium_json`): its first stage's rows carry
    /// [`RETRACT_COLUMN`](crate::changelog::RETRACT_COLUMN) before the event time, and
    /// the aggregates retract (see [`updating`](super::updating)).
    pub retracting: bool,
    /// The group keys (indexes among the first `keys` columns of `before`'s rows) the
    /// window's exchange routes by: the keys of a window function's PARTITION BY, so that
    /// each partition's rows are on one subtask (decision 0053); `None`: all of them.
    pub route: Option<Vec<usize>>,
    /// Window functions over the rows a window fires (top-N), before `select`.
    pub rank: Option<Arc<super::RankPlan>>,
}

impl WindowPlan {
    /// The group key columns rows are routed by (see [`route`](Self::route)).
    pub fn route_columns(&self) -> Vec<usize> {
        match &self.route {
            Some(r) => r.clone(),
            None => (0..self.keys).collect(),
        }
    }

    /// The first stage on a source batch (`before`; on both images of a changelog's
    /// changes, see [`crate::changelog::first_stage`]).
    pub fn first_stage(
        &self,
        batch: &arrow::array::RecordBatch,
    ) -> Result<arrow::array::RecordBatch, crate::RowFailure> {
        if self.retracting {
            return crate::changelog::first_stage(&self.before, batch);
        }
        self.before.evaluate(batch)
    }
}

impl std::fmt::Debug for WindowPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowPlan")
            .field("kind", &self.kind)
            .field("keys", &self.keys)
            .field(
                "aggregates",
                &self.aggregates.iter().map(|a| a.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}
