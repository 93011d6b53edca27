//! The diff archive: one immutable file per block, laid out so that the directory can be
//! served as it is by any static web server or object store.
//!
//! ```text
//! DIR/diffs/N     the state diff of block N (a [`crate::DiffFile`]), never rewritten
//! DIR/blocks/N    block N's transactions and receipts (a [`crate::BlockFile`])
//! DIR/diffs/head  JSON {number, hash, stateRoot} of the newest diff (rewritten each block)
//! DIR/snapshots/  state snapshots, written by a full node (`gigas-snapshot`)
//! DIR/keys.log    the writer's enumeration-index log (not published)
//! DIR/lattice     the writer's state-commitment mark (not published; [`LatticeMark`])
//! ```
//!
//! The URL of a file is its path under `DIR`, so `GET /diffs/17` is the file `diffs/17` on a
//! static server as on the sequencer. `N` is written in decimal without leading zeros.
//!
//! # Durability
//!
//! A file is written under a temporary name, synced, renamed into place, and the directory
//! synced, so a reader (or a crash) sees either no file or the whole file. The encoding of a
//! diff is a pure function of the ChangeSet, the state before the block and the index table,
//! so a writer that lost its newest files (power loss before the directory sync) writes the
//! same bytes again: a follower that fetched the lost file already holds exactly what comes
//! back, and ETags stay valid.
//!
//! The index log ([`KeyLog`]) records the keys each diff added to the enumeration index. A
//! record is appended only after its diff file is durable, so the log never runs ahead of the
//! files; at start the writer reads the log, drops a torn tail, and re-encodes every block
//! after the last record. The lattice mark is rewritten, durably, each time the log is
//! synced, at the log's last record: the writer moves it forward over the blocks it
//! re-encodes.
//!
//! This module must not interpret diffs: it moves bytes between memory and files.

use gigas_primitives::LatticeHash;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Why the archive could not read or write a file.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// An I/O error on a file or directory.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The index log is damaged before its last record (a torn last record is repaired, not
    /// reported).
    #[error("{path}: index log damaged at byte {offset}: {reason}; move the archive aside and let the sequencer rewrite it")]
    KeyLog {
        /// The log.
        path: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// The lattice mark is damaged.
    #[error("{path}: the state commitment's mark is damaged ({reason}); {remedy}", remedy = LATTICE_REMEDY)]
    Lattice {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
}

/// The archive's directory of state snapshots (`DIR/snapshots/`), which a full node writes
/// (`gigas-fullnode --snapshot-dir DIR/snapshots`) and the archive's server serves.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// What to do about a lost or damaged lattice mark.
pub const LATTICE_REMEDY: &str = "rebuild it with the key log from a full node that follows \
    this sequencer: stop both, then `gigas-sequencer rebuild-key-log --datadir DATADIR \
    --from-state FULLNODE_DATADIR/state`";

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Which kind of per-block file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `diffs/N`: the state diff.
    Diff,
    /// `blocks/N`: transactions and receipts.
    Block,
}

impl FileKind {
    /// The directory under the archive root, which is also the URL's first segment.
    pub fn dir_name(self) -> &'static str {
        match self {
            FileKind::Diff => "diffs",
            FileKind::Block => "blocks",
        }
    }
}

/// The newest published block, as `diffs/head` and `GET /diffs/head` give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveHead {
    /// Block number.
    pub number: u64,
    /// Block hash.
    pub hash: alloy_primitives::B256,
    /// The header's chained state checksum.
    pub state_root: alloy_primitives::B256,
}

impl ArchiveHead {
    /// The JSON the head file holds: `{"number":N,"hash":"0x..","stateRoot":"0x.."}`.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"number\":{},\"hash\":\"{}\",\"stateRoot\":\"{}\"}}",
            self.number, self.hash, self.state_root
        )
    }
}

/// The archive directory. Cheap to clone paths out of; all methods take `&self`, and
/// concurrent readers never see a partial file. One writer at a time.
#[derive(Debug)]
pub struct Archive {
    root: PathBuf,
}

