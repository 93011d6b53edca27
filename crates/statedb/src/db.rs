//! [`StateDb`]: the environment, its table handles, and the doors to reading and writing.

use gigas_mdbx::StoreError as _;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use gigas_statediff::ChainTip;

use signet_libmdbx::{Environment, SyncMode, WriteFlags};

use crate::codec;
use crate::error::StateDbError;
use crate::metrics::StateDbMetrics;
use crate::read::Dbs;
use crate::tables::{Table, META_SCHEMA_VERSION, SCHEMA_VERSION};
use crate::types::{AnyTable, Durability, StateDbOptions, TableStats, WriterOptions};
use crate::view::StateView;
use crate::writer::StateWriter;
use gigas_triedb::{TrieDbs, TrieTable};

/// The full node's state in MDBX. `Send + Sync`: read views may be taken on any thread while
/// one [`StateWriter`] applies blocks (each view is an MVCC snapshot of the last commit).
pub struct StateDb {
    env: Environment,
    dbs: Dbs,
    options: StateDbOptions,
    metrics: StateDbMetrics,
    dir: PathBuf,
    writer_open: AtomicBool,
    /// MDBX's page size, fixed at creation.
    page_bytes: u64,
}

impl fmt::Debug for StateDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDb")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Held while a writer or a genesis owns the write side.
pub(crate) struct WriteLock<'db>(&'db AtomicBool);

impl Drop for WriteLock<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl StateDb {
    /// Opens the state database in `dir` (created if missing), creating the tables that are
    /// missing. A new database holds no chain: apply a genesis
    /// ([`StateDb::apply_genesis`]) before a writer.
    pub fn open(dir: &Path, options: StateDbOptions) -> Result<Self, StateDbError> {
        let sync_mode = match options.durability {
            Durability::Durable => SyncMode::Durable,
            Durability::NoMetaSync => SyncMode::NoMetaSync,
            Durability::SafeNoSync | Durability::Periodic(_) => SyncMode::SafeNoSync,
        };
        let open = |page_size: Option<usize>| {
            gigas_mdbx::open_env(
                dir,
                &gigas_mdbx::EnvOptions {
                    max_size_bytes: options.max_size_bytes,
                    growth_step_bytes: options.growth_step_bytes,
                    page_size,
                    max_readers: options.max_readers,
                    sync_mode,
                    readahead: options.readahead,
                    write_map: options.write_map,
                    // MDBX's own durable points only as a backstop to the writer's schedule.
                    autosync_period: match options.durability {
                        Durability::Periodic(schedule) => Some(schedule.period.saturating_mul(4)),
                        _ => None,
                    },
                    max_dirty_pages: Some(
                        (options.max_dirty_bytes / page_size.unwrap_or(4096).max(256) as u64)
                            .max(1024),
                    ),
                },
            )
        };
        let mut env = open(options.page_size)?;
        let page_bytes = env
            .stat()
            .map(|s| u64::from(s.page_size()))
            .map_err(StateDbError::mdbx("read the environment's page size"))?;
        // A database that exists keeps the page size it was created with, and MDBX's
        // dirty-page bound is a count of pages: open again with the file's size so that the
        // bound is the bytes asked for.
        if page_bytes != options.page_size.unwrap_or(4096) as u64 {
            drop(env);
            env = open(usize::try_from(page_bytes).ok())?;
        }
        let state =
            gigas_mdbx::open_tables(&env, dir, Table::Meta, META_SCHEMA_VERSION, SCHEMA_VERSION)
                .map_err(|e| match e {
                    gigas_mdbx::OpenError::SchemaVersion { dir, found, .. }
                        if found < SCHEMA_VERSION =>
                    {
                        StateDbError::OldLayout { dir, found }
                    }
                    e => e.into(),
                })?
                .try_into()
                .map_err(|_| StateDbError::corrupt("tables", &[], "table count"))?;
        let dbs = Dbs {
            state,
            trie: TrieDbs::open(&env, dir)?,
        };

        let db = Self {
            env,
            dbs,
            page_bytes,
            options,
            metrics: StateDbMetrics::default(),
            dir: dir.to_path_buf(),
            writer_open: AtomicBool::new(false),
        };
        db.index_header_hashes()?;
        db.refresh_size_metrics();
        if let Ok(view) = db.view() {
            if let Ok(Some((block, _))) = view.last_root() {
                db.metrics
                    .last_root_block
                    .set(i64::try_from(block).unwrap_or(i64::MAX));
            }
        }
        Ok(db)
    }

