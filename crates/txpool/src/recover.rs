//! Sender recovery on a bounded pool of threads, off the RPC threads.

use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use alloy_primitives::Bytes;
use tokio::sync::oneshot;

use crate::validate::decode_and_recover_bytes;
use crate::{Metrics, PoolConfig, PooledTx, TxPoolError};

struct Job {
    raw: Bytes,
    reply: oneshot::Sender<Result<PooledTx, TxPoolError>>,
}

/// Decodes and recovers raw transactions on `config.recovery_threads` threads fed by a queue
/// of `config.recovery_queue` slots; an async caller waits for its answer without holding a
/// runtime thread. A full queue answers [`TxPoolError::Busy`] at once instead of growing.
///
/// Counts every transaction it is given as received and every failure as rejected (by reason)
/// in the pool's [`Metrics`].
pub struct Recoverer {
    queue: Option<SyncSender<Job>>,
    workers: Vec<JoinHandle<()>>,
    metrics: Metrics,
    threads: usize,
    capacity: usize,
}

impl std::fmt::Debug for Recoverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recoverer")
            .field("threads", &self.threads)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Recoverer {
    /// Starts the worker threads. `metrics` is usually `pool.metrics().clone()`.
    pub fn new(config: PoolConfig, metrics: Metrics) -> std::io::Result<Self> {
        let threads = config.recovery_threads.max(1);
        let capacity = config.recovery_queue.max(1);
        let (queue, jobs) = mpsc::sync_channel::<Job>(capacity);
        let jobs = Arc::new(Mutex::new(jobs));
        let config = Arc::new(config);
        let mut workers = Vec::with_capacity(threads);
        for index in 0..threads {
            let jobs = Arc::clone(&jobs);
            let config = Arc::clone(&config);
            let worker = std::thread::Builder::new()
                .name(format!("txpool-recover-{index}"))
                .spawn(move || work(&jobs, &config));
            match worker {
                Ok(handle) => workers.push(handle),
                Err(err) => {
                    // Dropping the queue stops the threads already started.
                    drop(queue);
                    for handle in workers {
                        let _ = handle.join();
                    }
                    return Err(err);
                }
            }
        }
        Ok(Self {
            queue: Some(queue),
            workers,
            metrics,
            threads,
            capacity,
        })
    }

    /// Decodes `raw`, runs the stateless checks and recovers the sender on a worker thread.
    pub async fn recover(&self, raw: Bytes) -> Result<PooledTx, TxPoolError> {
        self.metrics.received.inc();
        let result = self.submit(raw).await;
        if let Err(err) = &result {
            self.metrics.record_rejected(err);
        }
        result
    }

    async fn submit(&self, raw: Bytes) -> Result<PooledTx, TxPoolError> {
        let queue = self.queue.as_ref().ok_or(TxPoolError::ShuttingDown)?;
        let (reply, answer) = oneshot::channel();
        match queue.try_send(Job { raw, reply }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(TxPoolError::Busy),
            Err(TrySendError::Disconnected(_)) => return Err(TxPoolError::ShuttingDown),
        }
        answer.await.map_err(|_| TxPoolError::ShuttingDown)?
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Slots of the queue in front of the workers.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl Drop for Recoverer {
    fn drop(&mut self) {
        // Closing the queue ends each worker after the jobs already queued.
        self.queue = None;
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

fn work(jobs: &Mutex<Receiver<Job>>, config: &PoolConfig) {
    loop {
        let job = {
            // A poisoned lock only means another worker panicked while waiting; the receiver
            // inside is still sound.
            let guard = jobs.lock().unwrap_or_else(|poison| poison.into_inner());
            guard.recv()
        };
        let Ok(Job { raw, reply }) = job else {
            return;
        };
        // The caller may have gone away (a dropped RPC request); its answer is not needed.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decode_and_recover_bytes(raw, config)
        }))
        .unwrap_or_else(|_| Err(TxPoolError::Decode("decoder panicked".to_string())));
        let _ = reply.send(result);
    }
}
