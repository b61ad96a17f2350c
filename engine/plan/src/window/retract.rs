//! The accumulators of an updating aggregate over a changelog (issue 47): a change's old
//! row is retracted from its group. Rows of different primary keys reach a group in any
//! order, so an aggregate retracts with DataFusion's `retract_batch` only where the result
//! is exact whatever that order (counts, and sums of integers and decimals); any other
//! (`min`, `max`, a DISTINCT, `avg` and sums of floating-point numbers, whose subtraction
//! rounds, ...) keeps its argument values with their counts and is evaluated afresh from
//! them ([`KeptValues`]), its state measured by the values' bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Schema};
use arrow::row::{RowConverter, SortField};
use datafusion_common::{DataFusionError, Result, ScalarValue};
use datafusion_expr::Accumulator;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

/// Aggregates whose `retract_batch` (on the accumulator `create_sliding_accumulator`
/// makes) gives exactly the state of the rows left, whatever order rows and retractions
/// came in, when no argument is floating-point (`sum`: see [`exact_arguments`]). `min`
/// and `max` are not among them: their sliding accumulators retract only the oldest row.
/// `avg`, variance and deviation sum in floating point whatever their argument: a
/// subtraction rounds (a deviation can even turn NaN), so they keep their values.
const RETRACT_IN_ANY_ORDER: &[&str] = &["count", "sum", "bit_xor"];

/// Aggregates whose result does not depend on how many rows hold a value: evaluated from
/// each kept value once.
const BY_DISTINCT_VALUE: &[&str] = &["min", "max", "bool_and", "bool_or", "bit_and", "bit_or"];

/// Rows folded into a fresh accumulator at a time when a kept-values aggregate is
/// evaluated: its memory stays bounded however many rows a group holds.
const EVALUATE_CHUNK: usize = 8192;

/// Whether no argument of `a` is floating-point (a `sum` of them would round).
fn exact_arguments(a: &AggregateFunctionExpr, input: &Schema) -> bool {
    a.expressions().iter().all(|e| {
        e.data_type(input)
            .is_ok_and(|t| !matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64))
    })
}

/// An accumulator for aggregate `a` of a plan; one that retracts when `retracting`.
pub(super) fn accumulator(
    a: &Arc<AggregateFunctionExpr>,
    retracting: bool,
    input: &Schema,
) -> Result<Box<dyn Accumulator>> {
    if !retracting {
        return a.create_accumulator();
    }
    if !a.is_distinct()
        && RETRACT_IN_ANY_ORDER.contains(&a.fun().name())
        && (a.fun().name() != "sum" || exact_arguments(a, input))
    {
        let acc = a.create_sliding_accumulator()?;
        if acc.supports_retract_batch() {
            return Ok(Box::new(Retracting {
                inner: acc,
                agg: a.clone(),
                rows: 0,
            }));
        }
    }
    Ok(Box::new(KeptValues::new(a.clone(), input)?))
}

/// How many state columns aggregate `a`'s accumulator (from [`accumulator`]) has.
pub(super) fn state_width(
    a: &Arc<AggregateFunctionExpr>,
    retracting: bool,
    input: &Schema,
) -> Result<usize> {
    let mut acc = accumulator(a, retracting, input)?;
    Ok(acc.state()?.len())
}

/// A retracting accumulator that counts the rows it holds whose arguments are all
/// non-NULL, and with none evaluates as a fresh accumulator does: DataFusion's `avg`
/// evaluates to NaN (0 / 0), not NULL, once every value was retracted. Its state is the
/// inner state, then that count.
struct Retracting {
    inner: Box<dyn Accumulator>,
    agg: Arc<AggregateFunctionExpr>,
    rows: i64,
}

impl std::fmt::Debug for Retracting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retracting")
            .field("rows", &self.rows)
            .finish()
    }
}

/// Rows of `values` whose columns are all non-NULL.
fn valid_rows(values: &[ArrayRef]) -> i64 {
    let n = values.first().map_or(0, |v| v.len());
    (0..n)
        .filter(|&i| values.iter().all(|v| v.is_valid(i)))
        .count() as i64
}

