//! [`History`]: the block log on the durable path, the MDBX index built behind it by the
//! indexer thread, and the unindexed blocks in memory in between.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, TxEnvelope};
use alloy_primitives::B256;
use gigas_blocklog::BlockLog;
use tracing::{error, info};

use crate::error::HistoryError;
use crate::metrics::{CommitPhase, HistoryMetrics};
use crate::recent::{self, RecentBlock};
use crate::record::{self, OwnedBlock};
use crate::store::{self, Index, IndexedChange, TableStats};
use crate::types::{
    BlockRecord, HistoricValue, HistoryOptions, IndexedLog, LogQuery, SealedHeader, TxLocation,
};

/// The block log's directory inside the history's.
pub const LOG_DIR: &str = "blocks";

/// The unindexed blocks, oldest first, consecutive.
type Recent = Arc<Vec<Arc<RecentBlock>>>;

/// The sequencer's chain history; see the crate documentation. `Send + Sync`: one thread
/// commits, any thread reads.
pub struct History {
    shared: Arc<Shared>,
    indexer: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    index: Index,
    log: Mutex<BlockLog>,
    recent: RwLock<Recent>,
    control: Mutex<Control>,
    /// Signalled when blocks are added, indexed, held or released, and on failure or stop.
    changed: Condvar,
    options: HistoryOptions,
    dir: PathBuf,
}

#[derive(Default)]
struct Control {
    stop: bool,
    failed: Option<String>,
    holds: usize,
    /// Callers of [`History::wait_indexed`] waiting: the indexer does not wait for a fuller
    /// batch meanwhile.
    flushes: usize,
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("History")
            .field("dir", &self.shared.dir)
            .field("options", &self.shared.options)
            .field("unindexed_blocks", &self.recent().len())
            .finish_non_exhaustive()
    }
}

/// While it lives, the indexer starts no new batch (the one under way finishes), and commits
/// do not wait for the index however far it falls behind. For tests that compare answers
/// before and after the index catches up, and for measuring the durable path alone.
#[must_use = "the indexer resumes when the hold is dropped"]
pub struct IndexHold {
    shared: Arc<Shared>,
}

impl fmt::Debug for IndexHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexHold").finish()
    }
}

