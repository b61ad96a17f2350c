//! Criterion benchmarks of the engine's JSON reader (`format::Deserializer`) and writer
//! (`format::Serializer`) per type mix, against bare `serde_json` into and from a derived
//! struct and against `arrow-json`, on the same payloads (issue 19, goal 3: the exact
//! decoder costs at most 1.5x bare `serde_json` parsing into a struct).
//!
//! Each mix is one criterion group; each iteration reads (or writes) the same
//! [`MESSAGES`] messages, and the throughput is set per message. Functions:
//!
//! - `read/engine`: `Deserializer::deserialize` of every payload, then `flush` (one batch).
//! - `read/serde_json`: `serde_json::from_slice` of every payload into the mix's struct,
//!   collected into a `Vec`.
//! - `read/arrow-json`: an `arrow_json` decoder fed every payload, then `flush`.
//! - `write/engine`: `Serializer::serialize` of the batch the engine decoded (one payload
//!   per row).
//! - `write/serde_json`: `serde_json::to_vec` of every struct (one payload per row).
//! - `write/arrow-json`: `LineDelimitedWriter` of the same batch into one `Vec`.
//!
//! `scripts/bench-json` runs this and prints the engine/serde_json and engine/arrow-json
//! ratios.

use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Field, Float32Type, Float64Type, Int32Type, Int64Type, Schema, SchemaRef, TimeUnit,
    TimestampNanosecondType,
};
use arrow::json::{LineDelimitedWriter, ReaderBuilder};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use pubsub_engine_format::{Deserializer, Serializer};
use pubsub_engine_types::{ConnectionSchema, FieldType, SourceField, TimestampFormat};

/// Messages read or written per iteration.
const MESSAGES: usize = 1000;

/// One type mix: the table, its payloads, the struct serde reads them into, and what
/// arrow-json reads them with.
struct Mix<T> {
    name: &'static str,
    schema: ConnectionSchema,
    payloads: Vec<Bytes>,
    /// The schema arrow-json decodes with (the engine's Arrow schema unless a column
    /// cannot be read the same way; see the mix).
    arrow_schema: SchemaRef,
    /// Checks, before anything is timed, that the engine's batch and serde's structs hold
    /// the same values (every row).
    check: Box<dyn Fn(&RecordBatch, &[T])>,
}

fn decode_engine(de: &mut Deserializer, payloads: &[Bytes]) -> RecordBatch {
    for p in payloads {
        de.deserialize(p, &[])
            .expect("the engine decodes every payload");
    }
    de.flush().expect("flush").expect("rows")
}

fn decode_arrow(schema: &SchemaRef, payloads: &[Bytes]) -> RecordBatch {
    let mut d = ReaderBuilder::new(schema.clone())
        .with_batch_size(payloads.len())
        .build_decoder()
        .expect("arrow-json decoder");
    for p in payloads {
        let used = d.decode(p).expect("arrow-json decodes every payload");
        assert_eq!(used, p.len(), "arrow-json took the whole payload");
    }
    d.flush().expect("arrow-json flush").expect("rows")
}

fn write_arrow(batch: &RecordBatch) -> Vec<u8> {
    let mut w = LineDelimitedWriter::new(Vec::with_capacity(batch.get_array_memory_size()));
    w.write(batch).expect("arrow-json writes the batch");
    w.finish().expect("arrow-json finish");
    w.into_inner()
}

