//! What a state snapshot needs of the database: reading the state in key order from one
//! consistent view ([`StateView::scan_accounts`] and its siblings), and writing a snapshot's
//! state into an empty database in bulk ([`Bootstrap`]).
//!
//! The file formats, and every check of what a snapshot holds, are `gigas-snapshot`'s: this
//! module trusts what it is given, as the writer does, and only refuses what would break the
//! tables (entries out of key order, which MDBX's append refuses too).

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::time::Instant;

use alloy_primitives::{B256, U256};
use gigas_mdbx::StoreError as _;
use gigas_primitives::{AccountState, LatticeHash};
use gigas_statediff::{ChainTip, StateKey};
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::WriteFlags;
use tracing::info;

use crate::codec;
use crate::db::{write_meta_tip, StateDb, WriteLock};
use crate::error::StateDbError;
use crate::read::Dbs;
use crate::tables::{Table, META_BOOTSTRAP};
use crate::types::AnyTable;
use crate::types::StoredHeader;
use crate::view::StateView;
use gigas_triedb::rebuild;
use gigas_triedb::TrieTable;

type Row<'a> = Option<(Cow<'a, [u8]>, Cow<'a, [u8]>)>;

fn hashed_key(table: impl Into<AnyTable>, bytes: &[u8]) -> Result<B256, StateDbError> {
    let table = table.into();
    <[u8; 32]>::try_from(bytes)
        .map(B256::from)
        .map_err(|_| StateDbError::corrupt(table.name(), bytes, "key is not 32 bytes"))
}

impl StateView<'_> {
    /// Every account, in keccak(address) order, until `f` breaks.
    pub fn scan_accounts(
        &self,
        mut f: impl FnMut(&B256, &AccountState) -> ControlFlow<()>,
    ) -> Result<(), StateDbError> {
        let table = TrieTable::HashedAccounts;
        self.scan(table, |k, v| {
            let key = hashed_key(table, k)?;
            Ok(f(&key, &codec::decode_account(table, k, v)?))
        })
    }

    /// Every nonzero slot, by keccak(address) then keccak(slot), until `f` breaks.
    pub fn scan_slots(
        &self,
        mut f: impl FnMut(&B256, &B256, &U256) -> ControlFlow<()>,
    ) -> Result<(), StateDbError> {
        let table = TrieTable::HashedStorages;
        self.scan(table, |k, v| {
            let address = hashed_key(table, k)?;
            let (slot, value) = codec::decode_slot(table, k, v)?;
            Ok(f(&address, &slot, &value))
        })
    }

    /// Every contract code by its hash, in hash order, until `f` breaks.
    pub fn scan_codes(
        &self,
        mut f: impl FnMut(&B256, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StateDbError> {
        let table = Table::Bytecodes;
        self.scan(table, |k, v| Ok(f(&hashed_key(table, k)?, v)))
    }

    /// Every entry of the key index, in index order, until `f` breaks.
    pub fn scan_index(
        &self,
        mut f: impl FnMut(u64, &StateKey) -> ControlFlow<()>,
    ) -> Result<(), StateDbError> {
        let table = Table::IndexedKeys;
        self.scan(table, |k, v| {
            let index = codec::decode_u64(table, k, k)?;
            Ok(f(index, &codec::decode_state_key(k, v)?))
        })
    }

    fn scan(
        &self,
        table: impl Into<AnyTable>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<ControlFlow<()>, StateDbError>,
    ) -> Result<(), StateDbError> {
        let table = table.into();
        let mut c = self
            .txn()
            .cursor(self.dbs().any(table))
            .map_err(StateDbError::mdbx("open a scan cursor"))?;
        let mut row: Row<'_> = c.first().map_err(StateDbError::read(table.name()))?;
        while let Some((k, v)) = row {
            if f(&k, &v)?.is_break() {
                return Ok(());
            }
            // MDBX_NEXT steps through a DUPSORT key's duplicates before the next key.
            row = c.next().map_err(StateDbError::read(table.name()))?;
        }
        Ok(())
    }
}

/// The entries of one chunk of a snapshot, in the order they are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotEntries {
    /// Accounts by keccak(address), ascending.
    Accounts(Vec<(B256, AccountState)>),
    /// Nonzero slots by keccak(address) then keccak(slot), ascending.
    Slots(Vec<(B256, B256, U256)>),
    /// Contract code by hash, ascending.
    Codes(Vec<(B256, Vec<u8>)>),
    /// Key-index entries from `first` on, consecutive.
    Index {
        /// The index of the first key.
        first: u64,
        /// The keys.
        keys: Vec<StateKey>,
    },
}

