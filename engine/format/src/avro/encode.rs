//! Rows into Avro messages under a topic's schema revision, in its encoding. The table's
//! columns are checked against the revision once, when the writer is made: every payload
//! column needs a field of a type that can hold it, every field without a column must be
//! nullable (it is written as null); a BIGINT UNSIGNED column is refused (no Avro type
//! holds its values). What only a value can tell (a BIGINT beyond an `int` field, a
//! TIMESTAMP finer than `timestamp-millis`, a text that is no enum symbol, a NULL into a
//! field that is not nullable) fails that row.

use std::sync::Arc;

use apache_avro::types::Value;
use apache_avro::Schema;
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    Float32Type, Float64Type, Int32Type, Int64Type, TimestampNanosecondType, UInt32Type,
};

use super::decode::{exact_f32, exact_f64};
use super::json::{read_json_as, write_json};
use super::schema::{type_text, AvroEncoding, AvroSchema};
use pubsub_engine_types::FieldType;

/// Where one field of the revision gets its value.
#[derive(Debug)]
enum Source {
    /// The payload column at this position among the writer's columns.
    Column {
        at: usize,
        ty: FieldType,
        name: String,
    },
    /// No column: null, in the field's union branch `null_branch`.
    Null { null_branch: u32 },
}

#[derive(Debug)]
struct FieldPlan {
    source: Source,
    /// The field's type without its null branch, and the branch indexes if it is a union:
    /// (the value's branch, the null branch).
    target: Schema,
    branches: Option<(u32, Option<u32>)>,
}

/// Encodes rows of a table under one schema revision.
#[derive(Debug)]
pub struct AvroWriter {
    schema: Arc<AvroSchema>,
    encoding: AvroEncoding,
    fields: Vec<FieldPlan>,
}

