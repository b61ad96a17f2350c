//! The `Connector` trait (Arroyo's shape) and its JSON-typed erased form used by the
//! planner and a UI.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::operator::ConstructedOperator;
use super::options::ConnectorOptions;
use super::types::{ConnectionSchema, ConnectionType, MetadataDef, OperatorConfig};

/// Description of a connector for a UI (Arroyo's `api::Connector`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorMetadata {
    pub id: String,
    pub name: String,
    pub description: String,
    pub source: bool,
    pub sink: bool,
    /// JSON Schema of the table config.
    pub table_config: String,
    /// JSON Schema of the connection profile.
    pub connection_config: Option<String>,
}

/// A configured table: which connector, read or written, its columns and its config
/// (`{"profile": ..., "table": ...}` in the connector's own JSON shape).
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    pub connector: String,
    pub name: String,
    pub connection_type: ConnectionType,
    pub schema: ConnectionSchema,
    pub config: serde_json::Value,
    pub description: String,
}

/// A connector with typed profile and table configs.
pub trait Connector: Send + Sync + 'static {
    type ProfileT: Serialize + DeserializeOwned + Send + Sync;
    type TableT: Serialize + DeserializeOwned + Send + Sync;

    /// Lower-case id used as the `connector` option value.
    fn name(&self) -> &'static str;
    fn metadata(&self) -> ConnectorMetadata;
    /// Keys allowed in `METADATA FROM 'key'`, with their SQL types.
    fn metadata_defs(&self) -> &'static [MetadataDef];
    /// Every WITH key this connector understands (for did-you-mean hints).
    fn known_options(&self) -> &'static [&'static str];
    fn table_type(&self, profile: &Self::ProfileT, table: &Self::TableT) -> ConnectionType;

    /// Builds a table from SQL `WITH` options, pulling every key it understands. Keys
    /// left over are reported by the planner. Errors name the offending key.
    fn from_options(
        &self,
        name: &str,
        options: &mut ConnectorOptions,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection>;

    /// Builds a table from typed configs (UI and programmatic use).
    fn from_config(
        &self,
        name: &str,
        profile: Self::ProfileT,
        table: Self::TableT,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        let connection_type = self.table_type(&profile, &table);
        Ok(Connection {
            connector: self.name().to_string(),
            name: name.to_string(),
            connection_type,
            schema: schema.clone(),
            config: serde_json::json!({ "profile": profile, "table": table }),
            description: format!("{} {:?}", self.name(), connection_type).to_lowercase(),
        })
    }

    /// Builds one operator subtask for a table.
    fn make_operator(
        &self,
        profile: Self::ProfileT,
        table: Self::TableT,
        config: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator>;

    /// The external resources a source table consumes exclusively (e.g. its Pub/Sub
    /// subscriptions, where each message reaches one reader only), as stable strings. Two
    /// source tables sharing any value are rejected when the pipeline is planned. Empty
    /// (the default): readers do not compete.
    fn exclusive_resources(&self, _profile: &Self::ProfileT, _table: &Self::TableT) -> Vec<String> {
        Vec::new()
    }

    /// The sink column whose equal values must all be written by one subtask (e.g. a
    /// Pub/Sub ordering key: one publisher per key keeps its order), by column name. The
    /// runtime then routes rows by that column's value across workers and processes
    /// (Timely's exchange); rows with a NULL or empty value stay on their worker. `None`
    /// (the default): rows stay on the worker that read them.
    fn sink_key(
        &self,
        _profile: &Self::ProfileT,
        _table: &Self::TableT,
        _schema: &ConnectionSchema,
    ) -> Option<String> {
        None
    }
}

/// A connector behind JSON configs, so the planner can hold any connector.
pub trait ErasedConnector: Send + Sync {
    fn name(&self) -> &'static str;
    fn metadata(&self) -> ConnectorMetadata;
    fn metadata_defs(&self) -> &'static [MetadataDef];
    fn known_options(&self) -> &'static [&'static str];
    fn from_options(
        &self,
        name: &str,
        options: &mut ConnectorOptions,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection>;
    fn make_operator(
        &self,
        connection: &Connection,
        config: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator>;
    /// See [`Connector::exclusive_resources`].
    fn exclusive_resources(&self, connection: &Connection) -> Vec<String>;
    /// See [`Connector::sink_key`].
    fn sink_key(&self, connection: &Connection) -> Option<String>;
}

impl<C: Connector> ErasedConnector for C {
    fn name(&self) -> &'static str {
        Connector::name(self)
    }

    fn metadata(&self) -> ConnectorMetadata {
        Connector::metadata(self)
    }

    fn metadata_defs(&self) -> &'static [MetadataDef] {
        Connector::metadata_defs(self)
    }

    fn known_options(&self) -> &'static [&'static str] {
        Connector::known_options(self)
    }

    fn from_options(
        &self,
        name: &str,
        options: &mut ConnectorOptions,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        let defs = Connector::metadata_defs(self);
        for f in &schema.fields {
            let Some(key) = &f.metadata_key else { continue };
            let def = defs.iter().find(|d| d.name == key).ok_or_else(|| {
                let known: Vec<&str> = defs.iter().map(|d| d.name).collect();
                anyhow::anyhow!(
                    "unknown metadata field '{key}' for column '{}' of {} connector '{name}' (known: {})",
                    f.name,
                    Connector::name(self),
                    known.join(", ")
                )
            })?;
            anyhow::ensure!(
                def.field_types.contains(&f.field_type),
                "column '{}' reads metadata '{key}', which is {}, but is declared {}",
                f.name,
                def.field_types
                    .iter()
                    .map(|t| t.sql_name())
                    .collect::<Vec<_>>()
                    .join(" or "),
                f.field_type.sql_name()
            );
        }
        Connector::from_options(self, name, options, schema)
    }

    fn make_operator(
        &self,
        connection: &Connection,
        config: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator> {
        let profile = serde_json::from_value(connection.config["profile"].clone())?;
        let table = serde_json::from_value(connection.config["table"].clone())?;
        Connector::make_operator(self, profile, table, config)
    }

    fn exclusive_resources(&self, connection: &Connection) -> Vec<String> {
        let profile = serde_json::from_value(connection.config["profile"].clone());
        let table = serde_json::from_value(connection.config["table"].clone());
        let (Ok(profile), Ok(table)) = (profile, table) else {
            return Vec::new();
        };
        Connector::exclusive_resources(self, &profile, &table)
    }

    fn sink_key(&self, connection: &Connection) -> Option<String> {
        let profile = serde_json::from_value(connection.config["profile"].clone()).ok()?;
        let table = serde_json::from_value(connection.config["table"].clone()).ok()?;
        Connector::sink_key(self, &profile, &table, &connection.schema)
    }
}
