//! The values of a source table's metadata columns (`METADATA FROM 'key'`, SPEC 5.1) for
//! one message: the reader's, and the wizard's table test, give the same values.

use google_cloud_pubsub::model::Message;
use pubsub_engine_format::FieldValue;

use crate::connector::{
    ATTRIBUTES, DELIVERY_ATTEMPT, MESSAGE_ID, ORDERING_KEY, PUBLISH_TIME, SUBSCRIPTION,
};

/// One value per key, in order: `message-id` (TEXT), `publish-time` (TIMESTAMP, ns),
/// `attributes` (JSON object text, keys sorted), `ordering-key` (NULL when empty),
/// `subscription` (the id it was read from), `delivery-attempt` (NULL without a
/// dead-letter policy), and the hidden record key ([`pubsub_engine_spi::record_id`]: the value
/// of attribute `dedup_attribute` when given and present, else the subscription's path
/// and the message id); in a cluster the hidden deduplication key (the attribute's value,
/// NULL when absent or empty), message (subscription and message id) and publish time
/// ([`pubsub_engine_spi::dedup`]). An unknown key
/// gives NULL (the planner refuses unknown keys).
pub fn metadata_values<'a>(
    keys: impl IntoIterator<Item = &'a str>,
    m: &Message,
    delivery_attempt: Option<i32>,
    subscription: &str,
    dedup_attribute: Option<&str>,
) -> Vec<FieldValue> {
    keys.into_iter()
        .map(|key| match key {
            MESSAGE_ID => FieldValue::String(m.message_id.clone()),
            PUBLISH_TIME | pubsub_engine_spi::dedup::DEDUP_PUBLISHED => {
                m.publish_time.as_ref().map_or(FieldValue::Null, |t| {
                    FieldValue::TimestampNanos(t.seconds() * 1_000_000_000 + i64::from(t.nanos()))
                })
            }
            ATTRIBUTES => {
                let sorted: std::collections::BTreeMap<_, _> = m.attributes.iter().collect();
                FieldValue::String(serde_json::to_string(&sorted).unwrap_or_default())
            }
            ORDERING_KEY if m.ordering_key.is_empty() => FieldValue::Null,
            ORDERING_KEY => FieldValue::String(m.ordering_key.clone()),
            SUBSCRIPTION => FieldValue::String(subscription.to_string()),
            DELIVERY_ATTEMPT => {
                delivery_attempt.map_or(FieldValue::Null, |a| FieldValue::Int64(i64::from(a)))
            }
            pubsub_engine_spi::record_id::RECORD_KEY => {
                FieldValue::RowKey(match dedup_attribute.and_then(|a| m.attributes.get(a)) {
                    Some(upstream) => upstream.clone(),
                    None => pubsub_engine_spi::record_id::message_key(subscription, &m.message_id),
                })
            }
            pubsub_engine_spi::dedup::DEDUP_MESSAGE => FieldValue::String(
                pubsub_engine_spi::record_id::message_key(subscription, &m.message_id),
            ),
            pubsub_engine_spi::dedup::DEDUP_KEY => {
                match dedup_attribute.and_then(|a| m.attributes.get(a)) {
                    Some(id) if !id.is_empty() => FieldValue::RowKey(id.clone()),
                    _ => FieldValue::Null,
                }
            }
            _ => FieldValue::Null,
        })
        .collect()
}
