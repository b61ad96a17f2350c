//! One revision of a Pub/Sub Avro schema, as a writer schema, and the column type each of
//! its fields maps to.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use apache_avro::schema::{Name, RecordSchema, ResolvedSchema, UnionSchema};
use apache_avro::Schema;

use pubsub_engine_types::FieldType;

/// How a topic's messages are encoded under its schema (Pub/Sub `Encoding`; attribute
/// `googclient_schemaencoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvroEncoding {
    /// Avro binary encoding of one datum, no container header.
    Binary,
    /// Avro's JSON encoding: a union value other than null is an object naming its branch,
    /// e.g. `{"string": "x"}`.
    Json,
}

impl AvroEncoding {
    /// Parses Pub/Sub's name, `BINARY` or `JSON`.
    pub fn parse(value: &str) -> Option<AvroEncoding> {
        match value {
            "BINARY" => Some(AvroEncoding::Binary),
            "JSON" => Some(AvroEncoding::Json),
            _ => None,
        }
    }
}

impl fmt::Display for AvroEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AvroEncoding::Binary => "BINARY",
            AvroEncoding::Json => "JSON",
        })
    }
}

/// A schema revision messages are written with: Pub/Sub's schema name
/// (`projects/P/schemas/S`), its revision id and the parsed Avro definition, whose top
/// level is a record. Shared by every message of that revision.
#[derive(Debug)]
pub struct AvroSchema {
    name: String,
    revision: String,
    pub(crate) schema: Schema,
    /// Named types by full name, for `Ref`s inside the definition.
    names: HashMap<Name, Schema>,
    /// The schema's other revisions, for a payload this revision does not read whole:
    /// Pub/Sub names the newest revision its validation accepts, and that validation
    /// ignores bytes after the record and JSON keys the revision lacks, so a payload
    /// written with one revision can be named with another (decision 0031).
    pub(crate) siblings: Vec<Arc<AvroSchema>>,
}

/// One top-level field of a revision and the column it maps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvroField {
    pub name: String,
    /// The column type holding every value of the field exactly; `None` when no column
    /// type does (e.g. `date`, `decimal`, a local timestamp, a union of two non-null types).
    pub column_type: Option<FieldType>,
    /// The field is a union with `null`.
    pub nullable: bool,
    /// The field's Avro type, as written in messages (e.g. `["null", "long"]`).
    pub avro_type: String,
}

impl AvroSchema {
    /// Parses revision `revision` of schema `name` from its Avro JSON `definition`.
    /// Errors (naming the schema and revision) if it is not valid Avro or its top level is
    /// not a record.
    pub fn parse(name: &str, revision: &str, definition: &str) -> Result<AvroSchema, String> {
        let at = format!("schema {name} revision {revision}");
        let schema =
            Schema::parse_str(definition).map_err(|e| format!("{at} is not valid Avro: {e}"))?;
        if !matches!(schema, Schema::Record(_)) {
            return Err(format!(
                "{at} is not an Avro record (its top level is {}): a message must be a record of fields",
                type_text(&schema)
            ));
        }
        let names = ResolvedSchema::try_from(&schema)
            .map_err(|e| format!("{at}: {e}"))?
            .get_names()
            .iter()
            .map(|(n, s)| (n.clone(), (*s).clone()))
            .collect();
        Ok(AvroSchema {
            name: name.to_string(),
            revision: revision.to_string(),
            schema,
            names,
            siblings: Vec::new(),
        })
    }

    /// This revision, with the schema's other revisions to decode a payload it does not
    /// read whole (a BINARY record followed by more bytes, a JSON record with a key it
    /// has no field for or without one of its fields): the one that does is the revision
    /// the payload was written with. `siblings` without this revision itself.
    pub fn with_siblings(mut self, siblings: Vec<Arc<AvroSchema>>) -> AvroSchema {
        self.siblings = siblings;
        self
    }

    /// The revisions given to [`with_siblings`](Self::with_siblings).
    pub fn siblings(&self) -> &[Arc<AvroSchema>] {
        &self.siblings
    }

    /// The schema's full name, `projects/P/schemas/S`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The revision id.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// `schema S revision R`, for messages.
    pub fn describe(&self) -> String {
        format!("schema {} revision {}", self.name, self.revision)
    }

    /// The top-level record.
    pub(crate) fn record(&self) -> &RecordSchema {
        match &self.schema {
            Schema::Record(r) => r,
            _ => unreachable!("checked by parse"),
        }
    }

    /// `s` itself, or the named type a `Ref` points to.
    pub(crate) fn resolve<'a>(&'a self, s: &'a Schema) -> Result<&'a Schema, String> {
        match s {
            Schema::Ref { name } => self
                .names
                .get(name)
                .or_else(|| {
                    self.names
                        .iter()
                        .find(|(n, _)| n.name == name.name)
                        .map(|(_, s)| s)
                })
                .ok_or_else(|| format!("{}: unknown type {}", self.describe(), name.name)),
            other => Ok(other),
        }
    }

    /// The top-level fields, in schema order, with the column types they map to: the
    /// columns of a table declared without a column list.
    pub fn fields(&self) -> Vec<AvroField> {
        self.record()
            .fields
            .iter()
            .map(|f| {
                let (inner, nullable) = match &f.schema {
                    Schema::Union(u) => match non_null(u) {
                        Some(s) => (Some(s), u.is_nullable()),
                        None => (None, u.is_nullable()),
                    },
                    s => (Some(s), false),
                };
                let column_type = inner
                    .and_then(|s| self.resolve(s).ok())
                    .and_then(column_type);
                AvroField {
                    name: f.name.clone(),
                    column_type,
                    nullable,
                    avro_type: type_text(&f.schema),
                }
            })
            .collect()
    }
}

/// The one non-null branch of a union of null and one type (in either order).
pub(crate) fn non_null(u: &UnionSchema) -> Option<&Schema> {
    let mut others = u.variants().iter().filter(|s| !matches!(s, Schema::Null));
    match (others.next(), others.next()) {
        (Some(s), None) => Some(s),
        _ => None,
    }
}

/// The column type that holds every value of Avro type `s` exactly.
pub(crate) fn column_type(s: &Schema) -> Option<FieldType> {
    Some(match s {
        Schema::Boolean => FieldType::Boolean,
        Schema::Int => FieldType::Int,
        Schema::Long => FieldType::Bigint,
        Schema::Float => FieldType::Float,
        Schema::Double => FieldType::Double,
        Schema::String | Schema::Enum(_) | Schema::Uuid => FieldType::Text,
        Schema::Bytes | Schema::Fixed(_) => FieldType::Bytea,
        Schema::TimestampMillis | Schema::TimestampMicros | Schema::TimestampNanos => {
            FieldType::Timestamp
        }
        Schema::Record(_) | Schema::Array(_) | Schema::Map(_) => FieldType::Json,
        _ => return None,
    })
}

/// Avro type `s` as its JSON text, cut to 200 characters, for messages.
pub(crate) fn type_text(s: &Schema) -> String {
    let text = match s {
        Schema::Record(r) => r.name.fullname(None),
        Schema::Enum(e) => e.name.fullname(None),
        Schema::Fixed(f) => f.name.fullname(None),
        other => serde_json::to_string(other).unwrap_or_else(|_| format!("{other:?}")),
    };
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text,
    }
}
