//! One JSON payload into rows: each top-level object is walked once with serde_json,
//! its declared keys' values converted straight into the column buffers.

use serde::de::{DeserializeSeed, Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::column::Column;
use super::json_str::show;
use super::value::{append, kind, ColumnSpec, Scratch};
use pubsub_engine_types::TimestampFormat;

/// The payload columns of a table and the per-row state of the walk.
pub(crate) struct ObjectDecoder {
    pub cols: Vec<ColumnSpec>,
    pub tf: TimestampFormat,
    seen: Vec<bool>,
    /// Keys that equal a column name only ignoring ASCII case: (column, key).
    near: Vec<(usize, String)>,
    scratch: Scratch,
}

impl ObjectDecoder {
    pub(crate) fn new(cols: Vec<ColumnSpec>, tf: TimestampFormat) -> ObjectDecoder {
        let n = cols.len();
        ObjectDecoder {
            cols,
            tf,
            seen: vec![false; n],
            near: Vec::new(),
            scratch: Scratch::default(),
        }
    }

    /// Decodes every whitespace-separated top-level object of `text` into one row each;
    /// returns the row count. On error some rows may have been appended: the caller
    /// truncates the columns.
    pub(crate) fn decode_payload(
        &mut self,
        text: &str,
        bufs: &mut [Column],
    ) -> Result<usize, String> {
        let start = text.trim_start_matches([' ', '\t', '\n', '\r']);
        match start.as_bytes().first() {
            None => return Err("empty payload (a JSON object was expected)".to_string()),
            Some(b'{') => {}
            Some(_) => {
                let first = serde_json::Deserializer::from_str(start)
                    .into_iter::<&RawValue>()
                    .next();
                return Err(match first {
                    Some(Ok(v)) => format!(
                        "payload is a JSON {}, not an object: {}",
                        kind(v.get()),
                        show(v.get())
                    ),
                    Some(Err(e)) => format!("payload is not valid JSON: {e}"),
                    None => "empty payload (a JSON object was expected)".to_string(),
                });
            }
        }
        // The common case: one object.
        let mut de = serde_json::Deserializer::from_str(start);
        self.decode_object(&mut de, bufs)?;
        if de.end().is_ok() {
            return Ok(1);
        }
        // More after it: walk the values one by one (the first object again, too).
        for col in &self.cols {
            let b = &mut bufs[col.out];
            b.truncate(b.len() - 1);
        }
        let mut rows = 0;
        for value in serde_json::Deserializer::from_str(start).into_iter::<&RawValue>() {
            let value = value.map_err(|e| format!("payload is not valid JSON: {e}"))?;
            let raw = value.get();
            if !raw.starts_with('{') {
                return Err(format!(
                    "value {} of the payload is a JSON {}, not an object: {}",
                    rows + 1,
                    kind(raw),
                    show(raw)
                ));
            }
            self.decode_object(&mut serde_json::Deserializer::from_str(raw), bufs)?;
            rows += 1;
        }
        Ok(rows)
    }

    /// One object from `de` into one row of `bufs`.
    fn decode_object<'de>(
        &mut self,
        de: &mut serde_json::Deserializer<serde_json::de::StrRead<'de>>,
        bufs: &mut [Column],
    ) -> Result<(), String> {
        self.seen.iter_mut().for_each(|s| *s = false);
        self.near.clear();
        let mut error = None;
        let walk = RowSeed {
            d: self,
            bufs,
            error: &mut error,
        };
        if let Err(e) = de.deserialize_map(walk) {
            return Err(error.unwrap_or_else(|| format!("payload is not valid JSON: {e}")));
        }
        for (i, col) in self.cols.iter().enumerate() {
            if self.seen[i] {
                continue;
            }
            if let Some((_, key)) = self.near.iter().find(|(c, _)| *c == i) {
                return Err(format!(
                    "{}: the payload has key '{key}' but not '{}'; keys match column names exactly, case included: rename the column (quote it, e.g. \"{key}\", if it is a reserved word)",
                    col.describe(),
                    col.name
                ));
            }
            if col.required {
                return Err(format!(
                    "{} is NOT NULL but the payload has no key '{}'",
                    col.describe(),
                    col.name
                ));
            }
            bufs[col.out].push_null();
        }
        Ok(())
    }

    fn value(&mut self, i: usize, raw: &str, bufs: &mut [Column]) -> Result<(), String> {
        let col = &self.cols[i];
        if self.seen[i] {
            return Err(format!(
                "{}: the payload has key '{}' twice",
                col.describe(),
                col.name
            ));
        }
        self.seen[i] = true;
        let buf = &mut bufs[col.out];
        if raw == "null" {
            if col.required {
                return Err(format!(
                    "{} is NOT NULL but the value is null",
                    col.describe()
                ));
            }
            buf.push_null();
            return Ok(());
        }
        append(raw, col, self.tf, buf, &mut self.scratch)
            .map_err(|e| format!("{}: {e}", col.describe()))
    }
}

/// Walks one object; a refused value is left in `error` (serde_json's own error then
/// only stops the walk).
struct RowSeed<'a> {
    d: &'a mut ObjectDecoder,
    bufs: &'a mut [Column],
    error: &'a mut Option<String>,
}

enum Key {
    Column(usize),
    /// Equal to a column name ignoring ASCII case only.
    Near(usize, String),
    Other,
}

struct KeySeed<'a>(&'a [ColumnSpec]);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: serde::de::Error>(self, k: &str) -> Result<Key, E> {
        if let Some(i) = self.0.iter().position(|c| c.name == k) {
            return Ok(Key::Column(i));
        }
        Ok(
            match self.0.iter().position(|c| c.name.eq_ignore_ascii_case(k)) {
                Some(i) => Key::Near(i, k.to_string()),
                None => Key::Other,
            },
        )
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed(&self.d.cols))? {
            match key {
                Key::Column(i) => {
                    let raw: &'de RawValue = map.next_value()?;
                    if let Err(e) = self.d.value(i, raw.get(), self.bufs) {
                        *self.error = Some(e);
                        return Err(serde::de::Error::custom("refused value"));
                    }
                }
                Key::Near(i, k) => {
                    self.d.near.push((i, k));
                    map.next_value::<IgnoredAny>()?;
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}
