//! Text into numbers (issue 31, item 6.1): one grammar for every numeric type, so a text
//! is a number for all of them or for none. Arrow reads each type its own way: a DECIMAL
//! took `''`, `' '`, `'-'`, `'.'` as 0 and `' 12 '` as 12, where BIGINT and DOUBLE refused
//! them, so a blank price became 0.00 silently. Here a text that is not a number fails the
//! row under `CAST` and is NULL under `TRY_CAST`, whatever the type; a number that the type
//! does not hold exactly (`'12.5'` into BIGINT, `'1.239'` into `DECIMAL(10, 2)`, `'1e400'`
//! into DOUBLE) fails the same way. A float is rounded once to its nearest value, as the
//! JSON decoder rounds one (docs/sql.md, "Types and decoding").
//!
//! The grammar, without surrounding or inner whitespace:
//! `[+-]? (digits ['.' [digits]] | '.' digits) [('e'|'E') [+-]? digits]`, or (any case)
//! `[+-]? ('inf' | 'infinity')` and `'nan'`, which only a float holds.

use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Builder, Decimal256Builder, Float32Builder, Float64Builder,
    Int16Builder, Int32Builder, Int64Builder, Int8Builder, UInt16Builder, UInt32Builder,
    UInt64Builder, UInt8Builder,
};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{i256, DataType, Schema};
use arrow::record_batch::RecordBatch;
use datafusion_common::{DataFusionError, Result, ScalarValue};
use datafusion_expr::ColumnarValue;
use datafusion_physical_expr::PhysicalExpr;

use crate::type_words::sql_type;

/// A text the grammar reads as a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number<'a> {
    /// `±(int.frac) × 10^exp`; `int` and `frac` are ASCII digits.
    Finite {
        negative: bool,
        int: &'a [u8],
        frac: &'a [u8],
        /// The exponent, saturated far beyond any range that matters.
        exp: i64,
    },
    Infinity {
        negative: bool,
    },
    NaN,
}

/// `s` as a number, if the grammar reads it as one.
pub fn parse(s: &str) -> Option<Number<'_>> {
    let b = s.as_bytes();
    let mut i = 0;
    let negative = match b.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let word = &s[i..];
    if word.eq_ignore_ascii_case("inf") || word.eq_ignore_ascii_case("infinity") {
        return Some(Number::Infinity { negative });
    }
    if i == 0 && word.eq_ignore_ascii_case("nan") {
        return Some(Number::NaN);
    }
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let n = digits(i);
    let int = &b[i..i + n];
    i += n;
    let mut frac: &[u8] = &[];
    if b.get(i) == Some(&b'.') {
        let n = digits(i + 1);
        frac = &b[i + 1..i + 1 + n];
        i += 1 + n;
    }
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let (exp, i) = pubsub_engine_format::number::exponent(b, i)?;
    (i == b.len()).then_some(Number::Finite {
        negative,
        int,
        frac,
        exp,
    })
}

/// Why a number does not convert to a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfit {
    /// The text is not a number.
    NotANumber,
    /// It has more digits after the point than the type keeps.
    Fraction,
    /// It is beyond the type's range (or NaN/infinity into a type without them).
    Range,
}

impl<'a> Number<'a> {
    /// The value as `unscaled × 10^-scale`, `unscaled` written in decimal digits without
    /// leading zeros (`""` for zero), when it is exact with `scale` digits after the
    /// point and has at most `max_digits` digits.
    fn unscaled(&self, scale: i64, max_digits: usize) -> Result<(bool, String), Unfit> {
        let Number::Finite {
            negative,
            int,
            frac,
            exp,
        } = *self
        else {
            return Err(Unfit::Range);
        };
        // value = digits × 10^power, digits = int ++ frac without leading/trailing zeros.
        let mut digits: Vec<u8> = int
            .iter()
            .chain(frac.iter())
            .copied()
            .skip_while(|c| *c == b'0')
            .collect();
        let mut power = exp - frac.len() as i64 + scale;
        while digits.last() == Some(&b'0') {
            digits.pop();
            power += 1;
        }
        if digits.is_empty() {
            return Ok((false, String::new()));
        }
        if power < 0 {
            return Err(Unfit::Fraction);
        }
        if digits.len() as i64 + power > max_digits as i64 {
            return Err(Unfit::Range);
        }
        let mut s = String::from_utf8(digits).expect("ASCII digits");
        s.extend(std::iter::repeat_n('0', power as usize));
        Ok((negative, s))
    }

