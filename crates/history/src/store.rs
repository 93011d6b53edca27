//! [`Index`]: the MDBX environment, the table handles, the write path and the point reads.
//! The block log is the durable record; this is what the indexer builds from it, in batches,
//! off the path that makes a block durable.

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256};
use signet_libmdbx::tx::aliases::{RoTxUnsync, RwTxUnsync};
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Database, Environment, MdbxError, SyncMode, TransactionKind, WriteFlags};
use tracing::debug;

use crate::codec::{self, block_key, tx_key};
use crate::error::{hex_string, HistoryError};
use crate::metrics::{HistoryMetrics, IndexPhase};
use crate::tables::{Table, META_SCHEMA_VERSION, META_STATE_PRUNED_BELOW, SCHEMA_VERSION};
use crate::types::{BlockRecord, HistoryOptions, IndexedLog, LogQuery, SealedHeader, TxLocation};

/// A row read through a cursor, borrowed from the map where MDBX allows.
type Row<'tx> = Option<(Cow<'tx, [u8]>, Cow<'tx, [u8]>)>;
/// A state history entry ready to write: `len ‖ key` and the old value.
type StateEntry<'a> = (Vec<u8>, &'a Option<Vec<u8>>);

/// Log positions the index covers (the EVM's LOG0..LOG4).
const INDEXED_TOPICS: usize = 4;

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

/// A batch's rows of the random-keyed tables, written after its other rows in key order.
#[derive(Default)]
struct Deferred {
    /// Transaction hash and `block ‖ index`.
    locations: Vec<(B256, [u8; 12])>,
    /// StateHistory key and value.
    state: Vec<(Vec<u8>, Vec<u8>)>,
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

