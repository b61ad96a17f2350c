//! An integer into a narrower integer sink column (issue 47, item 3): planned as a checked
//! conversion inside the SELECT, so a value that does not fit fails its own row (which a
//! source sets aside under its table's policy) and never wraps; every value that fits is
//! written exactly.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, UInt64Array};
use arrow::datatypes::{Int32Type, Int64Type, UInt32Type, UInt64Type};

use crate::test_mem::Mem;
use crate::{parse_pipeline, plan_pipeline};
use pubsub_engine_plan::PlannedPipeline;
use pubsub_engine_spi::ErasedConnector;

/// `src (b BIGINT, u BIGINT UNSIGNED, i INT)` into `out (n INT, s BIGINT, p INT UNSIGNED,
/// q BIGINT UNSIGNED)`, `stamp`: whether `out` stamps record ids (the SELECT then carries
/// the record key after its columns).
fn planned(stamp: bool) -> PlannedPipeline {
    let sql = parse_pipeline(&format!(
        "CREATE TABLE src (b BIGINT, u BIGINT UNSIGNED, i INT) WITH ('connector' = 'mem', 'role' = 'source');
         CREATE TABLE out (n INT, s BIGINT, p INT UNSIGNED, q BIGINT UNSIGNED)
           WITH ('connector' = 'mem', 'role' = 'sink', 'stamp' = '{stamp}');
         INSERT INTO out SELECT b, u, i, b FROM src;"
    ))
    .unwrap();
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
    let mut p = plan_pipeline(&sql, &connectors).unwrap();
    p.bind_job("j").unwrap();
    p
}

/// Source rows `(b, u, i)` as the source table gives them (with record keys when stamped).
fn batch(p: &PlannedPipeline, rows: &[(i64, u64, i32)]) -> RecordBatch {
    let schema = p.sources()[0].0.connection.schema.arrow_schema();
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2))),
    ];
    if schema.fields().len() == 4 {
        let keys = (0..rows.len()).map(|i| format!("k#{i}"));
        cols.push(Arc::new(arrow::array::StringArray::from_iter_values(keys)));
    }
    RecordBatch::try_new(schema, cols).unwrap()
}

#[test]
fn values_that_fit_are_written_exactly() {
    for stamp in [false, true] {
        let p = planned(stamp);
        let q = &p.queries[0];
        let texts: Vec<&str> = q.select.exprs.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            texts,
            [
                "CAST(b AS INT)",
                "CAST(u AS BIGINT)",
                "CAST(i AS INT UNSIGNED)",
                "CAST(b AS BIGINT UNSIGNED)"
            ],
            "the planner names each checked conversion"
        );
        let edges = [(i64::from(i32::MAX), i64::MAX as u64, i32::MAX), (0, 0, 0)];
        let out = q.project(&batch(&p, &edges)).unwrap();
        assert_eq!(out.num_columns(), if stamp { 5 } else { 4 });
        assert_eq!(
            out.column(0).as_primitive::<Int32Type>().values(),
            &[i32::MAX, 0]
        );
        assert_eq!(
            out.column(1).as_primitive::<Int64Type>().values(),
            &[i64::MAX, 0]
        );
        assert_eq!(
            out.column(2).as_primitive::<UInt32Type>().values(),
            &[i32::MAX as u32, 0]
        );
        assert_eq!(
            out.column(3).as_primitive::<UInt64Type>().values(),
            &[i32::MAX as u64, 0]
        );
        assert_eq!(out.column(0).null_count(), 0);
    }
}

