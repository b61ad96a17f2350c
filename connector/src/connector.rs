//! `Connector` implementation: SQL options -> typed configs -> operators.

use futures::future::BoxFuture;
use pubsub_engine_spi::{ConfigError, OptionError, PrepareContext};
use pubsub_engine_spi::{
    Connection, ConnectionSchema, ConnectionType, ConnectorMetadata, ConnectorOptions,
    ConstructedOperator, FieldType, Format, MetadataDef, OperatorConfig, SourceField,
};
use pubsub_schema::{PubSubProfile, PubSubTable};
use pubsub_table_options::{
    profile_from_options, sink_sql_key, sql_key, table_from_options, KNOWN_OPTIONS,
};

use crate::build_error::BuildError;
use crate::sink::{PubSubSink, SinkWriter};
use crate::source::{PubSubSource, SourceReader};

/// A builder's rejection, renamed to the SQL key the user wrote (SPEC 8). The value is
/// the builder's rendering (e.g. `0ms` for `'0s'`); [`sql_error_as_written`] shows the
/// text of the WITH clause instead.
pub fn sql_error(e: BuildError) -> OptionError {
    OptionError::Invalid {
        key: sql_key(e.option).to_string(),
        value: e.value.clone(),
        reason: e.reason_with(|o| sql_key(o).to_string()),
    }
}

/// As [`sql_error`], with the value exactly as written in the WITH clause (`written`, the
/// table's options before they were pulled) when the key holds one value. Keys holding a
/// list (`subscription`, `scan.auto-create.topics`) keep the builder's value: it names the
/// one item that was rejected.
pub fn sql_error_as_written(e: BuildError, written: &ConnectorOptions) -> OptionError {
    let key = sql_key(e.option);
    let list = [
        pubsub_table_options::SUBSCRIPTION,
        pubsub_table_options::AUTO_CREATE_TOPICS,
    ];
    let value = match written.get(key) {
        Some(v) if !list.contains(&key) => v.to_string(),
        _ => e.value.clone(),
    };
    OptionError::Invalid {
        key: key.to_string(),
        value,
        reason: e.reason_with(|o| sql_key(o).to_string()),
    }
}

/// A sink builder's rejection renamed to the SQL key, with the value as written.
fn sink_sql_error(e: BuildError, written: &ConnectorOptions) -> OptionError {
    let name = |o: &str| sink_sql_key(o).unwrap_or(o).to_string();
    let key = name(e.option);
    let value = match written.get(&key) {
        Some(v) if key != pubsub_table_options::SINK_AUTO_CREATE_REGIONS => v.to_string(),
        _ => e.value.clone(),
    };
    OptionError::Invalid {
        reason: e.reason_with(name),
        key,
        value,
    }
}

/// A sink table writes `attributes` (TEXT or JSON) and `ordering-key` (TEXT) metadata,
/// each from at most one column, the ordering key only with message ordering on; the
/// other metadata keys are only readable.
/// Event time comes from one place: a `WATERMARK FOR` column (with its own
/// out-of-orderness) or the publish time / an attribute (with
/// `scan.watermark.out-of-orderness`), never both.
fn check_event_time(
    config: &pubsub_schema::SourceConfig,
    schema: &ConnectionSchema,
) -> anyhow::Result<()> {
    let Some(e) = &schema.event_time else {
        return Ok(());
    };
    let clash = [
        (
            pubsub_table_options::EVENT_TIME_ATTRIBUTE,
            config.event_time_attribute.clone(),
        ),
        (
            pubsub_table_options::WATERMARK_OUT_OF_ORDERNESS,
            config
                .subscriber
                .watermark_out_of_orderness_ms
                .map(|ms| crate::build_error::show(std::time::Duration::from_millis(ms))),
        ),
    ];
    if let Some((key, Some(value))) = clash.into_iter().find(|(_, v)| v.is_some()) {
        anyhow::bail!(
            "option '{key}' ('{value}') and the table's event-time column '{}' (WATERMARK FOR or 'event_time_field') cannot both be set: the column gives the event time, and the clause (or 'watermark_field') its out-of-orderness",
            e.column
        );
    }
    Ok(())
}

