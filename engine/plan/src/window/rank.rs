//! Window functions over the rows a window writes when it fires (issue 48, part 2): top-N
//! per window (`ROW_NUMBER() OVER (PARTITION BY window, k ORDER BY n DESC)` under an outer
//! `WHERE row_num <= N`), and `rank`, `dense_rank`, `lag`, `lead`, ... as DataFusion's own
//! evaluators compute them (decision 0053).
//!
//! Each fired batch holds one window's rows (TUMBLE and HOP), and every row of one
//! partition is on one subtask: the window's exchange routes rows by the partition's
//! keys ([`WindowPlan::route`](super::WindowPlan::route)). A window's rows are unique by
//! their group key, so sorting by the ORDER BY and then by the group key is a total
//! order: ties are broken by the group key, ascending, and a replay writes the same rows.

use std::sync::Arc;

use anyhow::Context;
use arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::compute::{concat, filter_record_batch, take, SortColumn, SortOptions};
use arrow::datatypes::{FieldRef, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion_common::utils::evaluate_partition_ranges;
use datafusion_expr::{PartitionEvaluator, WindowFrame, WindowUDF};
use datafusion_functions_window_common::expr::ExpressionArgs;
use datafusion_functions_window_common::field::WindowUDFFieldArgs;
use datafusion_functions_window_common::partition::PartitionEvaluatorArgs;
use datafusion_physical_expr::window::{
    StandardWindowExpr, StandardWindowFunctionExpr, WindowExpr,
};
use datafusion_physical_expr::{PhysicalExpr, PhysicalSortExpr};

/// The window functions of a query over a windowed aggregate, on its fired rows.
pub struct RankPlan {
    /// A condition below the window functions (HAVING, a WHERE in the SELECT computing
    /// them), on the fired rows: the rows it drops are not ranked.
    pub filter: Option<(Arc<dyn PhysicalExpr>, String)>,
    /// PARTITION BY, without the window (each fired batch is one window's rows).
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    /// ORDER BY, with each item's direction and NULLS placement.
    pub order: Vec<PhysicalSortExpr>,
    /// The group key columns of the fired rows: the tie-break after `order`.
    pub keys: Vec<usize>,
    /// One per window function, in the query's order; its column follows the fired
    /// row's columns (before the record key).
    pub functions: Vec<Arc<StandardWindowExpr>>,
    /// How many leading columns of a fired row are the aggregate's (the record key, when
    /// the sink stamps ids, follows them).
    pub width: usize,
    /// The rows out: the fired row's `width` columns, the functions' columns, then the
    /// record key when it came in.
    pub output: SchemaRef,
}

impl std::fmt::Debug for RankPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankPlan")
            .field(
                "functions",
                &self.functions.iter().map(|w| w.name()).collect::<Vec<_>>(),
            )
            .field("keys", &self.keys)
            .finish()
    }
}

/// A DataFusion window function (a [`WindowUDF`]: `row_number`, `rank`, `lag`, ...) bound
/// to its arguments, as DataFusion's physical planner binds one.
#[derive(Debug)]
pub struct BoundWindowFunction {
    fun: Arc<WindowUDF>,
    args: Vec<Arc<dyn PhysicalExpr>>,
    input_fields: Vec<FieldRef>,
    name: String,
    ignore_nulls: bool,
}

impl BoundWindowFunction {
    /// Binds `fun` to `args` (over `input`), named `name`; fails as DataFusion's planner
    /// does on arguments the function refuses (`lag(x, 'a')`).
    pub fn new(
        fun: Arc<WindowUDF>,
        args: Vec<Arc<dyn PhysicalExpr>>,
        input: &Schema,
        name: String,
        ignore_nulls: bool,
    ) -> datafusion_common::Result<Self> {
        let input_fields = args
            .iter()
            .map(|a| a.return_field(input))
            .collect::<datafusion_common::Result<_>>()?;
        let bound = BoundWindowFunction {
            fun,
            args,
            input_fields,
            name,
            ignore_nulls,
        };
        bound.create_evaluator()?;
        Ok(bound)
    }

    /// Whether its value reads a window frame (`first_value`, `nth_value`), not only the
    /// rows' order.
    pub fn uses_frame(&self) -> datafusion_common::Result<bool> {
        Ok(self.create_evaluator()?.uses_window_frame())
    }
}

impl StandardWindowFunctionExpr for BoundWindowFunction {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn field(&self) -> datafusion_common::Result<FieldRef> {
        self.fun
            .field(WindowUDFFieldArgs::new(&self.input_fields, &self.name))
    }

    fn expressions(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        self.fun
            .expressions(ExpressionArgs::new(&self.args, &self.input_fields))
    }

