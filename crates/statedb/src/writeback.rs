//! A durable point's writeback on a thread of its own.
//!
//! Under [`crate::Durability::Periodic`] a durable point must write back every page the
//! commits since the last one dirtied: over 10M accounts, 1 to 2 seconds of disk writes per
//! group, during which the apply thread stood still and the node fell behind its sequencer.
//! A thread does the bulk of it, an `fdatasync` of the data file, while the writer goes on
//! applying; the writer then finishes the durable point itself (`mdbx_env_sync`: what was
//! dirtied since, and the steady meta page) once the thread ended. Only the writer's call
//! makes a durable point: the thread never touches MDBX, so an early writeback of pages is
//! harmless (MDBX's file is consistent whatever reached the disk before the meta page).
//!
//! One thread per durable point (a few per minute at most), so there is no queue to keep.
//!
//! Owns: the thread. Must not: mark anything durable.

use std::fs::File;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use prometheus_client::metrics::histogram::Histogram;

use crate::error::StateDbError;

/// A writeback under way.
#[derive(Debug)]
pub(crate) struct Writeback(JoinHandle<std::io::Result<()>>);

impl Writeback {
    /// Starts writing `file` back, timing it into `seconds`.
    pub(crate) fn start(file: Arc<File>, seconds: Histogram) -> Result<Self, StateDbError> {
        std::thread::Builder::new()
            .name("statedb-writeback".into())
            .spawn(move || {
                let started = Instant::now();
                let result = file.sync_data();
                seconds.observe(started.elapsed().as_secs_f64());
                result
            })
            .map(Self)
            .map_err(|source| StateDbError::Io {
                what: "start the writeback thread".into(),
                source,
            })
    }

    /// Whether it ended.
    pub(crate) fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Waits for it to end: an error if the data file could not be written back.
    pub(crate) fn join(self) -> Result<(), StateDbError> {
        let what = "write the data file back to the disk";
        match self.0.join() {
            Ok(result) => result.map_err(|source| StateDbError::Io {
                what: what.into(),
                source,
            }),
            Err(_) => Err(StateDbError::Io {
                what: what.into(),
                source: std::io::Error::other("the writeback thread panicked"),
            }),
        }
    }
}
