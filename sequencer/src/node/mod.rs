//! The node: opening and recovering the stores, producing blocks, publishing them.
//!
//! One file per phase: `admission` (the pool's view of the tip, the journal), `build` (the
//! producer), `persist` (the pipeline and the committer) and `recovery` (the genesis and the
//! restart); this module holds the node's state, its configuration and errors, and
//! the reads the RPC backend uses.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{Header, ReceiptEnvelope, TxEnvelope, EMPTY_OMMER_ROOT_HASH};
use alloy_eips::eip7685::EMPTY_REQUESTS_HASH;
use alloy_primitives::{keccak256, Address, Bytes, Signature, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_trie::EMPTY_ROOT_HASH;
use gigas_blockstm::{Metrics as BlockStmMetrics, ParallelExecutor, Policy};
use gigas_evm::jit::{CodeCache, JitMode};
use gigas_evm::receipts::receipts_root_and_bloom;
use gigas_evm::{PreparedBlock, PreparedTx};
use gigas_history::{BlockRecord, History, HistoryOptions, SealedHeader};
use gigas_primitives::state_keys::{changeset_writes, Write};
use gigas_primitives::{ChainSpec, ChangeSet};
use gigas_statediff::PriorValues;
use gigas_txpool::{HeadAccounts, Journal, PoolConfig, Recoverer, TxPool};
use gigas_vilmo::{Batch, Options as VilmoOptions, Vilmo};
use prometheus_client::registry::Registry;
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use crate::metrics::{NodeMetrics, Stage};
use crate::state::{Head, RevmState};
use gigas_chain::ChainConfig;

mod admission;
mod build;
mod persist;
mod recovery;
mod trie;

pub use recovery::{genesis, genesis_block};
// The phases call each other's helpers; each module takes the others' through `super::*`.
use admission::*;
use build::*;
use persist::*;
use recovery::*;
use trie::*;

/// What the genesis block's extra data says.
pub const EXTRA_DATA: &[u8] = b"gigas";

/// Why the node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The chain config is unusable.
    #[error(transparent)]
    Chain(#[from] gigas_chain::ChainError),
    /// Vilmo failed.
    #[error("state store (Vilmo): {0}")]
    Vilmo(#[from] gigas_vilmo::Error),
    /// The chain history failed.
    #[error("chain history: {0}")]
    History(#[from] gigas_history::HistoryError),
    /// The journal failed.
    #[error("transaction journal: {0}")]
    Journal(#[from] gigas_txpool::JournalError),
    /// Reading state failed.
    #[error("state: {0}")]
    State(#[from] crate::state::StateError),
    /// A block could not be executed for a reason other than an invalid transaction.
    #[error("executing block {block}: {source}")]
    Execution {
        /// The block number.
        block: u64,
        /// The executor's error.
        source: gigas_evm::ExecutionError,
    },
    /// The data directory holds stores that do not belong together.
    #[error("data directory {dir}: {message}")]
    Inconsistent {
        /// The data directory.
        dir: PathBuf,
        /// What does not fit, and what to do.
        message: String,
    },
    /// Signing a header failed.
    #[error("signing block {0}: {1}")]
    Sign(u64, String),
    /// Reading the values a block's changes replace failed.
    #[error("reading the prior state of block {0}: {1}")]
    Prior(u64, String),
    /// The state trie (`DATADIR/trie`) failed.
    #[error("state trie in {dir}: {source}")]
    Trie {
        /// Its directory.
        dir: PathBuf,
        /// What failed.
        source: gigas_triedb::TrieDbError,
    },
    /// A block's state root could not be computed.
    #[error("the state root of block {block}: {source}")]
    Root {
        /// The block.
        block: u64,
        /// What failed.
        source: gigas_triedb::TrieDbError,
    },
    /// The committer thread could not start, or stopped without saying why.
    #[error("block pipeline: {0}")]
    Pipeline(String),
}

/// Why a transaction was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The pool refused it; the text is the pool's.
    #[error(transparent)]
    Rejected(#[from] gigas_txpool::TxPoolError),
    /// It could not be made durable.
    #[error("transaction journal: {0}")]
    Journal(#[from] gigas_txpool::JournalError),
    /// The node failed while checking it (not the transaction's fault).
    #[error("{0}")]
    Failed(String),
}

/// How the node runs.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Where Vilmo (`state/`), the chain history (`history/`) and the journal live.
    pub datadir: PathBuf,
    /// The chain.
    pub chain: ChainConfig,
    /// When compiled code runs.
    pub jit: JitMode,
    /// Block-STM workers per block (the producing thread is one of them).
    pub threads: usize,
    /// Sender-recovery threads.
    pub recovery_threads: usize,
    /// The most transactions the pool holds.
    pub pool_max_txs: usize,
    /// The most transactions of one sender the pool holds.
    pub pool_max_per_sender: usize,
    /// The most encoded bytes of transactions the pool holds.
    pub pool_max_bytes: usize,
    /// The most bytes of compiled code the JIT's cache keeps.
    pub jit_budget_bytes: u64,
    /// Contracts to compile at their first call instead of by the gas threshold
    /// (`--jit.hotlist`, as `gigas-profiler` writes it).
    pub jit_hot_list: Option<gigas_jit::HotList>,
    /// With a hot list, also compile unlisted contracts once they reach the gas threshold
    /// (`--jit.hotlist-with-threshold`); without it the list alone is compiled.
    pub jit_hot_list_with_threshold: bool,
    /// The smallest tip the pool accepts, in wei.
    pub min_priority_fee: u128,
    /// The most transactions in one block.
    pub max_block_txs: usize,
    /// Blocks whose state stays queryable (old values kept).
    pub state_history_blocks: u64,
    /// Blocks the history's indexer waits for before it writes a batch to its index.
    pub history_index_batch: usize,
    /// How often the history's indexer makes its index durable (zero: every batch).
    pub history_index_sync_period: Duration,
    /// Heap bytes of the account trie held in memory across blocks' roots (0: every root
    /// walks the stored trie). Over 10M accounts all of it is about 800 MiB.
    pub trie_memory_bytes: usize,
    /// Blocks per commit of the state trie to `DATADIR/trie` (what a restart replays at
    /// most, plus the commit under way).
    pub trie_commit_blocks: u64,
}

impl NodeConfig {
    /// Defaults for `chain` in `datadir`.
    pub fn new(datadir: PathBuf, chain: ChainConfig) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            datadir,
            chain,
            jit: JitMode::On,
            threads: cores,
            recovery_threads: cores,
            pool_max_txs: 100_000,
            pool_max_per_sender: 256,
            pool_max_bytes: 256 << 20,
            jit_budget_bytes: gigas_jit::cache::DEFAULT_BUDGET_BYTES,
            jit_hot_list: None,
            jit_hot_list_with_threshold: false,
            min_priority_fee: 0,
            max_block_txs: 20_000,
            state_history_blocks: 10_000,
            history_index_batch: HistoryOptions::default().index_min_blocks,
            history_index_sync_period: HistoryOptions::default().index_sync_period,
            trie_memory_bytes: DEFAULT_TRIE_MEMORY_BYTES,
            trie_commit_blocks: gigas_triedb::TrieStoreOptions::default().commit_blocks,
        }
    }
}

/// The head block, as published.
#[derive(Debug, Clone)]
pub struct HeadBlock {
    /// The sealed header.
    pub header: Header,
    /// Its hash.
    pub hash: B256,
    /// The sequencer's signature over the hash.
    pub signature: Signature,
}

impl HeadBlock {
    fn from_sealed(sealed: SealedHeader) -> Self {
        Self {
            header: sealed.header,
            hash: sealed.hash,
            signature: sealed.signature,
        }
    }
}

/// A block that is durable and published, for subscribers (RPC subscriptions, the state-diff
/// writer).
#[derive(Debug)]
pub struct CommittedBlock {
    /// The sealed header.
    pub header: Header,
    /// Its hash.
    pub hash: B256,
    /// The sequencer's signature over the hash.
    pub signature: Signature,
    /// The transactions with their senders (shared with the in-flight lookup until the
    /// block is published).
    pub transactions: Arc<[Recovered<TxEnvelope>]>,
    /// Their receipts.
    pub receipts: Vec<ReceiptEnvelope>,
    /// The block's ChangeSet, encoded.
    pub changeset: Vec<u8>,
    /// The block's ChangeSet.
    pub changes: ChangeSet,
    /// The keccak of its keys, computed once by the producer for the state root and used
    /// again by the diff writer for the state commitment.
    pub hashed: gigas_primitives::HashedKeys,
    /// The values its changed keys held before the block, read while they were still the
    /// head's: what the state-diff writer packs deltas against.
    pub prior: PriorValues,
}

/// [`NodeConfig::trie_memory_bytes`] by default: the whole account trie over 10M accounts
/// (about 800 MiB) with room for its growth.
pub const DEFAULT_TRIE_MEMORY_BYTES: usize = 1 << 30;

/// How many sealed blocks may wait for the committer: the producer stops at this many, so a
/// slow disk bounds the memory the pipeline holds and the latency it adds.
const PIPELINE_DEPTH: usize = 3;

/// The most blocks one history transaction commits.
pub const MAX_GROUP: usize = 8;

/// How long a submission whose journal write failed waits for the block that took its
/// transaction to become durable before refusing it: many block times, so that only a
/// committer that failed or a disk that stalled makes it refuse.
const DURABLE_WAIT: Duration = Duration::from_secs(30);

/// The running node's shared state. The block producer thread writes; RPC tasks read.
pub struct Node {
    config: NodeConfig,
    spec: ChainSpec,
    signer: PrivateKeySigner,
    vilmo: RwLock<Vilmo>,
    history: History,
    pool: TxPool,
    journal: Journal,
    recoverer: Recoverer,
    head: RwLock<HeadBlock>,
    /// The newest block in Vilmo and published (the committer's progress; shared with the
    /// state trie's commit gate).
    committed_through: Arc<AtomicU64>,
    /// The state trie: the producer computes each block's root with it.
    trie: Mutex<gigas_triedb::TrieStore>,
    /// The trie's memory after the last block (account trie in memory, changes since its
    /// commit), for the memory gauges without waiting on the trie's lock.
    trie_memory: [AtomicU64; 2],
    /// The blocks sealed and not yet committed, as the producer last saw them: submissions
    /// check nonces against the tip they make.
    pending: RwLock<Arc<Vec<Arc<crate::state::PendingBlock>>>>,
    committed: broadcast::Sender<Arc<CommittedBlock>>,
    jit: Arc<CodeCache>,
    blockstm: BlockStmMetrics,
    metrics: NodeMetrics,
    registry: Mutex<Registry>,
    stop: Arc<AtomicBool>,
    /// Held by the committer over each group it commits; tests take it to keep sealed blocks
    /// from becoming durable ([`Node::hold_commits`]).
    commit_gate: Mutex<()>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("datadir", &self.config.datadir)
            .field("head", &self.head_number())
            .finish_non_exhaustive()
    }
}

fn seconds(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

impl Node {
    /// Opens (or creates) the node's stores in `config.datadir`, recovers to one consistent
    /// head, and replays the journal into the pool.
    pub fn open(config: NodeConfig) -> Result<Arc<Self>, NodeError> {
        let chain = &config.chain;
        chain.validate()?;
        if config.state_history_blocks < crate::diffs::MIN_STATE_HISTORY {
            return Err(NodeError::Inconsistent {
                dir: config.datadir.clone(),
                message: format!(
                    "a state history of {} blocks is too short: recovery and the diff writer \
                     need at least {}",
                    config.state_history_blocks,
                    crate::diffs::MIN_STATE_HISTORY
                ),
            });
        }
        let signer = chain.signer()?;
        let spec = chain.spec();
        let dir = &config.datadir;
        std::fs::create_dir_all(dir).map_err(|e| NodeError::Inconsistent {
            dir: dir.clone(),
            message: format!("cannot create it: {e}"),
        })?;
        let mut vilmo = Vilmo::open(dir.join("state"), VilmoOptions::default())?;
        let history = History::open(
            &dir.join("history"),
            HistoryOptions {
                state_history_blocks: config.state_history_blocks,
                index_min_blocks: config.history_index_batch,
                index_sync_period: config.history_index_sync_period,
                ..HistoryOptions::default()
            },
        )?;
        check_layout(&config.datadir, &history)?;
        let mut trie = open_trie(&config)?;
        let head = recover(&config, &signer, &mut vilmo, &history, &mut trie)?;
        recover_trie(&config, &mut trie, &vilmo, &history, &head)?;
        let committed_through = Arc::new(AtomicU64::new(head.header.number));
        let stop = Arc::new(AtomicBool::new(false));
        trie.set_gate(commit_gate(committed_through.clone(), stop.clone()));
        let pool = TxPool::new(PoolConfig {
            max_txs: config.pool_max_txs,
            max_per_sender: config.pool_max_per_sender,
            max_bytes: config.pool_max_bytes,
            min_priority_fee: config.min_priority_fee,
            recovery_threads: config.recovery_threads,
            spec: gigas_evm::spec::spec_id(chain.fork),
            ..PoolConfig::new(chain.chain_id, chain.block_gas_limit)
        });
        let recoverer =
            Recoverer::new(pool.config().clone(), pool.metrics().clone()).map_err(|e| {
                NodeError::Inconsistent {
                    dir: dir.clone(),
                    message: format!("cannot start the sender-recovery threads: {e}"),
                }
            })?;
        let (journal, replay) = Journal::open(&dir.join("journal"))?;
        let (committed, _) = broadcast::channel(256);
        let jit_config = gigas_jit::CacheConfig {
            budget_bytes: config.jit_budget_bytes,
            ..gigas_jit::CacheConfig::new(config.jit)
        };
        let jit = match &config.jit_hot_list {
            // The list alone by default: sized by the profiler to the code cache's budget,
            // it keeps the cache from evicting and compiling again on every pass, which the
            // threshold's extra contracts bring back (gigas-bench jit --hotlist: list alone
            // 1.05x, list and threshold 0.95x, threshold 1.00x on the 50 mainnet blocks).
            Some(hot) if !config.jit_hot_list_with_threshold => CodeCache::with_hot_list(
                gigas_jit::CacheConfig {
                    hotness: gigas_jit::Hotness::NEVER,
                    ..jit_config
                },
                hot.clone(),
            ),
            Some(hot) => CodeCache::with_hot_list(jit_config, hot.clone()),
            None => CodeCache::with_config(jit_config),
        };
        let node = Arc::new(Self {
            spec,
            signer,
            vilmo: RwLock::new(vilmo),
            history,
            pool,
            journal,
            recoverer,
            committed_through,
            trie_memory: [
                AtomicU64::new(trie.sparse_trie_stats().bytes),
                AtomicU64::new(trie.layer_bytes()),
            ],
            trie: Mutex::new(trie),
            head: RwLock::new(head),
            pending: RwLock::new(Arc::new(Vec::new())),
            committed,
            jit,
            blockstm: BlockStmMetrics::default(),
            metrics: NodeMetrics::default(),
            registry: Mutex::new(Registry::default()),
            stop,
            commit_gate: Mutex::new(()),
            config,
        });
        node.replay_journal(replay)?;
        node.register_metrics();
        Ok(node)
    }

    fn register_metrics(&self) {
        let mut registry = lock(&self.registry);
        self.metrics.register(&mut registry);
        self.blockstm.register(&mut registry);
        self.jit.stats().register(&mut registry);
        self.pool.metrics().register(&mut registry);
        self.journal.metrics().register(&mut registry);
        self.history.metrics().register(&mut registry);
        self.vilmo_read().metrics().register(&mut registry);
        self.metrics.head.set(self.head_number() as i64);
    }

    /// The metrics registry, for the `/metrics` endpoint and for the RPC layer to add its own.
    pub fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        lock(&self.registry)
    }

    /// Vilmo's statistics (keys, files, bytes on disk, its index's memory).
    pub fn vilmo_stats(&self) -> gigas_vilmo::Stats {
        self.vilmo_read().stats()
    }

    fn vilmo_read(&self) -> std::sync::RwLockReadGuard<'_, Vilmo> {
        self.vilmo
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The chain's fork schedule.
    pub fn spec(&self) -> &ChainSpec {
        &self.spec
    }

    /// The sequencer's address (the blocks' beneficiary and signer).
    pub fn sequencer_address(&self) -> Address {
        self.signer.address()
    }

    /// The chain history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Signs block `block_hash`'s state commitment (the lattice checksum `lattice`) with the
    /// key that signs its header.
    pub fn sign_commitment(
        &self,
        number: u64,
        block_hash: &B256,
        lattice: &B256,
    ) -> Result<alloy_primitives::Signature, NodeError> {
        self.signer
            .sign_hash_sync(&gigas_statediff::commitment_digest(block_hash, lattice))
            .map_err(|e| NodeError::Sign(number, format!("state commitment: {e}")))
    }

    /// The transaction pool.
    pub fn pool(&self) -> &TxPool {
        &self.pool
    }

    /// What Block-STM did in the blocks this node built.
    pub fn blockstm_metrics(&self) -> &BlockStmMetrics {
        &self.blockstm
    }

    /// The JIT code cache.
    pub fn jit(&self) -> &Arc<CodeCache> {
        &self.jit
    }

    /// Bytes of the state trie's account trie in memory and of its changes since its last
    /// commit, as of the last block.
    pub fn trie_memory(&self) -> (u64, u64) {
        (
            self.trie_memory[0].load(Ordering::Relaxed),
            self.trie_memory[1].load(Ordering::Relaxed),
        )
    }

    /// The node's metrics.
    pub fn metrics(&self) -> &NodeMetrics {
        &self.metrics
    }

    /// The published head.
    pub fn head(&self) -> HeadBlock {
        self.head
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The published head's number.
    pub fn head_number(&self) -> u64 {
        self.head
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .header
            .number
    }

    /// The base fee of the block after the published head.
    pub fn next_base_fee(&self) -> u64 {
        self.base_fee_after(&self.head().header)
    }

    fn set_pending(&self, pending: &[Arc<crate::state::PendingBlock>]) {
        *self
            .pending
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(pending.to_vec());
    }

    /// Every block committed from now on.
    pub fn subscribe_committed(&self) -> broadcast::Receiver<Arc<CommittedBlock>> {
        self.committed.subscribe()
    }

    /// revm's view of the head state held by `vilmo` (a read guard of this node's store).
    fn head_db<'a>(&'a self, vilmo: &'a Vilmo) -> RevmState<'a, Head<'a>> {
        RevmState {
            source: Head(vilmo),
            hashes: &self.history,
        }
    }

    /// Runs `f` over the state at the end of block `block` (the head's or an older one). No
    /// lock is held across `f`: each read takes the store's for itself (see
    /// [`crate::state::At`]), so a long execution never stalls block commits.
    pub fn with_state_at<T>(
        &self,
        block: u64,
        f: impl FnOnce(&RevmState<'_, crate::state::At<'_>>) -> T,
    ) -> T {
        let db = RevmState {
            source: crate::state::At {
                vilmo: &self.vilmo,
                history: &self.history,
                block,
            },
            hashes: &self.history,
        };
        f(&db)
    }

    /// Runs `f` over the producer's tip: the published head with the blocks sealed since laid
    /// over it (what submissions are checked against).
    fn with_tip<T>(&self, f: impl FnOnce(RevmState<'_, crate::state::Tip<'_>>) -> T) -> T {
        // Vilmo first, then the blocks in flight: a block leaves the in-flight list only
        // after it is in Vilmo, so no block is missed between the two reads.
        let vilmo = self.vilmo_read();
        let pending = self
            .pending
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let tip = crate::state::Tip {
            vilmo: &vilmo,
            pending: &pending,
            history: &self.history,
        };
        f(RevmState {
            source: tip,
            hashes: &self.history,
        })
    }

    /// The transaction journal, for tests that simulate its failure
    /// ([`Journal::fail_next_write`]).
    #[doc(hidden)]
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Takes Vilmo's write lock as the committer does while it applies a block, for tests
    /// that a stalled commit stalls nothing that must not wait for it.
    #[doc(hidden)]
    pub fn hold_state_write_lock(&self) -> std::sync::RwLockWriteGuard<'_, Vilmo> {
        self.vilmo
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps the committer from starting its next group (and so every sealed block from
    /// becoming durable) while the guard lives, for tests of what is acknowledged before a
    /// block is durable.
    #[doc(hidden)]
    pub fn hold_commits(&self) -> std::sync::MutexGuard<'_, ()> {
        lock(&self.commit_gate)
    }

    /// Accepts a raw signed transaction: recovers its sender off the caller's thread, checks
    /// it against the head state, adds it to the pool and makes it durable in the journal.
    /// Returns its hash only once it is journaled.
    ///
    /// The check reads state under Vilmo's read lock and takes the pool's lock, either of
    /// which may wait on the committer; it runs on the blocking pool, so that a wait never
    /// holds one of the few async worker threads every connection is served from.
    pub async fn submit(self: &Arc<Self>, raw: Bytes) -> Result<B256, SubmitError> {
        let tx = self.recoverer.recover(raw.clone()).await?;
        let hash = tx.hash;
        let node = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let base_fee = node.next_base_fee();
            node.with_tip(|db| node.pool.add(tx, &PoolView(db), base_fee))
        })
        .await
        .map_err(|e| SubmitError::Failed(format!("the pool check did not finish: {e}")))??;
        if let Err(e) = self.journal.append(raw).await {
            tracing::error!(error = %e, "the transaction journal failed: transactions are refused until a restart");
            // Not durable, so not accepted: take it back out, alone (its sender's later
            // transactions were accepted and journaled). If a block took it first, it is as
            // durable as that block, once that block is: refusing it then would tell the
            // client a mined transaction was not accepted, and answering before would
            // acknowledge what a crash can still lose (the journal does not hold it).
            if !self.pool.withdraw(hash) && self.wait_block_durable(hash).await {
                return Ok(hash);
            }
            return Err(SubmitError::Journal(e));
        }
        Ok(hash)
    }

    /// Waits until the block that took transaction `hash` is durable and published, for at
    /// most [`DURABLE_WAIT`]. False when no block holds it (it was replaced or evicted) or the
    /// block did not become durable in time (the committer failed or stalled): the caller
    /// must then refuse the transaction, since nothing durable holds it yet.
    async fn wait_block_durable(&self, hash: B256) -> bool {
        let deadline = tokio::time::Instant::now() + DURABLE_WAIT;
        loop {
            match self.in_flight_block_of(hash) {
                // Published implies durable: the committer publishes a block after its
                // history and its state are synced.
                Some(number) if self.committed_through.load(Ordering::SeqCst) >= number => {
                    return true
                }
                Some(_) => {}
                // A block leaves the in-flight list only after it is published, so a
                // transaction that is in neither was in no block.
                None => return matches!(self.history.transaction_location(hash), Ok(Some(_))),
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::error!(%hash, "the block holding a transaction whose journal write failed did not become durable in time; the transaction is refused");
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Asks the producer to stop after the block it is producing.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