    /// The exact integer value, if the number is an integer with at most 38 digits.
    pub fn to_i128(self) -> Result<i128, Unfit> {
        let (negative, digits) = self.unscaled(0, 38)?;
        let v: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().expect("at most 38 digits")
        };
        Ok(if negative { -v } else { v })
    }

    /// The unscaled value of a `DECIMAL(precision, scale)`, if exact.
    pub fn to_decimal128(self, precision: u8, scale: i8) -> Result<i128, Unfit> {
        let (negative, digits) = self.unscaled(i64::from(scale), usize::from(precision))?;
        let v: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().expect("at most 38 digits")
        };
        Ok(if negative { -v } else { v })
    }

    fn to_decimal256(self, precision: u8, scale: i8) -> Result<i256, Unfit> {
        let (negative, digits) = self.unscaled(i64::from(scale), usize::from(precision))?;
        let v = if digits.is_empty() {
            i256::ZERO
        } else {
            i256::from_string(&digits).expect("at most 76 digits")
        };
        Ok(if negative { v.wrapping_neg() } else { v })
    }
}

/// The nearest DOUBLE to the number `s` (which [`parse`] read), rounded once; infinity only
/// when the text says it.
fn to_f64(s: &str, n: Number<'_>) -> Result<f64, Unfit> {
    // The grammar is a subset of Rust's float syntax, which rounds correctly.
    let v: f64 = s.parse().map_err(|_| Unfit::NotANumber)?;
    match n {
        Number::Finite { .. } if v.is_infinite() => Err(Unfit::Range),
        _ => Ok(v),
    }
}

fn to_f32(s: &str, n: Number<'_>) -> Result<f32, Unfit> {
    let v: f32 = s.parse().map_err(|_| Unfit::NotANumber)?;
    match n {
        Number::Finite { .. } if v.is_infinite() => Err(Unfit::Range),
        _ => Ok(v),
    }
}

/// The numeric types this module reads text into.
pub fn handles(to: &DataType) -> bool {
    use DataType::*;
    matches!(
        to,
        Int8 | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Float32
            | Float64
            | Decimal128(..)
            | Decimal256(..)
    )
}

/// `text` into `to` (one of [`handles`]): a one-row array, or why not.
fn convert_one(text: &str, to: &DataType) -> Result<ScalarValue, Unfit> {
    let n = parse(text).ok_or(Unfit::NotANumber)?;
    let int = |lo: i128, hi: i128| -> Result<i128, Unfit> {
        let v = n.to_i128()?;
        if v < lo || v > hi {
            return Err(Unfit::Range);
        }
        Ok(v)
    };
    use DataType::*;
    Ok(match to {
        Int8 => ScalarValue::Int8(Some(int(i8::MIN.into(), i8::MAX.into())? as i8)),
        Int16 => ScalarValue::Int16(Some(int(i16::MIN.into(), i16::MAX.into())? as i16)),
        Int32 => ScalarValue::Int32(Some(int(i32::MIN.into(), i32::MAX.into())? as i32)),
        Int64 => ScalarValue::Int64(Some(int(i64::MIN.into(), i64::MAX.into())? as i64)),
        UInt8 => ScalarValue::UInt8(Some(int(0, u8::MAX.into())? as u8)),
        UInt16 => ScalarValue::UInt16(Some(int(0, u16::MAX.into())? as u16)),
        UInt32 => ScalarValue::UInt32(Some(int(0, u32::MAX.into())? as u32)),
        UInt64 => ScalarValue::UInt64(Some(int(0, u64::MAX.into())? as u64)),
        Float64 => ScalarValue::Float64(Some(to_f64(text, n)?)),
        Float32 => ScalarValue::Float32(Some(to_f32(text, n)?)),
        Decimal128(p, s) => ScalarValue::Decimal128(Some(n.to_decimal128(*p, *s)?), *p, *s),
        Decimal256(p, s) => ScalarValue::Decimal256(Some(n.to_decimal256(*p, *s)?), *p, *s),
        other => unreachable!("not a type this module handles: {other}"),
    })
}