impl Drop for IndexHold {
    fn drop(&mut self) {
        let mut control = lock(&self.shared.control);
        control.holds -= 1;
        self.shared.changed.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl History {
    /// Opens the history in `dir` (created if missing): the index, then the block log, whose
    /// blocks the index lacks (after a crash, up to [`HistoryOptions::max_unindexed_blocks`]
    /// of them) are indexed before this returns. Starts the indexer thread.
    pub fn open(dir: &Path, options: HistoryOptions) -> Result<Self, HistoryError> {
        let index = Index::open(dir, options.clone())?;
        let (mut log, _) = BlockLog::open(
            &dir.join(LOG_DIR),
            gigas_blocklog::Options {
                segment_bytes: options.log_segment_bytes,
            },
        )?;
        let indexed = index.head()?;
        let index_next = indexed.map_or(0, |h| h + 1);
        let inconsistent = |message: String| HistoryError::Inconsistent {
            dir: dir.to_path_buf(),
            message,
        };
        if let (Some(first), Some(next)) = (log.first(), log.next()) {
            if first > index_next {
                return Err(inconsistent(format!(
                    "the block log starts at block {first} but the index ends before block \
                     {index_next}: the blocks in between are in neither"
                )));
            }
            if next < index_next {
                return Err(inconsistent(format!(
                    "the block log ends before block {next} but the index holds blocks up to \
                     {}: the log's newest segments are missing",
                    index_next - 1
                )));
            }
        } else if let Some(next) = log.next() {
            // Segments with no records: the log continues at `next`.
            if next != index_next {
                return Err(inconsistent(format!(
                    "the block log continues at block {next} but the index at block {index_next}"
                )));
            }
        }
        // Blocks durable in the log that the index lacks: a crash came before the indexer.
        if let Some(next) = log.next() {
            let mut number = index_next;
            let started = Instant::now();
            while number < next {
                let end = next.min(number + options.index_batch_blocks.max(1) as u64);
                let mut blocks = Vec::with_capacity((end - number) as usize);
                for n in number..end {
                    let bytes = log.read(n)?.ok_or_else(|| {
                        inconsistent(format!("the block log lacks block {n}, which it counts"))
                    })?;
                    blocks.push(record::decode(n, &bytes)?);
                }
                let records: Vec<BlockRecord<'_>> =
                    blocks.iter().map(OwnedBlock::as_record).collect();
                index.commit_blocks(&records)?;
                number = end;
            }
            if next > index_next {
                info!(
                    from = index_next,
                    to = next - 1,
                    seconds = format_args!("{:.2}", started.elapsed().as_secs_f64()),
                    "indexed the blocks the block log held beyond the index"
                );
            }
            // What the index holds may not be durable yet (batches between durable points,
            // or the ones just indexed): the log keeps it until it is.
            if let Some(head) = index.head()? {
                index.sync()?;
                log.remove_through(head)?;
            }
        }
        index
            .metrics()
            .log_bytes
            .set(i64::try_from(log.bytes()).unwrap_or(i64::MAX));
        if let Some(head) = index.head()? {
            index.metrics().indexed_head.set(head as i64);
        }

        let shared = Arc::new(Shared {
            index,
            log: Mutex::new(log),
            recent: RwLock::new(Arc::new(Vec::new())),
            control: Mutex::new(Control::default()),
            changed: Condvar::new(),
            options,
            dir: dir.to_path_buf(),
        });
        let indexer_shared = shared.clone();
        let indexer = std::thread::Builder::new()
            .name("history-indexer".into())
            .spawn(move || indexer_shared.run_indexer())
            .map_err(|e| HistoryError::IndexerFailed(format!("cannot start its thread: {e}")))?;
        Ok(Self {
            shared,
            indexer: Mutex::new(Some(indexer)),
        })
    }

    /// The directory the history lives in.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The options it was opened with.
    pub fn options(&self) -> &HistoryOptions {
        &self.shared.options
    }

    /// Its metrics (register them with [`HistoryMetrics::register`]).
    pub fn metrics(&self) -> &HistoryMetrics {
        self.shared.index.metrics()
    }

    fn recent(&self) -> Recent {
        self.shared
            .recent
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Writes one block durably; see [`Self::commit_blocks`].
    pub fn commit_block(&self, record: &BlockRecord<'_>) -> Result<(), HistoryError> {
        self.commit_blocks(std::slice::from_ref(record))
    }

    /// Makes consecutive blocks durable: appends each to the block log and syncs it once,
    /// then hands them to the indexer. Returns once they are durable; every read answers for
    /// them from then on (from memory until the index has them). The first must follow the
    /// head (0 on an empty history), else [`HistoryError::NotNext`].
    ///
    /// Waits while [`HistoryOptions::max_unindexed_blocks`] blocks wait for the indexer
    /// (unless an [`IndexHold`] is held): the memory they hold is bounded. Fails with
    /// [`HistoryError::IndexerFailed`] once the indexer has failed.
    pub fn commit_blocks(&self, records: &[BlockRecord<'_>]) -> Result<(), HistoryError> {
        if records.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        let metrics = self.metrics();
        let expected = self.head()?.map_or(0, |h| h + 1);
        check_numbers(records, expected)?;
        for record in records {
            store::check(record)?;
        }
        self.check_unknown(records)?;
        let payloads: Vec<Vec<u8>> = records.iter().map(record::encode).collect();
        let blocks: Vec<Arc<RecentBlock>> = records
            .iter()
            .map(|r| Arc::new(RecentBlock::new(OwnedBlock::from_record(r))))
            .collect();
        let encoded = Instant::now();
        metrics.phase(CommitPhase::Encode, (encoded - start).as_secs_f64());

        self.wait_for_room(records.len())?;
        let waited = Instant::now();
        metrics.phase(CommitPhase::IndexWait, (waited - encoded).as_secs_f64());
        {
            let mut log = lock(&self.shared.log);
            // Checked again under the lock, against the log itself: what was checked above
            // read the head without it.
            let expected = match log.next() {
                Some(next) => next,
                None => self.shared.index.head()?.map_or(0, |h| h + 1),
            };
            check_numbers(records, expected)?;
            for (record, payload) in records.iter().zip(&payloads) {
                log.append(record.header.number, payload)?;
            }
            let appended = Instant::now();
            metrics.phase(CommitPhase::Append, (appended - waited).as_secs_f64());
            log.sync()?;
            metrics.phase(CommitPhase::Sync, appended.elapsed().as_secs_f64());
            metrics
                .log_bytes
                .set(i64::try_from(log.bytes()).unwrap_or(i64::MAX));
        }

        let unindexed = {
            let mut guard = self
                .shared
                .recent
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut next: Vec<Arc<RecentBlock>> = Vec::with_capacity(guard.len() + blocks.len());
            next.extend(guard.iter().cloned());
            next.extend(blocks);
            *guard = Arc::new(next);
            guard.len()
        };
        metrics.unindexed_blocks.set(unindexed as i64);
        {
            // Under the lock: the indexer checks for work and waits atomically with respect
            // to it, so this wake-up cannot fall between its check and its wait.
            let _control = lock(&self.shared.control);
            self.shared.changed.notify_all();
        }
        metrics.blocks_committed.inc_by(records.len() as u64);
        metrics
            .commit_seconds
            .observe(start.elapsed().as_secs_f64());
        Ok(())
    }

    /// Refuses a block hash or transaction hash the history already holds, or that `records`
    /// name twice: an index that answered one hash with two places would be a wrong answer.
    /// The unindexed blocks are checked before the index (see [`Self::value_at`] for why).
    fn check_unknown(&self, records: &[BlockRecord<'_>]) -> Result<(), HistoryError> {
        let recent = self.recent();
        let mut blocks: HashMap<B256, u64> = HashMap::new();
        let mut txs: HashMap<B256, TxLocation> = HashMap::new();
        for record in records {
            let hash = record.hash;
            let existing = recent
                .iter()
                .find(|b| b.block.sealed.hash == hash)
                .map(|b| b.number())
                .or_else(|| blocks.get(&hash).copied());
            if let Some(existing) = existing {
                return Err(HistoryError::DuplicateBlockHash { hash, existing });
            }
            blocks.insert(hash, record.header.number);
            for (index, tx) in (0u32..).zip(record.transactions) {
                let hash = *tx.tx_hash();
                let existing = recent
                    .iter()
                    .find_map(|b| {
                        b.transaction(&hash).map(|(index, _)| TxLocation {
                            block: b.number(),
                            index,
                        })
                    })
                    .or_else(|| txs.get(&hash).copied());
                if let Some(existing) = existing {
                    return Err(HistoryError::DuplicateTransaction {
                        hash,
                        block: existing.block,
                        index: existing.index,
                    });
                }
                txs.insert(
                    hash,
                    TxLocation {
                        block: record.header.number,
                        index,
                    },
                );
            }
        }
        self.shared.index.check_unknown(records)
    }

    /// Waits until `adding` more blocks fit under the bound on unindexed blocks.
    fn wait_for_room(&self, adding: usize) -> Result<(), HistoryError> {
        let bound = self.shared.options.max_unindexed_blocks.max(1);
        let mut control = lock(&self.shared.control);
        loop {
            if let Some(reason) = &control.failed {
                return Err(HistoryError::IndexerFailed(reason.clone()));
            }
            let waiting = self.recent().len();
            // A group larger than the bound goes in alone rather than waiting for ever.
            if control.holds > 0 || waiting == 0 || waiting + adding <= bound {
                return Ok(());
            }
            control = self
                .shared
                .changed
                .wait_timeout(control, Duration::from_millis(100))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Pauses the indexer while the returned guard lives; see [`IndexHold`].
    pub fn hold_index(&self) -> IndexHold {
        let mut control = lock(&self.shared.control);
        control.holds += 1;
        IndexHold {
            shared: self.shared.clone(),
        }
    }

    /// Waits until the index holds every committed block, at most `timeout`; returns whether
    /// it does. Fails once the indexer has failed.
    pub fn wait_indexed(&self, timeout: Duration) -> Result<bool, HistoryError> {
        let deadline = Instant::now() + timeout;
        let mut control = lock(&self.shared.control);
        control.flushes += 1;
        self.shared.changed.notify_all();
        let result = loop {
            if let Some(reason) = &control.failed {
                break Err(HistoryError::IndexerFailed(reason.clone()));
            }
            if self.recent().is_empty() {
                break Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                break Ok(false);
            }
            control = self
                .shared
                .changed
                .wait_timeout(control, (deadline - now).min(Duration::from_millis(100)))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        };
        control.flushes -= 1;
        result
    }

    /// The newest block the index holds (`None`: none yet). Blocks after it are durable in
    /// the block log and answered from memory.
    pub fn indexed_head(&self) -> Result<Option<u64>, HistoryError> {
        self.shared.index.head()
    }

    /// How many committed blocks wait for the indexer.
    pub fn unindexed_blocks(&self) -> usize {
        self.recent().len()
    }

    /// The number of the last committed block, `None` when empty.
    pub fn head(&self) -> Result<Option<u64>, HistoryError> {
        let recent = self.recent();
        match recent.last() {
            Some(block) => Ok(Some(block.number())),
            None => self.shared.index.head(),
        }
    }

    /// The oldest block whose state `value_at` answers: `head - state_history_blocks` once
    /// the chain is longer than the window, else 0.
    pub fn oldest_state_block(&self) -> Result<u64, HistoryError> {
        self.shared.index.oldest_state_block()
    }

    /// The sealed header of block `number`.
    pub fn sealed_header(&self, number: u64) -> Result<Option<SealedHeader>, HistoryError> {
        let recent = self.recent();
        if let Some(block) = recent::find(&recent, number) {
            return Ok(Some(block.block.sealed.clone()));
        }
        self.shared.index.sealed_header(number)
    }

    /// The number of the block with hash `hash`.
    pub fn number_by_hash(&self, hash: B256) -> Result<Option<u64>, HistoryError> {
        let recent = self.recent();
        if let Some(block) = recent.iter().find(|b| b.block.sealed.hash == hash) {
            return Ok(Some(block.number()));
        }
        self.shared.index.number_by_hash(hash)
    }

    /// The transactions of block `number` with their senders; `None` when there is no such
    /// block.
    pub fn transactions(
        &self,
        number: u64,
    ) -> Result<Option<Vec<Recovered<TxEnvelope>>>, HistoryError> {
        let recent = self.recent();
        if let Some(block) = recent::find(&recent, number) {
            return Ok(Some(block.block.transactions.to_vec()));
        }
        self.shared.index.transactions(number)
    }

    /// The receipts of block `number`; `None` when there is no such block.
    pub fn receipts(&self, number: u64) -> Result<Option<Vec<ReceiptEnvelope>>, HistoryError> {
        let recent = self.recent();
        if let Some(block) = recent::find(&recent, number) {
            self.metrics().receipt_blocks_read.inc();
            return Ok(Some(block.block.receipts.clone()));
        }
        self.shared.index.receipts(number)
    }

    /// Where the transaction with hash `hash` is.
    pub fn transaction_location(&self, hash: B256) -> Result<Option<TxLocation>, HistoryError> {
        let recent = self.recent();
        for block in recent.iter().rev() {
            if let Some((index, _)) = block.transaction(&hash) {
                return Ok(Some(TxLocation {
                    block: block.number(),
                    index,
                }));
            }
        }
        // One seek: the row itself is neither read nor decoded.
        self.shared.index.transaction_location(hash)
    }

    /// The transaction with hash `hash`, its sender and where it is.
    pub fn transaction(
        &self,
        hash: B256,
    ) -> Result<Option<(TxLocation, Recovered<TxEnvelope>)>, HistoryError> {
        let recent = self.recent();
        for block in recent.iter().rev() {
            if let Some((index, tx)) = block.transaction(&hash) {
                let location = TxLocation {
                    block: block.number(),
                    index,
                };
                return Ok(Some((location, tx.clone())));
            }
        }
        self.shared.index.transaction(hash)
    }

    /// The encoded ChangeSet of block `number`, while it is in the retention window.
    pub fn changeset(&self, number: u64) -> Result<Option<Vec<u8>>, HistoryError> {
        let recent = self.recent();
        if let Some(block) = recent::find(&recent, number) {
            return Ok(Some(block.block.changeset.clone()));
        }
        self.shared.index.changeset(number)
    }

    /// The value state key `key` had at the end of block `block`.
    ///
    /// The unindexed blocks are read *before* the index: a block leaves memory only after
    /// the index holds it, so whatever the indexer does meanwhile, every committed block is
    /// in one or the other (or both, with the same values).
    pub fn value_at(&self, key: &[u8], block: u64) -> Result<HistoricValue, HistoryError> {
        let recent = self.recent();
        let from_recent = recent
            .iter()
            .filter(|b| b.number() > block)
            .find_map(|b| b.old_value(key).map(|old| (b.number(), old)));
        match self.shared.index.first_change_after(key, block)? {
            IndexedChange::Pruned { oldest } => Ok(HistoricValue::Pruned { oldest }),
            IndexedChange::Changed {
                block: indexed,
                old,
            } => match from_recent {
                Some((number, old)) if number < indexed => Ok(HistoricValue::Changed(old.clone())),
                _ => Ok(HistoricValue::Changed(old)),
            },
            IndexedChange::None => Ok(match from_recent {
                Some((_, old)) => HistoricValue::Changed(old.clone()),
                None => HistoricValue::Unchanged,
            }),
        }
    }

    /// Logs matching `query` in chain order, at most `limit` of them (more:
    /// [`HistoryError::TooManyLogs`]).
    pub fn logs(&self, query: &LogQuery, limit: usize) -> Result<Vec<IndexedLog>, HistoryError> {
        self.logs_until(query, limit, None)
    }

    /// [`Self::logs`], stopping with [`HistoryError::LogScanTimedOut`] once `deadline` has
    /// passed. Indexed blocks are found through the log index; unindexed ones (at most
    /// [`HistoryOptions::max_unindexed_blocks`]) by reading their receipts in memory.
    pub fn logs_until(
        &self,
        query: &LogQuery,
        limit: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<IndexedLog>, HistoryError> {
        let recent = self.recent();
        // Blocks from `split` on are answered from memory, older ones from the index: the
        // index may meanwhile hold some of the former too, and must not answer them twice.
        let split = recent.first().map_or(u64::MAX, |b| b.number());
        let mut out = Vec::new();
        if query.from < split {
            let older = LogQuery {
                to: query.to.min(split - 1),
                ..query.clone()
            };
            out = self.shared.index.logs_until(&older, limit, deadline)?;
        } else {
            self.metrics().log_queries.inc();
        }
        if query.to >= split {
            recent::logs(&recent, query, limit, deadline, &mut out)?;
        }
        Ok(out)
    }

    /// Rows and bytes of every table of the index.
    pub fn table_stats(&self) -> Result<Vec<TableStats>, HistoryError> {
        self.shared.index.table_stats()
    }
}

/// Refuses `records` unless they are numbered consecutively from `expected`.
fn check_numbers(records: &[BlockRecord<'_>], expected: u64) -> Result<(), HistoryError> {
    for (offset, record) in records.iter().enumerate() {
        let want = expected + offset as u64;
        if record.header.number != want {
            return Err(HistoryError::NotNext {
                expected: want,
                got: record.header.number,
            });
        }
    }
    Ok(())
}

impl Shared {
    /// The indexer: takes the unindexed blocks in order, in batches of up to
    /// [`HistoryOptions::index_batch_blocks`], writes each batch to the index in one MDBX
    /// transaction, then forgets them in memory and removes the log segments the index now
    /// covers. Stops on `stop` or on its first error (recorded for the committer to report).
    fn run_indexer(&self) {
        let batch_max = self.options.index_batch_blocks.max(1);
        // A batch never waits for more blocks than commits may leave waiting.
        let min_blocks = self
            .options
            .index_min_blocks
            .clamp(1, self.options.max_unindexed_blocks.max(1));
        let max_delay = self.options.index_max_delay;
        let mut last_sync = Instant::now();
        loop {
            let batch: Vec<Arc<RecentBlock>> = {
                let mut control = lock(&self.control);
                loop {
                    if control.stop || control.failed.is_some() {
                        return;
                    }
                    let recent = self
                        .recent
                        .read()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    let mut wait = Duration::from_secs(1);
                    if control.holds == 0 {
                        if let Some(oldest) = recent.first() {
                            let waited = oldest.committed.elapsed();
                            if recent.len() >= min_blocks
                                || waited >= max_delay
                                || control.flushes > 0
                            {
                                break recent.iter().take(batch_max).cloned().collect();
                            }
                            wait = max_delay - waited;
                        }
                    }
                    control = self
                        .changed
                        .wait_timeout(control, wait)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
            };
            if let Err(e) = self.index_batch(&batch, &mut last_sync) {
                error!(error = %e, "the history's indexer failed; commits fail from now on, and reopening the history indexes the block log again");
                lock(&self.control).failed = Some(e.to_string());
                self.changed.notify_all();
                return;
            }
        }
    }

    /// Indexes `batch`, then makes the index durable if [`HistoryOptions::index_sync_period`]
    /// has passed since `last_sync`, and only then removes the log segments it covers.
    fn index_batch(
        &self,
        batch: &[Arc<RecentBlock>],
        last_sync: &mut Instant,
    ) -> Result<(), HistoryError> {
        let Some(last) = batch.last().map(|b| b.number()) else {
            return Ok(());
        };
        let start = Instant::now();
        let records: Vec<BlockRecord<'_>> = batch.iter().map(|b| b.block.as_record()).collect();
        self.index.commit_blocks(&records)?;
        let metrics = self.index.metrics();
        metrics.index_seconds.observe(start.elapsed().as_secs_f64());
        metrics.index_batch_blocks.observe(batch.len() as f64);
        metrics.indexed_head.set(last as i64);
        let unindexed = {
            let mut guard = self
                .recent
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let kept: Vec<Arc<RecentBlock>> = guard
                .iter()
                .filter(|b| b.number() > last)
                .cloned()
                .collect();
            *guard = Arc::new(kept);
            guard.len()
        };
        metrics.unindexed_blocks.set(unindexed as i64);
        // Durable through `last`: by the commit itself (a zero period), or by a sync made now.
        // Otherwise the log keeps the batch until a later durable point covers it.
        let period = self.options.index_sync_period;
        let durable = period.is_zero() || {
            let due = last_sync.elapsed() >= period;
            if due {
                self.index.sync()?;
                *last_sync = Instant::now();
            }
            due
        };
        if durable {
            let mut log = lock(&self.log);
            log.remove_through(last)?;
            metrics
                .log_bytes
                .set(i64::try_from(log.bytes()).unwrap_or(i64::MAX));
        }
        let _control = lock(&self.control);
        self.changed.notify_all();
        Ok(())
    }
}

impl Drop for History {
    /// Stops the indexer after the batch under way: blocks it has not indexed stay in the
    /// block log, and the next open indexes them.
    fn drop(&mut self) {
        {
            let mut control = lock(&self.shared.control);
            control.stop = true;
            self.shared.changed.notify_all();
        }
        if let Some(handle) = lock(&self.indexer).take() {
            let _ = handle.join();
        }
    }
}
