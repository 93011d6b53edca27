//! [`StateWriter`]: verified blocks into one MDBX write transaction per group, a commit per
//! group, the root every `root_every` blocks.
//!
//! This file holds the writer's state, its reads, a block's application and the commit;
//! `writes` a block's writes into the group, `roots` the state roots, `durable` the durable
//! points, `background` the writer's side of the commit thread.

use gigas_mdbx::StoreError as _;
use std::fmt;
use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use gigas_primitives::{AccountState, ChangeSet};
use gigas_statediff::{ChainTip, HashedKeys, StateKey};
use signet_libmdbx::tx::aliases::{RoTxUnsync, RwTxUnsync};
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Cursor, Rw};
use tracing::{debug, warn};

use crate::db::{StateDb, WriteLock};
use crate::error::StateDbError;
use crate::persist::{self, Handoff, Persisted, Snapshot};
use crate::read::{self, Dbs};
use crate::rows::GroupRows;
use crate::tables::Table;
use crate::types::{BlockToApply, CommitInfo, HashedWrites, RootInfo, StoredHeader, WriterOptions};
use crate::view::impl_state_reads;
use crate::writeback::Writeback;
use gigas_trie::sparse::{SparseAccounts, SparseTrieStats};
use gigas_triedb::cache::{TrieCache, TrieCacheStats};
use gigas_triedb::flush::{self, PendingKeys};
use gigas_triedb::layer::{self, LayeredRoot, Parallelism, TrieLayer};
use gigas_triedb::root::{self, RootOutcome};
use gigas_triedb::rows::{self, put_hashed_account};
use gigas_triedb::store::{self, ChangedKeys};
use gigas_triedb::TrieTable;

mod background;
mod durable;
mod roots;
mod writes;

pub(crate) use writes::cursor;

/// Most threads a root runs on, whatever [`WriterOptions::root_threads`] asks.
const MAX_ROOT_THREADS: usize = 64;

/// A root running on its own thread ([`WriterOptions::overlap_roots`]).
struct RootInFlight {
    /// Its block, whose header row waits in [`GroupRows`] for the root.
    block: u64,
    /// The group's layer as of `block`, which the root reads. The writer's own layer holds
    /// only what was written after it, and its reads look there first, then here.
    layer: Arc<TrieLayer>,
    started: Instant,
    /// The writer's own seconds on it so far (starting it).
    spent: f64,
    handle: std::thread::JoinHandle<Result<LayeredRoot, StateDbError>>,
}

/// A group committing on the commit thread ([`WriterOptions::commit_thread`]).
struct CommitInFlight {
    /// What it writes (`meta`: what the database says once it landed); the writer reads
    /// its rows until it lands.
    handoff: Arc<Handoff>,
    /// The group's figures as the hand-over returned them.
    info: CommitInfo,
    handle: std::thread::JoinHandle<Result<Persisted, StateDbError>>,
}

/// Runs `$f` (one of [`crate::read`]'s functions) on the writer's transaction: the read
/// transaction of the last commit when commits run on their own thread, else the write
/// transaction.
macro_rules! read_txn {
    ($self:ident, $f:path $(, $arg:expr)*) => {
        match (&$self.reader, &$self.txn) {
            (Some(ro), _) => $f($self.db.dbs(), ro $(, $arg)*),
            (None, Some(rw)) => $f($self.db.dbs(), rw $(, $arg)*),
            (None, None) => Err(no_txn()),
        }
    };
}

#[derive(Debug, Default)]
struct Group {
    blocks: u64,
    changes: u64,
    opened: Option<Instant>,
}

