//! Exact reading of JSON number text (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`).
//!
//! Integers are read from the decimal text itself, never through a float, so a value
//! is accepted only when it is exactly an integer in range (`1e2` and `100.0` are 100;
//! `100.01`, `1.0000000000000000001` and `9223372036854775808` are refused).

/// Why a number text is not an integer of the wanted width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntError {
    /// Not JSON number syntax (only possible for text taken from a JSON string).
    Syntax,
    /// Has a non-zero fractional part.
    NotInteger,
    /// An integer outside the target range.
    OutOfRange,
}

/// A number text split at its parts; `int` and `frac` are ASCII digits.
struct Parts<'a> {
    negative: bool,
    int: &'a [u8],
    frac: &'a [u8],
    /// The exponent, saturated far beyond any range that matters.
    exp: i64,
}

/// The exponent part (`[eE][+-]?[0-9]+`, or nothing) of number text `b` from byte `i`:
/// its value, saturated far beyond any range that matters, and the byte after it. `None`
/// when an `e` has no digits. Shared by the JSON reader and SQL's text casts
/// (`plan/src/number_text.rs`).
pub fn exponent(b: &[u8], mut i: usize) -> Option<(i64, usize)> {
    if !matches!(b.get(i), Some(b'e' | b'E')) {
        return Some((0, i));
    }
    i += 1;
    let negative = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let n = b[i.min(b.len())..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count();
    if n == 0 {
        return None;
    }
    let mut exp: i64 = 0;
    for c in &b[i..i + n] {
        exp = (exp * 10 + i64::from(c - b'0')).min(1 << 40);
    }
    Some((if negative { -exp } else { exp }, i + n))
}

/// Splits `s` if it is exactly JSON number syntax.
fn split(s: &str) -> Option<Parts<'_>> {
    let b = s.as_bytes();
    let mut i = 0;
    let negative = b.first() == Some(&b'-');
    if negative {
        i += 1;
    }
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let n = digits(i);
    if n == 0 || (n > 1 && b[i] == b'0') {
        return None;
    }
    let int = &b[i..i + n];
    i += n;
    let mut frac: &[u8] = &[];
    if b.get(i) == Some(&b'.') {
        let n = digits(i + 1);
        if n == 0 {
            return None;
        }
        frac = &b[i + 1..i + 1 + n];
        i += 1 + n;
    }
    let (exp, i) = exponent(b, i)?;
    (i == b.len()).then_some(Parts {
        negative,
        int,
        frac,
        exp,
    })
}

/// The exact integer value of the number text `s`, if it is integral and fits `i64`.
pub(crate) fn exact_i64(s: &str) -> Result<i64, IntError> {
    if let Some(v) = short_plain_integer(s) {
        return Ok(v);
    }
    i64::try_from(exact_wide(s)?).map_err(|_| IntError::OutOfRange)
}

/// The exact integer value of the number text `s`, if it is integral and fits `u64`
/// (`-0` is 0; any other negative integer is out of range).
pub(crate) fn exact_u64(s: &str) -> Result<u64, IntError> {
    let v = match short_plain_integer(s) {
        Some(v) => i128::from(v),
        None => exact_wide(s)?,
    };
    u64::try_from(v).map_err(|_| IntError::OutOfRange)
}

/// The exact integer value of `s` if it fits `u32`.
pub(crate) fn exact_u32(s: &str) -> Result<u32, IntError> {
    u32::try_from(exact_u64(s)?).map_err(|_| IntError::OutOfRange)
}

/// The general path: the exact value of `s` when it is an integer of at most 20 digits
/// (every `i64` and `u64`), `OutOfRange` beyond.
fn exact_wide(s: &str) -> Result<i128, IntError> {
    let p = split(s).ok_or(IntError::Syntax)?;
    if p.frac.is_empty() && !s.contains(['e', 'E']) {
        // Plain integer text: the common case. (An exponent of zero, `1e0`, is not plain
        // text: it takes the general path below.)
        return s.parse::<i128>().map_err(|_| IntError::OutOfRange);
    }
    // value = digits * 10^scale, digits = int ++ frac without leading/trailing zeros.
    let all = p.int.iter().chain(p.frac.iter());
    let mut digits: Vec<u8> = all.copied().skip_while(|c| *c == b'0').collect();
    let mut scale = p.exp - p.frac.len() as i64;
    while digits.last() == Some(&b'0') {
        digits.pop();
        scale += 1;
    }
    if digits.is_empty() {
        return Ok(0);
    }
    if scale < 0 {
        return Err(IntError::NotInteger);
    }
    if digits.len() as i64 + scale > 20 {
        return Err(IntError::OutOfRange);
    }
    let mut v: i128 = 0;
    for c in &digits {
        v = v * 10 + i128::from(c - b'0');
    }
    v *= 10i128.pow(scale as u32);
    Ok(if p.negative { -v } else { v })
}

