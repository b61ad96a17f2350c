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
            if let Some(f) = schema.fields.iter().find(|f| f.metadata_key.is_some()) {
                anyhow::bail!(
                    "column '{}': METADATA FROM is only readable in a source table",
                    f.name
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