/// Applies verified blocks into the state, several per MDBX write transaction.
///
/// The writer keeps one write transaction open. [`StateWriter::apply`] writes a block into
/// it; [`StateWriter::commit`] makes every block applied since the last commit durable at
/// once, with `Meta` naming the last of them. Until then the group is invisible to
/// [`StateDb::view`] readers and is lost, whole, if the process dies or the writer is
/// dropped: the database's head stays the last commit's, and the caller replays from there.
///
/// The writer is also the state the *next* block must be decoded against: it implements the
/// diff decoder's [`gigas_statediff::PriorState`] and [`gigas_statediff::KeyIndex`] and
/// revm's `DatabaseRef` by reading the open group's writes held in memory (the hashed layer
/// and [`GroupRows`]) and then its open transaction, so the open group's writes are seen. A
/// follower decodes block n+1 with `verify_and_decode(&writer.tip(), .., &writer, &writer)`
/// and applies it with `writer.apply(..)`.
///
/// Errors from `apply` after its checks, from `compute_root` and from `commit` discard the
/// open group (the tip goes back to [`StateWriter::committed_tip`]); a block refused by
/// its checks ([`StateDbError::NotNext`], [`StateDbError::WrongParent`]) changes nothing.
///
/// Not `Send`: MDBX ties a write transaction to the thread that began it, so create and use
/// the writer on one thread (the follower's apply thread).
pub struct StateWriter<'db> {
    db: &'db StateDb,
    options: WriterOptions,
    /// The write transaction, when commits run on this thread.
    txn: Option<RwTxUnsync>,
    /// Commits run on the commit thread ([`WriterOptions::commit_thread`]): the writer
    /// holds no write transaction, and reads the last commit through `reader`.
    background: bool,
    /// A read transaction of the last commit (landed), with `background`.
    reader: Option<RoTxUnsync>,
    /// The group committing on the commit thread, if any (at most one).
    committing: Option<CommitInFlight>,
    /// With `background`: the changed-key tables hold keys (the last commit's changed keys
    /// since its last root), which the next commit replaces.
    changed_stored: bool,
    /// Bytes of `hashed` that are a copy of the committing group's layer (see
    /// [`crate::persist`]), which [`StateWriter::group_bytes`] does not count.
    carried: u64,
    committed: Snapshot,
    current: Snapshot,
    /// Something was written since the last commit.
    dirty: bool,
    group: Group,
    /// State writes of the open group not yet in the transaction (written sorted and once
    /// per key, at the commit or before a root inside the transaction), which the writer's
    /// reads look in first, and, when roots run over it ([`StateWriter::layered`]), the trie
    /// nodes they changed.
    hashed: TrieLayer,
    /// The open group's code, key-index and header rows not yet in the transaction.
    rows: GroupRows,
    /// Since the last commit, every hashed-table and trie write of the group went into
    /// `hashed` (some also into the transaction, by [`StateWriter::flush_idle`]): a read
    /// transaction with `hashed` over it sees what the write transaction holds, which a
    /// layered root needs.
    layer_exact: bool,
    /// The keys of `hashed` changed since the last [`StateWriter::flush_idle`]; `None`: no
    /// idle write in this group yet, so none of `hashed` is in the transaction.
    pending: Option<PendingKeys>,
    /// Keys changed since the last root that the changed-key tables do not hold yet.
    changed: ChangedKeys,
    /// Stored trie nodes as the open transaction has them, across roots and commits.
    trie_cache: TrieCache,
    /// The account trie held in memory across layered roots (shared with a root in flight).
    sparse: Arc<SparseAccounts>,
    /// The root running while the writer takes the next blocks, if any.
    in_flight: Option<RootInFlight>,
    /// A root that ended inside a call that could not return it (an idle write, a
    /// computed root): the next `apply` or `commit` does.
    unreported: Option<RootInfo>,
    /// The cache's counters as last added to the metrics.
    cache_reported: TrieCacheStats,
    /// The last block that survives a power loss.
    durable: ChainTip,
    /// When the last durable point was made (or the writer opened).
    last_sync: Instant,
    /// [`StateDb::page_bytes_written`] at the last durable point.
    written_at_sync: u64,
    /// The data file, opened at the first durable point written back in the background.
    data_file: Option<Arc<File>>,
    /// A durable point's writeback under way ([`crate::SyncSchedule::background`]), not yet
    /// followed by this writer's sync.
    writeback: Option<Writeback>,
    /// Why a writeback failed. The kernel may then have dropped the pages it could not
    /// write, and a later sync could succeed over them: no durable point is made after one.
    writeback_failed: Option<String>,
    /// Last, so that it is released after the transaction is aborted (fields drop in order).
    _lock: WriteLock<'db>,
}

