//! A connector for planning tests: tables in memory that build no operator.

use serde::{Deserialize, Serialize};

use pubsub_engine_spi::{
    Connection, ConnectionSchema, ConnectionType, Connector, ConnectorMetadata, ConnectorOptions,
    ConstructedOperator, FieldType, MetadataDef, OperatorConfig,
};

/// Plans only: a source or sink table that may consume an exclusive `resource` and
/// route by a `key` column; builds no operator.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mem;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemTable {
    pub(crate) sink: bool,
    pub(crate) resource: Option<String>,
    pub(crate) key: Option<String>,
    #[serde(default)]
    pub(crate) stamp: bool,
}

impl Connector for Mem {
    type ProfileT = ();
    type TableT = MemTable;
    fn name(&self) -> &'static str {
        "mem"
    }
    fn metadata(&self) -> ConnectorMetadata {
        ConnectorMetadata {
            id: "mem".into(),
            name: "mem".into(),
            description: "test".into(),
            source: true,
            sink: true,
            table_config: "{}".into(),
            connection_config: None,
        }
    }
    fn metadata_defs(&self) -> &'static [MetadataDef] {
        &[MetadataDef {
            name: "id",
            field_types: &[FieldType::Text],
        }]
    }
    fn known_options(&self) -> &'static [&'static str] {
        &["role", "resource", "key", "stamp"]
    }
    fn table_type(&self, _: &(), t: &MemTable) -> ConnectionType {
        if t.sink {
            ConnectionType::Sink
        } else {
            ConnectionType::Source
        }
    }
    fn from_options(
        &self,
        name: &str,
        o: &mut ConnectorOptions,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        let table = MemTable {
            sink: o.pull_str("role")? == "sink",
            resource: o.pull_opt_str("resource")?,
            key: o.pull_opt_str("key")?,
            stamp: o.pull_opt_bool("stamp")?.unwrap_or(false),
        };
        Connector::from_config(self, name, (), table, schema)
    }
    fn make_operator(
        &self,
        _: (),
        _: MemTable,
        _: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator> {
        anyhow::bail!("planning tests build no operator")
    }
    fn exclusive_resources(&self, _: &(), t: &MemTable) -> Vec<String> {
        t.resource.iter().cloned().collect()
    }
    fn sink_key(&self, _: &(), t: &MemTable, _: &ConnectionSchema) -> Option<String> {
        t.key.clone().filter(|_| t.sink)
    }
    fn sink_record_ids(&self, _: &(), t: &MemTable) -> bool {
        t.sink && t.stamp
    }
    fn source_record_keys(&self) -> bool {
        true
    }
    fn own_event_time(&self) -> bool {
        true
    }
}
