//! Rows -> Pub/Sub messages: the payload by the table's format, the writable metadata
//! columns `attributes` and `ordering-key` (SPEC 6), excluded from the payload, and the
//! record id attribute (`sink.record-id-attribute`) from the rows' trailing record id
//! column (see `pubsub_engine_spi::record_id`).

use std::collections::HashMap;

use arrow::array::{Array, AsArray, RecordBatch};
use pubsub_engine_format::Serializer;
use pubsub_engine_spi::ConnectionSchema;

use crate::connector::{ATTRIBUTES, ORDERING_KEY};

/// One row, ready to publish or refused by the encoder.
pub enum Encoded {
    Message {
        data: Vec<u8>,
        attributes: HashMap<String, String>,
        ordering_key: String,
    },
    /// The encoder refused the row: `payload` is what it could write of it (the payload,
    /// or empty), `reason` says why, naming the column.
    Rejected { payload: Vec<u8>, reason: String },
}

/// Encodes the rows of a sink table.
pub struct Encoder {
    serializer: Serializer,
    /// The table's schema, for [`Encoder::bind_avro`].
    schema: ConnectionSchema,
    /// Index and name of the `METADATA FROM 'attributes'` column.
    attributes: Option<(usize, String)>,
    /// Index of the `METADATA FROM 'ordering-key'` column.
    ordering_key: Option<usize>,
    /// The attribute the record id goes into (`sink.record-id-attribute`).
    record_id: Option<String>,
}

impl Encoder {
    /// An encoder of rows of `schema`; with `record_id` (an attribute key), every row
    /// must carry its record id as the trailing column
    /// [`RECORD_ID_COLUMN`](pubsub_engine_spi::record_id::RECORD_ID_COLUMN).
    pub fn new(schema: &ConnectionSchema, record_id: Option<String>) -> Self {
        let find = |key: &str| {
            schema
                .fields
                .iter()
                .position(|f| f.metadata_key.as_deref() == Some(key))
        };
        Encoder {
            serializer: Serializer::new(schema),
            schema: schema.clone(),
            attributes: find(ATTRIBUTES).map(|i| (i, schema.fields[i].name.clone())),
            ordering_key: find(ORDERING_KEY),
            record_id,
        }
    }

    /// The table's format is `avro`: [`bind_avro`](Self::bind_avro) must be called
    /// before rows can be encoded.
    pub fn is_avro(&self) -> bool {
        self.schema.format == pubsub_engine_spi::Format::Avro
    }

    /// Encodes payloads under schema revision `writer` in `encoding` (format `avro`).
    /// Errors, naming the column and the field, if the columns cannot be written under it.
    pub fn bind_avro(
        &mut self,
        writer: std::sync::Arc<pubsub_engine_format::avro::AvroSchema>,
        encoding: pubsub_engine_format::avro::AvroEncoding,
    ) -> Result<(), String> {
        self.serializer = Serializer::avro(&self.schema, writer, encoding)?;
        Ok(())
    }

