//! The write path of [`Index`]: checking a batch of blocks, writing their rows in one write
//! transaction, and pruning the state history that left the window.

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::time::Instant;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256};
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::{MdbxError, WriteFlags};
use tracing::debug;

use super::Index;
use crate::codec::{self, block_key, tx_key};
use crate::error::{hex_string, HistoryError};
use crate::metrics::IndexPhase;
use crate::tables::{Table, META_STATE_PRUNED_BELOW};
use crate::types::BlockRecord;

/// A state history entry ready to write: `len ‖ key` and the old value.
type StateEntry<'a> = (Vec<u8>, &'a Option<Vec<u8>>);

/// Log positions the index covers (the EVM's LOG0..LOG4).
const INDEXED_TOPICS: usize = 4;

/// A batch's rows of the random-keyed tables, written after its other rows in key order.
#[derive(Default)]
struct Deferred {
    /// Transaction hash and `block ‖ index`.
    locations: Vec<(B256, [u8; 12])>,
    /// StateHistory key and value.
    state: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Index {
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