    fn create_evaluator(&self) -> datafusion_common::Result<Box<dyn PartitionEvaluator>> {
        self.fun
            .partition_evaluator_factory(PartitionEvaluatorArgs::new(
                &self.args,
                &self.input_fields,
                false,
                self.ignore_nulls,
            ))
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn limit_effect(&self) -> datafusion_expr::LimitEffect {
        self.fun.inner().limit_effect(&self.args)
    }
}

/// A window function over one partition's rows sorted by `order`, in `frame`.
pub fn window_expr(
    f: BoundWindowFunction,
    order: &[PhysicalSortExpr],
    frame: Arc<WindowFrame>,
) -> Arc<StandardWindowExpr> {
    Arc::new(StandardWindowExpr::new(Arc::new(f), &[], order, frame))
}

impl RankPlan {
    /// The rows of one fired window (`batch`, in the window's output schema), filtered,
    /// sorted by partition, ORDER BY and group key, with each function's column.
    ///
    /// Errors: an expression or a function failed on the rows (a permanent error: the
    /// same rows fail again on a replay).
    pub fn rank(&self, batch: &RecordBatch, text: &str) -> anyhow::Result<RecordBatch> {
        let fail = |e: datafusion_common::DataFusionError, what: &str| {
            pubsub_engine_spi::PermanentError::wrap(anyhow::anyhow!(
                "{text}: {what}: {}",
                crate::type_words::message(&e)
            ))
        };
        let batch = match &self.filter {
            Some((f, what)) if batch.num_rows() > 0 => {
                let mask = f
                    .evaluate(batch)
                    .and_then(|v| v.into_array(batch.num_rows()))
                    .map_err(|e| fail(e, what))?;
                let mask = mask
                    .as_boolean_opt()
                    .with_context(|| format!("{text}: {what} is not a condition"))?;
                filter_record_batch(batch, mask)?
            }
            _ => batch.clone(),
        };
        let n = batch.num_rows();
        if n == 0 {
            return Ok(RecordBatch::new_empty(self.output.clone()));
        }
        let eval = |e: &Arc<dyn PhysicalExpr>| {
            e.evaluate(&batch)
                .and_then(|v| v.into_array(n))
                .map_err(|x| fail(x, "PARTITION BY / ORDER BY"))
        };
        let partition: Vec<ArrayRef> = self.partition.iter().map(eval).collect::<Result<_, _>>()?;
        let order: Vec<ArrayRef> = self
            .order
            .iter()
            .map(|o| eval(&o.expr))
            .collect::<Result<_, _>>()?;
        // Partition, ORDER BY, then the group key: a total order over a window's rows.
        let mut sort: Vec<(ArrayRef, SortOptions)> = partition
            .iter()
            .map(|a| (a.clone(), SortOptions::default()))
            .collect();
        sort.extend(
            order
                .iter()
                .cloned()
                .zip(self.order.iter().map(|o| o.options)),
        );
        sort.extend(
            self.keys
                .iter()
                .map(|&k| (batch.column(k).clone(), SortOptions::default())),
        );
        let indices = sorted_indices(&sort, n)?;
        let sorted_columns = batch
            .columns()
            .iter()
            .map(|c| take(c, &indices, None))
            .collect::<Result<Vec<_>, _>>()?;
        let opts = RecordBatchOptions::new().with_row_count(Some(n));
        let sorted = RecordBatch::try_new_with_options(batch.schema(), sorted_columns, &opts)?;
        let bounds: Vec<SortColumn> = partition
            .iter()
            .map(|a| {
                Ok(SortColumn {
                    values: take(a, &indices, None)?,
                    options: None,
                })
            })
            .collect::<anyhow::Result<_>>()?;
        let ranges = evaluate_partition_ranges(n, &bounds).map_err(|e| fail(e, "PARTITION BY"))?;
        let mut columns: Vec<ArrayRef> = sorted.columns()[..self.width].to_vec();
        for w in &self.functions {
            let parts = ranges
                .iter()
                .map(|r| w.evaluate(&sorted.slice(r.start, r.end - r.start)))
                .collect::<datafusion_common::Result<Vec<_>>>()
                .map_err(|e| fail(e, w.name()))?;
            let field = self.output.field(columns.len());
            let column = match parts.as_slice() {
                [] => arrow::array::new_empty_array(field.data_type()),
                _ => concat(&parts.iter().map(|a| a.as_ref()).collect::<Vec<_>>())?,
            };
            columns.push(column);
        }
        columns.extend(sorted.columns()[self.width..].iter().cloned());
        Ok(RecordBatch::try_new_with_options(
            self.output.clone(),
            columns,
            &opts,
        )?)
    }
}

/// The row order of `columns` (each with its direction), first to last.
fn sorted_indices(
    columns: &[(ArrayRef, SortOptions)],
    n: usize,
) -> anyhow::Result<arrow::array::UInt32Array> {
    if columns.is_empty() {
        return Ok((0..n as u32).collect());
    }
    let converter = RowConverter::new(
        columns
            .iter()
            .map(|(a, o)| SortField::new_with_options(a.data_type().clone(), *o))
            .collect(),
    )?;
    let rows =
        converter.convert_columns(&columns.iter().map(|(a, _)| a.clone()).collect::<Vec<_>>())?;
    let mut idx: Vec<u32> = (0..n as u32).collect();
    idx.sort_by(|a, b| rows.row(*a as usize).cmp(&rows.row(*b as usize)));
    Ok(idx.into())
}
