//! The log of applied blocks not yet committed: what lets the apply thread serve a block as
//! soon as it is applied while it commits the database once per group.
//!
//! A commit per block writes every page the block touches (about 120 MB per block over 10M
//! accounts, measured), so the apply thread commits groups; but a block served from the open
//! group (`crate::window`'s redo records) must survive a kill like a committed one. Before a
//! block is served, its verified diff is appended here, one `write` of a checksummed record;
//! a process kill leaves it in the page cache. At start the records after the database's
//! head are verified and applied again and committed ([`recover`]) before anything is
//! served. Each commit drops the records it committed: it empties the log, or, when blocks
//! were applied above it while it ran on the commit thread
//! ([`gigas_statedb::WriterOptions::commit_thread`]), rewrites the file with theirs only.
//!
//! **Owns:** the file `applied.wal` in the data directory and its record format:
//! `magic (4) ‖ block (8) ‖ length (4) ‖ CRC-32 of block ‖ diff (4) ‖ diff`, little-endian.
//!
//! **Must not:** be trusted (each record is verified again as a fetched diff is), or weaken
//! the database's durability: under `--db.sync durable` each record is synced before its
//! block is served, as each commit is; under `periodic` (the default) it is not, and after a
//! power loss the database rolls back to its last durable point, the log is read only as far
//! as its records are whole, follow that point and verify, and the rest is fetched again.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use alloy_primitives::Address;
use gigas_statedb::{StateDb, WriterOptions};
use gigas_statediff::ChainTip;
use tracing::{info, warn};

use crate::apply::{Applier, ApplyError};

/// The log's file name in the data directory.
pub const FILE_NAME: &str = "applied.wal";

const MAGIC: u32 = 0x3157_4c47; // "GLW1"
const HEADER: usize = 4 + 8 + 4 + 4;
/// A diff larger than this is not a record of this log (the diff decoder's own bound is
/// lower), so a corrupt length never makes the reader allocate gigabytes.
const MAX_RECORD: usize = 256 << 20;

/// Why the log failed.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// Reading, writing or truncating the file failed.
    #[error("the applied-block log {path}: {what}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// Applying a logged block again failed on the local database.
    #[error("applying block {block} again from the applied-block log: {source}")]
    Apply {
        /// The block.
        block: u64,
        /// The cause.
        source: ApplyError,
    },
    /// Committing the replayed blocks failed.
    #[error("committing the blocks replayed from the applied-block log: {0}")]
    Commit(#[from] gigas_statedb::StateDbError),
}

/// The open log, positioned at its end.
#[derive(Debug)]
pub struct AppliedLog {
    path: PathBuf,
    file: File,
    len: u64,
    records: u64,
    /// Each record's block and offset, in file order.
    offsets: std::collections::VecDeque<(u64, u64)>,
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The block.
    pub number: u64,
    /// Its diff file, as fetched.
    pub diff: Vec<u8>,
}

fn crc(number: u64, diff: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&number.to_le_bytes());
    h.update(diff);
    h.finalize()
}