fn bench_mix<T: DeserializeOwned + Serialize>(c: &mut Criterion, mix: Mix<T>) {
    let Mix {
        name,
        schema,
        payloads,
        arrow_schema,
        check,
    } = mix;
    let n = payloads.len();

    // Not timed: every path works on every payload and agrees with the others, so no
    // function below can measure a failing path.
    let mut de = Deserializer::new(&schema).expect("the mix's table is valid");
    let batch = decode_engine(&mut de, &payloads);
    assert_eq!(batch.num_rows(), n);
    let structs: Vec<T> = payloads
        .iter()
        .map(|p| serde_json::from_slice(p).expect("serde reads every payload"))
        .collect();
    check(&batch, &structs);
    let arrow_batch = decode_arrow(&arrow_schema, &payloads);
    assert_eq!(arrow_batch.num_rows(), n);
    let ser = Serializer::new(&schema);
    let written = ser.serialize(&batch).expect("the engine writes every row");
    assert_eq!(written.len(), n);
    let written: Vec<Bytes> = written.into_iter().map(Bytes::from).collect();
    assert_eq!(
        decode_engine(&mut de, &written),
        batch,
        "{name}: what the engine writes reads back to the same rows"
    );
    assert!(!write_arrow(&batch).is_empty());

    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("read/engine", |b| {
        b.iter(|| {
            for p in &payloads {
                black_box(de.deserialize(black_box(p), &[]).unwrap());
            }
            black_box(de.flush().unwrap())
        })
    });
    g.bench_function("read/serde_json", |b| {
        b.iter(|| {
            black_box(
                payloads
                    .iter()
                    .map(|p| serde_json::from_slice::<T>(black_box(p)).unwrap())
                    .collect::<Vec<T>>(),
            )
        })
    });
    g.bench_function("read/arrow-json", |b| {
        b.iter(|| {
            let mut d = ReaderBuilder::new(arrow_schema.clone())
                .with_batch_size(n)
                .build_decoder()
                .unwrap();
            for p in &payloads {
                black_box(d.decode(black_box(p)).unwrap());
            }
            black_box(d.flush().unwrap())
        })
    });
    g.bench_function("write/engine", |b| {
        b.iter(|| black_box(ser.serialize(black_box(&batch)).unwrap()))
    });
    g.bench_function("write/serde_json", |b| {
        b.iter(|| {
            black_box(
                black_box(&structs)
                    .iter()
                    .map(|s| serde_json::to_vec(s).unwrap())
                    .collect::<Vec<Vec<u8>>>(),
            )
        })
    });
    g.bench_function("write/arrow-json", |b| {
        b.iter(|| black_box(write_arrow(black_box(&batch))))
    });
    g.finish();
}

/// A small deterministic generator (xorshift64*), for payloads that are the same on every
/// run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn text(batch: &RecordBatch, col: &str, row: usize) -> Option<String> {
    let a = batch.column_by_name(col).expect(col).as_string::<i32>();
    a.is_valid(row).then(|| a.value(row).to_string())
}

fn int64(batch: &RecordBatch, col: &str, row: usize) -> Option<i64> {
    let a = batch
        .column_by_name(col)
        .expect(col)
        .as_primitive::<Int64Type>();
    a.is_valid(row).then(|| a.value(row))
}

fn nanos(batch: &RecordBatch, col: &str, row: usize) -> Option<i64> {
    let a = batch
        .column_by_name(col)
        .expect(col)
        .as_primitive::<TimestampNanosecondType>();
    a.is_valid(row).then(|| a.value(row))
}

// ---------------------------------------------------------------------------------------
// bid: the NEXMark bid, `date_time` epoch-millis. In every struct a `None` is written as
// an absent key (`skip_serializing_if`), as the engine writes a NULL.

#[derive(Debug, PartialEq, Deserialize, Serialize)]
struct Bid {
    auction: i64,
    bidder: i64,
    price: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    /// TIMESTAMP NOT NULL in epoch-millis: serde reads the integer; the engine also
    /// converts it to nanoseconds (checked for range).
    date_time: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    extra: Option<String>,
}