/// Which snapshot a bootstrap is writing, and how far it got: kept in `Meta` so that a
/// bootstrap stopped at any point resumes at its first unwritten chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapProgress {
    /// The snapshot's block.
    pub block: u64,
    /// The snapshot's identity (the hash of its manifest).
    pub manifest: B256,
    /// Chunks written, in manifest order.
    pub chunks_done: u32,
}

impl BootstrapProgress {
    fn encode(&self) -> [u8; 44] {
        let mut out = [0u8; 44];
        out[..8].copy_from_slice(&self.block.to_be_bytes());
        out[8..40].copy_from_slice(self.manifest.as_slice());
        out[40..].copy_from_slice(&self.chunks_done.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, StateDbError> {
        let bytes: &[u8; 44] = bytes.try_into().map_err(|_| {
            StateDbError::corrupt(
                Table::Meta.name(),
                META_BOOTSTRAP,
                format!("{} bytes, not 44", bytes.len()),
            )
        })?;
        let mut block = [0u8; 8];
        block.copy_from_slice(&bytes[..8]);
        let mut done = [0u8; 4];
        done.copy_from_slice(&bytes[40..]);
        Ok(Self {
            block: u64::from_be_bytes(block),
            manifest: B256::from_slice(&bytes[8..40]),
            chunks_done: u32::from_be_bytes(done),
        })
    }
}

/// Key-index entries held in memory at once while `KeyIndices` is filled (72 bytes each in
/// the pass's heap: under 300 MiB a pass), whatever the keys' distribution.
pub(crate) const KEY_PASS_ENTRIES: usize = 4 << 20;

/// A key-index entry of a pass of [`Bootstrap::fill_key_indices`], ordered by its key.
#[derive(Clone, Copy)]
struct KeyEntry {
    key: [u8; 52],
    len: u8,
    index: u64,
}

impl KeyEntry {
    fn key(&self) -> &[u8] {
        &self.key[..self.len as usize]
    }
}

impl PartialEq for KeyEntry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for KeyEntry {}

impl PartialOrd for KeyEntry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyEntry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(other.key())
    }
}

/// What a finished bootstrap wrote.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BootstrapOutcome {
    /// The head it recorded.
    pub tip: ChainTip,
    /// The MPT state root computed from the written state.
    pub state_root: B256,
    /// Seconds the root (and the trie's nodes) took.
    pub root_seconds: f64,
    /// The most key-index entries one pass of filling `KeyIndices` held in memory.
    pub key_pass_peak: usize,
}

/// Writes a snapshot's state into a database that has no head, chunk by chunk, each chunk in
/// one MDBX transaction with the progress record, so a crash loses at most the chunk being
/// written. Holds the database's write side ([`StateDbError::WriterBusy`] for anyone else).
pub struct Bootstrap<'db> {
    db: &'db StateDb,
    _lock: WriteLock<'db>,
    progress: BootstrapProgress,
    /// The last slot written, which decides between appending a key and appending a
    /// duplicate (from the table itself after a resume).
    last_slot: Option<(B256, B256)>,
    /// When the last durable point was made, and the pages written since (for a database
    /// whose commits are not synced, [`crate::Durability::Periodic`]).
    synced_at: Instant,
    bytes_at_sync: u64,
    /// The most key-index entries a pass of [`Bootstrap::fill_key_indices`] holds.
    key_pass_entries: usize,
}

impl std::fmt::Debug for Bootstrap<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl StateDb {
    /// The bootstrap under way in this database, if one was started and not finished.
    pub fn bootstrap_progress(&self) -> Result<Option<BootstrapProgress>, StateDbError> {
        let view = self.view()?;
        crate::read::get(self.dbs(), view.txn(), Table::Meta, META_BOOTSTRAP)?
            .map(|v| BootstrapProgress::decode(&v))
            .transpose()
    }

