//! `eth_getLogs` over the log index.
//!
//! A query is a conjunction of groups: the addresses (any of them), and each topic position
//! that is constrained (any of its topics). A group's blocks are the union of the index rows
//! of its members: `LogAddresses[address]` or `LogTopics[position ‖ topic]`, each a sorted
//! list of block numbers. Candidate blocks are the intersection of the groups, found by
//! leapfrogging: from block `b`, every group seeks its first block `>= b` (one
//! `GET_BOTH_RANGE` per member), `b` jumps to the largest answer, and a block is a candidate
//! when every group answers it. So the work grows with the blocks that match each group
//! near the candidates, not with the length of the range, and only candidates' receipts are
//! read; the exact filter then runs over their logs. A query with no group walks `LogBlocks`
//! (blocks with at least one log).

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::time::Instant;

use signet_libmdbx::tx::aliases::RoTxUnsync;
use signet_libmdbx::Cursor;
use signet_libmdbx::Ro;

use crate::codec::{self, block_key};
use crate::error::HistoryError;
use crate::store::Index as History;
use crate::tables::Table;
use crate::types::{IndexedLog, LogMatcher, LogQuery};

/// One group of the conjunction: index keys in one DUPSORT table, OR-ed.
struct Group {
    table: Table,
    keys: Vec<Vec<u8>>,
}

struct Index<'tx> {
    addresses: Cursor<'tx, Ro>,
    topics: Cursor<'tx, Ro>,
    log_blocks: Cursor<'tx, Ro>,
    seeks: u64,
}

impl Index<'_> {
    /// The first block `>= from` in `group`, if any.
    fn next_in_group(&mut self, group: &Group, from: u64) -> Result<Option<u64>, HistoryError> {
        let from_key = block_key(from);
        let cursor = match group.table {
            Table::LogAddresses => &mut self.addresses,
            _ => &mut self.topics,
        };
        let mut best: Option<u64> = None;
        for key in &group.keys {
            self.seeks += 1;
            let found: Option<Cow<'_, [u8]>> = cursor
                .get_both_range(key, &from_key)
                .map_err(HistoryError::read("seek the log index"))?;
            if let Some(found) = found {
                let block = codec::decode_u64(group.table, key, &found)?;
                best = Some(best.map_or(block, |b| b.min(block)));
            }
        }
        Ok(best)
    }

    /// The first block `>= from` that has any log.
    fn next_with_logs(&mut self, from: u64) -> Result<Option<u64>, HistoryError> {
        self.seeks += 1;
        let found: Option<(Cow<'_, [u8]>, ())> = self
            .log_blocks
            .set_range(&block_key(from))
            .map_err(HistoryError::read("seek LogBlocks"))?;
        found
            .map(|(key, ())| codec::decode_u64(Table::LogBlocks, &key, &key))
            .transpose()
    }

    /// The first block `>= from` that every group names.
    fn next_candidate(&mut self, groups: &[Group], from: u64) -> Result<Option<u64>, HistoryError> {
        if groups.is_empty() {
            return self.next_with_logs(from);
        }
        let mut candidate = from;
        // Each pass either confirms `candidate` in every group or moves it forward, so this
        // ends: block numbers only grow.
        loop {
            let mut moved = false;
            for group in groups {
                match self.next_in_group(group, candidate)? {
                    None => return Ok(None),
                    Some(block) if block > candidate => {
                        candidate = block;
                        moved = true;
                    }
                    Some(_) => {}
                }
            }
            if !moved {
                return Ok(Some(candidate));
            }
        }
    }
}