/// The value of `s` if it is `-?(0|[1-9][0-9]{0,17})`: at most 18 digits always fit
/// `i64`, so one pass without overflow checks reads it. `None` for any other text
/// (longer, fractional, exponent, malformed), which takes the general path.
fn short_plain_integer(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let (negative, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 18 || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut v: i64 = 0;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + i64::from(d);
    }
    Some(if negative { -v } else { v })
}

/// The exact integer value of `s` if it fits `i32`.
pub(crate) fn exact_i32(s: &str) -> Result<i32, IntError> {
    i32::try_from(exact_i64(s)?).map_err(|_| IntError::OutOfRange)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_exact() {
        assert_eq!(exact_i64("0"), Ok(0));
        assert_eq!(exact_i64("-0"), Ok(0));
        assert_eq!(exact_i64("100.0"), Ok(100));
        assert_eq!(exact_i64("1e2"), Ok(100));
        assert_eq!(exact_i64("1.5E1"), Ok(15));
        assert_eq!(exact_i64("0.0e5"), Ok(0));
        assert_eq!(exact_i64("12300e-2"), Ok(123));
        assert_eq!(exact_i64("9223372036854775807"), Ok(i64::MAX));
        assert_eq!(exact_i64("-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(exact_i64("9.223372036854775807e18"), Ok(i64::MAX));
        assert_eq!(exact_i64("9223372036854775808"), Err(IntError::OutOfRange));
        assert_eq!(exact_i64("1e19"), Err(IntError::OutOfRange));
        assert_eq!(exact_i64("1e999999999999999"), Err(IntError::OutOfRange));
        assert_eq!(exact_i64("1e-999999999999999"), Err(IntError::NotInteger));
        assert_eq!(exact_i64("100.01"), Err(IntError::NotInteger));
        assert_eq!(exact_i64("-0.9"), Err(IntError::NotInteger));
        assert_eq!(
            exact_i64("1.0000000000000000001"),
            Err(IntError::NotInteger)
        );
        assert_eq!(exact_i64("1234e-2"), Err(IntError::NotInteger));
        assert_eq!(exact_i32("2147483647"), Ok(i32::MAX));
        assert_eq!(exact_i32("2147483648"), Err(IntError::OutOfRange));
        assert_eq!(exact_u64("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(exact_u64("1.8446744073709551615e19"), Ok(u64::MAX));
        assert_eq!(exact_u64("-0"), Ok(0));
        assert_eq!(exact_u64("18446744073709551616"), Err(IntError::OutOfRange));
        assert_eq!(exact_u64("1e20"), Err(IntError::OutOfRange));
        assert_eq!(exact_u64("-1"), Err(IntError::OutOfRange));
        assert_eq!(exact_u64("-1e0"), Err(IntError::OutOfRange));
        assert_eq!(exact_u64("1.5"), Err(IntError::NotInteger));
        assert_eq!(exact_u32("4294967295"), Ok(u32::MAX));
        assert_eq!(exact_u32("4294967296"), Err(IntError::OutOfRange));
    }

    #[test]
    fn syntax_is_strict() {
        for bad in [
            "", "-", "+1", "01", "1.", ".5", "1e", "1e+", " 1", "1 ", "0x10", "1_0",
        ] {
            assert_eq!(exact_i64(bad), Err(IntError::Syntax), "{bad:?}");
        }
        assert_eq!(exact_i64("-0.5e-3"), Err(IntError::NotInteger));
    }

    proptest::proptest! {
        /// The short-integer fast path agrees with the standard parser on every plain
        /// integer text, at and beyond its 18-digit limit and past i64's range.
        #[test]
        fn plain_integer_text_reads_as_the_standard_parser_reads_it(
            s in "-?(0|[1-9][0-9]{0,20})"
        ) {
            let want = s.parse::<i64>().map_err(|_| IntError::OutOfRange);
            proptest::prop_assert_eq!(exact_i64(&s), want);
        }

        #[test]
        fn every_u64_round_trips(v in proptest::num::u64::ANY) {
            proptest::prop_assert_eq!(exact_u64(&v.to_string()), Ok(v));
        }

        #[test]
        fn every_i64_round_trips(v in proptest::num::i64::ANY) {
            proptest::prop_assert_eq!(exact_i64(&v.to_string()), Ok(v));
        }

        /// Near-integers the fast path must hand to the general path (leading zeros,
        /// signs, trailing junk) are refused as syntax, never read as a number.
        #[test]
        fn malformed_integer_text_is_refused(s in "[+-]?0[0-9]{1,5}|[0-9]{1,5}[ x_]|--[0-9]{1,3}") {
            proptest::prop_assert_eq!(exact_i64(&s), Err(IntError::Syntax));
        }
    }
}
