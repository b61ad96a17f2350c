//! JSON access functions: `json_get_str|int|float|bool|json(doc, key_or_index, ...)`.
//!
//! A path that is absent, or leads to JSON `null`, gives SQL NULL (the documented, explicit
//! choice of these functions). A value of another type (`json_get_int` on `"abc"` or on
//! `1.5`), and a document that is not JSON, are row failures: never a NULL, never rounded
//! (SPEC 8, issue 17). `json_get_int` also takes an integer written as a JSON string, as
//! the proto3 JSON mapping writes int64 and Google's own payloads do, read as
//! `CAST(text AS BIGINT)` reads text (one grammar, issue 31).

use std::any::Any;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder,
};
use arrow::datatypes::DataType;
use datafusion_common::{exec_err, plan_err, Result};
use datafusion_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;

/// What a getter returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Want {
    Str,
    Int,
    Float,
    Bool,
    Json,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonGet {
    name: &'static str,
    want: Want,
    signature: Signature,
}

/// The name of the getter whose result is JSON text (a JSON column, not TEXT).
pub const JSON_GET_JSON: &str = "json_get_json";

/// Every JSON getter, for the catalog.
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    [
        ("json_get_str", Want::Str),
        ("json_get_int", Want::Int),
        ("json_get_float", Want::Float),
        ("json_get_bool", Want::Bool),
        (JSON_GET_JSON, Want::Json),
    ]
    .into_iter()
    .map(|(name, want)| {
        Arc::new(ScalarUDF::new_from_impl(JsonGet {
            name,
            want,
            signature: Signature::variadic_any(Volatility::Immutable),
        }))
    })
    .collect()
}

impl ScalarUDFImpl for JsonGet {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let text =
            |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
        let Some(doc) = args.first() else {
            return plan_err!(
                "{}(doc, key_or_index, ...) needs a JSON document",
                self.name
            );
        };
        if !text(doc) {
            return plan_err!(
                "{}: the document must be JSON or TEXT, was {doc}",
                self.name
            );
        }
        for (i, a) in args.iter().enumerate().skip(1) {
            if !(text(a) || a.is_integer() || *a == DataType::Null) {
                return plan_err!(
                    "{}: path element {i} must be a key (TEXT) or an array index (integer), was {a}",
                    self.name
                );
            }
        }
        Ok(match self.want {
            Want::Str | Want::Json => DataType::Utf8,
            Want::Int => DataType::Int64,
            Want::Float => DataType::Float64,
            Want::Bool => DataType::Boolean,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<_>>()?;
        let text = |a: &ArrayRef, row: usize| -> Option<String> {
            if a.is_null(row) {
                return None;
            }
            let a = arrow::compute::cast(a, &DataType::Utf8).ok()?;
            Some(a.as_string::<i32>().value(row).to_string())
        };
        let docs = arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let docs = docs.as_string::<i32>();
        let mut out = Builder::new(self.want, n);
        for row in 0..n {
            if docs.is_null(row) {
                out.null();
                continue;
            }
            // The canonical form refuses a repeated key (keeping one of its values would
            // drop the other) and keeps numbers exactly as written.
            let mut canonical = Vec::new();
            let valid = serde_json::from_str::<&RawValue>(docs.value(row))
                .map_err(|e| e.to_string())
                .and_then(|raw| {
                    pubsub_engine_format::canonical::canonicalize(raw.get(), &mut canonical)
                });
            if let Err(e) = valid {
                return exec_err!("{}: the document is not JSON: {e}", self.name);
            }
            let canonical = String::from_utf8(canonical).expect("canonical JSON is UTF-8");
            let mut at: Option<&RawValue> =
                Some(serde_json::from_str(&canonical).expect("canonical JSON parses"));
            for p in &arrays[1..] {
                let Some(v) = at else { break };
                let raw = v.get();
                at = if p.data_type().is_integer() {
                    let i = arrow::compute::cast(p, &DataType::Int64)?;
                    let i = i.as_primitive::<arrow::datatypes::Int64Type>();
                    match (i.is_valid(row), raw.starts_with('[')) {
                        (true, true) => usize::try_from(i.value(row)).ok().and_then(|i| {
                            serde_json::from_str::<Vec<&RawValue>>(raw)
                                .ok()?
                                .get(i)
                                .copied()
                        }),
                        _ => None,
                    }
                } else {
                    match (text(p, row), raw.starts_with('{')) {
                        (Some(k), true) => serde_json::from_str::<HashMap<String, &RawValue>>(raw)
                            .ok()
                            .and_then(|m| m.get(&k).copied()),
                        _ => None,
                    }
                };
            }
            match at {
                None => out.null(),
                Some(v) if v.get() == "null" => out.null(),
                Some(v) => out.push(v.get()).map_err(|found| {
                    datafusion_common::DataFusionError::Execution(format!(
                        "{}: the value at the path is {found}",
                        self.name
                    ))
                })?,
            }
        }
        Ok(ColumnarValue::Array(out.finish()))
    }
}

enum Builder {
    Str(StringBuilder, bool),
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
}

impl Builder {
    fn new(want: Want, n: usize) -> Self {
        match want {
            Want::Str => Builder::Str(StringBuilder::with_capacity(n, n * 8), false),
            Want::Json => Builder::Str(StringBuilder::with_capacity(n, n * 8), true),
            Want::Int => Builder::Int(Int64Builder::with_capacity(n)),
            Want::Float => Builder::Float(Float64Builder::with_capacity(n)),
            Want::Bool => Builder::Bool(BooleanBuilder::with_capacity(n)),
        }
    }

