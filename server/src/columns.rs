//! The columns of a table made in the wizard (the `schema` of a connection table body)
//! and their SQL text. Shape: `{"format": "json", "fields": [{"name", "type", "nullable",
//! "metadataKey"}]}`; types and metadata keys are those of SPEC 8.

use pubsub_engine_spi::{ArrayOf, ConnectionSchema, FieldType, Format, SourceField};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A table's payload format and columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "Columns")]
pub struct Columns {
    /// How a message payload maps to a row: `json` (one object per row, keys matched to
    /// column names), `raw_string` (the payload as one TEXT column `value`),
    /// `raw_bytes` (one BYTEA column `value`), `avro` (the Avro schema of the topic,
    /// fields matched to column names; `POST /v1/connection_tables/schema` reads its
    /// columns) or `debezium_json` (a sink only: a changelog of `{"before", "after",
    /// "op"}` objects whose rows are the columns, written by an updating aggregate).
    /// Default `json`.
    #[serde(default)]
    #[schemars(title = "Format")]
    pub format: ColumnFormat,
    /// The table's columns in order; at least one.
    #[schemars(title = "Columns", length(min = 1))]
    pub fields: Vec<Column>,
}

/// The `format` option.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ColumnFormat {
    #[default]
    Json,
    RawString,
    RawBytes,
    Avro,
    DebeziumJson,
}

/// One column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Column {
    /// Column name: the JSON key it is read from (matched exactly, case included).
    #[schemars(title = "Name", example = &"auction", length(min = 1, max = 128))]
    pub name: String,
    /// SQL type; a value that does not fit it exactly is a decode failure (SPEC 8).
    #[serde(rename = "type")]
    #[schemars(title = "Type")]
    pub ty: SqlType,
    /// An array of values of the type (`TEXT[]`: a JSON array). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[schemars(title = "Array")]
    pub array: bool,
    /// NULL allowed (a missing key reads as NULL). Default true.
    #[serde(default = "yes")]
    #[schemars(title = "Nullable")]
    pub nullable: bool,
    /// Fill the column from message metadata instead of the payload. Unset: from the
    /// payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(title = "Metadata key")]
    pub metadata_key: Option<MetadataKey>,
}

fn yes() -> bool {
    true
}

/// The SQL types of SPEC 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum SqlType {
    Text,
    Bigint,
    Int,
    Double,
    Float,
    Boolean,
    Timestamp,
    Bytea,
    Json,
    /// 0 to 4294967295.
    #[serde(rename = "INT UNSIGNED")]
    IntUnsigned,
    /// 0 to 18446744073709551615.
    #[serde(rename = "BIGINT UNSIGNED")]
    BigintUnsigned,
}

impl SqlType {
    /// The SQL type of an engine column type, and whether it is an array of it.
    pub fn of_column(t: FieldType) -> (SqlType, bool) {
        match t {
            FieldType::Array(e) => (SqlType::of(e.field_type()), true),
            t => (SqlType::of(t), false),
        }
    }

    /// The SQL type of a scalar engine column type; an array's is [`of_column`](Self::of_column).
    fn of(t: FieldType) -> SqlType {
        match t {
            FieldType::Array(_) => unreachable!("of_column takes arrays apart"),
            FieldType::Text => SqlType::Text,
            FieldType::Bigint => SqlType::Bigint,
            FieldType::Int => SqlType::Int,
            FieldType::Double => SqlType::Double,
            FieldType::Float => SqlType::Float,
            FieldType::Boolean => SqlType::Boolean,
            FieldType::Timestamp => SqlType::Timestamp,
            FieldType::Bytea => SqlType::Bytea,
            FieldType::Json => SqlType::Json,
            FieldType::UInt => SqlType::IntUnsigned,
            FieldType::UBigint => SqlType::BigintUnsigned,
        }
    }

    /// The engine column type: this type, or an array of it.
    pub fn column_type(self, array: bool) -> FieldType {
        let t = self.field_type();
        match ArrayOf::of(t) {
            Some(e) if array => FieldType::Array(e),
            _ => t,
        }
    }

    pub fn field_type(self) -> FieldType {
        match self {
            SqlType::Text => FieldType::Text,
            SqlType::Bigint => FieldType::Bigint,
            SqlType::Int => FieldType::Int,
            SqlType::Double => FieldType::Double,
            SqlType::Float => FieldType::Float,
            SqlType::Boolean => FieldType::Boolean,
            SqlType::Timestamp => FieldType::Timestamp,
            SqlType::Bytea => FieldType::Bytea,
            SqlType::Json => FieldType::Json,
            SqlType::IntUnsigned => FieldType::UInt,
            SqlType::BigintUnsigned => FieldType::UBigint,
        }
    }
}

/// `METADATA FROM` keys of a Pub/Sub table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MetadataKey {
    MessageId,
    PublishTime,
    Attributes,
    OrderingKey,
    Subscription,
    DeliveryAttempt,
}