    /// Fills `HeaderNumbers` from `Headers` when it holds fewer rows (a database written
    /// before the index existed), in one write transaction.
    fn index_header_hashes(&self) -> Result<(), StateDbError> {
        let entries = |txn: &signet_libmdbx::tx::aliases::RwTxUnsync, table: Table| {
            txn.db_stat(&self.dbs.get(table))
                .map(|s| s.entries())
                .map_err(StateDbError::mdbx("read table statistics"))
        };
        let txn = self
            .env
            .begin_rw_unsync()
            .map_err(StateDbError::mdbx("begin a write transaction"))?;
        let headers = entries(&txn, Table::Headers)?;
        if entries(&txn, Table::HeaderNumbers)? >= headers {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut rows = Vec::with_capacity(headers);
        {
            let mut cursor = txn
                .cursor(self.dbs.get(Table::Headers))
                .map_err(StateDbError::mdbx("open a Headers cursor"))?;
            let mut next = cursor
                .first::<Vec<u8>, Vec<u8>>()
                .map_err(StateDbError::read(Table::Headers.name()))?;
            while let Some((key, row)) = next {
                if row.len() < 32 {
                    return Err(StateDbError::corrupt(
                        Table::Headers.name(),
                        &key,
                        "row shorter than a hash",
                    ));
                }
                rows.push((alloy_primitives::B256::from_slice(&row[..32]), key));
                next = cursor
                    .next::<Vec<u8>, Vec<u8>>()
                    .map_err(StateDbError::read(Table::Headers.name()))?;
            }
        }
        for (hash, key) in &rows {
            txn.put(
                self.dbs.get(Table::HeaderNumbers),
                hash,
                key,
                signet_libmdbx::WriteFlags::empty(),
            )
            .map_err(StateDbError::mdbx("write HeaderNumbers"))?;
        }
        txn.commit()
            .map_err(StateDbError::mdbx("commit the header hash index"))?;
        tracing::info!(
            headers = rows.len(),
            ms = started.elapsed().as_millis() as u64,
            "indexed the header hashes of a database written before the index existed"
        );
        Ok(())
    }

    /// The directory the database lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its page size in bytes: the one it was created with, whatever
    /// [`StateDbOptions::page_size`] asked for since.
    pub fn page_size(&self) -> u64 {
        self.page_bytes
    }

    /// The options it was opened with.
    pub fn options(&self) -> &StateDbOptions {
        &self.options
    }

    /// Its metrics (register them with [`StateDbMetrics::register`]).
    pub fn metrics(&self) -> &StateDbMetrics {
        &self.metrics
    }

    pub(crate) fn dbs(&self) -> &Dbs {
        &self.dbs
    }

    /// MDBX's data file.
    pub(crate) fn data_file(&self) -> PathBuf {
        gigas_mdbx::data_file(&self.dir)
    }

    pub(crate) fn env(&self) -> &Environment {
        &self.env
    }

    /// A read view of the last commit: a consistent snapshot for as long as it lives (it
    /// holds an MDBX reader slot, and the pages it sees cannot be reused meanwhile, so keep
    /// views short).
    pub fn view(&self) -> Result<StateView<'_>, StateDbError> {
        let txn = self
            .env
            .begin_ro_unsync()
            .map_err(StateDbError::mdbx("begin a read transaction"))?;
        Ok(StateView::new(self, txn))
    }

