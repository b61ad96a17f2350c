//! Plain data types shared between the runtime and connectors.

use std::collections::BTreeMap;
use std::time::SystemTime;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

/// A checkpoint barrier: the point at which a source closes epoch `epoch` (SPEC 2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointBarrier {
    /// The epoch being closed; epochs start at 1 and grow by one per checkpoint.
    pub epoch: u64,
    /// The oldest epoch whose state is still needed (the last completed checkpoint + 1).
    pub min_epoch: u64,
    /// Wall-clock time at which the coordinator started this checkpoint.
    pub timestamp: SystemTime,
    /// True for the final checkpoint of a graceful stop: the source stops reading.
    pub then_stop: bool,
}

/// A subtask's event-time progress, sent in-band after its rows (Arroyo's `Watermark`;
/// issue 32, decision 0036).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Watermark {
    /// Every row this subtask emits from now on has an event time above this one
    /// (nanoseconds since the Unix epoch).
    EventTime(i64),
    /// The subtask has no input for now (`scan.watermark.idle-timeout`): it does not hold
    /// a downstream operator's watermark back until it sends an `EventTime` again.
    Idle,
}

/// How an operator is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Finish the current work (after a final checkpoint has committed).
    Graceful,
    /// Stop now; uncommitted work is released (a source nacks it).
    Immediate,
}

/// Control messages from the checkpoint coordinator to an operator subtask.
///
/// Unlike Arroyo, sources also receive `Commit`: that is the hook for
/// acknowledge-after-checkpoint (SPEC 2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlMessage {
    /// Close the current epoch (sources only; sinks see barriers through their input frontier).
    Checkpoint(CheckpointBarrier),
    /// Stop the subtask.
    Stop { mode: StopMode },
    /// Checkpoint `epoch` completed and its metadata is durable: commit everything bound to
    /// an epoch `<= epoch`.
    Commit { epoch: u64 },
}

/// Why a source's `run` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFinishType {
    /// Stopped after a final checkpoint with `then_stop`.
    Graceful,
    /// Stopped at once without a final checkpoint.
    Immediate,
    /// The input ended (bounded sources).
    Final,
}

/// Identity of one parallel subtask of an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    pub job_id: String,
    /// Stable operator id within the pipeline, e.g. `q0-source-bids`.
    pub operator_id: String,
    pub operator_name: String,
    /// This subtask's index in `0..parallelism`.
    pub task_index: usize,
    pub parallelism: usize,
    /// This run of the job in this process: every subtask of one run has the same value,
    /// a later run (a restart in the same process) another, so that subtasks may share
    /// in-memory state within one run only.
    pub run: u64,
}

/// Row format of a table's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// One JSON object per row, decoded against the declared columns; unknown fields ignored.
    Json,
    /// The whole payload as UTF-8 text in one TEXT column named `value`.
    RawString,
    /// The whole payload as bytes in one BYTEA column named `value`.
    RawBytes,
    /// Avro under the Pub/Sub schema of the topic: a source decodes each message by the
    /// schema revision it names (attributes `googclient_schema*`), a sink encodes under
    /// the topic's schema settings; columns match schema fields by name.
    Avro,
    /// A changelog in Debezium's JSON envelope: one `{"before": {..} | null, "after":
    /// {..} | null, "op": "c" | "u" | "d"}` object per change, `before` and `after` being
    /// rows of the declared columns (see [`changelog`](crate::changelog)). Written by an
    /// updating query (issue 47); an append-only query writes every row as `"c"`.
    DebeziumJson,
    /// Format `json` with `'json.unstructured' = 'true'`: the whole payload, any JSON
    /// value, in one `JSON` column named `value` (canonical text; a payload that is not
    /// JSON fails to decode); a sink writes that column's value as the payload.
    JsonUnstructured,
}

impl Format {
    /// Every accepted `format` value, for messages.
    pub const VALUES: &'static str = "json, raw_string, raw_bytes, avro or debezium_json";

    /// Parses the `format` option value.
    pub fn parse(value: &str) -> Option<Format> {
        match value {
            "json" => Some(Format::Json),
            "raw_string" => Some(Format::RawString),
            "raw_bytes" => Some(Format::RawBytes),
            "avro" => Some(Format::Avro),
            "debezium_json" => Some(Format::DebeziumJson),
            _ => None,
        }
    }

    /// The `format` option value of this format.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::RawString => "raw_string",
            Format::RawBytes => "raw_bytes",
            Format::Avro => "avro",
            Format::DebeziumJson => "debezium_json",
            Format::JsonUnstructured => "json",
        }
    }
}

