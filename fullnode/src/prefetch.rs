//! The prefetch stage, between the fetcher and the apply thread: for each fetched diff whose
//! header the sequencer signed, the keys it writes, read through a view of the last commit
//! ([`gigas_statedb::StateView::warm`]) so that their pages are in memory when the apply
//! thread decodes, writes and roots the block. It reads and forwards; it never writes, and
//! the apply thread verifies everything again. A diff it cannot read is forwarded as it is
//! (the apply thread says what is wrong with it).
//!
//! Memory is bounded by the channels on both sides: `--fetch.queue` diffs before it,
//! [`AHEAD_BLOCKS`] after it.

use std::sync::Arc;
use std::time::Instant;

use alloy_primitives::Address;
use gigas_statedb::{StateDb, Warmed};
use gigas_statediff::{body_keys, open_signed};
use tokio::sync::mpsc;
use tracing::debug;

use crate::fetch::Fetched;
use crate::metrics::FollowerMetrics;

/// Warmed diffs waiting for the apply thread, at most: enough to cover the time one block
/// takes to warm, few enough that a memory limit does not evict their pages again first.
pub const AHEAD_BLOCKS: usize = 4;

/// Why a diff could not be read ahead (logged at debug; the apply thread reports it).
#[derive(Debug, thiserror::Error)]
pub enum PrefetchError {
    /// The file or its body did not parse, or its signer is not the sequencer.
    #[error(transparent)]
    Diff(#[from] gigas_statediff::DiffError),
    /// The body's structure is wrong.
    #[error(transparent)]
    Body(#[from] gigas_statediff::BodyError),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] gigas_statedb::StateDbError),
}

/// Reads the pages applying the diff `bytes` will touch.
pub fn warm_diff(db: &StateDb, sequencer: Address, bytes: &[u8]) -> Result<Warmed, PrefetchError> {
    let file = open_signed(bytes, sequencer)?;
    let view = db.view()?;
    let keys = body_keys(&file.body, &view)?;
    Ok(view.warm(&keys)?)
}

/// Runs the stage until `input` closes or `output`'s receiver is gone.
pub fn run(
    db: Arc<StateDb>,
    sequencer: Address,
    mut input: mpsc::Receiver<Fetched>,
    output: mpsc::Sender<Fetched>,
    metrics: FollowerMetrics,
) {
    while let Some(item) = input.blocking_recv() {
        let start = Instant::now();
        match warm_diff(&db, sequencer, &item.diff) {
            Ok(warmed) => {
                metrics
                    .prefetched_keys
                    .inc_by(warmed.accounts + warmed.slots);
                metrics
                    .prefetch_seconds
                    .observe(start.elapsed().as_secs_f64());
            }
            Err(e) => debug!(block = item.number, error = %e, "diff not prefetched"),
        }
        if output.blocking_send(item).is_err() {
            return;
        }
    }
}
