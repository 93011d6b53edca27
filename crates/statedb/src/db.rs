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
use crate::types::{Durability, StateDbOptions, TableStats, WriterOptions};
use crate::view::StateView;
use crate::writer::StateWriter;

/// The full node's state in MDBX. `Send + Sync`: read views may be taken on any thread while
/// one [`StateWriter`] applies blocks (each view is an MVCC snapshot of the last commit).
pub struct StateDb {
    env: Environment,
    dbs: Dbs,
    options: StateDbOptions,
    metrics: StateDbMetrics,
    dir: PathBuf,
    writer_open: AtomicBool,
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
            Durability::SafeNoSync => SyncMode::SafeNoSync,
        };
        let env = gigas_mdbx::open_env(
            dir,
            &gigas_mdbx::EnvOptions {
                max_size_bytes: options.max_size_bytes,
                growth_step_bytes: options.growth_step_bytes,
                page_size: options.page_size,
                max_readers: options.max_readers,
                sync_mode,
                readahead: options.readahead,
                write_map: options.write_map,
            },
        )?;
        let dbs = Dbs(gigas_mdbx::open_tables(
            &env,
            dir,
            Table::Meta,
            META_SCHEMA_VERSION,
            SCHEMA_VERSION,
        )?
        .try_into()
        .map_err(|_| StateDbError::corrupt("tables", &[], "table count"))?);

        let db = Self {
            env,
            dbs,
            options,
            metrics: StateDbMetrics::default(),
            dir: dir.to_path_buf(),
            writer_open: AtomicBool::new(false),
        };
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

    /// The directory the database lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
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

    /// The last committed block (`None` before a genesis).
    pub fn head(&self) -> Result<Option<ChainTip>, StateDbError> {
        self.view()?.tip()
    }

    /// Rows and pages of every table.
    pub fn table_stats(&self) -> Result<Vec<TableStats>, StateDbError> {
        gigas_mdbx::table_stats(&self.env, &self.dbs.0)
            .map_err(StateDbError::mdbx("read table statistics"))
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
) -> Result<(), StateDbError> {
    use crate::tables::{META_HEAD, META_INDEX_LEN, META_LAST_ROOT, META_TRIE};
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
    Ok(())
}