fn groups_of(query: &LogQuery) -> Vec<Group> {
    let mut groups = Vec::new();
    if !query.addresses.is_empty() {
        let keys: BTreeSet<Vec<u8>> = query.addresses.iter().map(|a| a.to_vec()).collect();
        groups.push(Group {
            table: Table::LogAddresses,
            keys: keys.into_iter().collect(),
        });
    }
    for (position, topics) in (0u8..).zip(&query.topics) {
        let Some(topics) = topics else { continue };
        if topics.is_empty() {
            continue;
        }
        let keys: BTreeSet<Vec<u8>> = topics
            .iter()
            .map(|t| codec::topic_key(position, t).to_vec())
            .collect();
        groups.push(Group {
            table: Table::LogTopics,
            keys: keys.into_iter().collect(),
        });
    }
    // Most selective first is unknown without counting; fewest members first keeps each
    // pass's cheapest seeks in front.
    groups.sort_by_key(|g| g.keys.len());
    groups
}

pub(crate) fn run(
    history: &History,
    txn: &RoTxUnsync,
    query: &LogQuery,
    limit: usize,
    deadline: Option<Instant>,
) -> Result<Vec<IndexedLog>, HistoryError> {
    let mut out = Vec::new();
    if query.from > query.to {
        return Ok(out);
    }
    let groups = groups_of(query);
    let cursor = |table: Table| {
        txn.cursor(history.log_db(table))
            .map_err(HistoryError::mdbx("open a log index cursor"))
    };
    let mut index = Index {
        addresses: cursor(Table::LogAddresses)?,
        topics: cursor(Table::LogTopics)?,
        log_blocks: cursor(Table::LogBlocks)?,
        seeks: 0,
    };
    let scope = Scope {
        query,
        matcher: query.matcher(),
        limit,
        deadline,
    };
    let result = scan(history, txn, &scope, &groups, &mut index, &mut out);
    history.metrics().log_index_seeks.inc_by(index.seeks);
    result.map(|()| out)
}

/// What one scan looks for and how far it may go.
struct Scope<'q> {
    query: &'q LogQuery,
    matcher: LogMatcher,
    limit: usize,
    deadline: Option<Instant>,
}

/// Candidate blocks between two readings of the clock.
const BLOCKS_PER_DEADLINE_CHECK: u32 = 64;

fn scan(
    history: &History,
    txn: &RoTxUnsync,
    scope: &Scope<'_>,
    groups: &[Group],
    index: &mut Index<'_>,
    out: &mut Vec<IndexedLog>,
) -> Result<(), HistoryError> {
    let (query, limit) = (scope.query, scope.limit);
    let mut from = query.from;
    let mut until_check = 0u32;
    while from <= query.to {
        if until_check == 0 {
            until_check = BLOCKS_PER_DEADLINE_CHECK;
            if scope.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(HistoryError::LogScanTimedOut {
                    from: query.from,
                    reached: from,
                    to: query.to,
                });
            }
        }
        until_check -= 1;
        let Some(block) = index.next_candidate(groups, from)? else {
            break;
        };
        if block > query.to {
            break;
        }
        let receipts = history.read_block_receipts(txn, block)?;
        let mut block_hash = None;
        let mut log_index: u32 = 0;
        for (tx_index, receipt) in (0u32..).zip(&receipts) {
            let mut tx_hash = None;
            for log in receipt.logs() {
                if scope.matcher.matches(log) {
                    if out.len() >= limit {
                        return Err(HistoryError::TooManyLogs { limit });
                    }
                    let block_hash = match block_hash {
                        Some(hash) => hash,
                        None => *block_hash.insert(history.block_hash_in(txn, block)?),
                    };
                    let tx_hash = match tx_hash {
                        Some(hash) => hash,
                        None => *tx_hash.insert(history.tx_hash_in(txn, block, tx_index)?),
                    };
                    out.push(IndexedLog {
                        block_number: block,
                        block_hash,
                        tx_hash,
                        tx_index,
                        log_index,
                        log: log.clone(),
                    });
                }
                log_index = log_index.saturating_add(1);
            }
        }
        match block.checked_add(1) {
            Some(next) => from = next,
            None => break,
        }
    }
    Ok(())
}
