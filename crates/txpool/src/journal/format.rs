//! The file format: the file header, encoding a batch, and parsing a file's batches.

use std::path::Path;

use alloy_primitives::Bytes;

use super::{JournalError, BATCH_HEADER_LEN, FILE_HEADER_LEN, MAGIC, VERSION};

pub(super) fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut header = [0u8; FILE_HEADER_LEN];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header
}

pub(super) fn encode_batch<'a>(records: impl Iterator<Item = &'a Bytes> + Clone) -> Vec<u8> {
    let payload_len: usize = records.clone().map(|raw| raw.len() + 4).sum();
    let mut batch = Vec::with_capacity(BATCH_HEADER_LEN + payload_len);
    batch.extend_from_slice(&[0u8; BATCH_HEADER_LEN]);
    for raw in records {
        // Lengths are bounded by MAX_RECORD, checked by every caller.
        batch.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        batch.extend_from_slice(raw);
    }
    let payload_crc = crc32fast::hash(&batch[BATCH_HEADER_LEN..]);
    batch[0..4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    batch[4..8].copy_from_slice(&payload_crc.to_le_bytes());
    let header_crc = crc32fast::hash(&batch[0..8]);
    batch[8..12].copy_from_slice(&header_crc.to_le_bytes());
    batch
}

pub(super) struct Parsed {
    pub(super) records: Vec<Bytes>,
    /// Where the intact batches end.
    pub(super) valid_end: usize,
    /// Why the rest is a torn tail, if there is a rest.
    pub(super) torn: Option<String>,
}

pub(super) fn parse(data: &[u8], path: &Path) -> Result<Parsed, JournalError> {
    let corrupt = |offset: usize, reason: String| JournalError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    let mut records = Vec::new();
    let mut offset = FILE_HEADER_LEN;
    let torn = |records, offset, reason: &str| {
        Ok(Parsed {
            records,
            valid_end: offset,
            torn: Some(reason.to_string()),
        })
    };
    while offset < data.len() {
        let rest = &data[offset..];
        if rest.len() < BATCH_HEADER_LEN {
            return torn(records, offset, "the last batch header is incomplete");
        }
        let word =
            |at: usize| u32::from_le_bytes([rest[at], rest[at + 1], rest[at + 2], rest[at + 3]]);
        let (payload_len, payload_crc, header_crc) = (word(0) as usize, word(4), word(8));
        if crc32fast::hash(&rest[..8]) != header_crc {
            if rest.iter().all(|byte| *byte == 0) {
                return torn(
                    records,
                    offset,
                    "the file ends in zeros where a batch should be",
                );
            }
            return Err(corrupt(
                offset,
                "batch header checksum mismatch with data after it".to_string(),
            ));
        }
        let end = offset + BATCH_HEADER_LEN + payload_len;
        if end > data.len() {
            return torn(
                records,
                offset,
                "the last batch runs past the end of the file",
            );
        }
        let payload = &rest[BATCH_HEADER_LEN..BATCH_HEADER_LEN + payload_len];
        if crc32fast::hash(payload) != payload_crc {
            if end == data.len() {
                return torn(records, offset, "the last batch's checksum does not match");
            }
            return Err(corrupt(
                offset,
                "batch checksum mismatch with data after it".to_string(),
            ));
        }
        let mut at = 0;
        while at < payload.len() {
            let record_offset = offset + BATCH_HEADER_LEN + at;
            if payload.len() - at < 4 {
                return Err(corrupt(
                    record_offset,
                    "record length prefix cut short".to_string(),
                ));
            }
            let len = u32::from_le_bytes([
                payload[at],
                payload[at + 1],
                payload[at + 2],
                payload[at + 3],
            ]) as usize;
            at += 4;
            if len == 0 || len > payload.len() - at {
                return Err(corrupt(
                    record_offset,
                    format!("record length {len} does not fit its batch"),
                ));
            }
            records.push(Bytes::copy_from_slice(&payload[at..at + len]));
            at += len;
        }
        offset = end;
    }
    Ok(Parsed {
        records,
        valid_end: offset,
        torn: None,
    })
}
