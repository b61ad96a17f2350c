//! Canonical JSON text for JSON columns: no whitespace, object keys sorted by their
//! UTF-8 bytes (a duplicate key is refused: keeping one of its values would silently drop
//! the other),
//! strings re-escaped the way `serde_json` writes them, and numbers kept exactly as
//! written (so `12345678901234567890123` and `1e400` survive unchanged; `1.0` stays `1.0`).

use std::borrow::Cow;

use serde::de::{DeserializeSeed, Deserializer as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::json_str::{json_string, write_json_str};

/// Deepest nesting accepted (serde_json refuses deeper input when it builds values).
const MAX_DEPTH: usize = 128;

/// Appends the canonical form of the JSON value `raw` (valid JSON text, as captured by
/// serde_json) to `out`, as UTF-8.
pub fn canonicalize(raw: &str, out: &mut Vec<u8>) -> Result<(), String> {
    write_value(raw.trim(), out, 0)
}

fn write_value(raw: &str, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    match raw.as_bytes().first() {
        Some(b'{') => {
            let mut entries = parse_with(raw, Entries)?;
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            if let Some(w) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
                let key: String = w[0].0.chars().take(100).collect();
                return Err(format!("has key '{key}' twice in a nested object"));
            }
            out.push(b'{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json_str(k, out);
                out.push(b':');
                write_value(v.get(), out, depth + 1)?;
            }
            out.push(b'}');
        }
        Some(b'[') => {
            let items = parse_with(raw, Items)?;
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(v.get(), out, depth + 1)?;
            }
            out.push(b']');
        }
        Some(b'"') => {
            let s: Cow<'_, str> = json_string(raw)?;
            write_json_str(&s, out);
        }
        // Numbers and literals: already minimal, kept verbatim.
        _ => out.extend_from_slice(raw.as_bytes()),
    }
    Ok(())
}

fn parse_with<'de, V: Visitor<'de>>(raw: &'de str, v: V) -> Result<V::Value, String>
where
    V::Value: 'de,
{
    let mut de = serde_json::Deserializer::from_str(raw);
    de.deserialize_any(v)
        .map_err(|e| format!("is not valid JSON: {e}"))
}

/// The entries of JSON object `raw`, in order, repeated keys kept (callers refuse them).
pub(crate) fn entries(raw: &str) -> Result<Vec<(Cow<'_, str>, &RawValue)>, String> {
    parse_with(raw, Entries)
}

/// The items of JSON array `raw`, in order.
pub(crate) fn items(raw: &str) -> Result<Vec<&RawValue>, String> {
    parse_with(raw, Items)
}

struct Entries;

impl<'de> Visitor<'de> for Entries {
    type Value = Vec<(Cow<'de, str>, &'de RawValue)>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut v = Vec::new();
        while let Some(k) = map.next_key_seed(Key)? {
            v.push((k, map.next_value::<&'de RawValue>()?));
        }
        Ok(v)
    }
}

/// An object key, borrowed from the input unless it has escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }
    fn visit_borrowed_str<E>(self, k: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(k))
    }
    fn visit_str<E>(self, k: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(k.to_string()))
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
        let mut out = Vec::new();
        canonicalize(s, &mut out).map(|_| String::from_utf8(out).unwrap())
    }

    #[test]
    fn sorts_keys_strips_space_keeps_numbers() {
        assert_eq!(
            canon(r#" { "b" : [1, 2.50, {"z":null,"a":true}], "a" : "x\u00e9\/" , "b2":1e400 } "#)
                .unwrap(),
            r#"{"a":"xé/","b":[1,2.50,{"a":true,"z":null}],"b2":1e400}"#
        );
        // Keeping one of two values would silently drop the other.
        assert!(canon(r#"{"k":1,"k":2}"#)
            .unwrap_err()
            .contains("key 'k' twice"));
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
