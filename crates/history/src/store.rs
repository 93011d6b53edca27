//! [`Index`]: the MDBX environment, the table handles, the write path and the point reads.
//! The block log is the durable record; this is what the indexer builds from it, in batches,
//! off the path that makes a block durable.

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use signet_libmdbx::tx::aliases::RoTxUnsync;
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Database, Environment, SyncMode, TransactionKind};

use crate::codec;
use crate::error::HistoryError;
use crate::metrics::{HistoryMetrics, IndexPhase};
use crate::tables::{Table, META_SCHEMA_VERSION, META_STATE_PRUNED_BELOW, SCHEMA_VERSION};
use crate::types::HistoryOptions;

mod read;
mod write;

pub(crate) use write::check;

/// The history's MDBX index. `Send + Sync`: reads may run on any thread while the indexer
/// commits (each read call takes its own MDBX read transaction, a consistent snapshot).
pub(crate) struct Index {
    env: Environment,
    dbs: [Database; Table::COUNT],
    options: HistoryOptions,
    metrics: HistoryMetrics,
    dir: PathBuf,
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// What the index knows of a state key after a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IndexedChange {
    /// The block is older than the state-history window.
    Pruned {
        /// The oldest block whose state can be answered.
        oldest: u64,
    },
    /// `block` is the first indexed block after the asked one that changed the key; `old` is
    /// the key's value before it.
    Changed { block: u64, old: Option<Vec<u8>> },
    /// No indexed block after the asked one changed the key.
    None,
}

/// Entries and size of one table.
pub type TableStats = gigas_mdbx::TableStats<Table>;

impl Index {
    /// Opens the history in `dir` (created if missing), creating the tables that are missing.
    pub(crate) fn open(dir: &Path, options: HistoryOptions) -> Result<Self, HistoryError> {
        let env = gigas_mdbx::open_env(
            dir,
            &gigas_mdbx::EnvOptions {
                max_size_bytes: options.max_size_bytes,
                growth_step_bytes: options.growth_step_bytes,
                page_size: None,
                max_readers: options.max_readers,
                // The block log is the durable record; the index is made durable on the
                // indexer's schedule (`HistoryOptions::index_sync_period`).
                sync_mode: if options.index_sync_period.is_zero() {
                    SyncMode::Durable
                } else {
                    SyncMode::SafeNoSync
                },
                readahead: false,
                write_map: options.write_map,
                autosync_period: None,
                max_dirty_pages: None,
            },
        )?;
        let dbs: [Database; Table::COUNT] =
            gigas_mdbx::open_tables(&env, dir, Table::Meta, META_SCHEMA_VERSION, SCHEMA_VERSION)?
                .try_into()
                .map_err(|_| HistoryError::corrupt("tables", &[], "table count"))?;

        let index = Self {
            env,
            dbs,
            options,
            metrics: HistoryMetrics::default(),
            dir: dir.to_path_buf(),
        };
        index.update_used_bytes();
        Ok(index)
    }

    /// Its metrics (register them with [`HistoryMetrics::register`]).
    pub(crate) fn metrics(&self) -> &HistoryMetrics {
        &self.metrics
    }

    fn db(&self, table: Table) -> Database {
        self.dbs[table.slot()]
    }

    fn read_txn(&self) -> Result<RoTxUnsync, HistoryError> {
        self.env
            .begin_ro_unsync()
            .map_err(HistoryError::mdbx("begin a read transaction"))
    }

    /// The number of the last committed block, `None` when empty.
    pub(crate) fn head(&self) -> Result<Option<u64>, HistoryError> {
        let txn = self.read_txn()?;
        self.head_in(&txn)
    }

    fn head_in<K: TransactionKind>(&self, txn: &Tx<K>) -> Result<Option<u64>, HistoryError> {
        let mut cursor = txn
            .cursor(self.db(Table::Headers))
            .map_err(HistoryError::mdbx("open a Headers cursor"))?;
        let last: Option<(Cow<'_, [u8]>, ())> =
            cursor.last().map_err(HistoryError::read("read the head"))?;
        last.map(|(key, ())| codec::decode_u64(Table::Headers, &key, &key))
            .transpose()
    }

    /// The first block whose ChangeSet and state history rows are still kept (0 when nothing
    /// was pruned).
    fn pruned_below_in<K: TransactionKind>(&self, txn: &Tx<K>) -> Result<u64, HistoryError> {
        let value: Option<Cow<'_, [u8]>> = txn
            .get(self.db(Table::Meta).dbi(), META_STATE_PRUNED_BELOW)
            .map_err(HistoryError::read("read the pruning watermark"))?;
        value.map_or(Ok(0), |v| {
            codec::decode_u64(Table::Meta, META_STATE_PRUNED_BELOW, &v)
        })
    }

    /// The oldest block whose state `value_at` answers: `head - state_history_blocks` once
    /// the chain is longer than the window, else 0.
    pub(crate) fn oldest_state_block(&self) -> Result<u64, HistoryError> {
        let txn = self.read_txn()?;
        Ok(self.pruned_below_in(&txn)?.saturating_sub(1))
    }

    /// Makes every batch committed so far durable (`mdbx_env_sync`, forced: data pages, then
    /// a steady meta page). In effect a no-op when each commit is durable already.
    pub(crate) fn sync(&self) -> Result<(), HistoryError> {
        let started = Instant::now();
        self.env
            .sync(true)
            .map_err(HistoryError::mdbx("sync the index to the disk"))?;
        self.metrics
            .index_phase(IndexPhase::Sync, started.elapsed().as_secs_f64());
        Ok(())
    }

    fn update_used_bytes(&self) {
        // Best effort: a gauge is not worth failing a commit over.
        if let Some((bytes, _)) = gigas_mdbx::used_bytes(&self.env) {
            self.metrics
                .used_bytes
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// Rows and bytes of every table.
    pub(crate) fn table_stats(&self) -> Result<Vec<TableStats>, HistoryError> {
        gigas_mdbx::table_stats(&self.env, &self.dbs)
            .map_err(HistoryError::mdbx("read table statistics"))
    }
}