impl Archive {
    /// Opens (creating if needed) the archive at `root`, and removes temporary files a crash
    /// left behind.
    pub fn open(root: &Path) -> Result<Self, ArchiveError> {
        for kind in [FileKind::Diff, FileKind::Block] {
            let dir = root.join(kind.dir_name());
            fs::create_dir_all(&dir).map_err(io_err(&dir))?;
            for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
                let entry = entry.map_err(io_err(&dir))?;
                if entry.file_name().to_string_lossy().ends_with(".tmp") {
                    let path = entry.path();
                    fs::remove_file(&path).map_err(io_err(&path))?;
                }
            }
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// The archive's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path of block `number`'s file of `kind`.
    pub fn path(&self, kind: FileKind, number: u64) -> PathBuf {
        self.root.join(kind.dir_name()).join(number.to_string())
    }

    /// Writes block `number`'s file of `kind` durably (temporary name, sync, rename, directory
    /// sync). Writing a file that exists replaces it; the writer only does that with the same
    /// bytes (see the module doc).
    pub fn write(&self, kind: FileKind, number: u64, bytes: &[u8]) -> Result<(), ArchiveError> {
        let path = self.path(kind, number);
        write_atomic(&path, bytes, true)
    }

    /// Reads block `number`'s file of `kind`, or `None` if the archive does not have it.
    pub fn read(&self, kind: FileKind, number: u64) -> Result<Option<Vec<u8>>, ArchiveError> {
        let path = self.path(kind, number);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// The size of block `number`'s file of `kind`, or `None` if the archive does not have
    /// it (what a streamed answer plans with before it reads).
    pub fn size(&self, kind: FileKind, number: u64) -> Result<Option<u64>, ArchiveError> {
        let path = self.path(kind, number);
        match fs::metadata(&path) {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// Whether block `number`'s file of `kind` exists.
    pub fn contains(&self, kind: FileKind, number: u64) -> bool {
        self.path(kind, number).is_file()
    }

    /// The lowest and highest block numbers with a file of `kind`, by listing the directory
    /// (done at start and by retention, not per request).
    pub fn range(&self, kind: FileKind) -> Result<Option<(u64, u64)>, ArchiveError> {
        let dir = self.root.join(kind.dir_name());
        let mut range: Option<(u64, u64)> = None;
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            let Some(n) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            range = Some(match range {
                None => (n, n),
                Some((lo, hi)) => (lo.min(n), hi.max(n)),
            });
        }
        Ok(range)
    }

    /// Rewrites `diffs/head`. Not synced: the head is derived from the newest diff and is
    /// rewritten on the next block, and readers of the archive treat it as a hint.
    pub fn write_head(&self, head: &ArchiveHead) -> Result<(), ArchiveError> {
        let path = self.root.join(FileKind::Diff.dir_name()).join("head");
        write_atomic(&path, head.to_json().as_bytes(), false)
    }

    /// Durably replaces the writer's lattice mark (`ROOT/lattice`): the lattice hash of the
    /// state after `mark.block`, with the key index at `mark.index_len` entries. The writer
    /// restarts its state commitment from it.
    pub fn write_lattice(&self, mark: &LatticeMark) -> Result<(), ArchiveError> {
        let mut bytes = Vec::with_capacity(LATTICE_FILE_LEN);
        bytes.extend_from_slice(&LATTICE_MAGIC);
        bytes.extend_from_slice(&mark.block.to_le_bytes());
        bytes.extend_from_slice(&mark.index_len.to_le_bytes());
        bytes.extend_from_slice(&mark.lattice.to_bytes());
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        write_atomic(&self.root.join("lattice"), &bytes, true)
    }

    /// Reads the lattice mark; `Ok(None)` when there is none.
    pub fn read_lattice(&self) -> Result<Option<LatticeMark>, ArchiveError> {
        let path = self.root.join("lattice");
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let damaged = |reason| ArchiveError::Lattice {
            path: path.clone(),
            reason,
        };
        if bytes.len() != LATTICE_FILE_LEN {
            return Err(damaged("wrong length"));
        }
        let (body, crc) = bytes.split_at(LATTICE_FILE_LEN - 4);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return Err(damaged("CRC mismatch"));
        }
        if body[..4] != LATTICE_MAGIC {
            return Err(damaged("bad magic or version"));
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&body[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let lattice =
            LatticeHash::from_bytes(&body[20..]).ok_or_else(|| damaged("wrong length"))?;
        Ok(Some(LatticeMark {
            block: word(4),
            index_len: word(12),
            lattice,
        }))
    }

    /// Deletes both kinds of files of blocks `from..to` (retention). Missing files are fine.
    /// Returns how many files were removed.
    pub fn remove_range(&self, from: u64, to: u64) -> Result<u64, ArchiveError> {
        let mut removed = 0;
        for n in from..to {
            for kind in [FileKind::Diff, FileKind::Block] {
                let path = self.path(kind, n);
                match fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(&path)(e)),
                }
            }
        }
        Ok(removed)
    }
}

/// The lattice mark's magic and version.
const LATTICE_MAGIC: [u8; 4] = *b"GSL\x01";
/// Magic, block, index length, the 2,048 bytes, CRC.
const LATTICE_FILE_LEN: usize = 4 + 8 + 8 + 2048 + 4;

/// Where the sequencer's state commitment stood at a block ([`Archive::write_lattice`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatticeMark {
    /// The block.
    pub block: u64,
    /// Entries of the key index after it.
    pub index_len: u64,
    /// The lattice hash of the state after it.
    pub lattice: LatticeHash,
}

/// Writes `bytes` to `path` through a temporary file and a rename; with `durable`, syncs the
/// file before the rename and the directory after it.
fn write_atomic(path: &Path, bytes: &[u8], durable: bool) -> Result<(), ArchiveError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp).map_err(io_err(&tmp))?;
    file.write_all(bytes).map_err(io_err(&tmp))?;
    if durable {
        file.sync_all().map_err(io_err(&tmp))?;
    }
    drop(file);
    fs::rename(&tmp, path).map_err(io_err(path))?;
    if durable {
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err(dir))?;
        }
    }
    Ok(())
}