impl fmt::Debug for StateWriter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateWriter")
            .field("options", &self.options)
            .field("tip", &self.current.tip)
            .field("committed", &self.committed.tip)
            .field("group_blocks", &self.group.blocks)
            .finish_non_exhaustive()
    }
}

impl<'db> StateWriter<'db> {
    pub(crate) fn new(
        db: &'db StateDb,
        lock: WriteLock<'db>,
        options: WriterOptions,
    ) -> Result<Self, StateDbError> {
        let txn = db
            .env()
            .begin_rw_unsync()
            .map_err(StateDbError::mdbx("begin a write transaction"))?;
        let meta = read::meta(db.dbs(), &txn)?;
        let tip = meta.head.ok_or(StateDbError::NotInitialized)?;
        // A stale trie is rebuilt inside a write transaction: a writer opened over one
        // commits on its own thread for its whole life.
        let background = options.commits_in_background() && meta.trie_valid;
        let (txn, reader) = if background {
            drop(txn);
            let reader = db
                .env()
                .begin_ro_unsync()
                .map_err(StateDbError::mdbx("begin a read transaction"))?;
            (None, Some(reader))
        } else {
            (Some(txn), None)
        };
        // The keys changed since the last root stay in memory across commits; the tables
        // hold them only for a restart.
        let changed = match &reader {
            Some(reader) => store::load_changed(db.dbs().trie(), reader)?,
            None => ChangedKeys::default(),
        };
        let snapshot = Snapshot {
            tip,
            index_len: meta.index_len,
            last_root: meta.last_root,
            trie_valid: meta.trie_valid,
            lattice: meta.lattice.map(Arc::new),
        };
        Ok(Self {
            db,
            options,
            txn,
            background,
            reader,
            committing: None,
            changed_stored: !changed.is_empty(),
            carried: 0,
            committed: snapshot.clone(),
            current: snapshot,
            dirty: false,
            group: Group::default(),
            hashed: TrieLayer::default(),
            rows: GroupRows::default(),
            layer_exact: true,
            pending: None,
            changed,
            trie_cache: TrieCache::new(options.trie_cache_bytes),
            sparse: Arc::new(SparseAccounts::new(options.sparse_trie_bytes)),
            in_flight: None,
            unreported: None,
            cache_reported: TrieCacheStats::default(),
            // What a writer finds at open survived whatever came before it, or MDBX rolled
            // it back to what did.
            durable: tip,
            last_sync: Instant::now(),
            written_at_sync: db.page_bytes_written(),
            data_file: None,
            writeback: None,
            writeback_failed: None,
            _lock: lock,
        })
    }

    /// The options it runs with.
    pub fn options(&self) -> &WriterOptions {
        &self.options
    }

    /// The last applied block, the open group included: what the next block must follow.
    pub fn tip(&self) -> ChainTip {
        self.current.tip
    }

    /// The lattice hash of the state at [`StateWriter::tip`] (`None`: the database does not
    /// keep the state commitment).
    pub fn lattice(&self) -> Option<&gigas_primitives::LatticeHash> {
        self.current.lattice.as_deref()
    }

    /// The last committed block: the database's durable head.
    pub fn committed_tip(&self) -> ChainTip {
        self.committed.tip
    }

