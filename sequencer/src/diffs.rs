//! The state-diff writer and the archive it publishes.
//!
//! Every committed block becomes two immutable files in `DATADIR/archive` (see
//! [`gigas_statediff::archive`]): `diffs/N`, the sealed header, the signature and the packed
//! ChangeSet that full nodes apply, and `blocks/N`, the transactions and receipts for nodes
//! that re-execute. The writer runs beside the producer: it follows the node's committed
//! blocks and never holds the producer up. When it falls behind (the broadcast buffer
//! overflowed) or starts after a stop, it rebuilds the missing diffs from the chain history,
//! whose old values give each block's prior state; encoding is deterministic, so a rebuilt
//! file has the bytes the lost one had.
//!
//! The enumeration index lives in memory and in the archive's `keys.log`, which only ever
//! records blocks whose diff file is already durable. At start the log is replayed, and every
//! block after its last record is encoded again. Blocks that add no key have no record, except
//! one every [`MARK_EVERY`] blocks, so that restart never re-encodes more than that many
//! blocks past the last new key (and never reaches beyond the history's old values).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use alloy_primitives::{Address, Bytes, U256};
use gigas_primitives::ChangeSet;
use gigas_primitives::LatticeHash;
use gigas_statediff::archive::{
    Archive, ArchiveError, ArchiveHead, FileKind, KeyLog, LatticeMark, LATTICE_REMEDY,
};
use gigas_statediff::{
    index_lattice, lattice_delta, lattice_delta_hashed, pack_diff, BlockFile, Compression,
    DiffError, HashedKeys, KeyIndex, MemoryKeyIndex, PriorValues, StateCommitment, StateKey,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::sync::{broadcast, watch};
use tracing::{info, warn};

use crate::node::{CommittedBlock, Node};

/// A block without new keys still gets an (empty) index-log record this often.
pub const MARK_EVERY: u64 = 1024;

/// The index log is synced at least this often (in blocks) while the writer runs, so that a
/// power loss costs at most this many records, which a restart re-encodes from the history.
pub const SYNC_EVERY: u64 = 256;

/// The least `--state-history` the diff writer can live with: a restart re-encodes every block
/// after the log's last durable record (up to [`SYNC_EVERY`] + [`MARK_EVERY`] blocks back),
/// and each needs the state before it; recovery replays up to [`crate::node::MAX_GROUP`]
/// blocks more.
pub const MIN_STATE_HISTORY: u64 = MARK_EVERY + SYNC_EVERY + crate::node::MAX_GROUP as u64;

/// What to do about a damaged index log.
const REMEDY: &str = "rebuild it from a full node that follows this sequencer: stop both, \
    then `gigas-sequencer rebuild-key-log --datadir DATADIR --from-state FULLNODE_DATADIR/state`";

/// Why the diff writer stopped.
#[derive(Debug, thiserror::Error)]
pub enum DiffWriterError {
    /// A file of the archive could not be read or written.
    #[error("diff archive: {0}")]
    Archive(#[from] ArchiveError),
    /// Encoding a block failed (a prior value could not be read, or the index is corrupt).
    #[error("encoding a state diff: {0}")]
    Encode(#[from] DiffError),
    /// The chain history failed or lacks a block the writer needs.
    #[error("chain history: {0}")]
    History(String),
    /// The index log does not match the archive.
    #[error("diff archive index log: {0}")]
    KeyLog(String),
    /// The state commitment could not be moved, resumed or signed.
    #[error("state commitment: {0}")]
    Commitment(String),
}

/// Block `number`'s ChangeSet from the history and the values it replaced, from the
/// history's state before it: what encoding a diff again and moving the state commitment
/// over a block both need.
fn changes_from_history(
    node: &Node,
    number: u64,
) -> Result<(ChangeSet, PriorValues), DiffWriterError> {
    let history = |e: gigas_history::HistoryError| DiffWriterError::History(e.to_string());
    let changes = match node.history().changeset(number).map_err(history)? {
        Some(bytes) if !bytes.is_empty() => ChangeSet::decode(&bytes)
            .map_err(|e| DiffWriterError::History(format!("block {number}: {e}")))?,
        // Genesis has no ChangeSet: a follower builds its state from the chain spec.
        _ => ChangeSet::default(),
    };
    let prior = match number.checked_sub(1) {
        Some(parent) => node
            .with_state_at(parent, |db| PriorValues::capture(&changes, db))
            .map_err(|e| {
                DiffWriterError::History(format!(
                    "the state before block {number}: {e} (within the kept state history \
                     only; see --state-history)"
                ))
            })?,
        None => PriorValues::default(),
    };
    Ok((changes, prior))
}

/// The lattice hash of the state after block `next - 1`, from the archive's mark moved over
/// the blocks after it (their ChangeSets from the history, the state before each from the
/// history's old values) and the key-index entries after the mark's.
fn resume_lattice(
    node: &Node,
    archive: &Archive,
    index: &MemoryKeyIndex,
    next: u64,
) -> Result<LatticeHash, DiffWriterError> {
    let Some(last) = next.checked_sub(1) else {
        // Nothing written yet: block 0 adds the genesis state.
        return Ok(LatticeHash::zero());
    };
    let mark = archive.read_lattice()?.ok_or_else(|| {
        DiffWriterError::Commitment(format!(
            "the archive holds diffs through block {last} and no state-commitment mark (an \
             archive written without `--state-commitment`); {LATTICE_REMEDY}, or run with \
             `--state-commitment off`"
        ))
    })?;
    if mark.block > last {
        return Err(DiffWriterError::Commitment(format!(
            "the state-commitment mark stands at block {}, after the index log's last record \
             ({last}); {LATTICE_REMEDY}",
            mark.block
        )));
    }
    let mut lattice = mark.lattice;
    for number in mark.block + 1..=last {
        let (changes, prior) = changes_from_history(node, number)?;
        let delta = lattice_delta(&changes, &prior, 0, &[], true)
            .map_err(|e| DiffWriterError::Commitment(format!("block {number}: {e}")))?;
        lattice.add(&delta);
    }
    let len = index.len().unwrap_or(0);
    if mark.index_len > len {
        return Err(DiffWriterError::Commitment(format!(
            "the state-commitment mark counts {} index keys, the log {len}; {LATTICE_REMEDY}",
            mark.index_len
        )));
    }
    let entries = index_lattice(index, mark.index_len, len)
        .map_err(|e| DiffWriterError::Commitment(e.to_string()))?;
    lattice.add(&entries);
    if mark.block < last {
        info!(
            from = mark.block,
            to = last,
            "moved the state commitment from its mark to the index log's last record"
        );
    }
    Ok(lattice)
}

/// Where and how diffs are written.
#[derive(Debug, Clone)]
pub struct DiffConfig {
    /// The archive directory (`DATADIR/archive` by default).
    pub dir: std::path::PathBuf,
    /// Keep only the newest this many blocks' files (`None`: keep everything).
    pub retain: Option<u64>,
    /// zstd level of the files.
    pub compression: Compression,
    /// Keep the state's lattice hash and sign it into every diff (`--state-commitment`):
    /// what snapshots are checked against. Off only to measure what it costs.
    pub commitment: bool,
}

/// One published diff, as the WebSocket stream sends it.
#[derive(Debug, Clone)]
pub struct PublishedDiff {
    /// Block number.
    pub number: u64,
    /// The diff file's bytes.
    pub bytes: Bytes,
}

/// The diff writer's metrics.
#[derive(Debug, Clone)]
pub struct DiffMetrics {
    /// Diffs written.
    pub written: Counter,
    /// Bytes of diff files written.
    pub diff_bytes: Counter,
    /// Bytes of packed bodies before compression.
    pub body_bytes: Counter,
    /// Bytes of transactions-and-receipts files written.
    pub block_bytes: Counter,
    /// Seconds to encode one block's diff.
    pub encode_seconds: Histogram,
    /// Seconds to move the state commitment by one block and sign it.
    pub commitment_seconds: Histogram,
    /// CPU seconds of the same, on the diff writer's thread (the wall time above also counts
    /// the time the thread waited for a core).
    pub commitment_cpu_seconds: Counter<f64, AtomicU64>,
    /// Seconds to write one block's two files durably.
    pub write_seconds: Histogram,
    /// Blocks rebuilt from the chain history (at start or after falling behind).
    pub rebuilt: Counter,
    /// Keys in the enumeration index.
    pub index_keys: Gauge,
    /// Bytes of the enumeration index in memory.
    pub index_bytes: Gauge,
    /// The newest block with a published diff.
    pub head: Gauge,
}

impl Default for DiffMetrics {
    fn default() -> Self {
        Self {
            written: Counter::default(),
            diff_bytes: Counter::default(),
            body_bytes: Counter::default(),
            block_bytes: Counter::default(),
            encode_seconds: Histogram::new(exponential_buckets(20e-6, 1.5, 30)),
            commitment_seconds: Histogram::new(exponential_buckets(20e-6, 1.5, 30)),
            commitment_cpu_seconds: Counter::default(),
            write_seconds: Histogram::new(exponential_buckets(20e-6, 1.5, 30)),
            rebuilt: Counter::default(),
            index_keys: Gauge::default(),
            index_bytes: Gauge::default(),
            head: Gauge::default(),
        }
    }
}

impl DiffMetrics {
    /// Registers under `gigas_diffs_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("gigas_diffs");
        r.register("written", "State diffs written", self.written.clone());
        r.register(
            "diff_bytes",
            "Bytes of diff files written",
            self.diff_bytes.clone(),
        );
        r.register(
            "body_bytes",
            "Bytes of packed diff bodies before zstd",
            self.body_bytes.clone(),
        );
        r.register(
            "block_bytes",
            "Bytes of transactions-and-receipts files written",
            self.block_bytes.clone(),
        );
        r.register(
            "encode_seconds",
            "Seconds to encode one block's diff",
            self.encode_seconds.clone(),
        );
        r.register(
            "commitment_seconds",
            "Seconds to move the state commitment by one block and sign it",
            self.commitment_seconds.clone(),
        );
        r.register(
            "commitment_cpu_seconds",
            "CPU seconds of the diff writer's thread moving the state commitment and signing it",
            self.commitment_cpu_seconds.clone(),
        );
        r.register(
            "write_seconds",
            "Seconds to write one block's files durably",
            self.write_seconds.clone(),
        );
        r.register(
            "rebuilt",
            "Diffs rebuilt from the chain history",
            self.rebuilt.clone(),
        );
        r.register(
            "index_keys",
            "Keys in the enumeration index",
            self.index_keys.clone(),
        );
        r.register(
            "index_bytes",
            "Bytes of the enumeration index in memory",
            self.index_bytes.clone(),
        );
        r.register(
            "head",
            "Newest block with a published diff",
            self.head.clone(),
        );
    }
}

/// What the HTTP and WebSocket side reads: the archive, its head and the live stream.
#[derive(Debug)]
pub struct DiffArchive {
    archive: Archive,
    head: RwLock<Option<ArchiveHead>>,
    /// Blocks below this have been removed by retention.
    oldest: AtomicU64,
    published: broadcast::Sender<PublishedDiff>,
    metrics: DiffMetrics,
}

impl DiffArchive {
    /// The archive's files.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// The newest published block, if any.
    pub fn head(&self) -> Option<ArchiveHead> {
        *self
            .head
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The oldest block whose files are kept.
    pub fn oldest(&self) -> u64 {
        self.oldest.load(Ordering::Acquire)
    }

    /// Every diff published from now on. A receiver that falls behind by the channel's
    /// capacity gets `Lagged` and reads the files it missed from the archive.
    pub fn subscribe(&self) -> broadcast::Receiver<PublishedDiff> {
        self.published.subscribe()
    }

    /// The writer's metrics.
    pub fn metrics(&self) -> &DiffMetrics {
        &self.metrics
    }
}

/// Writes each committed block's files. Create with [`DiffWriter::open`], run with
/// [`DiffWriter::run`].
#[derive(Debug)]
pub struct DiffWriter {
    node: Arc<Node>,
    shared: Arc<DiffArchive>,
    index: MemoryKeyIndex,
    log: KeyLog,
    config: DiffConfig,
    /// The next block to write.
    next: u64,
    last_record: u64,
    /// The last block whose index record is known durable.
    last_synced: u64,
    /// The lattice hash of the state after block `next - 1` (`None`: no state commitment).
    lattice: Option<LatticeHash>,
    /// Whether the archive holds a lattice mark: until it does, every record is synced and
    /// marks it, so that a restart always finds one at or before the log's last record.
    marked: bool,
}

fn encode_keys(keys: &[StateKey]) -> Vec<u8> {
    let mut out = Vec::with_capacity(keys.len() * 53);
    for key in keys {
        match key {
            StateKey::Account(address) => {
                out.push(0);
                out.extend_from_slice(address.as_slice());
            }
            StateKey::Slot(address, slot) => {
                out.push(1);
                out.extend_from_slice(address.as_slice());
                out.extend_from_slice(&slot.to_be_bytes::<32>());
            }
        }
    }
    out
}

fn decode_keys(mut bytes: &[u8]) -> Option<Vec<StateKey>> {
    let mut keys = Vec::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        let address = Address::from_slice(rest.get(..20)?);
        match tag {
            0 => {
                keys.push(StateKey::Account(address));
                bytes = &rest[20..];
            }
            1 => {
                let slot = U256::from_be_slice(rest.get(20..52)?);
                keys.push(StateKey::Slot(address, slot));
                bytes = &rest[52..];
            }
            _ => return None,
        }
    }
    Some(keys)
}

/// What [`rebuild_key_log`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLogRebuild {
    /// The block the new log's one record stands at (the source's head).
    pub block: u64,
    /// Keys it holds.
    pub keys: u64,
    /// Where the old log went, if there was one.
    pub old_log: Option<std::path::PathBuf>,
    /// The newest block of the history: the writer re-encodes `block + 1 ..= head` at its
    /// next start.
    pub head: u64,
}

/// Writes a new `keys.log` for the archive in `archive_dir` from `index`, the enumeration
/// index of a node that applied this chain's diffs through block `block` (hash `hash`): a
/// full node's state database holds exactly the sequencer's index, since it built it from the
/// same files. The remedy for a log that is damaged or lost, where re-encoding the archive
/// from genesis cannot work because the history keeps only `--state-history` blocks.
///
/// Checks that `block` is this chain's (`history` has it with that hash), that the archive has
/// its diff, and that the history still keeps the state after it, from which the writer
/// re-encodes every later block at its next start. The new log holds one record (block
/// `block`, every key in index order); it is synced and renamed over the old, which is kept
/// beside it as `keys.log.old-UNIXTIME`. The state-commitment mark is set to the source's
/// `lattice` at the same block (removed when the source keeps none: the sequencer then runs
/// only with `--state-commitment off`). The sequencer must not be running.
pub fn rebuild_key_log<I: KeyIndex + ?Sized>(
    archive_dir: &std::path::Path,
    history: &gigas_history::History,
    block: u64,
    hash: alloy_primitives::B256,
    index: &I,
    lattice: Option<&LatticeHash>,
) -> Result<KeyLogRebuild, DiffWriterError> {
    let hist = |e: gigas_history::HistoryError| DiffWriterError::History(e.to_string());
    let ours = history.sealed_header(block).map_err(hist)?.ok_or_else(|| {
        DiffWriterError::KeyLog(format!(
            "the source's head, block {block}, is not in this sequencer's history: it is ahead \
             of this sequencer or follows another chain"
        ))
    })?;
    if ours.hash != hash {
        return Err(DiffWriterError::KeyLog(format!(
            "the source's block {block} is {hash}, this sequencer's is {}: it follows another \
             chain",
            ours.hash
        )));
    }
    let head = history.head().map_err(hist)?.unwrap_or(0);
    let oldest = history.oldest_state_block().map_err(hist)?;
    if block < oldest && block < head {
        return Err(DiffWriterError::KeyLog(format!(
            "the source is at block {block}, but the history keeps state from block {oldest} \
             only, and the blocks after {block} must be encoded again from the state before \
             each: use a source nearer the head ({head})"
        )));
    }
    let archive = Archive::open(archive_dir)?;
    if !archive.contains(FileKind::Diff, block) {
        return Err(DiffWriterError::KeyLog(format!(
            "the archive in {} has no diff of block {block}",
            archive_dir.display()
        )));
    }
    let read = |e: gigas_statediff::StoreError| {
        DiffWriterError::KeyLog(format!("reading the source's index: {e}"))
    };
    let len = index.len().map_err(read)?;
    let mut keys = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    for i in 0..len {
        let key = index.key_at(i).map_err(read)?.ok_or_else(|| {
            DiffWriterError::KeyLog(format!("the source's index has no key {i} of {len}"))
        })?;
        keys.push(key);
    }
    let path = archive_dir.join("keys.log");
    let tmp = archive_dir.join("keys.log.rebuild");
    let io = |what: &'static str, p: &std::path::Path| {
        let p = p.to_path_buf();
        move |e: std::io::Error| DiffWriterError::KeyLog(format!("{what} {}: {e}", p.display()))
    };
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("remove", &tmp)(e)),
    }
    {
        let mut log = KeyLog::open(&tmp, u64::MAX, |_, _| Ok(()))?;
        log.append(block, &encode_keys(&keys))?;
        log.sync()?;
    }
    let old_log = if path.exists() {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let aside = archive_dir.join(format!("keys.log.old-{unix}"));
        std::fs::rename(&path, &aside).map_err(io("move aside", &path))?;
        Some(aside)
    } else {
        None
    };
    std::fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    std::fs::File::open(archive_dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", archive_dir))?;
    match lattice {
        Some(lattice) => archive.write_lattice(&LatticeMark {
            block,
            index_len: len,
            lattice: lattice.clone(),
        })?,
        None => {
            let mark = archive_dir.join("lattice");
            match std::fs::remove_file(&mark) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove", &mark)(e)),
            }
        }
    }
    Ok(KeyLogRebuild {
        block,
        keys: len,
        old_log,
        head,
    })
}