impl MetadataKey {
    pub fn as_str(self) -> &'static str {
        match self {
            MetadataKey::MessageId => "message-id",
            MetadataKey::PublishTime => "publish-time",
            MetadataKey::Attributes => "attributes",
            MetadataKey::OrderingKey => "ordering-key",
            MetadataKey::Subscription => "subscription",
            MetadataKey::DeliveryAttempt => "delivery-attempt",
        }
    }
}

impl Columns {
    /// The engine's view: format, columns, default timestamp format, fail on bad data.
    pub fn connection_schema(&self) -> ConnectionSchema {
        let format = match self.format {
            ColumnFormat::Json => Format::Json,
            ColumnFormat::RawString => Format::RawString,
            ColumnFormat::RawBytes => Format::RawBytes,
            ColumnFormat::Avro => Format::Avro,
            ColumnFormat::DebeziumJson => Format::DebeziumJson,
        };
        let fields = self
            .fields
            .iter()
            .map(|c| {
                let mut f = SourceField::new(c.name.clone(), c.ty.column_type(c.array));
                f.required = !c.nullable;
                f.metadata_key = c.metadata_key.map(|k| k.as_str().to_string());
                f
            })
            .collect();
        ConnectionSchema::new(format, fields)
    }

    /// The `format` option value.
    pub fn format_option(&self) -> &'static str {
        match self.format {
            ColumnFormat::Json => "json",
            ColumnFormat::RawString => "raw_string",
            ColumnFormat::RawBytes => "raw_bytes",
            ColumnFormat::Avro => "avro",
            ColumnFormat::DebeziumJson => "debezium_json",
        }
    }

    /// Column definitions as in `CREATE TABLE t (...)`, one per line.
    pub fn sql_columns(&self) -> Vec<String> {
        self.fields
            .iter()
            .map(|c| {
                let mut s = format!(
                    "{} {}",
                    ident(&c.name),
                    c.ty.column_type(c.array).sql_name()
                );
                if !c.nullable {
                    s.push_str(" NOT NULL");
                }
                if let Some(k) = c.metadata_key {
                    s.push_str(&format!(" METADATA FROM '{}'", k.as_str()));
                }
                s
            })
            .collect()
    }

    /// The JSON Schema of the columns (draft-07), for the wizard.
    pub fn schema() -> serde_json::Value {
        let generator = schemars::generate::SchemaSettings::draft07().into_generator();
        serde_json::to_value(generator.into_root_schema_for::<Columns>())
            .expect("schema serializes")
    }
}

/// An SQL identifier as written in a statement: bare when it is lower-case letters,
/// digits and `_` (not starting with a digit), else double-quoted (quoted identifiers
/// keep their case, SPEC 8).
pub fn ident(name: &str) -> String {
    let bare = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if bare {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// A string literal: single-quoted, `'` doubled.
pub fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_only_when_they_must_be() {
        assert_eq!(ident("auction"), "auction");
        assert_eq!(ident("dateTime"), "\"dateTime\"");
        assert_eq!(ident("select x"), "\"select x\"");
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(literal("it's"), "'it''s'");
    }

    #[test]
    fn unsigned_types_are_named_as_sql_writes_them() {
        let cols: Columns = serde_json::from_value(serde_json::json!({"fields": [
            {"name": "a", "type": "INT UNSIGNED", "nullable": false},
            {"name": "b", "type": "BIGINT UNSIGNED"}
        ]}))
        .unwrap();
        assert_eq!(
            cols.sql_columns(),
            vec!["a INT UNSIGNED NOT NULL", "b BIGINT UNSIGNED"]
        );
        let schema = cols.connection_schema();
        assert_eq!(schema.fields[0].field_type, FieldType::UInt);
        assert_eq!(schema.fields[1].field_type, FieldType::UBigint);
        assert_eq!(SqlType::of(FieldType::UBigint), SqlType::BigintUnsigned);
        let types = Columns::schema().to_string();
        assert!(types.contains("\"BIGINT UNSIGNED\""), "{types}");
    }

    #[test]
    fn an_array_column_is_its_type_with_array_set() {
        let cols: Columns = serde_json::from_value(serde_json::json!({"fields": [
            {"name": "tags", "type": "TEXT", "array": true},
            {"name": "n", "type": "BIGINT", "array": false}
        ]}))
        .unwrap();
        assert_eq!(cols.sql_columns(), vec!["tags TEXT[]", "n BIGINT"]);
        let schema = cols.connection_schema();
        assert_eq!(schema.fields[0].field_type, FieldType::Array(ArrayOf::Text));
        assert_eq!(
            SqlType::of_column(schema.fields[0].field_type),
            (SqlType::Text, true)
        );
        // Written back without `array` when it is false.
        let back = serde_json::to_value(&cols).unwrap();
        assert_eq!(back["fields"][0]["array"], true);
        assert!(back["fields"][1].get("array").is_none(), "{back}");
    }
}
