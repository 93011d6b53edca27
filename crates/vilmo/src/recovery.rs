//! Verifying log files before anything is applied or changed on disk.
//!
//! Opening a store, and syncing one from a peer's files, first *scans* every log file with
//! ordinary reads (never through a mapping, so that a device read error is an error naming the
//! file and offset instead of SIGBUS), verifies every batch, checks the fields of every record
//! against bounds, and checks that the files and the drop records form one unbroken chain.
//! Only then does the store cut a torn tail, map files, apply records or unlink compacted
//! files: an open that fails has changed nothing but a torn tail's cut.
//!
//! # What a crash may leave in the newest file
//!
//! Only the last batch of the newest file can be unacknowledged (each commit syncs before the
//! next one writes). A file system may persist its pages in any order and the file size before
//! or after them, so that batch may be short (a prefix), or have its full length with some
//! pages still zero. A last batch of the newest file that fails verification is therefore torn
//! when it is short, or when its bytes in some page are all zero; any other failure (a flipped
//! bit) is corruption. A newest file whose 64-byte header is all zero (or shorter than the
//! header) was created at rotation and never synced: nothing in it was acknowledged.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::*;

/// Page size the torn-write rule reasons in. File systems write back whole pages; 4 KiB is the
/// smallest page of the platforms the store runs on, and a larger page is a run of 4 KiB ones.
pub(crate) const PAGE: u64 = 4096;

/// The highest file number: names have eight digits.
pub(crate) const MAX_FILE_ID: u32 = 99_999_999;

/// Offsets in the index are 32-bit; a longer file cannot be indexed.
pub(crate) const MAX_FILE_LEN: u64 = u32::MAX as u64;

/// The name of log file `id`.
pub(crate) fn file_name(id: u32) -> String {
    format!("{id:08}.vlog")
}

/// The number of a log file named exactly as [`file_name`] names it (eight digits, `.vlog`);
/// `None` for any other name, so that `1.vlog` or `+1.vlog` is never taken for file 1.
pub(crate) fn parse_file_name(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".vlog")?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: u32 = digits.parse().ok()?;
    (id >= 1).then_some(id)
}

/// What scanning one log file found. Nothing was changed on disk.
#[derive(Debug)]
pub(crate) struct Scan {
    pub id: u32,
    pub path: PathBuf,
    /// `None`: the newest file's header never became durable; the file is removed.
    pub header: Option<FileHeader>,
    /// The file's length.
    pub len: u64,
    /// Where the last complete, verified batch ends; a torn tail from here on is cut.
    pub end: u64,
    /// The last verified batch (the one before the first when there is none).
    pub last_batch: u64,
    /// Its checksum (the anchor when there is no batch).
    pub last_checksum: Checksum,
    /// Drop records in the file, in order.
    pub drops: Vec<FileSpan>,
    /// Why the tail is torn, when it is.
    pub torn: Option<&'static str>,
}

impl Scan {
    pub(crate) fn span(&self) -> Option<FileSpan> {
        self.header.map(|h| FileSpan {
            file_id: self.id,
            first_batch: h.first_batch,
            last_batch: self.last_batch,
            anchor: h.anchor,
            last: self.last_checksum,
        })
    }
}

/// Reads of one file by offset: `read(buf, offset)` fills `buf` or fails.
pub(crate) type ReadAt<'a> = &'a dyn Fn(&mut [u8], u64) -> io::Result<()>;

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

fn read_failed(path: &Path, offset: u64, e: io::Error) -> Error {
    corrupt(path, offset, format!("read failed: {e}"))
}

/// Whether the bytes of `[from, to)` that lie in some 4 KiB page of the file are all zero:
/// the mark of a page that was not written back before a crash.
fn has_zero_page_run(read: ReadAt<'_>, path: &Path, from: u64, to: u64) -> Result<bool> {
    let mut buf = vec![0u8; PAGE as usize];
    let mut page_start = from - from % PAGE;
    while page_start < to {
        let a = page_start.max(from);
        let b = (page_start + PAGE).min(to);
        let piece = &mut buf[..(b - a) as usize];
        read(piece, a).map_err(|e| read_failed(path, a, e))?;
        if piece.iter().all(|&x| x == 0) {
            return Ok(true);
        }
        page_start += PAGE;
    }
    Ok(false)
}

