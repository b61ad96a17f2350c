//! Implicit conversions DataFusion's type coercion may insert, and which of them keep
//! every value exactly (SPEC 8: "nothing is silently changed"). A conversion the user did
//! not write and that could change or lose a value is refused at plan time.

use arrow::datatypes::DataType;
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_common::ScalarValue;
use datafusion_expr::{Expr, ExprSchemable};

/// True when every value of `from` converts to `to` without change, so a conversion the
/// user did not write is harmless: integer widening, integers of up to 24 (FLOAT) or 53
/// (DOUBLE) bits into floats, FLOAT into DOUBLE, the Utf8 and Binary encodings, coarser
/// into finer timestamps, and NULL into anything.
pub fn is_exact(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    if from == to || *from == Null {
        return true;
    }
    let int_bits = |t: &DataType| -> Option<(u32, bool)> {
        Some(match t {
            Int8 => (8, true),
            Int16 => (16, true),
            Int32 => (32, true),
            Int64 => (64, true),
            UInt8 => (8, false),
            UInt16 => (16, false),
            UInt32 => (32, false),
            UInt64 => (64, false),
            _ => return None,
        })
    };
    match (from, to) {
        _ if int_bits(from).is_some() && int_bits(to).is_some() => {
            let ((fb, fs), (tb, ts)) = (int_bits(from).unwrap(), int_bits(to).unwrap());
            // Signed into unsigned drops the sign; unsigned into signed needs one more bit.
            (fs == ts && tb >= fb) || (!fs && ts && tb > fb)
        }
        (f, Float32) if int_bits(f).is_some() => int_bits(f).unwrap().0 <= 16,
        (f, Float64) if int_bits(f).is_some() => int_bits(f).unwrap().0 <= 32,
        (Float16, Float32 | Float64) | (Float32, Float64) => true,
        (f, Decimal128(p, s)) if int_bits(f).is_some() => {
            let digits = match int_bits(f).unwrap() {
                (8, _) => 3,
                (16, _) => 5,
                (32, _) => 10,
                (64, true) => 19,
                _ => 20,
            };
            (*p as i16 - *s as i16) >= digits
        }
        (Decimal128(p1, s1), Decimal128(p2, s2)) => {
            s2 >= s1 && (*p2 as i16 - *s2 as i16) >= (*p1 as i16 - *s1 as i16)
        }
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => true,
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => true,
        // Finer units hold every coarser value (out of range fails loudly, never wraps).
        (Timestamp(u1, z1), Timestamp(u2, z2)) => {
            unit_rank(u2) >= unit_rank(u1) && same_zone(z1, z2)
        }
        (Date32, Date64 | Timestamp(_, None)) => true,
        (Dictionary(_, v), t) => is_exact(v, t),
        _ => false,
    }
}

fn unit_rank(u: &arrow::datatypes::TimeUnit) -> u8 {
    use arrow::datatypes::TimeUnit::*;
    match u {
        Second => 0,
        Millisecond => 1,
        Microsecond => 2,
        Nanosecond => 3,
    }
}

/// A TIMESTAMP column holds UTC instants without a zone: `None` and UTC name one instant.
fn same_zone(a: &Option<std::sync::Arc<str>>, b: &Option<std::sync::Arc<str>>) -> bool {
    fn utc(z: &Option<std::sync::Arc<str>>) -> &str {
        match z.as_deref() {
            None | Some("UTC") | Some("+00:00") | Some("Z") => "",
            Some(other) => other,
        }
    }
    utc(a) == utc(b)
}

/// A constant converted at plan time: exact when it converts at all and converting it
/// back gives the same value (`1000` into DOUBLE, not `1.5` into BIGINT); a text constant
/// compared with a date or time is parsed once, here, or refused.
pub fn is_exact_literal(value: &ScalarValue, to: &DataType) -> bool {
    let from = value.data_type();
    if is_exact(&from, to) {
        return true;
    }
    let text =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    // A number and text compared (`text_col > 500`) compare as text: '1940' < '500'.
    if (from.is_numeric() && text(to)) || (text(&from) && to.is_numeric()) {
        return false;
    }
    let Ok(converted) = value.cast_to(to) else {
        return false;
    };
    if matches!(
        from,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) && matches!(
        to,
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 | DataType::Interval(_)
    ) {
        return true;
    }
    converted.cast_to(&from).is_ok_and(|back| back == *value)
}

/// An implicit conversion that could change a value: where it is, the SQL types.
#[derive(Debug)]
pub struct LossyCoercion {
    /// The expression converted, as DataFusion prints it.
    pub expr: String,
    pub from: DataType,
    pub to: DataType,
}