fn bid() -> Mix<Bid> {
    use nexmark::config::NexmarkConfig;
    use nexmark::event::{Event, EventType};
    // As nexmark/src/events.rs: the default configuration with a fixed base time.
    let config = NexmarkConfig {
        base_time: 1_436_918_400_000,
        ..NexmarkConfig::default()
    };
    let payloads = nexmark::EventGenerator::new(config)
        .with_type_filter(EventType::Bid)
        .take(MESSAGES)
        .map(|e| match e {
            Event::Bid(b) => Bytes::from(serde_json::to_vec(&b).unwrap()),
            _ => unreachable!("filtered to bids"),
        })
        .collect();
    let schema = ConnectionSchema::json(vec![
        SourceField::new("auction", FieldType::Bigint).not_null(),
        SourceField::new("bidder", FieldType::Bigint).not_null(),
        SourceField::new("price", FieldType::Bigint).not_null(),
        SourceField::new("channel", FieldType::Text),
        SourceField::new("url", FieldType::Text),
        SourceField::new("date_time", FieldType::Timestamp).not_null(),
        SourceField::new("extra", FieldType::Text),
    ])
    .with_timestamp_format(TimestampFormat::EpochMillis);
    // arrow-json reads a JSON number into a Timestamp column as a count of the column's
    // own unit, with no epoch-millis option: the closest honest equivalent is a
    // Timestamp(Millisecond) column (no conversion to nanoseconds). Its writer then writes
    // the engine's Timestamp(ns) column as an ISO 8601 string, not as epoch-millis.
    let arrow_schema = Arc::new(Schema::new(
        schema
            .arrow_schema()
            .fields()
            .iter()
            .map(|f| match f.name().as_str() {
                "date_time" => Field::new(
                    "date_time",
                    DataType::Timestamp(TimeUnit::Millisecond, None),
                    false,
                ),
                _ => f.as_ref().clone(),
            })
            .collect::<Vec<_>>(),
    ));
    Mix {
        name: "bid",
        schema,
        payloads,
        arrow_schema,
        check: Box::new(|batch, bids: &[Bid]| {
            for (row, b) in bids.iter().enumerate() {
                let got = Bid {
                    auction: int64(batch, "auction", row).unwrap(),
                    bidder: int64(batch, "bidder", row).unwrap(),
                    price: int64(batch, "price", row).unwrap(),
                    channel: text(batch, "channel", row),
                    url: text(batch, "url", row),
                    date_time: nanos(batch, "date_time", row).unwrap() / 1_000_000,
                    extra: text(batch, "extra", row),
                };
                assert_eq!(&got, b, "bid row {row}");
                assert_eq!(
                    nanos(batch, "date_time", row),
                    Some(b.date_time * 1_000_000)
                );
            }
        }),
    }
}

// ---------------------------------------------------------------------------------------
// text-1k: one TEXT column holding about 1 KiB, the end-to-end benchmark's shape.

#[derive(Debug, PartialEq, Deserialize, Serialize)]
struct Text1k {
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
}

fn text_1k() -> Mix<Text1k> {
    let mut rng = Rng(0x5eed_0001);
    const WORDS: &[&str] = &[
        "pubsub",
        "message",
        "stream",
        "engine",
        "column",
        "arrow",
        "batch",
        "checkpoint",
        "epoch",
        "timely",
        "worker",
        "topic",
        "subscription",
        "ack",
        "deadline",
        "row",
    ];
    let payloads = (0..MESSAGES)
        .map(|i| {
            let mut s = String::with_capacity(1100);
            while s.len() < 1024 {
                if !s.is_empty() {
                    s.push(' ');
                }
                s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
            }
            // Every tenth message has characters JSON must escape.
            if i % 10 == 0 {
                s.insert_str(100, "\"quoted\"\n\ttab\\back");
            }
            let body = Text1k { payload: Some(s) };
            Bytes::from(serde_json::to_vec(&body).unwrap())
        })
        .collect();
    let schema = ConnectionSchema::json(vec![SourceField::new("payload", FieldType::Text)]);
    Mix {
        name: "text-1k",
        arrow_schema: schema.arrow_schema(),
        schema,
        payloads,
        check: Box::new(|batch, rows: &[Text1k]| {
            for (row, t) in rows.iter().enumerate() {
                assert_eq!(text(batch, "payload", row), t.payload, "text-1k row {row}");
            }
        }),
    }
}

// ---------------------------------------------------------------------------------------
// numeric: INT, BIGINT, DOUBLE, FLOAT, BOOLEAN and an rfc3339 TIMESTAMP.

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
struct Numeric {
    #[serde(skip_serializing_if = "Option::is_none")]
    i: Option<i32>,
    b: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    d: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    f: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flag: Option<bool>,
    /// serde has no timestamp type: it keeps the RFC 3339 text as a `String` (no parse,
    /// no validation), where the engine parses it to nanoseconds and writes it back.
    ts: String,
}