impl DiffWriter {
    /// Opens the archive, replays the index log, and returns the writer and the handle the
    /// HTTP side serves from. Nothing is written yet: [`DiffWriter::run`] first rebuilds what
    /// the archive lacks.
    pub fn open(
        node: Arc<Node>,
        config: DiffConfig,
    ) -> Result<(Self, Arc<DiffArchive>), DiffWriterError> {
        let archive = Archive::open(&config.dir)?;
        let newest = archive.range(FileKind::Diff)?;
        let mut index = MemoryKeyIndex::new();
        let mut bad_log = None;
        let log = KeyLog::open(
            &config.dir.join("keys.log"),
            newest.map_or(0, |r| r.1),
            |block, payload| {
                match decode_keys(payload) {
                    Some(keys) => {
                        if let Err(e) = index.extend(&keys) {
                            bad_log = Some(format!("block {block}: {e}"));
                        }
                    }
                    None => bad_log = Some(format!("block {block}: a key record is malformed")),
                }
                Ok(())
            },
        );
        let log = log.map_err(|e| match e {
            ArchiveError::KeyLog { .. } => DiffWriterError::KeyLog(format!("{e}; {REMEDY}")),
            other => DiffWriterError::Archive(other),
        })?;
        if let Some(reason) = bad_log {
            return Err(DiffWriterError::KeyLog(format!("{reason}; {REMEDY}")));
        }
        // Blocks after the last record are encoded again (same bytes, see the module doc).
        let next = log.last_block().map_or(0, |b| b + 1);
        let metrics = DiffMetrics::default();
        metrics
            .index_keys
            .set(index.len().unwrap_or_default() as i64);
        metrics
            .index_bytes
            .set(i64::try_from(index.memory_bytes()).unwrap_or(i64::MAX));
        let oldest = newest.map_or(0, |r| r.0);
        let (published, _) = broadcast::channel(256);
        let shared = Arc::new(DiffArchive {
            archive,
            head: RwLock::new(None),
            oldest: AtomicU64::new(oldest),
            published,
            metrics,
        });
        if let Some(prev) = next.checked_sub(1) {
            if let Some(sealed) = node
                .history()
                .sealed_header(prev)
                .map_err(|e| DiffWriterError::History(e.to_string()))?
            {
                shared.set_head(ArchiveHead {
                    number: prev,
                    hash: sealed.hash,
                    state_root: sealed.header.state_root,
                });
            }
        }
        let lattice = if config.commitment {
            Some(resume_lattice(&node, &shared.archive, &index, next)?)
        } else {
            None
        };
        let marked = shared.archive.read_lattice()?.is_some();
        let handle = shared.clone();
        Ok((
            Self {
                node,
                shared,
                index,
                log,
                config,
                next,
                last_record: next.saturating_sub(1),
                last_synced: next.saturating_sub(1),
                lattice,
                marked,
            },
            handle,
        ))
    }

