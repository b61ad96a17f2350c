//! Row checks before a source emits: under a failure policy other than `fail`
//! (`scan.deserialization-failure-policy`), a message whose rows fail any query's SELECT
//! is handed back to its source, which drops, nacks or dead-letters it as it does a message
//! that cannot be decoded (issue 17). Its rows never enter the dataflow, so no query sees
//! them, and the rest of the batch goes on in order.

use std::sync::Arc;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;

use pubsub_engine_spi::{RejectedMessage, RowChecker};

use crate::SelectPlan;

/// One query's SELECT, checked on the rows of the source it reads.
#[derive(Clone)]
pub struct RowCheck {
    /// The INSERT statement as written, for the failure text.
    pub text: String,
    pub select: Arc<SelectPlan>,
    /// The source is a changelog: its rows are changes, checked on both rows of each.
    pub changes: bool,
}

/// The checks of every query reading one source, as the source collector runs them.
#[derive(Clone)]
pub struct QueryChecks(pub Vec<RowCheck>);

impl RowChecker for QueryChecks {
    fn reject_failing(
        &self,
        batch: RecordBatch,
        starts: &[usize],
    ) -> (RecordBatch, Vec<RejectedMessage>) {
        reject_failing(&self.0, batch, starts)
    }
}

/// Removes from `batch` every row of each message (`starts`: the first row of each
/// message, ascending) on which some check fails, and returns what is left, in order, with
/// the rejected messages in message order. A row's result does not depend on the other
/// rows of its batch (issue 31), so a row that passes here passes again in the query's
/// operator, and the rows after a rejected message are checked again as one batch.
pub fn reject_failing(
    checks: &[RowCheck],
    batch: RecordBatch,
    starts: &[usize],
) -> (RecordBatch, Vec<RejectedMessage>) {
    let n = batch.num_rows();
    let mut keep = vec![true; n];
    let mut rejected = Vec::new();
    let mut from = 0;
    // After an internal error (a batch fails, none of its rows alone), the rest is checked
    // a row at a time: what each row gives alone, never a valid message rejected.
    let mut one_by_one = false;
    while from < n {
        let rest = batch.slice(from, if one_by_one { 1 } else { n - from });
        let failures: Vec<_> = checks
            .iter()
            .filter_map(|c| check(c, &rest).err().map(|f| (f, &c.text)))
            .collect();
        if let Some((f, text)) = failures.iter().find(|(f, _)| f.internal && !one_by_one) {
            tracing::error!("{text}: {f}; checking the rest of the batch a row at a time");
            one_by_one = true;
            continue;
        }
        // The earliest failing row over every check: every row before it passed them all.
        let Some((f, text)) = failures.into_iter().min_by_key(|(f, _)| f.row) else {
            if !one_by_one {
                break;
            }
            from += 1;
            continue;
        };
        let row = from + f.row;
        // The last message starting at or before the row holds it (a 0-row message
        // shares its start with the next and comes first).
        let m = starts.partition_point(|&s| s <= row).saturating_sub(1);
        let end = starts.get(m + 1).copied().unwrap_or(n).max(row + 1);
        keep[starts.get(m).copied().unwrap_or(row)..end].fill(false);
        rejected.push(RejectedMessage {
            message_index: m,
            failure: format!("{text}: `{}` failed: {}", f.expr, f.error),
        });
        from = end;
    }
    if rejected.is_empty() {
        return (batch, rejected);
    }
    let kept = filter_record_batch(&batch, &BooleanArray::from(keep))
        .expect("a mask of the batch's own length");
    (kept, rejected)
}

/// `c`'s SELECT on source rows, or on both rows of a changelog's changes.
fn check(c: &RowCheck, rows: &RecordBatch) -> Result<(), crate::RowFailure> {
    if c.changes {
        return crate::changelog::check_images(&c.select, rows);
    }
    c.select.evaluate(rows).map(|_| ())
}
