//! What the campaign publishes, and what must come out of it: message `seq` carries a
//! real Google payload (embedded copies of `shared/fixtures/payloads/`) under `body` and
//! that product's attributes, plus the sequence number in the body and as attribute
//! `seq`. Everything the pipeline does to a message is a function of its seq ([`fate`],
//! [`expected_row`]), so the checker knows exactly which seqs reach the output, with
//! which values, and which reach the dead-letter topic and why.

use std::collections::BTreeMap;

use serde_json::{json, Value};

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

/// How the input topic carries the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"seq": N, "body": <fixture>}`, read with `format = 'json'`.
    Json,
    /// A topic bound to the Pub/Sub Avro schema [`AVRO_SCHEMA`] (JSON encoding), read
    /// with `format = 'avro'`: `{"seq": N, "body": <fixture as JSON text>, "small": 0}`.
    Avro,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Avro => "avro",
        }
    }
}

/// The input topic's schema in the Avro variant. `small` is read into an `INT` column:
/// a poison message carries 2^40 there, which does not fit (a decode failure), since a
/// schema-bound topic refuses a message that does not match its schema.
pub const AVRO_SCHEMA: &str = r#"{"type":"record","name":"Message","namespace":"chaos","fields":[
  {"name":"seq","type":"long"},
  {"name":"body","type":["null","string"],"default":null},
  {"name":"small","type":"long"}]}"#;

/// What happens to message `seq` in the first hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fate {
    /// Written to the output (and, deduplicated, to the second hop's output).
    Output,
    /// Dropped by the WHERE (`seq % 10 <> 7`): acknowledged, written nowhere.
    Filtered,
    /// Does not decode (seq 49, 99, ...): dead-lettered as published.
    DecodeFailure,
    /// Decodes, but `1000000 / (seq % 50 - 23)` divides by zero (seq 23, 73, ...): a row
    /// failure, dead-lettered under the row-failure policy `dead-letter`.
    SqlFailure,
}

impl Fate {
    pub fn dead_lettered(self) -> bool {
        matches!(self, Fate::DecodeFailure | Fate::SqlFailure)
    }
}

/// The fate of `seq`: the subsets are disjoint by construction (49 and 23 mod 50 never
/// end in 7).
pub fn fate(seq: u64) -> Fate {
    match seq % 50 {
        49 => Fate::DecodeFailure,
        23 => Fate::SqlFailure,
        _ if seq % 10 == 7 => Fate::Filtered,
        _ => Fate::Output,
    }
}

/// The first hop's query over the source `src` (columns `seq`, `body`, `mid`, `attrs`):
/// every expression's value is computed again by [`expected_row`]. In Avro the body is
/// the fixture's JSON text (a `string` field), turned back into JSON.
pub fn query(format: Format) -> String {
    let body = match format {
        Format::Json => "body",
        Format::Avro => "json_get_json(body) AS body",
    };
    format!(
        "SELECT seq, {body}, mid, attrs,
       seq * 3 + 1 AS tripled,
       1000000 / (seq % 50 - 23) AS quotient,
       concat('seq-', CAST(seq AS TEXT)) AS label,
       json_get_str(attrs, 'eventType') AS event,
       CASE WHEN seq % 2 = 0 THEN 'even' ELSE 'odd' END AS parity
FROM src WHERE seq % 10 <> 7"
    )
}

/// The sink columns of the first hop's rows (and of the second hop's, plus `rid`).
pub const ROW_COLUMNS: &str = "seq BIGINT NOT NULL, body JSON, mid TEXT NOT NULL, attrs JSON NOT NULL, tripled BIGINT, quotient BIGINT, label TEXT, event TEXT, parity TEXT";

/// The attribute carrying a message's event time (epoch milliseconds), which the
/// windowed query of hop1 reads (`scan.event-time.attribute`).
pub const EVENT_TIME_ATTRIBUTE: &str = "ts";

/// The event time of message `seq`, milliseconds since the epoch: 10 ms apart from
/// 2026-12-04T00:00:00Z, so a 1 s window holds 100 seqs.
pub fn event_time_ms(seq: u64) -> i64 {
    1_796_342_400_000 + seq as i64 * 10
}

/// hop1's windowed query over `src`: per 1 s window of event time and `seq % 3`, the
/// count and sum of the seqs that pass the stateless query's WHERE. With an
/// out-of-orderness longer than a seed, no window fires before the final run's drain:
/// the state lives through every fault.
pub const WINDOW_QUERY: &str = "SELECT window.start AS ws, k, n, total FROM (
       SELECT TUMBLE(INTERVAL '1' SECOND) AS window, seq % 3 AS k, count(*) AS n, sum(seq) AS total
       FROM src WHERE seq % 10 <> 7 GROUP BY window, k)";

/// The window sink's columns.
pub const WINDOW_COLUMNS: &str =
    "ws TIMESTAMP NOT NULL, k BIGINT NOT NULL, n BIGINT NOT NULL, total BIGINT";

/// One message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    pub seq: u64,
    /// The message's data in its format (cut short, or out of range, when poison).
    pub data: Vec<u8>,
    pub attributes: BTreeMap<String, String>,
    /// The fixture as the row's `body` column must hold it.
    pub body: Value,
}

