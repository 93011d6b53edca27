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
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::format::*;
use crate::index::{Index, Location};
use crate::metrics::Metrics;

/// How the store behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A new log file is started when the current one would grow past this many bytes.
    pub target_file_size: u64,
    /// A log file is compacted when its live bytes fall under this percentage of its size;
    /// 0 turns compaction off.
    pub compaction_threshold_percent: u8,
    /// How many bytes of the file being compacted each batch reads (whole batches, at least
    /// one): the bound on compaction work per batch.
    pub compaction_bytes_per_batch: u64,
    /// Whether `commit` waits for `fdatasync`. Only tests and CPU benchmarks turn it off.
    pub durable: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            target_file_size: 256 << 20,
            compaction_threshold_percent: 60,
            compaction_bytes_per_batch: 24 << 20,
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
/// The largest value.
pub const MAX_VALUE_LEN: usize = (u32::MAX >> 2) as usize;
/// The largest encoded batch (offsets in the index are 32-bit).
pub const MAX_BATCH_LEN: usize = 1 << 31;

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
}

struct LogFile {
    path: PathBuf,
    file: File,
    map: Mmap,
    header: FileHeader,
    len: u64,
    last_batch: u64,
    last_checksum: Checksum,
}

impl LogFile {
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

/// Maps `file` with room for it to grow to `reserve` bytes without a new mapping: remapping
/// after every commit would throw away the page tables of the whole file, and every later read
/// would take a page fault.
fn map_file(file: &File, path: &Path, len: u64, reserve: u64) -> Result<Mmap> {
    let len = len.max(reserve).max(1) as usize;
    // SAFETY: the store owns its directory; log files are only appended to by this process
    // while it holds them open, and never modified in place. Bytes past the end of the file
    // are never read (see `LogFile::bytes`).
    unsafe { memmap2::MmapOptions::new().len(len).map(file) }.map_err(io(path, "mmap"))
}

fn file_name(id: u32) -> String {
    format!("{id:08}.vlog")
}

fn parse_file_name(name: &str) -> Option<u32> {
    name.strip_suffix(".vlog")?.parse().ok()
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "fsync directory"))
}