    /// Writes every block the archive lacks, then each committed block as it comes, until
    /// `stop` turns true; then writes up to the node's head and returns. Blocking work runs
    /// in place on the runtime's worker (multi-threaded runtime required).
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<(), DiffWriterError> {
        // Subscribe before catching up, so no block falls between the two.
        let mut committed = self.node.subscribe_committed();
        let head = self.node.head_number();
        tokio::task::block_in_place(|| self.rebuild_through(head))?;
        loop {
            tokio::select! {
                received = committed.recv() => match received {
                    Ok(block) => tokio::task::block_in_place(|| self.on_committed(&block))?,
                    // The next block received (or the stop) rebuilds what was missed.
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        warn!(missed = n, "the diff writer fell behind; rebuilding from history");
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                }
            }
        }
        let head = self.node.head_number();
        tokio::task::block_in_place(|| {
            self.rebuild_through(head)?;
            // The last block gets a record, so that the lattice mark stands where the next
            // start resumes and nothing is summed again.
            let last = self.next.checked_sub(1);
            if let (Some(last), Some(_)) = (last, &self.lattice) {
                if self.log.last_block() != Some(last) {
                    self.log.append(last, &[])?;
                    self.last_record = last;
                }
            }
            self.log.sync()?;
            self.last_synced = self.last_record;
            if let Some(last) = last {
                self.write_lattice_mark(last)?;
            }
            Ok::<(), DiffWriterError>(())
        })?;
        info!(head = self.next.saturating_sub(1), "diff writer stopped");
        Ok(())
    }

