//! `Connector` implementation: SQL options -> typed configs -> operators.

use pubsub_engine::{
    Connection, ConnectionSchema, ConnectionType, ConnectorMetadata, ConnectorOptions,
    ConstructedOperator, FieldType, Format, MetadataDef, OperatorConfig,
};
use pubsub_schema::{PubSubProfile, PubSubTable};
use pubsub_table_options::{profile_from_options, table_from_options, KNOWN_OPTIONS};

use crate::sink::PubSubSink;
use crate::source::PubSubSource;

/// Source metadata keys (`col TYPE METADATA FROM 'key'`), SPEC 5.1. `attributes` is the
/// attribute map as canonical JSON text (keys sorted), declared TEXT or JSON.
/// The metadata key of a message's ordering key: readable in a source table (NULL when
/// the message has none), writable in a sink table (NULL or empty: no key).
pub const ORDERING_KEY: &str = "ordering-key";

pub const METADATA_DEFS: &[MetadataDef] = &[
    MetadataDef {
        name: "message-id",
        field_types: &[FieldType::Text],
    },
    MetadataDef {
        name: "publish-time",
        field_types: &[FieldType::Timestamp],
    },
    MetadataDef {
        name: "attributes",
        field_types: &[FieldType::Text, FieldType::Json],
    },
    MetadataDef {
        name: "ordering-key",
        field_types: &[FieldType::Text],
    },
];

/// The `pubsub` connector.
#[derive(Debug, Default, Clone, Copy)]
pub struct PubSubConnector;

impl pubsub_engine::Connector for PubSubConnector {
    type ProfileT = PubSubProfile;
    type TableT = PubSubTable;

    fn name(&self) -> &'static str {
        "pubsub"
    }

    fn metadata(&self) -> ConnectorMetadata {
        ConnectorMetadata {
            id: "pubsub".into(),
            name: "Google Cloud Pub/Sub".into(),
            description:
                "Read subscriptions and write topics of Google Cloud Pub/Sub, at least once".into(),
            source: true,
            sink: true,
            table_config: pubsub_schema::table_schema(),
            connection_config: Some(pubsub_schema::profile_schema()),
        }
    }

    fn metadata_defs(&self) -> &'static [MetadataDef] {
        METADATA_DEFS
    }

    fn known_options(&self) -> &'static [&'static str] {
        KNOWN_OPTIONS
    }

    fn table_type(&self, _profile: &PubSubProfile, table: &PubSubTable) -> ConnectionType {
        match table {
            PubSubTable::Source(_) => ConnectionType::Source,
            PubSubTable::Sink(_) => ConnectionType::Sink,
        }
    }

    fn from_options(
        &self,
        name: &str,
        options: &mut ConnectorOptions,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        let profile = profile_from_options(options)?;
        let table = table_from_options(options)?;
        if matches!(table, PubSubTable::Sink(_)) {
            // Only the ordering key is writable (issue 6; attributes follow in issue 8).
            let mut keys = schema.fields.iter().filter(|f| f.metadata_key.is_some());
            if let Some(f) = keys
                .clone()
                .find(|f| f.metadata_key.as_deref() != Some(ORDERING_KEY))
            {
                anyhow::bail!(
                    "column '{}': METADATA FROM '{}' is only readable in a source table; a sink table can write only 'ordering-key'",
                    f.name,
                    f.metadata_key.as_deref().unwrap_or_default()
                );
            }
            if let (Some(a), Some(b)) = (keys.next(), keys.next()) {
                anyhow::bail!(
                    "columns '{}' and '{}' are both METADATA FROM 'ordering-key': a message has one ordering key",
                    a.name,
                    b.name
                );
            }
        }
        if schema.format == Format::RawString {
            let payload: Vec<_> = schema
                .fields
                .iter()
                .filter(|f| f.metadata_key.is_none())
                .collect();
            anyhow::ensure!(
                payload.len() == 1
                    && payload[0].name == "value"
                    && payload[0].field_type == FieldType::Text,
                "format 'raw_string' needs exactly one non-metadata column: value TEXT"
            );
        }
        pubsub_engine::Connector::from_config(self, name, profile, table, schema)
    }

    /// Rows with the same ordering key are published by one sink subtask, so that one
    /// publisher keeps their order (Pub/Sub orders messages per key and per publisher).
    fn sink_key(
        &self,
        _profile: &PubSubProfile,
        table: &PubSubTable,
        schema: &ConnectionSchema,
    ) -> Option<String> {
        match table {
            PubSubTable::Sink(_) => schema
                .fields
                .iter()
                .find(|f| f.metadata_key.as_deref() == Some(ORDERING_KEY))
                .map(|f| f.name.clone()),
            PubSubTable::Source(_) => None,
        }
    }

    /// A subscription hands each message to one reader: two source tables on one
    /// subscription would each see part of it. Keyed by the resource name alone, not the
    /// endpoint: `localhost:8085` and `127.0.0.1:8085` are one emulator.
    fn exclusive_resource(&self, profile: &PubSubProfile, table: &PubSubTable) -> Option<String> {
        match table {
            PubSubTable::Source(s) => Some(format!(
                "subscription {}",
                crate::client::subscription_path(&profile.project, &s.subscription)
            )),
            PubSubTable::Sink(_) => None,
        }
    }

    fn make_operator(
        &self,
        profile: PubSubProfile,
        table: PubSubTable,
        config: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator> {
        Ok(match table {
            PubSubTable::Source(s) => {
                ConstructedOperator::Source(Box::new(PubSubSource::new(profile, s, config)))
            }
            PubSubTable::Sink(s) => {
                ConstructedOperator::Operator(Box::new(PubSubSink::new(profile, s, config)))
            }
        })
    }
}
