//! Human durations and data sizes as written in CLI flags and WITH options.

use std::time::Duration;

/// Splits `text` (trimmed) into an exact decimal `digits[.digits]` and the unit after it.
/// Returns `(integer digits, fraction digits, unit)`, or `None` if no number leads.
fn split_decimal(text: &str) -> Option<(&str, &str, &str)> {
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    (!(int.is_empty() && frac.is_empty()) && all_digits(int) && all_digits(frac))
        .then_some((int, frac, unit))
}

/// `int.frac` times `scale`, exactly: `Err(true)` when the product is not a whole
/// number, `Err(false)` when it exceeds `u128`. Never rounds.
fn exact_product(int: &str, frac: &str, scale: u128) -> Result<u128, bool> {
    // Trailing zeros of the fraction change nothing (`1.000…0s` is 1 s).
    let frac = frac.trim_end_matches('0');
    let mut n: u128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u128::from(b - b'0')))
            .ok_or(false)?;
    }
    let v = n.checked_mul(scale).ok_or(false)?;
    // frac.len() places below the point: a divisor beyond u128 leaves a fraction.
    let div = 10u128.checked_pow(frac.len() as u32);
    match div {
        Some(d) if v % d == 0 => Ok(v / d),
        _ if v == 0 => Ok(0),
        _ => Err(true),
    }
}

/// Parses a duration such as `500ms`, `10s`, `5m`, `2h`, `1d`, `1.5s`, `30 s` or `5 min`.
///
/// A bare number is read as seconds. The decimal is read exactly (never through a
/// float): a value that is not a whole number of nanoseconds (`0.0000000001s`) is
/// refused, not rounded. Returns a message naming the bad text when the number or the
/// unit is not understood, or when it exceeds 10^12 seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (int, frac, unit) = split_decimal(text)
        .ok_or_else(|| format!("'{text}' is not a duration (examples: 500ms, 10s, 5m)"))?;
    let nanos_per_unit: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" | "millis" | "millisecond" | "milliseconds" => 1_000_000,
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        other => {
            return Err(format!(
                "'{text}' has unknown duration unit '{other}' (use ms, s, m, h or d)"
            ))
        }
    };
    const MAX_NANOS: u128 = 1_000_000_000_000 * 1_000_000_000;
    match exact_product(int, frac, nanos_per_unit) {
        Ok(n) if n <= MAX_NANOS => Ok(Duration::new(
            (n / 1_000_000_000) as u64,
            (n % 1_000_000_000) as u32,
        )),
        Err(true) => Err(format!(
            "'{text}' is not a whole number of nanoseconds (durations are not rounded)"
        )),
        _ => Err(format!("'{text}' is too large a duration")),
    }
}

/// Parses a data size such as `64mb`, `100 MB`, `1kib`, `1.5mb` or `512` (bytes) into
/// bytes. Decimal units (kb, mb, gb) are powers of 1000, binary ones (kib, mib, gib) of
/// 1024. The decimal is read exactly: a value that is not a whole number of bytes
/// (`1.5b`, `0.0001kb`) is refused, not rounded.
pub fn parse_data_size(text: &str) -> Result<u64, String> {
    let (int, frac, unit) = split_decimal(text)
        .ok_or_else(|| format!("'{text}' is not a data size (examples: 512kb, 64mb)"))?;
    let scale: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" => 1 << 10,
        "mb" => 1_000_000,
        "mib" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        other => return Err(format!("'{text}' has unknown size unit '{other}'")),
    };
    match exact_product(int, frac, scale) {
        Ok(n) => u64::try_from(n).map_err(|_| format!("'{text}' is too large a data size")),
        Err(true) => Err(format!(
            "'{text}' is not a whole number of bytes (sizes are not rounded)"
        )),
        Err(false) => Err(format!("'{text}' is too large a data size")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("5 min").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("ten").unwrap_err().contains("'ten'"));
        assert!(parse_duration("5 fortnights")
            .unwrap_err()
            .contains("fortnights"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_data_size("64mb").unwrap(), 64_000_000);
        assert_eq!(parse_data_size("1 KiB").unwrap(), 1024);
        assert_eq!(parse_data_size("12").unwrap(), 12);
        assert!(parse_data_size("lots").is_err());
        assert_eq!(parse_data_size("1.5mb").unwrap(), 1_500_000);
        assert_eq!(parse_data_size("0.5 KiB").unwrap(), 512);
        assert_eq!(parse_data_size("18446744073709551615").unwrap(), u64::MAX);
        assert!(parse_data_size("18446744073709551616")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_data_size("1.5b")
            .unwrap_err()
            .contains("whole number"));
        assert!(parse_data_size(".").is_err());
        assert!(parse_data_size("1.2.3mb").is_err());
    }

    #[test]
    fn durations_are_read_exactly_never_through_a_float() {
        // 18 significant digits: a float keeps about 16, so it was off by nanoseconds.
        assert_eq!(
            parse_duration("100000000.123456789s").unwrap(),
            Duration::new(100_000_000, 123_456_789)
        );
        assert_eq!(
            parse_duration("0.000000001").unwrap(),
            Duration::from_nanos(1)
        );
        assert_eq!(
            parse_duration("1.5ms").unwrap(),
            Duration::from_micros(1500)
        );
        assert_eq!(parse_duration("0.1m").unwrap(), Duration::from_secs(6));
        assert_eq!(
            parse_duration("1.0000000000000000000000000000000000000000000s").unwrap(),
            Duration::from_secs(1)
        );
        // Finer than a nanosecond: refused, not rounded to zero.
        assert!(parse_duration("0.0000000001s")
            .unwrap_err()
            .contains("whole number of nanoseconds"));
        assert!(parse_duration("0.0000001ms").is_err());
        assert_eq!(
            parse_duration("1000000000000").unwrap(),
            Duration::from_secs(1_000_000_000_000)
        );
        assert!(parse_duration("1000000000000.000000001")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_duration("99999999999999999999999999999999999999999d")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_duration(".").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
