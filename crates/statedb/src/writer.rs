//! [`StateWriter`]: verified blocks into one MDBX write transaction per group, a commit per
//! group, the root every `root_every` blocks.

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use gigas_primitives::{AccountState, ChangeSet};
use gigas_statediff::{ChainTip, StateKey};
use signet_libmdbx::tx::aliases::{RoTxUnsync, RwTxUnsync};
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Cursor, Rw, WriteFlags};
use tracing::{debug, warn};

use crate::codec;
use crate::db::{write_meta_tip, StateDb, WriteLock};
use crate::error::StateDbError;
use crate::flush::{self, put_hashed_account, PendingKeys};
use crate::persist::{self, Handoff, MetaTip, Persisted};
use crate::read::{self, Dbs};
use crate::rows::GroupRows;
use crate::tables::Table;
use crate::trie::cache::{TrieCache, TrieCacheStats};
use crate::trie::layer::{self, LayeredRoot, Parallelism, TrieLayer};
use crate::trie::root::{self, RootOutcome};
use crate::trie::sparse::{SparseAccounts, SparseTrieStats};
use crate::trie::store::{self, ChangedKeys};
use crate::types::{BlockToApply, CommitInfo, HashedWrites, RootInfo, StoredHeader, WriterOptions};
use crate::view::impl_state_reads;
use crate::writeback::Writeback;

/// Most threads a root runs on, whatever [`WriterOptions::root_threads`] asks.
const MAX_ROOT_THREADS: usize = 64;

/// What the database says at the last commit, or what it will say at the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    tip: ChainTip,
    index_len: u64,
    last_root: Option<(u64, B256)>,
    /// The trie tables (with the changed-key tables and the writer's own changed keys)
    /// describe the hashed tables.
    trie_valid: bool,
}

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
    /// What it writes; the writer reads its rows until it lands.
    handoff: Arc<Handoff>,
    /// What the database says once it landed.
    snapshot: Snapshot,
    blocks: u64,
    changes: u64,
    /// Seconds from the group's first write to its hand-over.
    group_seconds: f64,
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

pub(crate) fn cursor<'tx>(
    dbs: &Dbs,
    txn: &'tx RwTxUnsync,
    table: Table,
) -> Result<Cursor<'tx, Rw>, StateDbError> {
    txn.cursor(dbs.get(table))
        .map_err(StateDbError::mdbx("open a cursor"))
}

/// Writes one storage entry (`key` is the slot or its hash) under `owner`: replaces the
/// duplicate for the same key, or deletes it for a zero value.
pub(crate) fn put_slot(
    c: &mut Cursor<'_, Rw>,
    table: Table,
    owner: &[u8],
    key: &B256,
    value: &U256,
    known_absent: bool,
    buf: &mut Vec<u8>,
) -> Result<(), StateDbError> {
    if !known_absent {
        let found: Option<Cow<'_, [u8]>> = c
            .get_both_range(owner, key.as_slice())
            .map_err(StateDbError::read(table.name()))?;
        if found.is_some_and(|v| v.starts_with(key.as_slice())) {
            c.del()
                .map_err(StateDbError::mdbx("delete a storage entry"))?;
        }
    }
    if !value.is_zero() {
        codec::encode_slot(key, value, buf);
        c.put(owner, buf, WriteFlags::empty())
            .map_err(StateDbError::mdbx("write a storage entry"))?;
    }
    Ok(())
}

/// Writes `value` under `key` through `c` (a cursor of a table without duplicates), or
/// deletes the key for `None`; `ops` names the write and the delete for errors. A run of
/// sorted keys through one cursor lets MDBX search from the cursor's page before walking
/// down from the root.
pub(crate) fn put_or_delete(
    c: &mut Cursor<'_, Rw>,
    key: &[u8],
    value: Option<&[u8]>,
    ops: (&'static str, &'static str),
) -> Result<(), StateDbError> {
    let (write, delete) = ops;
    match value {
        Some(value) => c
            .put(key, value, WriteFlags::empty())
            .map_err(StateDbError::mdbx(write)),
        None => {
            let found: Option<Cow<'_, [u8]>> = c.set(key).map_err(StateDbError::read(delete))?;
            if found.is_some() {
                c.del().map_err(StateDbError::mdbx(delete))?;
            }
            Ok(())
        }
    }
}

pub(crate) fn delete_dups(c: &mut Cursor<'_, Rw>, key: &[u8]) -> Result<(), StateDbError> {
    c.del_all_dups_of(key)
        .map_err(StateDbError::mdbx("delete an account's storage"))
}