    /// The last block that survives a power loss: the committed tip under
    /// [`crate::Durability::Durable`], the last durable point under
    /// [`crate::Durability::Periodic`].
    pub fn durable_tip(&self) -> ChainTip {
        self.durable
    }

    /// The in-memory account trie's size and counters.
    pub fn sparse_trie_stats(&self) -> SparseTrieStats {
        self.sparse.stats()
    }

    /// Loads the account trie held in memory ([`WriterOptions::sparse_trie_bytes`]) with
    /// the stored branch nodes, the upper levels first, until it holds `max_bytes` (at most
    /// three quarters of its budget, the level a fold leaves): what roots would load at each
    /// subtrie's first change, read ahead on every core. A node that starts holds then what
    /// a long run would have loaded, and its first blocks do not pay for it. Returns the
    /// trie's figures after, `None` when there is no trie in memory to load (off, or the
    /// stored trie not kept). Only between groups: with no block in the open group, no
    /// root and no commit under way.
    pub fn preload_account_trie(
        &mut self,
        max_bytes: usize,
    ) -> Result<Option<SparseTrieStats>, StateDbError> {
        if !self.sparse.enabled() || !self.current.trie_valid {
            return Ok(None);
        }
        if self.dirty || self.in_flight.is_some() || self.committing.is_some() {
            return Err(StateDbError::Invariant {
                what: "the account trie is loaded ahead only between groups (no open block, \
                       root or commit)"
                    .into(),
            });
        }
        let max_bytes = max_bytes.min(self.sparse.budget() / 4 * 3);
        let result = layer::preload_sparse_accounts(
            self.db.env(),
            self.db.dbs().trie(),
            &self.hashed,
            self.parallelism(),
            &self.sparse,
            max_bytes,
        );
        if result.is_err() {
            // A part may be half loaded: the next root sets the trie up again.
            self.sparse.clear();
        }
        result?;
        Ok(Some(self.sparse.stats()))
    }

    /// The trie cache's counters and size.
    pub fn trie_cache_stats(&self) -> TrieCacheStats {
        self.trie_cache.stats()
    }

    /// The block and root of the last computed root (the open group included).
    pub fn last_root(&self) -> Option<(u64, B256)> {
        self.current.last_root
    }

    /// Blocks in the open group.
    pub fn group_blocks(&self) -> u64 {
        self.group.blocks
    }

    /// How long ago the open group's first block was applied.
    pub fn group_age(&self) -> Option<Duration> {
        self.group.opened.map(|t| t.elapsed())
    }

    /// Whether the open group reached the count or the time bound of the options. The
    /// caller also checks this on a timer while no block comes, so that a lone block does
    /// not wait for a second one to become durable.
    pub fn should_commit(&self) -> bool {
        self.group.blocks >= self.options.max_group_blocks.max(1)
            || self
                .group_age()
                .is_some_and(|age| age >= self.options.max_group_age)
            || self.group_bytes() >= self.options.max_group_bytes
    }

    /// The memory the open group's changes hold until its commit (state and trie nodes,
    /// estimated from their counts), with what the account trie in memory holds beyond its
    /// budget: the commit gives that back too. Without it, a group of storage-heavy blocks
    /// under a 1 GiB limit grew the trie past the limit before its commit (OOM-killed).
    pub fn group_bytes(&self) -> u64 {
        let in_flight = self
            .in_flight
            .as_ref()
            .map_or(0, |f| f.layer.approx_bytes());
        (self.hashed.approx_bytes() + in_flight).saturating_sub(self.carried)
            + self.rows.approx_bytes()
            + self.sparse.over_budget()
    }

    /// The memory the group committing on the commit thread holds until it lands (its
    /// layer, its rows, and the writer's copy of the layer), estimated; 0 when none is.
    pub fn committing_bytes(&self) -> u64 {
        self.committing.as_ref().map_or(0, |c| {
            c.handoff.layer.approx_bytes() + c.handoff.rows.approx_bytes() + self.carried
        })
    }

