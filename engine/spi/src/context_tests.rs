//! The source collector's watermark rule: a watermark goes out behind every row decoded
//! before it (decision 0036).

use super::*;
use crate::{FieldType, SourceField};

/// What the collector sent, in order: rows of a batch, or a watermark.
#[derive(Debug, PartialEq)]
enum Sent {
    Rows(usize),
    Mark(Watermark),
}

/// A runtime end that records what it is sent, and fails once `gone` (the dataflow shut
/// down).
struct Recorder {
    sent: std::sync::Mutex<Vec<Sent>>,
    gone: std::sync::atomic::AtomicBool,
    permits: tokio::sync::Semaphore,
}

impl Recorder {
    fn push(&self, s: Sent) -> anyhow::Result<()> {
        if self.gone.load(std::sync::atomic::Ordering::SeqCst) {
            anyhow::bail!("the dataflow has shut down");
        }
        self.sent.lock().unwrap().push(s);
        Ok(())
    }
}

impl SourceOutput for Recorder {
    fn permits(&self) -> &tokio::sync::Semaphore {
        &self.permits
    }
    fn max_batch_rows(&self) -> u32 {
        100
    }
    fn batch(&self, batch: RecordBatch, _permits: u32) -> anyhow::Result<()> {
        self.push(Sent::Rows(batch.num_rows()))
    }
    fn watermark(&self, watermark: Watermark) -> anyhow::Result<()> {
        self.push(Sent::Mark(watermark))
    }
    fn barrier(&self, epoch: u64) -> anyhow::Result<()> {
        panic!("a barrier {epoch}")
    }
    fn finished(&self) -> anyhow::Result<()> {
        Ok(())
    }
    fn snapshot(&self, _: &crate::TaskInfo, _: u64, _: crate::OperatorState) {}
    fn end_of_input(&self, _: &crate::TaskInfo) {}
}

fn sent(rx: &Recorder) -> Vec<Sent> {
    std::mem::take(&mut *rx.sent.lock().unwrap())
}

/// A collector of rows `{"n": BIGINT}`, and what it sends.
fn collector() -> (ConnectionSchema, SourceCollector, Arc<Recorder>) {
    let schema = ConnectionSchema::json(vec![SourceField::new("n", FieldType::Bigint)]);
    let rx = Arc::new(Recorder {
        sent: Default::default(),
        gone: Default::default(),
        permits: tokio::sync::Semaphore::new(100),
    });
    let c = SourceCollector::new(
        schema.arrow_schema(),
        rx.clone(),
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
    c.output.finished().unwrap();
    c.ended = true;
    rx.gone.store(true, std::sync::atomic::Ordering::SeqCst);
    c.emit_watermark(Watermark::EventTime(7)).unwrap();
    c.emit_watermark(Watermark::Idle).unwrap();
}
