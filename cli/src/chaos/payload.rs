//! What the campaign publishes: message `seq` carries a real Google payload (embedded
//! copies of `shared/fixtures/payloads/`) under `body` and that product's attributes, plus
//! the sequence number in the body and as attribute `seq`, so each output row can be
//! checked against exactly what was published.

use std::collections::BTreeMap;

/// (body, attributes) of each embedded fixture; a body that is not JSON goes in as a
/// JSON string, an empty one (GCS with payload format NONE) as null.
const FIXTURES: [(&str, &str); 6] = [
    (
        include_str!("payloads/gcs-notification-json-api-v1.json"),
        include_str!("payloads/gcs-notification-json-api-v1.attrs.json"),
    ),
    (
        "",
        include_str!("payloads/gcs-notification-none.attrs.json"),
    ),
    (
        include_str!("payloads/logging-sink-auditlog.json"),
        include_str!("payloads/logging-sink-auditlog.attrs.json"),
    ),
    (
        include_str!("payloads/cloud-build-success.json"),
        include_str!("payloads/cloud-build-success.attrs.json"),
    ),
    (
        include_str!("payloads/pubsub-schema-avro-json.json"),
        include_str!("payloads/pubsub-schema-avro-json.attrs.json"),
    ),
    (include_str!("payloads/scheduler-plain-text.txt"), "{}"),
];

/// One message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    pub seq: u64,
    /// `{"seq": N, "body": <fixture>}`.
    pub data: Vec<u8>,
    pub attributes: BTreeMap<String, String>,
    /// The fixture as the row's `body` column must hold it.
    pub body: serde_json::Value,
}

/// Every 50th message (seq 49, 99, ...) is cut short: it does not decode, so the source
/// dead-letters it (its data unchanged, its attributes kept).
pub fn is_poison(seq: u64) -> bool {
    seq % 50 == 49
}

/// Message `seq`, carrying fixture `seq mod 6`; a poison one ([`is_poison`]) is its JSON
/// cut off after `"body": `.
pub fn payload(seq: u64) -> Payload {
    let (text, attrs) = FIXTURES[(seq % FIXTURES.len() as u64) as usize];
    let body = if text.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_string()))
    };
    let mut attributes: BTreeMap<String, String> =
        serde_json::from_str(attrs).expect("embedded attributes are a JSON object of strings");
    attributes.insert("seq".into(), seq.to_string());
    let data = if is_poison(seq) {
        format!("{{\"seq\": {seq}, \"body\": ").into_bytes()
    } else {
        serde_json::to_vec(&serde_json::json!({ "seq": seq, "body": body }))
            .expect("JSON serializes")
    };
    Payload {
        seq,
        data,
        attributes,
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixture_makes_a_message_that_names_its_seq_twice() {
        for seq in 0..FIXTURES.len() as u64 {
            let p = payload(seq);
            let v: serde_json::Value = serde_json::from_slice(&p.data).unwrap();
            assert_eq!(v["seq"], seq);
            assert_eq!(v["body"], p.body);
            assert_eq!(p.attributes["seq"], seq.to_string());
        }
        assert_eq!(payload(1).body, serde_json::Value::Null);
        assert!(
            payload(5).body.is_string(),
            "plain text goes in as a string"
        );
        assert_eq!(payload(0).attributes["eventType"], "OBJECT_FINALIZE");
        let poison = payload(49);
        assert!(serde_json::from_slice::<serde_json::Value>(&poison.data).is_err());
        assert_eq!(poison.attributes["seq"], "49");
        assert!(!is_poison(48) && is_poison(99));
    }
}