    /// Whether commits run on the commit thread ([`WriterOptions::commit_thread`]).
    pub fn commits_in_background(&self) -> bool {
        self.background
    }

    fn reads(&self) -> Result<(&Dbs, &Tx<Rw>), StateDbError> {
        Ok((self.db.dbs(), open_txn(&self.txn)?))
    }

    /// The committing group's rows, which the writer reads until it lands.
    fn committing_rows(&self) -> Option<&GroupRows> {
        self.committing.as_ref().map(|c| &c.handoff.rows)
    }

    fn index_length(&self) -> Result<u64, StateDbError> {
        Ok(self.current.index_len)
    }

    /// An account as the open group left it: the group's writes not yet in the transaction
    /// first ([`StateWriter::hashed`]), then the transaction.
    pub fn account(&self, address: &Address) -> Result<Option<AccountState>, StateDbError> {
        self.account_hashed(&keccak256(address))
    }

    /// [`StateWriter::account`] by `keccak(address)`.
    pub fn account_hashed(&self, h: &B256) -> Result<Option<AccountState>, StateDbError> {
        let h = *h;
        if let Some(state) = self.hashed.accounts.get(&h) {
            return Ok(*state);
        }
        if let Some(state) = self
            .in_flight
            .as_ref()
            .and_then(|f| f.layer.accounts.get(&h))
        {
            return Ok(*state);
        }
        read_txn!(self, read::hashed_account, &h)
    }

    /// A slot as the open group left it (as [`StateWriter::account`]; a slot of a storage
    /// the group wiped and did not write again is zero).
    pub fn storage(&self, address: &Address, slot: &U256) -> Result<U256, StateDbError> {
        self.storage_hashed(&keccak256(address), &keccak256(slot.to_be_bytes::<32>()))
    }

    /// [`StateWriter::storage`] by `keccak(address)` and `keccak(slot)`.
    pub fn storage_hashed(&self, h: &B256, hs: &B256) -> Result<U256, StateDbError> {
        let (h, hs) = (*h, *hs);
        let under = self.in_flight.as_ref().map(|f| &f.layer.storage);
        for storage in std::iter::once(&self.hashed.storage).chain(under) {
            if let Some(layer) = storage.get(&h) {
                if let Some(value) = layer.slots.get(&hs) {
                    return Ok(*value);
                }
                if layer.wiped {
                    return Ok(U256::ZERO);
                }
            }
        }
        read_txn!(self, read::hashed_slot, &h, &hs)
    }

    /// Code by its hash, the open group's included.
    pub fn code(&self, hash: &B256) -> Result<Option<Bytes>, StateDbError> {
        for rows in std::iter::once(&self.rows).chain(self.committing_rows()) {
            if let Some(code) = rows.code(hash) {
                return Ok(Some(code.clone()));
            }
        }
        read_txn!(self, read::code, hash)
    }

    /// A header, the open group's included.
    pub fn header(&self, number: u64) -> Result<Option<StoredHeader>, StateDbError> {
        for rows in std::iter::once(&self.rows).chain(self.committing_rows()) {
            if let Some(header) = rows.header(number) {
                return Ok(Some(header.clone()));
            }
        }
        read_txn!(self, read::header, number)
    }

    /// The hash of block `number`'s header, the open group's included (BLOCKHASH).
    pub fn block_hash(&self, number: u64) -> Result<Option<B256>, StateDbError> {
        for rows in std::iter::once(&self.rows).chain(self.committing_rows()) {
            if let Some(header) = rows.header(number) {
                return Ok(Some(header.hash));
            }
        }
        read_txn!(self, read::block_hash, number)
    }

    /// The index of `key` in the key index, the open group's new keys included.
    pub fn indexed(&self, key: &StateKey) -> Result<Option<u64>, StateDbError> {
        for rows in std::iter::once(&self.rows).chain(self.committing_rows()) {
            if let Some(index) = rows.index_of(key) {
                return Ok(Some(index));
            }
        }
        read_txn!(self, read::index_of, key)
    }

