//! What makes an applied block servable before its group commits: its diff appended to the
//! applied-block log ([`crate::wal`]), then its redo record and header put in the state
//! window ([`crate::window`]); and, at each commit, the reverse. Shared by the apply thread
//! and `gigas-bench fullnode`, so that the benchmark pays for exactly what the node does.
//!
//! **Owns:** the order of those steps (logged before recorded, so nothing is served that a
//! kill could lose). **Must not:** serve anything itself: the caller moves `latest` once
//! [`AheadServing::applied`] returns.

use std::sync::Arc;

use gigas_statedb::{RootInfo, StoredHeader};
use gigas_statediff::VerifiedDiff;

use crate::apply::AppliedBlock;
use crate::wal::{AppliedLog, WalError};
use crate::window::{BlockUndo, StateWindow};

/// The applied-block log and the window's records of the blocks above the last commit.
#[derive(Debug)]
pub struct AheadServing {
    log: AppliedLog,
    window: Arc<StateWindow>,
    sync: bool,
}

impl AheadServing {
    /// Over an open `log` (empty, or holding only committed blocks: it is cleared) and
    /// `window`; `sync` syncs each record (the database syncs every commit too).
    pub fn new(
        mut log: AppliedLog,
        window: Arc<StateWindow>,
        sync: bool,
    ) -> Result<Self, WalError> {
        log.clear()?;
        Ok(Self { log, window, sync })
    }

    /// Block `applied` (verified as `verified` from the diff file `diff`) was written into
    /// the open group: logs it, then records it for reads. After this it may be served.
    pub fn applied(
        &mut self,
        diff: &[u8],
        verified: &VerifiedDiff,
        applied: &AppliedBlock,
    ) -> Result<(), WalError> {
        self.log.append(applied.number, diff, self.sync)?;
        // A root that overlapped this block's writing is an earlier block's.
        let own = applied.root.filter(|r| r.block == applied.number);
        self.window.push_ahead(
            BlockUndo::after(applied.number, applied.hash, &verified.changes),
            StoredHeader {
                header: verified.header.clone(),
                hash: verified.hash,
                signature: Some(verified.signature),
                state_root: own.map(|r| r.root),
                commitment: verified.commitment,
            },
        );
        if let Some(earlier) = applied.root.filter(|r| r.block != applied.number) {
            self.root_landed(&earlier);
        }
        Ok(())
    }

    /// The root of a block served above the last commit ended after the block was served
    /// ([`gigas_statedb::WriterOptions::overlap_roots`]): its header gets it.
    pub fn root_landed(&mut self, root: &RootInfo) {
        self.window.set_ahead_root(root.block, root.root);
    }

    /// The group through block `head` was committed: its records and log go (those of the
    /// blocks applied above it while it committed on the commit thread stay).
    pub fn committed(&mut self, head: u64) -> Result<(), WalError> {
        self.window.committed(head);
        self.log.committed_through(head, self.sync)
    }

    /// The writer discarded every block above `head` (its last commit): their records and
    /// log go.
    pub fn discard_after(&mut self, head: u64) -> Result<(), WalError> {
        self.window.discard_after(head);
        self.log.discard_after(head)
    }

    /// Approximate bytes of the records above the last commit.
    pub fn bytes(&self) -> usize {
        self.window.ahead_bytes()
    }
}