/// The writer's log of enumeration-index additions: one record per block, holding the new
/// keys' encoding (opaque here).
///
/// Record: block number (u64 LE), payload length (u32 LE), payload, CRC-32 of the three
/// (u32 LE). Records are in strictly increasing block order, but blocks that added no key
/// have none.
#[derive(Debug)]
pub struct KeyLog {
    path: PathBuf,
    file: File,
    last_block: Option<u64>,
}

const RECORD_OVERHEAD: usize = 8 + 4 + 4;

impl KeyLog {
    /// Opens the log, truncating a torn last record, and calls `each(block, payload)` for
    /// every record in order; records of blocks after `keep_through` (whose diff files were
    /// lost) are cut off too. Returns the log, positioned for appending.
    pub fn open(
        path: &Path,
        keep_through: u64,
        mut each: impl FnMut(u64, &[u8]) -> Result<(), ArchiveError>,
    ) -> Result<Self, ArchiveError> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io_err(path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io_err(path))?;
        let mut at = 0usize;
        let mut last_block = None;
        let damaged = |offset: usize, reason| ArchiveError::KeyLog {
            path: path.to_path_buf(),
            offset: offset as u64,
            reason,
        };
        while at < bytes.len() {
            let rest = &bytes[at..];
            if rest.len() < RECORD_OVERHEAD {
                break; // a torn tail
            }
            let block = u64::from_le_bytes(rest[..8].try_into().unwrap_or_default());
            let len = u32::from_le_bytes(rest[8..12].try_into().unwrap_or_default()) as usize;
            let Some(end) = len
                .checked_add(RECORD_OVERHEAD)
                .filter(|e| *e <= rest.len())
            else {
                break; // torn: the length runs past the end
            };
            let crc = u32::from_le_bytes(rest[end - 4..end].try_into().unwrap_or_default());
            if crc32fast::hash(&rest[..end - 4]) != crc {
                if at + end == bytes.len() {
                    break; // a torn last record
                }
                return Err(damaged(at, "checksum mismatch"));
            }
            if last_block.is_some_and(|b| block <= b) {
                return Err(damaged(at, "block numbers not increasing"));
            }
            if block > keep_through {
                break;
            }
            each(block, &rest[12..end - 4])?;
            last_block = Some(block);
            at += end;
        }
        if at < bytes.len() {
            file.set_len(at as u64).map_err(io_err(path))?;
            file.sync_all().map_err(io_err(path))?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            last_block,
        })
    }

    /// The newest block with a record.
    pub fn last_block(&self) -> Option<u64> {
        self.last_block
    }

    /// Appends block `block`'s record. Not synced: a lost record only makes the writer
    /// re-encode that block at start (see the module doc).
    pub fn append(&mut self, block: u64, payload: &[u8]) -> Result<(), ArchiveError> {
        debug_assert!(self.last_block.is_none_or(|b| block > b));
        let mut record = Vec::with_capacity(payload.len() + RECORD_OVERHEAD);
        record.extend_from_slice(&block.to_le_bytes());
        record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        record.extend_from_slice(payload);
        let crc = crc32fast::hash(&record);
        record.extend_from_slice(&crc.to_le_bytes());
        self.file.write_all(&record).map_err(io_err(&self.path))?;
        self.last_block = Some(block);
        Ok(())
    }

    /// Flushes appended records to disk (called now and then, and at shutdown).
    pub fn sync(&self) -> Result<(), ArchiveError> {
        self.file.sync_data().map_err(io_err(&self.path))
    }
}