    fn null(&mut self) {
        match self {
            Builder::Str(b, _) => b.append_null(),
            Builder::Int(b) => b.append_null(),
            Builder::Float(b) => b.append_null(),
            Builder::Bool(b) => b.append_null(),
        }
    }

    /// Appends the value whose canonical JSON text is `raw`, or says what it is when it
    /// is not of the wanted type.
    fn push(&mut self, raw: &str) -> std::result::Result<(), String> {
        if let Builder::Str(b, true) = self {
            b.append_value(raw); // numbers exactly as written
            return Ok(());
        }
        let v: Value = serde_json::from_str(raw).map_err(|e| e.to_string())?;
        let found = || match &v {
            Value::String(s) => format!("the string {}", Value::String(s.clone())),
            _ => format!("{raw}, not of the wanted type"),
        };
        match self {
            Builder::Str(_, true) => unreachable!("appended above"),
            Builder::Str(b, false) => match &v {
                Value::String(s) => b.append_value(s),
                _ => {
                    return Err(format!(
                        "{raw}, not a string (json_get_json returns it as JSON)"
                    ))
                }
            },
            Builder::Int(b) => {
                // The number, or (proto3 JSON writes int64 as a string) the string, read by
                // the grammar and exactness of `CAST(text AS BIGINT)`: `1e2` is 100.
                let text = match &v {
                    Value::Number(_) => Some(raw),
                    Value::String(s) => Some(s.as_str()),
                    _ => None,
                };
                let i = text.and_then(|t| match super::number_text::convert(t, &DataType::Int64) {
                    Ok(datafusion_common::ScalarValue::Int64(i)) => i,
                    _ => None,
                });
                b.append_value(
                    i.ok_or_else(|| format!("{}: not an integer that fits BIGINT", found()))?,
                )
            }
            Builder::Float(b) => {
                let integer = !raw.contains(['.', 'e', 'E']);
                let f = match &v {
                    // An integer beyond 2^53 would round: refused, not rounded.
                    Value::Number(n) if integer => raw
                        .parse::<i128>()
                        .ok()
                        .filter(|i| i.unsigned_abs() <= 1 << 53)
                        .and_then(|_| n.as_f64()),
                    Value::Number(n) => n.as_f64(),
                    _ => None,
                };
                b.append_value(
                    f.ok_or_else(|| format!("{}: not a number a DOUBLE holds exactly", found()))?,
                )
            }
            Builder::Bool(b) => match &v {
                Value::Bool(x) => b.append_value(*x),
                _ => return Err(format!("{}: not a boolean", found())),
            },
        }
        Ok(())
    }

    fn finish(self) -> ArrayRef {
        match self {
            Builder::Str(mut b, _) => Arc::new(b.finish()),
            Builder::Int(mut b) => Arc::new(b.finish()),
            Builder::Float(mut b) => Arc::new(b.finish()),
            Builder::Bool(mut b) => Arc::new(b.finish()),
        }
    }
}