/// `text` as a value of `to` (one of [`handles`]), or the row failure's message, naming
/// the SQL type.
pub fn convert(text: &str, to: &DataType) -> std::result::Result<ScalarValue, String> {
    convert_one(text, to).map_err(|e| refusal(text, to, e))
}

/// Why `text` does not convert to `to`, in SQL words.
pub fn refusal(text: &str, to: &DataType, e: Unfit) -> String {
    let shown = show(text);
    let ty = sql_type(to);
    match e {
        Unfit::NotANumber => format!(
            "CAST of {shown} to {ty}: not a number (digits with an optional sign, point and exponent, no spaces)"
        ),
        Unfit::Fraction => format!(
            "CAST of {shown} to {ty} would change the value: {ty} keeps {} after the point; round it first with round(), trunc(), floor() or ceil(), or use TRY_CAST for NULL",
            match to {
                DataType::Decimal128(_, s) | DataType::Decimal256(_, s) if *s > 0 =>
                    format!("{s} digit{}", if *s == 1 { "" } else { "s" }),
                _ => "no digits".to_string(),
            }
        ),
        Unfit::Range => format!("CAST of {shown} to {ty}: out of range for {ty}"),
    }
}

/// `text` as SQL writes it, cut after 64 characters.
fn show(text: &str) -> String {
    let mut s: String = text.chars().take(64).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    format!("'{}'", s.replace('\'', "''"))
}

/// `CAST(text AS number)` (`try_` false: a text that is not such a number fails the row)
/// or `TRY_CAST` (`try_` true: NULL).
#[derive(Debug, Clone)]
pub struct TextToNumber {
    pub expr: Arc<dyn PhysicalExpr>,
    pub to: DataType,
    pub try_: bool,
}

/// Appends each row's value (or NULL) to a builder of `to`.
macro_rules! build {
    ($builder:expr, $values:expr, $variant:ident) => {{
        let mut b = $builder;
        for v in $values {
            match v {
                Some(ScalarValue::$variant(x, ..)) => b.append_option(x),
                _ => b.append_null(),
            }
        }
        Arc::new(b.finish()) as ArrayRef
    }};
}

impl TextToNumber {
    fn convert_array(&self, input: &ArrayRef) -> Result<ArrayRef> {
        let text = cast_with_options(input, &DataType::Utf8, &CastOptions::default())?;
        let text = text.as_string::<i32>();
        let mut values: Vec<Option<ScalarValue>> = Vec::with_capacity(text.len());
        for i in 0..text.len() {
            if text.is_null(i) {
                values.push(None);
                continue;
            }
            match convert_one(text.value(i), &self.to) {
                Ok(v) => values.push(Some(v)),
                Err(_) if self.try_ => values.push(None),
                Err(e) => {
                    return Err(DataFusionError::Execution(refusal(
                        text.value(i),
                        &self.to,
                        e,
                    )))
                }
            }
        }
        let n = values.len();
        use DataType::*;
        Ok(match &self.to {
            Int8 => build!(Int8Builder::with_capacity(n), values, Int8),
            Int16 => build!(Int16Builder::with_capacity(n), values, Int16),
            Int32 => build!(Int32Builder::with_capacity(n), values, Int32),
            Int64 => build!(Int64Builder::with_capacity(n), values, Int64),
            UInt8 => build!(UInt8Builder::with_capacity(n), values, UInt8),
            UInt16 => build!(UInt16Builder::with_capacity(n), values, UInt16),
            UInt32 => build!(UInt32Builder::with_capacity(n), values, UInt32),
            UInt64 => build!(UInt64Builder::with_capacity(n), values, UInt64),
            Float32 => build!(Float32Builder::with_capacity(n), values, Float32),
            Float64 => build!(Float64Builder::with_capacity(n), values, Float64),
            Decimal128(p, s) => build!(
                Decimal128Builder::with_capacity(n).with_precision_and_scale(*p, *s)?,
                values,
                Decimal128
            ),
            Decimal256(p, s) => build!(
                Decimal256Builder::with_capacity(n).with_precision_and_scale(*p, *s)?,
                values,
                Decimal256
            ),
            other => unreachable!("not a type this module handles: {other}"),
        })
    }
}