    /// The key at `index` of the key index, the open group's new keys included.
    pub fn key_of(&self, index: u64) -> Result<Option<StateKey>, StateDbError> {
        // The rows hold the newest keys; an idle write moved the older ones of the group
        // into the transaction.
        for rows in std::iter::once(&self.rows).chain(self.committing_rows()) {
            if let Some(key) = rows.key_at(index) {
                return Ok(Some(key));
            }
        }
        read_txn!(self, read::key_at, index)
    }

    fn ensure_txn(&mut self) -> Result<(), StateDbError> {
        if self.background {
            if self.reader.is_none() {
                self.begin_background_reads()?;
            }
            return Ok(());
        }
        if self.txn.is_none() {
            self.txn = Some(
                self.db
                    .env()
                    .begin_rw_unsync()
                    .map_err(StateDbError::mdbx("begin a write transaction"))?,
            );
        }
        Ok(())
    }

    /// Drops the open group: its blocks are forgotten and the tip is the committed one again.
    pub fn discard(&mut self) {
        // Its root changes the trie in memory, which is cleared below.
        if let Some(flight) = self.in_flight.take() {
            let _ = flight.handle.join();
        }
        self.unreported = None;
        // The commit under way lands or fails first: the tip goes back to what the
        // database then holds.
        if let Some(committing) = self.committing.take() {
            match persist::join(committing.handle) {
                Ok(_) => self.note_landed(committing.handoff.meta.clone()),
                Err(e) => {
                    self.db.metrics().groups_discarded.inc();
                    warn!(error = %e, "the group committing on the commit thread failed");
                }
            }
        }
        self.carried = 0;
        if self.dirty {
            self.db.metrics().groups_discarded.inc();
            warn!(
                blocks = self.group.blocks,
                committed = self.committed.tip.number,
                "state writer discarded its open group"
            );
        }
        // Dropping the transaction aborts it.
        self.txn = None;
        self.current = self.committed.clone();
        self.dirty = false;
        self.group = Group::default();
        self.hashed = TrieLayer::default();
        self.rows = GroupRows::default();
        self.pending = None;
        self.layer_exact = true;
        self.changed.clear();
        // They may hold nodes of the aborted transaction.
        self.trie_cache.clear();
        self.sparse.clear();
        if self.background {
            self.reader = None;
            // A failure here surfaces at the next call that begins again.
            let _ = self.begin_background_reads();
        } else {
            self.txn = self.db.env().begin_rw_unsync().ok();
        }
    }

    /// Begins the read transaction of the last commit, with the keys changed since its
    /// last root as the changed-key tables hold them (after a discard).
    fn begin_background_reads(&mut self) -> Result<(), StateDbError> {
        let reader = self.begin_reader()?;
        self.changed = store::load_changed(self.db.dbs().trie(), &reader)?;
        self.changed_stored = !self.changed.is_empty();
        self.reader = Some(reader);
        Ok(())
    }

    /// Passes `result` on, after discarding the open group when it is an error.
    fn discard_on_error<T>(&mut self, result: Result<T, StateDbError>) -> Result<T, StateDbError> {
        if result.is_err() {
            self.discard();
        }
        result
    }

    fn begin_reader(&self) -> Result<RoTxUnsync, StateDbError> {
        self.db.env().begin_ro_unsync().map_err(StateDbError::mdbx(
            "begin a read transaction of the last commit",
        ))
    }

    /// Applies one verified block into the open group: plain and hashed state, code, the new
    /// index keys, the header, and the root when the block's number is a multiple of
    /// `root_every` (returned). Durable only after [`StateWriter::commit`].
    pub fn apply(&mut self, block: BlockToApply<'_>) -> Result<Option<RootInfo>, StateDbError> {
        check_successor(&self.current.tip, block.header, block.changes, block.hashed)?;
        self.ensure_txn()?;
        let start = Instant::now();
        let result = self.write_block(&block, start);
        self.discard_on_error(result)
    }