fn check_sink_metadata(schema: &ConnectionSchema, ordering: bool) -> anyhow::Result<()> {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for f in &schema.fields {
        let Some(key) = f.metadata_key.as_deref() else {
            continue;
        };
        if key != ORDERING_KEY && key != ATTRIBUTES {
            anyhow::bail!(
                "column '{}': METADATA FROM '{key}' is only readable in a source table; a sink table writes 'attributes' and 'ordering-key'",
                f.name
            );
        }
        if key == ORDERING_KEY && !ordering {
            anyhow::bail!(
                "column '{}' is METADATA FROM 'ordering-key', but '{}' is false: enable it to publish ordering keys (Pub/Sub keeps a key's order only for a publisher that orders)",
                f.name,
                pubsub_table_options::MESSAGE_ORDERING
            );
        }
        if let Some((other, _)) = seen.iter().find(|(_, k)| *k == key) {
            anyhow::bail!(
                "columns '{other}' and '{}' are both METADATA FROM '{key}': a message has one",
                f.name
            );
        }
        seen.push((&f.name, key));
    }
    Ok(())
}

/// Metadata key: the message id (TEXT).
pub const MESSAGE_ID: &str = "message-id";
/// Metadata key: the publish time (TIMESTAMP).
pub const PUBLISH_TIME: &str = "publish-time";
/// Metadata key: the attribute map as canonical JSON text, keys sorted (TEXT or JSON).
pub const ATTRIBUTES: &str = "attributes";
/// The metadata key of a message's ordering key: readable in a source table (NULL when
/// the message has none), writable in a sink table (NULL or empty: no key).
pub const ORDERING_KEY: &str = "ordering-key";
/// Metadata key: the full name of the subscription the message was read from (TEXT).
pub const SUBSCRIPTION: &str = "subscription";
/// Metadata key: Pub/Sub's delivery attempt count (BIGINT); NULL when the subscription has
/// no dead-letter policy (Pub/Sub counts only then).
pub const DELIVERY_ATTEMPT: &str = "delivery-attempt";

/// Source metadata keys (`col TYPE METADATA FROM 'key'`), SPEC 5.1. Unknown keys and
/// wrong types are rejected at plan time, naming the column and the key.
pub const METADATA_DEFS: &[MetadataDef] = &[
    MetadataDef {
        name: MESSAGE_ID,
        field_types: &[FieldType::Text],
    },
    MetadataDef {
        name: PUBLISH_TIME,
        field_types: &[FieldType::Timestamp],
    },
    MetadataDef {
        name: ATTRIBUTES,
        field_types: &[FieldType::Text, FieldType::Json],
    },
    MetadataDef {
        name: ORDERING_KEY,
        field_types: &[FieldType::Text],
    },
    MetadataDef {
        name: SUBSCRIPTION,
        field_types: &[FieldType::Text],
    },
    MetadataDef {
        name: DELIVERY_ATTEMPT,
        field_types: &[FieldType::Bigint],
    },
];

/// The `pubsub` connector.
#[derive(Debug, Default, Clone, Copy)]
pub struct PubSubConnector;

