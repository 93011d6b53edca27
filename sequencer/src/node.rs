//! The node: opening and recovering the stores, producing blocks, publishing them.

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
use gigas_primitives::{genesis_checksum, state_checksum, ChainSpec, ChangeSet};
use gigas_statediff::PriorValues;
use gigas_txpool::{HeadAccounts, Journal, PoolConfig, Recoverer, TxPool};
use gigas_vilmo::{Batch, Options as VilmoOptions, Vilmo};
use prometheus_client::registry::Registry;
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use crate::metrics::{NodeMetrics, Stage};
use crate::state::{Head, RevmState};
use gigas_chain::ChainConfig;

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
            min_priority_fee: 0,
            max_block_txs: 20_000,
            state_history_blocks: 10_000,
            history_index_batch: HistoryOptions::default().index_min_blocks,
            history_index_sync_period: HistoryOptions::default().index_sync_period,
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
    /// The values its changed keys held before the block, read while they were still the
    /// head's: what the state-diff writer packs deltas against.
    pub prior: PriorValues,
}

/// How many sealed blocks may wait for the committer: the producer stops at this many, so a
/// slow disk bounds the memory the pipeline holds and the latency it adds.
const PIPELINE_DEPTH: usize = 3;

/// The most blocks one history transaction commits.
pub const MAX_GROUP: usize = 8;

/// A block the producer sealed, on its way to the committer.
struct SealedBlock {
    /// What subscribers receive once it is published.
    block: CommittedBlock,
    /// The old value of every key it writes, for the history.
    state_history: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Its writes (for Vilmo) and transactions, as the producer's tip reads them meanwhile.
    pending: Arc<crate::state::PendingBlock>,
    /// When its selection started.
    started: Instant,
}

/// The producer's side of the block pipeline.
///
/// Two threads share the work of a block. The **producer** selects, executes and seals block
/// `N + 1` on its *tip*: Vilmo's committed state with the writes of the blocks it has sealed
/// but the committer has not yet committed laid over it ([`crate::state::Tip`]). It hands each
/// sealed block to the **committer** through a channel of [`PIPELINE_DEPTH`] slots and moves
/// the pool to the tip at once. The committer takes every block waiting (up to
/// [`MAX_GROUP`]), makes them durable in the history (one block-log append and sync), then commits
/// each block's state to Vilmo and publishes it, in order. So a block's durable commit (the
/// fsync-bound part of its time) overlaps the next block's execution (the CPU-bound part), and
/// when the disk falls behind, blocks queue and commit in groups that share one sync.
///
/// The order of durable steps is the one the crate documentation argues from: a block's
/// history before its state, its state before its publication, and blocks in order. The
/// producer forgets an in-flight block only after the committer reports it in Vilmo.
struct Pipeline {
    sender: Option<std::sync::mpsc::SyncSender<SealedBlock>>,
    committer: Option<std::thread::JoinHandle<Result<(), NodeError>>>,
    /// The blocks sealed and not yet known to be in Vilmo, oldest first.
    pending: Vec<Arc<crate::state::PendingBlock>>,
    /// The last block sealed (or the published head at start).
    tip: HeadBlock,
}

