//! Human durations and data sizes as written in CLI flags and WITH options.

use std::time::Duration;

/// Parses a duration such as `500ms`, `10s`, `5m`, `2h`, `1d`, `30 s` or `5 min`.
///
/// A bare number is read as seconds. Returns a message naming the bad text when the
/// number or the unit is not understood.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (examples: 500ms, 10s, 5m)"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" | "millis" | "millisecond" | "milliseconds" => 0.001,
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86_400.0,
        other => {
            return Err(format!(
                "'{text}' has unknown duration unit '{other}' (use ms, s, m, h or d)"
            ))
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 1e12 {
        return Err(format!("'{text}' is too large a duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a data size such as `64mb`, `100 MB`, `1kib` or `512` (bytes) into bytes.
/// Decimal units (kb, mb, gb) are powers of 1000, binary ones (kib, mib, gib) of 1024.
pub fn parse_data_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: u64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a data size (examples: 512kb, 64mb)"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" => 1 << 10,
        "mb" => 1_000_000,
        "mib" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        other => return Err(format!("'{text}' has unknown size unit '{other}'")),
    };
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("'{text}' is too large a data size"))
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
    }
}
