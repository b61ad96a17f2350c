//! Pub/Sub's publish limits, counted in encoded (UTF-8, protobuf) bytes, never characters.
//! Each constant is the limit the service enforces, with its source; a message exactly at
//! a limit passes. The sink checks every message before sending and routes the ones that
//! cannot fit (the emulator enforces none of these; see decision 0017 for what it does).
//! Documented limits: <https://cloud.google.com/pubsub/quotas#resource_limits>.

use std::collections::HashMap;

/// Largest publish request, in encoded bytes: 10 MiB. The quotas page says "10 MB"; the
/// service enforces 10,485,760 and says so in its own refusal ("Request payload size
/// exceeds the limit: 10485760 bytes", quoted in public client issues), and it accepts a
/// 9.9 MiB message (a 10,380,938-byte request, issue 16). The service is the source.
/// The documented per-message "10 MB" is not a separate, smaller limit: that message's
/// 10,380,902 data bytes exceed 10^7, so the request limit is the one that binds.
pub const MAX_REQUEST_BYTES: usize = 10_485_760;
/// The client's cap on its batching byte threshold (google-cloud-pubsub 1.7,
/// `publisher::constants::MAX_BYTES = 1e7`): a larger threshold is silently clamped to
/// it, so the option refuses more instead. A client setting, not a service limit.
pub const CLIENT_MAX_BATCH_BYTES: u64 = 10_000_000;
/// Messages per publish request (quotas page, "Publish request": 1,000 messages; the
/// client's `MAX_MESSAGES` is the same).
pub const MAX_MESSAGES_PER_REQUEST: u32 = 1000;
/// Attributes per message (quotas page: 100).
pub const MAX_ATTRIBUTES: usize = 100;
/// Bytes of an attribute key (quotas page: 256 bytes).
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 256;
/// Bytes of an attribute value (quotas page: 1024 bytes).
pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 1024;
/// Bytes of an ordering key (quotas page: 1 KB, as 1024 bytes like attribute values).
pub const MAX_ORDERING_KEY_BYTES: usize = 1024;

/// Upper bound of what a message adds to a request beyond the bytes the client's batching
/// counts (data + ordering key + attribute keys and values): the message's own tag and
/// length (5), the data's (5), the ordering key's (3) and, per attribute, the map entry's,
/// key's and value's (3 + 3 + 3) for at most 100 attributes.
pub const MAX_FRAMING_PER_MESSAGE: usize = 5 + 5 + 3 + 9 * MAX_ATTRIBUTES;
/// Upper bound of the request's topic field: tag, length and
/// `projects/{30}/topics/{255}`.
pub const MAX_TOPIC_FIELD_BYTES: usize = 3 + "projects/".len() + 30 + "/topics/".len() + 255;

/// The largest batching byte threshold that keeps a request of `count` messages within
/// [`MAX_REQUEST_BYTES`] whatever their framing, and within the client's
/// [`CLIENT_MAX_BATCH_BYTES`].
pub fn max_batch_bytes(count: u32) -> u64 {
    let room = MAX_REQUEST_BYTES - count as usize * MAX_FRAMING_PER_MESSAGE - MAX_TOPIC_FIELD_BYTES;
    (room as u64).min(CLIENT_MAX_BATCH_BYTES)
}

fn varint_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// Encoded size of a length-delimited field holding `n` bytes (proto3 omits empty ones).
fn field(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 + varint_len(n) + n
    }
}

/// The encoded size of a message as one element of a publish request (bytes).
pub fn message_wire_bytes(
    data: usize,
    attributes: &HashMap<String, String>,
    ordering_key: &str,
) -> usize {
    let attrs: usize = attributes
        .iter()
        .map(|(k, v)| {
            let entry = field(k.len()) + field(v.len());
            1 + varint_len(entry) + entry
        })
        .sum();
    let inner = field(data) + attrs + field(ordering_key.len());
    1 + varint_len(inner) + inner
}