impl AvroWriter {
    /// A writer of rows whose payload columns are `columns` (name, type), in order, under
    /// `schema` in `encoding`. Errors, naming the column and the schema field, if a column
    /// has no field, a field's type cannot hold its column's values, or a field without a
    /// column is not nullable.
    pub fn new(
        schema: Arc<AvroSchema>,
        encoding: AvroEncoding,
        columns: &[(String, FieldType)],
    ) -> Result<AvroWriter, String> {
        let record = schema.record();
        let at = schema.describe();
        if let Some((name, _)) = columns.iter().find(|(n, _)| !record.lookup.contains_key(n)) {
            return Err(format!(
                "column '{name}' has no field in {at}: its values could not be written"
            ));
        }
        let mut fields = Vec::with_capacity(record.fields.len());
        for f in &record.fields {
            let null_branch = match &f.schema {
                Schema::Union(u) => u
                    .variants()
                    .iter()
                    .position(|s| matches!(s, Schema::Null))
                    .map(|i| i as u32),
                _ => None,
            };
            let Some(at_col) = columns.iter().position(|(n, _)| *n == f.name) else {
                let null_branch = null_branch.ok_or_else(|| {
                    format!(
                        "field '{}' ({}) of {at} has no column in the table and is not nullable",
                        f.name,
                        type_text(&f.schema)
                    )
                })?;
                fields.push(FieldPlan {
                    source: Source::Null { null_branch },
                    target: Schema::Null,
                    branches: Some((null_branch, Some(null_branch))),
                });
                continue;
            };
            let (name, ty) = &columns[at_col];
            let candidates: Vec<(Option<u32>, &Schema)> = match &f.schema {
                Schema::Union(u) => u
                    .variants()
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| !matches!(s, Schema::Null))
                    .map(|(i, s)| (Some(i as u32), s))
                    .collect(),
                s => vec![(None, s)],
            };
            let chosen = candidates.into_iter().find_map(|(i, s)| {
                let r = schema.resolve(s).ok()?;
                writable(*ty, r).then(|| (i, r.clone()))
            });
            let Some((branch, target)) = chosen else {
                // Avro's widest integer is a signed `long`; a `decimal` could hold every
                // value, but has no column type yet (so no reader would give it back).
                let why = if *ty == FieldType::UBigint {
                    format!(": no Avro type holds every BIGINT UNSIGNED value exactly (a long stops at 9223372036854775807); declare the column BIGINT, or write CAST({name} AS BIGINT) in the query, which fails the row whose value does not fit")
                } else if matches!(ty, FieldType::Array(_)) {
                    ": ARRAY columns are not written to Avro yet (a JSON table writes them as JSON arrays)".to_string()
                } else {
                    String::new()
                };
                return Err(format!(
                    "column '{name}' ({}) cannot be written into field '{}' ({}) of {at}{why}",
                    ty.sql_name(),
                    f.name,
                    type_text(&f.schema)
                ));
            };
            fields.push(FieldPlan {
                source: Source::Column {
                    at: at_col,
                    ty: *ty,
                    name: name.clone(),
                },
                target,
                branches: branch.map(|b| (b, null_branch)),
            });
        }
        Ok(AvroWriter {
            schema,
            encoding,
            fields,
        })
    }

    /// The revision written.
    pub fn schema(&self) -> &AvroSchema {
        &self.schema
    }

    /// Encodes row `row` of `arrays` (the payload columns, in the order given to `new`).
    /// Errors name the column and say why the value cannot be written.
    pub(crate) fn encode_row(&self, arrays: &[&ArrayRef], row: usize) -> Result<Vec<u8>, String> {
        let mut record = Vec::with_capacity(self.fields.len());
        let fields = &self.schema.record().fields;
        for (plan, f) in self.fields.iter().zip(fields) {
            let v = match &plan.source {
                Source::Null { null_branch } => Value::Union(*null_branch, Box::new(Value::Null)),
                Source::Column { at, ty, name } => {
                    let a = arrays[*at];
                    let describe = || format!("column '{name}' ({})", ty.sql_name());
                    if a.is_null(row) {
                        match plan.branches {
                            Some((_, Some(null))) => Value::Union(null, Box::new(Value::Null)),
                            _ => {
                                return Err(format!(
                                    "{}: NULL cannot be written into field '{}' ({}), which is not nullable",
                                    describe(),
                                    f.name,
                                    type_text(&f.schema)
                                ))
                            }
                        }
                    } else {
                        let v = self.value(a, row, *ty, &plan.target).map_err(|e| {
                            format!(
                                "{}: field '{}' ({}): {e}",
                                describe(),
                                f.name,
                                type_text(&f.schema)
                            )
                        })?;
                        match plan.branches {
                            Some((b, _)) => Value::Union(b, Box::new(v)),
                            None => v,
                        }
                    }
                }
            };
            record.push((f.name.clone(), v));
        }
        let record = Value::Record(record);
        match self.encoding {
            AvroEncoding::Binary => apache_avro::to_avro_datum(&self.schema.schema, record)
                .map_err(|e| format!("the row is not valid under {}: {e}", self.schema.describe())),
            AvroEncoding::Json => {
                let mut out = Vec::with_capacity(64 * self.fields.len());
                write_json(&self.schema, &self.schema.schema, &record, &mut out)?;
                Ok(out)
            }
        }
    }

    /// The non-null value `a[row]` of SQL type `ty` as a value of Avro type `target`.
    fn value(
        &self,
        a: &ArrayRef,
        row: usize,
        ty: FieldType,
        target: &Schema,
    ) -> Result<Value, String> {
        let no_fit = |v: &dyn std::fmt::Display| format!("{v} does not fit {}", type_text(target));
        Ok(match (ty, target) {
            (FieldType::Boolean, Schema::Boolean) => Value::Boolean(a.as_boolean().value(row)),
            (FieldType::Int, _) => {
                let i = a.as_primitive::<Int32Type>().value(row);
                match target {
                    Schema::Int => Value::Int(i),
                    Schema::Long => Value::Long(i64::from(i)),
                    Schema::Double => Value::Double(f64::from(i)),
                    Schema::Float => {
                        Value::Float(exact_f32(i64::from(i)).ok_or_else(|| no_fit(&i))?)
                    }
                    _ => unreachable!("checked by writable"),
                }
            }
            (FieldType::UInt, _) => {
                let i = a.as_primitive::<UInt32Type>().value(row);
                match target {
                    Schema::Long => Value::Long(i64::from(i)),
                    Schema::Int => Value::Int(i32::try_from(i).map_err(|_| no_fit(&i))?),
                    Schema::Double => Value::Double(f64::from(i)),
                    Schema::Float => {
                        Value::Float(exact_f32(i64::from(i)).ok_or_else(|| no_fit(&i))?)
                    }
                    _ => unreachable!("checked by writable"),
                }
            }
            (FieldType::Bigint, _) => {
                let i = a.as_primitive::<Int64Type>().value(row);
                match target {
                    Schema::Long => Value::Long(i),
                    Schema::Int => Value::Int(i32::try_from(i).map_err(|_| no_fit(&i))?),
                    Schema::Double => Value::Double(exact_f64(i).ok_or_else(|| no_fit(&i))?),
                    Schema::Float => Value::Float(exact_f32(i).ok_or_else(|| no_fit(&i))?),
                    _ => unreachable!("checked by writable"),
                }
            }
            (FieldType::Double, Schema::Double) => {
                Value::Double(a.as_primitive::<Float64Type>().value(row))
            }
            (FieldType::Double, Schema::Float) => {
                let f = a.as_primitive::<Float64Type>().value(row);
                let narrow = f as f32;
                if f64::from(narrow) != f && !f.is_nan() {
                    return Err(no_fit(&f));
                }
                Value::Float(narrow)
            }
            (FieldType::Float, Schema::Float) => {
                Value::Float(a.as_primitive::<Float32Type>().value(row))
            }
            (FieldType::Float, Schema::Double) => {
                Value::Double(f64::from(a.as_primitive::<Float32Type>().value(row)))
            }
            (FieldType::Text, Schema::String) => {
                Value::String(a.as_string::<i32>().value(row).to_string())
            }
            (FieldType::Text, Schema::Enum(e)) => {
                let s = a.as_string::<i32>().value(row);
                let i = e.symbols.iter().position(|x| x == s).ok_or_else(|| {
                    format!(
                        "{s:?} is not a symbol of enum {} ({})",
                        e.name.name,
                        e.symbols.join(", ")
                    )
                })?;
                Value::Enum(i as u32, s.to_string())
            }
            (FieldType::Bytea, Schema::Bytes) => {
                Value::Bytes(a.as_binary::<i32>().value(row).to_vec())
            }
            (FieldType::Bytea, Schema::Fixed(f)) => {
                let b = a.as_binary::<i32>().value(row);
                if b.len() != f.size {
                    return Err(format!(
                        "{} bytes do not fit fixed {} of {} bytes",
                        b.len(),
                        f.name.name,
                        f.size
                    ));
                }
                Value::Fixed(f.size, b.to_vec())
            }
            (FieldType::Timestamp, _) => {
                let nanos = a.as_primitive::<TimestampNanosecondType>().value(row);
                let whole = |unit: i64| {
                    (nanos % unit == 0).then_some(nanos / unit).ok_or_else(|| {
                        format!("timestamp {nanos} ns is not a whole number of the unit of {}; writing it would truncate it", type_text(target))
                    })
                };
                match target {
                    Schema::TimestampNanos => Value::TimestampNanos(nanos),
                    Schema::TimestampMicros => Value::TimestampMicros(whole(1_000)?),
                    Schema::TimestampMillis => Value::TimestampMillis(whole(1_000_000)?),
                    _ => unreachable!("checked by writable"),
                }
            }
            (FieldType::Json, Schema::String) => {
                let text = a.as_string::<i32>().value(row);
                let mut out = Vec::new();
                let raw: &serde_json::value::RawValue = serde_json::from_str(text)
                    .map_err(|e| format!("value is not valid JSON: {e}"))?;
                crate::canonical::canonicalize(raw.get(), &mut out)?;
                Value::String(String::from_utf8(out).expect("canonical JSON is UTF-8"))
            }
            (FieldType::Json, target) => {
                read_json_as(&self.schema, target, a.as_string::<i32>().value(row), false)?
            }
            _ => unreachable!("checked by writable"),
        })
    }
}

/// Column type `ty` can be written into Avro type `s` (a resolved, non-union type); some
/// pairs are then checked per value.
fn writable(ty: FieldType, s: &Schema) -> bool {
    matches!(
        (ty, s),
        (FieldType::Boolean, Schema::Boolean)
            | (
                FieldType::Int | FieldType::Bigint | FieldType::UInt,
                Schema::Int | Schema::Long | Schema::Double | Schema::Float
            )
            | (
                FieldType::Double | FieldType::Float,
                Schema::Double | Schema::Float
            )
            | (FieldType::Text, Schema::String | Schema::Enum(_))
            | (FieldType::Bytea, Schema::Bytes | Schema::Fixed(_))
            | (
                FieldType::Timestamp,
                Schema::TimestampNanos | Schema::TimestampMicros | Schema::TimestampMillis
            )
            | (
                FieldType::Json,
                Schema::String | Schema::Record(_) | Schema::Array(_) | Schema::Map(_)
            )
    )
}
