//! Two connectors that need no external service, for tests and benchmarks:
//!
//! - `nexmark` (source): generates [NEXMark](https://docs.rs/nexmark) events of one type
//!   (bids, auctions or persons), serializes each to JSON with nexmark's serde and decodes
//!   it through the engine's deserializer, so the declared columns pick fields with exactly
//!   the decoding a Pub/Sub JSON payload gets. Deterministic: event `n` is the same on every
//!   run. See [`source`].
//! - `blackhole` (sink): encodes every row with the engine's sink encoder (the same
//!   `format` serializer the Pub/Sub sink uses) and discards the bytes. See [`sink`].

pub mod events;
pub mod pacer;
pub mod sink;
pub mod source;

use pubsub_engine_spi::{
    Connection, ConnectionSchema, ConnectionType, ConnectorMetadata, ConnectorOptions,
    ConstructedOperator, Format, MetadataDef, OperatorConfig,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use events::EventKind;
pub use sink::{BlackholeSink, BYTES_ENCODED};
pub use source::NexmarkSource;

/// Default of `events-per-second`: total over all subtasks.
pub const DEFAULT_EVENTS_PER_SECOND: u64 = 10_000;

/// The options of a `nexmark` source table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct NexmarkTable {
    /// `event-type`: which events become rows (`bid`, `auction` or `person`); default `bid`.
    pub event_type: EventKind,
    /// `events-per-second`: events emitted per second in total over all subtasks; 0 emits
    /// as fast as the dataflow takes them. Default 10000.
    pub events_per_second: u64,
    /// `event-count`: events of `event_type` to emit in total over all subtasks, after
    /// which the job takes a final checkpoint and stops; unset = unbounded.
    pub event_count: Option<u64>,
}

/// The options of a `blackhole` sink table (none besides the engine's `format` and
/// `json.timestamp-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BlackholeTable {}

/// Every WITH key of a `nexmark` table besides the engine's `connector`, `format` and
/// `json.timestamp-format`.
pub const NEXMARK_OPTIONS: &[&str] = &["event-type", "events-per-second", "event-count"];

/// The `nexmark` source connector.
#[derive(Debug, Default, Clone, Copy)]
pub struct NexmarkConnector;

impl NexmarkConnector {
    /// Parses the WITH options. Every rejected value names its key and value.
    pub fn table_from_options(options: &mut ConnectorOptions) -> anyhow::Result<NexmarkTable> {
        let event_type = options
            .pull_opt_with("event-type", |v| {
                EventKind::parse(v.trim())
                    .ok_or_else(|| "must be bid, auction or person".to_string())
            })?
            .unwrap_or(EventKind::Bid);
        let events_per_second = options
            .pull_opt_u64("events-per-second")?
            .unwrap_or(DEFAULT_EVENTS_PER_SECOND);
        let event_count = options.pull_opt_u64("event-count")?;
        Ok(NexmarkTable {
            event_type,
            events_per_second,
            event_count,
        })
    }
}

impl pubsub_engine_spi::Connector for NexmarkConnector {
    type ProfileT = ();
    type TableT = NexmarkTable;

    fn name(&self) -> &'static str {
        "nexmark"
    }

    /// `WATERMARK FOR date_time [AS date_time - INTERVAL ...]`: each subtask emits the
    /// highest `date_time` it generated less the out-of-orderness as its watermark.
    fn event_time_column(&self) -> bool {
        true
    }

    fn metadata(&self) -> ConnectorMetadata {
        ConnectorMetadata {
            id: "nexmark".into(),
            name: "NEXMark generator".into(),
            description: "Generates NEXMark bids, auctions or persons as JSON rows, deterministically, at a given rate".into(),
            source: true,
            sink: false,
            table_config: serde_json::to_string_pretty(&schemars::schema_for!(NexmarkTable))
                .expect("schema serializes"),
            connection_config: None,
        }
    }

    fn metadata_defs(&self) -> &'static [MetadataDef] {
        &[]
    }

    fn known_options(&self) -> &'static [&'static str] {
        NEXMARK_OPTIONS
    }

    fn table_type(&self, _profile: &(), _table: &NexmarkTable) -> ConnectionType {
        ConnectionType::Source
    }

    /// Besides the options, checks the declared columns: with format `json` every column
    /// must be a field of the event type (see [`EventKind::fields`]), and the first event
    /// must decode into them (so e.g. `date_time TIMESTAMP` without
    /// `'json.timestamp-format' = 'epoch-millis'` is refused before the job starts).
    fn from_options(
        &self,
        name: &str,
        options: &mut ConnectorOptions,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        let table = Self::table_from_options(options)?;
        if schema.format == Format::Json {
            let fields = table.event_type.fields();
            if let Some(f) = schema
                .fields
                .iter()
                .find(|f| !fields.contains(&f.name.as_str()))
            {
                anyhow::bail!(
                    "column '{}' is not a field of nexmark {} events (fields: {})",
                    f.name,
                    table.event_type.name(),
                    fields.join(", ")
                );
            }
        }
        events::check_decodes(table.event_type, schema)?;
        pubsub_engine_spi::Connector::from_config(self, name, (), table, schema)
    }

    fn make_operator(
        &self,
        _profile: (),
        table: NexmarkTable,
        config: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator> {
        Ok(ConstructedOperator::Source(Box::new(NexmarkSource::new(
            table, config,
        ))))
    }
}

/// The `blackhole` sink connector.
#[derive(Debug, Default, Clone, Copy)]
pub struct BlackholeConnector;

impl pubsub_engine_spi::Connector for BlackholeConnector {
    type ProfileT = ();
    type TableT = BlackholeTable;

    fn name(&self) -> &'static str {
        "blackhole"
    }

    fn metadata(&self) -> ConnectorMetadata {
        ConnectorMetadata {
            id: "blackhole".into(),
            name: "Blackhole".into(),
            description: "Encodes every row as the table's format and discards it (benchmarks)"
                .into(),
            source: false,
            sink: true,
            table_config: serde_json::to_string_pretty(&schemars::schema_for!(BlackholeTable))
                .expect("schema serializes"),
            connection_config: None,
        }
    }

    fn metadata_defs(&self) -> &'static [MetadataDef] {
        &[]
    }

    fn known_options(&self) -> &'static [&'static str] {
        &[]
    }

    fn table_type(&self, _profile: &(), _table: &BlackholeTable) -> ConnectionType {
        ConnectionType::Sink
    }

    /// Refuses a schema its format cannot write (`raw_string` without exactly one column
    /// `value TEXT`, `raw_bytes` without `value BYTEA`), as the Pub/Sub sink would.
    fn from_options(
        &self,
        name: &str,
        _options: &mut ConnectorOptions,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        let empty = arrow::array::RecordBatch::new_empty(schema.arrow_schema());
        pubsub_engine_format::Serializer::new(schema).serialize(&empty)?;
        pubsub_engine_spi::Connector::from_config(self, name, (), BlackholeTable {}, schema)
    }

    fn make_operator(
        &self,
        _profile: (),
        _table: BlackholeTable,
        config: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator> {
        Ok(ConstructedOperator::Operator(Box::new(BlackholeSink::new(
            config,
        ))))
    }
}
