//! TIMESTAMP text and epoch forms. Values are nanoseconds since the Unix epoch, UTC, in an
//! `i64` (1677-09-21T00:12:43.145224192Z ..= 2262-04-11T23:47:16.854775807Z).

use pubsub_engine_types::TimestampFormat;

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// Nanoseconds per unit of an `epoch-*` format (None for `rfc3339`).
pub(crate) fn epoch_unit(tf: TimestampFormat) -> Option<i64> {
    match tf {
        TimestampFormat::Rfc3339 => None,
        TimestampFormat::EpochSeconds => Some(NANOS_PER_SEC),
        TimestampFormat::EpochMillis => Some(1_000_000),
        TimestampFormat::EpochMicros => Some(1_000),
        TimestampFormat::EpochNanos => Some(1),
    }
}

/// The option value of a format, for messages.
pub(crate) fn format_name(tf: TimestampFormat) -> &'static str {
    match tf {
        TimestampFormat::Rfc3339 => "rfc3339",
        TimestampFormat::EpochSeconds => "epoch-seconds",
        TimestampFormat::EpochMillis => "epoch-millis",
        TimestampFormat::EpochMicros => "epoch-micros",
        TimestampFormat::EpochNanos => "epoch-nanos",
    }
}

/// The representable range, for messages.
pub const RANGE: &str =
    "TIMESTAMP holds 1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z";

/// Days from 1970-01-01 to the civil date `y-m-d` (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date `(y, m, d)` of a day count from 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.f]Z|±HH:MM` (RFC 3339; `T`/`Z` in either case; 1 to 9
/// fractional digits) or `YYYY-MM-DD HH:MM:SS[.f]` with an optional offset (no offset
/// means UTC). Returns nanoseconds since the epoch, or why the text is refused.
pub fn parse_rfc3339(s: &str) -> Result<i64, String> {
    const SHAPE: &str =
        "is not an RFC 3339 timestamp (like 2024-05-01T12:00:00Z or 2024-05-01 12:00:00.5)";
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let d = b.get(from..from + len)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0i64, |a, c| a * 10 + i64::from(c - b'0')))
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let bad = || SHAPE.to_string();
    let (Some(y), true, Some(mo), true, Some(d)) =
        (num(0, 4), at(4, b'-'), num(5, 2), at(7, b'-'), num(8, 2))
    else {
        return Err(bad());
    };
    let space = match b.get(10) {
        Some(b'T' | b't') => false,
        Some(b' ') => true,
        _ => return Err(bad()),
    };
    let (Some(h), true, Some(mi), true, Some(sec)) = (
        num(11, 2),
        at(13, b':'),
        num(14, 2),
        at(16, b':'),
        num(17, 2),
    ) else {
        return Err(bad());
    };
    let mut i = 19;
    let mut frac: i64 = 0;
    if at(i, b'.') {
        let n = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return Err(bad());
        }
        if n > 9 {
            return Err(format!(
                "has {n} fractional digits; TIMESTAMP keeps at most 9 (nanoseconds)"
            ));
        }
        frac = num(i + 1, n).unwrap_or(0) * 10i64.pow(9 - n as u32);
        i += 1 + n;
    }
    let offset_secs = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && at(i + 3, b':') => {
            let (Some(oh), Some(om)) = (num(i + 1, 2), num(i + 4, 2)) else {
                return Err(bad());
            };
            if oh > 23 || om > 59 {
                return Err(format!("has an invalid UTC offset {}", &s[i..]));
            }
            let v = oh * 3600 + om * 60;
            if *sign == b'-' {
                -v
            } else {
                v
            }
        }
        None if space => 0,
        None => {
            return Err(
                "has no UTC offset; add 'Z' or an offset like +02:00 (or write 'YYYY-MM-DD HH:MM:SS' for UTC)"
                    .to_string(),
            )
        }
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return Err(format!("has no such date {}", &s[..10]));
    }
    if sec == 60 {
        return Err("is a leap second (:60), which TIMESTAMP cannot represent".to_string());
    }
    if h > 23 || mi > 59 || sec > 59 {
        return Err(format!("has no such time of day {}", &s[11..19]));
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_secs;
    i128::from(secs)
        .checked_mul(i128::from(NANOS_PER_SEC))
        .and_then(|n| i64::try_from(n + i128::from(frac)).ok())
        .ok_or_else(|| format!("is out of range ({RANGE})"))
}

/// Writes `nanos` as RFC 3339 in UTC ending in `Z`, with 0, 3, 6 or 9 fractional digits:
/// the fewest of those that show the value exactly.
pub(crate) fn write_rfc3339(nanos: i64, out: &mut Vec<u8>) {
    let secs = nanos.div_euclid(NANOS_PER_SEC);
    let frac = nanos.rem_euclid(NANOS_PER_SEC);
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let (h, mi, s) = (sod / 3600, sod / 60 % 60, sod % 60);
    // Nanoseconds in i64 span the years 1677..=2262: the year is always 4 digits.
    push_digits(out, y, 4);
    out.push(b'-');
    push_digits(out, mo, 2);
    out.push(b'-');
    push_digits(out, d, 2);
    out.push(b'T');
    push_digits(out, h, 2);
    out.push(b':');
    push_digits(out, mi, 2);
    out.push(b':');
    push_digits(out, s, 2);
    if frac != 0 {
        out.push(b'.');
        if frac % 1_000_000 == 0 {
            push_digits(out, frac / 1_000_000, 3);
        } else if frac % 1_000 == 0 {
            push_digits(out, frac / 1_000, 6);
        } else {
            push_digits(out, frac, 9);
        }
    }
    out.push(b'Z');
}

