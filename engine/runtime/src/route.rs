//! Rows on their way to a sink subtask: routed by the sink's key column so that one key
//! is written by one subtask (Timely's exchange pact), and serialized as Arrow IPC when
//! the target worker is in another process.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::array::{Array, RecordBatch, StringArray, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::util::display::array_value_to_string;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::watermarks::Mark;
use super::{Permits, Rows};

/// What flows from a source operator on: rows, or its subtask's watermark after them.
#[derive(Clone)]
pub(crate) enum Payload {
    Rows(Rows),
    Mark(Mark),
}

/// Projected rows (or a watermark) and the worker (global index) whose sink subtask
/// takes them.
#[derive(Clone)]
pub(crate) struct Routed {
    pub target: u64,
    /// The process that routed the rows: rows from another process took one of its
    /// credits at this process per row, which the sink operator here turns into permits
    /// that ack the rows back to it (see `flow.rs`).
    pub origin: u32,
    /// Within a process the rows keep their back-pressure permits until the sink task
    /// took them; rows sent to another process give theirs back when serialized. A
    /// watermark takes no permit and no credit.
    pub payload: Payload,
    /// Which input of a join the rows (or watermark) are of: 0 (its left side, and every
    /// other query's input) or 1 (its right side).
    pub side: u8,
}

impl Routed {
    /// Rows it carries (0 for a watermark).
    pub fn num_rows(&self) -> usize {
        match &self.payload {
            Payload::Rows(r) => r.batch.num_rows(),
            Payload::Mark(_) => 0,
        }
    }
}

/// Splits `batch` by the value of column `key`: rows with equal values go to the same
/// worker of `peers` (a hash that every process of the same binary computes alike);
/// rows whose value is NULL or empty stay on worker `own`. Order within a target is kept.
pub(crate) fn split_by_key(
    batch: &RecordBatch,
    key: usize,
    peers: u64,
    own: u64,
) -> anyhow::Result<Vec<(u64, RecordBatch)>> {
    // A change's key is its new row's, or its old row's for a delete (a changelog's
    // rows, see `pubsub_engine_spi::changelog`): each key's changes go to one subtask.
    let after = batch.column(key);
    let before = batch.column_by_name(&pubsub_engine_spi::changelog::before_column(
        batch.schema().field(key).name(),
    ));
    let column = match before {
        Some(b) if after.null_count() > 0 => {
            let valid = arrow::array::BooleanArray::from(
                (0..after.len())
                    .map(|i| after.is_valid(i))
                    .collect::<Vec<_>>(),
            );
            arrow::compute::kernels::zip::zip(&valid, after, b)?
        }
        _ => after.clone(),
    };
    let column = &column;
    let strings = column.as_any().downcast_ref::<StringArray>();
    let mut by_target: Vec<Vec<u32>> = vec![Vec::new(); peers as usize];
    for row in 0..batch.num_rows() {
        let target = if column.is_null(row) {
            own
        } else {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            match strings {
                Some(s) if s.value(row).is_empty() => {
                    by_target[own as usize].push(row as u32);
                    continue;
                }
                Some(s) => s.value(row).hash(&mut h),
                None => array_value_to_string(column, row)?.hash(&mut h),
            }
            h.finish() % peers
        };
        by_target[target as usize].push(row as u32);
    }
    parts(batch, by_target)
}

/// The rows of `batch` each target (worker) of `by_target` takes, as one batch per target
/// with rows, in order.
pub(crate) fn parts(
    batch: &RecordBatch,
    by_target: Vec<Vec<u32>>,
) -> anyhow::Result<Vec<(u64, RecordBatch)>> {
    let mut out = Vec::new();
    for (target, rows) in by_target.into_iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        let part = if rows.len() == batch.num_rows() {
            batch.clone()
        } else {
            take_record_batch(batch, &UInt32Array::from(rows))?
        };
        out.push((target as u64, part));
    }
    Ok(out)
}

/// What crosses the network: the target and the batch as one Arrow IPC stream, or a
/// watermark (then `ipc` is empty).
#[derive(Serialize, Deserialize)]
struct Wire {
    target: u64,
    origin: u32,
    side: u8,
    mark: Option<Mark>,
    #[serde(with = "ipc_bytes")]
    ipc: Vec<u8>,
}

