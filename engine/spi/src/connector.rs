//! The `Connector` trait (Arroyo's shape) and its JSON-typed erased form used by the
//! planner and a UI.

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::operator::ConstructedOperator;
use super::options::ConnectorOptions;
use pubsub_engine_types::OperatorState;
use pubsub_engine_types::{
    ConnectionSchema, ConnectionType, Format, MetadataDef, OperatorConfig, SourceField,
    TimestampFormat,
};

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

/// What a source table's job-level preparation sees (SPEC 5.4, 5.5).
///
/// See [`Connector::prepare_source`].
#[derive(Debug, Clone, Default)]
pub struct PrepareContext {
    /// The job id (`RuntimeConfig.job_id`).
    pub job_id: String,
    /// How many processes run the job (1 unless it runs as a cluster).
    pub processes: usize,
    /// Every subtask's state of this source operator, restored from the last completed
    /// checkpoint, keyed by subtask index in the run that wrote it; empty on the job's first
    /// start (no checkpoint, or a checkpoint that holds nothing for this operator).
    ///
    /// This is the same map each subtask later finds in `SourceContext::restored_subtasks`
    /// (the operator id is `source-{table name}`), and the state each subtask put into
    /// `SourceContext::state` at its barrier. A source records a job-level fact (e.g. "the
    /// start-position seek ran") by having its subtasks write it into their `state`, so
    /// it is in every completed checkpoint; here it reads it back. Empty means no
    /// completed checkpoint covers this source: for the job this is a first start, even
    /// if an earlier run prepared and then failed before its first checkpoint completed.
    pub restored_subtasks: std::collections::BTreeMap<usize, OperatorState>,
    /// The job's checkpoint interval.
    pub checkpoint_interval: std::time::Duration,
    /// The decision an earlier start of this job recorded with `decision_log` and that no
    /// completed checkpoint may cover yet (it died, or was stopped, before one completed):
    /// a source repeats it instead of taking a new one for whatever it does not find in
    /// `restored_subtasks` (issue 16, finding 1). `None` when nothing was recorded.
    pub recorded_decision: Option<serde_json::Value>,
    /// Durably records this start's decision, before the source acts on it.
    pub decision_log: DecisionLog,
}

type RecordFn = dyn Fn(serde_json::Value) -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync;

/// Records a source table's first-start decision in the job's state location (the job
/// record, `job.json`), so that a restart that finds no completed checkpoint repeats it.
/// The default records nothing (an embedder that keeps no state between starts).
#[derive(Clone, Default)]
pub struct DecisionLog(Option<std::sync::Arc<RecordFn>>);

impl DecisionLog {
    /// A log that hands each decision to `record`.
    pub fn new(
        record: impl Fn(serde_json::Value) -> BoxFuture<'static, anyhow::Result<()>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        DecisionLog(Some(std::sync::Arc::new(record)))
    }

