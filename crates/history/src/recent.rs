//! The blocks that are durable in the block log and not yet in the index: what reads consult
//! before the index, so that a block is queryable the moment its commit returns.

use std::time::Instant;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::TxEnvelope;
use alloy_primitives::B256;
use std::collections::HashMap;

use crate::error::HistoryError;
use crate::record::OwnedBlock;
use crate::types::{IndexedLog, LogQuery};

/// One unindexed block with lookups by transaction hash and by state key.
#[derive(Debug)]
pub(crate) struct RecentBlock {
    pub(crate) block: OwnedBlock,
    /// Transaction hash → index in the block.
    tx_index: HashMap<B256, u32>,
    /// Indices into `block.state_history`, sorted by key, for binary search.
    state_order: Vec<u32>,
    /// When it was committed (how long it has waited for the indexer).
    pub(crate) committed: std::time::Instant,
}

impl RecentBlock {
    pub(crate) fn new(block: OwnedBlock) -> Self {
        let tx_index = (0u32..)
            .zip(block.transactions.iter())
            .map(|(i, tx)| (*tx.inner().tx_hash(), i))
            .collect();
        let mut state_order: Vec<u32> = (0..block.state_history.len() as u32).collect();
        state_order.sort_unstable_by(|&a, &b| {
            block.state_history[a as usize]
                .0
                .cmp(&block.state_history[b as usize].0)
        });
        Self {
            block,
            tx_index,
            state_order,
            committed: Instant::now(),
        }
    }

    pub(crate) fn number(&self) -> u64 {
        self.block.number()
    }

    /// The transaction with hash `hash`, with its index.
    pub(crate) fn transaction(&self, hash: &B256) -> Option<(u32, &Recovered<TxEnvelope>)> {
        let index = *self.tx_index.get(hash)?;
        Some((index, &self.block.transactions[index as usize]))
    }

    /// The value `key` had before this block, if the block changed it.
    pub(crate) fn old_value(&self, key: &[u8]) -> Option<&Option<Vec<u8>>> {
        let history = &self.block.state_history;
        let at = self
            .state_order
            .binary_search_by(|&i| history[i as usize].0.as_slice().cmp(key))
            .ok()?;
        Some(&history[self.state_order[at] as usize].1)
    }
}

/// The block numbered `number` among `recent` (consecutive, oldest first).
pub(crate) fn find(recent: &[std::sync::Arc<RecentBlock>], number: u64) -> Option<&RecentBlock> {
    let first = recent.first()?.number();
    let offset = usize::try_from(number.checked_sub(first)?).ok()?;
    recent.get(offset).map(|b| &**b)
}

/// Appends to `out` the logs of `recent`'s blocks within `query`'s range that match it, in
/// chain order; more than `limit` in `out` is [`HistoryError::TooManyLogs`].
pub(crate) fn logs(
    recent: &[std::sync::Arc<RecentBlock>],
    query: &LogQuery,
    limit: usize,
    deadline: Option<Instant>,
    out: &mut Vec<IndexedLog>,
) -> Result<(), HistoryError> {
    let matcher = query.matcher();
    for block in recent
        .iter()
        .filter(|b| (query.from..=query.to).contains(&b.number()))
    {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(HistoryError::LogScanTimedOut {
                from: query.from,
                reached: block.number(),
                to: query.to,
            });
        }
        let number = block.number();
        let mut log_index = 0u32;
        for (tx_index, (receipt, tx)) in (0u32..).zip(
            block
                .block
                .receipts
                .iter()
                .zip(block.block.transactions.iter()),
        ) {
            for log in receipt.logs() {
                if matcher.matches(log) {
                    if out.len() >= limit {
                        return Err(HistoryError::TooManyLogs { limit });
                    }
                    out.push(IndexedLog {
                        block_number: number,
                        block_hash: block.block.sealed.hash,
                        tx_hash: *tx.inner().tx_hash(),
                        tx_index,
                        log_index,
                        log: log.clone(),
                    });
                }
                log_index += 1;
            }
        }
    }
    Ok(())
}