    fn on_committed(&mut self, block: &CommittedBlock) -> Result<(), DiffWriterError> {
        let number = block.header.number;
        if number < self.next {
            return Ok(());
        }
        if number > self.next {
            self.rebuild_through(number - 1)?;
        }
        let file = BlockFile {
            number,
            hash: block.hash,
            transactions: block
                .transactions
                .iter()
                .map(|t| t.inner().clone())
                .collect(),
            receipts: block.receipts.clone(),
        };
        self.write_block(
            &block.header,
            &block.signature,
            &block.changes,
            Some(&block.hashed),
            &block.prior,
            &file,
        )
    }

    /// Encodes blocks `self.next..=through` from the chain history.
    fn rebuild_through(&mut self, through: u64) -> Result<(), DiffWriterError> {
        if self.next > through {
            return Ok(());
        }
        let (from, count) = (self.next, through + 1 - self.next);
        if count > 1 {
            info!(from, through, "writing state diffs from the chain history");
        }
        let history = |e: gigas_history::HistoryError| DiffWriterError::History(e.to_string());
        while self.next <= through {
            let number = self.next;
            let node = self.node.clone();
            let history_db = node.history();
            let missing = || DiffWriterError::History(format!("block {number} is missing"));
            let sealed = history_db
                .sealed_header(number)
                .map_err(history)?
                .ok_or_else(missing)?;
            let (changes, prior) = changes_from_history(&self.node, number)?;
            let file = BlockFile {
                number,
                hash: sealed.hash,
                transactions: history_db
                    .transactions(number)
                    .map_err(history)?
                    .ok_or_else(missing)?
                    .into_iter()
                    .map(|t| t.into_inner())
                    .collect(),
                receipts: history_db
                    .receipts(number)
                    .map_err(history)?
                    .ok_or_else(missing)?,
            };
            self.write_block(
                &sealed.header,
                &sealed.signature,
                &changes,
                None,
                &prior,
                &file,
            )?;
            self.shared.metrics.rebuilt.inc();
        }
        if count > 1 {
            info!(from, through, "state diffs written from the chain history");
        }
        Ok(())
    }