/// How TIMESTAMP columns are written in JSON payloads (`json.timestamp-format`, SPEC 8).
/// Decoding: `rfc3339` accepts RFC 3339 strings (any offset or `Z`, up to 9 fractional
/// digits) and `YYYY-MM-DD HH:MM:SS[.f]` read as UTC, and refuses JSON numbers; the
/// `epoch-*` formats accept an integer JSON number (or an int64 string) in that unit.
/// Encoding: `rfc3339` writes UTC ending in `Z`; `epoch-*` writes an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimestampFormat {
    #[default]
    Rfc3339,
    EpochSeconds,
    EpochMillis,
    EpochMicros,
    EpochNanos,
}

impl TimestampFormat {
    /// Every accepted option value, for messages.
    pub const VALUES: &'static str =
        "rfc3339, epoch-seconds, epoch-millis, epoch-micros, epoch-nanos";

    /// Parses the `json.timestamp-format` option value.
    pub fn parse(value: &str) -> Option<TimestampFormat> {
        Some(match value {
            "rfc3339" => TimestampFormat::Rfc3339,
            "epoch-seconds" => TimestampFormat::EpochSeconds,
            "epoch-millis" => TimestampFormat::EpochMillis,
            "epoch-micros" => TimestampFormat::EpochMicros,
            "epoch-nanos" => TimestampFormat::EpochNanos,
            _ => return None,
        })
    }
}

/// What to do with a message that fails to deserialize.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadData {
    /// Fail the job; the message stays unacknowledged.
    #[default]
    Fail,
}

/// Whether a table is read from or written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionType {
    Source,
    Sink,
}

/// SQL column types supported so far (SPEC 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FieldType {
    Text,
    Bigint,
    Int,
    Double,
    Boolean,
    Timestamp,
    /// 32-bit float (SQL `FLOAT`/`REAL`).
    Float,
    /// Bytes (SQL `BYTEA`).
    Bytea,
    /// Any JSON value, carried as canonical JSON text (SQL `JSON`/`JSONB`).
    Json,
    /// 0 to 4294967295 (SQL `INT UNSIGNED`; issue 32).
    UInt,
    /// 0 to 18446744073709551615 (SQL `BIGINT UNSIGNED`; issue 32).
    UBigint,
    /// A list of values of one scalar type (SQL `TEXT[]`, `ARRAY<BIGINT>`; issue 48): a
    /// JSON array, elements may be `null`. Arrow `List` of the element's type.
    Array(ArrayOf),
}

/// The element type of an ARRAY column: any scalar [`FieldType`] (arrays do not nest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArrayOf {
    Text,
    Bigint,
    Int,
    Double,
    Boolean,
    Timestamp,
    Float,
    Bytea,
    Json,
    UInt,
    UBigint,
}

impl ArrayOf {
    /// The element's column type.
    pub fn field_type(self) -> FieldType {
        match self {
            ArrayOf::Text => FieldType::Text,
            ArrayOf::Bigint => FieldType::Bigint,
            ArrayOf::Int => FieldType::Int,
            ArrayOf::Double => FieldType::Double,
            ArrayOf::Boolean => FieldType::Boolean,
            ArrayOf::Timestamp => FieldType::Timestamp,
            ArrayOf::Float => FieldType::Float,
            ArrayOf::Bytea => FieldType::Bytea,
            ArrayOf::Json => FieldType::Json,
            ArrayOf::UInt => FieldType::UInt,
            ArrayOf::UBigint => FieldType::UBigint,
        }
    }

    /// The array type of elements of type `t`; `None` for an array (arrays do not nest).
    pub fn of(t: FieldType) -> Option<ArrayOf> {
        Some(match t {
            FieldType::Text => ArrayOf::Text,
            FieldType::Bigint => ArrayOf::Bigint,
            FieldType::Int => ArrayOf::Int,
            FieldType::Double => ArrayOf::Double,
            FieldType::Boolean => ArrayOf::Boolean,
            FieldType::Timestamp => ArrayOf::Timestamp,
            FieldType::Float => ArrayOf::Float,
            FieldType::Bytea => ArrayOf::Bytea,
            FieldType::Json => ArrayOf::Json,
            FieldType::UInt => ArrayOf::UInt,
            FieldType::UBigint => ArrayOf::UBigint,
            FieldType::Array(_) => return None,
        })
    }
}