    /// Starts writing the snapshot of `block` whose manifest hashes to `manifest`, or resumes
    /// it where it stopped. A database with a head is refused
    /// ([`StateDbError::AlreadyInitialized`]); one holding the start of another snapshot, or
    /// of an interrupted genesis, is emptied first.
    pub fn bootstrap(&self, block: u64, manifest: B256) -> Result<Bootstrap<'_>, StateDbError> {
        let lock = self.lock_writer()?;
        if let Some(tip) = self.head()? {
            return Err(StateDbError::AlreadyInitialized { head: tip.number });
        }
        let progress = match self.bootstrap_progress()? {
            Some(p) if p.block == block && p.manifest == manifest => p,
            _ => {
                let txn = self.begin_rw("begin a bootstrap transaction")?;
                crate::genesis::clear_all(self.dbs(), &txn)?;
                let fresh = BootstrapProgress {
                    block,
                    manifest,
                    chunks_done: 0,
                };
                put_progress(self.dbs(), &txn, &fresh)?;
                txn.commit()
                    .map_err(StateDbError::mdbx("commit a bootstrap's start"))?;
                fresh
            }
        };
        let last_slot = {
            let view = self.view()?;
            let mut c = view
                .txn()
                .cursor(self.dbs().any(TrieTable::HashedStorages))
                .map_err(StateDbError::mdbx("open a HashedStorages cursor"))?;
            let row: Row<'_> = c.last().map_err(StateDbError::read("HashedStorages"))?;
            match row {
                Some((k, v)) => {
                    let (slot, _) = codec::decode_slot(TrieTable::HashedStorages, &k, &v)?;
                    Some((hashed_key(TrieTable::HashedStorages, &k)?, slot))
                }
                None => None,
            }
        };
        Ok(Bootstrap {
            db: self,
            _lock: lock,
            progress,
            last_slot,
            synced_at: Instant::now(),
            bytes_at_sync: self.page_bytes_written(),
            key_pass_entries: KEY_PASS_ENTRIES,
        })
    }

    fn begin_rw(&self, op: &'static str) -> Result<RwTxUnsync, StateDbError> {
        self.env().begin_rw_unsync().map_err(StateDbError::mdbx(op))
    }
}

fn put_progress(
    dbs: &Dbs,
    txn: &RwTxUnsync,
    progress: &BootstrapProgress,
) -> Result<(), StateDbError> {
    txn.put(
        dbs.get(Table::Meta),
        META_BOOTSTRAP,
        progress.encode(),
        WriteFlags::empty(),
    )
    .map_err(StateDbError::mdbx("write the bootstrap's progress"))
}

