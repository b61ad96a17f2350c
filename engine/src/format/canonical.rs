//! Canonical JSON text for JSON columns: no whitespace, object keys sorted by their
//! UTF-8 bytes (a duplicate key keeps its last value, as `serde_json::Value` does),
//! strings re-escaped the way `serde_json` writes them, and numbers kept exactly as
//! written (so `12345678901234567890123` and `1e400` survive unchanged; `1.0` stays `1.0`).

use serde::de::{Deserializer as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Deepest nesting accepted (serde_json refuses deeper input when it builds values).
const MAX_DEPTH: usize = 128;

/// Appends the canonical form of the JSON value `raw` (valid JSON text, as captured by
/// serde_json) to `out`.
pub(crate) fn canonicalize(raw: &str, out: &mut String) -> Result<(), String> {
    write_value(raw.trim(), out, 0)
}

fn write_value(raw: &str, out: &mut String, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    match raw.as_bytes().first() {
        Some(b'{') => {
            let mut entries = parse_with(raw, Entries)?;
            // Stable sort, so the last of equal keys is last in its run.
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            let mut first = true;
            for (i, (k, v)) in entries.iter().enumerate() {
                if entries.get(i + 1).is_some_and(|next| next.0 == *k) {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                write_string(k, out);
                out.push(':');
                write_value(v.get(), out, depth + 1)?;
            }
            out.push('}');
        }
        Some(b'[') => {
            let items = parse_with(raw, Items)?;
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(v.get(), out, depth + 1)?;
            }
            out.push(']');
        }
        Some(b'"') => {
            let s: std::borrow::Cow<'_, str> = super::value::json_string(raw)?;
            write_string(&s, out);
        }
        // Numbers and literals: already minimal, kept verbatim.
        _ => out.push_str(raw),
    }
    Ok(())
}

/// Appends `s` as a JSON string literal.
pub(crate) fn write_string(s: &str, out: &mut String) {
    // serde_json writes strings into a byte vector; reuse its escaping exactly.
    let escaped = serde_json::to_string(s).expect("a string always serializes");
    out.push_str(&escaped);
}

fn parse_with<'de, V: Visitor<'de>>(raw: &'de str, v: V) -> Result<V::Value, String>
where
    V::Value: 'de,
{
    let mut de = serde_json::Deserializer::from_str(raw);
    de.deserialize_any(v)
        .map_err(|e| format!("is not valid JSON: {e}"))
}

struct Entries;

impl<'de> Visitor<'de> for Entries {
    type Value = Vec<(String, &'de RawValue)>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            v.push((k, map.next_value::<&'de RawValue>()?));
        }
        Ok(v)
    }
}

struct Items;

impl<'de> Visitor<'de> for Items {
    type Value = Vec<&'de RawValue>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = seq.next_element::<&'de RawValue>()? {
            v.push(x);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> Result<String, String> {
        let mut out = String::new();
        canonicalize(s, &mut out).map(|_| out)
    }

    #[test]
    fn sorts_keys_strips_space_keeps_numbers() {
        assert_eq!(
            canon(r#" { "b" : [1, 2.50, {"z":null,"a":true}], "a" : "x\u00e9\/" , "b2":1e400 } "#)
                .unwrap(),
            r#"{"a":"xé/","b":[1,2.50,{"a":true,"z":null}],"b2":1e400}"#
        );
        assert_eq!(canon(r#"{"k":1,"k":2}"#).unwrap(), r#"{"k":2}"#);
        assert_eq!(
            canon("12345678901234567890123").unwrap(),
            "12345678901234567890123"
        );
        assert_eq!(canon(r#""\u0001""#).unwrap(), r#""\u0001""#);
        assert_eq!(canon("[]").unwrap(), "[]");
        assert_eq!(canon("{}").unwrap(), "{}");
    }

    #[test]
    fn refuses_lone_surrogates_and_deep_nesting() {
        assert!(canon(r#""\ud800""#).is_err());
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(canon(&deep).unwrap_err().contains("nested deeper"));
    }
}