/// The bytes the client's batching counts for a message (its estimate).
pub fn batching_bytes(data: usize, attributes: &HashMap<String, String>, key: &str) -> usize {
    data + key.len()
        + attributes
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

/// Why a message cannot be published, or `None` when it fits every limit. `topic` is the
/// full topic name (it is part of every request).
pub fn violation(
    topic: &str,
    data: usize,
    attributes: &HashMap<String, String>,
    ordering_key: &str,
) -> Option<String> {
    if data == 0 && attributes.is_empty() {
        return Some(
            "the message would be empty: Pub/Sub rejects a message without data or attributes"
                .into(),
        );
    }
    if attributes.len() > MAX_ATTRIBUTES {
        return Some(format!(
            "the message has {} attributes, more than Pub/Sub's {MAX_ATTRIBUTES}",
            attributes.len()
        ));
    }
    let mut keys: Vec<&String> = attributes.keys().collect();
    keys.sort();
    for k in keys {
        let v = &attributes[k];
        if k.is_empty() {
            return Some("an attribute key is empty".into());
        }
        if k.starts_with("goog") {
            return Some(format!(
                "attribute key '{}' starts with 'goog', which Pub/Sub reserves",
                shorten(k)
            ));
        }
        if k.len() > MAX_ATTRIBUTE_KEY_BYTES {
            return Some(format!(
                "attribute key '{}' is {} bytes (UTF-8), more than Pub/Sub's {MAX_ATTRIBUTE_KEY_BYTES}",
                shorten(k),
                k.len()
            ));
        }
        if v.len() > MAX_ATTRIBUTE_VALUE_BYTES {
            return Some(format!(
                "the value of attribute '{}' is {} bytes (UTF-8), more than Pub/Sub's {MAX_ATTRIBUTE_VALUE_BYTES}",
                shorten(k),
                v.len()
            ));
        }
    }
    if ordering_key.len() > MAX_ORDERING_KEY_BYTES {
        return Some(format!(
            "the ordering key is {} bytes (UTF-8), more than Pub/Sub's {MAX_ORDERING_KEY_BYTES}",
            ordering_key.len()
        ));
    }
    let request = field(topic.len()) + message_wire_bytes(data, attributes, ordering_key);
    if request > MAX_REQUEST_BYTES {
        return Some(format!(
            "the message needs a publish request of {request} bytes, more than Pub/Sub's {MAX_REQUEST_BYTES}"
        ));
    }
    None
}

/// At most 40 characters of `s`, for an error message.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn limits_count_utf8_bytes_not_characters() {
        let t = "projects/p/topics/t";
        // 600 'é' are 600 characters but 1,200 bytes.
        let e = "é".repeat(600);
        let why = violation(t, 1, &attrs(&[("k", &e)]), "").unwrap();
        assert!(why.contains("1200 bytes"), "{why}");
        assert!(violation(t, 1, &attrs(&[("k", &"é".repeat(512))]), "").is_none());
        let key = "k".repeat(257);
        assert!(violation(t, 1, &attrs(&[(&key, "v")]), "")
            .unwrap()
            .contains("257 bytes"));
        assert!(violation(t, 1, &attrs(&[(&"k".repeat(256), "v")]), "").is_none());
        let many: HashMap<String, String> =
            (0..101).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(violation(t, 1, &many, "")
            .unwrap()
            .contains("101 attributes"));
        assert!(violation(t, 0, &HashMap::new(), "")
            .unwrap()
            .contains("empty"));
        assert!(violation(t, 0, &attrs(&[("a", "b")]), "").is_none());
        assert!(violation(t, 1, &attrs(&[("googx", "b")]), "").is_some());
        assert!(violation(t, 1, &HashMap::new(), &"k".repeat(1025)).is_some());
    }

    #[test]
    fn the_request_limit_counts_the_encoded_request() {
        let t = "projects/p/topics/t";
        let none = HashMap::new();
        // 9.9 MiB (10,380,902 bytes, issue 16) fits; 10 MiB of data does not.
        assert!(violation(t, 10_380_902, &none, "").is_none());
        assert!(violation(t, 10_485_760, &none, "")
            .unwrap()
            .contains("more than Pub/Sub's 10485760"));
        // The exact edge: topic field (21) + message tag/length (5) + data tag/length (5).
        let edge = MAX_REQUEST_BYTES - field(t.len()) - 5 - 5;
        assert!(violation(t, edge, &none, "").is_none());
        assert!(violation(t, edge + 1, &none, "").is_some());
    }

    #[test]
    fn the_batch_threshold_leaves_room_for_the_worst_framing() {
        // 1000 messages of 100 attributes each at the threshold still fit one request.
        let a: HashMap<String, String> =
            (0..100).map(|i| (format!("{i:03}"), "v".into())).collect();
        let per = max_batch_bytes(1000) as usize / 1000;
        let data = per - batching_bytes(0, &a, "");
        let wire = field(MAX_TOPIC_FIELD_BYTES - 3) + 1000 * message_wire_bytes(data, &a, "");
        assert!(wire <= MAX_REQUEST_BYTES, "{wire}");
        // Below 532 messages the client's own cap binds.
        assert_eq!(max_batch_bytes(100), 10_000_000);
        assert_eq!(max_batch_bytes(531), 10_000_000);
        assert_eq!(max_batch_bytes(532), 9_999_739);
        assert_eq!(max_batch_bytes(1000), 9_572_455);
        let a1: HashMap<String, String> = HashMap::new();
        let per = 10_000_000 / 531;
        let wire = field(MAX_TOPIC_FIELD_BYTES - 3) + 531 * message_wire_bytes(per, &a1, "");
        assert!(wire <= MAX_REQUEST_BYTES, "{wire}");
    }
}
