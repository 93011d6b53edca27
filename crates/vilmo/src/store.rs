//! The store: opening and recovery, commits, compaction, reads, and sync from logs.
//!
//! # How state evolves
//!
//! Every change to the in-memory state (the index, live bytes per file, which files protect
//! which) is made by *applying a record that is on disk*, in log order, by the same functions
//! whether the record was just committed or is being replayed on open. Commit only decides
//! which records to write; recovery never decides anything. That is what makes a reopened
//! store continue exactly as one that never stopped, and two stores fed the same batches write
//! the same bytes.
//!
//! # Why nullify records exist
//!
//! A dead record in an old file must never come back on replay. A newer record of the same key
//! hides it only while that newer record's file exists; compaction may remove the newer file
//! first. So a dead put keeps a *duty* to protect the file holding the version it superseded
//! (its `supersedes` field), and a delete is a nullify record naming the file of the version it
//! killed. When compaction rewrites a file, a dead put whose protected file still exists becomes
//! a nullify record, and a nullify whose target still exists is copied; both are dropped once
//! their target is gone. Live bytes count these duties, so a file full of them is not mistaken
//! for garbage.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::format::*;
use crate::index::{Index, Location};
use crate::metrics::Metrics;
use crate::recovery::{self, Scan};
use crate::storage::{FsStorage, Storage, StorageFile};

/// How the store behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A new log file is started when the current one would grow past this many bytes.
    pub target_file_size: u64,
    /// A log file is compacted when its live bytes fall under this percentage of its size;
    /// 0 turns compaction off.
    pub compaction_threshold_percent: u8,
    /// How many bytes of the file being compacted each batch reads at most, unless three times
    /// the batch's own bytes is more (so that compaction keeps up with any write rate; at least
    /// one record): the bound on compaction work per batch. Compaction stops between records,
    /// so a batch of any size is compacted in steps of this bound.
    pub compaction_bytes_per_batch: u64,
    /// Whether `commit` waits for `fdatasync`. Only tests and CPU benchmarks turn it off.
    pub durable: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            target_file_size: 256 << 20,
            compaction_threshold_percent: 60,
            // About 25 ms of work per batch on a 2-vCPU VM (0.7 µs per record read); 24 MiB
            // made a 150 ms pause in the sequencer's commit under the store's write lock.
            compaction_bytes_per_batch: 4 << 20,
            durable: true,
        }
    }
}

impl Options {
    fn validate(&self) -> Result<()> {
        if self.target_file_size < 4096 || self.target_file_size > (3u64 << 30) {
            return Err(Error::InvalidOption(format!(
                "target_file_size {} must be between 4 KiB and 3 GiB",
                self.target_file_size
            )));
        }
        if self.compaction_threshold_percent > 99 {
            return Err(Error::InvalidOption(format!(
                "compaction_threshold_percent {} must be between 0 (off) and 99",
                self.compaction_threshold_percent
            )));
        }
        Ok(())
    }
}

/// Keys and values are limited by the record format.
pub const MAX_KEY_LEN: usize = u16::MAX as usize;

/// The most encode-buffer capacity kept between batches.
const KEEP_BUFFER: usize = 16 << 20;
/// The largest value.
pub const MAX_VALUE_LEN: usize = (u32::MAX >> 2) as usize;
/// The largest encoded batch (offsets in the index are 32-bit).
pub(crate) const MAX_BATCH_LEN: usize = 1 << 31;

/// A set of puts and deletes, committed together.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    data: Vec<u8>,
    ops: Vec<Op>,
}

#[derive(Debug, Clone, Copy)]
struct Op {
    key_at: u32,
    key_len: u16,
    value_at: u32,
    value_len: u32,
    delete: bool,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty batch with room for `ops` operations of about `bytes` bytes in total.
    pub fn with_capacity(ops: usize, bytes: usize) -> Self {
        Self {
            data: Vec::with_capacity(bytes),
            ops: Vec::with_capacity(ops),
        }
    }

    /// Sets `key` to `value`. A later operation on the same key in this batch wins.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.push(key, value, false)
    }

    /// Deletes `key`. Deleting an absent key writes nothing.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.push(key, &[], true)
    }

    fn push(&mut self, key: &[u8], value: &[u8], delete: bool) -> Result<()> {
        if key.len() > MAX_KEY_LEN {
            return Err(Error::TooLarge {
                what: "key",
                len: key.len(),
                limit: MAX_KEY_LEN,
            });
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::TooLarge {
                what: "value",
                len: value.len(),
                limit: MAX_VALUE_LEN,
            });
        }
        if self.data.len() + key.len() + value.len() > MAX_BATCH_LEN {
            return Err(Error::TooLarge {
                what: "batch",
                len: self.data.len() + key.len() + value.len(),
                limit: MAX_BATCH_LEN,
            });
        }
        let key_at = self.data.len() as u32;
        self.data.extend_from_slice(key);
        let value_at = self.data.len() as u32;
        self.data.extend_from_slice(value);
        self.ops.push(Op {
            key_at,
            key_len: key.len() as u16,
            value_at,
            value_len: value.len() as u32,
            delete,
        });
        Ok(())
    }

    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn key(&self, op: &Op) -> &[u8] {
        &self.data[op.key_at as usize..op.key_at as usize + op.key_len as usize]
    }

    fn value(&self, op: &Op) -> &[u8] {
        &self.data[op.value_at as usize..op.value_at as usize + op.value_len as usize]
    }

    /// Sorts by key, keeping only the last operation on each key.
    fn canonicalize(&mut self) {
        let data = &self.data;
        let key = |op: &Op| &data[op.key_at as usize..op.key_at as usize + op.key_len as usize];
        // Callers that already sort their keys (the sequencer's ChangeSet is sorted) pay one
        // linear check.
        if self.ops.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
            return;
        }
        // Stable: equal keys stay in insertion order, so the last one is the one kept.
        self.ops.sort_by(|a, b| key(a).cmp(key(b)));
        let mut out: Vec<Op> = Vec::with_capacity(self.ops.len());
        for op in self.ops.drain(..) {
            match out.last_mut() {
                Some(last) if key(last) == key(&op) => *last = op,
                _ => out.push(op),
            }
        }
        self.ops = out;
    }
}

/// A durable batch: its number and the chained checksum that all nodes can compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Batch number, from 1; 0 for an empty store.
    pub number: u64,
    /// The checksum of this batch chained over every batch before it.
    pub checksum: Checksum,
}