fn numeric() -> Mix<Numeric> {
    let mut rng = Rng(0x5eed_0002);
    /// 2024-05-01T00:00:00Z in nanoseconds.
    const DAY: i64 = 1_714_521_600_000_000_000;
    let mut want_ts = Vec::new();
    let want: Vec<Numeric> = (0..MESSAGES)
        .map(|i| {
            let ms = rng.below(86_400_000) as i64;
            want_ts.push(DAY + ms * 1_000_000);
            let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
            Numeric {
                i: Some(rng.next() as i32),
                b: rng.next() as i64 >> rng.below(48),
                // Every seventh row has a NULL DOUBLE (the key is absent).
                d: (i % 7 != 0).then(|| (rng.below(1 << 40) as f64 - 5e11) / 1024.0 * 0.3),
                f: Some(rng.below(10_000_000) as f32 * 0.001 - 5000.0),
                flag: Some(rng.next() & 1 == 1),
                ts: format!("2024-05-01T{h:02}:{m:02}:{s:02}.{frac:03}Z"),
            }
        })
        .collect();
    // Floats are written as their shortest round-trip text (ryu).
    let payloads = want
        .iter()
        .map(|n| Bytes::from(serde_json::to_vec(n).unwrap()))
        .collect();
    let schema = ConnectionSchema::json(vec![
        SourceField::new("i", FieldType::Int),
        SourceField::new("b", FieldType::Bigint).not_null(),
        SourceField::new("d", FieldType::Double),
        SourceField::new("f", FieldType::Float),
        SourceField::new("flag", FieldType::Boolean),
        SourceField::new("ts", FieldType::Timestamp).not_null(),
    ]);
    Mix {
        name: "numeric",
        arrow_schema: schema.arrow_schema(),
        schema,
        payloads,
        check: Box::new(move |batch, rows: &[Numeric]| {
            let i = batch
                .column_by_name("i")
                .unwrap()
                .as_primitive::<Int32Type>();
            let d = batch
                .column_by_name("d")
                .unwrap()
                .as_primitive::<Float64Type>();
            let f = batch
                .column_by_name("f")
                .unwrap()
                .as_primitive::<Float32Type>();
            let flag = batch.column_by_name("flag").unwrap().as_boolean();
            let mut inexact = 0;
            for (row, (n, w)) in rows.iter().zip(&want).enumerate() {
                let got = Numeric {
                    i: i.is_valid(row).then(|| i.value(row)),
                    b: int64(batch, "b", row).unwrap(),
                    d: d.is_valid(row).then(|| d.value(row)),
                    f: f.is_valid(row).then(|| f.value(row)),
                    flag: flag.is_valid(row).then(|| flag.value(row)),
                    ts: w.ts.clone(),
                };
                // The engine reads back exactly the values that were written.
                assert_eq!(&got, w, "numeric row {row}");
                assert_eq!(nanos(batch, "ts", row), Some(want_ts[row]), "row {row}");
                // serde_json without its `float_roundtrip` feature (the workspace's build)
                // parses floats fast but not always correctly rounded: it may be 1 ULP
                // off, which makes its read of this mix slightly cheaper than an exact one.
                let ulps = |a: Option<f64>, b: Option<f64>| match (a, b) {
                    (Some(a), Some(b)) => (a.to_bits() as i64 - b.to_bits() as i64).abs(),
                    (a, b) => {
                        assert_eq!(a.is_some(), b.is_some(), "row {row}");
                        0
                    }
                };
                let off = ulps(n.d, w.d);
                assert!(
                    off <= 1,
                    "serde_json DOUBLE row {row}: {:?} vs {:?}",
                    n.d,
                    w.d
                );
                inexact += usize::from(off != 0);
                let off_f = match (n.f, w.f) {
                    (Some(a), Some(b)) => (a.to_bits() as i32 - b.to_bits() as i32).abs(),
                    (a, b) => i32::from(a.is_some() != b.is_some()) * i32::MAX,
                };
                assert!(
                    off_f <= 1,
                    "serde_json FLOAT row {row}: {:?} vs {:?}",
                    n.f,
                    w.f
                );
                assert_eq!(
                    (n.i, n.b, n.flag, &n.ts),
                    (w.i, w.b, w.flag, &w.ts),
                    "row {row}"
                );
            }
            eprintln!(
                "numeric: serde_json read {inexact} of {} DOUBLEs 1 ULP off",
                rows.len()
            );
        }),
    }
}