    /// `hashed`: the keccak of `changes`' keys, when the producer computed them already (for
    /// its state root); else they are computed here if the commitment needs them.
    #[allow(clippy::too_many_arguments)]
    fn write_block(
        &mut self,
        header: &alloy_consensus::Header,
        signature: &alloy_primitives::Signature,
        changes: &ChangeSet,
        hashed: Option<&HashedKeys>,
        prior: &PriorValues,
        file: &BlockFile,
    ) -> Result<(), DiffWriterError> {
        let number = header.number;
        debug_assert_eq!(number, self.next);
        let hash = header.hash_slow();
        let t = Instant::now();
        let mut packed = pack_diff(header, signature, changes, &self.index, prior)?;
        let mut encode_seconds = t.elapsed().as_secs_f64();
        let shared = Arc::clone(&self.shared);
        let metrics = &shared.metrics;
        // The state commitment moves with the block; it is kept only once the files are
        // written, so that a failed write leaves it at the block before.
        let t = Instant::now();
        let cpu = thread_cpu_seconds();
        let moved = match &self.lattice {
            Some(before) => {
                let delta = if number == 0 {
                    // Block 0 changes nothing: its commitment is the genesis state's.
                    self.node
                        .config()
                        .chain
                        .genesis_lattice()
                        .map_err(|e| DiffWriterError::Commitment(e.to_string()))?
                } else {
                    let owned;
                    let hashed = match hashed {
                        Some(h) => h,
                        None => {
                            owned = HashedKeys::of(changes);
                            &owned
                        }
                    };
                    lattice_delta_hashed(
                        changes,
                        hashed,
                        prior,
                        self.index.len().unwrap_or(0),
                        &packed.new_keys,
                        false,
                    )
                    .map_err(|e| DiffWriterError::Commitment(format!("block {number}: {e}")))?
                };
                let mut after = before.clone();
                after.add(&delta);
                let checksum = after.checksum();
                let signature = self
                    .node
                    .sign_commitment(number, &hash, &checksum)
                    .map_err(|e| DiffWriterError::Commitment(e.to_string()))?;
                packed.file.commitment = Some(StateCommitment {
                    lattice: checksum,
                    signature,
                });
                Some(after)
            }
            None => None,
        };
        metrics
            .commitment_seconds
            .observe(t.elapsed().as_secs_f64());
        if let (Some(before), Some(after)) = (cpu, thread_cpu_seconds()) {
            metrics
                .commitment_cpu_seconds
                .inc_by((after - before).max(0.0));
        }
        let t = Instant::now();
        let diff = packed.finish(&self.config.compression)?;
        let block_bytes = file.encode(&self.config.compression)?;
        // One observation per block: packing and framing, the commitment apart.
        encode_seconds += t.elapsed().as_secs_f64();
        metrics.encode_seconds.observe(encode_seconds);

        let t = Instant::now();
        let archive = &shared.archive;
        archive.write(FileKind::Block, number, &block_bytes)?;
        archive.write(FileKind::Diff, number, &diff.bytes)?;
        // Only now that the diff is durable may its keys enter the log (see the module doc).
        if !diff.new_keys.is_empty() || number >= self.last_record + MARK_EVERY {
            self.log.append(number, &encode_keys(&diff.new_keys))?;
            self.last_record = number;
            // Off the producer's path: a sync every few hundred blocks bounds what a power
            // loss can take from the log (see MIN_STATE_HISTORY).
        }
        self.index
            .extend(&diff.new_keys)
            .map_err(|e| DiffWriterError::KeyLog(e.to_string()))?;
        if moved.is_some() {
            self.lattice = moved;
        }
        let first_mark = self.lattice.is_some() && !self.marked;
        if self.last_record == number && (first_mark || number >= self.last_synced + SYNC_EVERY) {
            self.log.sync()?;
            self.last_synced = number;
            self.write_lattice_mark(number)?;
        }
        metrics.write_seconds.observe(t.elapsed().as_secs_f64());

        metrics.written.inc();
        metrics.diff_bytes.inc_by(diff.bytes.len() as u64);
        metrics.body_bytes.inc_by(diff.body_len as u64);
        metrics.block_bytes.inc_by(block_bytes.len() as u64);
        metrics
            .index_keys
            .set(self.index.len().unwrap_or_default() as i64);
        metrics
            .index_bytes
            .set(i64::try_from(self.index.memory_bytes()).unwrap_or(i64::MAX));
        metrics.head.set(number as i64);
        self.shared.set_head(ArchiveHead {
            number,
            hash,
            state_root: header.state_root,
        });
        if let Some(head) = self.shared.head() {
            archive.write_head(&head)?;
        }
        let _ = self.shared.published.send(PublishedDiff {
            number,
            bytes: Bytes::from(diff.bytes),
        });
        self.next = number + 1;
        self.apply_retention()?;
        Ok(())
    }