fn hex(c: &Checksum) -> String {
    c.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of the record at `loc` in `files`. Locations in the index always point at validated
/// records of mapped files.
#[inline]
fn key_at(files: &[Option<LogFile>], loc: Location) -> &[u8] {
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
    /// The file being compacted and the offset of its next batch to read.
    cursor: Option<(u32, u64)>,
}

/// A Vilmo store in a directory.
pub struct Vilmo {
    dir: PathBuf,
    options: Options,
    files: Vec<Option<LogFile>>,
    state: State,
    current: u32,
    last: Commit,
    buf: Vec<u8>,
    poisoned: bool,
    metrics: Metrics,
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

impl Vilmo {
    /// Opens the store in `dir`, creating the directory if needed. Replays every log,
    /// verifies every checksum and the chain across files, truncates a torn tail of the newest
    /// log, and rebuilds the index.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Self> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(io(&dir, "create directory"))?;
        let mut ids = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io(&dir, "list directory"))? {
            let entry = entry.map_err(io(&dir, "list directory"))?;
            if let Some(id) = entry.file_name().to_str().and_then(parse_file_name) {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        let mut store = Self {
            dir,
            options,
            files: Vec::new(),
            state: State::default(),
            current: 0,
            last: Commit {
                number: 0,
                checksum: GENESIS,
            },
            buf: Vec::new(),
            poisoned: false,
            metrics: Metrics::default(),
        };
        let newest = ids.last().copied();
        for id in ids {
            store.replay_file(id, Some(id) == newest)?;
        }
        store.check_chain()?;
        // Files whose drop record was durable but which were not yet removed when the process
        // stopped: their live records were all copied forward before the drop.
        let leftover: Vec<u32> = store
            .state
            .drops
            .keys()
            .copied()
            .filter(|id| store.file(*id).is_some())
            .collect();
        for id in leftover {
            store.remove_file(id)?;
        }
        store.current = store
            .files
            .iter()
            .flatten()
            .map(|f| f.header.file_id)
            .max()
            .unwrap_or(0);
        store.update_metrics();
        tracing::debug!(dir = %store.dir.display(), batch = store.last.number, keys = store.state.index.len(), "vilmo opened");
        Ok(store)
    }

    fn file(&self, id: u32) -> Option<&LogFile> {
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

    /// Reads, verifies and applies one log file.
    fn replay_file(&mut self, id: u32, newest: bool) -> Result<()> {
        let path = self.dir.join(file_name(id));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .map_err(io(&path, "open"))?;
        let len = file.metadata().map_err(io(&path, "stat"))?.len();
        if len < FILE_HEADER_LEN as u64 {
            if newest {
                // Created at rotation but the header never became durable: nothing in it was
                // ever acknowledged.
                tracing::warn!(path = %path.display(), "removing log file with a torn header");
                drop(file);
                fs::remove_file(&path).map_err(io(&path, "remove torn file"))?;
                sync_dir(&self.dir)?;
                return Ok(());
            }
            return Err(Error::Corrupt {
                path,
                offset: 0,
                reason: "file shorter than its header".into(),
            });
        }
        // SAFETY: the store owns its directory; log files are only appended to by this process
        // while it holds them open, and never modified in place.
        let map = unsafe { Mmap::map(&file) }.map_err(io(&path, "mmap"))?;
        let header = FileHeader::decode(&map).map_err(|reason| Error::Corrupt {
            path: path.clone(),
            offset: 0,
            reason: reason.into(),
        })?;
        if header.file_id != id {
            return Err(Error::Corrupt {
                path,
                offset: 12,
                reason: format!(
                    "header names file {} but the file is named {id}",
                    header.file_id
                ),
            });
        }
        if self.files.len() <= id as usize {
            self.files.resize_with(id as usize + 1, || None);
        }
        let mut offset = FILE_HEADER_LEN as u64;
        let mut previous = header.anchor;
        let mut number = header.first_batch.wrapping_sub(1);
        let mut torn_at = None;
        // Batches are verified before the file is registered, so that records are applied
        // only from complete, checksummed batches.
        let mut batches = Vec::new();
        while offset < len {
            let at = offset as usize;
            let rest = &map[at..];
            let corrupt = |reason: String, off: u64| Error::Corrupt {
                path: path.clone(),
                offset: off,
                reason,
            };
            if rest.len() < BATCH_HEADER_LEN {
                torn_at = Some(offset);
                break;
            }
            let bh = decode_batch_header(rest).map_err(|reason| corrupt(reason.into(), offset))?;
            let total = BATCH_HEADER_LEN + bh.body_len as usize + FOOTER_LEN;
            if rest.len() < total {
                torn_at = Some(offset);
                break;
            }
            let footer = &rest[BATCH_HEADER_LEN + bh.body_len as usize..total];
            if footer[0..4] != FOOTER_MAGIC {
                return Err(corrupt(
                    "bad batch footer magic".into(),
                    offset + (total - FOOTER_LEN) as u64,
                ));
            }
            let body = &rest[BATCH_HEADER_LEN..BATCH_HEADER_LEN + bh.body_len as usize];
            let checksum = batch_checksum(&previous, &rest[..BATCH_HEADER_LEN], body);
            if footer[4..] != checksum {
                return Err(corrupt(
                    format!("checksum mismatch in batch {} (a byte of the batch or of an earlier batch's checksum changed)", bh.number),
                    offset,
                ));
            }
            if bh.number != number.wrapping_add(1) {
                return Err(corrupt(
                    format!("batch {} follows batch {number}", bh.number),
                    offset,
                ));
            }
            batches.push((offset, bh));
            number = bh.number;
            previous = checksum;
            offset += total as u64;
        }
        if let Some(torn) = torn_at {
            if !newest {
                return Err(Error::Corrupt {
                    path,
                    offset: torn,
                    reason: "incomplete batch in a log file that is not the newest".into(),
                });
            }
            tracing::warn!(path = %path.display(), offset = torn, bytes = len - torn, "truncating torn tail");
            file.set_len(torn)
                .map_err(io(&path, "truncate torn tail"))?;
            file.sync_all().map_err(io(&path, "fsync after truncate"))?;
        }
        let end = torn_at.unwrap_or(len);
        drop(map);
        let reserve = if newest {
            self.options.target_file_size
        } else {
            0
        };
        let map = map_file(&file, &path, end, reserve)?;
        self.files[id as usize] = Some(LogFile {
            path: path.clone(),
            file,
            map,
            header,
            len: end,
            last_batch: number,
            last_checksum: previous,
        });
        *self.live_mut(id) += FILE_HEADER_LEN as u64;
        for (batch_offset, bh) in batches {
            let body_start = batch_offset as usize + BATCH_HEADER_LEN;
            let mut at = 0usize;
            for i in 0..bh.records {
                let record_offset = body_start + at;
                let (kind, rec_len) = {
                    let Some(f) = self.file(id) else { break };
                    let body = &f.bytes()[body_start..body_start + bh.body_len as usize];
                    match Record::decode(&body[at..]) {
                        Ok((record, rec_len)) => (OwnedKind::of(&record), rec_len),
                        Err(reason) => {
                            return Err(Error::Corrupt {
                                path,
                                offset: record_offset as u64,
                                reason: format!("record {i} of batch {}: {reason}", bh.number),
                            })
                        }
                    }
                };
                self.apply(id, record_offset as u32, kind, rec_len as u64, None)?;
                at += rec_len;
            }
            if at != bh.body_len as usize {
                return Err(Error::Corrupt {
                    path,
                    offset: (body_start + at) as u64,
                    reason: format!(
                        "batch {} declares {} body bytes but its records end at {at}",
                        bh.number, bh.body_len
                    ),
                });
            }
        }
        if let Some(f) = self.file(id) {
            if f.last_batch >= f.header.first_batch {
                self.last = Commit {
                    number: f.last_batch,
                    checksum: f.last_checksum,
                };
            }
        }
        Ok(())
    }

    /// Checks that the files present and the files compacted away form one unbroken chain from
    /// the first batch to the last.
    fn check_chain(&self) -> Result<()> {
        let max_id = self.files.len().saturating_sub(1) as u32;
        let max_id = max_id.max(self.state.drops.keys().next_back().copied().unwrap_or(0));
        let accounted = |id: u32| self.file(id).is_some() || self.state.drops.contains_key(&id);
        // Name a file missing between present files first: a gap below the oldest present
        // file may only mean that the drop records explaining it were in the missing file.
        let present: Vec<u32> = self
            .files
            .iter()
            .flatten()
            .map(|f| f.header.file_id)
            .collect();
        if let (Some(&lo), Some(&hi)) = (present.first(), present.last()) {
            if let Some(id) = (lo..=hi).find(|id| !accounted(*id)) {
                let before = (lo..id)
                    .rev()
                    .find(|i| accounted(*i))
                    .map_or("genesis".into(), |i| format!("file {i}"));
                let after = (id + 1..=hi)
                    .find(|i| accounted(*i))
                    .map_or("the end".into(), |i| format!("file {i}"));
                return Err(Error::MissingFile {
                    dir: self.dir.clone(),
                    file_id: id,
                    before,
                    after,
                });
            }
        }
        let mut prev_batch = 0u64;
        let mut prev_checksum = GENESIS;
        let mut prev_name = "genesis".to_string();
        for id in 1..=max_id {
            let (span, what) = match (self.file(id), self.state.drops.get(&id)) {
                (Some(f), _) => (f.span(), "file"),
                (None, Some((span, _))) => (*span, "dropped file"),
                (None, None) => {
                    let after = (id + 1..=max_id)
                        .find(|i| self.file(*i).is_some() || self.state.drops.contains_key(i))
                        .map_or_else(|| "the end".to_string(), |i| format!("file {i}"));
                    return Err(Error::MissingFile {
                        dir: self.dir.clone(),
                        file_id: id,
                        before: prev_name,
                        after,
                    });
                }
            };
            if span.first_batch != prev_batch + 1 || span.anchor != prev_checksum {
                return Err(Error::Corrupt {
                    path: self.dir.join(file_name(id)),
                    offset: 16,
                    reason: format!(
                        "{what} {id} starts at batch {} after checksum {}, but {prev_name} ends at batch {prev_batch} with checksum {}",
                        span.first_batch,
                        hex(&span.anchor),
                        hex(&prev_checksum)
                    ),
                });
            }
            prev_batch = span.last_batch;
            prev_checksum = span.last;
            prev_name = format!("{what} {id}");
        }
        if self.last.number != prev_batch || (prev_batch > 0 && self.last.checksum != prev_checksum)
        {
            return Err(Error::Corrupt {
                path: self.dir.clone(),
                offset: 0,
                reason: format!(
                    "the newest batch read is {} but the chain ends at batch {prev_batch}",
                    self.last.number
                ),
            });
        }
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
                if let Some(slot) = self.files.get_mut(dropped as usize) {
                    if let Some(f) = slot.take() {
                        self.pending_removal(f);
                    }
                }
                if let Some(live) = self.state.live.get_mut(dropped as usize) {
                    *live = 0;
                }
            }
            OwnedKind::Cursor { victim, next } => {
                self.state.cursor = Some((victim, next));
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

    /// Removes a compacted file once its drop record is durable: it is unmapped here and
    /// unlinked by [`Self::remove_file`] or at once.
    fn pending_removal(&mut self, f: LogFile) {
        let path = f.path.clone();
        drop(f);
        if let Err(e) = fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove compacted log file; it will be removed on next open");
            }
        }
    }

    fn remove_file(&mut self, id: u32) -> Result<()> {
        if let Some(slot) = self.files.get_mut(id as usize) {
            if let Some(f) = slot.take() {
                let path = f.path.clone();
                drop(f);
                fs::remove_file(&path).map_err(io(&path, "remove compacted file"))?;
                sync_dir(&self.dir)?;
            }
        }
        Ok(())
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
        let files: Vec<&LogFile> = self.files.iter().flatten().collect();
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
    pub fn commit(&mut self, mut batch: Batch) -> Result<Commit> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        let started = Instant::now();
        let mut buf = std::mem::take(&mut self.buf);
        batch.canonicalize();
        let number = self.last.number + 1;

        // 1. The user's records, sorted by key.
        let mut planned: Vec<Planned<'_>> = Vec::with_capacity(batch.ops.len() + 16);
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

        let t_plan = started.elapsed();
        // 2. Bounded, deterministic compaction work.
        let mut victim_done = None;
        let cursor = self
            .state
            .cursor
            .or_else(|| self.pick_victim().map(|v| (v, FILE_HEADER_LEN as u64)));
        if let Some((victim, start)) = cursor {
            if let Some(vf) = self.file(victim) {
                let user_keys: Vec<&[u8]> = batch.ops.iter().map(|op| batch.key(op)).collect();
                let cursor_at = planned.len();
                planned.push(Planned::Cursor {
                    victim,
                    next: start,
                });
                let mut at = start;
                let budget_end = start.saturating_add(self.options.compaction_bytes_per_batch);
                while at < vf.len && (at == start || at < budget_end) {
                    let rest = &vf.bytes()[at as usize..];
                    let Ok(bh) = decode_batch_header(rest) else {
                        break;
                    };
                    let body = &rest[BATCH_HEADER_LEN..BATCH_HEADER_LEN + bh.body_len as usize];
                    let mut pos = 0usize;
                    while pos < body.len() {
                        let Ok((record, rec_len)) = Record::decode(&body[pos..]) else {
                            break;
                        };
                        let offset = (at as usize + BATCH_HEADER_LEN + pos) as u32;
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
                        pos += rec_len;
                    }
                    at += (BATCH_HEADER_LEN + bh.body_len as usize + FOOTER_LEN) as u64;
                }
                planned[cursor_at] = Planned::Cursor { victim, next: at };
                if at >= vf.len {
                    victim_done = Some(vf.span());
                }
            }
        }
        if let Some(span) = victim_done {
            planned.push(Planned::Drop(Box::new(span)));
        }

        // 3. Encode, choosing the file: rotate when this batch would push the current file
        //    past its target size.
        let body_len: usize = planned.iter().map(|p| p.record().encoded_len()).sum();
        let total = BATCH_HEADER_LEN + body_len + FOOTER_LEN;
        if total > MAX_BATCH_LEN {
            self.buf = buf;
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
        for p in &planned {
            let record = p.record();
            let at = buf.len();
            record.encode_into(&mut buf);
            kinds.push((at as u32, p.hint()));
        }
        let checksum = batch_checksum(
            &self.last.checksum,
            &buf[..BATCH_HEADER_LEN],
            &buf[BATCH_HEADER_LEN..],
        );
        buf.extend_from_slice(&FOOTER_MAGIC);
        buf.extend_from_slice(&checksum);
        drop(planned);

        let t_encode = started.elapsed();
        // 4. Make it durable.
        let result = self.append(&buf, rotate, number);
        let t_durable = started.elapsed();
        self.buf = buf;
        let (file_id, base) = match result {
            Ok(v) => v,
            Err(e) => {
                self.poisoned = true;
                return Err(e);
            }
        };

        // 5. Apply the records while the disk makes them durable: apply only reads them back
        //    from the page cache, and `commit` returns after both.
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
        let (applied, synced) = std::thread::scope(|scope| {
            let syncing = sync.map(|file| scope.spawn(move || file.sync_data()));
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
            let synced = match syncing.map(|h| h.join()) {
                None => Ok(()),
                Some(Ok(result)) => result,
                Some(Err(panic)) => std::panic::resume_unwind(panic),
            };
            (applied, synced)
        });
        if let Err(e) = synced {
            // The in-memory state is ahead of the disk: only a reopen can tell what is durable.
            self.poisoned = true;
            return Err(io(&path, "fdatasync batch")(e));
        }
        if let Err(e) = applied {
            self.poisoned = true;
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
        if let Some(span) = victim_done {
            sync_dir(&self.dir)?;
            self.metrics.compactions.inc();
            tracing::debug!(
                file = span.file_id,
                batch = number,
                "compacted log file away"
            );
        }
        tracing::trace!(
            batch = number,
            plan_ms = t_plan.as_secs_f64() * 1e3,
            encode_ms = (t_encode - t_plan).as_secs_f64() * 1e3,
            durable_ms = (t_durable - t_encode).as_secs_f64() * 1e3,
            apply_ms = (started.elapsed() - t_durable).as_secs_f64() * 1e3,
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
            let path = self.dir.join(file_name(id));
            let header = FileHeader {
                file_id: id,
                first_batch: number,
                anchor: self.last.checksum,
            };
            let mut file = OpenOptions::new()
                .read(true)
                .append(true)
                .create_new(true)
                .open(&path)
                .map_err(io(&path, "create log file"))?;
            file.write_all(&header.encode())
                .map_err(io(&path, "write header"))?;
            if self.options.durable {
                file.sync_data().map_err(io(&path, "fdatasync header"))?;
                sync_dir(&self.dir)?;
            }
            let map = map_file(
                &file,
                &path,
                FILE_HEADER_LEN as u64,
                self.options.target_file_size,
            )?;
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
        f.file.write_all(buf).map_err(io(&f.path, "append batch"))?;
        tracing::trace!(
            write_ms = t.elapsed().as_secs_f64() * 1e3,
            bytes = buf.len(),
            "vilmo write"
        );
        f.len += buf.len() as u64;
        if f.len as usize > f.map.len() {
            // Only a batch larger than the target file size gets here.
            f.map = map_file(&f.file, &f.path, f.len, f.len.saturating_mul(2))?;
        }
        Ok((id, base))
    }

    /// Builds a store in `dest` from copies of another store's log files (as a new node does
    /// after downloading them), verifies every batch and the chain across files, and checks
    /// that it ends at `expected` (the checksum every node agrees on). On success the new
    /// store holds exactly the source's state.
    pub fn sync_from_logs(
        logs: &[PathBuf],
        dest: impl AsRef<Path>,
        options: Options,
        expected: Commit,
    ) -> Result<Self> {
        let dest = dest.as_ref();
        fs::create_dir_all(dest).map_err(io(dest, "create directory"))?;
        for src in logs {
            let name = src.file_name().ok_or_else(|| Error::Io {
                path: src.clone(),
                op: "name log file",
                source: std::io::Error::other("path has no file name"),
            })?;
            let target = dest.join(name);
            fs::copy(src, &target).map_err(io(src, "copy log file"))?;
            File::open(&target)
                .and_then(|f| f.sync_all())
                .map_err(io(&target, "fsync copied log"))?;
        }
        sync_dir(dest)?;
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