/// Verifies log file `id` (of length `len`) with ordinary reads: its header, every batch's
/// header, checksum and chain, and every record's layout and bounds. `newest` allows a torn
/// tail (see the module documentation).
pub(crate) fn scan_file(
    read: ReadAt<'_>,
    len: u64,
    path: &Path,
    id: u32,
    newest: bool,
) -> Result<Scan> {
    let mut scan = Scan {
        id,
        path: path.to_path_buf(),
        header: None,
        len,
        end: 0,
        last_batch: 0,
        last_checksum: GENESIS,
        drops: Vec::new(),
        torn: None,
    };
    if len > MAX_FILE_LEN {
        return Err(corrupt(
            path,
            MAX_FILE_LEN,
            format!("file of {len} bytes is longer than the format's 4 GiB"),
        ));
    }
    let mut head = [0u8; FILE_HEADER_LEN];
    if len < FILE_HEADER_LEN as u64 {
        if newest {
            scan.torn = Some("file shorter than its header (created at rotation, never synced)");
            return Ok(scan);
        }
        return Err(corrupt(path, 0, "file shorter than its header"));
    }
    read(&mut head, 0).map_err(|e| read_failed(path, 0, e))?;
    let header = match FileHeader::decode(&head) {
        Ok(h) => h,
        Err(_) if newest && head.iter().all(|&b| b == 0) => {
            scan.torn = Some("file header of zeros (created at rotation, never synced)");
            return Ok(scan);
        }
        Err(reason) => return Err(corrupt(path, 0, reason)),
    };
    if header.file_id != id {
        return Err(corrupt(
            path,
            12,
            format!(
                "header names file {} but the file is named {id}",
                header.file_id
            ),
        ));
    }
    // Every file before this one holds at least one batch, so a file's number never exceeds
    // its first batch's: this bounds ids that a forged header could make huge.
    if u64::from(id) > header.first_batch {
        return Err(corrupt(
            path,
            16,
            format!(
                "file {id} claims to start at batch {}, before {id} files could hold a batch each",
                header.first_batch
            ),
        ));
    }
    scan.header = Some(header);
    scan.end = FILE_HEADER_LEN as u64;
    scan.last_batch = header.first_batch - 1;
    scan.last_checksum = header.anchor;

    let mut offset = FILE_HEADER_LEN as u64;
    let mut buf = Vec::new();
    while offset < len {
        let rest = len - offset;
        if rest < BATCH_HEADER_LEN as u64 {
            if newest {
                scan.torn = Some("batch header cut short");
                break;
            }
            return Err(corrupt(
                path,
                offset,
                "incomplete batch in a log file that is not the newest",
            ));
        }
        let mut bh_bytes = [0u8; BATCH_HEADER_LEN];
        read(&mut bh_bytes, offset).map_err(|e| read_failed(path, offset, e))?;
        let bh = match decode_batch_header(&bh_bytes) {
            Ok(bh) => bh,
            Err(reason) => {
                // The header's length is unknown, so the batch is taken to reach the end of the
                // file; torn only when the header itself sits in a page of zeros.
                let header_end = (offset + BATCH_HEADER_LEN as u64).min(len);
                if newest && has_zero_page_run(read, path, offset, header_end)? {
                    scan.torn = Some("last batch's header in a page of zeros");
                    break;
                }
                return Err(corrupt(path, offset, reason));
            }
        };
        let total = (BATCH_HEADER_LEN + FOOTER_LEN) as u64 + u64::from(bh.body_len);
        if rest < total {
            if newest {
                scan.torn = Some("last batch cut short");
                break;
            }
            return Err(corrupt(
                path,
                offset,
                "incomplete batch in a log file that is not the newest",
            ));
        }
        let last_in_file = offset + total == len;
        // The batch's bytes are bounded by the file's real length checked above, never by a
        // length field alone.
        buf.resize((total - BATCH_HEADER_LEN as u64) as usize, 0);
        let body_at = offset + BATCH_HEADER_LEN as u64;
        read(&mut buf, body_at).map_err(|e| read_failed(path, body_at, e))?;
        let body = &buf[..bh.body_len as usize];
        let footer = &buf[bh.body_len as usize..];
        let checksum = batch_checksum(&scan.last_checksum, &bh_bytes, body);
        let verified = footer[0..4] == FOOTER_MAGIC && footer[4..] == checksum;
        if !verified {
            if newest && last_in_file && has_zero_page_run(read, path, offset, len)? {
                scan.torn = Some("last batch holds a page of zeros");
                break;
            }
            if footer[0..4] != FOOTER_MAGIC {
                return Err(corrupt(
                    path,
                    offset + total - FOOTER_LEN as u64,
                    "bad batch footer magic",
                ));
            }
            return Err(corrupt(
                path,
                offset,
                format!("checksum mismatch in batch {} (a byte of the batch or of an earlier batch's checksum changed)", bh.number),
            ));
        }
        if bh.number != scan.last_batch.wrapping_add(1) {
            return Err(corrupt(
                path,
                offset,
                format!("batch {} follows batch {}", bh.number, scan.last_batch),
            ));
        }
        check_records(body, &bh, id, path, body_at, &mut scan.drops)?;
        scan.last_batch = bh.number;
        scan.last_checksum = checksum;
        offset += total;
        scan.end = offset;
    }
    Ok(scan)
}