impl Commit {
    /// The checksum as hex.
    pub fn checksum_hex(&self) -> String {
        self.checksum.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Sizes of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Live keys.
    pub keys: usize,
    /// Log files.
    pub files: usize,
    /// Bytes of all log files.
    pub disk_bytes: u64,
    /// Bytes of log records still needed.
    pub live_bytes: u64,
    /// Bytes of the in-memory index.
    pub index_bytes: usize,
    /// Bytes of the batch encode buffer kept for reuse (at most 16 MiB).
    pub buffer_bytes: usize,
}

struct LogFile<F: StorageFile> {
    path: PathBuf,
    file: F,
    map: F::Map,
    header: FileHeader,
    len: u64,
    last_batch: u64,
    last_checksum: Checksum,
}

impl<F: StorageFile> LogFile<F> {
    /// The file's durable bytes. The mapping may extend past them, reserved for appends; no
    /// slice ever reaches beyond the end of the file.
    #[inline]
    fn bytes(&self) -> &[u8] {
        &self.map[..self.len as usize]
    }

    fn span(&self) -> FileSpan {
        FileSpan {
            file_id: self.header.file_id,
            first_batch: self.header.first_batch,
            last_batch: self.last_batch,
            anchor: self.header.anchor,
            last: self.last_checksum,
        }
    }
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

use recovery::{file_name, hex};

/// The key of the record at `loc` in `files`. Locations in the index always point at validated
/// records of mapped files.
#[inline]
fn key_at<F: StorageFile>(files: &[Option<LogFile<F>>], loc: Location) -> &[u8] {
    match files.get(loc.file as usize).and_then(Option::as_ref) {
        Some(f) => record_key(&f.bytes()[loc.offset as usize..]),
        None => &[],
    }
}

/// The in-memory state that records are applied to.
#[derive(Default)]
struct State {
    index: Index,
    /// Live bytes per file id.
    live: Vec<u64>,
    /// Bytes of duties held by a file (dead puts and nullifies) protecting another file.
    protect: HashMap<(u32, u32), u64>,
    /// Files compacted away, with the file holding their drop record.
    drops: BTreeMap<u32, (FileSpan, u32)>,
    /// The file being compacted and where its compaction reads next.
    cursor: Option<(u32, ReadPos)>,
}

/// A Vilmo store in a directory, on the real file system unless another [`Storage`] is given.
pub struct Vilmo<S: Storage = FsStorage> {
    storage: S,
    /// Held for the store's life: a second open of the directory would truncate this store's
    /// batch in flight as a torn tail.
    _lock: S::Lock,
    dir: PathBuf,
    options: Options,
    files: Vec<Option<LogFile<S::File>>>,
    /// Files compacted away whose drop record is applied but not yet durable, or durable but
    /// not yet unlinked. A file is unlinked only once the batch that drops it is durable.
    unlink: Vec<PathBuf>,
    /// An unlink whose directory fsync failed; retried after the next durable batch.
    dir_unsynced: bool,
    recovery: Recovery,
    state: State,
    current: u32,
    last: Commit,
    buf: Vec<u8>,
    poisoned: bool,
    /// A batch is written and applied, and not yet finished ([`Vilmo::finish_commit`]).
    unsynced: bool,
    metrics: Metrics,
}

/// A batch written and applied by [`Vilmo::commit_unsynced`], not yet durable: make it so
/// with [`Unsynced::sync`], then give the outcome to [`Vilmo::finish_commit`].
#[must_use = "a batch that is never finished leaves the store refusing further commits"]
pub struct Unsynced<F> {
    number: u64,
    checksum: Checksum,
    file_id: u32,
    base: u64,
    path: PathBuf,
    /// A handle of the batch's file to fdatasync (`None` when the store is not durable).
    sync: Option<F>,
    applied: Result<()>,
    /// The file the batch's compaction work finished, if any.
    compacted: Option<u32>,
    total: usize,
    started: Instant,
    t_plan: std::time::Duration,
    t_encode: std::time::Duration,
    t_durable: std::time::Duration,
}

impl<F> std::fmt::Debug for Unsynced<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsynced")
            .field("number", &self.number)
            .field("bytes", &self.total)
            .finish_non_exhaustive()
    }
}

impl<F: StorageFile> Unsynced<F> {
    /// The batch's number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Makes the batch durable (fdatasync of its file); touches nothing of the store.
    pub fn sync(&self) -> std::io::Result<()> {
        match &self.sync {
            Some(file) => file.sync_data(),
            None => Ok(()),
        }
    }
}

/// Where a record to be written will go, and what it is.
enum Planned<'a> {
    Put {
        key: &'a [u8],
        value: &'a [u8],
        supersedes: u32,
        moved: bool,
        hint: Hint,
    },
    Nullify {
        key: &'a [u8],
        target: u32,
    },
    Drop(Box<FileSpan>),
    Cursor {
        victim: u32,
        next: u64,
    },
}

/// What [`Vilmo::encode`] made of a batch.
struct Encoded {
    /// Whether the batch starts a new file.
    rotate: bool,
    /// Its length in bytes.
    total: usize,
    /// Each record's offset in the batch, with its hint.
    kinds: Vec<(u32, Option<Hint>)>,
    checksum: Checksum,
}

/// What planning learned about a put's key, so that applying it need not look again.
#[derive(Debug, Clone, Copy)]
struct Hint {
    hash: u64,
    old: Option<Location>,
}

impl Planned<'_> {
    fn hint(&self) -> Option<Hint> {
        match self {
            Planned::Put { hint, .. } => Some(*hint),
            _ => None,
        }
    }

    fn record(&self) -> Record<'_> {
        match *self {
            Planned::Put {
                key,
                value,
                supersedes,
                moved,
                ..
            } => Record::Put {
                key,
                value,
                supersedes,
                moved,
            },
            Planned::Nullify { key, target } => Record::Nullify { key, target },
            Planned::Drop(ref span) => Record::Drop(**span),
            Planned::Cursor { victim, next } => Record::Cursor { victim, next },
        }
    }
}

impl<S: Storage> fmt::Debug for Vilmo<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vilmo")
            .field("dir", &self.dir)
            .field("keys", &self.len())
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

impl Vilmo<FsStorage> {
    /// Opens the store in `dir` on the real file system, creating the directory if needed.
    /// See [`Vilmo::open_with`].
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        Self::open_with(FsStorage, dir, options)
    }
}

