//! Back-pressure of one process (issue 16, finding 11; decision 0021).
//!
//! `--max-inflight-rows` N bounds the rows a process holds. Alone, its sources take one
//! permit of N per emitted row, given back when the sink task took the row. In a cluster
//! of P processes N is split: its sources get `N - (P-1)·N/P` permits, and each peer may
//! have at most N/P rows here (credits): a peer takes a credit of this process per row it
//! routes here, and gets it back when this process's sink task took the row (an ack over
//! the control dataflow). Rows waiting for credits stay in the sender's route operator,
//! holding the sender's permits, so a slow sink anywhere stalls the sources feeding it.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use timely::scheduling::SyncActivator;
use tokio::sync::Semaphore;

use super::dataflow::WorkerWaker;
use pubsub_engine_spi::{Gauge, Metrics, INFLIGHT_ROWS, INFLIGHT_ROWS_PEAK, RUNTIME_OPERATOR};

/// One process's flow control, shared by its source tasks, Timely operators and sinks.
pub(crate) struct Flow {
    /// This process's index in the cluster (0 alone).
    pub process: usize,
    /// Workers per process: global worker `w` is in process `w / workers`.
    pub workers: usize,
    /// Permits for rows this process's sources emit; a row gives its permit back when the
    /// sink task took it (or when it was sent to another process).
    pub local: Arc<Semaphore>,
    /// The most permits one emitted batch takes (a larger batch is emitted in slices).
    pub local_max: u32,
    /// Credits this process may still use at each peer (its own entry stays empty).
    windows: Vec<Semaphore>,
    /// Credits per peer: rows routed to a peer go in slices of at most this many.
    pub window_max: u32,
    /// (origin process, rows) taken by a sink here, for the first worker to send back.
    acks: Sender<(usize, u32)>,
    /// Wakes the first worker when there are acks to send.
    waker: WorkerWaker,
    /// The route operators of this process, woken when credits come back.
    routers: Mutex<Vec<SyncActivator>>,
    inflight: Gauge,
    peak: Gauge,
}

impl Flow {
    /// The flow control of process `process` of `processes` with `workers` workers each;
    /// also returns where the acks for peers arrive (for the first worker).
    pub fn new(
        process: usize,
        processes: usize,
        workers: usize,
        max_inflight_rows: usize,
        metrics: &Metrics,
        waker: WorkerWaker,
    ) -> (Arc<Self>, Receiver<(usize, u32)>) {
        let max = max_inflight_rows.clamp(1, u32::MAX as usize / 2);
        let peers = processes.max(1) - 1;
        let window = if peers == 0 {
            0
        } else {
            (max / processes).max(1)
        };
        // At least one permit each: with N < P the bound is P rows, not N.
        let local = max.saturating_sub(peers * window).max(1);
        let (tx, rx) = std::sync::mpsc::channel();
        let flow = Flow {
            process,
            workers: workers.max(1),
            local: Arc::new(Semaphore::new(local)),
            local_max: local as u32,
            windows: (0..processes.max(1))
                .map(|p| Semaphore::new(if p == process { 0 } else { window }))
                .collect(),
            window_max: window as u32,
            acks: tx,
            waker,
            routers: Mutex::new(Vec::new()),
            inflight: metrics.gauge(INFLIGHT_ROWS, RUNTIME_OPERATOR, process),
            peak: metrics.gauge(INFLIGHT_ROWS_PEAK, RUNTIME_OPERATOR, process),
        };
        (Arc::new(flow), rx)
    }

    /// The process of global worker `worker`.
    pub fn process_of(&self, worker: u64) -> usize {
        worker as usize / self.workers
    }

    /// Takes `n` credits of process `to` for rows about to be sent there; false (taking
    /// none) while it has fewer.
    pub fn try_send(&self, to: usize, n: u32) -> bool {
        match self.windows[to].try_acquire_many(n) {
            Ok(p) => {
                p.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Process `from` took `n` of our rows: the credits are free again.
    pub fn credit(&self, from: usize, n: u32) {
        if let Some(w) = self.windows.get(from) {
            w.add_permits(n as usize);
        }
        for a in self.routers.lock().expect("routers lock").iter() {
            let _ = a.activate();
        }
    }

    /// A sink here took `n` rows from process `origin`: tell it (via the first worker).
    pub fn ack(&self, origin: usize, n: u32) {
        let _ = self.acks.send((origin, n));
        self.waker.wake();
    }

    /// A route operator to wake when credits come back.
    pub fn register_router(&self, activator: SyncActivator) {
        self.routers.lock().expect("routers lock").push(activator);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(processes: usize, max: usize) -> (usize, u32, u32) {
        let (f, _) = Flow::new(
            0,
            processes,
            1,
            max,
            &Metrics::default(),
            Default::default(),
        );
        (f.local.available_permits(), f.local_max, f.window_max)
    }

    #[test]
    fn the_bound_is_split_between_own_sources_and_each_peer() {
        assert_eq!(shares(1, 100), (100, 100, 0));
        assert_eq!(shares(2, 100), (50, 50, 50));
        // 3 processes: 34 own + 2 peers x 33 = 100.
        assert_eq!(shares(3, 100), (34, 34, 33));
        // Fewer rows than processes: one each.
        assert_eq!(shares(3, 1), (1, 1, 1));
    }
}