/// Decodes every record of a verified batch and checks its fields against what the writer can
/// produce, so that a checksummed but malicious file (from a peer) cannot make replay delete
/// files, allocate by a huge id or read past a file.
fn check_records(
    body: &[u8],
    bh: &BatchHeader,
    id: u32,
    path: &Path,
    body_at: u64,
    drops: &mut Vec<FileSpan>,
) -> Result<()> {
    let mut at = 0usize;
    let mut count = 0u32;
    while at < body.len() {
        let offset = body_at + at as u64;
        let bad = |reason: String| {
            corrupt(
                path,
                offset,
                format!("record {count} of batch {}: {reason}", bh.number),
            )
        };
        let (record, len) = Record::decode(&body[at..]).map_err(|r| bad(r.into()))?;
        match record {
            // A put supersedes a version in an older file (or its own, before rotation decided).
            Record::Put { supersedes, .. } if supersedes != NO_FILE && supersedes > id => {
                return Err(bad(format!(
                    "put supersedes file {supersedes}, after its own file {id}"
                )));
            }
            Record::Nullify { target, .. } if target > id => {
                return Err(bad(format!(
                    "nullify targets file {target}, after its own file {id}"
                )));
            }
            Record::Drop(span) => {
                if span.file_id == 0 || span.file_id >= id {
                    return Err(bad(format!(
                        "drop of file {} in file {id}: only older files are dropped",
                        span.file_id
                    )));
                }
                if span.first_batch < u64::from(span.file_id)
                    || span.first_batch > span.last_batch
                    || span.last_batch >= bh.number
                {
                    return Err(bad(format!(
                        "drop of file {} spans batches {}..={}, impossible before batch {}",
                        span.file_id, span.first_batch, span.last_batch, bh.number
                    )));
                }
                drops.push(span);
            }
            Record::Cursor { victim, next } => {
                if victim == 0 || victim >= id {
                    return Err(bad(format!(
                        "compaction cursor names file {victim} in file {id}"
                    )));
                }
                if next < FILE_HEADER_LEN as u64 || next > MAX_FILE_LEN {
                    return Err(bad(format!(
                        "compaction cursor at byte {next}, outside any file"
                    )));
                }
            }
            _ => {}
        }
        at += len;
        count += 1;
    }
    if count != bh.records {
        return Err(corrupt(
            path,
            body_at,
            format!(
                "batch {} declares {} records but holds {count}",
                bh.number, bh.records
            ),
        ));
    }
    Ok(())
}

