//! What one open group-window costs with DataFusion's aggregate accumulators: memory
//! (the accumulators' own `size()` and the process allocator), and checkpoint bytes
//! (their partial `state()` as Arrow IPC), for `GroupsAccumulator` (one object per
//! aggregate, a slot per group) against one `Accumulator` object per group; and the key
//! side: each group's key as Arrow row bytes in a hash map to its slot (decision 0039).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion_expr::function::AccumulatorArgs;
use datafusion_expr::{AggregateUDF, EmitTo};
use datafusion_physical_expr::expressions::Column;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Relaxed);
        System.realloc(p, l, n)
    }
}
#[global_allocator]
static A: Counting = Counting;

fn ipc_bytes(arrays: Vec<ArrayRef>) -> usize {
    let fields: Vec<Field> = arrays
        .iter()
        .enumerate()
        .map(|(i, a)| Field::new(format!("s{i}"), a.data_type().clone(), true))
        .collect();
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap();
    let mut out = Vec::new();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    drop(w);
    out.len()
}

fn main() {
    let groups: usize = std::env::args().nth(1).map_or(100_000, |s| s.parse().unwrap());
    let x: Arc<dyn datafusion_physical_expr::PhysicalExpr> = Arc::new(Column::new("x", 0));
    let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..groups as i64));
    let idx: Vec<usize> = (0..groups).collect();
    let udafs: Vec<(&str, Arc<AggregateUDF>, bool)> = vec![
        ("count", datafusion_functions_aggregate::count::count_udaf(), false),
        ("sum", datafusion_functions_aggregate::sum::sum_udaf(), false),
        ("avg", datafusion_functions_aggregate::average::avg_udaf(), false),
        ("min", datafusion_functions_aggregate::min_max::min_udaf(), false),
        ("max", datafusion_functions_aggregate::min_max::max_udaf(), false),
        ("count distinct", datafusion_functions_aggregate::count::count_udaf(), true),
    ];
    println!("groups: {groups}");
    // The key side: each group's key as Arrow row bytes in a map to its slot.
    for (label, keys) in [
        ("BIGINT key", Arc::new(Int64Array::from_iter_values(0..groups as i64)) as ArrayRef),
        (
            "TEXT key of 12 chars",
            Arc::new(arrow::array::StringArray::from_iter_values(
                (0..groups).map(|i| format!("page-{i:07}")),
            )) as ArrayRef,
        ),
    ] {
        let before = LIVE.load(Relaxed);
        let conv = arrow::row::RowConverter::new(vec![arrow::row::SortField::new(
            keys.data_type().clone(),
        )])
        .unwrap();
        let rows = conv.convert_columns(&[keys.clone()]).unwrap();
        let mut map: std::collections::HashMap<Box<[u8]>, u32> =
            std::collections::HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            map.insert(r.as_ref().into(), i as u32);
        }
        drop(rows);
        let heap = LIVE.load(Relaxed) - before;
        println!("{label}: key map heap/group {:.1}", heap as f64 / groups as f64);
        drop(map);
    }
    println!("aggregate | groups-acc size()/group | groups-acc heap/group | state IPC bytes/group | per-group Accumulator heap/group | its state IPC bytes/group");
    for (name, udaf, distinct) in udafs {
        // The planner coerces inputs first (avg reads Float64).
        let input = if name == "avg" { DataType::Float64 } else { DataType::Int64 };
        let schema = Schema::new(vec![Field::new("x", input.clone(), true)]);
        let field = Arc::new(Field::new("x", input.clone(), true));
        let values = arrow::compute::cast(&values, &input).unwrap();
        let ret = udaf.return_type(&[input.clone()]).unwrap();
        let args = || AccumulatorArgs {
            return_field: Arc::new(Field::new(name, ret.clone(), true)),
            schema: &schema,
            ignore_nulls: false,
            order_bys: &[],
            is_reversed: false,
            name,
            is_distinct: distinct,
            exprs: std::slice::from_ref(&x),
            expr_fields: std::slice::from_ref(&field),
        };
        // GroupsAccumulator: one per aggregate, group i gets value i.
        let grouped = if udaf.groups_accumulator_supported(args()) {
            let before = LIVE.load(Relaxed);
            let mut g = udaf.create_groups_accumulator(args()).unwrap();
            g.update_batch(std::slice::from_ref(&values), &idx, None, groups)
                .unwrap();
            let heap = LIVE.load(Relaxed) - before;
            let size = g.size();
            let state = g.state(EmitTo::All).unwrap();
            let ipc = ipc_bytes(state);
            format!(
                "{:.1} | {:.1} | {:.1}",
                size as f64 / groups as f64,
                heap as f64 / groups as f64,
                ipc as f64 / groups as f64
            )
        } else {
            "not supported | - | -".to_string()
        };
        // One Accumulator per group, each fed its one value.
        let before = LIVE.load(Relaxed);
        let mut accs: Vec<Box<dyn datafusion_expr::Accumulator>> = Vec::with_capacity(groups);
        for i in 0..groups {
            let mut a = udaf.accumulator(args()).unwrap();
            a.update_batch(&[values.slice(i, 1)]).unwrap();
            accs.push(a);
        }
        let heap = LIVE.load(Relaxed) - before;
        let mut state_bytes = 0usize;
        // State of every group, as one batch per state field (ScalarValue -> arrays).
        let states: Vec<Vec<datafusion_common::ScalarValue>> =
            accs.iter_mut().map(|a| a.state().unwrap()).collect();
        let nfields = states[0].len();
        let cols: Vec<ArrayRef> = (0..nfields)
            .map(|f| {
                datafusion_common::ScalarValue::iter_to_array(states.iter().map(|s| s[f].clone()))
                    .unwrap()
            })
            .collect();
        state_bytes += ipc_bytes(cols);
        println!(
            "{name}({input}) | {grouped} | {:.1} | {:.1}",
            heap as f64 / groups as f64,
            state_bytes as f64 / groups as f64
        );
    }
}