/// Each value one past a column's range fails its own row, named with the value, the
/// column and its range; the rows around it are not blamed.
#[test]
fn a_value_that_does_not_fit_fails_its_row_and_never_wraps() {
    let ok = (1, 1, 1);
    for stamp in [false, true] {
        let p = planned(stamp);
        let q = &p.queries[0];
        for (bad, want) in [
            (
                (i64::from(i32::MAX) + 1, 1, 1),
                "2147483648 does not fit column 'n' of table 'out' (INT: -2147483648 to 2147483647); a BIGINT written to it is checked, never wrapped",
            ),
            (
                (i64::from(i32::MIN) - 1, 1, 1),
                "-2147483649 does not fit column 'n' of table 'out' (INT",
            ),
            (
                (1, i64::MAX as u64 + 1, 1),
                "9223372036854775808 does not fit column 's' of table 'out' (BIGINT: -9223372036854775808 to 9223372036854775807)",
            ),
            (
                (-1, 1, 1),
                "-1 does not fit column 'q' of table 'out' (BIGINT UNSIGNED: 0 to 18446744073709551615)",
            ),
            (
                (1, 1, -1),
                "-1 does not fit column 'p' of table 'out' (INT UNSIGNED: 0 to 4294967295)",
            ),
        ] {
            let f = q
                .select
                .evaluate(&batch(&p, &[ok, bad, ok]))
                .expect_err("refused");
            assert_eq!(f.row, 1, "the row that does not fit, alone: {f}");
            assert!(f.error.contains(want), "{f}");
            assert!(!f.internal, "{f}");
            let e = q.project(&batch(&p, &[ok, bad])).unwrap_err();
            assert!(format!("{e:#}").contains(want), "{e:#}");
        }
    }
}

/// The whole kind: every pair of integer column types where the sink's does not hold all
/// of the source's values, at the source type's edges and around zero. A value within
/// the sink type's range is written as it was; any other fails its row.
#[test]
fn every_narrowing_between_integer_types_keeps_or_refuses_each_value() {
    use pubsub_engine_spi::FieldType::{self, Bigint, Int, UBigint, UInt};
    let range = |t: FieldType| -> (i128, i128) {
        match t {
            Int => (i32::MIN.into(), i32::MAX.into()),
            Bigint => (i64::MIN.into(), i64::MAX.into()),
            UInt => (0, u32::MAX.into()),
            _ => (0, u64::MAX.into()),
        }
    };
    let array = |t: FieldType, v: i128| -> ArrayRef {
        match t {
            Int => Arc::new(Int32Array::from(vec![v as i32])),
            Bigint => Arc::new(Int64Array::from(vec![v as i64])),
            UInt => Arc::new(arrow::array::UInt32Array::from(vec![v as u32])),
            _ => Arc::new(UInt64Array::from(vec![v as u64])),
        }
    };
    let value = |a: &ArrayRef| -> i128 {
        arrow::compute::cast(a, &arrow::datatypes::DataType::Decimal128(38, 0))
            .unwrap()
            .as_primitive::<arrow::datatypes::Decimal128Type>()
            .value(0)
    };
    let connectors: Vec<Arc<dyn ErasedConnector>> = vec![Arc::new(Mem)];
    let mut pairs = 0;
    for from in [Int, Bigint, UInt, UBigint] {
        for to in [Int, Bigint, UInt, UBigint] {
            let ((lo, hi), (to_lo, to_hi)) = (range(from), range(to));
            if to_lo <= lo && hi <= to_hi {
                continue; // a widening: exact, not this test's
            }
            pairs += 1;
            let sql = parse_pipeline(&format!(
                "CREATE TABLE src (x {}) WITH ('connector' = 'mem', 'role' = 'source');
                 CREATE TABLE out (x {}) WITH ('connector' = 'mem', 'role' = 'sink');
                 INSERT INTO out SELECT x FROM src;",
                from.sql_name(),
                to.sql_name()
            ))
            .unwrap();
            let p = plan_pipeline(&sql, &connectors).unwrap();
            let q = &p.queries[0];
            let schema = p.sources()[0].0.connection.schema.arrow_schema();
            for v in [lo, lo.max(-1), 0, 1, hi] {
                let b = RecordBatch::try_new(schema.clone(), vec![array(from, v)]).unwrap();
                let case = format!("{} {v} into {}", from.sql_name(), to.sql_name());
                match q.project(&b) {
                    Ok(out) => {
                        assert!(to_lo <= v && v <= to_hi, "{case}: written");
                        assert_eq!(value(out.column(0)), v, "{case}");
                        assert_eq!(out.column(0).null_count(), 0, "{case}");
                    }
                    Err(e) => {
                        assert!(!(to_lo <= v && v <= to_hi), "{case}: {e:#}");
                        let e = format!("{e:#}");
                        assert!(
                            e.contains(&format!("{v} does not fit column 'x' of table 'out'")),
                            "{case}: {e}"
                        );
                    }
                }
            }
        }
    }
    assert_eq!(pairs, 9, "INT and BIGINT into the unsigned types, and back");
}
