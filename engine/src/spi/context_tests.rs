//! The source collector's watermark rule: a watermark goes out behind every row decoded
//! before it (decision 0036).

use super::*;
use crate::spi::{FieldType, SourceField};

/// What the collector sent, in order: rows of a batch, or a watermark.
#[derive(Debug, PartialEq)]
enum Sent {
    Rows(usize),
    Mark(Watermark),
}

fn sent(rx: &std::sync::mpsc::Receiver<SourceEvent>) -> Vec<Sent> {
    rx.try_iter()
        .map(|e| match e {
            SourceEvent::Batch(r) => Sent::Rows(r.batch.num_rows()),
            SourceEvent::Watermark(w) => Sent::Mark(w),
            SourceEvent::Barrier(e) => panic!("a barrier {e}"),
            SourceEvent::Finished => panic!("finished"),
        })
        .collect()
}

/// A collector of rows `{"n": BIGINT}`, and what it sends.
fn collector() -> (
    ConnectionSchema,
    SourceCollector,
    std::sync::mpsc::Receiver<SourceEvent>,
) {
    let schema = ConnectionSchema::json(vec![SourceField::new("n", FieldType::Bigint)]);
    let (tx, rx) = std::sync::mpsc::channel();
    let (flow, _acks) =
        crate::runtime::Flow::new(0, 1, 1, 100, &Metrics::default(), Default::default());
    let c = SourceCollector::new(
        schema.arrow_schema(),
        tx,
        Arc::new(Mutex::new(None)),
        flow,
        Arc::new(PullState::default()),
    );
    (schema, c, rx)
}

#[tokio::test]
async fn a_watermark_given_while_rows_are_buffered_goes_out_after_them_and_once() {
    let (schema, mut c, rx) = collector();
    c.initialize_deserializer(&schema, 100, Duration::from_secs(60))
        .unwrap();
    // Nothing buffered: at once.
    c.emit_watermark(Watermark::EventTime(1)).unwrap();
    assert_eq!(sent(&rx), [Sent::Mark(Watermark::EventTime(1))]);
    // Buffered rows: held until they went out, the latest one only.
    for n in 0..3 {
        let payload = bytes::Bytes::from(format!("{{\"n\": {n}}}"));
        c.deserialize_slice(&payload, &[]).unwrap();
    }
    c.emit_watermark(Watermark::EventTime(4)).unwrap();
    c.emit_watermark(Watermark::EventTime(5)).unwrap();
    assert_eq!(sent(&rx), []);
    assert_eq!(c.flush_buffer().await.unwrap(), 3);
    assert_eq!(
        sent(&rx),
        [Sent::Rows(3), Sent::Mark(Watermark::EventTime(5))]
    );
    // A repeat is not sent again; a change is.
    c.emit_watermark(Watermark::EventTime(5)).unwrap();
    c.emit_watermark(Watermark::Idle).unwrap();
    assert_eq!(sent(&rx), [Sent::Mark(Watermark::Idle)]);
}

/// After the final barrier (`start_checkpoint` with `then_stop` sets `ended`) the source
/// may still compute a watermark (a split turns idle; after `--drain`'s end of time, its
/// own lower one): it goes nowhere, and never fails on the dataflow that is gone (it
/// failed the job in a windowed quickstart run).
#[tokio::test]
async fn a_watermark_after_the_final_barrier_is_not_sent_and_does_not_fail() {
    let (_, mut c, rx) = collector();
    c.emit_watermark(Watermark::EventTime(i64::MAX)).unwrap();
    c.send(SourceEvent::Finished).unwrap();
    c.ended = true;
    drop(rx);
    c.emit_watermark(Watermark::EventTime(7)).unwrap();
    c.emit_watermark(Watermark::Idle).unwrap();
}
