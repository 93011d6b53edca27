//! The point reads of [`Index`]: headers, transactions, receipts, ChangeSets and state
//! history, and the reads the log engine needs.

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, TxEnvelope};
use alloy_primitives::B256;
use signet_libmdbx::tx::aliases::RoTxUnsync;
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Database, TransactionKind};

use super::{Index, IndexedChange};
use crate::codec::{self, block_key, tx_key};
use crate::error::HistoryError;
use crate::tables::Table;
use crate::types::{BlockRecord, IndexedLog, LogQuery, SealedHeader, TxLocation};

/// A row read through a cursor, borrowed from the map where MDBX allows.
type Row<'tx> = Option<(Cow<'tx, [u8]>, Cow<'tx, [u8]>)>;

impl Index {
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
