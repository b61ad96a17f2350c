//! Request bodies -> typed configs, refusing with the JSON pointer of the offending value:
//! first the committed JSON Schemas (`schema/*.json`), then unknown keys, then the
//! connector builders' rules (the same `build()` that SQL and Rust go through).

use pubsub_connector_core::build_error::BuildError;
use pubsub_connector_core::sink::PubSubSink;
use pubsub_connector_core::source::PubSubSource;
use pubsub_schema::{PubSubProfile, PubSubTable, SourceConfig};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::columns::Columns;
use crate::error::ApiError;

/// Compiled validators of the profile, the table config (one per `type`, so errors
/// point inside the chosen variant rather than at a failed `oneOf`) and the columns.
pub struct Validators {
    profile: jsonschema::Validator,
    source: jsonschema::Validator,
    sink: jsonschema::Validator,
    columns: jsonschema::Validator,
}

fn compile(schema: &Value) -> jsonschema::Validator {
    jsonschema::draft7::new(schema).expect("the committed schemas are valid JSON Schemas")
}

/// The table schema narrowed to one definition (`SourceConfig` or `SinkConfig`).
fn variant(table: &Value, def: &str) -> Value {
    serde_json::json!({
        "$ref": format!("#/definitions/{def}"),
        "definitions": table["definitions"].clone(),
    })
}

impl Validators {
    pub fn new() -> Self {
        let table: Value =
            serde_json::from_str(pubsub_schema::TABLE_JSON).expect("table.json is JSON");
        let profile: Value =
            serde_json::from_str(pubsub_schema::PROFILE_JSON).expect("profile.json is JSON");
        Validators {
            profile: compile(&profile),
            source: compile(&variant(&table, "SourceConfig")),
            sink: compile(&variant(&table, "SinkConfig")),
            columns: compile(&Columns::schema()),
        }
    }

    /// The profile at `/config` of a request body.
    pub fn profile(&self, config: &Value) -> Result<PubSubProfile, ApiError> {
        check_schema(&self.profile, config, "/config")?;
        let profile: PubSubProfile = decode(config, "/config")?;
        // The profile's own rules (project id, endpoint) live in the builders; a source of
        // any subscription applies them.
        PubSubSource::from_config(profile.clone(), SourceConfig::new("s"))
            .map_err(|e| build_error(&e, config, "/config"))?;
        Ok(profile)
    }

    /// The table config at `/config` (with its profile) and the columns at `/schema`.
    pub fn table(
        &self,
        profile: &PubSubProfile,
        config: &Value,
        columns: &Value,
    ) -> Result<(PubSubTable, Columns), ApiError> {
        let table = self.table_config(profile, config)?;
        check_schema(&self.columns, columns, "/schema")?;
        let cols: Columns = decode(columns, "/schema")?;
        Ok((table, cols))
    }

    /// The table config alone (`/config`), checked as [`table`](Self::table) checks it.
    pub fn table_config(
        &self,
        profile: &PubSubProfile,
        config: &Value,
    ) -> Result<PubSubTable, ApiError> {
        let validator = match config.get("type").and_then(Value::as_str) {
            Some("source") => &self.source,
            Some("sink") => &self.sink,
            other => {
                return Err(ApiError::bad(
                    "/config/type",
                    format!("/config/type: 'type' must be 'source' or 'sink', was {other:?}"),
                ));
            }
        };
        check_schema(validator, config, "/config")?;
        let table: PubSubTable = decode(config, "/config")?;
        match &table {
            PubSubTable::Source(s) => {
                PubSubSource::from_config(profile.clone(), s.clone())
                    .map_err(|e| build_error(&e, config, "/config"))?;
            }
            PubSubTable::Sink(s) => {
                PubSubSink::from_config(profile.clone(), s.clone())
                    .map_err(|e| build_error(&e, config, "/config"))?;
            }
        }
        Ok(table)
    }
}

impl Default for Validators {
    fn default() -> Self {
        Self::new()
    }
}

/// The first schema violation, at `prefix` + its instance path.
fn check_schema(v: &jsonschema::Validator, instance: &Value, prefix: &str) -> Result<(), ApiError> {
    match v.iter_errors(instance).next() {
        None => Ok(()),
        Some(e) => {
            let field = format!("{prefix}{}", e.instance_path.as_str());
            Err(ApiError::bad(field.clone(), format!("{field}: {e}")))
        }
    }
}

