//! The commit on a thread of its own ([`WriterOptions::commit_thread`]): a group handed over
//! whole, written into a write transaction begun there, and committed, while the writer
//! applies the next blocks.
//!
//! Owns: the hand-over ([`Handoff`]), the thread's work ([`persist`]) and what it reports
//! ([`Persisted`]). Must not: read or change anything of the writer's; the writer takes the
//! outcome in (`StateWriter`'s landing) on its own thread.
//!
//! **Why.** Over 10M accounts, live, the commit of a group of 128 blocks (its sorted writes
//! into MDBX's B-trees, then MDBX's own commit, which writes every dirtied page) was 2.5 s of
//! 8.7 s of apply, on the apply thread, while the second core waited. reth persists on a
//! background thread fed by a channel (`crates/engine/tree/src/persistence.rs`).
//!
//! **Exact meanwhile.** The writer keeps a copy of the handed-over layer under the next
//! group's writes, so that its reads and its roots, which read the last commit with that
//! layer laid over it, see the same state whether the commit has landed yet or not: the
//! layer then holds everything the commit holds, and a later write wins over both. When the
//! commit lands, the writer renews its read transaction and drops from its layer what the
//! commit now holds with the same value ([`gigas_triedb::layer::TrieLayer::prune_committed`]).
//! Its rows (code, key index, headers) are read from the handed-over set until then.
//!
//! [`WriterOptions::commit_thread`]: crate::WriterOptions::commit_thread

use std::time::Instant;

use gigas_mdbx::StoreError as _;
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::Environment;

use crate::db::write_meta_tip;
use crate::error::StateDbError;
use crate::read::Dbs;
use crate::rows::GroupRows;
use gigas_statediff::ChainTip;
use gigas_triedb::flush;
use gigas_triedb::layer::TrieLayer;
use gigas_triedb::store::{self, ChangedKeys};

/// What the database says at a commit (`Meta`): the last commit's, or what the next one
/// will say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) tip: ChainTip,
    pub(crate) index_len: u64,
    pub(crate) last_root: Option<(u64, alloy_primitives::B256)>,
    /// The trie tables (with the changed-key tables and the writer's own changed keys)
    /// describe the hashed tables.
    pub(crate) trie_valid: bool,
    /// The lattice hash of the state at `tip`, when the node keeps the state commitment.
    pub(crate) lattice: Option<std::sync::Arc<gigas_primitives::LatticeHash>>,
}

impl Snapshot {
    /// Writes it into `Meta`.
    pub(crate) fn write(&self, dbs: &Dbs, txn: &RwTxUnsync) -> Result<(), StateDbError> {
        write_meta_tip(
            dbs,
            txn,
            &self.tip,
            self.index_len,
            self.last_root,
            self.trie_valid,
            self.lattice.as_deref(),
        )
    }
}

/// A group handed over for its commit.
pub(crate) struct Handoff {
    /// Its hashed leaves and trie nodes (the account trie's drained from the trie in
    /// memory included), all written: the writer's layer was emptied into it.
    pub(crate) layer: TrieLayer,
    pub(crate) rows: GroupRows,
    pub(crate) meta: Snapshot,
    /// The keys changed since the last root, which the next root after a restart must
    /// recompute (empty when the group ends with a root).
    pub(crate) changed: ChangedKeys,
    /// The changed-key tables hold keys from an earlier commit: empty them first.
    pub(crate) clear_changed: bool,
}

/// What the thread did.
#[derive(Debug)]
pub(crate) struct Persisted {
    /// Seconds writing the group into the transaction.
    pub(crate) write_seconds: f64,
    /// Seconds of MDBX's commit.
    pub(crate) commit_seconds: f64,
    /// Accounts whose stored storage trie the commit deleted (a wipe).
    pub(crate) wiped: Vec<alloy_primitives::B256>,
    /// Layer entries written.
    pub(crate) entries: u64,
}

/// Writes `handoff` into a write transaction begun on this thread and commits it. On error
/// nothing is committed (the transaction is aborted when dropped).
pub(crate) fn persist(
    env: &Environment,
    dbs: &Dbs,
    handoff: &Handoff,
) -> Result<Persisted, StateDbError> {
    let start = Instant::now();
    // MDBX ties a write transaction to the thread that begins it: this one, which also
    // commits it.
    let txn = env.begin_rw_unsync().map_err(StateDbError::mdbx(
        "begin the commit thread's write transaction",
    ))?;
    let written = flush::write_layer(dbs.trie(), &txn, &handoff.layer, None, true)?;
    handoff.rows.write(dbs, &txn)?;
    if handoff.clear_changed {
        store::clear_changed(dbs.trie(), &txn)?;
    }
    if !handoff.changed.is_empty() {
        store::persist_changed(dbs.trie(), &txn, &handoff.changed)?;
    }
    handoff.meta.write(dbs, &txn)?;
    let write_seconds = start.elapsed().as_secs_f64();
    let commit_start = Instant::now();
    txn.commit()
        .map_err(StateDbError::mdbx("commit the group on the commit thread"))?;
    Ok(Persisted {
        write_seconds,
        commit_seconds: commit_start.elapsed().as_secs_f64(),
        wiped: written.wiped,
        entries: written.entries,
    })
}

/// Waits for the commit thread `handle` and returns what it did; its panic is an error.
pub(crate) fn join(
    handle: std::thread::JoinHandle<Result<Persisted, StateDbError>>,
) -> Result<Persisted, StateDbError> {
    handle.join().unwrap_or_else(|_| {
        Err(StateDbError::Invariant {
            what: "the commit thread panicked".into(),
        })
    })
}