    /// The writer. One at a time per database ([`StateDbError::WriterBusy`] otherwise); it
    /// keeps MDBX's write transaction open and must stay on the thread that created it.
    pub fn writer(&self, options: WriterOptions) -> Result<StateWriter<'_>, StateDbError> {
        StateWriter::new(self, self.lock_writer()?, options)
    }

    pub(crate) fn lock_writer(&self) -> Result<WriteLock<'_>, StateDbError> {
        self.writer_open
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| StateDbError::WriterBusy)?;
        Ok(WriteLock(&self.writer_open))
    }

    /// Makes every commit so far durable (`mdbx_env_sync`, forced: data pages, then a steady
    /// meta page). A no-op in effect under [`Durability::Durable`], where each commit already
    /// is. Returns how long it took.
    pub fn sync(&self) -> Result<std::time::Duration, StateDbError> {
        let started = std::time::Instant::now();
        self.env
            .sync(true)
            .map_err(StateDbError::mdbx("sync the database to the disk"))?;
        let took = started.elapsed();
        self.metrics.syncs.inc();
        self.metrics.sync_seconds.observe(took.as_secs_f64());
        Ok(took)
    }

    /// Pages MDBX wrote so far (new and copied-on-write pages, in bytes): what a sync may
    /// have to write back, summed since the environment opened.
    pub(crate) fn page_bytes_written(&self) -> u64 {
        let Ok(info) = self.env.info() else {
            return 0;
        };
        let ops = info.page_ops();
        (ops.newly + ops.cow).saturating_mul(self.page_bytes)
    }

    /// The last committed block (`None` before a genesis).
    pub fn head(&self) -> Result<Option<ChainTip>, StateDbError> {
        self.view()?.tip()
    }

    /// Rows and pages of every table.
    pub fn table_stats(&self) -> Result<Vec<TableStats>, StateDbError> {
        let read = StateDbError::mdbx;
        let own = gigas_mdbx::table_stats::<Table>(&self.env, &self.dbs.state)
            .map_err(read("read table statistics"))?;
        let trie = gigas_mdbx::table_stats::<TrieTable>(&self.env, self.dbs.trie.handles())
            .map_err(read("read the trie tables' statistics"))?;
        Ok(own
            .into_iter()
            .map(|s| s.with_table(AnyTable::State(s.table)))
            .chain(
                trie.into_iter()
                    .map(|s| s.with_table(AnyTable::Trie(s.table))),
            )
            .collect())
    }

    /// Updates the size and page gauges (done after every commit; best effort).
    pub fn refresh_size_metrics(&self) {
        let gauge = |g: &prometheus_client::metrics::gauge::Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        if let Some((used, map)) = gigas_mdbx::used_bytes(&self.env) {
            gauge(&self.metrics.used_bytes, used);
            gauge(&self.metrics.map_bytes, map);
        }
        if let Ok(stats) = self.table_stats() {
            let sum = |f: fn(&TableStats) -> u64| stats.iter().map(f).sum::<u64>();
            gauge(&self.metrics.branch_pages, sum(|s| s.branch_pages));
            gauge(&self.metrics.leaf_pages, sum(|s| s.leaf_pages));
            gauge(&self.metrics.overflow_pages, sum(|s| s.overflow_pages));
        }
    }
}