    /// Durably records the state commitment at `block`, the log's last record and the last
    /// block written (the next start resumes there).
    fn write_lattice_mark(&mut self, block: u64) -> Result<(), DiffWriterError> {
        let Some(lattice) = &self.lattice else {
            return Ok(());
        };
        debug_assert_eq!(block, self.last_record);
        self.shared.archive.write_lattice(&LatticeMark {
            block,
            index_len: self.index.len().unwrap_or(0),
            lattice: lattice.clone(),
        })?;
        self.marked = true;
        Ok(())
    }

    fn apply_retention(&mut self) -> Result<(), DiffWriterError> {
        let Some(retain) = self.config.retain else {
            return Ok(());
        };
        let keep_from = self.next.saturating_sub(retain.max(1));
        let oldest = self.shared.oldest();
        if keep_from > oldest {
            // Raise the watermark first, so that a reader never looks for a file being removed.
            self.shared.oldest.store(keep_from, Ordering::Release);
            self.shared.archive.remove_range(oldest, keep_from)?;
        }
        Ok(())
    }
}

impl DiffArchive {
    fn set_head(&self, head: ArchiveHead) {
        *self
            .head
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(head);
    }
}

/// CPU seconds of the calling thread (`None` where the clock cannot be read). The commitment
/// runs on this thread alone (its delta is summed serially here), so the difference of two
/// readings around it is its CPU.
fn thread_cpu_seconds() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    ok.then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}