    /// Writes consecutive blocks in one write transaction (a group commit): all or none of
    /// them are in the history afterwards, a page that several of its blocks change is written
    /// once, and the commit is durable or not as the environment's sync mode says. Each block
    /// is checked and pruned as by [`Self::commit_block`].
    pub(crate) fn commit_blocks(&self, records: &[BlockRecord<'_>]) -> Result<(), HistoryError> {
        let mut sorted = Vec::with_capacity(records.len());
        for record in records {
            // Checked and sorted before the write lock is taken: rows go in in key order,
            // which keeps MDBX's cursor on neighbouring pages.
            sorted.push(check(record)?);
        }

        let txn = self
            .env
            .begin_rw_unsync()
            .map_err(HistoryError::mdbx("begin the block's write transaction"))?;
        let mut deferred = Deferred::default();
        for (record, state) in records.iter().zip(&sorted) {
            self.write_block(&txn, record, state, &mut deferred)?;
        }
        self.write_deferred(&txn, deferred)?;
        let pruned = match records.last() {
            Some(last) => {
                let start = Instant::now();
                let limit = self
                    .options
                    .prune_blocks_per_commit
                    .max(1)
                    .saturating_mul(records.len() as u64);
                let pruned = self.prune(&txn, last.header.number, limit)?;
                self.metrics
                    .index_phase(IndexPhase::Prune, start.elapsed().as_secs_f64());
                pruned
            }
            None => 0,
        };
        let written = Instant::now();
        txn.commit()
            .map_err(HistoryError::mdbx("commit the block"))?;
        self.metrics
            .index_phase(IndexPhase::Commit, written.elapsed().as_secs_f64());

        self.metrics.blocks_pruned.inc_by(pruned);
        self.update_used_bytes();
        Ok(())
    }

    /// Writes one block's rows that go in block order in `txn`, and adds its rows of the
    /// random-keyed tables to `deferred`.
    fn write_block(
        &self,
        txn: &RwTxUnsync,
        record: &BlockRecord<'_>,
        state: &[StateEntry<'_>],
        deferred: &mut Deferred,
    ) -> Result<(), HistoryError> {
        let start = Instant::now();
        let number = record.header.number;
        let expected = self.head_in(txn)?.map_or(0, |head| head + 1);
        if number != expected {
            return Err(HistoryError::NotNext {
                expected,
                got: number,
            });
        }
        let mut buf = Vec::with_capacity(4096);

        codec::encode_header_row(record.header, &record.hash, &record.signature, &mut buf);
        txn.append(self.db(Table::Headers), block_key(number), &buf)
            .map_err(HistoryError::mdbx("write Headers"))?;
        match txn.put(
            self.db(Table::HeaderNumbers),
            record.hash,
            block_key(number),
            WriteFlags::NO_OVERWRITE,
        ) {
            Ok(()) => {}
            Err(MdbxError::KeyExist) => {
                let existing: Option<Cow<'_, [u8]>> = txn
                    .get(self.db(Table::HeaderNumbers).dbi(), record.hash.as_slice())
                    .map_err(HistoryError::read("read HeaderNumbers"))?;
                let existing = existing
                    .map(|v| codec::decode_u64(Table::HeaderNumbers, record.hash.as_slice(), &v))
                    .transpose()?
                    .unwrap_or_default();
                return Err(HistoryError::DuplicateBlockHash {
                    hash: record.hash,
                    existing,
                });
            }
            Err(e) => return Err(HistoryError::mdbx("write HeaderNumbers")(e)),
        }

        self.write_transactions(txn, number, record.transactions, &mut buf, deferred)?;
        let txs_done = Instant::now();
        self.metrics
            .index_phase(IndexPhase::Transactions, (txs_done - start).as_secs_f64());
        self.write_receipts(txn, number, record.receipts, &mut buf)?;
        let block_done = Instant::now();
        self.metrics
            .index_phase(IndexPhase::Receipts, (block_done - txs_done).as_secs_f64());

        txn.append(
            self.db(Table::ChangeSets),
            block_key(number),
            record.changeset,
        )
        .map_err(HistoryError::mdbx("write ChangeSets"))?;
        for (prefix, old) in state {
            let mut key = Vec::with_capacity(prefix.len() + 8);
            codec::state_history_key(prefix, number, &mut key);
            let mut value = Vec::new();
            codec::encode_state_value(old.as_deref(), &mut value);
            deferred.state.push((key, value));
            txn.put(
                self.db(Table::StateHistoryKeys),
                block_key(number),
                prefix,
                WriteFlags::empty(),
            )
            .map_err(HistoryError::mdbx("write StateHistoryKeys"))?;
        }

        self.metrics
            .index_phase(IndexPhase::StateHistory, block_done.elapsed().as_secs_f64());
        Ok(())
    }

    /// Writes a batch's rows of the random-keyed tables in key order (as reth's ETL collector
    /// does): each page is then dirtied by a run of neighbouring inserts, and the B-tree path
    /// to it stays in the CPU's caches. Refuses a transaction hash the index already holds.
    fn write_deferred(&self, txn: &RwTxUnsync, deferred: Deferred) -> Result<(), HistoryError> {
        let Deferred {
            mut locations,
            mut state,
        } = deferred;
        let start = Instant::now();
        locations.sort_unstable_by_key(|(hash, _)| *hash);
        for (hash, key) in &locations {
            match txn.put(
                self.db(Table::TransactionLocations),
                hash,
                key,
                WriteFlags::NO_OVERWRITE,
            ) {
                Ok(()) => {}
                Err(MdbxError::KeyExist) => {
                    let existing: Option<Cow<'_, [u8]>> = txn
                        .get(self.db(Table::TransactionLocations).dbi(), hash.as_slice())
                        .map_err(HistoryError::read("read TransactionLocations"))?;
                    let existing = match existing {
                        Some(v) => codec::decode_location(
                            Table::TransactionLocations,
                            hash.as_slice(),
                            &v,
                        )?,
                        None => codec::decode_location(
                            Table::TransactionLocations,
                            hash.as_slice(),
                            key,
                        )?,
                    };
                    return Err(HistoryError::DuplicateTransaction {
                        hash: *hash,
                        block: existing.block,
                        index: existing.index,
                    });
                }
                Err(e) => return Err(HistoryError::mdbx("write TransactionLocations")(e)),
            }
        }
        let located = Instant::now();
        self.metrics
            .index_phase(IndexPhase::Transactions, (located - start).as_secs_f64());
        state.sort_unstable();
        for (key, value) in &state {
            txn.put(
                self.db(Table::StateHistory),
                key,
                value,
                WriteFlags::empty(),
            )
            .map_err(HistoryError::mdbx("write StateHistory"))?;
        }
        self.metrics
            .index_phase(IndexPhase::StateHistory, located.elapsed().as_secs_f64());
        Ok(())
    }

    fn write_transactions(
        &self,
        txn: &RwTxUnsync,
        number: u64,
        transactions: &[Recovered<TxEnvelope>],
        buf: &mut Vec<u8>,
        deferred: &mut Deferred,
    ) -> Result<(), HistoryError> {
        for (index, tx) in (0u32..).zip(transactions) {
            codec::encode_tx_row(tx, buf);
            let key = tx_key(number, index);
            txn.append(self.db(Table::Transactions), key, &*buf)
                .map_err(HistoryError::mdbx("write Transactions"))?;
            deferred.locations.push((*tx.tx_hash(), key));
        }
        Ok(())
    }

    fn write_receipts(
        &self,
        txn: &RwTxUnsync,
        number: u64,
        receipts: &[ReceiptEnvelope],
        buf: &mut Vec<u8>,
    ) -> Result<(), HistoryError> {
        let mut addresses: BTreeSet<Address> = BTreeSet::new();
        let mut topics: BTreeSet<[u8; 33]> = BTreeSet::new();
        let mut logs: u64 = 0;
        for (index, receipt) in (0u32..).zip(receipts) {
            buf.clear();
            receipt.encode_2718(buf);
            txn.append(self.db(Table::Receipts), tx_key(number, index), &*buf)
                .map_err(HistoryError::mdbx("write Receipts"))?;
            for log in receipt.logs() {
                logs += 1;
                addresses.insert(log.address);
                for (position, topic) in (0u8..).zip(log.topics().iter().take(INDEXED_TOPICS)) {
                    topics.insert(codec::topic_key(position, topic));
                }
            }
        }
        if logs == 0 {
            return Ok(());
        }
        let count = u32::try_from(logs).unwrap_or(u32::MAX);
        txn.append(
            self.db(Table::LogBlocks),
            block_key(number),
            count.to_be_bytes(),
        )
        .map_err(HistoryError::mdbx("write LogBlocks"))?;
        let block = block_key(number);
        for address in &addresses {
            txn.put(
                self.db(Table::LogAddresses),
                address,
                block,
                WriteFlags::empty(),
            )
            .map_err(HistoryError::mdbx("write LogAddresses"))?;
        }
        for topic in &topics {
            txn.put(self.db(Table::LogTopics), topic, block, WriteFlags::empty())
                .map_err(HistoryError::mdbx("write LogTopics"))?;
        }
        Ok(())
    }

    /// Deletes the ChangeSets and state history of the blocks that left the window (at most
    /// `limit` of them) and moves the watermark. Returns the blocks pruned.
    fn prune(&self, txn: &RwTxUnsync, head: u64, limit: u64) -> Result<u64, HistoryError> {
        let window = self.options.state_history_blocks.max(1);
        let target = (head + 1).saturating_sub(window);
        let pruned_below = self.pruned_below_in(txn)?;
        if target <= pruned_below {
            return Ok(0);
        }
        let end = target.min(pruned_below.saturating_add(limit.max(1)));
        let mut key_buf = Vec::with_capacity(64);
        for block in pruned_below..end {
            txn.del(self.db(Table::ChangeSets), block_key(block), None)
                .map_err(HistoryError::mdbx("prune ChangeSets"))?;
            let prefixes = self.state_keys_of(txn, block)?;
            for prefix in &prefixes {
                codec::state_history_key(prefix, block, &mut key_buf);
                txn.del(self.db(Table::StateHistory), &key_buf, None)
                    .map_err(HistoryError::mdbx("prune StateHistory"))?;
            }
            txn.del(self.db(Table::StateHistoryKeys), block_key(block), None)
                .map_err(HistoryError::mdbx("prune StateHistoryKeys"))?;
        }
        txn.put(
            self.db(Table::Meta),
            META_STATE_PRUNED_BELOW,
            end.to_be_bytes(),
            WriteFlags::empty(),
        )
        .map_err(HistoryError::mdbx("write the pruning watermark"))?;
        debug!(from = pruned_below, to = end, "pruned state history");
        Ok(end - pruned_below)
    }

    /// The `len ‖ key` prefixes of the state keys `block` changed.
    fn state_keys_of(&self, txn: &RwTxUnsync, block: u64) -> Result<Vec<Vec<u8>>, HistoryError> {
        let mut cursor = txn
            .cursor(self.db(Table::StateHistoryKeys))
            .map_err(HistoryError::mdbx("open a StateHistoryKeys cursor"))?;
        let mut prefixes = Vec::new();
        let first: Option<Cow<'_, [u8]>> = cursor
            .set(&block_key(block))
            .map_err(HistoryError::read("read StateHistoryKeys"))?;
        let Some(first) = first else {
            return Ok(prefixes);
        };
        prefixes.push(first.into_owned());
        loop {
            let next: Option<((), Cow<'_, [u8]>)> = cursor
                .next_dup()
                .map_err(HistoryError::read("read StateHistoryKeys"))?;
            match next {
                Some(((), prefix)) => prefixes.push(prefix.into_owned()),
                None => break,
            }
        }
        Ok(prefixes)
    }

    fn update_used_bytes(&self) {
        // Best effort: a gauge is not worth failing a commit over.
        if let Some((bytes, _)) = gigas_mdbx::used_bytes(&self.env) {
            self.metrics
                .used_bytes
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }

    /// The sealed header of block `number`.
    pub(crate) fn sealed_header(&self, number: u64) -> Result<Option<SealedHeader>, HistoryError> {
        let txn = self.read_txn()?;
        let key = block_key(number);
        let row: Option<Cow<'_, [u8]>> = txn
            .get(self.db(Table::Headers).dbi(), &key)
            .map_err(HistoryError::read("read Headers"))?;
        row.map(|row| codec::decode_header_row(&key, &row))
            .transpose()
    }

    /// The number of the block with hash `hash`.
    pub(crate) fn number_by_hash(&self, hash: B256) -> Result<Option<u64>, HistoryError> {
        let txn = self.read_txn()?;
        let row: Option<Cow<'_, [u8]>> = txn
            .get(self.db(Table::HeaderNumbers).dbi(), hash.as_slice())
            .map_err(HistoryError::read("read HeaderNumbers"))?;
        row.map(|row| codec::decode_u64(Table::HeaderNumbers, hash.as_slice(), &row))
            .transpose()
    }

    fn has_block<K: TransactionKind>(
        &self,
        txn: &Tx<K>,
        number: u64,
    ) -> Result<bool, HistoryError> {
        let row: Option<()> = txn
            .get(self.db(Table::Headers).dbi(), &block_key(number))
            .map_err(HistoryError::read("read Headers"))?;
        Ok(row.is_some())
    }

    /// Calls `f(index, key, row)` for each row of `table` (keyed by block ‖ index) of block
    /// `number`, in index order.
    fn for_each_block_row<K: TransactionKind>(
        &self,
        txn: &Tx<K>,
        table: Table,
        number: u64,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), HistoryError>,
    ) -> Result<(), HistoryError> {
        let mut cursor = txn
            .cursor(self.db(table))
            .map_err(HistoryError::mdbx("open a cursor"))?;
        let prefix = block_key(number);
        let mut row: Row<'_> = cursor
            .set_range(&tx_key(number, 0))
            .map_err(HistoryError::read("seek a block's rows"))?;
        while let Some((key, value)) = row {
            if !key.starts_with(&prefix) {
                break;
            }
            f(&key, &value)?;
            row = cursor
                .next()
                .map_err(HistoryError::read("read a block's rows"))?;
        }
        Ok(())
    }

    /// The transactions of block `number` with their senders; `None` when there is no such
    /// block.
    pub(crate) fn transactions(
        &self,
        number: u64,
    ) -> Result<Option<Vec<Recovered<TxEnvelope>>>, HistoryError> {
        let txn = self.read_txn()?;
        if !self.has_block(&txn, number)? {
            return Ok(None);
        }
        let mut out = Vec::new();
        self.for_each_block_row(&txn, Table::Transactions, number, |key, row| {
            out.push(codec::decode_tx_row(key, row)?);
            Ok(())
        })?;
        Ok(Some(out))
    }

    /// The receipts of block `number`; `None` when there is no such block.
    pub(crate) fn receipts(
        &self,
        number: u64,
    ) -> Result<Option<Vec<ReceiptEnvelope>>, HistoryError> {
        let txn = self.read_txn()?;
        if !self.has_block(&txn, number)? {
            return Ok(None);
        }
        Ok(Some(self.block_receipts(&txn, number)?))
    }

    fn block_receipts<K: TransactionKind>(
        &self,
        txn: &Tx<K>,
        number: u64,
    ) -> Result<Vec<ReceiptEnvelope>, HistoryError> {
        self.metrics.receipt_blocks_read.inc();
        let mut out = Vec::new();
        self.for_each_block_row(txn, Table::Receipts, number, |key, row| {
            out.push(codec::decode_receipt_row(key, row)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Where the transaction with hash `hash` is.
    pub(crate) fn transaction_location(
        &self,
        hash: B256,
    ) -> Result<Option<TxLocation>, HistoryError> {
        let txn = self.read_txn()?;
        self.location_in(&txn, hash)
    }

    fn location_in<K: TransactionKind>(
        &self,
        txn: &Tx<K>,
        hash: B256,
    ) -> Result<Option<TxLocation>, HistoryError> {
        let row: Option<Cow<'_, [u8]>> = txn
            .get(self.db(Table::TransactionLocations).dbi(), hash.as_slice())
            .map_err(HistoryError::read("read TransactionLocations"))?;
        row.map(|row| codec::decode_location(Table::TransactionLocations, hash.as_slice(), &row))
            .transpose()
    }

    /// The transaction with hash `hash`, its sender and where it is: two point reads.
    pub(crate) fn transaction(
        &self,
        hash: B256,
    ) -> Result<Option<(TxLocation, Recovered<TxEnvelope>)>, HistoryError> {
        let txn = self.read_txn()?;
        let Some(location) = self.location_in(&txn, hash)? else {
            return Ok(None);
        };
        let key = tx_key(location.block, location.index);
        let row: Option<Cow<'_, [u8]>> = txn
            .get(self.db(Table::Transactions).dbi(), &key)
            .map_err(HistoryError::read("read Transactions"))?;
        let row = row.ok_or_else(|| {
            HistoryError::corrupt(
                Table::TransactionLocations.name(),
                hash.as_slice(),
                format!(
                    "points at block {} index {}, which has no transaction",
                    location.block, location.index
                ),
            )
        })?;
        Ok(Some((location, codec::decode_tx_row(&key, &row)?)))
    }

    /// Refuses `records` if the index already holds one of their block hashes or transaction
    /// hashes (what [`Self::commit_blocks`] would refuse), in one read transaction.
    pub(crate) fn check_unknown(&self, records: &[BlockRecord<'_>]) -> Result<(), HistoryError> {
        let txn = self.read_txn()?;
        for record in records {
            let row: Option<Cow<'_, [u8]>> = txn
                .get(self.db(Table::HeaderNumbers).dbi(), record.hash.as_slice())
                .map_err(HistoryError::read("read HeaderNumbers"))?;
            if let Some(row) = row {
                return Err(HistoryError::DuplicateBlockHash {
                    hash: record.hash,
                    existing: codec::decode_u64(
                        Table::HeaderNumbers,
                        record.hash.as_slice(),
                        &row,
                    )?,
                });
            }
            for tx in record.transactions {
                let hash = *tx.tx_hash();
                if let Some(existing) = self.location_in(&txn, hash)? {
                    return Err(HistoryError::DuplicateTransaction {
                        hash,
                        block: existing.block,
                        index: existing.index,
                    });
                }
            }
        }
        Ok(())
    }

    /// The encoded ChangeSet of block `number`, while it is in the retention window.
    pub(crate) fn changeset(&self, number: u64) -> Result<Option<Vec<u8>>, HistoryError> {
        let txn = self.read_txn()?;
        txn.get(self.db(Table::ChangeSets).dbi(), &block_key(number))
            .map_err(HistoryError::read("read ChangeSets"))
    }

    /// The first indexed block after `block` that changed state key `key`, with the value the
    /// key had before it: one seek to the first row of `key` from a block after `block`.
    pub(crate) fn first_change_after(
        &self,
        key: &[u8],
        block: u64,
    ) -> Result<IndexedChange, HistoryError> {
        let txn = self.read_txn()?;
        let oldest = self.pruned_below_in(&txn)?.saturating_sub(1);
        if block < oldest {
            return Ok(IndexedChange::Pruned { oldest });
        }
        let Some(after) = block.checked_add(1) else {
            return Ok(IndexedChange::None);
        };
        // A key too long to be stored was never changed by a committed block.
        let Ok(prefix) = codec::state_prefix(block, key) else {
            return Ok(IndexedChange::None);
        };
        let mut seek = Vec::with_capacity(prefix.len() + 8);
        codec::state_history_key(&prefix, after, &mut seek);
        let mut cursor = txn
            .cursor(self.db(Table::StateHistory))
            .map_err(HistoryError::mdbx("open a StateHistory cursor"))?;
        let row: Row<'_> = cursor
            .set_range(&seek)
            .map_err(HistoryError::read("seek StateHistory"))?;
        match row {
            Some((found, value)) if found.len() == seek.len() && found.starts_with(&prefix) => {
                let changed_in =
                    codec::decode_u64(Table::StateHistory, &found, &found[prefix.len()..])?;
                Ok(IndexedChange::Changed {
                    block: changed_in,
                    old: codec::decode_state_value(&found, &value)?,
                })
            }
            _ => Ok(IndexedChange::None),
        }
    }

    /// [`Self::logs`], stopping with [`HistoryError::LogScanTimedOut`] once `deadline` has
    /// passed (checked every few dozen candidate blocks).
    pub(crate) fn logs_until(
        &self,
        query: &LogQuery,
        limit: usize,
        deadline: Option<std::time::Instant>,
    ) -> Result<Vec<IndexedLog>, HistoryError> {
        self.metrics.log_queries.inc();
        let txn = self.read_txn()?;
        crate::logs::run(self, &txn, query, limit, deadline)
    }

    /// Rows and bytes of every table.
    pub(crate) fn table_stats(&self) -> Result<Vec<TableStats>, HistoryError> {
        gigas_mdbx::table_stats(&self.env, &self.dbs)
            .map_err(HistoryError::mdbx("read table statistics"))
    }

    // Reads the log engine needs.

    pub(crate) fn log_db(&self, table: Table) -> Database {
        self.db(table)
    }

    pub(crate) fn read_block_receipts(
        &self,
        txn: &RoTxUnsync,
        number: u64,
    ) -> Result<Vec<ReceiptEnvelope>, HistoryError> {
        self.block_receipts(txn, number)
    }

    pub(crate) fn block_hash_in(
        &self,
        txn: &RoTxUnsync,
        number: u64,
    ) -> Result<B256, HistoryError> {
        let key = block_key(number);
        let row: Option<Cow<'_, [u8]>> = txn
            .get(self.db(Table::Headers).dbi(), &key)
            .map_err(HistoryError::read("read Headers"))?;
        let row = row.ok_or_else(|| {
            HistoryError::corrupt(Table::LogBlocks.name(), &key, "indexed block has no header")
        })?;
        codec::header_row_hash(&key, &row)
    }

    pub(crate) fn tx_hash_in(
        &self,
        txn: &RoTxUnsync,
        number: u64,
        index: u32,
    ) -> Result<B256, HistoryError> {
        let key = tx_key(number, index);
        let row: Option<Cow<'_, [u8]>> = txn
            .get(self.db(Table::Transactions).dbi(), &key)
            .map_err(HistoryError::read("read Transactions"))?;
        let row = row.ok_or_else(|| {
            HistoryError::corrupt(
                Table::Receipts.name(),
                &key,
                "receipt without a transaction",
            )
        })?;
        codec::tx_row_hash(&key, &row)
    }
}

/// Checks what [`Index::commit_blocks`] would refuse of `record` without looking at the
/// tables (its number and duplicate hashes aside), and returns its state history sorted.
pub(crate) fn check<'a>(record: &BlockRecord<'a>) -> Result<Vec<StateEntry<'a>>, HistoryError> {
    let number = record.header.number;
    if record.transactions.len() != record.receipts.len() {
        return Err(HistoryError::ReceiptCount {
            block: number,
            transactions: record.transactions.len(),
            receipts: record.receipts.len(),
        });
    }
    if u32::try_from(record.transactions.len()).is_err() {
        return Err(HistoryError::TooManyTransactions {
            block: number,
            count: record.transactions.len(),
        });
    }
    sorted_state_history(number, record.state_history)
}

/// The block's state history as `(len ‖ key, old value)` in StateHistory key order, refusing
/// keys too long to store and keys named twice.
fn sorted_state_history(
    block: u64,
    entries: &[(Vec<u8>, Option<Vec<u8>>)],
) -> Result<Vec<StateEntry<'_>>, HistoryError> {
    let mut out = entries
        .iter()
        .map(|(key, old)| Ok((codec::state_prefix(block, key)?, old)))
        .collect::<Result<Vec<_>, HistoryError>>()?;
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(pair) = out.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(HistoryError::DuplicateStateKey {
            block,
            key: hex_string(&pair[0].0[1..]),
        });
    }
    Ok(out)
}