// ---------------------------------------------------------------------------------------
// gcs-notification: the real GCS notification body (JSON_API_V1), as the fixture tests
// declare it (engine/format/src/tests/fixtures.rs) without its metadata and BYTEA
// columns (arrow-json reads no base64). The payload has no nested object, so the mix has
// no JSON column.

/// proto3 JSON writes int64 as a string: serde reads it with a custom `deserialize_with`
/// (the same work as the engine's: take the string, parse an integer).
fn int_string<'de, D: serde::Deserializer<'de>, I: std::str::FromStr>(d: D) -> Result<I, D::Error> {
    let s = std::borrow::Cow::<str>::deserialize(d)?;
    s.parse()
        .map_err(|_| serde::de::Error::custom("not an integer"))
}

#[derive(Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct Gcs {
    kind: String,
    id: String,
    name: String,
    bucket: String,
    #[serde(deserialize_with = "int_string")]
    generation: i64,
    #[serde(deserialize_with = "int_string")]
    metageneration: i32,
    #[serde(deserialize_with = "int_string")]
    size: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    /// Timestamps stay RFC 3339 text: serde has no timestamp parse.
    time_created: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    media_link: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_deleted: Option<String>,
}

fn gcs_notification() -> Mix<Gcs> {
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/payloads/gcs-notification-json-api-v1.json"
    ))
    .expect("the GCS notification fixture");
    let body = Bytes::from(body);
    // The same real payload, MESSAGES times.
    let payloads = vec![body; MESSAGES];
    let schema = ConnectionSchema::json(vec![
        SourceField::new("kind", FieldType::Text).not_null(),
        SourceField::new("id", FieldType::Text).not_null(),
        SourceField::new("name", FieldType::Text).not_null(),
        SourceField::new("bucket", FieldType::Text).not_null(),
        SourceField::new("generation", FieldType::Bigint).not_null(),
        SourceField::new("metageneration", FieldType::Int).not_null(),
        SourceField::new("size", FieldType::Bigint).not_null(),
        SourceField::new("contentType", FieldType::Text),
        SourceField::new("timeCreated", FieldType::Timestamp).not_null(),
        SourceField::new("updated", FieldType::Timestamp),
        SourceField::new("etag", FieldType::Text),
        SourceField::new("mediaLink", FieldType::Text),
        SourceField::new("timeDeleted", FieldType::Timestamp),
    ]);
    Mix {
        name: "gcs-notification",
        // arrow-json parses a string into Int64/Int32 and an RFC 3339 string into
        // Timestamp(ns), as the engine does; unknown keys are skipped.
        arrow_schema: schema.arrow_schema(),
        schema,
        payloads,
        check: Box::new(|batch, rows: &[Gcs]| {
            let meta = batch
                .column_by_name("metageneration")
                .unwrap()
                .as_primitive::<Int32Type>();
            for (row, g) in rows.iter().enumerate() {
                assert_eq!(text(batch, "kind", row).as_ref(), Some(&g.kind));
                assert_eq!(text(batch, "id", row).as_ref(), Some(&g.id));
                assert_eq!(text(batch, "name", row).as_ref(), Some(&g.name));
                assert_eq!(text(batch, "bucket", row).as_ref(), Some(&g.bucket));
                assert_eq!(int64(batch, "generation", row), Some(g.generation));
                assert_eq!(meta.value(row), g.metageneration);
                assert_eq!(int64(batch, "size", row), Some(g.size));
                assert_eq!(text(batch, "contentType", row), g.content_type);
                assert_eq!(text(batch, "etag", row), g.etag);
                assert_eq!(text(batch, "mediaLink", row), g.media_link);
                // 2020-12-08T11:51:26.395Z
                let created = 1_607_428_286_395_000_000;
                assert_eq!(g.time_created, "2020-12-08T11:51:26.395Z");
                assert_eq!(nanos(batch, "timeCreated", row), Some(created));
                assert_eq!(nanos(batch, "updated", row), Some(created));
                assert_eq!(nanos(batch, "timeDeleted", row), None);
                assert_eq!(g.time_deleted, None);
            }
        }),
    }
}

fn benches(c: &mut Criterion) {
    bench_mix(c, bid());
    bench_mix(c, text_1k());
    bench_mix(c, numeric());
    bench_mix(c, gcs_notification());
}

criterion_group!(json, benches);
criterion_main!(json);