/// Decodes `value` as `T` and refuses keys `T` does not know: a key the typed value does
/// not write back (other than an explicit `null`) would be silently ignored.
fn decode<T: DeserializeOwned + Serialize>(value: &Value, prefix: &str) -> Result<T, ApiError> {
    let typed: T = serde_json::from_value(value.clone())
        .map_err(|e| ApiError::bad(prefix, format!("{prefix}: {e}")))?;
    let back = serde_json::to_value(&typed).expect("configs serialize");
    if let Some((path, key, known)) = unknown_key(value, &back, prefix) {
        let known: Vec<&str> = known.iter().map(String::as_str).collect();
        let hint = pubsub_engine_spi::suggest(&key, &known)
            .map(|s| format!(", did you mean '{s}'?"))
            .unwrap_or_default();
        return Err(ApiError::bad(
            path.clone(),
            format!("{path}: unknown property '{key}'{hint}"),
        ));
    }
    Ok(typed)
}

/// The first key of `given` that `back` lacks: (its pointer, the key, the keys known there).
fn unknown_key(given: &Value, back: &Value, path: &str) -> Option<(String, String, Vec<String>)> {
    match (given, back) {
        (Value::Object(g), Value::Object(b)) => {
            for (k, v) in g {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match b.get(k) {
                    None if v.is_null() => {}
                    None => return Some((p, k.clone(), b.keys().cloned().collect())),
                    Some(bv) => {
                        if let Some(found) = unknown_key(v, bv, &p) {
                            return Some(found);
                        }
                    }
                }
            }
            None
        }
        (Value::Array(g), Value::Array(b)) => g
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (g, b))| unknown_key(g, b, &format!("{path}/{i}"))),
        _ => None,
    }
}

/// A builder's rejection at the field that holds the value. Builder options are named
/// by their config path in snake case (`parallel_pull_count`,
/// `publisher.retry_total_timeout`); the field is the camelCase key found under `config`
/// (with `Ms` for durations), preferring one holding the rejected value.
pub fn build_error(e: &BuildError, config: &Value, prefix: &str) -> ApiError {
    let field = field_of(e, config)
        .map(|p| format!("{prefix}{p}"))
        .unwrap_or_else(|| prefix.to_string());
    let reason = e.reason_with(|o| camel(o.rsplit('.').next().unwrap_or(o)));
    let name = camel(e.option.rsplit('.').next().unwrap_or(e.option));
    ApiError::bad(
        field,
        format!("'{name}' is invalid: {reason}, was '{}'", e.value),
    )
}

fn camel(snake: &str) -> String {
    let mut out = String::new();
    let mut up = false;
    for c in snake.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn field_of(e: &BuildError, config: &Value) -> Option<String> {
    // The profile's options, named like their SQL keys.
    match e.option {
        "project" => return Some("/project".into()),
        "emulator_endpoint" => return Some("/authentication/endpoint".into()),
        _ => {}
    }
    let mut node = config;
    let mut path = String::new();
    for seg in e.option.split('.') {
        let (p, n) = find(node, seg, &e.value)?;
        path.push_str(&p);
        node = n;
    }
    Some(path)
}

/// Where `seg` (snake case) lives under `node`: a key `segCamel` or `segCamelMs`, or a
/// split of it into an object key and a key below (`retry_total_timeout` ->
/// `retry/totalTimeoutMs`). Prefers a match holding `value`.
fn find<'a>(node: &'a Value, seg: &str, value: &str) -> Option<(String, &'a Value)> {
    let c = camel(seg);
    let mut hits = Vec::new();
    collect(node, "", &[c.clone(), format!("{c}Ms")], &mut hits);
    // `subscription` names one entry of `subscriptions` by its id.
    if seg == "subscription" {
        collect(node, "", &["id".to_string()], &mut hits);
    }
    let shown = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(h) = hits
        .iter()
        .find(|(_, v)| shown(v) == value || value.starts_with(&shown(v)))
    {
        return Some(h.clone());
    }
    if let Some(h) = hits.into_iter().next() {
        return Some(h);
    }
    let words: Vec<&str> = seg.split('_').collect();
    for i in 1..words.len() {
        let (head, tail) = (words[..i].join("_"), words[i..].join("_"));
        if let Some((p, n)) = find(node, &head, value) {
            if let Some((p2, n2)) = find(n, &tail, value) {
                return Some((format!("{p}{p2}"), n2));
            }
        }
    }
    None
}

