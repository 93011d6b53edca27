//! A durable point's writeback on a thread of its own.
//!
//! Under [`crate::Durability::Periodic`] a durable point must write back every page the
//! commits since the last one dirtied: over 10M accounts, 1 to 2 seconds of disk writes per
//! group, during which the apply thread stood still and the node fell behind its sequencer.
//! This thread does the bulk of it, an `fdatasync` of the data file, while the writer goes on
//! applying; the writer then finishes the durable point itself (`mdbx_env_sync`: what was
//! dirtied since, and the steady meta page) once this one reports back. Only the writer's
//! call makes a durable point: this thread never touches MDBX, so an early writeback of pages
//! is harmless (MDBX's file is consistent whatever reached the disk before the meta page).
//!
//! Owns: the thread and its file handle. Must not: mark anything durable.

use std::fs::File;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use prometheus_client::metrics::histogram::Histogram;

use crate::error::StateDbError;

/// What the thread reports: the last request it finished, and the first error it met.
#[derive(Debug, Default)]
struct Done {
    generation: u64,
    error: Option<String>,
}

/// The writeback thread of one writer. Dropping it stops the thread (after the writeback in
/// progress, if any).
#[derive(Debug)]
pub(crate) struct Writeback {
    requests: Option<SyncSender<u64>>,
    done: Arc<Mutex<Done>>,
    thread: Option<JoinHandle<()>>,
    requested: u64,
}

impl Writeback {
    /// Starts the thread over the data file at `path`, timing each writeback into `seconds`.
    pub(crate) fn start(path: &Path, seconds: Histogram) -> Result<Self, StateDbError> {
        let io = |e: std::io::Error| StateDbError::Io {
            what: format!("open {} for its writeback thread", path.display()),
            source: e,
        };
        let file = File::open(path).map_err(io)?;
        // One request waits at most: the writer never asks again before the last one ended.
        let (requests, rx) = sync_channel::<u64>(1);
        let done = Arc::new(Mutex::new(Done::default()));
        let thread = std::thread::Builder::new()
            .name("statedb-writeback".into())
            .spawn({
                let done = Arc::clone(&done);
                move || run(file, rx, done, seconds)
            })
            .map_err(io)?;
        Ok(Self {
            requests: Some(requests),
            done,
            thread: Some(thread),
            requested: 0,
        })
    }

    /// Asks for a writeback of everything written so far. Returns its generation, or `None`
    /// when the thread is gone (the writer then syncs by itself).
    pub(crate) fn request(&mut self) -> Option<u64> {
        let generation = self.requested + 1;
        match self.requests.as_ref()?.try_send(generation) {
            Ok(()) => {
                self.requested = generation;
                Some(generation)
            }
            // Full cannot happen (one request at a time); either way, sync inline.
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => None,
        }
    }

    /// Whether the writeback of `generation` ended. A failed writeback is an error: the
    /// data file could not be written back, which the writer's own sync would meet too.
    pub(crate) fn finished(&self, generation: u64) -> Result<bool, StateDbError> {
        let done = self.done.lock().map_err(|_| StateDbError::Io {
            what: "read the writeback thread's state (its lock was poisoned)".into(),
            source: std::io::Error::other("poisoned lock"),
        })?;
        if let Some(error) = &done.error {
            return Err(StateDbError::Io {
                what: "write the data file back to the disk".into(),
                source: std::io::Error::other(error.clone()),
            });
        }
        Ok(done.generation >= generation)
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(file: File, requests: Receiver<u64>, done: Arc<Mutex<Done>>, seconds: Histogram) {
    for generation in requests {
        let started = Instant::now();
        let result = file.sync_data();
        seconds.observe(started.elapsed().as_secs_f64());
        let Ok(mut done) = done.lock() else {
            return;
        };
        if let Err(e) = result {
            done.error.get_or_insert_with(|| e.to_string());
        }
        done.generation = generation;
    }
}