/// What opening a store found and repaired: for logs, and for tests that must prove where a
/// crash landed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes of an unacknowledged last batch cut from the newest file.
    pub torn_bytes: u64,
    /// Whether the newest file was removed because its header never became durable.
    pub torn_file_removed: bool,
    /// Files compacted away whose drop record was durable but which were still present.
    pub dropped_files_removed: usize,
    /// Whether a compaction was under way (it continues with the next commit).
    pub compaction_in_progress: bool,
}

impl<S: Storage> Vilmo<S> {
    /// Opens the store in `dir` on `storage`, creating the directory if needed, and takes the
    /// directory's lock for the store's life.
    ///
    /// Every log file is first verified with ordinary reads (checksums, the chain across files
    /// and drop records, record bounds) without changing anything; only then is a torn tail of
    /// the newest file cut, the logs mapped and replayed into the index, and compacted files
    /// whose drop was durable unlinked. An open that fails leaves every log file as it was
    /// (but for a torn tail's cut).
    pub fn open_with(storage: S, dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let created = storage
            .create_dir_all(&dir)
            .map_err(io(&dir, "create directory"))?;
        if created {
            // The new directory's entry lives in its parent: without this a power loss can
            // take the whole store, acknowledged batches and all.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                storage
                    .sync_dir(parent)
                    .map_err(io(parent, "fsync parent directory"))?;
            }
        }
        let lock = storage.lock_dir(&dir).map_err(|source| {
            if source.kind() == std::io::ErrorKind::WouldBlock {
                Error::Locked { dir: dir.clone() }
            } else {
                io(&dir, "lock directory")(source)
            }
        })?;
        let mut ids = Vec::new();
        for name in storage.list_dir(&dir).map_err(io(&dir, "list directory"))? {
            match recovery::parse_file_name(&name) {
                Some(id) => ids.push(id),
                None if name.ends_with(".vlog") => {
                    tracing::warn!(dir = %dir.display(), name, "ignoring a file that is not named like a log file (eight digits and .vlog)");
                }
                None => {}
            }
        }
        ids.sort_unstable();

        // 1. Verify everything; change nothing.
        let newest = ids.last().copied();
        let mut handles = Vec::with_capacity(ids.len());
        let mut scans = Vec::with_capacity(ids.len());
        for &id in &ids {
            let path = dir.join(recovery::file_name(id));
            let file = storage.open(&path).map_err(io(&path, "open"))?;
            let len = file.size().map_err(io(&path, "stat"))?;
            let read = |buf: &mut [u8], at: u64| file.read_exact_at(buf, at);
            scans.push(recovery::scan_file(
                &read,
                len,
                &path,
                id,
                Some(id) == newest,
            )?);
            handles.push(file);
        }
        let (last_batch, last_checksum) = recovery::check_chain(&dir, &scans)?;

        let mut store = Self {
            storage,
            _lock: lock,
            dir,
            options,
            files: Vec::new(),
            unlink: Vec::new(),
            dir_unsynced: false,
            recovery: Recovery::default(),
            state: State::default(),
            current: 0,
            last: Commit {
                number: last_batch,
                checksum: if last_batch == 0 {
                    GENESIS
                } else {
                    last_checksum
                },
            },
            buf: Vec::new(),
            poisoned: false,
            unsynced: false,
            metrics: Metrics::default(),
        };

        // 2. Cut what a crash left unacknowledged, then map and replay.
        for (scan, mut file) in scans.into_iter().zip(handles) {
            let newest = Some(scan.id) == newest;
            if let Some(reason) = scan.torn {
                if scan.header.is_none() {
                    tracing::warn!(path = %scan.path.display(), reason, "removing a newest log file that never received a durable header");
                    drop(file);
                    store
                        .storage
                        .remove_file(&scan.path)
                        .map_err(io(&scan.path, "remove torn file"))?;
                    store
                        .storage
                        .sync_dir(&store.dir)
                        .map_err(io(&store.dir, "fsync directory"))?;
                    store.recovery.torn_file_removed = true;
                    continue;
                }
                tracing::warn!(path = %scan.path.display(), offset = scan.end, bytes = scan.len - scan.end, reason, "truncating the unacknowledged last batch");
                file.set_len(scan.end)
                    .map_err(io(&scan.path, "truncate torn tail"))?;
                file.sync_data()
                    .map_err(io(&scan.path, "fsync after truncate"))?;
                store.recovery.torn_bytes = scan.len - scan.end;
            }
            store.replay(scan, file, newest)?;
        }
        if let Some((victim, _)) = store.state.cursor {
            if store.file(victim).is_none() {
                return Err(Error::Corrupt {
                    path: store.dir.join(file_name(store.current_id())),
                    offset: 0,
                    reason: format!("the log ends compacting file {victim}, which is missing"),
                });
            }
        }
        store.recovery.compaction_in_progress = store.state.cursor.is_some();