impl PhysicalExpr for TextToNumber {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.to.clone())
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        Ok(self.try_ || self.expr.nullable(input_schema)?)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let value = self.expr.evaluate(batch)?;
        let scalar = matches!(value, ColumnarValue::Scalar(_));
        let input = value.into_array(if scalar { 1 } else { batch.num_rows() })?;
        let out = self.convert_array(&input)?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.expr]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(TextToNumber {
            expr: children[0].clone(),
            ..(*self).clone()
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", if self.try_ { "TRY_CAST" } else { "CAST" })?;
        self.expr.fmt_sql(f)?;
        write!(f, " AS {})", sql_type(&self.to))
    }
}

impl fmt::Display for TextToNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.try_ { "TRY_CAST" } else { "CAST" };
        write!(f, "NUMBER_{name}({} AS {:?})", self.expr, self.to)
    }
}

impl PartialEq for TextToNumber {
    fn eq(&self, other: &Self) -> bool {
        self.expr.eq(&other.expr) && self.to == other.to && self.try_ == other.try_
    }
}

impl Eq for TextToNumber {}

impl Hash for TextToNumber {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.expr.hash(state);
        self.to.hash(state);
        self.try_.hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str, to: &DataType) -> Result<ScalarValue, Unfit> {
        convert_one(text, to)
    }

    #[test]
    fn blanks_signs_and_points_alone_are_not_numbers() {
        for t in [
            "", " ", "-", "+", ".", "-.", "+.", " 12 ", "12 ", " 12", "1 2", "1,5", "0x10",
            "1_000", "e5", "1e", "1e+", "--1", "+-1", "1.2.3", "١٢", "nan ", "-nan", "info",
        ] {
            for to in [
                DataType::Int64,
                DataType::Int32,
                DataType::UInt8,
                DataType::Float64,
                DataType::Float32,
                DataType::Decimal128(10, 2),
                DataType::Decimal256(50, 2),
            ] {
                assert_eq!(kind(t, &to), Err(Unfit::NotANumber), "{t:?} into {to}");
            }
        }
    }

    #[test]
    fn numbers_convert_exactly_or_not_at_all() {
        use DataType::*;
        let d = |v: i128| ScalarValue::Decimal128(Some(v), 10, 2);
        assert_eq!(kind("12", &Decimal128(10, 2)), Ok(d(1200)));
        assert_eq!(kind("+12.5", &Decimal128(10, 2)), Ok(d(1250)));
        assert_eq!(kind("-.5", &Decimal128(10, 2)), Ok(d(-50)));
        assert_eq!(kind("1.", &Decimal128(10, 2)), Ok(d(100)));
        assert_eq!(kind("1.230", &Decimal128(10, 2)), Ok(d(123)));
        assert_eq!(kind("1.239", &Decimal128(10, 2)), Err(Unfit::Fraction));
        assert_eq!(kind("12345678.9", &Decimal128(10, 2)), Ok(d(1234567890)));
        assert_eq!(kind("123456789", &Decimal128(10, 2)), Err(Unfit::Range));
        assert_eq!(kind("1e2", &Int64), Ok(ScalarValue::Int64(Some(100))));
        assert_eq!(kind("100.0", &Int64), Ok(ScalarValue::Int64(Some(100))));
        assert_eq!(kind("007", &Int64), Ok(ScalarValue::Int64(Some(7))));
        assert_eq!(kind("12.5", &Int64), Err(Unfit::Fraction));
        assert_eq!(kind("-1", &UInt64), Err(Unfit::Range));
        assert_eq!(kind("-0", &UInt64), Ok(ScalarValue::UInt64(Some(0))));
        assert_eq!(kind("128", &Int8), Err(Unfit::Range));
        assert_eq!(
            kind("9223372036854775807", &Int64),
            Ok(ScalarValue::Int64(Some(i64::MAX)))
        );
        assert_eq!(kind("9223372036854775808", &Int64), Err(Unfit::Range));
        assert_eq!(kind("1e999999999999", &Int64), Err(Unfit::Range));
        assert_eq!(kind("1e-999999999999", &Int64), Err(Unfit::Fraction));
        assert_eq!(
            kind("0e999999999999", &Int64),
            Ok(ScalarValue::Int64(Some(0)))
        );
        assert_eq!(kind("1e400", &Float64), Err(Unfit::Range));
        assert_eq!(kind("3.5e38", &Float32), Err(Unfit::Range));
        assert_eq!(kind("0.1", &Float64), Ok(ScalarValue::Float64(Some(0.1))));
        assert_eq!(
            kind("-Infinity", &Float64),
            Ok(ScalarValue::Float64(Some(f64::NEG_INFINITY)))
        );
        assert_eq!(
            kind("inf", &Float32),
            Ok(ScalarValue::Float32(Some(f32::INFINITY)))
        );
        assert!(matches!(kind("NaN", &Float64), Ok(ScalarValue::Float64(Some(v))) if v.is_nan()));
        for special in ["NaN", "inf", "-Infinity"] {
            assert_eq!(kind(special, &Int64), Err(Unfit::Range), "{special}");
            assert_eq!(
                kind(special, &Decimal128(10, 2)),
                Err(Unfit::Range),
                "{special}"
            );
        }
        assert_eq!(
            kind("-123456789012345678901234567890.12", &Decimal256(50, 2)),
            Ok(ScalarValue::Decimal256(
                Some(i256::from_string("-12345678901234567890123456789012").unwrap()),
                50,
                2
            ))
        );
    }

    /// One number in the usual spellings it may take.
    fn spellings() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            prop_oneof![Just(""), Just("-"), Just("+")],
            "[0-9]{0,25}",
            prop_oneof![Just(None), "[0-9]{0,25}".prop_map(Some)],
            prop_oneof![Just(None), (-40i32..40).prop_map(Some)],
        )
            .prop_map(|(sign, int, frac, exp)| {
                let mut s = format!("{sign}{int}");
                if let Some(f) = frac {
                    s.push('.');
                    s.push_str(&f);
                }
                if let Some(e) = exp {
                    s.push_str(&format!("e{e}"));
                }
                s
            })
    }

    /// Random texts: number spellings, mangled ones (spaces, stray characters) and any
    /// short text at all.
    fn texts() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            spellings(),
            (spellings(), "[ \t+\\-.eE,_x]{1,2}", 0usize..30).prop_map(|(s, junk, at)| {
                let at = at.min(s.len());
                format!("{}{junk}{}", &s[..at], &s[at..])
            }),
            "[ +\\-.0-9eEinfatyINFATY]{0,8}",
            "\\PC{0,6}",
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// Every numeric type agrees on which texts are numbers; a number converts to
        /// each type exactly (checked against i128/decimal arithmetic done here, and
        /// against Rust's correctly rounded float parser) or is refused as a fraction
        /// or out of range.
        #[test]
        fn every_numeric_type_reads_the_same_texts_as_numbers(text in texts()) {
            use DataType::*;
            let types = [
                Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64, Float32, Float64,
                Decimal128(10, 2), Decimal128(38, 0), Decimal128(38, 10), Decimal256(60, 5),
            ];
            let not_a_number: Vec<bool> = types
                .iter()
                .map(|t| kind(&text, t) == Err(Unfit::NotANumber))
                .collect();
            proptest::prop_assert!(
                not_a_number.iter().all(|x| *x) || not_a_number.iter().all(|x| !*x),
                "{text:?}: {not_a_number:?}"
            );
            // Independent reading: a regular grammar and exact big-decimal arithmetic.
            let re_number = {
                let t = text.as_str();
                let body = t.strip_prefix(['+', '-']).unwrap_or(t);
                let lower = body.to_ascii_lowercase();
                let special = lower == "inf" || lower == "infinity" || (t == body && lower == "nan");
                let (mant, exp) = match body.find(['e', 'E']) {
                    Some(k) => (&body[..k], Some(&body[k + 1..])),
                    None => (body, None),
                };
                let exp_ok = exp.is_none_or(|e| {
                    let e = e.strip_prefix(['+', '-']).unwrap_or(e);
                    !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit())
                });
                let (ip, fp) = mant.split_once('.').unwrap_or((mant, ""));
                let mant_ok = (!ip.is_empty() || !fp.is_empty())
                    && ip.bytes().all(|c| c.is_ascii_digit())
                    && fp.bytes().all(|c| c.is_ascii_digit())
                    && mant.matches('.').count() <= 1;
                special || (mant_ok && exp_ok)
            };
            proptest::prop_assert_eq!(!not_a_number[0], re_number, "{:?}", text);
            if !re_number {
                return Ok(());
            }
            // The exact value as a rational: big = digits, scaled by 10^exp10.
            let Some(Number::Finite { negative, int, frac, exp }) = parse(&text) else {
                return Ok(());
            };
            let digits: String = std::str::from_utf8(int).unwrap().to_string() + std::str::from_utf8(frac).unwrap();
            let big = num_bigint::BigInt::parse_bytes(if digits.is_empty() { b"0" } else { digits.as_bytes() }, 10).unwrap();
            let big = if negative { -big } else { big };
            let exp10 = exp - frac.len() as i64;
            for t in &types {
                let got = kind(&text, t);
                let scale: i64 = match t { Decimal128(_, s) | Decimal256(_, s) => i64::from(*s), _ => 0 };
                let (lo, hi): (num_bigint::BigInt, num_bigint::BigInt) = match t {
                    Int8 => (i8::MIN.into(), i8::MAX.into()),
                    Int16 => (i16::MIN.into(), i16::MAX.into()),
                    Int32 => (i32::MIN.into(), i32::MAX.into()),
                    Int64 => (i64::MIN.into(), i64::MAX.into()),
                    UInt8 => (0.into(), u8::MAX.into()),
                    UInt16 => (0.into(), u16::MAX.into()),
                    UInt32 => (0.into(), u32::MAX.into()),
                    UInt64 => (0.into(), u64::MAX.into()),
                    Decimal128(p, _) | Decimal256(p, _) => {
                        let m: num_bigint::BigInt = num_bigint::BigInt::from(10).pow(u32::from(*p)) - 1;
                        (-m.clone(), m)
                    }
                    _ => {
                        // Floats: Rust's parser, refused only when a finite text is infinite.
                        let f: f64 = text.parse().unwrap();
                        let inf32 = text.parse::<f32>().unwrap().is_infinite();
                        match (t, got) {
                            (Float64, Ok(ScalarValue::Float64(Some(v)))) => proptest::prop_assert!(v == f || (v.is_nan() && f.is_nan())),
                            (Float64, Err(Unfit::Range)) => proptest::prop_assert!(f.is_infinite()),
                            (Float32, Ok(ScalarValue::Float32(Some(v)))) => proptest::prop_assert_eq!(v.to_bits(), text.parse::<f32>().unwrap().to_bits()),
                            (Float32, Err(Unfit::Range)) => proptest::prop_assert!(inf32),
                            other => proptest::prop_assert!(false, "{text:?} into {t}: {other:?}"),
                        }
                        continue;
                    }
                };
                // Exact when big × 10^(exp10 + scale) is an integer in range.
                let shift = exp10 + scale;
                let want = if big == 0.into() {
                    Ok(num_bigint::BigInt::from(0))
                } else if shift >= 0 {
                    if shift > 100 { Err(Unfit::Range) } else {
                        let v = &big * num_bigint::BigInt::from(10).pow(shift as u32);
                        if v < lo || v > hi { Err(Unfit::Range) } else { Ok(v) }
                    }
                } else {
                    let d = num_bigint::BigInt::from(10).pow((-shift).min(200) as u32);
                    if (-shift) > 200 || &big % &d != 0.into() { Err(Unfit::Fraction) } else {
                        let v = &big / d;
                        if v < lo || v > hi { Err(Unfit::Range) } else { Ok(v) }
                    }
                };
                let got = got.map(|v| match v {
                    ScalarValue::Decimal128(Some(x), ..) => num_bigint::BigInt::from(x),
                    ScalarValue::Decimal256(Some(x), ..) => x.to_string().parse().unwrap(),
                    other => other.to_string().parse().unwrap(),
                });
                proptest::prop_assert_eq!(got, want, "{:?} into {}", text, t);
            }
        }
    }
}