/// Appends `v` (0 <= v < 10^width) as exactly `width` decimal digits, zero-padded.
fn push_digits(out: &mut Vec<u8>, v: i64, width: usize) {
    debug_assert!(
        (0..10i64.pow(width as u32)).contains(&v),
        "{v} in {width} digits"
    );
    let start = out.len();
    out.resize(start + width, b'0');
    let mut v = v;
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// `value` units of `unit` nanoseconds, if representable.
pub(crate) fn from_epoch(value: i64, unit: i64) -> Option<i64> {
    value.checked_mul(unit)
}

/// `nanos` in units of `unit` nanoseconds, if it divides exactly.
pub(crate) fn to_epoch(nanos: i64, unit: i64) -> Option<i64> {
    (nanos % unit == 0).then_some(nanos / unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: i64) -> String {
        let mut v = Vec::new();
        write_rfc3339(n, &mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn parses_offsets_fractions_and_utc_form() {
        let base = 1_714_564_800 * NANOS_PER_SEC; // 2024-05-01T12:00:00Z
        assert_eq!(parse_rfc3339("2024-05-01T12:00:00Z"), Ok(base));
        assert_eq!(parse_rfc3339("2024-05-01t12:00:00z"), Ok(base));
        assert_eq!(parse_rfc3339("2024-05-01 12:00:00"), Ok(base));
        assert_eq!(
            parse_rfc3339("2024-05-01 12:00:00.5"),
            Ok(base + 500_000_000)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00.123456789+02:00"),
            Ok(base - 7200 * NANOS_PER_SEC + 123_456_789)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00-00:30"),
            Ok(base + 1800 * NANOS_PER_SEC)
        );
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59.999999999Z"), Ok(-1));
        assert_eq!(
            parse_rfc3339("2262-04-11T23:47:16.854775807Z"),
            Ok(i64::MAX)
        );
        assert_eq!(
            parse_rfc3339("1677-09-21T00:12:43.145224192Z"),
            Ok(i64::MIN)
        );
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_ok());
    }

    #[test]
    fn refuses_what_it_cannot_keep() {
        let cases = [
            ("2024-05-01T12:00:00.1234567890Z", "10 fractional digits"),
            ("2024-05-01T12:00:00", "no UTC offset"),
            ("2024-05-01T12:00:60Z", "leap second"),
            ("2023-02-29T00:00:00Z", "no such date"),
            ("2024-13-01T00:00:00Z", "no such date"),
            ("2024-05-01T24:00:00Z", "no such time"),
            ("2024-05-01T12:00:00+24:00", "invalid UTC offset"),
            ("2262-04-11T23:47:16.854775808Z", "out of range"),
            ("1677-09-21T00:12:43.145224191Z", "out of range"),
            ("2024-05-01", "not an RFC 3339"),
            ("2024-05-01T12:00:00.Z", "not an RFC 3339"),
            ("2024-05-01T12:00:00Z ", "not an RFC 3339"),
            ("1714550400", "not an RFC 3339"),
        ];
        for (input, want) in cases {
            let e = parse_rfc3339(input).unwrap_err();
            assert!(e.contains(want), "{input}: {e}");
        }
    }

    #[test]
    fn writes_the_fewest_of_0_3_6_9_digits() {
        assert_eq!(text(0), "1970-01-01T00:00:00Z");
        assert_eq!(text(1_500_000_000), "1970-01-01T00:00:01.500Z");
        assert_eq!(text(1_000), "1970-01-01T00:00:00.000001Z");
        assert_eq!(text(-1), "1969-12-31T23:59:59.999999999Z");
        assert_eq!(text(i64::MAX), "2262-04-11T23:47:16.854775807Z");
        assert_eq!(text(i64::MIN), "1677-09-21T00:12:43.145224192Z");
        for n in [0, -1, 1, i64::MAX, i64::MIN, 1_714_550_400_123_000_000] {
            assert_eq!(parse_rfc3339(&text(n)), Ok(n));
        }
    }

    proptest::proptest! {
        /// Every instant i64 nanoseconds can hold writes as the formatter would write it
        /// and reads back to itself.
        #[test]
        fn every_instant_writes_fixed_width_and_round_trips(n in proptest::num::i64::ANY) {
            let secs = n.div_euclid(NANOS_PER_SEC);
            let frac = n.rem_euclid(NANOS_PER_SEC);
            let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
            let sod = secs.rem_euclid(86_400);
            let mut want = format!(
                "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}",
                sod / 3600,
                sod / 60 % 60,
                sod % 60
            );
            if frac % 1_000_000 == 0 && frac != 0 {
                want += &format!(".{:03}", frac / 1_000_000);
            } else if frac % 1_000 == 0 && frac != 0 {
                want += &format!(".{:06}", frac / 1_000);
            } else if frac != 0 {
                want += &format!(".{frac:09}");
            }
            want.push('Z');
            proptest::prop_assert_eq!(text(n), want);
            proptest::prop_assert_eq!(parse_rfc3339(&text(n)), Ok(n));
        }
    }

    #[test]
    fn epoch_units() {
        assert_eq!(
            from_epoch(1_714_550_400, NANOS_PER_SEC),
            Some(1_714_550_400 * NANOS_PER_SEC)
        );
        assert_eq!(from_epoch(i64::MAX / 1000 + 1, 1000), None);
        assert_eq!(to_epoch(1_500_000_000, NANOS_PER_SEC), None);
        assert_eq!(to_epoch(-2_000_000_000, NANOS_PER_SEC), Some(-2));
    }
}
