//! [`BlockLog`]: opening (verify, cut a torn tail), appending, syncing, reading, removing.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use gigas_storage::{FsStorage, Storage, StorageFile};
use tracing::{info, warn};

use crate::format::{
    self, checksum, decode_record_header, record_header, segment_name, Checksum, SegmentHeader,
    CHECKSUM_LEN, GENESIS, MAX_PAYLOAD, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use crate::{Error, Result};

/// How a block log is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A new segment starts once the newest holds this many bytes. Segments are removed
    /// whole, so this is the granularity at which disk is given back; reopening reads every
    /// segment, so it also bounds the work of an open per segment kept.
    pub segment_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
        }
    }
}

/// What opening found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Segments kept.
    pub segments: usize,
    /// Records in them.
    pub records: u64,
    /// Bytes cut off the newest segment's end (records never acknowledged).
    pub cut_bytes: u64,
    /// Whether a newest segment with a torn header (created, never synced) was removed.
    pub removed_torn_segment: bool,
}

/// One segment file and where its records are.
struct Segment<F> {
    first: u64,
    anchor: Checksum,
    path: PathBuf,
    file: F,
    /// Byte offset of each record.
    offsets: Vec<u64>,
    /// Checksum of each record.
    checksums: Vec<Checksum>,
    /// The file's length as written by this process.
    len: u64,
    /// Appended to since the last sync.
    unsynced: bool,
}

impl<F> Segment<F> {
    /// The number after its last record.
    fn next(&self) -> u64 {
        self.first + self.offsets.len() as u64
    }

    fn tail(&self) -> Checksum {
        self.checksums.last().copied().unwrap_or(self.anchor)
    }
}

/// A directory of numbered, checksummed records; see the crate documentation.
pub struct BlockLog<S: Storage = FsStorage> {
    storage: S,
    dir: PathBuf,
    options: Options,
    segments: Vec<Segment<S::File>>,
    /// A segment was created or removed since the directory was last synced.
    dir_unsynced: bool,
    /// Why the log refuses to continue, after a failed write or sync.
    poisoned: Option<String>,
    _lock: S::Lock,
}

impl<S: Storage> fmt::Debug for BlockLog<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockLog")
            .field("dir", &self.dir)
            .field("segments", &self.segments.len())
            .field("first", &self.first())
            .field("next", &self.next())
            .field("poisoned", &self.poisoned)
            .finish()
    }
}

fn io_error<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> Error + 'a {
    move |source| Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

impl BlockLog<FsStorage> {
    /// Opens (or creates) the log in `dir` on the real disk.
    pub fn open(dir: &Path, options: Options) -> Result<(Self, OpenReport)> {
        Self::open_with(FsStorage, dir, options)
    }
}

