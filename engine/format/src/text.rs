//! TEXT renderings of values for `INSERT ... SELECT` casts to TEXT, matching what the JSON
//! sink writes, so a value reads the same whether it is cast or encoded: TIMESTAMP as
//! RFC 3339 UTC ending in `Z`, DOUBLE/FLOAT as the shortest exact number or `NaN`,
//! `Infinity`, `-Infinity` (Arrow's own cast writes no zone and `inf`).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{Float32Type, Float64Type, TimestampNanosecondType};

use pubsub_engine_types::FieldType;

/// `col` (of SQL type `from`) as TEXT, for the types whose rendering is ours; `None` for
/// the others (Arrow's cast is exact for them).
pub fn to_text(col: &ArrayRef, from: FieldType) -> Option<ArrayRef> {
    let mut out = StringBuilder::with_capacity(col.len(), col.len() * 16);
    let mut buf = Vec::with_capacity(32);
    for row in 0..col.len() {
        if col.is_null(row) {
            out.append_null();
            continue;
        }
        buf.clear();
        match from {
            FieldType::Timestamp => super::timestamp::write_rfc3339(
                col.as_primitive::<TimestampNanosecondType>().value(row),
                &mut buf,
            ),
            FieldType::Double => float_text(col.as_primitive::<Float64Type>().value(row), &mut buf),
            FieldType::Float => {
                let v = col.as_primitive::<Float32Type>().value(row);
                if v.is_finite() {
                    serde_json::to_writer(&mut buf, &v).expect("a finite float serializes");
                } else {
                    float_text(f64::from(v), &mut buf);
                }
            }
            _ => return None,
        }
        out.append_value(std::str::from_utf8(&buf).expect("ASCII"));
    }
    Some(Arc::new(out.finish()))
}

fn float_text(v: f64, out: &mut Vec<u8>) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v == f64::INFINITY {
        out.extend_from_slice(b"Infinity");
    } else if v == f64::NEG_INFINITY {
        out.extend_from_slice(b"-Infinity");
    } else {
        serde_json::to_writer(&mut *out, &v).expect("a finite float serializes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float32Array, Float64Array, TimestampNanosecondArray};

    fn texts(a: ArrayRef, ty: FieldType) -> Vec<Option<String>> {
        let t = to_text(&a, ty).unwrap();
        let s = t.as_string::<i32>();
        (0..s.len())
            .map(|i| (!s.is_null(i)).then(|| s.value(i).to_string()))
            .collect()
    }

    #[test]
    fn timestamps_and_floats_read_as_the_sink_writes_them() {
        let ts = Arc::new(TimestampNanosecondArray::from(vec![
            Some(1_700_000_000_123_456_789),
            None,
        ]));
        assert_eq!(
            texts(ts, FieldType::Timestamp),
            vec![Some("2023-11-14T22:13:20.123456789Z".into()), None]
        );
        let d = Arc::new(Float64Array::from(vec![
            0.1,
            f64::NEG_INFINITY,
            f64::NAN,
            1e308,
        ]));
        assert_eq!(
            texts(d, FieldType::Double),
            vec![
                Some("0.1".into()),
                Some("-Infinity".into()),
                Some("NaN".into()),
                Some("1e+308".into())
            ]
        );
        let f = Arc::new(Float32Array::from(vec![0.1f32, f32::INFINITY]));
        assert_eq!(
            texts(f, FieldType::Float),
            vec![Some("0.1".into()), Some("Infinity".into())]
        );
    }
}
