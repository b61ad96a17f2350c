//! Back-pressure of one process: the permits its sources take per emitted row, and the
//! count of rows it holds (`inflight_rows`, with its peak).

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::spi::{Gauge, Metrics, INFLIGHT_ROWS, INFLIGHT_ROWS_PEAK, RUNTIME_OPERATOR};

/// One process's flow control, shared by its source tasks, Timely operators and sinks.
pub(crate) struct Flow {
    /// This process's index in the cluster (0 alone).
    pub process: usize,
    /// Permits for rows this process's sources emit; a row gives its permit back when the
    /// sink task took it (or when it was sent to another process).
    pub local: Arc<Semaphore>,
    /// The most permits one emitted batch takes (a larger batch is emitted in slices).
    pub local_max: u32,
    inflight: Gauge,
    peak: Gauge,
}

impl Flow {
    pub fn new(process: usize, max_inflight_rows: usize, metrics: &Metrics) -> Arc<Self> {
        let max = max_inflight_rows.clamp(1, u32::MAX as usize / 2);
        Arc::new(Flow {
            process,
            local: Arc::new(Semaphore::new(max)),
            local_max: max as u32,
            inflight: metrics.gauge(INFLIGHT_ROWS, RUNTIME_OPERATOR, process),
            peak: metrics.gauge(INFLIGHT_ROWS_PEAK, RUNTIME_OPERATOR, process),
        })
    }

    /// `n` more rows are held by this process.
    pub fn hold(&self, n: u32) {
        let now = self.inflight.add(n as u64);
        self.peak.raise_to(now);
    }

    /// `n` rows (counted by `hold`) left this process or were taken by a sink.
    pub fn release(&self, n: u32) {
        self.inflight.sub(n as u64);
    }
}