impl FieldType {
    /// The Arrow type rows carry for this SQL type. TIMESTAMP is nanoseconds, no zone.
    pub fn arrow_type(self) -> DataType {
        match self {
            FieldType::Text => DataType::Utf8,
            FieldType::Bigint => DataType::Int64,
            FieldType::Int => DataType::Int32,
            FieldType::Double => DataType::Float64,
            FieldType::Boolean => DataType::Boolean,
            FieldType::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, None),
            FieldType::Float => DataType::Float32,
            FieldType::Bytea => DataType::Binary,
            // JSON travels as its canonical text; the declared SQL type (not the Arrow
            // type) tells TEXT and JSON apart in the planner and the sink.
            FieldType::Json => DataType::Utf8,
            FieldType::UInt => DataType::UInt32,
            FieldType::UBigint => DataType::UInt64,
            FieldType::Array(e) => DataType::List(std::sync::Arc::new(Field::new_list_field(
                e.field_type().arrow_type(),
                true,
            ))),
        }
    }

    /// The element type of an ARRAY column.
    pub fn element(self) -> Option<FieldType> {
        match self {
            FieldType::Array(e) => Some(e.field_type()),
            _ => None,
        }
    }

    /// SQL spelling, for messages.
    pub fn sql_name(self) -> &'static str {
        match self {
            FieldType::Text => "TEXT",
            FieldType::Bigint => "BIGINT",
            FieldType::Int => "INT",
            FieldType::Double => "DOUBLE",
            FieldType::Boolean => "BOOLEAN",
            FieldType::Timestamp => "TIMESTAMP",
            FieldType::Float => "FLOAT",
            FieldType::Bytea => "BYTEA",
            FieldType::Json => "JSON",
            FieldType::UInt => "INT UNSIGNED",
            FieldType::UBigint => "BIGINT UNSIGNED",
            FieldType::Array(e) => match e {
                ArrayOf::Text => "TEXT[]",
                ArrayOf::Bigint => "BIGINT[]",
                ArrayOf::Int => "INT[]",
                ArrayOf::Double => "DOUBLE[]",
                ArrayOf::Boolean => "BOOLEAN[]",
                ArrayOf::Timestamp => "TIMESTAMP[]",
                ArrayOf::Float => "FLOAT[]",
                ArrayOf::Bytea => "BYTEA[]",
                ArrayOf::Json => "JSON[]",
                ArrayOf::UInt => "INT UNSIGNED[]",
                ArrayOf::UBigint => "BIGINT UNSIGNED[]",
            },
        }
    }
}

/// One declared column of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceField {
    pub name: String,
    pub field_type: FieldType,
    /// NOT NULL was declared.
    pub required: bool,
    /// `METADATA FROM 'key'`: the column is filled from message metadata, not the payload.
    pub metadata_key: Option<String>,
}

impl SourceField {
    /// A nullable payload column (`name TYPE`); see [`not_null`](Self::not_null) and
    /// [`metadata_from`](Self::metadata_from).
    pub fn new(name: impl Into<String>, field_type: FieldType) -> Self {
        SourceField {
            name: name.into(),
            field_type,
            required: false,
            metadata_key: None,
        }
    }

    /// Declares the column NOT NULL.
    pub fn not_null(mut self) -> Self {
        self.required = true;
        self
    }

    /// Fills the column from message metadata `key` instead of the payload
    /// (`METADATA FROM 'key'`); the connector checks the key and the type.
    pub fn metadata_from(mut self, key: impl Into<String>) -> Self {
        self.metadata_key = Some(key.into());
        self
    }
}

/// The declared shape of a table (Arroyo's `ConnectionSchema`, reduced).
///
/// Built by hand (e.g. for a `PipelineGraph` of the SQL front end):
///
/// ```
/// use pubsub_engine_types::{ConnectionSchema, FieldType, SourceField};
/// let schema = ConnectionSchema::json(vec![
///     SourceField::new("seq", FieldType::Bigint),
///     SourceField::new("mid", FieldType::Text).not_null().metadata_from("message-id"),
/// ]);
/// assert_eq!(schema.fields.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionSchema {
    pub format: Format,
    /// `json.timestamp-format`: how TIMESTAMP columns are read from and written to JSON.
    #[serde(default)]
    pub timestamp_format: TimestampFormat,
    pub bad_data: BadData,
    pub fields: Vec<SourceField>,
    /// Event time from a column (`WATERMARK FOR`; issue 32, decision 0037); `None`: the
    /// connector's own timestamp (Pub/Sub: the publish time).
    #[serde(default)]
    pub event_time: Option<EventTime>,
}

/// A table's event time from a `TIMESTAMP` column (`WATERMARK FOR col AS col - INTERVAL`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTime {
    /// The column (declared, `TIMESTAMP`; a payload or metadata column).
    pub column: String,
    /// How far behind the highest event time seen the watermark stays.
    pub out_of_orderness: std::time::Duration,
}

