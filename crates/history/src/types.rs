//! What goes in and comes out of the history.

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{Header, ReceiptEnvelope, TxEnvelope};
use std::collections::HashSet;

use alloy_primitives::{Address, Log, Signature, B256};

/// How the history is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryOptions {
    /// Blocks of state history kept: `value_at` answers every block from
    /// `head - state_history_blocks` to the head, and the ChangeSets of the last
    /// `state_history_blocks` blocks are kept. At least 1 (0 behaves as 1: the head's own
    /// ChangeSet is always kept, since recovery may re-apply it).
    pub state_history_blocks: u64,
    /// The largest the data file may grow, in bytes. MDBX reserves this much address space
    /// (not memory, not disk) at open.
    pub max_size_bytes: usize,
    /// How much the data file grows at a time, in bytes. The file is sparse: a step costs
    /// disk only as pages are written.
    pub growth_step_bytes: usize,
    /// Open with `MDBX_WRITEMAP` (dirty pages written in the file mapping instead of in heap
    /// buffers). Off by default; see the crate documentation for the measurement.
    pub write_map: bool,
    /// Reader slots: concurrent read transactions across threads (each read call holds one
    /// for its duration).
    pub max_readers: u64,
    /// The most blocks one index batch prunes per block it indexes. Normally each indexed
    /// block prunes one; after the window shrinks between runs this spreads the backlog over
    /// several batches instead of making one huge write transaction.
    pub prune_blocks_per_commit: u64,
    /// The most committed blocks that may wait for the indexer, held in memory: a commit
    /// waits for the indexer beyond it. Bounds memory (a block of 2,000 transfers holds about
    /// 2 MB there) and what a restart re-indexes from the block log.
    pub max_unindexed_blocks: usize,
    /// The most blocks the indexer writes in one MDBX transaction. Larger batches write each
    /// dirtied page of the random-keyed tables once for more blocks.
    pub index_batch_blocks: usize,
    /// The indexer starts a batch once this many blocks wait, or once the oldest waiting has
    /// waited [`Self::index_max_delay`]: a batch of one block dirties a page of each
    /// random-keyed table per row, a batch of many shares the pages (measured in the crate
    /// documentation). Reads do not wait for it: unindexed blocks answer from memory.
    pub index_min_blocks: usize,
    /// How long a block may wait for the indexer when fewer than
    /// [`Self::index_min_blocks`] wait (a quiet chain is still indexed promptly).
    pub index_max_delay: std::time::Duration,
    /// The size at which the block log starts a new segment; segments are removed whole once
    /// the index covers them durably.
    pub log_segment_bytes: u64,
    /// How often the indexer makes the index durable (an `mdbx_env_sync`). Between these
    /// points index batches are committed without a sync (MDBX's `SafeNoSync`): a killed
    /// process loses nothing, a power loss takes the index back to the last durable point, and
    /// the block log, whose segments go only once a durable point covers them, still holds
    /// every block after it for the next open to index again. Zero syncs every batch.
    pub index_sync_period: std::time::Duration,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        Self {
            state_history_blocks: 10_000,
            max_size_bytes: 1 << 40,
            growth_step_bytes: 1 << 30,
            write_map: false,
            max_readers: 4096,
            prune_blocks_per_commit: 16,
            max_unindexed_blocks: 128,
            index_batch_blocks: 64,
            index_min_blocks: 24,
            index_max_delay: std::time::Duration::from_secs(5),
            log_segment_bytes: 64 << 20,
            // Under a second of blocks at a 250 ms block time would sync nearly every batch;
            // 10 s lets the kernel write a page the batches keep dirtying once, and keeps what
            // a power loss makes the next open index again to about 40 blocks.
            index_sync_period: std::time::Duration::from_secs(10),
        }
    }
}

/// A header with its hash and the sequencer's signature over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedHeader {
    /// The header.
    pub header: Header,
    /// Its hash, as committed.
    pub hash: B256,
    /// The sequencer's signature.
    pub signature: Signature,
}

