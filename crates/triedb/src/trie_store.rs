//! A state trie kept in an environment of its own, block by block: what the sequencer signs
//! its headers' `stateRoot` with.
//!
//! Owns: the trie tables of one environment (`DATADIR/trie` for the sequencer), the changes
//! of the blocks since the last commit held in memory ([`TrieLayer`]), the account trie held
//! in memory across roots (`gigas_trie::sparse`, within [`TrieStoreOptions::sparse_trie_bytes`]),
//! and the commit thread. Must not: know where blocks come from. Its owner gives it each
//! block's changes with their keys' keccak in order ([`TrieStore::apply`]), and gets the
//! block's root back.
//!
//! **Roots.** Each block's root is a layered root ([`crate::layer`]): the last commit read
//! through read transactions of its own, with every change since laid over it, the account
//! trie through the trie in memory, storage tries on several threads. Nothing is written
//! until a commit.
//!
//! **Commits.** Every [`TrieStoreOptions::commit_blocks`] blocks (or sooner when the layer
//! passes [`TrieStoreOptions::max_layer_bytes`]) the layer is handed to a commit thread,
//! which writes it sorted into one write transaction, with `TrieMeta`'s `committed` naming
//! the block and its root. The store keeps a copy of the handed-over layer under the next
//! blocks' changes until the commit lands, so that a root sees the same state whether it
//! has landed or not (as the full node's writer does, `gigas_statedb`'s `persist`).
//!
//! **Never ahead of its owner.** The commit thread commits a block only once its owner says
//! the block is durable (the [`CommitGate`]): after a crash the trie is at or behind the
//! owner's head, and the owner replays the blocks after [`TrieStore::committed`] through
//! [`TrieStore::apply`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use alloy_primitives::{B256, U256};
use gigas_mdbx::StoreError as _;
use gigas_primitives::{AccountState, ChangeSet, HashedKeys};
use gigas_trie::sparse::{SparseAccounts, SparseTrieStats};
use signet_libmdbx::{Environment, SyncMode, WriteFlags};
use tracing::debug;

use crate::error::TrieDbError;
use crate::flush;
use crate::layer::{self, Parallelism, TrieLayer};
use crate::rebuild;
use crate::rows;
use crate::store::{self, ChangedKeys};
use crate::tables::{TrieDbs, TrieTable};

/// `TrieMeta` key of the last commit: block (u64) ‖ root (32).
const META_COMMITTED: &[u8] = b"committed";

/// How a [`TrieStore`] runs.
#[derive(Debug, Clone)]
pub struct TrieStoreOptions {
    /// Largest size the data file may grow to.
    pub max_size_bytes: usize,
    /// How much the data file grows at a time.
    pub growth_step_bytes: usize,
    /// Heap bytes of the account trie held in memory across roots (0: off, every root walks
    /// the stored trie). Over 10M accounts all of it is about 800 MiB.
    pub sparse_trie_bytes: usize,
    /// Blocks per commit.
    pub commit_blocks: u64,
    /// The layer's estimated bytes at which a commit starts whatever the block count.
    pub max_layer_bytes: u64,
    /// Threads a root runs on (0: one per core).
    pub root_threads: usize,
    /// Fewest changed accounts for which a root without the trie in memory splits the
    /// account trie across threads.
    pub min_split_accounts: usize,
}

impl Default for TrieStoreOptions {
    fn default() -> Self {
        Self {
            max_size_bytes: 1 << 40,
            growth_step_bytes: 256 << 20,
            sparse_trie_bytes: 1 << 30,
            commit_blocks: 64,
            max_layer_bytes: 256 << 20,
            root_threads: 0,
            min_split_accounts: 256,
        }
    }
}

/// A block and the state root after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrieHead {
    /// The block.
    pub block: u64,
    /// The state root after it.
    pub root: B256,
}

