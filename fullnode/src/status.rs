//! What the follower knows of the chain, shared with the RPC and the metrics: the head the
//! node serves (applied, and committed or logged: a kill loses none of it), and the
//! sequencer's head as last seen.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use alloy_primitives::B256;

/// Shared between the follower (which writes it) and the RPC (which reads it).
#[derive(Debug, Default)]
pub struct SyncState {
    /// The first block this node applied after its start (for `eth_syncing`'s `startingBlock`).
    starting: AtomicU64,
    /// The last served block (committed, or logged in `applied.wal`): the RPC's `latest`.
    applied: AtomicU64,
    /// The sequencer's head as last seen (the head endpoint or the newest pushed diff).
    sequencer_head: AtomicU64,
    /// A verification failure that holds the node at `applied`, in words.
    halted: Mutex<Option<String>>,
    /// Hash of the last served block.
    applied_hash: Mutex<B256>,
}

impl SyncState {
    /// A state at the head `applied` (with `hash`).
    pub fn new(applied: u64, hash: B256) -> Self {
        Self {
            starting: AtomicU64::new(applied),
            applied: AtomicU64::new(applied),
            sequencer_head: AtomicU64::new(applied),
            halted: Mutex::new(None),
            applied_hash: Mutex::new(hash),
        }
    }

    /// The last served block.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Hash of the last served block.
    pub fn applied_hash(&self) -> B256 {
        *self.applied_hash.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The block the node started from.
    pub fn starting(&self) -> u64 {
        self.starting.load(Ordering::Acquire)
    }

    /// The sequencer's head as last seen (never below the applied block).
    pub fn sequencer_head(&self) -> u64 {
        self.sequencer_head
            .load(Ordering::Acquire)
            .max(self.applied())
    }

    /// Lag in blocks.
    pub fn lag(&self) -> u64 {
        self.sequencer_head().saturating_sub(self.applied())
    }

    /// Records a commit.
    pub fn set_applied(&self, number: u64, hash: B256) {
        *self.applied_hash.lock().unwrap_or_else(|p| p.into_inner()) = hash;
        self.applied.store(number, Ordering::Release);
    }

    /// Records a sighting of the sequencer's head (kept monotonic).
    pub fn saw_sequencer_head(&self, number: u64) {
        self.sequencer_head.fetch_max(number, Ordering::AcqRel);
    }

    /// Holds the reason the node cannot advance (`None` clears it).
    pub fn set_halted(&self, reason: Option<String>) {
        *self.halted.lock().unwrap_or_else(|p| p.into_inner()) = reason;
    }

    /// Why the node cannot advance, if it cannot.
    pub fn halted(&self) -> Option<String> {
        self.halted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