impl Accumulator for Retracting {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.rows += valid_rows(values);
        self.inner.update_batch(values)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.rows -= valid_rows(values);
        self.inner.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.rows <= 0 {
            return self.agg.create_accumulator()?.evaluate();
        }
        self.inner.evaluate()
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.inner.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let mut s = self.inner.state()?;
        s.push(ScalarValue::Int64(Some(self.rows)));
        Ok(s)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some((rows, inner)) = states.split_last() else {
            return Err(DataFusionError::Internal(
                "a retracting state is empty".into(),
            ));
        };
        let rows = rows
            .as_primitive_opt::<arrow::datatypes::Int64Type>()
            .ok_or_else(|| DataFusionError::Internal("a retracting state's count".into()))?;
        self.rows += rows.iter().flatten().sum::<i64>();
        self.inner.merge_batch(inner)
    }
}

/// Aggregate `a`'s argument values with how many rows hold each (Arrow row bytes), for an
/// aggregate that cannot retract in any order: `evaluate` folds them into a fresh
/// accumulator. Its state is one BINARY value (see [`KeptValues::state`]).
pub(super) struct KeptValues {
    agg: Arc<AggregateFunctionExpr>,
    converter: RowConverter,
    values: BTreeMap<Box<[u8]>, i64>,
    bytes: usize,
}

/// What a kept value costs besides its bytes: its map entry (an estimate from the layout).
const VALUE_OVERHEAD: usize = 48;

impl KeptValues {
    fn new(agg: Arc<AggregateFunctionExpr>, input: &Schema) -> Result<Self> {
        let fields = agg
            .expressions()
            .iter()
            .map(|e| Ok(SortField::new(e.data_type(input)?)))
            .collect::<Result<Vec<_>>>()?;
        let converter = RowConverter::new(fields)?;
        Ok(KeptValues {
            agg,
            converter,
            values: BTreeMap::new(),
            bytes: 0,
        })
    }

    fn add(&mut self, key: &[u8], n: i64) {
        match self.values.get_mut(key) {
            Some(c) => {
                *c += n;
                if *c <= 0 {
                    self.values.remove(key);
                    self.bytes -= key.len() + VALUE_OVERHEAD;
                }
            }
            // A retraction of a value the group does not hold (its row was never folded
            // in here: the state was forgotten, or the old row differs) is ignored.
            None if n > 0 => {
                self.values.insert(key.into(), n);
                self.bytes += key.len() + VALUE_OVERHEAD;
            }
            None => {}
        }
    }

    fn fold(&mut self, values: &[ArrayRef], n: i64) -> Result<()> {
        let rows = self.converter.convert_columns(values)?;
        for r in rows.iter() {
            self.add(r.as_ref(), n);
        }
        Ok(())
    }
}

impl std::fmt::Debug for KeptValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptValues")
            .field("values", &self.values.len())
            .finish()
    }
}

impl Accumulator for KeptValues {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.fold(values, 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.fold(values, -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    /// Folds the values into a fresh accumulator, [`EVALUATE_CHUNK`] rows at a time (each
    /// value once where counts do not matter, see [`BY_DISTINCT_VALUE`]).
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let mut acc = self.agg.create_accumulator()?;
        let once = self.agg.is_distinct() || BY_DISTINCT_VALUE.contains(&self.agg.fun().name());
        let parser = self.converter.parser();
        let mut rows = self.values.iter().flat_map(|(k, n)| {
            let row = parser.parse(k);
            (0..if once { 1 } else { *n }).map(move |_| row)
        });
        loop {
            let chunk: Vec<_> = rows.by_ref().take(EVALUATE_CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            acc.update_batch(&self.converter.convert_rows(chunk)?)?;
        }
        acc.evaluate()
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.bytes
    }

    /// The values as one BINARY value: per value its length (u32), its bytes and its
    /// count (i64), little-endian.
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let mut out = Vec::with_capacity(self.bytes);
        for (k, n) in &self.values {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Ok(vec![ScalarValue::Binary(Some(out))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let bad = || DataFusionError::Internal("a kept-values state is malformed".into());
        let Some(s) = states.first() else {
            return Err(bad());
        };
        if s.data_type() != &DataType::Binary {
            return Err(bad());
        }
        let s = s.as_binary::<i32>();
        for i in 0..s.len() {
            if !s.is_valid(i) {
                continue;
            }
            let mut b = s.value(i);
            while !b.is_empty() {
                let len = u32::from_le_bytes(b.get(..4).ok_or_else(bad)?.try_into().expect("4"));
                let len = len as usize;
                let key = b.get(4..4 + len).ok_or_else(bad)?;
                let n = i64::from_le_bytes(
                    b.get(4 + len..12 + len)
                        .ok_or_else(bad)?
                        .try_into()
                        .expect("8"),
                );
                self.add(key, n);
                b = &b[12 + len..];
            }
        }
        Ok(())
    }
}