impl<S: Storage> BlockLog<S> {
    /// Opens (or creates) the log in `dir` on `storage`: verifies every segment, cuts a torn
    /// tail off the newest one, and takes the directory's lock for as long as the log lives.
    pub fn open_with(storage: S, dir: &Path, options: Options) -> Result<(Self, OpenReport)> {
        if storage
            .create_dir_all(dir)
            .map_err(io_error(dir, "create the directory"))?
        {
            if let Some(parent) = dir.parent() {
                storage
                    .sync_dir(parent)
                    .map_err(io_error(parent, "sync the parent directory"))?;
            }
        }
        let lock = storage.lock_dir(dir).map_err(|e| {
            if e.kind() == io::ErrorKind::WouldBlock {
                Error::Locked(dir.to_path_buf())
            } else {
                Error::Io {
                    path: dir.to_path_buf(),
                    op: "lock the directory",
                    source: e,
                }
            }
        })?;
        let mut firsts: Vec<u64> = storage
            .list_dir(dir)
            .map_err(io_error(dir, "list the directory"))?
            .iter()
            .filter_map(|name| format::parse_segment_name(name))
            .collect();
        firsts.sort_unstable();

        let mut report = OpenReport::default();
        let mut segments: Vec<Segment<S::File>> = Vec::with_capacity(firsts.len());
        let mut dir_unsynced = false;
        let count = firsts.len();
        for (i, first) in firsts.into_iter().enumerate() {
            let newest = i + 1 == count;
            let path = dir.join(segment_name(first));
            let file = storage
                .open(&path)
                .map_err(io_error(&path, "open the segment"))?;
            let size = file.size().map_err(io_error(&path, "read the size"))?;
            let mut bytes = vec![0u8; usize::try_from(size).unwrap_or(usize::MAX)];
            file.read_exact_at(&mut bytes, 0)
                .map_err(io_error(&path, "read the segment"))?;
            let corrupt = |offset: u64, reason: String| Error::Corrupt {
                path: path.clone(),
                offset,
                reason,
            };
            let header = match SegmentHeader::decode(&bytes) {
                Ok(header) => header,
                Err(reason) if newest => {
                    // Created and never synced: a synced segment's header is durable.
                    warn!(path = %path.display(), reason, "removing a segment whose header never reached the disk");
                    drop(file);
                    storage
                        .remove_file(&path)
                        .map_err(io_error(&path, "remove a torn segment"))?;
                    dir_unsynced = true;
                    report.removed_torn_segment = true;
                    break;
                }
                Err(reason) => return Err(corrupt(0, reason.into())),
            };
            if header.first != first {
                return Err(corrupt(
                    16,
                    format!("the header says the first record is {}", header.first),
                ));
            }
            if let Some(previous) = segments.last() {
                if previous.next() != first || previous.tail() != header.anchor {
                    return Err(corrupt(
                        16,
                        format!(
                            "does not continue the previous segment (which ends before record \
                             {}, or with another checksum)",
                            previous.next()
                        ),
                    ));
                }
            }
            let mut segment = Segment {
                first,
                anchor: header.anchor,
                path: path.clone(),
                file,
                offsets: Vec::new(),
                checksums: Vec::new(),
                len: SEGMENT_HEADER_LEN as u64,
                unsynced: false,
            };
            let mut pos = SEGMENT_HEADER_LEN;
            while pos < bytes.len() {
                match verify_record(&bytes[pos..], segment.next(), &segment.tail()) {
                    Ok((total, sum)) => {
                        segment.offsets.push(pos as u64);
                        segment.checksums.push(sum);
                        pos += total;
                    }
                    Err(reason) if newest => {
                        let cut = (bytes.len() - pos) as u64;
                        warn!(
                            path = %path.display(),
                            offset = pos,
                            bytes = cut,
                            reason,
                            "cutting records that never reached the disk whole (appended after the last sync)"
                        );
                        segment
                            .file
                            .set_len(pos as u64)
                            .map_err(io_error(&path, "cut the torn tail"))?;
                        segment
                            .file
                            .sync_data()
                            .map_err(io_error(&path, "sync the cut segment"))?;
                        report.cut_bytes = cut;
                        break;
                    }
                    Err(reason) => return Err(corrupt(pos as u64, reason.into())),
                }
            }
            segment.len = pos as u64;
            report.records += segment.offsets.len() as u64;
            segments.push(segment);
        }
        report.segments = segments.len();
        let mut log = Self {
            storage,
            dir: dir.to_path_buf(),
            options,
            segments,
            dir_unsynced,
            poisoned: None,
            _lock: lock,
        };
        if log.dir_unsynced {
            log.sync()?;
        }
        if report.records > 0 || report.cut_bytes > 0 {
            info!(
                dir = %dir.display(),
                segments = report.segments,
                records = report.records,
                first = log.first(),
                next = log.next(),
                cut_bytes = report.cut_bytes,
                "opened the block log"
            );
        }
        Ok((log, report))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The number of the oldest record kept, `None` when the log holds none.
    pub fn first(&self) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| !s.offsets.is_empty())
            .map(|s| s.first)
    }

    /// The number the next record must have; `None` for a log that never held one (it then
    /// starts at whatever number is appended first).
    pub fn next(&self) -> Option<u64> {
        self.segments.last().map(Segment::next)
    }

    /// The checksum of the newest record (the chain's tail), [`GENESIS`] for an empty log.
    pub fn tail(&self) -> Checksum {
        self.segments.last().map_or(GENESIS, Segment::tail)
    }

    /// The number of segment files.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The bytes of every segment.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }

    fn check_poisoned(&self) -> Result<()> {
        match &self.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    fn poison(&mut self, error: Error) -> Error {
        self.poisoned = Some(error.to_string());
        error
    }

    /// [`Self::poison`] for a failed file operation.
    fn poison_io(&mut self, path: PathBuf, op: &'static str, source: io::Error) -> Error {
        self.poison(Error::Io { path, op, source })
    }

    /// Appends record `number` (the log's [`Self::next`], or any number on a log that never
    /// held one). Not durable until [`Self::sync`].
    pub fn append(&mut self, number: u64, payload: &[u8]) -> Result<()> {
        self.check_poisoned()?;
        if let Some(expected) = self.next() {
            if number != expected {
                return Err(Error::NotNext {
                    expected,
                    got: number,
                });
            }
        }
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::TooLarge {
                len: payload.len(),
                limit: MAX_PAYLOAD,
            });
        }
        let rotate = match self.segments.last() {
            None => true,
            Some(s) => s.len >= self.options.segment_bytes && !s.offsets.is_empty(),
        };
        if rotate {
            // Everything appended so far, and the directory, are synced first: open treats
            // damage in any segment but the newest, or a missing one before it, as corruption,
            // which holds only if no older segment is ever left with unsynced records or an
            // unsynced entry once a newer one exists (a power loss may persist any subset of
            // unsynced directory operations, the newer creation without the older).
            self.sync()?;
            let anchor = self.tail();
            if let Err(e) = self.create_segment(number, anchor) {
                return Err(self.poison(e));
            }
        }
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let header = record_header(number, len);
        let Some(segment) = self.segments.last_mut() else {
            return Err(Error::Poisoned("no segment after creating one".into()));
        };
        let sum = checksum(&segment.tail(), &header, payload);
        let written = segment
            .file
            .append(&header)
            .and_then(|()| segment.file.append(payload))
            .and_then(|()| segment.file.append(&sum));
        segment.unsynced = true;
        if let Err(source) = written {
            let path = segment.path.clone();
            return Err(self.poison_io(path, "append a record", source));
        }
        segment.offsets.push(segment.len);
        segment.checksums.push(sum);
        segment.len += (RECORD_HEADER_LEN + payload.len() + CHECKSUM_LEN) as u64;
        Ok(())
    }

    fn create_segment(&mut self, first: u64, anchor: Checksum) -> Result<()> {
        let path = self.dir.join(segment_name(first));
        let mut file = self
            .storage
            .create_new(&path)
            .map_err(io_error(&path, "create a segment"))?;
        self.dir_unsynced = true;
        file.append(&SegmentHeader { first, anchor }.encode())
            .map_err(io_error(&path, "write a segment header"))?;
        self.segments.push(Segment {
            first,
            anchor,
            path,
            file,
            offsets: Vec::new(),
            checksums: Vec::new(),
            len: SEGMENT_HEADER_LEN as u64,
            unsynced: true,
        });
        Ok(())
    }

    /// Makes every record appended so far durable: `fdatasync` of each segment appended to
    /// since the last sync, then of the directory if a segment was created or removed.
    pub fn sync(&mut self) -> Result<()> {
        self.check_poisoned()?;
        for i in 0..self.segments.len() {
            if !self.segments[i].unsynced {
                continue;
            }
            let segment = &self.segments[i];
            if let Err(source) = segment.file.sync_data() {
                let path = segment.path.clone();
                return Err(self.poison_io(path, "sync a segment", source));
            }
            self.segments[i].unsynced = false;
        }
        if self.dir_unsynced {
            if let Err(source) = self.storage.sync_dir(&self.dir) {
                let path = self.dir.clone();
                return Err(self.poison_io(path, "sync the directory", source));
            }
            self.dir_unsynced = false;
        }
        Ok(())
    }

    /// Record `number`'s payload, verified against its checksum; `None` when the log does not
    /// hold it (older than [`Self::first`], or not yet appended).
    pub fn read(&self, number: u64) -> Result<Option<Vec<u8>>> {
        let at = self.segments.partition_point(|s| s.first <= number);
        let Some(segment) = at.checked_sub(1).and_then(|i| self.segments.get(i)) else {
            return Ok(None);
        };
        let index = (number - segment.first) as usize;
        let Some(&offset) = segment.offsets.get(index) else {
            return Ok(None);
        };
        let corrupt = |reason: &str| Error::Corrupt {
            path: segment.path.clone(),
            offset,
            reason: reason.to_string(),
        };
        let mut header = [0u8; RECORD_HEADER_LEN];
        segment
            .file
            .read_exact_at(&mut header, offset)
            .map_err(io_error(&segment.path, "read a record header"))?;
        let (len, got) = decode_record_header(&header).map_err(corrupt)?;
        if got != number {
            return Err(corrupt("the record has another number than its position"));
        }
        let mut payload = vec![0u8; len];
        segment
            .file
            .read_exact_at(&mut payload, offset + RECORD_HEADER_LEN as u64)
            .map_err(io_error(&segment.path, "read a record"))?;
        let previous = match index {
            0 => segment.anchor,
            i => segment.checksums[i - 1],
        };
        if checksum(&previous, &header, &payload) != segment.checksums[index] {
            return Err(corrupt("the record no longer matches its checksum"));
        }
        Ok(Some(payload))
    }

    /// Removes every segment whose records are all numbered `number` or less, oldest first,
    /// the newest segment excepted (it says where the chain continues), syncing the directory
    /// after each.
    /// Returns how many were removed. A segment with records not yet synced stays.
    pub fn remove_through(&mut self, number: u64) -> Result<usize> {
        self.check_poisoned()?;
        let mut removed = 0;
        while self.segments.len() > 1
            && self.segments[0].next() <= number.saturating_add(1)
            && !self.segments[0].unsynced
        {
            let segment = self.segments.remove(0);
            let path = segment.path.clone();
            drop(segment);
            if let Err(source) = self.storage.remove_file(&path) {
                return Err(self.poison_io(path, "remove a segment", source));
            }
            // One removal per directory sync: a power loss may persist any subset of the
            // unsynced ones, and a newer segment gone with an older one kept would be a hole
            // in the chain that open must call corruption.
            self.dir_unsynced = true;
            self.sync()?;
            removed += 1;
        }
        Ok(removed)
    }
}

/// Checks the record at the start of `bytes` (number `number`, after checksum `previous`);
/// returns its length in bytes and its checksum.
fn verify_record(
    bytes: &[u8],
    number: u64,
    previous: &Checksum,
) -> Result<(usize, Checksum), &'static str> {
    let header: &[u8; RECORD_HEADER_LEN] = bytes
        .get(..RECORD_HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or("the file ends inside a record header")?;
    let (len, got) = decode_record_header(header)?;
    if got != number {
        return Err("the record's number does not follow the previous one");
    }
    let total = RECORD_HEADER_LEN + len + CHECKSUM_LEN;
    let record = bytes.get(..total).ok_or("the file ends inside a record")?;
    let payload = &record[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len];
    let sum = checksum(previous, header, payload);
    if record[RECORD_HEADER_LEN + len..] != sum {
        return Err("checksum mismatch");
    }
    Ok((total, sum))
}