/// `Meta` encodings shared by the writer and the genesis.
pub(crate) fn write_meta_tip(
    dbs: &Dbs,
    txn: &signet_libmdbx::tx::aliases::RwTxUnsync,
    tip: &ChainTip,
    index_len: u64,
    last_root: Option<(u64, alloy_primitives::B256)>,
    trie_valid: bool,
    lattice: Option<&gigas_primitives::LatticeHash>,
) -> Result<(), StateDbError> {
    use crate::tables::{META_HEAD, META_INDEX_LEN, META_LAST_ROOT, META_LATTICE, META_TRIE};
    let meta = dbs.get(Table::Meta);
    let put = |key: &[u8], value: &[u8]| {
        txn.put(meta, key, value, WriteFlags::empty())
            .map_err(StateDbError::mdbx("write Meta"))
    };
    put(META_HEAD, &codec::encode_tip(tip))?;
    put(META_INDEX_LEN, &index_len.to_be_bytes())?;
    put(META_TRIE, &[u8::from(trie_valid)])?;
    match last_root {
        Some((block, root)) => put(META_LAST_ROOT, &codec::encode_root(block, &root))?,
        None => {
            txn.del(meta, META_LAST_ROOT, None)
                .map_err(StateDbError::mdbx("write Meta"))?;
        }
    }
    // The head and its lattice are written together, so neither can name another block.
    match lattice {
        Some(lattice) => put(META_LATTICE, &lattice.to_bytes())?,
        None => {
            txn.del(meta, META_LATTICE, None)
                .map_err(StateDbError::mdbx("write Meta"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use alloy_consensus::Header;

    use super::*;
    use crate::types::{BlockToApply, GenesisBlock, GenesisEntry};

    /// A small environment: tests write little.
    fn small_options() -> StateDbOptions {
        StateDbOptions {
            max_size_bytes: 1 << 30,
            growth_step_bytes: 16 << 20,
            ..StateDbOptions::default()
        }
    }

    /// Writes an empty genesis (the default header, no state) and returns its hash.
    fn empty_genesis(db: &StateDb) -> alloy_primitives::B256 {
        let genesis = Header::default();
        let hash = genesis.hash_slow();
        db.apply_genesis(
            GenesisBlock {
                header: &genesis,
                hash,
                signature: None,
                commitment: None,
                verify_root: false,
            },
            std::iter::empty::<Result<GenesisEntry, std::io::Error>>(),
            16,
        )
        .unwrap();
        hash
    }

    /// A database keeps the page size it was created with when opened asking for another,
    /// and its state with it; a new one takes the size asked for.
    #[test]
    fn an_existing_database_keeps_its_page_size() {
        let dir = tempfile::tempdir().unwrap();
        let with = |page_size| StateDbOptions {
            page_size,
            ..small_options()
        };
        let db = StateDb::open(dir.path(), with(Some(4096))).unwrap();
        assert_eq!(db.page_size(), 4096);
        let hash = empty_genesis(&db);
        drop(db);
        for asked in [Some(16 << 10), Some(1024), None] {
            let db = StateDb::open(dir.path(), with(asked)).unwrap();
            assert_eq!(db.page_size(), 4096, "asked {asked:?}");
            assert_eq!(db.head().unwrap().map(|tip| tip.hash), Some(hash));
        }
        let fresh = tempfile::tempdir().unwrap();
        let db = StateDb::open(fresh.path(), with(Some(16 << 10))).unwrap();
        assert_eq!(db.page_size(), 16 << 10);
        empty_genesis(&db);
        drop(db);
        let db = StateDb::open(fresh.path(), with(None)).unwrap();
        assert_eq!(db.page_size(), 16 << 10);
    }

    /// The state commitment's sum: a genesis whose sum is not the signed one records no head;
    /// the sum travels with the head through commits, survives a reopen, is not moved by a
    /// discarded group, and a block without one ends it.
    #[test]
    fn the_lattice_is_stored_with_the_head_it_belongs_to() {
        use gigas_primitives::LatticeHash;
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), small_options()).unwrap();
        let genesis = Header::default();
        let hash = genesis.hash_slow();
        let account = || {
            std::iter::once(Ok::<_, std::io::Error>(GenesisEntry::Account {
                address: alloy_primitives::Address::repeat_byte(7),
                nonce: 1,
                balance: alloy_primitives::U256::from(5),
                code: None,
            }))
        };
        let element = LatticeHash::account(
            &alloy_primitives::Address::repeat_byte(7),
            &gigas_primitives::AccountState {
                nonce: 1,
                balance: alloy_primitives::U256::from(5),
                code_hash: alloy_primitives::KECCAK256_EMPTY,
            },
        );
        let block = |lattice: Option<alloy_primitives::B256>| GenesisBlock {
            header: &genesis,
            hash,
            signature: None,
            commitment: lattice.map(|lattice| gigas_statediff::StateCommitment {
                lattice,
                signature: alloy_primitives::Signature::new(
                    alloy_primitives::U256::from(1),
                    alloy_primitives::U256::from(1),
                    false,
                ),
            }),
            verify_root: false,
        };
        let e = db
            .apply_genesis(block(Some(LatticeHash::zero().checksum())), account(), 16)
            .unwrap_err();
        assert!(e.to_string().contains("lattice"), "{e}");
        assert_eq!(
            db.head().unwrap(),
            None,
            "a refused genesis records no head"
        );
        db.apply_genesis(block(Some(element.checksum())), account(), 16)
            .unwrap();
        assert_eq!(db.view().unwrap().lattice().unwrap(), Some(element.clone()));

        // Sums given per block (the writer trusts them: verification is the caller's).
        let sums: Vec<LatticeHash> = (1..=3u64)
            .map(|i| {
                let mut l = element.clone();
                l.add_slot(
                    &alloy_primitives::Address::repeat_byte(7),
                    &alloy_primitives::U256::from(i),
                    &alloy_primitives::U256::from(i),
                );
                l
            })
            .collect();
        let mut parent = hash;
        let mut headers = Vec::new();
        for number in 1..=3u64 {
            let header = Header {
                number,
                parent_hash: parent,
                ..Header::default()
            };
            parent = header.hash_slow();
            headers.push(header);
        }
        let apply = |writer: &mut crate::StateWriter<'_>, i: usize, lattice| {
            writer
                .apply(BlockToApply {
                    header: &headers[i],
                    hash: headers[i].hash_slow(),
                    signature: None,
                    changes: &gigas_primitives::ChangeSet::default(),
                    hashed: None,
                    new_keys: &[],
                    lattice,
                    commitment: None,
                })
                .unwrap();
        };
        {
            let mut writer = db
                .writer(WriterOptions {
                    verify_roots: false,
                    ..WriterOptions::default()
                })
                .unwrap();
            assert_eq!(writer.lattice(), Some(&element));
            apply(&mut writer, 0, Some(&sums[0]));
            apply(&mut writer, 1, Some(&sums[1]));
            assert_eq!(writer.lattice(), Some(&sums[1]));
            writer.commit().unwrap();
            // A group that is never committed moves nothing.
            apply(&mut writer, 2, Some(&sums[2]));
        }
        drop(db);
        let db = StateDb::open(dir.path(), small_options()).unwrap();
        let view = db.view().unwrap();
        assert_eq!(view.tip().unwrap().unwrap().number, 2);
        assert_eq!(view.lattice().unwrap(), Some(sums[1].clone()));
        drop(view);
        let mut writer = db
            .writer(WriterOptions {
                verify_roots: false,
                ..WriterOptions::default()
            })
            .unwrap();
        apply(&mut writer, 2, None);
        writer.commit().unwrap();
        drop(writer);
        assert_eq!(db.view().unwrap().lattice().unwrap(), None);
    }

    /// A database written before `HeaderNumbers` existed holds headers and no hash rows:
    /// opening it fills the index, so every block is found by hash again.
    #[test]
    fn opening_fills_the_hash_index_of_an_older_database() {
        let dir = tempfile::tempdir().unwrap();
        let options = small_options();
        let mut hashes = Vec::new();
        {
            let db = StateDb::open(dir.path(), options.clone()).unwrap();
            let mut parent = empty_genesis(&db);
            hashes.push(parent);
            let mut writer = db
                .writer(WriterOptions {
                    verify_roots: false,
                    ..WriterOptions::default()
                })
                .unwrap();
            for number in 1..=20 {
                let header = Header {
                    number,
                    parent_hash: parent,
                    ..Header::default()
                };
                parent = header.hash_slow();
                writer
                    .apply(BlockToApply {
                        header: &header,
                        hash: parent,
                        signature: None,
                        changes: &gigas_primitives::ChangeSet::default(),
                        hashed: None,
                        new_keys: &[],
                        lattice: None,
                        commitment: None,
                    })
                    .unwrap();
                hashes.push(parent);
            }
            writer.commit().unwrap();
            drop(writer);
            // What a database of the previous layout looks like.
            let txn = db.env.begin_rw_unsync().unwrap();
            txn.clear_db(db.dbs.get(Table::HeaderNumbers)).unwrap();
            txn.commit().unwrap();
            assert_eq!(db.view().unwrap().number_by_hash(&hashes[7]).unwrap(), None);
        }
        let db = StateDb::open(dir.path(), options).unwrap();
        let view = db.view().unwrap();
        for (number, hash) in hashes.iter().enumerate() {
            assert_eq!(view.number_by_hash(hash).unwrap(), Some(number as u64));
        }
        assert_eq!(
            view.number_by_hash(&alloy_primitives::B256::ZERO).unwrap(),
            None
        );
    }

    /// The open group's code, key-index and header rows are held in memory until the commit
    /// (or an idle write): the writer reads them, a view does not, a key indexed twice is
    /// refused from either place, and after the commit a view finds all of them.
    #[test]
    fn the_groups_code_index_and_header_rows_are_read_before_and_after_their_commit() {
        use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
        use gigas_statediff::StateKey;

        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(dir.path(), small_options()).unwrap();
        let genesis_hash = empty_genesis(&db);
        let mut parent = genesis_hash;
        let base = db.view().unwrap().index_len().unwrap();
        let mut writer = db
            .writer(WriterOptions {
                verify_roots: false,
                ..WriterOptions::default()
            })
            .unwrap();
        let mut blocks = Vec::new();
        let mut keys = Vec::new();
        let mut codes = Vec::new();
        for number in 1..=6u64 {
            let header = Header {
                number,
                parent_hash: parent,
                ..Header::default()
            };
            parent = header.hash_slow();
            let code = Bytes::from(vec![0x60, number as u8, 0x00]);
            let mut changes = gigas_primitives::ChangeSetBuilder::new();
            changes.bytecode(code.clone());
            let new_keys = [
                StateKey::Account(Address::with_last_byte(number as u8)),
                StateKey::Slot(Address::with_last_byte(number as u8), U256::from(number)),
            ];
            writer
                .apply(BlockToApply {
                    header: &header,
                    hash: parent,
                    signature: None,
                    changes: &changes.build(),
                    hashed: None,
                    new_keys: &new_keys,
                    lattice: None,
                    commitment: None,
                })
                .unwrap();
            keys.extend(new_keys);
            codes.push((keccak256(&code), code));
            blocks.push((number, parent));
            if number == 3 {
                // The first half goes into the transaction, the rest stays in the rows.
                writer.flush_idle().unwrap();
            }
        }
        let check = |code: &dyn Fn(&B256) -> Option<Bytes>,
                     hash_of: &dyn Fn(u64) -> Option<B256>,
                     indexed: &dyn Fn(&StateKey) -> Option<u64>,
                     key_of: &dyn Fn(u64) -> Option<StateKey>| {
            for (hash, bytes) in &codes {
                assert_eq!(code(hash).as_ref(), Some(bytes));
            }
            for (number, hash) in &blocks {
                assert_eq!(hash_of(*number), Some(*hash));
            }
            for (i, key) in keys.iter().enumerate() {
                assert_eq!(indexed(key), Some(base + i as u64), "{key:?}");
                assert_eq!(key_of(base + i as u64), Some(*key));
            }
            assert_eq!(key_of(base + keys.len() as u64), None);
        };
        check(
            &|h| writer.code(h).unwrap(),
            &|n| writer.header(n).unwrap().map(|h| h.hash),
            &|k| writer.indexed(k).unwrap(),
            &|i| writer.key_of(i).unwrap(),
        );
        assert_eq!(writer.block_hash(5).unwrap(), Some(blocks[4].1));
        {
            let view = db.view().unwrap();
            assert_eq!(view.code(&codes[5].0).unwrap(), None);
            assert_eq!(view.header(5).unwrap(), None);
            assert_eq!(view.indexed(&keys[11]).unwrap(), None);
        }
        // Indexed again, in the rows or in the transaction: refused, and nothing changes.
        for (again, at) in [(keys[10], 10), (keys[1], 1)] {
            let header = Header {
                number: 7,
                parent_hash: parent,
                ..Header::default()
            };
            let err = writer
                .apply(BlockToApply {
                    header: &header,
                    hash: header.hash_slow(),
                    signature: None,
                    changes: &gigas_primitives::ChangeSet::default(),
                    hashed: None,
                    new_keys: &[again],
                    lattice: None,
                    commitment: None,
                })
                .unwrap_err();
            assert!(
                matches!(err, StateDbError::KeyAlreadyIndexed { index, .. } if index == base + at),
                "{err}"
            );
            // A refused block discards the open group; apply it again.
            assert_eq!(writer.tip().number, 0);
            let mut replay_parent = genesis_hash;
            for (i, (number, hash)) in blocks.iter().enumerate() {
                let header = Header {
                    number: *number,
                    parent_hash: replay_parent,
                    ..Header::default()
                };
                let mut changes = gigas_primitives::ChangeSetBuilder::new();
                changes.bytecode(codes[i].1.clone());
                writer
                    .apply(BlockToApply {
                        header: &header,
                        hash: *hash,
                        signature: None,
                        changes: &changes.build(),
                        hashed: None,
                        new_keys: &keys[2 * i..2 * i + 2],
                        lattice: None,
                        commitment: None,
                    })
                    .unwrap();
                replay_parent = *hash;
                if *number == 3 {
                    writer.flush_idle().unwrap();
                }
            }
        }
        writer.commit().unwrap();
        let view = db.view().unwrap();
        check(
            &|h| view.code(h).unwrap(),
            &|n| view.header(n).unwrap().map(|h| h.hash),
            &|k| view.indexed(k).unwrap(),
            &|i| view.key_of(i).unwrap(),
        );
        for (number, hash) in &blocks {
            assert_eq!(view.number_by_hash(hash).unwrap(), Some(*number));
            assert_eq!(view.block_hash(*number).unwrap(), Some(*hash));
        }
        assert_eq!(view.index_len().unwrap(), base + keys.len() as u64);
    }
}