impl pubsub_engine_spi::Connector for PubSubConnector {
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
        KNOWN_OPTIONS.as_slice()
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
        let written = options.clone();
        let profile = profile_from_options(options)?;
        let mut table = table_from_options(options)?;
        // A changelog keeps each row's changes in order: one stream per subscription
        // reads it (`per-key`), the default for the format.
        if let PubSubTable::Source(config) = &mut table {
            if schema.format == Format::DebeziumJson {
                match written.get(pubsub_table_options::ORDERING_MODE) {
                    None => config.ordering_mode = pubsub_schema::OrderingMode::PerKey,
                    Some(v) if config.ordering_mode != pubsub_schema::OrderingMode::PerKey => {
                        anyhow::bail!(
                            "option '{}' is invalid: must be 'per-key' (the default) with 'format' = 'debezium_json': the changes of one row must be read in order, was '{v}'",
                            pubsub_table_options::ORDERING_MODE
                        )
                    }
                    Some(_) => {}
                }
            }
        }
        // Every rule lives in the builders; for SQL their rejection names the key and
        // the value as written.
        match &table {
            PubSubTable::Source(config) => {
                PubSubSource::from_config(profile.clone(), config.clone())
                    .map_err(|e| sql_error_as_written(e, &written))?;
            }
            PubSubTable::Sink(config) => {
                PubSubSink::from_config(profile.clone(), config.clone())
                    .map_err(|e| sink_sql_error(e, &written))?;
            }
        }
        pubsub_engine_spi::Connector::from_config(self, name, profile, table, schema)
    }

    /// The builder's rules for a source (errors name the builder option), and the
    /// table's columns: a sink writes only `ordering-key` metadata, `raw_string` needs one
    /// `value TEXT` column.
    fn check_config(
        &self,
        profile: &PubSubProfile,
        table: &PubSubTable,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<()> {
        match table {
            PubSubTable::Source(config) => {
                PubSubSource::from_config(profile.clone(), config.clone())?;
                check_event_time(config, schema)?;
                anyhow::ensure!(
                    schema.format != Format::DebeziumJson
                        || config.ordering_mode == pubsub_schema::OrderingMode::PerKey,
                    "a source of format 'debezium_json' reads with ordering mode 'per-key': the changes of one row must be read in order"
                );
            }
            PubSubTable::Sink(config) => {
                PubSubSink::from_config(profile.clone(), config.clone())?;
                check_sink_metadata(schema, config.publisher.message_ordering)?;
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
        Ok(())
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

    /// A sink with `sink.record-id-attribute` stamps record ids.
    fn sink_record_ids(&self, _profile: &PubSubProfile, table: &PubSubTable) -> bool {
        matches!(table, PubSubTable::Sink(s) if s.record_id_attribute.is_some())
    }

    /// A source with `scan.dedup.attribute` drops copies by that id (decision 0046).
    fn source_dedup(
        &self,
        _profile: &PubSubProfile,
        table: &PubSubTable,
    ) -> Option<pubsub_engine_spi::dedup::DedupSpec> {
        match table {
            PubSubTable::Source(s) => s.dedup.as_ref().map(crate::source::dedup_spec),
            PubSubTable::Sink(_) => None,
        }
    }

    /// A source fills the record key: the deduplication attribute's value, or the
    /// subscription and message id (`pubsub_engine_spi::record_id`).
    fn source_record_keys(&self) -> bool {
        true
    }

    /// A source table's `WATERMARK FOR` column is its event time (decision 0037).
    fn event_time_column(&self) -> bool {
        true
    }

    /// Without one, a row's event time is its message's publish time (or the value of
    /// `scan.event-time.attribute`).
    fn own_event_time(&self) -> bool {
        true
    }

    /// Format `avro`: the columns of the topic's Avro schema
    /// ([`crate::avro_columns::derived_columns`]). Other formats derive none.
    fn derive_fields(
        &self,
        profile: &PubSubProfile,
        table: &PubSubTable,
        schema: &ConnectionSchema,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<SourceField>>>> {
        if schema.format != Format::Avro {
            return None;
        }
        let (profile, table) = (profile.clone(), table.clone());
        Some(Box::pin(crate::avro_columns::derived_columns(
            profile, table,
        )))
    }

    /// Format `avro`, a sink: its columns can be written under the revision its topic
    /// accepts ([`crate::avro_columns::check_sink_columns`]; the start checks again).
    fn check_fields(
        &self,
        profile: &PubSubProfile,
        table: &PubSubTable,
        schema: &ConnectionSchema,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        match table {
            PubSubTable::Sink(config) if schema.format == Format::Avro => {
                Some(Box::pin(crate::avro_columns::check_sink_columns(
                    profile.clone(),
                    config.clone(),
                    schema.clone(),
                )))
            }
            _ => None,
        }
    }

    /// Checks the options against the checkpoint interval, creates missing subscriptions,
    /// runs the startup checks and applies the start position (seek once per subscription:
    /// on a restore only subscriptions added since) before any subtask reads (SPEC 5.4,
    /// 5.5). Errors no restart can fix are [`ConfigError`]s (the CLI exits 2).
    fn prepare_source(
        &self,
        profile: &PubSubProfile,
        table: &PubSubTable,
        ctx: PrepareContext,
    ) -> BoxFuture<'static, anyhow::Result<()>> {
        let PubSubTable::Source(config) = table.clone() else {
            return Box::pin(async { Ok(()) });
        };
        let profile = profile.clone();
        Box::pin(async move {
            let source = PubSubSource::from_config(profile, config).map_err(ConfigError::wrap)?;
            // Each subtask records in its state which subscriptions were positioned, so a
            // restore positions only the ones added since.
            let decisions = crate::source::start_position::SeekDecisions {
                recorded: ctx.recorded_decision.as_ref(),
                log: ctx.decision_log.clone(),
            };
            crate::source::prepare::prepare(
                &source,
                &ctx.restored_subtasks,
                &decisions,
                ctx.checkpoint_interval,
            )
            .await?;
            Ok(())
        })
    }

    /// A dead reader's messages come back when their last lease extension runs out: the
    /// lease extension's upper bound (`scan.ack.max-duration-per-extension`, else the
    /// stream ack deadline the reader opens its streams with, 60 s).
    fn redelivery_horizon(
        &self,
        _profile: &PubSubProfile,
        table: &PubSubTable,
    ) -> std::time::Duration {
        let PubSubTable::Source(config) = table else {
            return std::time::Duration::ZERO;
        };
        crate::source::PubSubSubscriberOptions::from_config(&config.subscriber)
            .ok()
            .and_then(|o| o.lease_extension())
            .unwrap_or(crate::source::DEFAULT_STREAM_ACK_DEADLINE)
    }

    /// A subscription hands each message to one reader: two source tables on one
    /// subscription would each see part of it. Keyed by the resource name alone, not the
    /// endpoint: `localhost:8085` and `127.0.0.1:8085` are one emulator.
    fn exclusive_resources(&self, profile: &PubSubProfile, table: &PubSubTable) -> Vec<String> {
        match table {
            PubSubTable::Source(s) => s
                .subscriptions
                .iter()
                .map(|s| {
                    format!(
                        "subscription {}",
                        crate::client::subscription_path(&profile.project, &s.id)
                    )
                })
                .collect(),
            PubSubTable::Sink(_) => Vec::new(),
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
                ConstructedOperator::Source(Box::new(SourceReader::new(profile, s, config)?))
            }
            PubSubTable::Sink(s) => {
                ConstructedOperator::Operator(Box::new(SinkWriter::new(profile, s, config)?))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_engine_spi::ConnectorOptions;

    fn source_error(pairs: &[(&str, &str)]) -> String {
        let mut o =
            ConnectorOptions::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let profile = profile_from_options(&mut o).unwrap();
        let PubSubTable::Source(config) = table_from_options(&mut o).unwrap() else {
            panic!("source expected")
        };
        sql_error(PubSubSource::from_config(profile, config).unwrap_err()).to_string()
    }

    /// The error `from_options` reports: the value as written in the WITH clause.
    fn written_error(pairs: &[(&str, &str)]) -> String {
        let mut o =
            ConnectorOptions::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let written = o.clone();
        let profile = profile_from_options(&mut o).unwrap();
        let PubSubTable::Source(config) = table_from_options(&mut o).unwrap() else {
            panic!("source expected")
        };
        let e = PubSubSource::from_config(profile, config).unwrap_err();
        sql_error_as_written(e, &written).to_string()
    }

    #[test]
    fn a_changelog_source_reads_per_key_and_refuses_another_ordering_mode() {
        use pubsub_engine_spi::{Connector, SourceField};
        let schema = ConnectionSchema::new(
            Format::DebeziumJson,
            vec![SourceField::new("id", FieldType::Bigint).not_null()],
        );
        let table = |extra: &[(&str, &str)]| {
            let mut pairs = vec![("project", "p"), ("subscription", "s")];
            pairs.extend_from_slice(extra);
            let mut o =
                ConnectorOptions::new(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            Connector::from_options(&PubSubConnector, "cdc", &mut o, &schema)
        };
        let c = table(&[]).unwrap();
        let PubSubTable::Source(config) =
            serde_json::from_value(c.config["table"].clone()).unwrap()
        else {
            panic!("a source")
        };
        assert_eq!(config.ordering_mode, pubsub_schema::OrderingMode::PerKey);
        let e = format!(
            "{:#}",
            table(&[("scan.ordering-mode", "none")]).unwrap_err()
        );
        assert!(
            e.contains("option 'scan.ordering-mode' is invalid: must be 'per-key' (the default) with 'format' = 'debezium_json'")
                && e.ends_with("was 'none'"),
            "{e}"
        );
        // Built from a config, the rule holds too.
        let mut o = ConnectorOptions::new(
            [("project", "p"), ("subscription", "s")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let profile = profile_from_options(&mut o).unwrap();
        let t = table_from_options(&mut o).unwrap();
        let e = Connector::check_config(&PubSubConnector, &profile, &t, &schema).unwrap_err();
        assert!(e.to_string().contains("ordering mode 'per-key'"), "{e}");
    }

    #[test]
    fn rejections_show_the_value_as_written() {
        let with = |k: &'static str, v: &'static str| {
            written_error(&[("project", "p"), ("subscription", "s"), (k, v)])
        };
        assert_eq!(
            with("scan.shutdown-timeout", "0s"),
            "option 'scan.shutdown-timeout' is invalid: must be at least 1ms, was '0s'"
        );
        assert!(with("scan.ack.max-duration-per-extension", "5000ms").ends_with("was '5000ms'"));
        assert!(with("scan.parallel-pull-count", " 0").ends_with("was ' 0'"));
        // A list names the one item that was rejected, not the whole list.
        assert!(
            written_error(&[("project", "p"), ("subscription", "a;b;a")])
                .ends_with("is listed twice, was 'a'"),
        );
    }

    #[test]
    fn builder_rejections_name_the_sql_key_and_value() {
        let base = [("project", "p"), ("subscription", "s")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            source_error(&v)
        };
        assert_eq!(
            with(&[("scan.parallel-pull-count", "0")]),
            "option 'scan.parallel-pull-count' is invalid: must be positive, was '0'"
        );
        assert_eq!(
            with(&[("scan.parallel-pull-count", "2"), ("scan.ordering-mode", "per-key")]),
            "option 'scan.parallel-pull-count' is invalid: must be 1 with 'scan.ordering-mode' 'per-key': several streams of one subscription deliver a key's messages out of order, was '2'"
        );
        assert_eq!(
            with(&[
                ("scan.ack.min-duration-per-extension", "30s"),
                ("scan.ack.max-duration-per-extension", "20s")
            ]),
            "option 'scan.ack.min-duration-per-extension' is invalid: must be less than 'scan.ack.max-duration-per-extension' (20s), was '30s'"
        );
        assert!(
            with(&[("scan.shutdown-timeout", "0s")]).starts_with("option 'scan.shutdown-timeout'")
        );
        assert!(with(&[
            ("scan.auto-create.topics", "s:t"),
            ("scan.auto-create.dead-letter.topic", "d"),
            ("scan.auto-create.dead-letter.max-delivery-attempts", "3")
        ])
        .starts_with("option 'scan.auto-create.dead-letter.max-delivery-attempts' is invalid: must be between 5 and 100 (Pub/Sub's range), was '3'"));
        assert!(with(&[
            ("scan.auto-create.topics", "s:t"),
            ("scan.auto-create.ack-deadline", "5s")
        ])
        .starts_with("option 'scan.auto-create.ack-deadline'"));
        assert!(with(&[
            ("scan.startup.mode", "timestamp"),
            ("scan.startup.timestamp-millis", "-1")
        ])
        .starts_with("option 'scan.startup.timestamp-millis'"));
        assert!(source_error(&[("project", "p"), ("subscription", "a/b")])
            .starts_with("option 'subscription' is invalid"));
        assert!(source_error(&[("project", "p"), ("subscription", "a;a")]).contains("listed twice"));
    }

    /// Event time comes from one place: a `WATERMARK FOR` column, or the publish time / an
    /// attribute with `scan.watermark.out-of-orderness`; both together are refused,
    /// naming the option, its value and the column.
    #[test]
    fn an_event_time_column_refuses_the_attribute_and_the_out_of_orderness_option() {
        let schema = |column: bool| {
            let mut s = ConnectionSchema::new(
                Format::Json,
                vec![pubsub_engine_spi::SourceField::new(
                    "ts",
                    FieldType::Timestamp,
                )],
            );
            s.event_time = column.then(|| pubsub_engine_spi::EventTime {
                column: "ts".into(),
                out_of_orderness: std::time::Duration::from_secs(1),
            });
            s
        };
        let plan = |extra: (&str, &str), column: bool| {
            let mut o = ConnectorOptions::new(
                [
                    ("project", "p"),
                    ("subscription", "s"),
                    ("emulator-endpoint", "localhost:1"),
                    extra,
                ]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
            );
            pubsub_engine_spi::Connector::from_options(
                &super::PubSubConnector,
                "t",
                &mut o,
                &schema(column),
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        for (key, value, shown) in [
            ("scan.event-time.attribute", "eventTime", "eventTime"),
            ("scan.watermark.out-of-orderness", "5s", "5s"),
        ] {
            assert_eq!(plan((key, value), false), Ok(()), "{key} alone");
            let e = plan((key, value), true).unwrap_err();
            assert!(
                e.contains(&format!(
                    "option '{key}' ('{shown}') and the table's event-time column 'ts'"
                )),
                "{e}"
            );
        }
    }
}
