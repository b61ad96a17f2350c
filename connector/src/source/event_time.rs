//! Event time from a message attribute (`scan.event-time.attribute`, issue 32 item 1):
//! Beam's `timestampAttribute` rule, RFC 3339 text or epoch milliseconds.

use pubsub_engine_format::{parse_rfc3339, TIMESTAMP_RANGE};

/// The event time (ns since the Unix epoch) an attribute value gives: an optionally
/// signed run of ASCII digits is epoch milliseconds, anything else must be RFC 3339 text
/// as format `json` reads it (`2024-05-01T12:00:00.5Z`, an offset, 1 to 9 fractional
/// digits). `Err` says why the value is refused, quoting it: not a timestamp, or outside
/// what a `TIMESTAMP` holds. Never rounded: every millisecond is a whole number of ns.
pub fn attribute_event_ns(key: &str, value: &str) -> Result<i64, String> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    let ns = if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        value
            .parse::<i64>()
            .ok()
            .and_then(|ms| ms.checked_mul(1_000_000))
            .ok_or_else(|| format!("is out of range as epoch milliseconds ({TIMESTAMP_RANGE})"))
    } else {
        parse_rfc3339(value)
    };
    ns.map_err(|why| {
        format!("has event-time attribute '{key}' = '{value}', which is not a TIMESTAMP (epoch milliseconds or RFC 3339): it {why}")
    })
}

/// The event time of a message under `scan.event-time.attribute` = `key`, or why it has
/// none (the message is a row failure under the failure policy).
pub fn from_attributes(
    key: &str,
    attributes: &std::collections::HashMap<String, String>,
) -> Result<i64, String> {
    match attributes.get(key) {
        Some(v) => attribute_event_ns(key, v),
        None => Err(format!(
            "has no event-time attribute '{key}' (option '{}')",
            pubsub_table_options::EVENT_TIME_ATTRIBUTE
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_milliseconds_and_rfc3339_give_the_same_instant_exactly() {
        let ms = attribute_event_ns("t", "1714564800500").unwrap();
        assert_eq!(ms, 1_714_564_800_500_000_000);
        assert_eq!(attribute_event_ns("t", "2024-05-01T12:00:00.5Z"), Ok(ms));
        assert_eq!(
            attribute_event_ns("t", "2024-05-01T14:00:00.5+02:00"),
            Ok(ms)
        );
        // Nanoseconds are kept, not rounded to the millisecond.
        assert_eq!(
            attribute_event_ns("t", "2024-05-01T12:00:00.500000001Z"),
            Ok(ms + 1)
        );
        assert_eq!(attribute_event_ns("t", "-1"), Ok(-1_000_000));
        assert_eq!(attribute_event_ns("t", "0"), Ok(0));
    }

    #[test]
    fn a_value_that_is_no_timestamp_or_out_of_range_is_refused_quoting_it() {
        for (value, why) in [
            ("", "is not an RFC 3339 timestamp"),
            ("-", "is not an RFC 3339 timestamp"),
            ("12.5", "is not an RFC 3339 timestamp"),
            ("1e3", "is not an RFC 3339 timestamp"),
            (" 1714564800500", "is not an RFC 3339 timestamp"),
            ("2024-05-01", "is not an RFC 3339 timestamp"),
            ("2024-02-30T00:00:00Z", "no such date"),
            // Past 2262-04-11 in ns, and past an i64 of ms.
            ("9300000000000", "out of range"),
            ("99999999999999999999", "out of range"),
            ("2300-01-01T00:00:00Z", "out of range"),
        ] {
            let e = attribute_event_ns("ts", value).unwrap_err();
            assert!(e.contains(why), "{value:?}: {e}");
            assert!(e.contains(&format!("'ts' = '{value}'")), "{value:?}: {e}");
        }
    }

    #[test]
    fn a_message_without_the_attribute_has_no_event_time() {
        let mut a = std::collections::HashMap::new();
        a.insert("other".to_string(), "1".to_string());
        let e = from_attributes("ts", &a).unwrap_err();
        assert!(e.contains("has no event-time attribute 'ts'"), "{e}");
        a.insert("ts".to_string(), "2".to_string());
        assert_eq!(from_attributes("ts", &a), Ok(2_000_000));
    }
}
