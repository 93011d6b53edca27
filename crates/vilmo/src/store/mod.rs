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

mod batch;
mod commit;
mod options;
mod sync;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::*;
use crate::index::{Index, Location};
use crate::metrics::Metrics;
use crate::recovery::{self, Scan};
use crate::storage::{FsStorage, Storage, StorageFile};

pub use batch::Batch;
pub use commit::Unsynced;
pub use options::Options;

/// Keys and values are limited by the record format.
pub const MAX_KEY_LEN: usize = u16::MAX as usize;

/// The most encode-buffer capacity kept between batches.
const KEEP_BUFFER: usize = 16 << 20;
/// The largest value.
pub const MAX_VALUE_LEN: usize = (u32::MAX >> 2) as usize;
/// The largest encoded batch (offsets in the index are 32-bit).
pub(crate) const MAX_BATCH_LEN: usize = 1 << 31;

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

use recovery::file_name;

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

/// What planning learned about a put's key, so that applying it need not look again.
#[derive(Debug, Clone, Copy)]
struct Hint {
    hash: u64,
    old: Option<Location>,
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