/// Message `seq` in `format`, carrying fixture `seq mod 6`. A poison one (fate
/// [`Fate::DecodeFailure`]) is, in JSON, its text cut off after `"body": `; in Avro, a
/// `small` of 2^40.
pub fn payload(seq: u64, format: Format) -> Payload {
    let (text, attrs) = FIXTURES[(seq % FIXTURES.len() as u64) as usize];
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
    };
    let mut attributes: BTreeMap<String, String> =
        serde_json::from_str(attrs).expect("embedded attributes are a JSON object of strings");
    attributes.insert("seq".into(), seq.to_string());
    attributes.insert(EVENT_TIME_ATTRIBUTE.into(), event_time_ms(seq).to_string());
    let poison = fate(seq) == Fate::DecodeFailure;
    let data = match format {
        Format::Json if poison => format!("{{\"seq\": {seq}, \"body\": ").into_bytes(),
        Format::Json => json!({ "seq": seq, "body": body }).to_string().into_bytes(),
        Format::Avro => {
            // Avro's JSON encoding: a union's non-null value is wrapped in its type.
            let body = match &body {
                Value::Null => Value::Null,
                v => json!({ "string": v.to_string() }),
            };
            let small: i64 = if poison { 1 << 40 } else { 0 };
            json!({ "seq": seq, "body": body, "small": small })
                .to_string()
                .into_bytes()
        }
    };
    Payload {
        seq,
        data,
        attributes,
        body,
    }
}

/// The row the first hop writes for `seq` (as the JSON sink writes it: a NULL column's
/// key left out), read from message `mid`, whose attributes are the published ones plus
/// `extra` (what the service adds: the Avro schema's `googclient_*`).
pub fn expected_row(
    seq: u64,
    format: Format,
    mid: &str,
    extra: &BTreeMap<String, String>,
) -> Value {
    let p = payload(seq, format);
    let mut attrs = p.attributes;
    attrs.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    let s = seq as i64;
    let mut row = json!({
        "seq": seq,
        "mid": mid,
        "tripled": s * 3 + 1,
        "quotient": 1_000_000 / (s % 50 - 23),
        "label": format!("seq-{seq}"),
        "parity": if seq % 2 == 0 { "even" } else { "odd" },
    });
    if !p.body.is_null() {
        row["body"] = p.body;
    }
    if let Some(e) = attrs.get("eventType") {
        row["event"] = Value::String(e.clone());
    }
    row["attrs"] = json!(attrs);
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixture_makes_a_message_that_names_its_seq_twice() {
        for seq in 0..FIXTURES.len() as u64 {
            let p = payload(seq, Format::Json);
            let v: Value = serde_json::from_slice(&p.data).unwrap();
            assert_eq!(v["seq"], seq);
            assert_eq!(v["body"], p.body);
            assert_eq!(p.attributes["seq"], seq.to_string());
            let a: Value = serde_json::from_slice(&payload(seq, Format::Avro).data).unwrap();
            assert_eq!(a["seq"], seq);
            assert_eq!(a["small"], 0);
            match &p.body {
                Value::Null => assert_eq!(a["body"], Value::Null),
                b => assert_eq!(
                    serde_json::from_str::<Value>(a["body"]["string"].as_str().unwrap()).unwrap(),
                    *b
                ),
            }
        }
        assert_eq!(payload(1, Format::Json).body, Value::Null);
        assert!(
            payload(5, Format::Json).body.is_string(),
            "plain text goes in as a string"
        );
        assert_eq!(
            payload(0, Format::Json).attributes["eventType"],
            "OBJECT_FINALIZE"
        );
        let poison = payload(49, Format::Json);
        assert!(serde_json::from_slice::<Value>(&poison.data).is_err());
        assert_eq!(poison.attributes["seq"], "49");
        let poison: Value = serde_json::from_slice(&payload(49, Format::Avro).data).unwrap();
        assert_eq!(poison["small"], 1_i64 << 40);
    }

    #[test]
    fn the_fates_are_disjoint_and_as_documented() {
        let count = |f: Fate| (0..1000).filter(|s| fate(*s) == f).count();
        assert_eq!(count(Fate::DecodeFailure), 20);
        assert_eq!(count(Fate::SqlFailure), 20);
        assert_eq!(count(Fate::Filtered), 100);
        assert_eq!(count(Fate::Output), 860);
        assert_eq!(fate(49), Fate::DecodeFailure);
        assert_eq!(fate(73), Fate::SqlFailure);
        assert_eq!(fate(17), Fate::Filtered);
        assert_eq!(fate(0), Fate::Output);
        // The expressions: the quotient of 22 and 24 straddles the failing 23.
        let row = expected_row(22, Format::Json, "m", &BTreeMap::new());
        assert_eq!(row["quotient"], -1_000_000);
        assert_eq!(row["tripled"], 67);
        assert_eq!(row["label"], "seq-22");
        assert_eq!(row["parity"], "even");
        assert!(row.get("event").is_none(), "fixture 4 has no eventType");
        let row = expected_row(24, Format::Json, "m", &BTreeMap::new());
        assert_eq!(row["quotient"], 1_000_000);
        assert_eq!(row["event"], "OBJECT_FINALIZE");
        assert!(expected_row(25, Format::Json, "m", &BTreeMap::new())
            .get("body")
            .is_none());
    }
}