    fn write_block(
        &mut self,
        block: &BlockToApply<'_>,
        start: Instant,
    ) -> Result<Option<RootInfo>, StateDbError> {
        let changes = block.changes;
        // The keys' keccak, once: the decoder's when it gave them (`apply` checked that they
        // fit), else hashed here.
        let owned;
        let hashed = match block.hashed {
            Some(h) => h,
            None => {
                owned = HashedKeys::of(changes);
                &owned
            }
        };
        // A commit that landed meanwhile is taken in before the block reads anything (no
        // root reads the layer between roots).
        if self.in_flight.is_none() {
            self.land_commit(false)?;
        }
        self.dirty = true;
        self.group.opened.get_or_insert(start);
        if self.options.root_every == 0 {
            // The trie is off: it no longer follows the state, and the next root rebuilds it.
            self.current.trie_valid = false;
        }
        self.write_codes(changes);
        self.write_hashed(changes, hashed)?;
        self.write_index(block.header.number, block.new_keys)?;

        let number = block.header.number;
        self.current.tip = ChainTip {
            number,
            hash: block.hash,
            state_root: block.header.state_root,
        };
        // A block without a lattice ends the commitment here: a stale one must never be
        // stored beside a newer head.
        self.current.lattice = block.lattice.map(|l| Arc::new(l.clone()));
        let change_count = (changes.accounts().len() + changes.storage().len()) as u64;
        self.group.blocks += 1;
        self.group.changes += change_count;
        let metrics = self.db.metrics();
        metrics.blocks_applied.inc();
        metrics.state_changes_applied.inc_by(change_count);
        metrics.apply_seconds.observe(start.elapsed().as_secs_f64());

        let mut header = StoredHeader {
            header: block.header.clone(),
            hash: block.hash,
            signature: block.signature,
            state_root: None,
            commitment: block.commitment,
        };
        let due = self.options.root_every > 0 && number.is_multiple_of(self.options.root_every);
        if !due {
            self.rows.put_header(header);
            return Ok(self.unreported.take());
        }
        // The root before this one lands first: roots build on each other.
        let landed = self.finish_root()?;
        self.land_commit(false)?;
        if self.can_overlap() {
            // Held without its root, which the root sets when it lands (before any write of
            // the rows: those wait for the root in flight).
            self.rows.put_header(header);
            self.launch_root()?;
            return Ok(landed);
        }
        let root = self.root_now()?;
        self.verify_root(number, Some(block.header.state_root), root.root)?;
        header.state_root = Some(root.root);
        self.rows.put_header(header);
        if landed.is_some() {
            // Cannot happen (whether roots overlap does not change within a group), and
            // would only lose a report.
            debug!(block = number, "a landed root was not reported");
        }
        Ok(Some(root))
    }

    /// Makes the open group durable in one commit, with `Meta` naming its last block, and
    /// returns when it landed ([`StateWriter::committed_tip`] is its last block). `None`
    /// when there was nothing to commit (a commit under way on the commit thread landed
    /// first). On error the group is discarded.
    pub fn commit(&mut self) -> Result<Option<CommitInfo>, StateDbError> {
        if self.background {
            let Some(info) = self.start_commit()? else {
                self.finish_commit()?;
                return Ok(None);
            };
            let persisted = self.finish_commit()?;
            return Ok(Some(CommitInfo {
                commit_seconds: persisted.map_or(0.0, |p| p.write_seconds + p.commit_seconds),
                ..info
            }));
        }
        if !self.dirty {
            return Ok(None);
        }
        let result = self.commit_group().map(Some);
        self.discard_on_error(result)
    }