impl Bootstrap<'_> {
    /// How far it got.
    pub fn progress(&self) -> BootstrapProgress {
        self.progress
    }

    /// Writes chunk number `chunk`, which must be the next one, and records it as done in the
    /// same transaction.
    pub fn write_chunk(
        &mut self,
        chunk: u32,
        entries: &SnapshotEntries,
    ) -> Result<(), StateDbError> {
        if chunk != self.progress.chunks_done {
            return Err(StateDbError::Invariant {
                what: format!(
                    "bootstrap chunk {chunk} written after {} chunks",
                    self.progress.chunks_done
                ),
            });
        }
        let dbs = *self.db.dbs();
        let txn = self.db.begin_rw("begin a bootstrap chunk")?;
        let mut buf = Vec::with_capacity(128);
        let append = StateDbError::mdbx;
        let mut last_slot = self.last_slot;
        match entries {
            SnapshotEntries::Accounts(accounts) => {
                let mut c = txn
                    .cursor(dbs.any(TrieTable::HashedAccounts))
                    .map_err(append("open a HashedAccounts cursor"))?;
                for (key, state) in accounts {
                    codec::encode_account(state, &mut buf);
                    c.append(key.as_slice(), &buf)
                        .map_err(append("append to HashedAccounts (keys out of order?)"))?;
                }
            }
            SnapshotEntries::Slots(slots) => {
                let mut c = txn
                    .cursor(dbs.any(TrieTable::HashedStorages))
                    .map_err(append("open a HashedStorages cursor"))?;
                for (address, slot, value) in slots {
                    codec::encode_slot(slot, value, &mut buf);
                    let same = last_slot.is_some_and(|(a, _)| a == *address);
                    if same {
                        c.append_dup(address.as_slice(), &buf)
                            .map_err(append("append to HashedStorages (slots out of order?)"))?;
                    } else {
                        c.append(address.as_slice(), &buf)
                            .map_err(append("append to HashedStorages (keys out of order?)"))?;
                    }
                    last_slot = Some((*address, *slot));
                }
            }
            SnapshotEntries::Codes(codes) => {
                let mut c = txn
                    .cursor(dbs.get(Table::Bytecodes))
                    .map_err(append("open a Bytecodes cursor"))?;
                for (hash, code) in codes {
                    c.append(hash.as_slice(), code)
                        .map_err(append("append to Bytecodes (hashes out of order?)"))?;
                }
            }
            SnapshotEntries::Index { first, keys } => {
                // Index to key only: key to index is filled once every index chunk is in
                // (`fill_key_indices`). By key the index is in no order, and its puts, a
                // chunk at a time, dirtied a page of the whole B-tree per key: over 10M keys
                // the writer spent most of two minutes copying pages.
                let indexed = dbs.get(Table::IndexedKeys);
                for (i, key) in keys.iter().enumerate() {
                    let index = first + i as u64;
                    txn.append(indexed, index.to_be_bytes(), codec::encode_state_key(key))
                        .map_err(append("append to IndexedKeys (indices out of order?)"))?;
                }
            }
        }
        let next = BootstrapProgress {
            chunks_done: chunk + 1,
            ..self.progress
        };
        put_progress(&dbs, &txn, &next)?;
        txn.commit()
            .map_err(StateDbError::mdbx("commit a bootstrap chunk"))?;
        self.progress = next;
        self.last_slot = last_slot;
        // Unsynced commits are made durable on the node's schedule: a power loss then takes
        // back at most a period of chunks, consistently with their progress record, and the
        // bootstrap fetches them again.
        if let crate::Durability::Periodic(schedule) = self.db.options().durability {
            let written = self
                .db
                .page_bytes_written()
                .saturating_sub(self.bytes_at_sync);
            if self.synced_at.elapsed() >= schedule.period || written >= schedule.bytes {
                self.db.sync()?;
                self.synced_at = Instant::now();
                self.bytes_at_sync = self.db.page_bytes_written();
            }
        }
        Ok(())
    }

    /// The most key-index entries a pass of filling `KeyIndices` holds in memory (tests set
    /// it small to see the bound hold).
    #[doc(hidden)]
    pub fn with_key_pass_entries(mut self, entries: usize) -> Self {
        self.key_pass_entries = entries.max(1);
        self
    }

    /// Fills `KeyIndices` (key to index) from `IndexedKeys`, in key order with MDBX append,
    /// in passes that each hold at most [`KEY_PASS_ENTRIES`] entries: a pass scans
    /// `IndexedKeys` and keeps, in a bounded max-heap, the smallest keys above the last one
    /// the pass before wrote, then appends them in order in one transaction. The bound holds
    /// whatever the keys: passes split by count, not by the keys' first byte (one contract's
    /// slots, or many `0x00…` addresses, share a first byte). Each pass reads the table once,
    /// as passes by byte range did. Emptied first, so that a finish interrupted here starts
    /// it again. Returns the most entries a pass held.
    fn fill_key_indices(&mut self, index_len: u64) -> Result<usize, StateDbError> {
        let dbs = *self.db.dbs();
        let txn = self.db.begin_rw("begin filling KeyIndices")?;
        txn.clear_db(dbs.get(Table::KeyIndices))
            .map_err(StateDbError::mdbx("clear KeyIndices"))?;
        txn.commit()
            .map_err(StateDbError::mdbx("commit clearing KeyIndices"))?;
        let bound = self.key_pass_entries;
        let mut last: Option<KeyEntry> = None;
        let (mut written, mut peak) = (0u64, 0usize);
        loop {
            let mut heap: std::collections::BinaryHeap<KeyEntry> =
                std::collections::BinaryHeap::with_capacity(bound.min(1 << 16));
            {
                let view = self.db.view()?;
                view.scan(Table::IndexedKeys, |k, v| {
                    if last.as_ref().is_some_and(|last| v <= last.key()) {
                        return Ok(ControlFlow::Continue(()));
                    }
                    if heap.len() == bound && heap.peek().is_some_and(|top| v >= top.key()) {
                        return Ok(ControlFlow::Continue(()));
                    }
                    if v.len() > 52 {
                        return Err(StateDbError::corrupt(
                            Table::IndexedKeys.name(),
                            k,
                            "a key longer than 52 bytes",
                        ));
                    }
                    let mut entry = KeyEntry {
                        key: [0u8; 52],
                        len: v.len() as u8,
                        index: codec::decode_u64(Table::IndexedKeys, k, k)?,
                    };
                    entry.key[..v.len()].copy_from_slice(v);
                    if heap.len() == bound {
                        heap.pop();
                    }
                    heap.push(entry);
                    Ok(ControlFlow::Continue(()))
                })?;
            }
            let full = heap.len() == bound;
            peak = peak.max(heap.len());
            let entries = heap.into_sorted_vec();
            if !entries.is_empty() {
                let txn = self.db.begin_rw("begin filling KeyIndices")?;
                {
                    let mut c = txn
                        .cursor(dbs.get(Table::KeyIndices))
                        .map_err(StateDbError::mdbx("open a KeyIndices cursor"))?;
                    for entry in &entries {
                        c.append(entry.key(), &entry.index.to_be_bytes()).map_err(
                            StateDbError::mdbx("append to KeyIndices (a key indexed twice?)"),
                        )?;
                    }
                }
                txn.commit()
                    .map_err(StateDbError::mdbx("commit a pass of KeyIndices"))?;
            }
            written += entries.len() as u64;
            last = entries.last().copied();
            // A pass that did not fill its bound took every key left.
            if !full || written >= index_len {
                break;
            }
        }
        Ok(peak)
    }

    /// Computes the state root of everything written (storing the whole trie), then records
    /// `header` as the head with the key index's length and the state's lattice hash, and
    /// forgets the progress, in one last transaction: until it commits, the database has no
    /// head and nothing of the snapshot is served. The caller has checked the state against
    /// the commitment in `header`.
    ///
    /// `ancestors` are headers of blocks before N, stored beside it (their hashes answer
    /// BLOCKHASH at the blocks after N); the caller has checked that they chain to `header`.
    pub fn finish(
        mut self,
        header: &StoredHeader,
        ancestors: &[StoredHeader],
        index_len: u64,
        lattice: Option<&LatticeHash>,
    ) -> Result<BootstrapOutcome, StateDbError> {
        let key_pass_peak = self.fill_key_indices(index_len)?;
        let dbs = *self.db.dbs();
        let txn = self.db.begin_rw("begin the bootstrap's last transaction")?;
        let start = Instant::now();
        let root = rebuild::rebuild_root(self.db.env(), dbs.trie(), &txn, rebuild::SPLIT_SLOTS)?;
        let root_seconds = start.elapsed().as_secs_f64();
        let number = header.header.number;
        // The state written must be the one the signed header commits to; until this
        // transaction commits the database has no head, and a refused snapshot leaves it so.
        if root.root != header.header.state_root {
            return Err(StateDbError::StateRootMismatch {
                block: number,
                header: header.header.state_root,
                computed: root.root,
            });
        }
        let tip = ChainTip {
            number,
            hash: header.hash,
            state_root: header.header.state_root,
        };
        let mut row = header.clone();
        row.state_root = Some(root.root);
        let mut buf = Vec::new();
        for row in ancestors.iter().chain(std::iter::once(&row)) {
            buf.clear();
            codec::encode_header_row(row, &mut buf);
            let key = codec::block_key(row.header.number);
            txn.put(dbs.get(Table::Headers), key, &buf, WriteFlags::empty())
                .map_err(StateDbError::mdbx("write Headers"))?;
            txn.put(
                dbs.get(Table::HeaderNumbers),
                row.hash,
                key,
                WriteFlags::empty(),
            )
            .map_err(StateDbError::mdbx("write HeaderNumbers"))?;
        }
        write_meta_tip(
            &dbs,
            &txn,
            &tip,
            index_len,
            Some((number, root.root)),
            true,
            lattice,
        )?;
        txn.del(dbs.get(Table::Meta), META_BOOTSTRAP, None)
            .map_err(StateDbError::mdbx("clear the bootstrap's progress"))?;
        txn.commit()
            .map_err(StateDbError::mdbx("commit the bootstrap's head"))?;
        // Durable before anything is served, whatever the commit mode.
        self.db.sync()?;
        self.db
            .metrics()
            .last_root_block
            .set(i64::try_from(number).unwrap_or(i64::MAX));
        self.db.refresh_size_metrics();
        info!(block = number, root = %root.root, root_seconds, "snapshot state recorded as the head");
        Ok(BootstrapOutcome {
            tip,
            state_root: root.root,
            root_seconds,
            key_pass_peak,
        })
    }
}