/// Blocks until the owner has made `block` durable, and says whether it did (`false`: the
/// owner is stopping; the commit is given up, and the blocks are replayed at the next
/// start).
pub type CommitGate = Arc<dyn Fn(u64) -> bool + Send + Sync>;

/// What [`TrieStore::apply`] did.
#[derive(Debug, Clone, Copy)]
pub struct BlockRoot {
    /// The block and its root.
    pub head: TrieHead,
    /// Seconds computing the root.
    pub root_seconds: f64,
    /// Leaves the root read.
    pub leaves: u64,
    /// Seconds handing a group to the commit thread (0 when none was due).
    pub handoff_seconds: f64,
    /// Estimated heap bytes of the changes held since the last landed commit, after it.
    pub layer_bytes: u64,
}

/// What the last landed commit did.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrieCommitStats {
    /// Its block.
    pub block: u64,
    /// Layer entries written.
    pub entries: u64,
    /// Seconds waiting for the owner to make the block durable.
    pub gate_seconds: f64,
    /// Seconds writing into the transaction.
    pub write_seconds: f64,
    /// Seconds of MDBX's commit.
    pub commit_seconds: f64,
}

/// A group on the commit thread.
struct Committing {
    head: TrieHead,
    layer: Arc<TrieLayer>,
    handle: std::thread::JoinHandle<Result<Option<TrieCommitStats>, TrieDbError>>,
}

/// The state trie of one environment, kept block by block (see the module documentation).
pub struct TrieStore {
    env: Environment,
    dbs: TrieDbs,
    dir: PathBuf,
    options: TrieStoreOptions,
    /// What the last landed commit holds (`None`: nothing yet, a genesis is due).
    committed: Option<TrieHead>,
    /// The last block applied.
    head: Option<TrieHead>,
    /// Every change since the last landed commit (the committing group's included).
    layer: TrieLayer,
    sparse: Arc<SparseAccounts>,
    committing: Option<Committing>,
    gate: CommitGate,
    blocks_since_handoff: u64,
    last_commit: Option<TrieCommitStats>,
    /// A root or a commit failed: the layer no longer follows the blocks, and only a new
    /// open (which replays from the last commit) may go on.
    failed: Option<String>,
}