    fn commit_group(&mut self) -> Result<CommitInfo, StateDbError> {
        let root = self.finish_root()?;
        self.flush_hashed()?;
        self.write_rows()?;
        {
            let (dbs, txn) = self.reads()?;
            if self.current.trie_valid && !self.changed.is_empty() {
                store::persist_changed(dbs.trie(), txn, &self.changed)?;
            }
            self.current.write(dbs, txn)?;
        }
        self.changed.clear();
        let write_seconds = self.group.opened.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let commit_start = Instant::now();
        let txn = self.txn.take().ok_or_else(|| StateDbError::NoTransaction {
            reason: "lost before the commit".into(),
        })?;
        txn.commit()
            .map_err(StateDbError::mdbx("commit the group"))?;
        let commit_seconds = commit_start.elapsed().as_secs_f64();
        let info = CommitInfo {
            blocks: self.group.blocks,
            head: self.current.tip.number,
            changes: self.group.changes,
            write_seconds,
            commit_seconds,
            sync_seconds: 0.0,
            root,
        };
        self.committed = self.current.clone();
        self.dirty = false;
        self.layer_exact = true;
        self.group = Group::default();
        let metrics = self.db.metrics();
        metrics.groups_committed.inc();
        metrics.write_txn_seconds.observe(write_seconds);
        metrics.commit_seconds.observe(commit_seconds);
        self.db.refresh_size_metrics();
        if self.db.options().durability.every_commit() {
            self.mark_durable();
        }
        // A failure here surfaces at the next call, which begins again.
        self.txn = self.db.env().begin_rw_unsync().ok();
        let sync_seconds = self.sync_if_due()?.map_or(0.0, |d| d.as_secs_f64());
        Ok(CommitInfo {
            sync_seconds,
            ..info
        })
    }
}

/// Refuses a block that does not follow `tip` (its number and parent), or whose key hashes,
/// when given, do not fit its changes: the checks every holder of a state makes before a
/// block changes it (the writer, [`crate::AheadState`]).
pub(crate) fn check_successor(
    tip: &ChainTip,
    header: &alloy_consensus::Header,
    changes: &ChangeSet,
    hashed: Option<&HashedKeys>,
) -> Result<(), StateDbError> {
    let number = header.number;
    let expected = tip.number.wrapping_add(1);
    if number != expected {
        return Err(StateDbError::NotNext {
            expected,
            got: number,
        });
    }
    if header.parent_hash != tip.hash {
        return Err(StateDbError::WrongParent {
            block: number,
            expected: tip.hash,
            found: header.parent_hash,
        });
    }
    if let Some(h) = hashed.filter(|h| !h.fits(changes)) {
        return Err(StateDbError::HashesDoNotFit {
            block: number,
            hashed_accounts: h.accounts().len(),
            hashed_slots: h.slots().len(),
            accounts: changes.accounts().len(),
            slots: changes.storage().len(),
        });
    }
    Ok(())
}

fn no_txn() -> StateDbError {
    StateDbError::NoTransaction {
        reason: "beginning it after the last commit or discard failed".into(),
    }
}

/// The writer's open transaction, or why there is none.
fn open_txn(txn: &Option<RwTxUnsync>) -> Result<&RwTxUnsync, StateDbError> {
    txn.as_ref().ok_or_else(no_txn)
}

impl Drop for StateWriter<'_> {
    fn drop(&mut self) {
        // Not left reading the environment after the writer is gone.
        if let Some(flight) = self.in_flight.take() {
            let _ = flight.handle.join();
        }
        // A group handed over commits whole, or not at all.
        if let Some(committing) = self.committing.take() {
            if let Err(e) = persist::join(committing.handle) {
                warn!(error = %e, "the last group handed to the commit thread failed");
            }
        }
        if self.dirty {
            self.db.metrics().groups_discarded.inc();
        }
    }
}

impl_state_reads!(StateWriter<'_>);