impl<'db> StateWriter<'db> {
    pub(crate) fn new(
        db: &'db StateDb,
        lock: WriteLock<'db>,
        options: WriterOptions,
    ) -> Result<Self, StateDbError> {
        let (txn, reader, meta) = if options.commits_in_background() {
            let reader = db
                .env()
                .begin_ro_unsync()
                .map_err(StateDbError::mdbx("begin a read transaction"))?;
            let meta = read::meta(db.dbs(), &reader)?;
            (None, Some(reader), meta)
        } else {
            let txn = db
                .env()
                .begin_rw_unsync()
                .map_err(StateDbError::mdbx("begin a write transaction"))?;
            let meta = read::meta(db.dbs(), &txn)?;
            (Some(txn), None, meta)
        };
        let tip = meta.head.ok_or(StateDbError::NotInitialized)?;
        // A stale trie is rebuilt inside a write transaction: this writer commits on its
        // own thread only once the trie follows the state.
        let (txn, reader) = match reader {
            Some(_) if !meta.trie_valid => {
                drop(reader);
                let txn = db
                    .env()
                    .begin_rw_unsync()
                    .map_err(StateDbError::mdbx("begin a write transaction"))?;
                (Some(txn), None)
            }
            reader => (txn, reader),
        };
        let background = reader.is_some();
        // The keys changed since the last root stay in memory across commits; the tables
        // hold them only for a restart.
        let changed = match &reader {
            Some(reader) => store::load_changed(db.dbs(), reader)?,
            None => ChangedKeys::default(),
        };
        let snapshot = Snapshot {
            tip,
            index_len: meta.index_len,
            last_root: meta.last_root,
            trie_valid: meta.trie_valid,
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
            committed: snapshot,
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

    /// Makes a durable point if [`crate::Durability::Periodic`]'s schedule says one is due:
    /// commits are left unsynced and its period passed since the last one, or its bytes were
    /// written. Done after every commit; a caller whose commits stop (no block comes) calls
    /// it on a timer, so that the last commit does not stay unsynced. Returns how long the
    /// sync took on this thread, if one was made.
    ///
    /// With [`crate::SyncSchedule::background`], a due point first has its pages written
    /// back on the writeback thread and this returns at once; the first call after that
    /// ended makes the point (call it after every block, as the full node's applier does, so
    /// that it comes before the next group dirties many more pages).
    pub fn sync_if_due(&mut self) -> Result<Option<Duration>, StateDbError> {
        let crate::Durability::Periodic(schedule) = self.db.options().durability else {
            return Ok(None);
        };
        // A sync waits for MDBX's write lock, which the commit thread holds meanwhile: the
        // point waits for the commit to land instead.
        if self.committing.is_some() && !self.poll_commit()? {
            return Ok(None);
        }
        if self.durable == self.committed.tip {
            return Ok(None);
        }
        let written = self
            .db
            .page_bytes_written()
            .saturating_sub(self.written_at_sync);
        if let Some(writeback) = &self.writeback {
            // A writeback slower than the schedule's bytes come in: the disk is the limit,
            // so wait for it here rather than let unsynced pages pile up.
            let overdue = written >= schedule.bytes.saturating_mul(4);
            if writeback.is_finished() || overdue {
                return self.sync();
            }
            return Ok(None);
        }
        let due = self.last_sync.elapsed() >= schedule.period || written >= schedule.bytes;
        if !due {
            return Ok(None);
        }
        if schedule.background {
            if let Some(writeback) = self.start_writeback() {
                self.writeback = Some(writeback);
                return Ok(None);
            }
        }
        self.sync()
    }

    /// Whether a durable point's writeback is under way and not yet followed by this
    /// writer's sync (which [`StateWriter::sync_if_due`] makes once it ended).
    pub fn writeback_pending(&self) -> bool {
        self.writeback.is_some()
    }

    /// Starts writing the data file back on a thread; `None` when it cannot (the caller
    /// syncs by itself).
    fn start_writeback(&mut self) -> Option<Writeback> {
        let file = match &self.data_file {
            Some(file) => Arc::clone(file),
            None => match File::open(self.db.data_file()) {
                Ok(file) => Arc::clone(self.data_file.insert(Arc::new(file))),
                Err(e) => {
                    warn!(error = %e, "cannot open the data file for its writeback; durable points sync on the writer's thread");
                    return None;
                }
            },
        };
        Writeback::start(file, self.db.metrics().writeback_seconds.clone())
            .inspect_err(|e| warn!(error = %e, "durable point synced on the writer's thread"))
            .ok()
    }

    /// Waits for the writeback under way, if any, and refuses to go on after a failed one.
    fn finish_writeback(&mut self) -> Result<(), StateDbError> {
        if let Some(writeback) = self.writeback.take() {
            if let Err(e) = writeback.join() {
                self.writeback_failed = Some(e.to_string());
            }
        }
        match &self.writeback_failed {
            Some(why) => Err(StateDbError::Io {
                what: "make a durable point after a failed writeback".into(),
                source: std::io::Error::other(why.clone()),
            }),
            None => Ok(()),
        }
    }

    /// Makes every commit so far durable now (a clean stop does this), whatever the
    /// durability mode. Returns how long the sync took; `None` when every commit was durable
    /// already (nothing synced).
    pub fn sync(&mut self) -> Result<Option<Duration>, StateDbError> {
        self.finish_commit()?;
        if self.durable == self.committed.tip {
            return Ok(None);
        }
        let waited = Instant::now();
        self.finish_writeback()?;
        let took = waited.elapsed() + self.db.sync()?;
        self.last_sync = Instant::now();
        self.written_at_sync = self.db.page_bytes_written();
        self.mark_durable();
        debug!(
            block = self.durable.number,
            ms = took.as_secs_f64() * 1e3,
            "durable point"
        );
        Ok(Some(took))
    }

    /// The committed tip survives a power loss from now on.
    fn mark_durable(&mut self) {
        self.durable = self.committed.tip;
        self.db
            .metrics()
            .durable_block
            .set(i64::try_from(self.durable.number).unwrap_or(i64::MAX));
    }

    /// The in-memory account trie's size and counters.
    pub fn sparse_trie_stats(&self) -> SparseTrieStats {
        self.sparse.stats()
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
        let h = keccak256(address);
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
        let h = keccak256(address);
        let hs = keccak256(slot.to_be_bytes::<32>());
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
            let snapshot = committing.snapshot;
            match committing.handle.join() {
                Ok(Ok(_)) => {
                    self.committed = snapshot;
                    self.db.metrics().groups_committed.inc();
                    if self.db.options().durability.every_commit() {
                        self.mark_durable();
                    }
                }
                Ok(Err(e)) => {
                    self.db.metrics().groups_discarded.inc();
                    warn!(error = %e, "the group committing on the commit thread failed");
                }
                Err(_) => {
                    self.db.metrics().groups_discarded.inc();
                    warn!("the commit thread panicked");
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
        self.current = self.committed;
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
        self.changed = store::load_changed(self.db.dbs(), &reader)?;
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
        let number = block.header.number;
        let expected = self.current.tip.number.wrapping_add(1);
        if number != expected {
            return Err(StateDbError::NotNext {
                expected,
                got: number,
            });
        }
        if block.header.parent_hash != self.current.tip.hash {
            return Err(StateDbError::WrongParent {
                block: number,
                expected: self.current.tip.hash,
                found: block.header.parent_hash,
            });
        }
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
        // A commit that landed meanwhile is taken in before the block reads anything (no
        // root reads the layer between roots).
        if self.in_flight.is_none() {
            self.land_commit(false)?;
        }
        self.dirty = true;
        self.group.opened.get_or_insert(start);
        let changes = block.changes;
        if self.options.root_every == 0 {
            // The trie is off: it no longer follows the state, and the next root rebuilds it.
            self.current.trie_valid = false;
        }
        self.write_codes(changes);
        self.write_hashed(changes)?;
        self.write_index(block.header.number, block.new_keys)?;

        let number = block.header.number;
        self.current.tip = ChainTip {
            number,
            hash: block.hash,
            state_checksum: block.header.state_root,
        };
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
        header.state_root = Some(root.root);
        self.rows.put_header(header);
        if landed.is_some() {
            // Cannot happen (whether roots overlap does not change within a group), and
            // would only lose a report.
            debug!(block = number, "a landed root was not reported");
        }
        Ok(Some(root))
    }

    /// Whether the due root may run while the writer takes the next blocks
    /// ([`WriterOptions::overlap_roots`]).
    fn can_overlap(&self) -> bool {
        self.options.roots_overlap() && self.current.trie_valid && self.layer_exact
    }

    /// Starts the root at the tip on its own thread over the group's layer, which it takes:
    /// the writer's reads and the next blocks' writes go to a fresh layer over it.
    fn launch_root(&mut self) -> Result<(), StateDbError> {
        let start = Instant::now();
        let block = self.current.tip.number;
        let changed = self.take_changed()?;
        let layer = Arc::new(std::mem::take(&mut self.hashed));
        let (env, dbs, parallelism) = (self.db.env().clone(), *self.db.dbs(), self.parallelism());
        let (root_layer, sparse) = (Arc::clone(&layer), Arc::clone(&self.sparse));
        let handle = std::thread::Builder::new()
            .name("gigas-root".into())
            .spawn(move || {
                layer::layered_root(
                    &env,
                    &dbs,
                    &root_layer,
                    changed,
                    parallelism,
                    None,
                    Some(&sparse),
                )
            });
        let handle = match handle {
            Ok(handle) => handle,
            Err(e) => {
                // The layer goes back for the discard that follows to find it whole.
                self.hashed = Arc::try_unwrap(layer).unwrap_or_default();
                return Err(StateDbError::Invariant {
                    what: format!("cannot start a thread for the root of block {block}: {e}"),
                });
            }
        };
        self.in_flight = Some(RootInFlight {
            block,
            layer,
            started: start,
            spent: start.elapsed().as_secs_f64(),
            handle,
        });
        Ok(())
    }

    /// Waits for the root in flight ([`WriterOptions::overlap_roots`]), if any, takes in
    /// what it computed, and stores it in its block's header row. Returns it, or else a
    /// root that ended inside an earlier call that could not return it
    /// ([`StateWriter::flush_idle`], [`StateWriter::compute_root`]); `None` when neither
    /// exists. On error the group is discarded.
    pub fn finish_root(&mut self) -> Result<Option<RootInfo>, StateDbError> {
        let Some(flight) = self.in_flight.take() else {
            return Ok(self.unreported.take());
        };
        let result = self.land_root(flight).map(Some);
        self.discard_on_error(result)
    }

    fn land_root(&mut self, flight: RootInFlight) -> Result<RootInfo, StateDbError> {
        let waiting = Instant::now();
        let RootInFlight {
            block,
            layer,
            started,
            spent,
            handle,
        } = flight;
        let computed = handle
            .join()
            .map_err(|_| StateDbError::RootThreadPanicked)?;
        let seconds = started.elapsed().as_secs_f64();
        let mut layer = Arc::try_unwrap(layer).map_err(|_| StateDbError::Invariant {
            what: format!("the layer of block {block}'s root is still shared after it ended"),
        })?;
        let root = computed?;
        if let Some(pending) = self.pending.as_mut() {
            pending.root(&root);
        }
        let (outcome, split) = layer.record_root(root);
        let later = std::mem::replace(&mut self.hashed, layer);
        self.hashed.absorb(later);
        if !self.rows.set_state_root(block, outcome.root) {
            return Err(StateDbError::Invariant {
                what: format!("block {block}'s header row left the group before its root landed"),
            });
        }
        let waited = spent + waiting.elapsed().as_secs_f64();
        Ok(self.note_root(block, outcome, false, split, seconds, waited))
    }

    fn write_codes(&mut self, changes: &ChangeSet) {
        for (hash, code) in changes.bytecodes() {
            self.rows.put_code(*hash, code);
        }
    }

    /// Hashes the block's keys once, for the hashed tables and for the changed-key sets.
    fn write_hashed(&mut self, changes: &ChangeSet) -> Result<(), StateDbError> {
        let tracking = self.current.trie_valid;
        let mut hashed_accounts = Vec::with_capacity(changes.accounts().len());
        for (address, change) in changes.accounts() {
            let h = keccak256(address);
            if tracking {
                if change.storage_wiped {
                    self.changed.storage_of(h);
                } else {
                    self.changed.account(h);
                }
            }
            hashed_accounts.push((h, change.state, change.storage_wiped));
        }
        let mut hashed_slots = Vec::with_capacity(changes.storage().len());
        let mut last: Option<(Address, B256)> = None;
        for (address, slot, value) in changes.storage() {
            let h = match last {
                Some((a, h)) if a == *address => h,
                _ => {
                    let h = keccak256(address);
                    last = Some((*address, h));
                    h
                }
            };
            let s = keccak256(slot.to_be_bytes::<32>());
            if tracking {
                self.changed.storage_of(h).push(s);
            }
            hashed_slots.push((h, s, *value));
        }
        match self.options.hashed_writes {
            HashedWrites::SortedPerGroup => {
                if let Some(pending) = self.pending.as_mut() {
                    for (h, _, wiped) in &hashed_accounts {
                        pending.account(*h, *wiped);
                    }
                    for (h, s, _) in &hashed_slots {
                        pending.slot(*h, *s);
                    }
                }
                for (h, state, wiped) in hashed_accounts {
                    if wiped {
                        // Its storage trie as the cache knows it is gone.
                        self.trie_cache.forget_storage(&h);
                        let entry = self.hashed.storage.entry(h).or_default();
                        entry.wiped = true;
                        entry.slots.clear();
                        // Nodes of the trie the wipe took.
                        entry.nodes.clear();
                    }
                    self.hashed.accounts.insert(h, state);
                }
                for (h, s, value) in hashed_slots {
                    self.hashed
                        .storage
                        .entry(h)
                        .or_default()
                        .slots
                        .insert(s, value);
                }
                Ok(())
            }
            HashedWrites::ChangeSetOrder => {
                if tracking {
                    for (h, _, wiped) in &hashed_accounts {
                        if *wiped {
                            self.trie_cache.forget_storage(h);
                        }
                    }
                }
                let (dbs, txn) = self.reads()?;
                let buf = &mut Vec::with_capacity(128);
                let mut accounts = cursor(dbs, txn, Table::HashedAccounts)?;
                let mut storage = cursor(dbs, txn, Table::HashedStorages)?;
                let mut trie = cursor(dbs, txn, Table::StoragesTrie)?;
                for (h, state, wiped) in hashed_accounts {
                    if wiped {
                        delete_dups(&mut storage, h.as_slice())?;
                        if tracking {
                            delete_dups(&mut trie, h.as_slice())?;
                        }
                    }
                    put_hashed_account(&mut accounts, &h, state.as_ref(), buf)?;
                }
                for (h, s, value) in hashed_slots {
                    put_slot(
                        &mut storage,
                        Table::HashedStorages,
                        h.as_slice(),
                        &s,
                        &value,
                        false,
                        buf,
                    )?;
                }
                Ok(())
            }
        }
    }

    /// Writes the group's state changes not yet in the transaction, and the trie nodes
    /// roots over them changed, in key order, and empties the layer: the transaction then
    /// holds all of them (a root inside it, or the commit, follows).
    fn flush_hashed(&mut self) -> Result<(), StateDbError> {
        if self.hashed.is_empty() {
            self.pending = None;
            return Ok(());
        }
        self.write_pending(false)?;
        self.hashed = TrieLayer::default();
        self.pending = None;
        Ok(())
    }

    /// Writes what of the layer is not in the transaction yet (see [`crate::flush`]).
    ///
    /// With `keep`, the in-memory trie's nodes go into the layer too: later layered roots
    /// read the last commit with the layer over it, not the transaction, and may load
    /// them again once the trie folds them back into hashes.
    fn write_pending(&mut self, keep: bool) -> Result<u64, StateDbError> {
        if self.in_flight.is_some() {
            return Err(StateDbError::Invariant {
                what: "the group's layer was to be written while a root read it".into(),
            });
        }
        // The account trie's nodes the in-memory trie changed since its last drain.
        let drained = self.sparse.drain()?;
        if drained.is_empty() && self.pending.as_ref().is_some_and(PendingKeys::is_empty) {
            return Ok(0);
        }
        let start = Instant::now();
        let tracking = self.current.trie_valid;
        let (dbs, txn) = (self.db.dbs(), open_txn(&self.txn)?);
        let mut written =
            flush::write_layer(dbs, txn, &self.hashed, self.pending.as_ref(), tracking)?;
        // After the layer's: newer than any node a walk put there.
        store::write_account_nodes(dbs, txn, drained.iter().map(|(path, node)| (path, node)))?;
        written.entries += drained.len() as u64;
        if keep {
            self.hashed.account_nodes.extend(drained);
        }
        // Now that nothing it holds is unwritten, all of it may fold back into hashes.
        self.sparse.enforce_budget()?;
        for h in &written.wiped {
            self.trie_cache.forget_storage(h);
        }
        self.db
            .metrics()
            .hashed_flush_seconds
            .observe(start.elapsed().as_secs_f64());
        Ok(written.entries)
    }

    /// Writes the open group's state changes made since the last call (or since the
    /// commit) into the write transaction, so that the commit has less left to write: for a
    /// follower waiting for its next block (see [`crate::flush`]). Visible to readers only at
    /// the commit, as before. Returns the entries written. On error the group is discarded.
    pub fn flush_idle(&mut self) -> Result<u64, StateDbError> {
        // The root in flight records its trie nodes into the layer this writes.
        self.unreported = self.finish_root()?;
        if self.background {
            // Nothing to write ahead: the commit thread writes the whole group. A commit
            // that landed meanwhile is taken in.
            self.land_commit(false)?;
            return Ok(0);
        }
        let result = self.write_idle();
        self.discard_on_error(result)
    }

    fn write_idle(&mut self) -> Result<u64, StateDbError> {
        self.write_rows()?;
        if self.hashed.is_empty() {
            return Ok(0);
        }
        let entries = self.write_pending(true)?;
        self.pending = Some(PendingKeys::default());
        Ok(entries)
    }

    fn write_index(&mut self, block: u64, new_keys: &[StateKey]) -> Result<(), StateDbError> {
        let mut index = self.current.index_len;
        for key in new_keys {
            if let Some(existing) = self.indexed(key)? {
                return Err(StateDbError::KeyAlreadyIndexed {
                    block,
                    key: *key,
                    index: existing,
                });
            }
            self.rows.push_key(*key, index)?;
            index += 1;
        }
        self.current.index_len = index;
        Ok(())
    }

    /// Writes the group's code, key-index and header rows into the transaction.
    fn write_rows(&mut self) -> Result<(), StateDbError> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let (dbs, txn) = (self.db.dbs(), open_txn(&self.txn)?);
        self.rows.write(dbs, txn)?;
        self.rows = GroupRows::default();
        Ok(())
    }

    /// Computes the root at the tip now (whatever `root_every` says), stores it in the tip's
    /// header row, and returns it. Rebuilds the trie from the hashed tables if it was off.
    /// Part of the open group: durable with the next commit.
    pub fn compute_root(&mut self) -> Result<RootInfo, StateDbError> {
        self.ensure_txn()?;
        self.unreported = self.finish_root()?;
        let result = self.root_now().and_then(|root| {
            let number = self.current.tip.number;
            if !self.rows.set_state_root(number, root.root) {
                // An idle write took the row into the transaction.
                if let Some(mut header) = self.header(number)? {
                    header.state_root = Some(root.root);
                    self.rows.put_header(header);
                }
            }
            Ok(root)
        });
        if result.is_ok() {
            self.dirty = true;
        }
        self.discard_on_error(result)
    }

    /// The keys the next root recomputes: the writer's since the last root and, when the
    /// writer commits on its own thread, nothing else (it keeps them in memory across
    /// commits); else with those the changed-key tables carried over a commit, which it
    /// empties.
    fn take_changed(&mut self) -> Result<ChangedKeys, StateDbError> {
        let pending = std::mem::take(&mut self.changed);
        if self.background {
            return Ok(pending);
        }
        let (dbs, txn) = self.reads()?;
        let mut changed = store::load_changed(dbs, txn)?;
        changed.merge(pending);
        store::clear_changed(dbs, txn)?;
        Ok(changed)
    }

    /// Whether roots run over the last commit and the open group's changes in memory
    /// ([`crate::trie::layer`]), on [`WriterOptions::root_threads`] threads, instead of
    /// inside the write transaction: whenever the hashed writes wait for the commit. The
    /// trie cache describes the trie as the writer sees it either way (the layer over the
    /// last commit, or the transaction, which hold the same nodes once the layer is
    /// written), so it serves both.
    /// Within a group, once a root ran inside the transaction (a rebuild), the rest of the
    /// group's roots do too: the transaction then holds trie writes the layer does not.
    fn layered(&self) -> bool {
        self.layer_exact
            && self.options.layered_roots
            && self.options.hashed_writes == HashedWrites::SortedPerGroup
    }

    fn parallelism(&self) -> Parallelism {
        let threads = match self.options.root_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
        // Each thread holds a read transaction (a reader slot) for the root's length.
        .min(MAX_ROOT_THREADS);
        Parallelism {
            threads,
            min_split_accounts: self.options.root_split_min_accounts,
        }
    }

    fn root_now(&mut self) -> Result<RootInfo, StateDbError> {
        let start = Instant::now();
        let rebuilt = !self.current.trie_valid;
        let layered = !rebuilt && self.layered();
        if !layered {
            self.flush_hashed()?;
            self.layer_exact = false;
            // This root changes the trie behind its back.
            self.sparse.clear();
        }
        let mut split = false;
        let cached = self.trie_cache.enabled();
        if cached {
            self.trie_cache.begin_root();
        }
        let outcome = if layered {
            let changed = self.take_changed()?;
            let cache = cached.then_some(&self.trie_cache);
            let root = layer::layered_root(
                self.db.env(),
                self.db.dbs(),
                &self.hashed,
                changed,
                self.parallelism(),
                cache,
                Some(self.sparse.as_ref()),
            )?;
            root.update_cache(&self.trie_cache);
            if let Some(pending) = self.pending.as_mut() {
                pending.root(&root);
            }
            let (outcome, was_split) = self.hashed.record_root(root);
            split = was_split;
            outcome
        } else {
            let pending = std::mem::take(&mut self.changed);
            // Not `reads()`: the cache is borrowed beside the transaction.
            let (dbs, txn) = (self.db.dbs(), open_txn(&self.txn)?);
            if rebuilt {
                self.trie_cache.clear();
                root::rebuild_root(dbs, txn)?
            } else {
                let mut changed = store::load_changed(dbs, txn)?;
                changed.merge(pending);
                root::update_root(dbs, txn, changed, &self.trie_cache)?
            }
        };
        let seconds = start.elapsed().as_secs_f64();
        let block = self.current.tip.number;
        Ok(self.note_root(block, outcome, rebuilt, split, seconds, seconds))
    }

    /// Keeps a computed root as the last one, and counts it.
    fn note_root(
        &mut self,
        block: u64,
        outcome: RootOutcome,
        rebuilt: bool,
        split: bool,
        seconds: f64,
        waited_seconds: f64,
    ) -> RootInfo {
        let evicted = self.trie_cache.enforce_budget();
        self.current.trie_valid = true;
        self.current.last_root = Some((block, outcome.root));
        let metrics = self.db.metrics();
        metrics.trie_update_seconds.observe(seconds);
        metrics.trie_leaves_hashed.inc_by(outcome.leaves);
        metrics
            .last_root_block
            .set(i64::try_from(block).unwrap_or(i64::MAX));
        if rebuilt {
            metrics.trie_rebuilds.inc();
        }
        let cache = self.trie_cache.stats();
        metrics.trie_cache_evicted.inc_by(evicted);
        metrics
            .trie_cache_hits
            .inc_by(cache.hits.saturating_sub(self.cache_reported.hits));
        metrics
            .trie_cache_misses
            .inc_by(cache.misses.saturating_sub(self.cache_reported.misses));
        self.cache_reported = cache;
        metrics
            .trie_cache_bytes
            .set(i64::try_from(cache.bytes).unwrap_or(i64::MAX));
        metrics
            .trie_cache_entries
            .set(i64::try_from(cache.entries).unwrap_or(i64::MAX));
        debug!(block, root = %outcome.root, rebuilt, leaves = outcome.leaves, seconds, "state root");
        RootInfo {
            block,
            root: outcome.root,
            rebuilt,
            changed_accounts: outcome.changed_accounts,
            storage_tries: outcome.storage_tries,
            leaves: outcome.leaves,
            skipped: outcome.skipped,
            remembered: outcome.remembered,
            rereads: outcome.rereads,
            split,
            seconds,
            waited_seconds,
        }
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

    /// Starts the open group's commit: when commits run on the commit thread
    /// ([`WriterOptions::commit_thread`]), hands the group over and returns at once, the
    /// writer taking the next blocks while it commits ([`StateWriter::committed_tip`]
    /// moves when it lands: at a later call, or [`StateWriter::poll_commit`] and
    /// [`StateWriter::finish_commit`]); otherwise commits it as [`StateWriter::commit`].
    /// A commit still under way lands first (at most one is). Returns the group's
    /// figures, with `commit_seconds` the time this thread spent on the hand-over; `None`
    /// when there was nothing to commit. On error the group is discarded (and, with the
    /// commit thread, the one under way too if it failed).
    pub fn start_commit(&mut self) -> Result<Option<CommitInfo>, StateDbError> {
        if !self.background {
            return self.commit();
        }
        if !self.dirty {
            return Ok(None);
        }
        let result = self.hand_off().map(Some);
        self.discard_on_error(result)
    }

    /// Takes in the commit under way on the commit thread if it has ended (waiting for the
    /// root in flight, if any, first: the landing changes the layer it reads). Returns
    /// whether one landed. On error (the commit failed) both groups are discarded.
    pub fn poll_commit(&mut self) -> Result<bool, StateDbError> {
        if !self
            .committing
            .as_ref()
            .is_some_and(|c| c.handle.is_finished())
        {
            return Ok(false);
        }
        if self.in_flight.is_some() {
            self.unreported = self.finish_root()?;
        }
        Ok(self.land_commit(false)?.is_some())
    }

    /// Waits for the commit under way on the commit thread, if any, and takes it in.
    /// Returns what it did; `None` when none was under way. On error both groups are
    /// discarded.
    pub fn finish_commit(&mut self) -> Result<Option<CommitInfo>, StateDbError> {
        if self.committing.is_none() {
            return Ok(None);
        }
        if self.in_flight.is_some() {
            self.unreported = self.finish_root()?;
        }
        let Some(committing) = self.committing.as_ref() else {
            return Ok(None);
        };
        let (blocks, changes, group_seconds) = (
            committing.blocks,
            committing.changes,
            committing.group_seconds,
        );
        let head = committing.snapshot.tip.number;
        Ok(self.land_commit(true)?.map(|p| CommitInfo {
            blocks,
            head,
            changes,
            write_seconds: group_seconds,
            commit_seconds: p.write_seconds + p.commit_seconds,
            sync_seconds: 0.0,
            root: None,
        }))
    }

    /// Takes in the commit under way on the commit thread: waits for it with `wait`, else
    /// only when it has ended. The caller made sure no root is in flight (the landing
    /// prunes the layer a root would read). On error both groups are discarded.
    fn land_commit(&mut self, wait: bool) -> Result<Option<Persisted>, StateDbError> {
        let Some(committing) = self.committing.take_if(|c| wait || c.handle.is_finished()) else {
            return Ok(None);
        };
        if self.in_flight.is_some() {
            self.committing = Some(committing);
            return Err(StateDbError::Invariant {
                what: "a commit was to land while a root read the layer it prunes".into(),
            });
        }
        let CommitInFlight {
            handoff,
            snapshot,
            handle,
            ..
        } = committing;
        let joining = Instant::now();
        let joined = handle.join();
        let join_ms = joining.elapsed().as_secs_f64() * 1e3;
        let persisted = match joined {
            Ok(Ok(persisted)) => persisted,
            Ok(Err(e)) => {
                self.db.metrics().groups_discarded.inc();
                self.discard();
                return Err(e);
            }
            Err(_) => {
                self.db.metrics().groups_discarded.inc();
                self.discard();
                return Err(StateDbError::Invariant {
                    what: "the commit thread panicked".into(),
                });
            }
        };
        self.committed = snapshot;
        // Reads of the last commit now see the group; what the layer holds of it with the
        // same value is there, and goes.
        self.reader = None;
        let reader = self.begin_reader();
        self.reader = Some(self.discard_on_error(reader)?);
        let pruning = Instant::now();
        self.hashed.prune_committed(&handoff.layer);
        let prune_ms = pruning.elapsed().as_secs_f64() * 1e3;
        self.carried = 0;
        for h in &persisted.wiped {
            self.trie_cache.forget_storage(h);
        }
        let metrics = self.db.metrics();
        metrics.groups_committed.inc();
        metrics
            .hashed_flush_seconds
            .observe(persisted.write_seconds);
        metrics.commit_seconds.observe(persisted.commit_seconds);
        self.db.refresh_size_metrics();
        if self.db.options().durability.every_commit() {
            self.mark_durable();
        }
        debug!(
            head = snapshot.tip.number,
            entries = persisted.entries,
            write_ms = persisted.write_seconds * 1e3,
            commit_ms = persisted.commit_seconds * 1e3,
            prune_ms,
            join_ms,
            "group landed"
        );
        Ok(Some(persisted))
    }

    /// Hands the open group to the commit thread (see [`crate::persist`]).
    fn hand_off(&mut self) -> Result<CommitInfo, StateDbError> {
        let start = Instant::now();
        let root = self.finish_root()?;
        // At most one commit under way.
        self.land_commit(true)?;
        // A durable point due waits for no commit under way (see `sync_if_due`): made
        // here, between two commits, it is not put off for as long as they follow each
        // other.
        let sync_seconds = self.sync_if_due()?.map_or(0.0, |d| d.as_secs_f64());
        // The account trie's nodes the trie in memory changed: part of the group.
        let drained = self.sparse.drain()?;
        let mut layer = std::mem::take(&mut self.hashed);
        layer.account_nodes.extend(drained);
        // The writer's reads and roots see the group through this copy until it lands.
        let copying = Instant::now();
        self.hashed = layer.clone();
        let copy_ms = copying.elapsed().as_secs_f64() * 1e3;
        self.carried = self.hashed.approx_bytes();
        // What it holds is in the copy: all of it may fold back into hashes.
        self.sparse.enforce_budget()?;
        let handoff = Arc::new(Handoff {
            layer,
            rows: std::mem::take(&mut self.rows),
            meta: MetaTip {
                tip: self.current.tip,
                index_len: self.current.index_len,
                last_root: self.current.last_root,
                trie_valid: self.current.trie_valid,
            },
            changed: self.changed.clone(),
            clear_changed: self.changed_stored,
        });
        let (env, dbs) = (self.db.env().clone(), *self.db.dbs());
        let theirs = Arc::clone(&handoff);
        let handle = std::thread::Builder::new()
            .name("gigas-commit".into())
            .spawn(move || persist::persist(&env, &dbs, &theirs))
            .map_err(|e| StateDbError::Invariant {
                what: format!("cannot start the commit thread: {e}"),
            })?;
        self.changed_stored = !self.changed.is_empty();
        let group_seconds = self.group.opened.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let info = CommitInfo {
            blocks: self.group.blocks,
            head: self.current.tip.number,
            changes: self.group.changes,
            write_seconds: group_seconds,
            commit_seconds: start.elapsed().as_secs_f64() - sync_seconds,
            sync_seconds,
            root,
        };
        self.committing = Some(CommitInFlight {
            handoff,
            snapshot: self.current,
            blocks: self.group.blocks,
            changes: self.group.changes,
            group_seconds,
            handle,
        });
        self.dirty = false;
        self.group = Group::default();
        self.db.metrics().write_txn_seconds.observe(group_seconds);
        debug!(
            head = info.head,
            ms = info.commit_seconds * 1e3,
            copy_ms,
            "group handed to the commit thread"
        );
        Ok(info)
    }

    fn commit_group(&mut self) -> Result<CommitInfo, StateDbError> {
        let root = self.finish_root()?;
        self.flush_hashed()?;
        self.write_rows()?;
        {
            let (dbs, txn) = self.reads()?;
            if self.current.trie_valid && !self.changed.is_empty() {
                store::persist_changed(dbs, txn, &self.changed)?;
            }
            write_meta_tip(
                dbs,
                txn,
                &self.current.tip,
                self.current.index_len,
                self.current.last_root,
                self.current.trie_valid,
            )?;
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
        self.committed = self.current;
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

fn no_txn() -> StateDbError {
    StateDbError::NoTransaction {
        reason: "beginning it after the last commit or discard failed".into(),
    }
}

/// The writer's open transaction, or why there is none.
fn open_txn(txn: &Option<RwTxUnsync>) -> Result<&RwTxUnsync, StateDbError> {
    txn.as_ref().ok_or_else(|| StateDbError::NoTransaction {
        reason: "beginning it after the last commit or discard failed".into(),
    })
}

impl Drop for StateWriter<'_> {
    fn drop(&mut self) {
        // Not left reading the environment after the writer is gone.
        if let Some(flight) = self.in_flight.take() {
            let _ = flight.handle.join();
        }
        // A group handed over commits whole, or not at all.
        if let Some(committing) = self.committing.take() {
            match committing.handle.join() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    warn!(error = %e, "the last group handed to the commit thread failed")
                }
                Err(_) => warn!("the commit thread panicked"),
            }
        }
        if self.dirty {
            self.db.metrics().groups_discarded.inc();
        }
    }
}

impl_state_reads!(StateWriter<'_>);