/// One whole block, as `commit_block` writes it.
#[derive(Debug, Clone, Copy)]
pub struct BlockRecord<'a> {
    /// The header; its `number` must follow the head.
    pub header: &'a Header,
    /// The header's hash.
    pub hash: B256,
    /// The sequencer's signature over the header.
    pub signature: Signature,
    /// The transactions with their senders, in block order.
    pub transactions: &'a [Recovered<TxEnvelope>],
    /// One receipt per transaction, in the same order, blooms included.
    pub receipts: &'a [ReceiptEnvelope],
    /// The block's encoded ChangeSet (opaque here).
    pub changeset: &'a [u8],
    /// Every state key the block writes or deletes, with its value before the block
    /// (`None`: absent). Keys are opaque bytes, at most [`crate::MAX_STATE_KEY_LEN`] long,
    /// each named once.
    pub state_history: &'a [(Vec<u8>, Option<Vec<u8>>)],
}

/// Where a transaction is in the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxLocation {
    /// The block number.
    pub block: u64,
    /// Its index in the block.
    pub index: u32,
}

/// The value a state key had at the end of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoricValue {
    /// A later committed block changed the key; this is the value before the first such
    /// block (`None`: absent).
    Changed(Option<Vec<u8>>),
    /// No committed block after the requested one changed the key: read the current state.
    Unchanged,
    /// The requested block is older than the retained window.
    Pruned {
        /// The oldest block whose state can be answered.
        oldest: u64,
    },
}

/// A log filter: the shape of `eth_getLogs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// First block, inclusive.
    pub from: u64,
    /// Last block, inclusive.
    pub to: u64,
    /// Emitting addresses, OR-ed; empty matches any.
    pub addresses: Vec<Address>,
    /// Topics by position; `None` matches anything, `Some(list)` any of the list. An empty
    /// list matches anything too, as `[]` does in `eth_getLogs`.
    pub topics: [Option<Vec<B256>>; 4],
}

impl LogQuery {
    /// Whether `log` passes the filter (blocks aside). Each call searches the lists; a scan
    /// over many logs builds a [`LogMatcher`] once instead.
    pub fn matches(&self, log: &Log) -> bool {
        self.matcher().matches(log)
    }

    /// The filter as sets, for matching many logs: a log is checked in time independent of
    /// how many addresses and topics the query names (a client may send thousands).
    pub fn matcher(&self) -> LogMatcher {
        let set_of = |list: &Option<Vec<B256>>| match list {
            Some(list) if !list.is_empty() => Some(list.iter().copied().collect()),
            _ => None,
        };
        LogMatcher {
            addresses: (!self.addresses.is_empty())
                .then(|| self.addresses.iter().copied().collect()),
            topics: [
                set_of(&self.topics[0]),
                set_of(&self.topics[1]),
                set_of(&self.topics[2]),
                set_of(&self.topics[3]),
            ],
        }
    }
}

/// A [`LogQuery`]'s filter as hash sets (`None`: anything matches there).
#[derive(Debug, Clone)]
pub struct LogMatcher {
    addresses: Option<HashSet<Address>>,
    topics: [Option<HashSet<B256>>; 4],
}

impl LogMatcher {
    /// Whether `log` passes the filter (blocks aside).
    pub fn matches(&self, log: &Log) -> bool {
        if let Some(addresses) = &self.addresses {
            if !addresses.contains(&log.address) {
                return false;
            }
        }
        let topics = log.topics();
        self.topics
            .iter()
            .enumerate()
            .all(|(i, wanted)| match wanted {
                None => true,
                Some(set) => topics.get(i).is_some_and(|t| set.contains(t)),
            })
    }
}

/// A log with where it is in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedLog {
    /// The block number.
    pub block_number: u64,
    /// The block hash.
    pub block_hash: B256,
    /// The hash of the transaction that emitted it.
    pub tx_hash: B256,
    /// That transaction's index in the block.
    pub tx_index: u32,
    /// The log's index in the block (across all its receipts).
    pub log_index: u32,
    /// The log.
    pub log: Log,
}