/// Checks that the files present (their scans) and the files compacted away (the drop records)
/// form one unbroken chain from the first batch; returns where it ends (batch, checksum).
pub(crate) fn check_chain(dir: &Path, scans: &[Scan]) -> Result<(u64, Checksum)> {
    let present: BTreeMap<u32, (FileSpan, &Path)> = scans
        .iter()
        .filter_map(|s| s.span().map(|span| (s.id, (span, s.path.as_path()))))
        .collect();
    let mut drops: BTreeMap<u32, FileSpan> = BTreeMap::new();
    for scan in scans {
        for span in &scan.drops {
            // Compaction copies drop records forward, so one file's drop appears many times;
            // every copy must say the same.
            if let Some(previous) = drops.insert(span.file_id, *span) {
                if previous != *span {
                    return Err(corrupt(
                        &scan.path,
                        0,
                        format!("two different drop records for file {}", span.file_id),
                    ));
                }
            }
        }
    }
    for (id, (span, path)) in &present {
        if let Some(dropped) = drops.get(id) {
            if dropped != span {
                return Err(corrupt(
                    path,
                    0,
                    format!("file {id} is present but differs from its drop record"),
                ));
            }
        }
    }
    let accounted = |id: u32| present.contains_key(&id) || drops.contains_key(&id);
    // Name a file missing between present files first: a gap below the oldest present file may
    // only mean that the drop records explaining it were in the missing file.
    if let (Some(&lo), Some(&hi)) = (present.keys().next(), present.keys().next_back()) {
        if let Some(id) = (lo..=hi).find(|id| !accounted(*id)) {
            let before = (lo..id)
                .rev()
                .find(|i| accounted(*i))
                .map_or("genesis".into(), |i| format!("file {i}"));
            let after = (id + 1..=hi)
                .find(|i| accounted(*i))
                .map_or("the end".into(), |i| format!("file {i}"));
            return Err(Error::MissingFile {
                dir: dir.to_path_buf(),
                file_id: id,
                before,
                after,
            });
        }
    }
    let max_id = present
        .keys()
        .next_back()
        .copied()
        .unwrap_or(0)
        .max(drops.keys().next_back().copied().unwrap_or(0));
    let mut prev_batch = 0u64;
    let mut prev_checksum = GENESIS;
    let mut prev_name = "genesis".to_string();
    for id in 1..=max_id {
        let (span, what) = match (present.get(&id), drops.get(&id)) {
            (Some((span, _)), _) => (*span, "file"),
            (None, Some(span)) => (*span, "dropped file"),
            (None, None) => {
                let after = (id + 1..=max_id)
                    .find(|i| accounted(*i))
                    .map_or_else(|| "the end".to_string(), |i| format!("file {i}"));
                return Err(Error::MissingFile {
                    dir: dir.to_path_buf(),
                    file_id: id,
                    before: prev_name,
                    after,
                });
            }
        };
        if span.first_batch != prev_batch + 1 || span.anchor != prev_checksum {
            return Err(corrupt(
                &dir.join(file_name(id)),
                16,
                format!(
                    "{what} {id} starts at batch {} after checksum {}, but {prev_name} ends at batch {prev_batch} with checksum {}",
                    span.first_batch,
                    hex(&span.anchor),
                    hex(&prev_checksum)
                ),
            ));
        }
        prev_batch = span.last_batch;
        prev_checksum = span.last;
        prev_name = format!("{what} {id}");
    }
    // A dropped file after the newest present one would mean the chain ends in a file that is
    // gone: its batches cannot be replayed.
    if let Some((&last_dropped, _)) = drops.iter().next_back() {
        if present
            .keys()
            .next_back()
            .is_none_or(|&hi| last_dropped > hi)
        {
            return Err(corrupt(
                dir,
                0,
                format!("the chain ends in file {last_dropped}, which was compacted away"),
            ));
        }
    }
    Ok((prev_batch, prev_checksum))
}

pub(crate) fn hex(c: &Checksum) -> String {
    c.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_names_are_log_files() {
        assert_eq!(parse_file_name("00000001.vlog"), Some(1));
        assert_eq!(parse_file_name("99999999.vlog"), Some(MAX_FILE_ID));
        for name in [
            "1.vlog",
            "+1.vlog",
            "+0000001.vlog",
            "0000001.vlog",
            "000000001.vlog",
            "00000000.vlog",
            "0000000a.vlog",
            " 0000001.vlog",
            "00000001.vlog.tmp",
            "LOCK",
        ] {
            assert_eq!(parse_file_name(name), None, "{name}");
        }
        assert_eq!(parse_file_name(&file_name(42)), Some(42));
    }
}