impl ConnectionSchema {
    /// Columns in `format`, with the default `json.timestamp-format` (`rfc3339`) and
    /// failing on bad data.
    pub fn new(format: Format, fields: Vec<SourceField>) -> Self {
        ConnectionSchema {
            event_time: None,
            format,
            timestamp_format: TimestampFormat::default(),
            bad_data: BadData::Fail,
            fields,
        }
    }

    /// Columns of a `json` table (one JSON object per message).
    pub fn json(fields: Vec<SourceField>) -> Self {
        ConnectionSchema::new(Format::Json, fields)
    }

    /// Sets `json.timestamp-format` (format `json` only; a table with another format and
    /// a non-default timestamp format is refused when it is created).
    pub fn with_timestamp_format(mut self, timestamp_format: TimestampFormat) -> Self {
        self.timestamp_format = timestamp_format;
        self
    }

    /// The Arrow schema of the rows this table carries, in declared column order.
    pub fn arrow_schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .fields
            .iter()
            .map(|f| Field::new(&f.name, f.field_type.arrow_type(), !f.required))
            .collect();
        std::sync::Arc::new(Schema::new(fields))
    }

    /// The Arrow schema of the rows a source of this table emits: [`arrow_schema`](Self::arrow_schema),
    /// except for a changelog (`debezium_json`): every column as the change's new row,
    /// then each again as its old row, then the operation (see [`crate::changelog`]);
    /// every column may then be NULL (the new row of a delete, the old row of a create).
    pub fn rows_schema(&self) -> SchemaRef {
        if self.format != Format::DebeziumJson {
            return self.arrow_schema();
        }
        let image = |prefix: &str| -> Vec<Field> {
            self.fields
                .iter()
                .map(|f| {
                    Field::new(
                        format!("{prefix}{}", f.name),
                        f.field_type.arrow_type(),
                        true,
                    )
                })
                .collect()
        };
        let mut fields = image("");
        fields.extend(image(crate::changelog::BEFORE_PREFIX));
        fields.push(Field::new(
            crate::changelog::OP_COLUMN,
            DataType::Utf8,
            false,
        ));
        std::sync::Arc::new(Schema::new(fields))
    }

    /// The metadata columns as `(column, key)` pairs.
    pub fn metadata_fields(&self) -> Vec<MetadataField> {
        self.fields
            .iter()
            .filter_map(|f| {
                f.metadata_key.as_ref().map(|k| MetadataField {
                    field_name: f.name.clone(),
                    key: k.clone(),
                    field_type: f.field_type,
                })
            })
            .collect()
    }
}

/// Arrow field metadata key on a sink's input column filled by a source metadata column:
/// its value is that column's metadata key (`message-id`, ...). The planner sets it for
/// each query, so a sink can tell a row's source (e.g. name its message id in a dead
/// letter) without an extra column; the rows carry nothing more.
pub const SOURCE_METADATA_KEY: &str = "source-metadata";

/// A metadata column requested by a table: column `field_name` is filled from `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataField {
    pub field_name: String,
    pub key: String,
    pub field_type: FieldType,
}

/// A metadata key a connector offers (`METADATA FROM 'key'`) and the SQL types a column
/// reading it may be declared as (the first is the canonical one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataDef {
    pub name: &'static str,
    pub field_types: &'static [FieldType],
}

/// Everything an operator needs besides its typed profile and table config.
#[derive(Debug, Clone)]
pub struct OperatorConfig {
    pub format: Format,
    pub bad_data: BadData,
    /// The table's declared columns (the rows' schema for a source, the input for a sink).
    pub schema: ConnectionSchema,
    pub metadata_fields: Vec<MetadataField>,
    /// A source read by a stateful query (a window): a redelivery of a message the
    /// restored checkpoint already holds must yield no rows (issue 32, item 5).
    pub drop_replays: bool,
    /// A deduplicating source in a cluster: it fills the deduplication key and leaves the
    /// check to its queries' sink operators, behind the keyed exchange (decision 0046).
    pub dedup_in_dataflow: bool,
}

/// Progress of a connection test, streamed to a UI (Arroyo's `TestSourceMessage`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestSourceMessage {
    pub error: bool,
    pub done: bool,
    pub message: String,
}

/// Metadata key of the hidden event-time column: the event time of the row's message
/// (publish time, or the value of `scan.event-time.attribute`), TIMESTAMP, never NULL.
pub const EVENT_TIME: &str = "event-time";
/// The hidden source column holding [`EVENT_TIME`] (not visible to SQL).
pub const EVENT_TIME_COLUMN: &str = "__event_time";

/// Operator state as JSON values by key. Restored from the last completed checkpoint and
/// snapshotted at every barrier (Arroyo's global keyed table, reduced).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorState {
    pub values: BTreeMap<String, serde_json::Value>,
}