impl std::fmt::Debug for TrieStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrieStore")
            .field("dir", &self.dir)
            .field("committed", &self.committed)
            .field("head", &self.head)
            .field("committing", &self.committing.as_ref().map(|c| c.head))
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl TrieStore {
    /// Opens (creating) the store at `dir`. Blocks are committed as soon as the commit
    /// thread has them until [`TrieStore::set_gate`] gives another gate.
    pub fn open(dir: &Path, options: TrieStoreOptions) -> Result<Self, TrieDbError> {
        let env = gigas_mdbx::open_env(
            dir,
            &gigas_mdbx::EnvOptions {
                max_size_bytes: options.max_size_bytes,
                growth_step_bytes: options.growth_step_bytes,
                page_size: None,
                max_readers: 256,
                // A commit is durable when it returns: the owner's replay after a crash
                // starts from it, so it bounds the replay.
                sync_mode: SyncMode::Durable,
                readahead: false,
                write_map: false,
                autosync_period: None,
                max_dirty_pages: None,
            },
        )?;
        let dbs = TrieDbs::open(&env, dir)?;
        let committed = {
            let txn = env
                .begin_ro_unsync()
                .map_err(TrieDbError::mdbx("begin a read transaction"))?;
            rows::get(&dbs, &txn, TrieTable::TrieMeta, META_COMMITTED)?
                .map(|bytes| decode_head(&bytes))
                .transpose()?
        };
        Ok(Self {
            env,
            dbs,
            dir: dir.to_path_buf(),
            sparse: Arc::new(SparseAccounts::new(options.sparse_trie_bytes)),
            options,
            committed,
            head: committed,
            layer: TrieLayer::default(),
            committing: None,
            gate: Arc::new(|_| true),
            blocks_since_handoff: 0,
            last_commit: None,
            failed: None,
        })
    }

    /// Sets what the commit thread waits on before it commits a block.
    pub fn set_gate(&mut self, gate: CommitGate) {
        self.gate = gate;
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last landed commit (`None`: no genesis yet).
    pub fn committed(&self) -> Option<TrieHead> {
        self.committed
    }

    /// The last block applied.
    pub fn head(&self) -> Option<TrieHead> {
        self.head
    }

    /// The account trie held in memory.
    pub fn sparse_trie_stats(&self) -> SparseTrieStats {
        self.sparse.stats()
    }

    /// Estimated heap bytes of the changes held since the last landed commit.
    pub fn layer_bytes(&self) -> u64 {
        self.layer.approx_bytes()
    }

    /// What the last landed commit did.
    pub fn last_commit(&self) -> Option<TrieCommitStats> {
        self.last_commit
    }

    fn check_usable(&self) -> Result<(), TrieDbError> {
        match &self.failed {
            Some(why) => Err(TrieDbError::Invariant {
                what: format!("the trie store failed earlier ({why}); reopen it to replay"),
            }),
            None => Ok(()),
        }
    }

    fn parallelism(&self) -> Parallelism {
        let threads = match self.options.root_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
        .min(64);
        Parallelism {
            threads,
            min_split_accounts: self.options.min_split_accounts,
        }
    }

    /// Writes the state of block `block` (a genesis, or a state read elsewhere to start
    /// over from) as the whole trie, replacing whatever the store held, computes its root
    /// (the parallel rebuild) and commits both. `accounts` and `slots` are by hashed key in
    /// any order; a slot of an account not listed is an error of the caller's, not checked.
    pub fn reset(
        &mut self,
        block: u64,
        mut accounts: Vec<(B256, AccountState)>,
        mut slots: Vec<(B256, B256, U256)>,
    ) -> Result<TrieHead, TrieDbError> {
        self.finish_commit()?;
        accounts.sort_unstable_by_key(|a| a.0);
        slots.sort_unstable_by_key(|s| (s.0, s.1));
        let txn = self
            .env
            .begin_rw_unsync()
            .map_err(TrieDbError::mdbx("begin the reset's write transaction"))?;
        store::clear(&self.dbs, &txn, &crate::tables::STATE_TABLES)?;
        let buf = &mut Vec::with_capacity(128);
        rows::put_accounts(&self.dbs, &txn, &accounts, buf)?;
        drop(accounts);
        rows::put_slots(&self.dbs, &txn, slots.into_iter(), buf)?;
        // The rebuild's parts read the last commit: the leaves must be in it. Until the
        // rebuild commits too, the store names no commit (a crash between the two leaves
        // a store the next open finds without a genesis).
        txn.del(self.dbs.get(TrieTable::TrieMeta), META_COMMITTED, None)
            .map_err(TrieDbError::mdbx("clear TrieMeta"))?;
        txn.commit()
            .map_err(TrieDbError::mdbx("commit the reset's leaves"))?;
        self.committed = None;
        self.head = None;
        let txn = self
            .env
            .begin_rw_unsync()
            .map_err(TrieDbError::mdbx("begin the rebuild's write transaction"))?;
        let root = rebuild::rebuild_root(&self.env, &self.dbs, &txn, rebuild::SPLIT_SLOTS)?;
        let head = TrieHead {
            block,
            root: root.root,
        };
        write_committed(&self.dbs, &txn, head)?;
        txn.commit()
            .map_err(TrieDbError::mdbx("commit the reset trie"))?;
        self.committed = Some(head);
        self.head = Some(head);
        self.layer = TrieLayer::default();
        self.sparse.clear();
        self.blocks_since_handoff = 0;
        self.failed = None;
        Ok(head)
    }

    /// Applies block `block`'s changes (`keys`: their keccak, [`HashedKeys::of`]) and returns
    /// its state root. The block must follow [`TrieStore::head`]. Hands the changes to the
    /// commit thread when a commit is due.
    pub fn apply(
        &mut self,
        block: u64,
        changes: &ChangeSet,
        keys: &HashedKeys,
    ) -> Result<BlockRoot, TrieDbError> {
        self.check_usable()?;
        if !keys.fits(changes) {
            return Err(TrieDbError::Invariant {
                what: format!("block {block} came with key hashes that do not fit its changes"),
            });
        }
        let Some(head) = self.head else {
            return Err(TrieDbError::NoGenesis);
        };
        if block != head.block + 1 {
            return Err(TrieDbError::NotNext {
                expected: head.block + 1,
                got: block,
            });
        }
        self.poll_commit()?;
        let start = Instant::now();
        let mut changed = ChangedKeys::default();
        changed.add_block(changes, keys);
        self.layer.write_block(changes, keys);
        let computed = layer::layered_root(
            &self.env,
            &self.dbs,
            &self.layer,
            changed,
            self.parallelism(),
            None,
            Some(&self.sparse),
        );
        let root = match computed {
            Ok(root) => root,
            Err(e) => {
                self.failed = Some(format!("the root of block {block}: {e}"));
                return Err(e);
            }
        };
        let (outcome, _) = self.layer.record_root(root);
        let root_seconds = start.elapsed().as_secs_f64();
        let head = TrieHead {
            block,
            root: outcome.root,
        };
        self.head = Some(head);
        self.blocks_since_handoff += 1;
        let mut handoff_seconds = 0.0;
        // The hand-over keeps the layer whole (its commit lands later): one estimate serves.
        let layer_bytes = self.layer.approx_bytes();
        if self.blocks_since_handoff >= self.options.commit_blocks.max(1)
            || layer_bytes >= self.options.max_layer_bytes
        {
            let start = Instant::now();
            if let Err(e) = self.hand_off() {
                self.failed = Some(format!("handing block {block} to the commit thread: {e}"));
                return Err(e);
            }
            handoff_seconds = start.elapsed().as_secs_f64();
        }
        Ok(BlockRoot {
            head,
            root_seconds,
            leaves: outcome.leaves,
            handoff_seconds,
            layer_bytes,
        })
    }

    /// Hands everything since the last commit to the commit thread (waiting for a commit
    /// under way first).
    fn hand_off(&mut self) -> Result<(), TrieDbError> {
        let Some(head) = self.head else {
            return Ok(());
        };
        self.finish_commit()?;
        // The account trie's nodes the trie in memory changed: part of the group.
        let drained = self.sparse.drain()?;
        self.layer.account_nodes.extend(drained);
        let layer = Arc::new(self.layer.clone());
        // What it holds is in the layer now: all of it may fold back into hashes.
        self.sparse.enforce_budget()?;
        let (env, dbs, gate, theirs) = (
            self.env.clone(),
            self.dbs,
            Arc::clone(&self.gate),
            Arc::clone(&layer),
        );
        let handle = std::thread::Builder::new()
            .name("gigas-trie-commit".into())
            .spawn(move || commit(&env, &dbs, &theirs, head, gate.as_ref()))
            .map_err(|e| TrieDbError::Invariant {
                what: format!("cannot start the trie's commit thread: {e}"),
            })?;
        self.committing = Some(Committing {
            head,
            layer,
            handle,
        });
        self.blocks_since_handoff = 0;
        Ok(())
    }

    /// Takes in the commit under way if it has ended.
    fn poll_commit(&mut self) -> Result<(), TrieDbError> {
        if self
            .committing
            .as_ref()
            .is_some_and(|c| c.handle.is_finished())
        {
            self.finish_commit()?;
        }
        Ok(())
    }

    /// Waits for the commit under way, if any, and takes it in.
    pub fn finish_commit(&mut self) -> Result<(), TrieDbError> {
        let Some(Committing {
            head,
            layer,
            handle,
        }) = self.committing.take()
        else {
            return Ok(());
        };
        let joined = handle
            .join()
            .unwrap_or(Err(TrieDbError::RootThreadPanicked));
        match joined {
            Ok(Some(stats)) => {
                self.committed = Some(head);
                // Reads of the last commit now see the group; what the layer holds of it
                // with the same value is there, and goes.
                self.layer.prune_committed(&layer);
                debug!(
                    block = head.block,
                    entries = stats.entries,
                    write_ms = stats.write_seconds * 1e3,
                    commit_ms = stats.commit_seconds * 1e3,
                    "trie group committed"
                );
                self.last_commit = Some(stats);
                Ok(())
            }
            // The owner is stopping: the layer keeps the group, and a later hand-over (or
            // the replay after a restart) commits it.
            Ok(None) => Ok(()),
            Err(e) => {
                self.failed = Some(format!("the commit of block {}: {e}", head.block));
                Err(e)
            }
        }
    }

    /// Commits everything applied (waiting on the gate for the head), and waits for it:
    /// for a clean stop.
    pub fn flush(&mut self) -> Result<(), TrieDbError> {
        self.check_usable()?;
        if self.head != self.committed {
            self.hand_off()?;
        }
        self.finish_commit()
    }
}

/// The commit under way finishes before the environment closes (the thread holds it open,
/// and opening it again meanwhile fails): a gate that blocks must give up when its owner
/// stops.
impl Drop for TrieStore {
    fn drop(&mut self) {
        if let Err(e) = self.finish_commit() {
            tracing::warn!(error = %e, "the trie's last commit failed; its blocks replay at the next start");
        }
    }
}

/// The commit thread's work: waits for the owner to make `head` durable, then writes `layer`
/// and `head` into one write transaction and commits it. `None`: the gate gave up.
fn commit(
    env: &Environment,
    dbs: &TrieDbs,
    layer: &TrieLayer,
    head: TrieHead,
    gate: &(dyn Fn(u64) -> bool + Send + Sync),
) -> Result<Option<TrieCommitStats>, TrieDbError> {
    let waiting = Instant::now();
    if !gate(head.block) {
        return Ok(None);
    }
    let gate_seconds = waiting.elapsed().as_secs_f64();
    let start = Instant::now();
    // MDBX ties a write transaction to the thread that begins it: this one, which commits.
    let txn = env
        .begin_rw_unsync()
        .map_err(TrieDbError::mdbx("begin the trie's commit transaction"))?;
    let written = flush::write_layer(dbs, &txn, layer, None, true)?;
    write_committed(dbs, &txn, head)?;
    let write_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    txn.commit()
        .map_err(TrieDbError::mdbx("commit the trie's group"))?;
    Ok(Some(TrieCommitStats {
        block: head.block,
        entries: written.entries,
        gate_seconds,
        write_seconds,
        commit_seconds: start.elapsed().as_secs_f64(),
    }))
}

fn write_committed(
    dbs: &TrieDbs,
    txn: &signet_libmdbx::tx::aliases::RwTxUnsync,
    head: TrieHead,
) -> Result<(), TrieDbError> {
    let mut value = [0u8; 40];
    value[..8].copy_from_slice(&head.block.to_be_bytes());
    value[8..].copy_from_slice(head.root.as_slice());
    txn.put(
        dbs.get(TrieTable::TrieMeta),
        META_COMMITTED,
        value,
        WriteFlags::empty(),
    )
    .map_err(TrieDbError::mdbx("write TrieMeta"))
}

fn decode_head(bytes: &[u8]) -> Result<TrieHead, TrieDbError> {
    if bytes.len() != 40 {
        return Err(TrieDbError::corrupt(
            TrieTable::TrieMeta.name(),
            META_COMMITTED,
            format!("{} bytes, not block (8) and root (32)", bytes.len()),
        ));
    }
    let mut block = [0u8; 8];
    block.copy_from_slice(&bytes[..8]);
    Ok(TrieHead {
        block: u64::from_be_bytes(block),
        root: B256::from_slice(&bytes[8..]),
    })
}