/// Compares an expression as planned (`written`) with the same after type coercion
/// (`coerced`): every `CAST` present only in `coerced` was inserted by coercion and must be
/// exact. `schema` types the expressions. Returns the first lossy one.
pub fn find_lossy(
    written: &Expr,
    coerced: &Expr,
    schema: &datafusion_common::DFSchema,
) -> Option<LossyCoercion> {
    let is_inserted = |c: &Expr| match (written, c) {
        (Expr::Cast(w), Expr::Cast(x)) => w.data_type != x.data_type,
        (_, Expr::Cast(_)) => true,
        _ => false,
    };
    if is_inserted(coerced) {
        let Expr::Cast(c) = coerced else {
            unreachable!("checked above")
        };
        if let Some(l) = lossy(&c.expr, &c.data_type, schema) {
            return Some(l);
        }
        // The same written node, under the inserted conversion.
        return find_lossy(written, &c.expr, schema);
    }
    let (w, c) = (children(written), children(coerced));
    if w.len() != c.len() || std::mem::discriminant(written) != std::mem::discriminant(coerced) {
        // Coercion rebuilt this node: check every conversion under it.
        return all_casts(coerced)
            .into_iter()
            .find_map(|(e, to)| lossy(e, to, schema));
    }
    w.into_iter()
        .zip(c)
        .find_map(|(w, c)| find_lossy(w, c, schema))
}

fn lossy(e: &Expr, to: &DataType, schema: &datafusion_common::DFSchema) -> Option<LossyCoercion> {
    let from = e.get_type(schema).ok()?;
    let exact = match e {
        Expr::Literal(v, _) => is_exact_literal(v, to),
        _ => is_exact(&from, to),
    };
    (!exact).then(|| LossyCoercion {
        expr: match e {
            // As SQL writes it, not DataFusion's `Utf8("today")` / `Int64(500)`.
            Expr::Literal(ScalarValue::Utf8(Some(s)), _) => format!("'{}'", s.replace('\'', "''")),
            Expr::Literal(v, _) => v.to_string(),
            _ => e.to_string(),
        },
        from,
        to: to.clone(),
    })
}

fn children(e: &Expr) -> Vec<&Expr> {
    let mut out = Vec::new();
    let _ = e.apply_children(|c| {
        out.push(c);
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

fn all_casts(e: &Expr) -> Vec<(&Expr, &DataType)> {
    let mut out = Vec::new();
    let _ = e.apply(|x| {
        if let Expr::Cast(c) = x {
            out.push((c.expr.as_ref(), &c.data_type));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::TimeUnit;

    #[test]
    fn widening_is_exact_and_narrowing_or_rounding_is_not() {
        use DataType::*;
        for (a, b) in [
            (Int32, Int64),
            (Int32, Float64),
            (Int16, Float32),
            (Float32, Float64),
            (UInt32, Int64),
            (Int64, Decimal128(19, 0)),
            (Utf8, Utf8View),
            (Null, Int64),
            (
                Timestamp(TimeUnit::Millisecond, None),
                Timestamp(TimeUnit::Nanosecond, None),
            ),
        ] {
            assert!(is_exact(&a, &b), "{a} -> {b}");
        }
        for (a, b) in [
            (Int64, Float64),
            (Int32, Float32),
            (Int64, Int32),
            (Int64, UInt64),
            (UInt64, Int64),
            (Float64, Int64),
            (Float64, Float32),
            (Int64, Utf8),
            (Utf8, Int64),
            (Int64, Decimal128(18, 0)),
            (
                Timestamp(TimeUnit::Nanosecond, None),
                Timestamp(TimeUnit::Millisecond, None),
            ),
        ] {
            assert!(!is_exact(&a, &b), "{a} -> {b}");
        }
    }

    #[test]
    fn a_constant_is_exact_when_it_converts_back_unchanged() {
        assert!(is_exact_literal(
            &ScalarValue::Int64(Some(1000)),
            &DataType::Float64
        ));
        assert!(!is_exact_literal(
            &ScalarValue::Int64(Some((1 << 53) + 1)),
            &DataType::Float64
        ));
        assert!(!is_exact_literal(
            &ScalarValue::Float64(Some(1.5)),
            &DataType::Int64
        ));
        assert!(is_exact_literal(
            &ScalarValue::Utf8(Some("2024-05-01T00:00:00Z".into())),
            &DataType::Timestamp(TimeUnit::Nanosecond, None)
        ));
        assert!(!is_exact_literal(
            &ScalarValue::Utf8(Some("not a time".into())),
            &DataType::Timestamp(TimeUnit::Nanosecond, None)
        ));
    }
}