impl Pipeline {
    fn start(node: &Arc<Node>) -> Result<Self, NodeError> {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<SealedBlock>(PIPELINE_DEPTH);
        let committer_node = node.clone();
        let committer = std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || {
                let mut last_published = None;
                // Ends when the producer drops its sender and every block sent is committed.
                while let Ok(first) = receiver.recv() {
                    let mut group = vec![first];
                    while group.len() < MAX_GROUP {
                        match receiver.try_recv() {
                            Ok(next) => group.push(next),
                            Err(_) => break,
                        }
                    }
                    if let Err(e) = committer_node.commit_group(group, &mut last_published) {
                        tracing::error!(error = %e, "committing blocks failed: the producer stops");
                        return Err(e);
                    }
                }
                Ok(())
            })
            .map_err(|e| NodeError::Pipeline(format!("cannot start the committer thread: {e}")))?;
        Ok(Self {
            sender: Some(sender),
            committer: Some(committer),
            pending: Vec::new(),
            tip: node.head(),
        })
    }

    /// The tip's state over `vilmo` (a read guard of the node's store).
    fn view<'a>(&'a self, node: &'a Node, vilmo: &'a Vilmo) -> crate::state::Tip<'a> {
        crate::state::Tip {
            vilmo,
            pending: &self.pending,
            history: &node.history,
        }
    }

    /// Drops the in-flight blocks the committer has put in Vilmo.
    fn forget_committed(&mut self, node: &Node) {
        let through = node.committed_through.load(Ordering::SeqCst);
        let before = self.pending.len();
        self.pending.retain(|b| b.number > through);
        if self.pending.len() != before {
            node.set_pending(&self.pending);
        }
    }

    /// Hands `sealed` to the committer (waiting while [`PIPELINE_DEPTH`] blocks wait).
    fn send(&mut self, node: &Node, sealed: SealedBlock) -> Result<(), NodeError> {
        self.pending.push(sealed.pending.clone());
        node.set_pending(&self.pending);
        if self.sender.as_ref().is_some_and(|s| s.send(sealed).is_ok()) {
            return Ok(());
        }
        // The committer stopped: its error says why.
        Err(self
            .join()
            .err()
            .unwrap_or_else(|| NodeError::Pipeline("the committer thread stopped".into())))
    }

    /// Closes the channel and waits for the committer to commit what it holds.
    fn finish(mut self) -> Result<(), NodeError> {
        self.sender = None;
        self.join()
    }

    fn join(&mut self) -> Result<(), NodeError> {
        self.sender = None;
        match self.committer.take() {
            Some(handle) => handle.join().unwrap_or_else(|_| {
                Err(NodeError::Pipeline("the committer thread panicked".into()))
            }),
            None => Ok(()),
        }
    }
}

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
    /// The newest block in Vilmo and published (the committer's progress).
    committed_through: AtomicU64,
    /// The blocks sealed and not yet committed, as the producer last saw them: submissions
    /// check nonces against the tip they make.
    pending: RwLock<Arc<Vec<Arc<crate::state::PendingBlock>>>>,
    committed: broadcast::Sender<Arc<CommittedBlock>>,
    jit: Arc<CodeCache>,
    blockstm: BlockStmMetrics,
    metrics: NodeMetrics,
    registry: Mutex<Registry>,
    stop: AtomicBool,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("datadir", &self.config.datadir)
            .field("head", &self.head_number())
            .finish_non_exhaustive()
    }
}

/// The tip's state, as the pool checks transactions against it.
struct PoolView<'a, S>(RevmState<'a, S>);