fn collect<'a>(node: &'a Value, path: &str, keys: &[String], out: &mut Vec<(String, &'a Value)>) {
    match node {
        Value::Object(m) => {
            for (k, v) in m {
                let p = format!("{path}/{k}");
                if keys.contains(k) {
                    out.push((p.clone(), v));
                }
                collect(v, &p, keys, out);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                collect(v, &format!("{path}/{i}"), keys, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn emulator() -> PubSubProfile {
        serde_json::from_value(json!({"project": "p", "authentication": {"type": "emulator", "endpoint": "localhost:8085"}})).unwrap()
    }

    fn table_error(config: Value) -> ApiError {
        let cols = json!({"fields": [{"name": "a", "type": "BIGINT"}]});
        Validators::new()
            .table(&emulator(), &config, &cols)
            .unwrap_err()
    }

    #[test]
    fn schema_violations_point_inside_the_chosen_variant() {
        let e = table_error(
            json!({"type": "source", "subscriptions": [{"id": "s"}], "subscriber": {"parallelPullCount": "two"}}),
        );
        assert_eq!(
            e.field.as_deref(),
            Some("/config/subscriber/parallelPullCount"),
            "{e:?}"
        );
        let e = table_error(json!({"type": "sink"}));
        assert_eq!(e.field.as_deref(), Some("/config"), "{e:?}");
        assert!(e.error.contains("topic"), "{e:?}");
        let e = table_error(json!({"type": "lookup"}));
        assert_eq!(e.field.as_deref(), Some("/config/type"), "{e:?}");
    }

    #[test]
    fn builder_rules_point_at_the_field_and_name_it() {
        let v = Validators::new();
        let cols = json!({"fields": [{"name": "a", "type": "BIGINT"}]});
        let r = v.table(&emulator(), &json!({"type": "source", "subscriptions": [{"id": "s"}], "subscriber": {"parallelPullCount": 65}}), &cols);
        let e = r.unwrap_err();
        assert_eq!(
            e.field.as_deref(),
            Some("/config/subscriber/parallelPullCount"),
            "{e:?}"
        );
        assert!(e.error.contains("'parallelPullCount' is invalid"), "{e:?}");
        assert!(e.error.contains("65"), "{e:?}");
        let e =
            table_error(json!({"type": "source", "subscriptions": [{"id": "ok"}, {"id": "b/c"}]}));
        assert_eq!(
            e.field.as_deref(),
            Some("/config/subscriptions/1/id"),
            "{e:?}"
        );
        let e = table_error(
            json!({"type": "sink", "topic": "t", "publisher": {"retry": {"totalTimeoutMs": 5}, "messageOrdering": true}}),
        );
        assert_eq!(
            e.field.as_deref(),
            Some("/config/publisher/retry/totalTimeoutMs"),
            "{e:?}"
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_a_suggestion() {
        let e = table_error(
            json!({"type": "source", "subscriptions": [{"id": "s"}], "subscriber": {"parallelPullCont": 2}}),
        );
        assert_eq!(
            e.field.as_deref(),
            Some("/config/subscriber/parallelPullCont"),
            "{e:?}"
        );
        assert!(
            e.error.contains("did you mean 'parallelPullCount'"),
            "{e:?}"
        );
    }

    #[test]
    fn profile_rules_name_the_field() {
        let v = Validators::new();
        let e = v
            .profile(&json!({"project": "p", "authentication": {"type": "emulator", "endpoint": "nohost"}}))
            .unwrap_err();
        assert_eq!(
            e.field.as_deref(),
            Some("/config/authentication/endpoint"),
            "{e:?}"
        );
        let e = v
            .profile(&json!({"project": "", "authentication": {"type": "application-default"}}))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("/config/project"), "{e:?}");
        let e = v
            .profile(&json!({"authentication": {"type": "application-default"}}))
            .unwrap_err();
        assert!(e.error.contains("project"), "{e:?}");
    }
}