impl Serialize for Routed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let (mark, ipc) = match &self.payload {
            Payload::Mark(m) => (Some(*m), Vec::new()),
            Payload::Rows(rows) => {
                let batch = &rows.batch;
                let mut ipc = Vec::new();
                {
                    let mut w = StreamWriter::try_new(&mut ipc, &batch.schema())
                        .map_err(S::Error::custom)?;
                    w.write(batch).map_err(S::Error::custom)?;
                    w.finish().map_err(S::Error::custom)?;
                }
                (None, ipc)
            }
        };
        Wire {
            target: self.target,
            origin: self.origin,
            side: self.side,
            mark,
            ipc,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Routed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let wire = Wire::deserialize(deserializer)?;
        let payload = match wire.mark {
            Some(m) => Payload::Mark(m),
            None => {
                let mut reader = StreamReader::try_new(std::io::Cursor::new(wire.ipc), None)
                    .map_err(D::Error::custom)?;
                let batch = reader
                    .next()
                    .ok_or_else(|| D::Error::custom("an empty Arrow IPC stream"))?
                    .map_err(D::Error::custom)?;
                Payload::Rows(Rows {
                    batch,
                    permits: Arc::new(Permits::none()),
                })
            }
        };
        Ok(Routed {
            target: wire.target,
            origin: wire.origin,
            side: wire.side,
            payload,
        })
    }
}

/// Bytes as one `serialize_bytes` call: Timely's bincode would otherwise write a
/// `Vec<u8>` element by element.
mod ipc_bytes {
    use serde::de::{SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = seq.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use pubsub_engine_spi::Watermark;

    fn batch(keys: Vec<Option<&str>>) -> RecordBatch {
        let n = keys.len() as i64;
        let schema = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int64, false),
            Field::new("k", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())),
                Arc::new(StringArray::from(keys)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn equal_keys_go_to_one_target_and_null_or_empty_stay() {
        let keys: Vec<Option<&str>> = (0..200)
            .map(|i| match i % 10 {
                0 => None,
                1 => Some(""),
                j => Some(["a", "b", "c", "d", "e", "f", "g", "h"][j - 2]),
            })
            .collect();
        let b = batch(keys.clone());
        let parts = split_by_key(&b, 1, 4, 3).unwrap();
        assert_eq!(parts.iter().map(|(_, p)| p.num_rows()).sum::<usize>(), 200);
        let mut target_of: std::collections::HashMap<String, u64> = Default::default();
        for (t, p) in &parts {
            let ks = p.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            for r in 0..p.num_rows() {
                if ks.is_null(r) || ks.value(r).is_empty() {
                    assert_eq!(*t, 3, "rows without a key stay on their worker");
                    continue;
                }
                let prev = target_of.insert(ks.value(r).to_string(), *t);
                assert!(prev.is_none_or(|p| p == *t), "key {} split", ks.value(r));
            }
        }
        assert!(
            target_of
                .values()
                .collect::<std::collections::HashSet<_>>()
                .len()
                > 1
        );
    }

    #[test]
    fn routed_rows_and_watermarks_survive_serialization() {
        let b = batch(vec![Some("x"), None, Some("y")]);
        let r = Routed {
            target: 2,
            origin: 1,
            payload: Payload::Rows(Rows {
                batch: b.clone(),
                permits: Arc::new(Permits::none()),
            }),
            side: 1,
        };
        let bytes = bincode::serialize(&r).unwrap();
        let back: Routed = bincode::deserialize(&bytes).unwrap();
        assert_eq!((back.target, back.origin, back.side), (2, 1, 1));
        let Payload::Rows(rows) = back.payload else {
            panic!("rows came back as a watermark")
        };
        assert_eq!(rows.batch, b);
        for watermark in [Watermark::EventTime(-5), Watermark::Idle] {
            let mark = Mark { from: 3, watermark };
            let r = Routed {
                target: 0,
                origin: 1,
                payload: Payload::Mark(mark),
                side: 0,
            };
            let back: Routed = bincode::deserialize(&bincode::serialize(&r).unwrap()).unwrap();
            assert!(matches!(back.payload, Payload::Mark(m) if m == mark));
        }
    }
}