impl<S: crate::state::StateSource> HeadAccounts for PoolView<'_, S> {
    fn account(&self, address: Address) -> Result<(u64, U256), String> {
        match self.0.account(&address) {
            Ok(Some(a)) => Ok((a.state.nonce, a.state.balance)),
            Ok(None) => Ok((0, U256::ZERO)),
            Err(e) => Err(e.to_string()),
        }
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
        let head = recover(&config, &signer, &mut vilmo, &history)?;
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
        let jit = CodeCache::with_config(gigas_jit::CacheConfig {
            budget_bytes: config.jit_budget_bytes,
            ..gigas_jit::CacheConfig::new(config.jit)
        });
        let node = Arc::new(Self {
            spec,
            signer,
            vilmo: RwLock::new(vilmo),
            history,
            pool,
            journal,
            recoverer,
            committed_through: AtomicU64::new(head.header.number),
            head: RwLock::new(head),
            pending: RwLock::new(Arc::new(Vec::new())),
            committed,
            jit,
            blockstm: BlockStmMetrics::default(),
            metrics: NodeMetrics::default(),
            registry: Mutex::new(Registry::default()),
            stop: AtomicBool::new(false),
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

    /// Adds the journal's transactions to the pool (those a block made invalid are dropped)
    /// and rewrites the journal to what the pool kept.
    fn replay_journal(self: &Arc<Self>, replay: Vec<Bytes>) -> Result<(), NodeError> {
        let total = replay.len();
        let mut kept = 0usize;
        let base_fee = self.next_base_fee();
        let recovered = gigas_txpool::decode_and_recover_all(
            &replay,
            self.pool.config(),
            self.config.recovery_threads,
        );
        {
            let vilmo = self.vilmo_read();
            let view = PoolView(self.head_db(&vilmo));
            for tx in recovered {
                // A rewrite can leave a transaction twice; "already known" and "nonce too
                // low" (included by a durable block) are expected here.
                let Ok(tx) = tx else { continue };
                // Readmitted without the price checks: the base fee may have risen since the
                // transaction was accepted (see `TxPool::readmit`).
                if self.pool.readmit(tx, &view, base_fee).is_ok() {
                    kept += 1;
                }
            }
        }
        let node = self.clone();
        self.journal.rewrite(move || node.pool.all_encoded())?;
        if total > 0 {
            info!(journaled = total, kept, "replayed the transaction journal");
        }
        Ok(())
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

    /// The nonce of `address` at the producer's tip. A transaction leaves the pool when its
    /// block is sealed and shows in the head only once that block is published; the tip
    /// holds it in between.
    pub fn tip_nonce(&self, address: Address) -> Result<u64, NodeError> {
        self.with_tip(|db| Ok(db.account(&address)?.map_or(0, |a| a.state.nonce)))
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
            // durable as that block: refusing it would tell the client a mined transaction
            // was not accepted.
            if !self.pool.withdraw(hash)
                && (self.in_flight_transaction(hash).is_some()
                    || self.history.transaction(hash).ok().flatten().is_some())
            {
                return Ok(hash);
            }
            return Err(SubmitError::Journal(e));
        }
        Ok(hash)
    }

    /// Asks the producer to stop after the block it is producing.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Produces blocks every block time until [`Self::stop`], committing them on a second
    /// thread (see [`Pipeline`]). Runs on its own thread; returns the first error of either.
    pub fn run_producer(self: &Arc<Self>) -> Result<(), NodeError> {
        let block_time = Duration::from_millis(self.config.chain.block_time_ms);
        let mut executor = ParallelExecutor::new(self.config.threads)
            .with_jit(Some(self.jit.clone()))
            .building();
        let policy = Policy::default();
        let mut pipeline = Pipeline::start(self)?;
        let mut next = Instant::now() + block_time;
        let result = loop {
            if self.stop.load(Ordering::SeqCst) {
                break Ok(());
            }
            let now = Instant::now();
            if next > now {
                std::thread::sleep((next - now).min(Duration::from_millis(50)));
                continue;
            }
            // A block that took longer than the block time starts the next one at once.
            next = (next + block_time).max(Instant::now());
            if let Err(e) = self.produce(&mut executor, &policy, &mut pipeline) {
                break Err(e);
            }
        };
        // Whatever was handed to the committer is committed before the producer returns.
        let finished = pipeline.finish();
        result.and(finished)
    }

    /// Takes the transactions the block left out (invalid where they stood: a nonce or a
    /// balance an earlier transaction of the block changed) out of `selected`, and out of the
    /// pool unless they may become valid: only the skipped transaction goes, never its
    /// sender's later ones (an EIP-7702 authorization that bumped a victim's nonce makes the
    /// victim's next transaction the valid one). A nonce too high waits in the pool behind
    /// its gap (its predecessor was skipped here).
    fn drop_skipped(
        &self,
        number: u64,
        skipped: &[gigas_blockstm::Skipped],
        selected: &mut Vec<Arc<gigas_txpool::PooledTx>>,
    ) {
        for s in skipped {
            let Some(tx) = selected.get(s.index) else {
                continue;
            };
            let gap = matches!(
                s.reason,
                gigas_evm::revm::context::result::InvalidTransaction::NonceTooHigh { .. }
            );
            debug!(block = number, tx = %s.hash, sender = %tx.sender, reason = %s.reason, kept = gap, "left a transaction invalid in its place out of the block");
            self.metrics.transactions_dropped.inc();
            if !gap {
                self.pool.remove_invalid(s.hash, &s.reason.to_string());
            }
        }
        let mut index = 0;
        let mut next_skipped = skipped.iter().map(|s| s.index).peekable();
        selected.retain(|_| {
            let keep = next_skipped.next_if_eq(&index).is_none();
            index += 1;
            keep
        });
    }

    /// Builds, executes and seals one block on the producer's tip and hands it to the
    /// committer; the pool moves on to the tip at once.
    fn produce(
        self: &Arc<Self>,
        executor: &mut ParallelExecutor,
        policy: &Policy,
        pipeline: &mut Pipeline,
    ) -> Result<u64, NodeError> {
        let started = Instant::now();
        pipeline.forget_committed(self);
        if self.journal_needs_rewrite() {
            self.start_journal_rewrite();
        }
        let parent = pipeline.tip.clone();
        let number = parent.header.number + 1;
        let chain = &self.config.chain;
        let base_fee = self.base_fee_after(&parent.header);
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // Several blocks share a second at sub-second block times; time never runs back.
        let timestamp = unix.max(parent.header.timestamp);
        let prevrandao = keccak256([parent.hash.as_slice(), &number.to_be_bytes()].concat());
        let beneficiary = self.signer.address();

        let t = Instant::now();
        let mut selected =
            self.pool
                .best(base_fee, chain.block_gas_limit, self.config.max_block_txs);
        self.metrics.stage(Stage::Select, seconds(t));

        let t = Instant::now();
        // The header's own fields drive execution, so that a re-execution from the header
        // (the prestate tracer, a verifying full node) sees the same environment.
        let mut header = Header {
            parent_hash: parent.hash,
            beneficiary,
            number,
            timestamp,
            mix_hash: prevrandao,
            base_fee_per_gas: Some(base_fee),
            ..header_template(chain)
        };
        let block_env = gigas_evm::env::block_env_of(&header, chain.fork);
        let vilmo = self.vilmo_read();
        let tip = pipeline.view(self, &vilmo);
        let db = RevmState {
            source: tip,
            hashes: &tip,
        };
        let txs: Vec<PreparedTx> = selected
            .iter()
            .map(|tx| PreparedTx {
                hash: tx.hash,
                tx_type: tx.tx.tx_type(),
                env: gigas_evm::env::tx_env_from(tx.tx.inner(), tx.sender),
            })
            .collect();
        let block = PreparedBlock::synthetic(&self.spec, block_env.clone(), txs);
        let (_, executed) = executor
            .execute_with_policy(&block, &db, policy, &self.blockstm)
            .map_err(|source| NodeError::Execution {
                block: number,
                source,
            })?;
        // Every sender the block selected is re-read after it, the skipped ones' too: the pool
        // then drops what became unpayable or stale and promotes what a moved nonce unblocked.
        let senders: Vec<Address> = {
            let mut s: Vec<Address> = selected.iter().map(|t| t.sender).collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        if !executed.skipped.is_empty() {
            self.drop_skipped(number, &executed.skipped, &mut selected);
        }
        let outcome = executed.outcome;
        self.metrics.stage(Stage::Execute, seconds(t));

        let t = Instant::now();
        let transactions: Arc<[Recovered<TxEnvelope>]> =
            selected.iter().map(|tx| tx.tx.clone()).collect();
        let receipts: Vec<ReceiptEnvelope> =
            outcome.receipts.iter().map(|r| r.envelope()).collect();
        let (receipts_root, logs_bloom) = receipts_root_and_bloom(&outcome.receipts);
        let envelopes: Vec<&TxEnvelope> = transactions.iter().map(|t| t.inner()).collect();
        let transactions_root = alloy_consensus::proofs::calculate_transaction_root(&envelopes);
        let changeset = outcome.changes.encode();
        let checksum = state_checksum(&parent.header.state_root, &changeset);
        header.state_root = checksum;
        header.transactions_root = transactions_root;
        header.receipts_root = receipts_root;
        header.logs_bloom = logs_bloom;
        header.gas_used = outcome.gas_used();
        let hash = header.hash_slow();
        let signature = self
            .signer
            .sign_hash_sync(&hash)
            .map_err(|e| NodeError::Sign(number, e.to_string()))?;
        let writes =
            changeset_writes(&outcome.changes, &tip).map_err(crate::state::StateError::from)?;
        let state_history: Vec<(Vec<u8>, Option<Vec<u8>>)> = writes
            .iter()
            .map(|(key, _)| {
                gigas_primitives::state_keys::StateReader::get(&tip, key)
                    .map(|old| (key.clone(), old))
            })
            .collect::<Result<_, _>>()
            .map_err(crate::state::StateError::from)?;
        let prior = PriorValues::capture(&outcome.changes, &db)
            .map_err(|e| NodeError::Prior(number, e.to_string()))?;
        drop(vilmo);
        self.metrics.stage(Stage::Seal, seconds(t));

        let sealed = HeadBlock {
            header,
            hash,
            signature,
        };
        pipeline.send(
            self,
            SealedBlock {
                block: CommittedBlock {
                    header: sealed.header.clone(),
                    hash,
                    signature,
                    transactions: transactions.clone(),
                    receipts,
                    changeset,
                    changes: outcome.changes,
                    prior,
                },
                state_history,
                pending: Arc::new(crate::state::PendingBlock::new(
                    number,
                    hash,
                    writes,
                    transactions,
                )),
                started,
            },
        )?;
        // The pool moves to the tip now, so that the next block selects what follows.
        let next_base_fee = self.base_fee_after(&sealed.header);
        {
            let vilmo = self.vilmo_read();
            let view = PoolView(RevmState {
                source: pipeline.view(self, &vilmo),
                hashes: &self.history,
            });
            self.pool.on_block(&view, &senders, next_base_fee);
        }
        pipeline.tip = sealed;
        Ok(number)
    }

    /// Commits a group of sealed blocks, in order: the history in one durable transaction,
    /// then each block's state in Vilmo, then each is published.
    fn commit_group(
        &self,
        group: Vec<SealedBlock>,
        last_published: &mut Option<Instant>,
    ) -> Result<(), NodeError> {
        let t = Instant::now();
        let records: Vec<BlockRecord<'_>> = group
            .iter()
            .map(|b| BlockRecord {
                header: &b.block.header,
                hash: b.block.hash,
                signature: b.block.signature,
                transactions: &b.block.transactions,
                receipts: &b.block.receipts,
                changeset: &b.block.changeset,
                state_history: &b.state_history,
            })
            .collect();
        self.history.commit_blocks(&records)?;
        drop(records);
        self.metrics.stage(Stage::CommitHistory, seconds(t));
        self.metrics.commit_group_blocks.observe(group.len() as f64);

        for sealed in group {
            let t = Instant::now();
            self.commit_state(sealed.pending.writes())?;
            self.metrics.stage(Stage::CommitState, seconds(t));

            let t = Instant::now();
            let block = sealed.block;
            let number = block.header.number;
            let gas_used = block.header.gas_used;
            let tx_count = block.transactions.len();
            *self
                .head
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = HeadBlock {
                header: block.header.clone(),
                hash: block.hash,
                signature: block.signature,
            };
            self.committed_through.store(number, Ordering::SeqCst);
            let _ = self.committed.send(Arc::new(block));
            self.metrics.stage(Stage::Publish, seconds(t));

            let published = Instant::now();
            if let Some(last) = *last_published {
                self.metrics
                    .block_interval_seconds
                    .observe((published - last).as_secs_f64());
            }
            *last_published = Some(published);
            self.metrics
                .block_seconds
                .observe((published - sealed.started).as_secs_f64());
            self.metrics.block_gas.observe(gas_used as f64);
            self.metrics.block_transactions.observe(tx_count as f64);
            self.metrics.transactions_included.inc_by(tx_count as u64);
            self.metrics.blocks.inc();
            self.metrics.head.set(number as i64);
            // Empty blocks come four times a second on an idle dev chain: keep them out of
            // the default log.
            if tx_count == 0 {
                tracing::debug!(block = number, "empty block");
            } else {
                info!(
                    block = number,
                    txs = tx_count,
                    gas = gas_used,
                    ms = format_args!("{:.1}", (published - sealed.started).as_secs_f64() * 1e3),
                    "block"
                );
            }
        }
        Ok(())
    }

    /// Commits a block's state to Vilmo. The fdatasync runs outside Vilmo's write lock: an
    /// RPC read (which takes the read lock) waits at most for the write and the index
    /// update, never for the disk. What it may see meanwhile, the block's values before
    /// they are durable, is not published: the block's history is durable already, reads at
    /// an older block correct Vilmo's values through it, and the head moves only after this
    /// returns.
    fn commit_state(&self, writes: &[Write]) -> Result<(), NodeError> {
        let batch = batch_of(writes)?;
        let write = || {
            self.vilmo
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let unsynced = write().commit_unsynced(batch)?;
        let synced = unsynced.sync();
        write().finish_commit(unsynced, synced)?;
        Ok(())
    }

    /// The base fee of the block after `parent`.
    fn base_fee_after(&self, parent: &Header) -> u64 {
        self.config.chain.base_fee.next(
            parent.gas_used,
            parent.gas_limit,
            parent.base_fee_per_gas.unwrap_or_default(),
        )
    }

    /// A transaction of a block that is sealed but not yet published (it has left the pool
    /// and is not yet readable from the history), for lookups by hash in that interval.
    pub fn in_flight_transaction(&self, hash: B256) -> Option<Recovered<TxEnvelope>> {
        let pending = self
            .pending
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        // A linear scan of at most a few blocks: this lookup is rare (a hash neither in the
        // pool nor in a published block), a per-block index would be built for every block.
        pending.iter().rev().find_map(|b| {
            b.transactions
                .iter()
                .find(|tx| *tx.inner().tx_hash() == hash)
                .cloned()
        })
    }

    /// Whether the journal holds enough dead bytes (transactions no longer pooled: included,
    /// replaced, evicted) to be worth rewriting: more than twice the live bytes (what the pool
    /// holds) and more than 8 MiB. The journal then stays within about three times the pool.
    fn journal_needs_rewrite(&self) -> bool {
        let live = self.pool.stats().bytes as u64;
        let dead = self.journal.len_bytes().saturating_sub(live);
        dead > (2 * live).max(8 << 20) && !self.journal.is_rewriting()
    }

    /// Starts rewriting the journal in the background to what is live: the pool, and the
    /// transactions of the blocks sealed and not yet durable (in neither the pool nor the
    /// history: a crash must find them in the journal). The pool is read first: a block sealed
    /// between the two reads is in flight at the second, and the pool forgets a block's
    /// transactions only after the block is in flight.
    fn start_journal_rewrite(self: &Arc<Self>) {
        let node = self.clone();
        let live = move || {
            let mut live = node.pool.all_encoded();
            let in_flight = node
                .pending
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            for block in in_flight.iter() {
                live.extend(block.transactions.iter().map(|tx| {
                    Bytes::from(alloy_eips::eip2718::Encodable2718::encoded_2718(tx.inner()))
                }));
            }
            live
        };
        if let Err(e) = self.journal.start_rewrite(live) {
            warn!(error = %e, "cannot start rewriting the transaction journal; it keeps growing until a rewrite starts");
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Signs a header and returns it sealed.
fn seal(signer: &PrivateKeySigner, header: Header) -> Result<HeadBlock, NodeError> {
    let hash = header.hash_slow();
    let signature = signer
        .sign_hash_sync(&hash)
        .map_err(|e| NodeError::Sign(header.number, e.to_string()))?;
    Ok(HeadBlock {
        header,
        hash,
        signature,
    })
}

/// A header of `chain` with every field that is the same in all its blocks set (no ommers,
/// no withdrawals or blobs, empty roots, the Gigas extra data); a block fills in the rest.
fn header_template(chain: &ChainConfig) -> Header {
    Header {
        ommers_hash: EMPTY_OMMER_ROOT_HASH,
        transactions_root: EMPTY_ROOT_HASH,
        receipts_root: EMPTY_ROOT_HASH,
        difficulty: U256::ZERO,
        gas_limit: chain.block_gas_limit,
        extra_data: Bytes::from_static(EXTRA_DATA),
        base_fee_per_gas: Some(chain.base_fee.initial),
        withdrawals_root: Some(EMPTY_ROOT_HASH),
        blob_gas_used: Some(0),
        excess_blob_gas: Some(0),
        parent_beacon_block_root: Some(B256::ZERO),
        requests_hash: (chain.fork >= gigas_primitives::Hardfork::Prague)
            .then_some(EMPTY_REQUESTS_HASH),
        ..Header::default()
    }
}

/// The genesis block of `chain` with its state writes.
pub fn genesis(
    chain: &ChainConfig,
    signer: &PrivateKeySigner,
) -> Result<(HeadBlock, Vec<Write>), NodeError> {
    let writes = chain.genesis_writes()?;
    let header = Header {
        beneficiary: signer.address(),
        state_root: genesis_checksum(&writes),
        timestamp: chain.genesis_timestamp,
        base_fee_per_gas: Some(chain.base_fee.initial),
        ..header_template(chain)
    };
    Ok((seal(signer, header)?, writes))
}

const FINGERPRINT_FILE: &str = "genesis.fingerprint";

/// `genesis.fingerprint`: the chain spec's genesis fingerprint and the genesis hash, hex, one
/// per line.
fn read_fingerprint(dir: &std::path::Path) -> Option<(B256, B256)> {
    let text = std::fs::read_to_string(dir.join(FINGERPRINT_FILE)).ok()?;
    let mut lines = text.lines();
    let fingerprint = lines.next()?.trim().parse().ok()?;
    let hash = lines.next()?.trim().parse().ok()?;
    Some((fingerprint, hash))
}

fn write_fingerprint(
    dir: &std::path::Path,
    chain: &ChainConfig,
    genesis_hash: B256,
) -> Result<(), NodeError> {
    let fingerprint = chain.genesis_fingerprint()?;
    let path = dir.join(FINGERPRINT_FILE);
    let tmp = dir.join(format!("{FINGERPRINT_FILE}.tmp"));
    std::fs::write(&tmp, format!("{fingerprint}\n{genesis_hash}\n"))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| NodeError::Inconsistent {
            dir: dir.to_path_buf(),
            message: format!("cannot write {}: {e}", path.display()),
        })
}

fn batch_of(writes: &[Write]) -> Result<Batch, NodeError> {
    let mut batch = Batch::with_capacity(writes.len(), 0);
    for (key, value) in writes {
        match value {
            Some(value) => batch.put(key, value)?,
            None => batch.delete(key)?,
        }
    }
    Ok(batch)
}

/// Brings Vilmo and the history to the same head and returns it.
///
/// Vilmo's batch `k` holds block `k - 1` (batch 1 is the genesis state). The committer writes
/// a group of blocks to the history before any of them to Vilmo, so after a crash Vilmo is at
/// the history's head or up to [`MAX_GROUP`] blocks behind it; anything else means the
/// directory's stores do not belong together.
fn recover(
    config: &NodeConfig,
    signer: &PrivateKeySigner,
    vilmo: &mut Vilmo,
    history: &History,
) -> Result<HeadBlock, NodeError> {
    let dir = &config.datadir;
    let inconsistent = |message: String| NodeError::Inconsistent {
        dir: dir.clone(),
        message,
    };
    let batches = vilmo.last_commit().number;
    let Some(head) = history.head()? else {
        if batches != 0 {
            return Err(inconsistent(format!(
                "the state store holds {batches} batches but the chain history is empty; \
                 remove the directory to start a new chain"
            )));
        }
        let (genesis, writes) = genesis(&config.chain, signer)?;
        history.commit_block(&BlockRecord {
            header: &genesis.header,
            hash: genesis.hash,
            signature: genesis.signature,
            transactions: &[],
            receipts: &[],
            changeset: &[],
            state_history: &[],
        })?;
        vilmo.commit(batch_of(&writes)?)?;
        write_fingerprint(dir, &config.chain, genesis.hash)?;
        info!(hash = %genesis.hash, accounts = writes.len(), "wrote the genesis block");
        return Ok(genesis);
    };
    let sealed = history
        .sealed_header(head)?
        .ok_or_else(|| inconsistent(format!("the history's head {head} has no header")))?;
    // The chain in this directory must be the configured one.
    let genesis_header = history
        .sealed_header(0)?
        .ok_or_else(|| inconsistent("the history has no genesis header".into()))?;
    // The fingerprint spares rebuilding a genesis of millions of accounts to compare it;
    // without one (or when it differs) the genesis is rebuilt and compared by hash.
    let fingerprint_matches = match read_fingerprint(dir) {
        Some((fingerprint, hash)) if hash == genesis_header.hash => {
            config.chain.genesis_fingerprint().ok() == Some(fingerprint)
        }
        _ => false,
    };
    let mut genesis_writes = None;
    if !fingerprint_matches {
        let (expected, writes) = genesis(&config.chain, signer)?;
        if genesis_header.hash != expected.hash {
            return Err(inconsistent(format!(
                "its genesis {} is not the configured chain's genesis {}; use another --datadir \
                 or the chain spec it was created with",
                genesis_header.hash, expected.hash
            )));
        }
        write_fingerprint(dir, &config.chain, expected.hash)?;
        genesis_writes = Some(writes);
    }
    if batches == head + 1 {
        return Ok(HeadBlock::from_sealed(sealed));
    }
    // The committer writes up to MAX_GROUP blocks to the history, then their state one by
    // one: a crash leaves Vilmo at most that many blocks behind, never ahead.
    if batches > head + 1 || batches + (MAX_GROUP as u64) < head + 1 {
        return Err(inconsistent(format!(
            "the state store holds {batches} batches (block {}), the chain history ends at \
             block {head}: they do not belong together",
            batches as i128 - 1
        )));
    }
    for number in batches..=head {
        let writes = if number == 0 {
            match genesis_writes.take() {
                Some(writes) => writes,
                None => genesis(&config.chain, signer)?.1,
            }
        } else {
            let bytes = history.changeset(number)?.ok_or_else(|| {
                inconsistent(format!(
                    "block {number}'s ChangeSet is missing from the history"
                ))
            })?;
            let parent = history
                .sealed_header(number - 1)?
                .ok_or_else(|| inconsistent(format!("block {}'s header is missing", number - 1)))?;
            let header = history
                .sealed_header(number)?
                .ok_or_else(|| inconsistent(format!("block {number}'s header is missing")))?;
            if state_checksum(&parent.header.state_root, &bytes) != header.header.state_root {
                return Err(inconsistent(format!(
                    "block {number}'s stored ChangeSet does not match its header's state checksum"
                )));
            }
            let changes = ChangeSet::decode(&bytes).map_err(|e| {
                inconsistent(format!(
                    "block {number}'s stored ChangeSet does not decode: {e}"
                ))
            })?;
            changeset_writes(&changes, &*vilmo).map_err(crate::state::StateError::from)?
        };
        vilmo.commit(batch_of(&writes)?)?;
        warn!(
            block = number,
            "re-applied a block's state, which a crash had cut off"
        );
    }
    Ok(HeadBlock::from_sealed(sealed))
}