        // 3. Files whose drop record was durable but which were not yet removed when the
        //    process stopped: their live records were all copied forward before the drop.
        store.recovery.dropped_files_removed = store.unlink.len();
        store.finish_unlinks()?;
        store.current = store.current_id();
        store.update_metrics();
        tracing::debug!(dir = %store.dir.display(), batch = store.last.number, keys = store.state.index.len(), recovery = ?store.recovery, "vilmo opened");
        Ok(store)
    }

    fn current_id(&self) -> u32 {
        self.files
            .iter()
            .flatten()
            .map(|f| f.header.file_id)
            .max()
            .unwrap_or(0)
    }

    /// What this open found and repaired.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    fn file(&self, id: u32) -> Option<&LogFile<S::File>> {
        self.files.get(id as usize).and_then(Option::as_ref)
    }

    fn exists(&self, id: u32) -> bool {
        id != NO_FILE && self.file(id).is_some()
    }

    fn live_mut(&mut self, id: u32) -> &mut u64 {
        let i = id as usize;
        if self.state.live.len() <= i {
            self.state.live.resize(i + 1, 0);
        }
        &mut self.state.live[i]
    }

    fn add_protect(&mut self, holder: u32, target: u32, bytes: u64) {
        if target == holder || !self.exists(target) || !self.exists(holder) {
            return;
        }
        *self.state.protect.entry((holder, target)).or_insert(0) += bytes;
        *self.live_mut(holder) += bytes;
    }

    /// Maps a verified file and applies its records. The bytes were verified by ordinary
    /// reads a moment ago; the records are read back through the map.
    fn replay(&mut self, scan: Scan, file: S::File, newest: bool) -> Result<()> {
        let Some(header) = scan.header else {
            return Ok(());
        };
        let id = scan.id;
        let reserve = if newest {
            self.options.target_file_size
        } else {
            0
        };
        let map = file
            .map(scan.end, reserve)
            .map_err(io(&scan.path, "mmap"))?;
        if self.files.len() <= id as usize {
            self.files.resize_with(id as usize + 1, || None);
        }
        self.files[id as usize] = Some(LogFile {
            path: scan.path.clone(),
            file,
            map,
            header,
            len: scan.end,
            last_batch: scan.last_batch,
            last_checksum: scan.last_checksum,
        });
        *self.live_mut(id) += FILE_HEADER_LEN as u64;
        let mut offset = FILE_HEADER_LEN;
        while (offset as u64) < scan.end {
            let (body_len, records) = {
                let Some(f) = self.file(id) else { break };
                let bh =
                    decode_batch_header(&f.bytes()[offset..]).map_err(|reason| Error::Corrupt {
                        path: scan.path.clone(),
                        offset: offset as u64,
                        reason: format!("batch changed between verification and replay: {reason}"),
                    })?;
                (bh.body_len as usize, bh.records)
            };
            let mut at = offset + BATCH_HEADER_LEN;
            for _ in 0..records {
                let (kind, rec_len) = {
                    let Some(f) = self.file(id) else { break };
                    match Record::decode(&f.bytes()[at..]) {
                        Ok((record, rec_len)) => (OwnedKind::of(&record), rec_len),
                        Err(reason) => {
                            return Err(Error::Corrupt {
                                path: scan.path.clone(),
                                offset: at as u64,
                                reason: format!(
                                    "record changed between verification and replay: {reason}"
                                ),
                            })
                        }
                    }
                };
                self.apply(id, at as u32, kind, rec_len as u64, None)?;
                at += rec_len;
            }
            offset += BATCH_HEADER_LEN + body_len + FOOTER_LEN;
        }
        Ok(())
    }

    /// Unlinks compacted files whose drop record is durable, then makes the removals durable.
    fn finish_unlinks(&mut self) -> Result<()> {
        if self.unlink.is_empty() && !self.dir_unsynced {
            return Ok(());
        }
        for path in std::mem::take(&mut self.unlink) {
            if let Err(e) = self.storage.remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    // Harmless: the next open removes a file its drop record names.
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove compacted log file; it will be removed on next open");
                }
            }
        }
        self.dir_unsynced = true;
        self.storage
            .sync_dir(&self.dir)
            .map_err(io(&self.dir, "fsync directory"))?;
        self.dir_unsynced = false;
        Ok(())
    }

    /// Applies one durable record at `(file, offset)`. The only place state changes.
    ///
    /// `hint` carries what commit already knows about a put's key; replay passes `None`.
    fn apply(
        &mut self,
        file: u32,
        offset: u32,
        kind: OwnedKind,
        len: u64,
        hint: Option<Hint>,
    ) -> Result<()> {
        match kind {
            OwnedKind::Put { moved } => {
                let loc = Location { file, offset };
                let files = &self.files;
                let Some(f) = files.get(file as usize).and_then(Option::as_ref) else {
                    return Ok(());
                };
                let key = record_key(&f.bytes()[offset as usize..]);
                let old = match hint {
                    Some(h) => self
                        .state
                        .index
                        .insert_hinted(h.hash, key, h.old, loc, |l| key_at(files, l)),
                    None => self.state.index.insert(key, loc, |l| key_at(files, l)),
                };
                *self.live_mut(file) += len;
                if let Some(old) = old {
                    self.kill(old, moved);
                }
            }
            OwnedKind::Nullify { target } => {
                let files = &self.files;
                let Some(f) = files.get(file as usize).and_then(Option::as_ref) else {
                    return Ok(());
                };
                let key = record_key(&f.bytes()[offset as usize..]);
                let hit = self
                    .state
                    .index
                    .get(key, |l| key_at(files, l))
                    .filter(|l| l.file == target);
                let removed = match hit {
                    Some(_) => self.state.index.remove(key, |l| key_at(files, l)),
                    None => None,
                };
                if let Some(old) = removed {
                    self.kill(old, false);
                }
                self.add_protect(file, target, len);
            }
            OwnedKind::Drop(span) => {
                let dropped = span.file_id;
                if let Some((_, holder)) = self.state.drops.get(&dropped).copied() {
                    let live = self.live_mut(holder);
                    *live = live.saturating_sub(DROP_LEN as u64);
                }
                self.state.drops.insert(dropped, (span, file));
                *self.live_mut(file) += DROP_LEN as u64;
                if self.state.cursor.map(|(v, _)| v) == Some(dropped) {
                    self.state.cursor = None;
                }
                // Duties protecting the dropped file, or held by it, end with it.
                let ended: Vec<(u32, u32)> = self
                    .state
                    .protect
                    .keys()
                    .filter(|(h, t)| *h == dropped || *t == dropped)
                    .copied()
                    .collect();
                for key in ended {
                    if let Some(bytes) = self.state.protect.remove(&key) {
                        let live = self.live_mut(key.0);
                        *live = live.saturating_sub(bytes);
                    }
                }
                // Unmapped now; unlinked only once this record is durable (see
                // `finish_unlinks`): a power loss may persist an unlink and lose the batch
                // that explains it.
                if let Some(slot) = self.files.get_mut(dropped as usize) {
                    if let Some(f) = slot.take() {
                        self.unlink.push(f.path.clone());
                    }
                }
                if let Some(live) = self.state.live.get_mut(dropped as usize) {
                    *live = 0;
                }
            }
            OwnedKind::Cursor { victim, next } => {
                // Compaction reads the victim from `next` on: in a file that exists it must be
                // a batch boundary, a record boundary inside a batch, or the end. During
                // replay the victim may already be gone, removed after a drop record later in
                // the log; `open` checks that no cursor is left naming a missing file.
                let Some(f) = self.file(victim) else {
                    let at = next as usize;
                    self.state.cursor = Some((victim, ReadPos { batch: at, at }));
                    return Ok(());
                };
                let from = match self.state.cursor {
                    Some((v, pos)) if v == victim => pos,
                    _ => ReadPos::START,
                };
                let Some(pos) = usize::try_from(next)
                    .ok()
                    .and_then(|next| from.seek(f.bytes(), next))
                else {
                    return Err(Error::Corrupt {
                        path: self.file(file).map(|f| f.path.clone()).unwrap_or_default(),
                        offset: u64::from(offset),
                        reason: format!("compaction cursor names byte {next} of file {victim}, which is neither a batch nor a record boundary"),
                    });
                };
                self.state.cursor = Some((victim, pos));
            }
        }
        Ok(())
    }

    /// The record at `old` died. Its duty (protecting the file of the version it superseded)
    /// stays with it, unless compaction is moving it forward, in which case the copy carries
    /// the duty.
    fn kill(&mut self, old: Location, by_move: bool) {
        let Some(f) = self.file(old.file) else { return };
        let (old_len, old_supersedes) = put_len_and_supersedes(&f.bytes()[old.offset as usize..]);
        let key_len = record_key(&f.bytes()[old.offset as usize..]).len();
        let live = self.live_mut(old.file);
        *live = live.saturating_sub(old_len as u64);
        let moved_from_victim = by_move && self.state.cursor.map(|(v, _)| v) == Some(old.file);
        if !moved_from_victim {
            self.add_protect(
                old.file,
                old_supersedes,
                (NULLIFY_HEADER_LEN + key_len) as u64,
            );
        }
    }

    /// The value of `key`, borrowed from the memory-mapped log.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let files = &self.files;
        let loc = self.state.index.get(key, |l| key_at(files, l))?;
        let f = self.file(loc.file)?;
        Some(put_value(&f.bytes()[loc.offset as usize..]))
    }

    /// Calls `f` with every live key and value, in no particular order.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) {
        for loc in self.state.index.locations() {
            if let Some(file) = self.file(loc.file) {
                let rec = &file.bytes()[loc.offset as usize..];
                f(record_key(rec), put_value(rec));
            }
        }
    }

    /// The last durable batch.
    pub fn last_commit(&self) -> Commit {
        self.last
    }

    /// Live keys.
    pub fn len(&self) -> usize {
        self.state.index.len()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.state.index.is_empty()
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The metrics, to register with the node's registry.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Sizes of the store.
    pub fn stats(&self) -> Stats {
        let files: Vec<&LogFile<S::File>> = self.files.iter().flatten().collect();
        Stats {
            keys: self.state.index.len(),
            files: files.len(),
            disk_bytes: files.iter().map(|f| f.len).sum(),
            live_bytes: files
                .iter()
                .map(|f| {
                    self.state
                        .live
                        .get(f.header.file_id as usize)
                        .copied()
                        .unwrap_or(0)
                })
                .sum(),
            index_bytes: self.state.index.memory_bytes(),
            buffer_bytes: self.buf.capacity(),
        }
    }

    /// The log files on disk, oldest first.
    pub fn log_files(&self) -> Vec<PathBuf> {
        self.files
            .iter()
            .flatten()
            .map(|f| f.path.clone())
            .collect()
    }

    fn update_metrics(&self) {
        let stats = self.stats();
        self.metrics.live_bytes.set(stats.live_bytes as i64);
        self.metrics
            .useless_bytes
            .set(stats.disk_bytes.saturating_sub(stats.live_bytes) as i64);
        self.metrics.files.set(stats.files as i64);
        self.metrics.keys.set(stats.keys as i64);
    }

    /// The file to compact next, if one has fallen under the threshold: the one with the
    /// smallest live share, the oldest on a tie. Only sizes and live bytes decide, so every
    /// node picks the same file.
    fn pick_victim(&self) -> Option<u32> {
        let pct = self.options.compaction_threshold_percent as u128;
        let mut best: Option<(u32, u128, u128)> = None;
        for f in self.files.iter().flatten() {
            let id = f.header.file_id;
            if id == self.current {
                continue;
            }
            let live = self.state.live.get(id as usize).copied().unwrap_or(0) as u128;
            let size = f.len as u128;
            if live * 100 >= size * pct {
                continue;
            }
            let better = match best {
                None => true,
                Some((_, bl, bs)) => live * bs < bl * size,
            };
            if better {
                best = Some((id, live, size));
            }
        }
        best.map(|(id, _, _)| id)
    }

    /// Commits `batch` durably and returns its number and chained checksum.
    pub fn commit(&mut self, batch: Batch) -> Result<Commit> {
        let unsynced = self.commit_unsynced(batch)?;
        let synced = unsynced.sync();
        self.finish_commit(unsynced, synced)
    }

    /// The first half of [`Vilmo::commit`]: plans, encodes and writes `batch`, and applies it
    /// to the index, so that reads already see it; it is not durable yet. The caller makes it
    /// durable with [`Unsynced::sync`] (which needs no access to the store: a caller that
    /// shares the store behind a lock releases the lock meanwhile, so that readers are not
    /// held up by the disk) and then hands the outcome to [`Vilmo::finish_commit`], before
    /// any other commit. Until then [`Vilmo::last_commit`] is the previous batch.
    ///
    /// Readers that see the unsynced batch see state no one has acknowledged yet: a caller
    /// that publishes what it commits (the sequencer) publishes after `finish_commit`.
    pub fn commit_unsynced(&mut self, mut batch: Batch) -> Result<Unsynced<S::File>> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        if self.unsynced {
            // A second batch before the first was finished would chain onto an unsynced one.
            self.poisoned = true;
            return Err(Error::Poisoned);
        }
        let started = Instant::now();
        let mut buf = std::mem::take(&mut self.buf);
        batch.canonicalize();
        let number = self.last.number + 1;

        // 1. The user's records, sorted by key.
        let mut planned = self.plan_records(&batch);
        let t_plan = started.elapsed();
        let own_records = planned.len();
        let own_len: usize = planned.iter().map(|p| p.record().encoded_len()).sum();
        // 2. Bounded, deterministic compaction work, resumed where the last batch stopped.
        let victim_done = self.plan_compaction(&batch, own_len, &mut planned);
        // 3. Encode, choosing the file.
        let encoded = self.encode(number, &mut planned, own_records, own_len, &mut buf);
        drop(planned);
        let Encoded {
            rotate,
            total,
            kinds,
            checksum,
        } = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                self.buf = buf;
                return Err(e);
            }
        };

        let t_encode = started.elapsed();
        // 4. Make it durable.
        let result = self.append(&buf, rotate, number);
        let t_durable = started.elapsed();
        // The buffer is kept for the next batch, but a batch far larger than a block's (a
        // genesis of a million accounts: 112 MiB) must not pin its size for the store's life.
        if buf.capacity() > KEEP_BUFFER {
            buf = Vec::new();
        }
        self.buf = buf;
        let (file_id, base) = match result {
            Ok(v) => v,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };

        // 5. Apply the records: reads see them from here on. The disk makes them durable in
        //    `Unsynced::sync`, and `finish_commit` acknowledges them.
        let (path, sync, applied) = self.apply_written(file_id, base, kinds)?;
        self.unsynced = true;
        Ok(Unsynced {
            number,
            checksum,
            file_id,
            base,
            path,
            sync,
            applied,
            compacted: victim_done.map(|span| span.file_id),
            total,
            started,
            t_plan,
            t_encode,
            t_durable,
        })
    }

    /// Phase 1 of a commit: the batch's own records, in its (sorted) order, each with what
    /// the index knows of its key.
    fn plan_records<'a>(&'a self, batch: &'a Batch) -> Vec<Planned<'a>> {
        let mut planned: Vec<Planned<'a>> = Vec::with_capacity(batch.ops.len() + 16);
        let files = &self.files;
        // Index lookups are read-only and each is a cache miss or two: spread them over the
        // cores.
        let index = &self.state.index;
        let lookups: Vec<(u64, Option<Location>)> = {
            use rayon::prelude::*;
            batch
                .ops
                .par_iter()
                .with_min_len(4096)
                .map(|op| {
                    let key = batch.key(op);
                    let hash = index.hash(key);
                    (hash, index.get_hashed(hash, key, |l| key_at(files, l)))
                })
                .collect()
        };
        for (op, &(hash, old)) in batch.ops.iter().zip(&lookups) {
            let key = batch.key(op);
            if op.delete {
                if let Some(old) = old {
                    planned.push(Planned::Nullify {
                        key,
                        target: old.file,
                    });
                }
                continue;
            }
            // The file of the previous version. Whether it is another file is only known
            // once the batch's own file is chosen (it may rotate), below.
            let supersedes = old.map_or(NO_FILE, |old| old.file);
            planned.push(Planned::Put {
                key,
                value: batch.value(op),
                supersedes,
                moved: false,
                hint: Hint { hash, old },
            });
        }
        planned
    }

    /// Phase 2 of a commit: the compaction work that rides on the batch (at most a budget of
    /// bytes of the victim file, resumed at its cursor), appended to `planned`; returns the
    /// victim's span when this step finished it.
    fn plan_compaction<'a>(
        &'a self,
        batch: &Batch,
        own_len: usize,
        planned: &mut Vec<Planned<'a>>,
    ) -> Option<FileSpan> {
        let files = &self.files;
        let budget = self
            .options
            .compaction_bytes_per_batch
            .max(own_len as u64 * 3);
        let mut victim_done = None;
        let cursor = self
            .state
            .cursor
            .or_else(|| self.pick_victim().map(|v| (v, ReadPos::START)));
        if let Some((victim, start)) = cursor {
            if let Some(vf) = self.file(victim) {
                let bytes = vf.bytes();
                let user_keys: Vec<&[u8]> = batch.ops.iter().map(|op| batch.key(op)).collect();
                let cursor_at = planned.len();
                planned.push(Planned::Cursor {
                    victim,
                    next: start.at as u64,
                });
                let budget_end = start.at.saturating_add(budget as usize);
                let mut pos = start;
                let mut read_any = false;
                while pos.at < bytes.len() && !(read_any && pos.at >= budget_end) {
                    // Verified bytes always hold whole batches and records; a failed decode
                    // (a can't-happen) stops the step rather than panic.
                    let Some((body_start, body_end, batch_end)) = pos.batch_bounds(bytes) else {
                        break;
                    };
                    let mut at = pos.at.max(body_start);
                    while at < body_end && !(read_any && at >= budget_end) {
                        let Some(Ok((record, rec_len))) =
                            bytes.get(at..body_end).map(Record::decode)
                        else {
                            break;
                        };
                        read_any = true;
                        let offset = at as u32;
                        match record {
                            Record::Put {
                                key,
                                value,
                                supersedes,
                                ..
                            } => {
                                let in_batch = user_keys.binary_search(&key).is_ok();
                                let live = !in_batch
                                    && self.state.index.get(key, |l| key_at(files, l))
                                        == Some(Location {
                                            file: victim,
                                            offset,
                                        });
                                let protects = supersedes != NO_FILE && self.exists(supersedes);
                                if live {
                                    planned.push(Planned::Put {
                                        key,
                                        value,
                                        supersedes: if protects { supersedes } else { NO_FILE },
                                        moved: true,
                                        hint: Hint {
                                            hash: self.state.index.hash(key),
                                            old: Some(Location {
                                                file: victim,
                                                offset,
                                            }),
                                        },
                                    });
                                } else if protects {
                                    planned.push(Planned::Nullify {
                                        key,
                                        target: supersedes,
                                    });
                                }
                            }
                            Record::Nullify { key, target } => {
                                if target != victim && self.exists(target) {
                                    planned.push(Planned::Nullify { key, target });
                                }
                            }
                            Record::Drop(span) => planned.push(Planned::Drop(Box::new(span))),
                            Record::Cursor { .. } => {}
                        }
                        at += rec_len;
                    }
                    if at < body_end {
                        pos.at = at;
                        break;
                    }
                    pos = ReadPos {
                        batch: batch_end,
                        at: batch_end,
                    };
                }
                planned[cursor_at] = Planned::Cursor {
                    victim,
                    next: pos.at as u64,
                };
                if pos.at >= bytes.len() {
                    victim_done = Some(vf.span());
                }
            }
        }
        if let Some(span) = victim_done {
            planned.push(Planned::Drop(Box::new(span)));
        }
        victim_done
    }

    /// Phase 3 of a commit: the batch's bytes in `buf` (header, records, footer with the
    /// chained checksum), and the file it goes to: the next one when it would push the
    /// current file past its target size.
    fn encode(
        &self,
        number: u64,
        planned: &mut [Planned<'_>],
        own_records: usize,
        own_len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<Encoded> {
        let body_len = own_len
            + planned[own_records..]
                .iter()
                .map(|p| p.record().encoded_len())
                .sum::<usize>();
        let total = BATCH_HEADER_LEN + body_len + FOOTER_LEN;
        if total > MAX_BATCH_LEN {
            return Err(Error::TooLarge {
                what: "batch",
                len: total,
                limit: MAX_BATCH_LEN,
            });
        }
        let rotate = match self.file(self.current) {
            None => true,
            Some(f) => {
                f.last_batch >= f.header.first_batch
                    && f.len + total as u64 > self.options.target_file_size
            }
        };
        buf.clear();
        buf.reserve(total);
        buf.extend_from_slice(&encode_batch_header(
            number,
            planned.len() as u32,
            body_len as u32,
        ));
        // A put that supersedes a version in its own file needs no protection: that version
        // sits before it in the same file and dies with it.
        let target_file = if rotate {
            self.current + 1
        } else {
            self.current
        };
        for p in planned.iter_mut() {
            if let Planned::Put {
                supersedes,
                moved: false,
                ..
            } = p
            {
                if *supersedes == target_file {
                    *supersedes = NO_FILE;
                }
            }
        }
        let mut kinds = Vec::with_capacity(planned.len());
        for p in planned.iter() {
            let record = p.record();
            let at = buf.len();
            record.encode_into(buf);
            kinds.push((at as u32, p.hint()));
        }
        let checksum = batch_checksum(
            &self.last.checksum,
            &buf[..BATCH_HEADER_LEN],
            &buf[BATCH_HEADER_LEN..],
        );
        buf.extend_from_slice(&FOOTER_MAGIC);
        buf.extend_from_slice(&checksum);
        Ok(Encoded {
            rotate,
            total,
            kinds,
            checksum,
        })
    }

    /// Phase 5 of a commit: the records just written, applied to the index (read back from
    /// the page cache), and the file's handle for the sync. An error applying them is
    /// returned in the last element, for [`Vilmo::finish_commit`] to report.
    fn apply_written(
        &mut self,
        file_id: u32,
        base: u64,
        kinds: Vec<(u32, Option<Hint>)>,
    ) -> Result<(PathBuf, Option<S::File>, Result<()>)> {
        let path = self
            .file(file_id)
            .map(|f| f.path.clone())
            .unwrap_or_default();
        let sync = match (
            self.options.durable,
            self.file(file_id).map(|f| f.file.try_clone()),
        ) {
            (false, _) | (true, None) => None,
            (true, Some(Ok(file))) => Some(file),
            (true, Some(Err(e))) => {
                self.poisoned = true;
                return Err(io(&path, "dup for fdatasync")(e));
            }
        };
        let mut applied = Ok(());
        for (at, hint) in kinds {
            let offset = base + at as u64;
            // Read the record back from the page cache rather than keep a copy of every
            // decoded record in memory.
            let decoded = self.file(file_id).map(|f| {
                Record::decode(&f.bytes()[offset as usize..])
                    .map(|(r, len)| (OwnedKind::of(&r), len))
            });
            let (kind, len) = match decoded {
                Some(Ok(v)) => v,
                Some(Err(reason)) => {
                    applied = Err(Error::Corrupt {
                        path: path.clone(),
                        offset,
                        reason: format!("record just written does not decode: {reason}"),
                    });
                    break;
                }
                None => break,
            };
            if let Err(e) = self.apply(file_id, offset as u32, kind, len as u64, hint) {
                applied = Err(e);
                break;
            }
        }
        Ok((path, sync, applied))
    }

    /// The second half of [`Vilmo::commit`]: acknowledges the batch `unsynced` wrote once
    /// `synced` (its [`Unsynced::sync`]) says it is durable, and returns its number and
    /// chained checksum. A failed sync cuts the file back to the last acknowledged batch and
    /// poisons the store.
    pub fn finish_commit(
        &mut self,
        unsynced: Unsynced<S::File>,
        synced: std::io::Result<()>,
    ) -> Result<Commit> {
        self.unsynced = false;
        let Unsynced {
            number,
            checksum,
            file_id,
            base,
            path,
            sync: _,
            applied,
            compacted,
            total,
            started,
            t_plan,
            t_encode,
            t_durable,
        } = unsynced;
        if let Err(e) = synced {
            // After a failed fdatasync the page cache still holds the whole, valid batch: a
            // reopen would keep a batch that was never acknowledged, later batches would build
            // on it, and a power loss could then leave a hole. Cut the file back to what was
            // acknowledged and make that durable.
            self.poisoned = true;
            self.unlink.clear();
            let cut = self
                .files
                .get_mut(file_id as usize)
                .and_then(Option::as_mut)
                .map(|f| f.file.set_len(base).and_then(|()| f.file.sync_data()));
            if let Some(Err(cut_error)) = cut {
                // Neither the batch nor its removal can be made durable: whatever a later open
                // finds, the disk may run ahead of what was acknowledged. Stop before anything
                // builds on that.
                tracing::error!(path = %path.display(), sync_error = %e, %cut_error, "fdatasync of a batch failed and the batch cannot be cut back; aborting so that no later write builds on an unacknowledged batch");
                std::process::abort();
            }
            tracing::error!(path = %path.display(), error = %e, offset = base, "fdatasync of a batch failed; cut the file back to the last acknowledged batch");
            return Err(io(&path, "fdatasync batch")(e));
        }
        if let Err(e) = applied {
            self.poisoned = true;
            // The batch is durable, so its drops are too: a reopen removes the files.
            self.unlink.clear();
            return Err(e);
        }
        if let Some(f) = self
            .files
            .get_mut(file_id as usize)
            .and_then(Option::as_mut)
        {
            f.last_batch = number;
            f.last_checksum = checksum;
        }
        self.last = Commit { number, checksum };
        if let Some(file) = compacted {
            self.metrics.compactions.inc();
            tracing::debug!(file, batch = number, "compacted log file away");
        }
        // The batch is durable: removing the files it drops can no longer lose their keys. A
        // failure here does not undo the batch, so it is not the caller's error: the next
        // commit or open finishes the removal.
        if let Err(e) = self.finish_unlinks() {
            tracing::warn!(error = %e, "removing compacted log files did not complete; it is retried after the next batch");
        }
        tracing::trace!(
            batch = number,
            plan_ms = t_plan.as_secs_f64() * 1e3,
            encode_ms = (t_encode - t_plan).as_secs_f64() * 1e3,
            write_ms = (t_durable - t_encode).as_secs_f64() * 1e3,
            apply_and_sync_ms = (started.elapsed() - t_durable).as_secs_f64() * 1e3,
            bytes = total,
            "vilmo commit"
        );
        self.metrics.batches.inc();
        self.metrics.bytes_written.inc_by(total as u64);
        self.metrics
            .batch_latency
            .observe(started.elapsed().as_secs_f64());
        self.update_metrics();
        Ok(self.last)
    }

    /// Appends an encoded batch to the current file (or a new one). Returns the file and the
    /// offset the batch starts at; the caller makes it durable.
    fn append(&mut self, buf: &[u8], rotate: bool, number: u64) -> Result<(u32, u64)> {
        if rotate {
            let id = self.current + 1;
            if id > recovery::MAX_FILE_ID {
                return Err(Error::InvalidOption(format!(
                    "the store has used all {} file numbers; raise target_file_size",
                    recovery::MAX_FILE_ID
                )));
            }
            let path = self.dir.join(file_name(id));
            let header = FileHeader {
                file_id: id,
                first_batch: number,
                anchor: self.last.checksum,
            };
            let mut file = self
                .storage
                .create_new(&path)
                .map_err(io(&path, "create log file"))?;
            file.append(&header.encode())
                .map_err(io(&path, "write header"))?;
            if self.options.durable {
                // The header and the file's entry are durable before any batch goes in, so a
                // file that holds an acknowledged batch always has both.
                file.sync_data().map_err(io(&path, "fdatasync header"))?;
                self.storage
                    .sync_dir(&self.dir)
                    .map_err(io(&self.dir, "fsync directory"))?;
            }
            let map = file
                .map(FILE_HEADER_LEN as u64, self.options.target_file_size)
                .map_err(io(&path, "mmap"))?;
            if self.files.len() <= id as usize {
                self.files.resize_with(id as usize + 1, || None);
            }
            self.files[id as usize] = Some(LogFile {
                path,
                file,
                map,
                header,
                len: FILE_HEADER_LEN as u64,
                last_batch: number - 1,
                last_checksum: self.last.checksum,
            });
            *self.live_mut(id) += FILE_HEADER_LEN as u64;
            self.current = id;
        }
        let id = self.current;
        let f = self
            .files
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or(Error::Poisoned)?;
        let base = f.len;
        // Durability comes from the fdatasync that `commit` runs beside applying the batch.
        let t = Instant::now();
        f.file.append(buf).map_err(io(&f.path, "append batch"))?;
        tracing::trace!(
            write_ms = t.elapsed().as_secs_f64() * 1e3,
            bytes = buf.len(),
            "vilmo write"
        );
        f.len += buf.len() as u64;
        if f.len as usize > f.map.len() {
            // Only a batch larger than the target file size (or a storage whose views do not
            // reserve room) gets here.
            f.map = f
                .file
                .map(f.len, f.len.saturating_mul(2))
                .map_err(io(&f.path, "mmap"))?;
        }
        Ok((id, base))
    }
}

impl Vilmo<FsStorage> {
    /// Builds a store in `dest` from another store's log files (as a new node does after
    /// downloading them) and checks that it ends at `expected` (the checksum every node agrees
    /// on). On success the new store holds exactly the source's state.
    ///
    /// The files come from a peer and are not trusted: before anything is copied or applied,
    /// every file is verified with ordinary reads (names, headers, checksums, record bounds, the
    /// chain across files and drop records) and the chain must end at `expected`; only then are
    /// the files copied into `dest` (which must hold no log files) and opened.
    pub fn sync_from_logs(
        logs: &[PathBuf],
        dest: impl AsRef<Path>,
        options: Options,
        expected: Commit,
    ) -> Result<Self> {
        let dest = dest.as_ref();
        let mut named: Vec<(u32, &PathBuf)> = Vec::with_capacity(logs.len());
        for src in logs {
            let id = src
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(recovery::parse_file_name)
                .ok_or_else(|| Error::Corrupt {
                    path: src.clone(),
                    offset: 0,
                    reason: "not named like a log file (eight digits and .vlog)".into(),
                })?;
            named.push((id, src));
        }
        named.sort_by_key(|(id, _)| *id);
        if let Some(w) = named.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::Corrupt {
                path: w[1].1.clone(),
                offset: 0,
                reason: format!("log file {} given twice", w[1].0),
            });
        }
        let newest = named.last().map(|(id, _)| *id);
        let mut scans = Vec::with_capacity(named.len());
        for &(id, src) in &named {
            let file = std::fs::File::open(src).map_err(io(src, "open"))?;
            let len = file.metadata().map_err(io(src, "stat"))?.len();
            let read =
                |buf: &mut [u8], at: u64| std::os::unix::fs::FileExt::read_exact_at(&file, buf, at);
            scans.push(recovery::scan_file(
                &read,
                len,
                src,
                id,
                Some(id) == newest,
            )?);
        }
        let (got_batch, got) = recovery::check_chain(dest, &scans)?;
        let got = if got_batch == 0 { GENESIS } else { got };
        if got_batch != expected.number || got != expected.checksum {
            return Err(Error::SyncMismatch {
                expected_batch: expected.number,
                expected: hex(&expected.checksum),
                got_batch,
                got: hex(&got),
            });
        }

        fs::create_dir_all(dest).map_err(io(dest, "create directory"))?;
        let existing = FsStorage
            .list_dir(dest)
            .map_err(io(dest, "list directory"))?;
        if let Some(name) = existing.iter().find(|n| n.ends_with(".vlog")) {
            return Err(Error::InvalidOption(format!(
                "{} already holds log file {name}; sync into an empty directory",
                dest.display()
            )));
        }
        for (id, src) in &named {
            let target = dest.join(file_name(*id));
            fs::copy(src, &target).map_err(io(src, "copy log file"))?;
            std::fs::File::open(&target)
                .and_then(|f| f.sync_all())
                .map_err(io(&target, "fsync copied log"))?;
        }
        FsStorage
            .sync_dir(dest)
            .map_err(io(dest, "fsync directory"))?;
        let store = Self::open(dest, options)?;
        if store.last != expected {
            return Err(Error::SyncMismatch {
                expected_batch: expected.number,
                expected: hex(&expected.checksum),
                got_batch: store.last.number,
                got: hex(&store.last.checksum),
            });
        }
        Ok(store)
    }
}

/// A record's kind without borrowing its bytes, for applying after the bytes are on disk.
#[derive(Debug, Clone, Copy)]
enum OwnedKind {
    Put { moved: bool },
    Nullify { target: u32 },
    Drop(FileSpan),
    Cursor { victim: u32, next: u64 },
}

impl OwnedKind {
    fn of(record: &Record<'_>) -> Self {
        match *record {
            Record::Put { moved, .. } => OwnedKind::Put { moved },
            Record::Nullify { target, .. } => OwnedKind::Nullify { target },
            Record::Drop(span) => OwnedKind::Drop(span),
            Record::Cursor { victim, next } => OwnedKind::Cursor { victim, next },
        }
    }
}