    /// One result per row, in row order. The outer error is the batch's (the table
    /// cannot be written in its format, a column is missing): it fails the job.
    pub fn encode(&self, batch: &RecordBatch) -> anyhow::Result<Vec<Encoded>> {
        let payloads = self.serializer.serialize_rows(batch)?;
        // A changelog's delete has no new row: its metadata comes from the old one.
        let old = |i: usize| {
            batch
                .column_by_name(&pubsub_engine_spi::changelog::before_column(
                    &self.schema.fields[i].name,
                ))
                .and_then(|c| c.as_string_opt::<i32>().cloned())
        };
        let attrs = self
            .attributes
            .as_ref()
            .map(|(i, name)| (batch.column(*i).as_string::<i32>().clone(), old(*i), name));
        let keys = self
            .ordering_key
            .map(|i| (batch.column(i).as_string::<i32>().clone(), old(i)));
        let ids = match &self.record_id {
            None => None,
            Some(name) => {
                let column = batch
                    .schema()
                    .index_of(pubsub_engine_spi::record_id::RECORD_ID_COLUMN)
                    .ok()
                    .and_then(|i| batch.column(i).as_string_opt::<i32>().cloned())
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "the rows for this sink carry no record ids ('{}' = '{name}'): the pipeline was planned without them",
                            pubsub_table_options::RECORD_ID_ATTRIBUTE
                        )
                    })?;
                Some((column, name))
            }
        };
        Ok(payloads
            .into_iter()
            .enumerate()
            .map(|(row, payload)| {
                let data = match payload {
                    Ok(d) => d,
                    Err(reason) => {
                        return Encoded::Rejected {
                            payload: Vec::new(),
                            reason,
                        }
                    }
                };
                let attributes = attrs.as_ref().and_then(|(a, before, name)| {
                    let a = [Some(a), before.as_ref()]
                        .into_iter()
                        .flatten()
                        .find(|a| a.is_valid(row))?;
                    Some((a, name))
                });
                let attributes = match attributes {
                    Some((a, name)) => match parse_attributes(a.value(row)) {
                        Ok(m) => m,
                        Err(reason) => {
                            return Encoded::Rejected {
                                payload: data,
                                reason: format!(
                                    "column '{name}' (METADATA FROM '{ATTRIBUTES}'): {reason}"
                                ),
                            }
                        }
                    },
                    None => HashMap::new(),
                };
                let mut attributes = attributes;
                if let Some((ids, name)) = &ids {
                    if attributes.contains_key(name.as_str()) {
                        return Encoded::Rejected {
                            payload: data,
                            reason: format!(
                                "attribute '{name}' is set by the row's attributes column and is the record id attribute ('{}'): rename one",
                                pubsub_table_options::RECORD_ID_ATTRIBUTE
                            ),
                        };
                    }
                    attributes.insert(name.to_string(), ids.value(row).to_string());
                }
                let ordering_key = keys
                    .as_ref()
                    .and_then(|(k, before)| {
                        [Some(k), before.as_ref()]
                            .into_iter()
                            .flatten()
                            .find(|k| k.is_valid(row))
                    })
                    .map(|k| k.value(row).to_string())
                    .unwrap_or_default();
                Encoded::Message {
                    data,
                    attributes,
                    ordering_key,
                }
            })
            .collect())
    }
}

/// A JSON object of strings -> attributes. Refused, never coerced: anything but an
/// object, a NULL value, a number or other non-string value, a key given twice (which a
/// map would silently collapse to its last value).
pub fn parse_attributes(text: &str) -> Result<HashMap<String, String>, String> {
    let v: Entries =
        serde_json::from_str(text).map_err(|e| format!("must be a JSON object of strings: {e}"))?;
    let mut out = HashMap::with_capacity(v.0.len());
    for (k, v) in v.0 {
        let s = match v {
            serde_json::Value::String(s) => s,
            serde_json::Value::Null => return Err(format!("attribute '{k}' is NULL")),
            other => {
                return Err(format!(
                    "attribute '{k}' must be a string, was {} {other}",
                    kind(&other)
                ))
            }
        };
        if out.insert(k.clone(), s).is_some() {
            return Err(format!("attribute '{k}' is given twice"));
        }
    }
    Ok(out)
}

/// The entries of a JSON object in order, duplicates kept.
struct Entries(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Entries, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = m.next_entry()? {
                    v.push(e);
                }
                Ok(Entries(v))
            }
        }
        d.deserialize_map(V)
    }
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_an_object_of_strings_exactly() {
        let m = parse_attributes(r#"{"a":"1","é":"ü"}"#).unwrap();
        assert_eq!(m["a"], "1");
        assert_eq!(m["é"], "ü");
        assert!(parse_attributes("{}").unwrap().is_empty());
        assert_eq!(
            parse_attributes(r#"{"a":null}"#).unwrap_err(),
            "attribute 'a' is NULL"
        );
        assert!(parse_attributes(r#"{"a":1}"#)
            .unwrap_err()
            .contains("must be a string, was a number 1"));
        assert!(parse_attributes("[1]")
            .unwrap_err()
            .contains("expected an object"));
        assert_eq!(
            parse_attributes(r#"{"a":"x","a":"y"}"#).unwrap_err(),
            "attribute 'a' is given twice"
        );
        assert!(parse_attributes("not json").is_err());
    }
}