    /// Replaces this table's recorded decision with `decision`; returns once a restart
    /// would read it back as `PrepareContext::recorded_decision`. Errors: the write failed
    /// (the caller must not act on the decision then).
    pub async fn record(&self, decision: serde_json::Value) -> anyhow::Result<()> {
        match &self.0 {
            Some(record) => record(decision).await,
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for DecisionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "DecisionLog(durable)"
        } else {
            "DecisionLog(none)"
        })
    }
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

    /// Checks typed configs against the connector's rules (the same ones `from_options`
    /// applies, named by config field instead of `WITH` key). Called by `from_config`, so a
    /// table built from configs (a pipeline graph, the UI) is refused like a SQL table.
    /// The default accepts everything.
    fn check_config(
        &self,
        _profile: &Self::ProfileT,
        _table: &Self::TableT,
        _schema: &ConnectionSchema,
    ) -> anyhow::Result<()> {
        Ok(())
    }

    /// Builds a table from typed configs (UI and programmatic use), after `check_config`.
    fn from_config(
        &self,
        name: &str,
        profile: Self::ProfileT,
        table: Self::TableT,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        self.check_config(&profile, &table, schema)?;
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

    /// Job-level preparation of a source table: work that must happen exactly once per
    /// job start, before any subtask of any source reads (e.g. create missing
    /// subscriptions, check them, and, only on the job's first start, seek them to the
    /// start position; SPEC 5.4, 5.5). The default does nothing.
    ///
    /// When and where: once per start (first start and every restore) of the job, for
    /// every source table of the pipeline in plan order, one after the other; on process
    /// 0 of a cluster only (a single-process run is process 0). It runs after the last
    /// completed checkpoint was loaded and before any source or sink subtask is built,
    /// before any `SourceOperator::on_start`, and before the processes of a cluster are
    /// connected. The other processes cannot start their subtasks until it returned:
    /// they wait in the cluster connect, dialling process 0, whose listener only opens
    /// after every table's preparation returned. That wait counts against their
    /// `--connect-timeout`, which runs from when each of them began connecting: if
    /// process 0 is not listening by then (its preparation of every table included),
    /// they fail the start of the cluster, naming process 0 as unreachable.
    ///
    /// `ctx.restored_subtasks` holds the source operator's state from the last completed
    /// checkpoint (see [`PrepareContext`]); empty means the job's first start. A
    /// preparation that must not repeat on a restore (a seek) runs only when it finds no
    /// record of itself there; for that record to exist, the source's subtasks must write
    /// it into their `SourceContext::state` so that every checkpoint carries it.
    ///
    /// An error fails the job before anything is read (the runtime reports it as
    /// `table 'NAME': <error>`, keeping the error's chain); nothing was pulled, so nothing
    /// is left unacknowledged. Wrap an error no restart can fix (an option that does not
    /// fit `ctx.checkpoint_interval` or the resources found) in [`crate::ConfigError`]: the
    /// CLI then exits 2 and `cluster` does not restart the job.
    /// The runtime sets no deadline of its own: the future must bound every wait it
    /// makes (RPC deadlines, retry budgets), or a start can hang. Only an abort (a second
    /// stop signal) cancels it, by dropping the future. The future owns what it needs
    /// (clone from `profile` and `table`); it is `'static` so it can be spawned.
    fn prepare_source(
        &self,
        _profile: &Self::ProfileT,
        _table: &Self::TableT,
        _ctx: PrepareContext,
    ) -> BoxFuture<'static, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// How long after a process of the job died without releasing what it held the
    /// server may still keep those messages from everyone else (their lease, at most one
    /// lease extension). After an unclean stop, `--stop-when-idle` does not end the next
    /// run before this much time has passed since its start (issue 16, finding 15). Zero
    /// (the default): nothing is held for a dead reader.
    fn redelivery_horizon(
        &self,
        _profile: &Self::ProfileT,
        _table: &Self::TableT,
    ) -> std::time::Duration {
        std::time::Duration::ZERO
    }

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

    /// Whether this sink table stamps a record id on what it writes (e.g. Pub/Sub's
    /// `sink.record-id-attribute`). The planner then has the query's source give each
    /// row a record key and hands the sink each row's id as the trailing column
    /// [`RECORD_ID_COLUMN`](pubsub_engine_types::record_id::RECORD_ID_COLUMN) (see [`pubsub_engine_types::record_id`]).
    /// `false` (the default): the sink's rows have only its own columns.
    fn sink_record_ids(&self, _profile: &Self::ProfileT, _table: &Self::TableT) -> bool {
        false
    }

    /// The payload columns of a table that declares none (only `METADATA FROM` columns,
    /// or no column at all), read from the schema its external resource is bound to
    /// (e.g. the Avro schema of a Pub/Sub topic, issue 18), in that schema's order.
    /// `schema` is the table's format with its declared columns. `None` (the default):
    /// this connector derives no columns for this table, which must then declare them.
    ///
    /// The future bounds every wait it makes (RPC deadlines). Errors that no retry can fix
    /// (no schema, a field no column type holds exactly) are [`crate::ConfigError`]s; any
    /// other error is a failure to ask, worth a retry.
    fn derive_fields(
        &self,
        _profile: &Self::ProfileT,
        _table: &Self::TableT,
        _schema: &ConnectionSchema,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<SourceField>>>> {
        None
    }

    /// Checks a table's declared columns against the schema its external resource is
    /// bound to (e.g. an Avro sink's columns against the revision its topic accepts), when
    /// the pipeline is planned, so that a table that cannot work is refused before
    /// anything starts (the start may check again). `None` (the default): nothing to
    /// check. Errors as for [`derive_fields`](Self::derive_fields).
    fn check_fields(
        &self,
        _profile: &Self::ProfileT,
        _table: &Self::TableT,
        _schema: &ConnectionSchema,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        None
    }

    /// A source table that drops copies of a record by its id (decision 0046): its
    /// window and bound. Its sources then fill the metadata keys
    /// [`DEDUP_KEY`](crate::dedup::DEDUP_KEY) and
    /// [`DEDUP_PUBLISHED`](crate::dedup::DEDUP_PUBLISHED); with one process they drop
    /// copies themselves, in a cluster ([`OperatorConfig::dedup_in_dataflow`]) each query's
    /// sink operator does, behind the keyed exchange. `None` (the default): no
    /// deduplication.
    fn source_dedup(
        &self,
        _profile: &Self::ProfileT,
        _table: &Self::TableT,
    ) -> Option<crate::dedup::DedupSpec> {
        None
    }

    /// Whether this connector's sources fill the metadata key
    /// [`RECORD_KEY`](pubsub_engine_types::record_id::RECORD_KEY) with a key that is the same on every
    /// delivery of a message (a sink stamping record ids can only read from such a
    /// source). `false` by default.
    fn source_record_keys(&self) -> bool {
        false
    }

    /// Whether this connector's sources read `ConnectionSchema::event_time` (a table's
    /// `WATERMARK FOR` column) and emit watermarks from it. `false` by default: the
    /// planner then refuses a table of this connector that names an event-time column,
    /// rather than accept a setting nothing would honour.
    fn event_time_column(&self) -> bool {
        false
    }

    /// Whether this connector's sources give every row an event time of their own when
    /// the table names no event-time column (Pub/Sub: the publish time), filled into the
    /// hidden column of metadata key [`EVENT_TIME`](crate::EVENT_TIME) that a
    /// windowed query adds. `false` by default: a windowed query over such a table needs
    /// a `WATERMARK FOR` column.
    fn own_event_time(&self) -> bool {
        false
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
    /// Builds a table from its profile and table config in the connector's JSON shape
    /// (what a UI submits, or a typed config serialized; see
    /// `GraphTable` (the SQL front end)), through [`Connector::from_config`].
    ///
    /// Checks the columns first, as SQL does: at least one, no name twice,
    /// `json.timestamp-format` other than `rfc3339` only with format `json`, and every
    /// `METADATA FROM` key known to the connector with an allowed type. A profile or
    /// table config that does not deserialize into the connector's types is an error
    /// saying which.
    ///
    /// Named as Arroyo names it; where both traits are in scope (e.g. `use
    /// pubsub_engine_spi::*`), a connector calls its typed one as
    /// `Connector::from_config(self, ...)`.
    fn from_config(
        &self,
        name: &str,
        profile: serde_json::Value,
        table: serde_json::Value,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection>;
    fn make_operator(
        &self,
        connection: &Connection,
        config: OperatorConfig,
    ) -> anyhow::Result<ConstructedOperator>;
    /// See [`Connector::prepare_source`]. A profile or table config that does not
    /// deserialize becomes the future's error.
    fn prepare_source(
        &self,
        connection: &Connection,
        ctx: PrepareContext,
    ) -> BoxFuture<'static, anyhow::Result<()>>;
    /// See [`Connector::redelivery_horizon`]; zero for a config that does not deserialize.
    fn redelivery_horizon(&self, connection: &Connection) -> std::time::Duration;
    /// See [`Connector::exclusive_resources`].
    fn exclusive_resources(&self, connection: &Connection) -> Vec<String>;
    /// See [`Connector::sink_key`].
    fn sink_key(&self, connection: &Connection) -> Option<String>;
    /// See [`Connector::sink_record_ids`]; `false` for a config that does not deserialize.
    fn sink_record_ids(&self, connection: &Connection) -> bool;
    /// See [`Connector::source_dedup`]; `None` for a config that does not deserialize.
    fn source_dedup(&self, connection: &Connection) -> Option<crate::dedup::DedupSpec>;
    /// See [`Connector::source_record_keys`].
    fn source_record_keys(&self) -> bool;
    /// See [`Connector::event_time_column`].
    fn event_time_column(&self) -> bool;
    /// See [`Connector::own_event_time`].
    fn own_event_time(&self) -> bool;
    /// See [`Connector::derive_fields`]; `profile` and `table` in the connector's JSON
    /// shape (a [`Connection`]'s `config` members). Configs that do not deserialize make
    /// a future that fails, saying which.
    fn derive_fields(
        &self,
        profile: serde_json::Value,
        table: serde_json::Value,
        schema: &ConnectionSchema,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<SourceField>>>>;
    /// See [`Connector::check_fields`]; configs as for [`derive_fields`](Self::derive_fields).
    fn check_fields(
        &self,
        profile: serde_json::Value,
        table: serde_json::Value,
        schema: &ConnectionSchema,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>>;
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
        check_metadata_columns(self, name, schema)?;
        Connector::from_options(self, name, options, schema)
    }

    fn from_config(
        &self,
        name: &str,
        profile: serde_json::Value,
        table: serde_json::Value,
        schema: &ConnectionSchema,
    ) -> anyhow::Result<Connection> {
        check_columns(schema)?;
        check_metadata_columns(self, name, schema)?;
        let connector = Connector::name(self);
        let profile: C::ProfileT = serde_json::from_value(profile)
            .map_err(|e| anyhow::anyhow!("the {connector} connection profile is invalid: {e}"))?;
        let table: C::TableT = serde_json::from_value(table)
            .map_err(|e| anyhow::anyhow!("the {connector} table config is invalid: {e}"))?;
        Connector::from_config(self, name, profile, table, schema)
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

    fn prepare_source(
        &self,
        connection: &Connection,
        ctx: PrepareContext,
    ) -> BoxFuture<'static, anyhow::Result<()>> {
        let configs =
            serde_json::from_value(connection.config["profile"].clone()).and_then(|profile| {
                serde_json::from_value(connection.config["table"].clone())
                    .map(|table| (profile, table))
            });
        match configs {
            Ok((profile, table)) => Connector::prepare_source(self, &profile, &table, ctx),
            Err(e) => Box::pin(async move { Err(anyhow::Error::from(e)) }),
        }
    }

    fn redelivery_horizon(&self, connection: &Connection) -> std::time::Duration {
        let profile = serde_json::from_value(connection.config["profile"].clone());
        let table = serde_json::from_value(connection.config["table"].clone());
        let (Ok(profile), Ok(table)) = (profile, table) else {
            return std::time::Duration::ZERO;
        };
        Connector::redelivery_horizon(self, &profile, &table)
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

    fn sink_record_ids(&self, connection: &Connection) -> bool {
        let profile = serde_json::from_value(connection.config["profile"].clone());
        let table = serde_json::from_value(connection.config["table"].clone());
        match (profile, table) {
            (Ok(p), Ok(t)) => Connector::sink_record_ids(self, &p, &t),
            _ => false,
        }
    }

    fn source_dedup(&self, connection: &Connection) -> Option<crate::dedup::DedupSpec> {
        let profile = serde_json::from_value(connection.config["profile"].clone()).ok()?;
        let table = serde_json::from_value(connection.config["table"].clone()).ok()?;
        Connector::source_dedup(self, &profile, &table)
    }

    fn source_record_keys(&self) -> bool {
        Connector::source_record_keys(self)
    }

    fn event_time_column(&self) -> bool {
        Connector::event_time_column(self)
    }

    fn own_event_time(&self) -> bool {
        Connector::own_event_time(self)
    }

    fn derive_fields(
        &self,
        profile: serde_json::Value,
        table: serde_json::Value,
        schema: &ConnectionSchema,
    ) -> Option<BoxFuture<'static, anyhow::Result<Vec<SourceField>>>> {
        match configs::<C>(profile, table) {
            Ok((profile, table)) => Connector::derive_fields(self, &profile, &table, schema),
            Err(e) => Some(Box::pin(async move { Err(e) })),
        }
    }

    fn check_fields(
        &self,
        profile: serde_json::Value,
        table: serde_json::Value,
        schema: &ConnectionSchema,
    ) -> Option<BoxFuture<'static, anyhow::Result<()>>> {
        match configs::<C>(profile, table) {
            Ok((profile, table)) => Connector::check_fields(self, &profile, &table, schema),
            Err(e) => Some(Box::pin(async move { Err(e) })),
        }
    }
}

/// A connection's profile and table configs in `C`'s types; the error says which does
/// not deserialize.
fn configs<C: Connector>(
    profile: serde_json::Value,
    table: serde_json::Value,
) -> anyhow::Result<(C::ProfileT, C::TableT)> {
    let profile = serde_json::from_value::<C::ProfileT>(profile)
        .map_err(|e| anyhow::anyhow!("the connection profile is invalid: {e}"))?;
    let table = serde_json::from_value::<C::TableT>(table)
        .map_err(|e| anyhow::anyhow!("the table config is invalid: {e}"))?;
    Ok((profile, table))
}

/// The column rules SQL enforces while parsing and planning (`CREATE TABLE` declares at
/// least one column, each once; `json.timestamp-format` only with format `json`), for
/// tables built from configs.
fn check_columns(schema: &ConnectionSchema) -> anyhow::Result<()> {
    anyhow::ensure!(!schema.fields.is_empty(), "no columns are declared");
    for (i, f) in schema.fields.iter().enumerate() {
        anyhow::ensure!(
            !schema.fields[..i].iter().any(|g| g.name == f.name),
            "column '{}' is declared twice",
            f.name
        );
    }
    if !matches!(schema.format, Format::Json | Format::DebeziumJson)
        && schema.timestamp_format != TimestampFormat::default()
    {
        // The option values, as SQL spells them (`raw_string`, `epoch-millis`).
        let spelled = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
        anyhow::bail!(
            "json.timestamp-format '{}' applies to formats 'json' and 'debezium_json' only, but the format is '{}'",
            spelled(serde_json::json!(schema.timestamp_format)),
            spelled(serde_json::json!(schema.format))
        );
    }
    Ok(())
}

/// Every `METADATA FROM` key is one the connector offers, and the column has one of its
/// types.
fn check_metadata_columns<C: Connector>(
    connector: &C,
    name: &str,
    schema: &ConnectionSchema,
) -> anyhow::Result<()> {
    let defs = Connector::metadata_defs(connector);
    for f in &schema.fields {
        let Some(key) = &f.metadata_key else { continue };
        let def = defs.iter().find(|d| d.name == key).ok_or_else(|| {
            let known: Vec<&str> = defs.iter().map(|d| d.name).collect();
            anyhow::anyhow!(
                "unknown metadata field '{key}' for column '{}' of {} connector '{name}' (known: {})",
                f.name,
                Connector::name(connector),
                known.join(", ")
            )
        })?;
        anyhow::ensure!(
            def.field_types.contains(&f.field_type),
            "column '{}' is METADATA FROM '{key}', which is {}, but is declared {}",
            f.name,
            def.field_types
                .iter()
                .map(|t| t.sql_name())
                .collect::<Vec<_>>()
                .join(" or "),
            f.field_type.sql_name()
        );
    }
    Ok(())
}