impl AppliedLog {
    /// Opens (or creates) the log at `path` and reads its whole records; a torn or damaged
    /// tail is cut off, so appends continue after the last whole record.
    pub fn open(path: &Path) -> Result<(Self, Vec<Record>), WalError> {
        let io = |what| {
            let path = path.to_path_buf();
            move |source| WalError::Io { path, what, source }
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io("open"))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io("read"))?;
        let mut records = Vec::new();
        let mut offsets = std::collections::VecDeque::new();
        let mut at = 0usize;
        while let Some((record, next)) = parse(&bytes, at) {
            offsets.push_back((record.number, at as u64));
            records.push(record);
            at = next;
        }
        if at < bytes.len() {
            warn!(
                path = %path.display(),
                whole = records.len(),
                cut_bytes = bytes.len() - at,
                "the applied-block log ends in a torn or damaged record; cutting it off"
            );
            file.set_len(at as u64).map_err(io("truncate"))?;
        }
        file.seek(SeekFrom::Start(at as u64)).map_err(io("seek"))?;
        let log = Self {
            path: path.to_path_buf(),
            file,
            len: at as u64,
            records: records.len() as u64,
            offsets,
        };
        Ok((log, records))
    }

    /// Appends block `number`'s diff in one write, synced to the disk when `sync`.
    pub fn append(&mut self, number: u64, diff: &[u8], sync: bool) -> Result<(), WalError> {
        let mut record = Vec::with_capacity(HEADER + diff.len());
        record.extend_from_slice(&MAGIC.to_le_bytes());
        record.extend_from_slice(&number.to_le_bytes());
        // A diff over 4 GiB cannot have been verified (the decoder bounds it far lower).
        record.extend_from_slice(&u32::try_from(diff.len()).unwrap_or(u32::MAX).to_le_bytes());
        record.extend_from_slice(&crc(number, diff).to_le_bytes());
        record.extend_from_slice(diff);
        self.file
            .write_all(&record)
            .map_err(|source| WalError::Io {
                path: self.path.clone(),
                what: "append",
                source,
            })?;
        if sync {
            self.file.sync_data().map_err(|source| WalError::Io {
                path: self.path.clone(),
                what: "sync",
                source,
            })?;
        }
        self.offsets.push_back((number, self.len));
        self.len += record.len() as u64;
        self.records += 1;
        Ok(())
    }

    /// Drops the records of blocks up to `head`, now committed, and keeps those after it
    /// (applied while the commit ran on the commit thread): empties the log when none is
    /// after, else writes them to a new file renamed over the log, so that a kill finds
    /// the old log or the new one, whole (synced first when `sync`).
    pub fn committed_through(&mut self, head: u64, sync: bool) -> Result<(), WalError> {
        let Some(&(_, from)) = self.offsets.iter().find(|(number, _)| *number > head) else {
            return self.clear();
        };
        if from == 0 {
            return Ok(());
        }
        let io = |what| {
            let path = self.path.clone();
            move |source| WalError::Io { path, what, source }
        };
        let mut tail = vec![0u8; usize::try_from(self.len - from).unwrap_or(usize::MAX)];
        self.file.seek(SeekFrom::Start(from)).map_err(io("seek"))?;
        self.file.read_exact(&mut tail).map_err(io("read"))?;
        let fresh = self.path.with_extension("wal.new");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&fresh)
            .map_err(io("create the rewritten log"))?;
        file.write_all(&tail)
            .map_err(io("write the rewritten log"))?;
        if sync {
            file.sync_data().map_err(io("sync the rewritten log"))?;
        }
        std::fs::rename(&fresh, &self.path).map_err(io("rename the rewritten log"))?;
        if sync {
            if let Some(dir) = self.path.parent() {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io("sync the log's directory"))?;
            }
        }
        self.file = file;
        self.len = tail.len() as u64;
        self.offsets.retain(|(number, _)| *number > head);
        for (_, offset) in &mut self.offsets {
            *offset -= from;
        }
        self.records = self.offsets.len() as u64;
        Ok(())
    }

    /// Drops the records of blocks after `head` (applied, then discarded by the writer):
    /// the file is cut where the first of them starts.
    pub fn discard_after(&mut self, head: u64) -> Result<(), WalError> {
        let Some(&(_, from)) = self.offsets.iter().find(|(number, _)| *number > head) else {
            return Ok(());
        };
        let io = |what| {
            let path = self.path.clone();
            move |source| WalError::Io { path, what, source }
        };
        self.file.set_len(from).map_err(io("truncate"))?;
        self.file.seek(SeekFrom::Start(from)).map_err(io("seek"))?;
        self.len = from;
        self.offsets.retain(|(number, _)| *number <= head);
        self.records = self.offsets.len() as u64;
        Ok(())
    }

    /// Empties the log (every record in it is committed).
    pub fn clear(&mut self) -> Result<(), WalError> {
        if self.len == 0 {
            return Ok(());
        }
        let io = |what| {
            let path = self.path.clone();
            move |source| WalError::Io { path, what, source }
        };
        self.file.set_len(0).map_err(io("truncate"))?;
        self.file.seek(SeekFrom::Start(0)).map_err(io("seek"))?;
        self.len = 0;
        self.records = 0;
        self.offsets.clear();
        Ok(())
    }

    /// Bytes in the log.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records in the log.
    pub fn records(&self) -> u64 {
        self.records
    }
}

/// The whole record at `at`, and where the next begins.
fn parse(bytes: &[u8], at: usize) -> Option<(Record, usize)> {
    let header = bytes.get(at..at.checked_add(HEADER)?)?;
    let word =
        |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    if word(0) != MAGIC {
        return None;
    }
    let mut number = [0u8; 8];
    number.copy_from_slice(&header[4..12]);
    let number = u64::from_le_bytes(number);
    let len = usize::try_from(word(12)).ok()?;
    if len > MAX_RECORD {
        return None;
    }
    let start = at + HEADER;
    let diff = bytes.get(start..start.checked_add(len)?)?;
    (crc(number, diff) == word(16)).then(|| {
        (
            Record {
                number,
                diff: diff.to_vec(),
            },
            start + len,
        )
    })
}

/// Applies the logged blocks that follow the database's head again (verified as fetched
/// diffs are), commits them, and empties the log; returns the new head. Records at or below
/// the head are already committed; a record that does not follow, or fails verification,
/// ends the replay (what follows it is fetched again).
pub fn recover(
    db: &StateDb,
    path: &Path,
    options: WriterOptions,
    sequencer: Address,
    head: ChainTip,
) -> Result<ChainTip, WalError> {
    let (mut log, records) = AppliedLog::open(path)?;
    if records.iter().all(|r| r.number <= head.number) {
        log.clear()?;
        return Ok(head);
    }
    let mut applier = Applier::new(db, options, sequencer).map_err(WalError::Commit)?;
    let mut replayed = 0u64;
    for record in records.iter().filter(|r| r.number > head.number) {
        let next = applier.tip().number + 1;
        if record.number != next {
            warn!(
                expected = next,
                found = record.number,
                "the applied-block log skips a block; the rest is fetched again"
            );
            break;
        }
        match applier.apply(&record.diff) {
            Ok(_) => replayed += 1,
            Err(ApplyError::Rejected(e)) => {
                warn!(block = record.number, error = %e, "a logged block failed verification; it is fetched again");
                break;
            }
            // The writer discarded the blocks replayed so far with it: all are fetched again.
            Err(ApplyError::Store(e @ gigas_statedb::StateDbError::StateRootMismatch { .. })) => {
                warn!(block = record.number, error = %e, "a logged block's state root is not its header's; the logged blocks are fetched again");
                break;
            }
            Err(source) => {
                return Err(WalError::Apply {
                    block: record.number,
                    source,
                })
            }
        }
    }
    match applier.commit() {
        Ok(_) => {}
        Err(e @ gigas_statedb::StateDbError::StateRootMismatch { .. }) => {
            warn!(error = %e, "a logged block's state root is not its header's; the logged blocks are fetched again");
        }
        Err(e) => return Err(e.into()),
    }
    let tip = applier.committed_tip();
    drop(applier);
    log.clear()?;
    info!(
        replayed,
        head = tip.number,
        "applied again the blocks logged and not committed before the last stop"
    );
    Ok(tip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (mut log, records) = AppliedLog::open(&path).unwrap();
        assert!(records.is_empty());
        log.append(7, b"seven", false).unwrap();
        log.append(8, &[0xab; 1000], true).unwrap();
        drop(log);
        let (log, records) = AppliedLog::open(&path).unwrap();
        assert_eq!(
            records,
            vec![
                Record {
                    number: 7,
                    diff: b"seven".to_vec()
                },
                Record {
                    number: 8,
                    diff: vec![0xab; 1000]
                }
            ]
        );
        let whole = log.len();
        drop(log);

        // A record torn by a kill in the middle of its write, then one appended after
        // reopening: the torn bytes are cut and the new record follows the last whole one.
        let mut bytes = std::fs::read(&path).unwrap();
        let mut torn = bytes.clone();
        torn.extend_from_slice(&MAGIC.to_le_bytes());
        torn.extend_from_slice(&9u64.to_le_bytes());
        std::fs::write(&path, &torn).unwrap();
        let (mut log, records) = AppliedLog::open(&path).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(log.len(), whole);
        log.append(9, b"nine", false).unwrap();
        drop(log);
        let (_, records) = AppliedLog::open(&path).unwrap();
        assert_eq!(
            records.iter().map(|r| r.number).collect::<Vec<_>>(),
            [7, 8, 9]
        );

        // A flipped byte inside a record ends the log there.
        bytes = std::fs::read(&path).unwrap();
        bytes[HEADER + 2] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let (log, records) = AppliedLog::open(&path).unwrap();
        assert!(records.is_empty());
        assert!(log.is_empty());
    }

    /// A commit that landed while later blocks were logged keeps theirs, in order, and
    /// appends go on after them; a commit past every record empties the file.
    #[test]
    fn a_commit_drops_only_the_records_it_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (mut log, _) = AppliedLog::open(&path).unwrap();
        for n in 1..=5u64 {
            log.append(n, &vec![n as u8; 100 * n as usize], false)
                .unwrap();
        }
        log.committed_through(0, true).unwrap();
        assert_eq!(log.records(), 5);
        log.committed_through(3, true).unwrap();
        assert_eq!(log.records(), 2);
        assert_eq!(log.len(), std::fs::metadata(&path).unwrap().len());
        log.append(6, b"six", false).unwrap();
        drop(log);
        let (mut log, records) = AppliedLog::open(&path).unwrap();
        assert_eq!(
            records.iter().map(|r| r.number).collect::<Vec<_>>(),
            [4, 5, 6]
        );
        assert_eq!(records[1].diff, vec![5u8; 500]);
        log.committed_through(5, false).unwrap();
        log.append(7, b"seven", false).unwrap();
        drop(log);
        let (mut log, records) = AppliedLog::open(&path).unwrap();
        assert_eq!(records.iter().map(|r| r.number).collect::<Vec<_>>(), [6, 7]);
        log.committed_through(7, false).unwrap();
        assert!(log.is_empty());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        assert!(!path.with_extension("wal.new").exists());
    }

    #[test]
    fn clearing_empties_the_file_and_appends_start_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let (mut log, _) = AppliedLog::open(&path).unwrap();
        log.append(1, b"one", false).unwrap();
        log.clear().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        log.append(2, b"two", false).unwrap();
        assert_eq!(log.records(), 1);
        drop(log);
        let (_, records) = AppliedLog::open(&path).unwrap();
        assert_eq!(records.iter().map(|r| r.number).collect::<Vec<_>>(), [2]);
    }
}
