//! The on-disk format, byte by byte. `FORMAT.md` beside this crate describes the same layout
//! for readers who do not read Rust; the two must change together.
//!
//! All integers are little-endian. A log file is a file header followed by batches; a batch is
//! a batch header, its records, and a footer holding the chained checksum.

/// The magic bytes that open every log file.
pub const FILE_MAGIC: [u8; 8] = *b"VILMOLOG";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the file header.
pub const FILE_HEADER_LEN: usize = 64;
/// The magic bytes that open every batch.
pub const BATCH_MAGIC: [u8; 4] = *b"VBAT";
/// The magic bytes that open every batch footer.
pub const FOOTER_MAGIC: [u8; 4] = *b"VEND";
/// Size of a batch header.
pub const BATCH_HEADER_LEN: usize = 24;
/// Size of a batch footer.
pub const FOOTER_LEN: usize = 4 + 32;
/// Record tag: a key and its value.
pub const TAG_PUT: u8 = 1;
/// Record tag: the key's record in the target file is dead.
pub const TAG_NULLIFY: u8 = 2;
/// Record tag: a log file was compacted away; its chain boundaries.
pub const TAG_DROP: u8 = 3;
/// Record tag: compaction progress (the file being compacted and how far it has been read).
pub const TAG_CURSOR: u8 = 4;
/// Record tag: a put copied forward by compaction; same layout as a put.
pub const TAG_PUT_MOVED: u8 = 5;
/// Header of a put record: tag, key length (u16), value length (u32), superseded file (u32).
pub const PUT_HEADER_LEN: usize = 1 + 2 + 4 + 4;
/// Header of a nullify record: tag, key length (u16), target file (u32).
pub const NULLIFY_HEADER_LEN: usize = 1 + 2 + 4;
/// Length of a drop record.
pub const DROP_LEN: usize = 1 + 4 + 8 + 8 + 32 + 32;
/// Length of a cursor record.
pub const CURSOR_LEN: usize = 1 + 4 + 8;
/// "No file": a put that superseded nothing in another file.
pub const NO_FILE: u32 = u32::MAX;
/// The checksum before the first batch.
pub const GENESIS: Checksum = [0u8; 32];

/// A batch checksum: BLAKE3 of the previous checksum and the batch's bytes.
pub type Checksum = [u8; 32];

/// The header of a log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// The file's number; files are numbered in the order they were created.
    pub file_id: u32,
    /// The number of the file's first batch.
    pub first_batch: u64,
    /// The checksum of the batch before the first one (the chain's anchor).
    pub anchor: Checksum,
}

impl FileHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; FILE_HEADER_LEN] {
        let mut out = [0u8; FILE_HEADER_LEN];
        out[0..8].copy_from_slice(&FILE_MAGIC);
        out[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.file_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.first_batch.to_le_bytes());
        out[24..56].copy_from_slice(&self.anchor);
        let check = blake3::hash(&out[0..56]);
        out[56..64].copy_from_slice(&check.as_bytes()[0..8]);
        out
    }

    /// Decodes a header, or says what is wrong with it.
    pub fn decode(bytes: &[u8]) -> Result<Self, &'static str> {
        if bytes.len() < FILE_HEADER_LEN {
            return Err("file shorter than its header");
        }
        if bytes[0..8] != FILE_MAGIC {
            return Err("not a Vilmo log file (bad magic)");
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != FORMAT_VERSION {
            return Err("unsupported format version");
        }
        let check = blake3::hash(&bytes[0..56]);
        if bytes[56..64] != check.as_bytes()[0..8] {
            return Err("file header checksum mismatch");
        }
        Ok(Self {
            file_id: read_u32(bytes, 12),
            first_batch: read_u64(bytes, 16),
            anchor: read_array(bytes, 24),
        })
    }
}

/// The boundaries of a log file in the checksum chain, kept in a drop record after the file
/// is compacted away so that the chain can still be followed across the gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSpan {
    /// The file.
    pub file_id: u32,
    /// Its first batch.
    pub first_batch: u64,
    /// Its last batch.
    pub last_batch: u64,
    /// The checksum before its first batch.
    pub anchor: Checksum,
    /// The checksum of its last batch.
    pub last: Checksum,
}

/// A record as read from a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// A key and its value; `supersedes` is the file holding the key's previous version when
    /// that was another file, or [`NO_FILE`].
    Put {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
        /// The file of the previous version, if another file.
        supersedes: u32,
        /// Whether compaction copied this record forward from the file being compacted.
        moved: bool,
    },
    /// The key's record in `target` is dead.
    Nullify {
        /// The key.
        key: &'a [u8],
        /// The file whose record of the key is dead.
        target: u32,
    },
    /// A file was compacted away.
    Drop(FileSpan),
    /// Compaction of `victim` has read it up to byte `next`.
    Cursor {
        /// The file being compacted.
        victim: u32,
        /// Offset of the next batch of the victim to read.
        next: u64,
    },
}

impl Record<'_> {
    /// Encoded length.
    pub fn encoded_len(&self) -> usize {
        match self {
            Record::Put { key, value, .. } => PUT_HEADER_LEN + key.len() + value.len(),
            Record::Nullify { key, .. } => NULLIFY_HEADER_LEN + key.len(),
            Record::Drop(_) => DROP_LEN,
            Record::Cursor { .. } => CURSOR_LEN,
        }
    }

    /// Appends the encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Record::Put {
                key,
                value,
                supersedes,
                moved,
            } => {
                let mut head = [0u8; PUT_HEADER_LEN];
                head[0] = if *moved { TAG_PUT_MOVED } else { TAG_PUT };
                head[1..3].copy_from_slice(&(key.len() as u16).to_le_bytes());
                head[3..7].copy_from_slice(&(value.len() as u32).to_le_bytes());
                head[7..11].copy_from_slice(&supersedes.to_le_bytes());
                out.extend_from_slice(&head);
                out.extend_from_slice(key);
                out.extend_from_slice(value);
            }
            Record::Nullify { key, target } => {
                out.push(TAG_NULLIFY);
                out.extend_from_slice(&(key.len() as u16).to_le_bytes());
                out.extend_from_slice(&target.to_le_bytes());
                out.extend_from_slice(key);
            }
            Record::Drop(span) => {
                out.push(TAG_DROP);
                out.extend_from_slice(&span.file_id.to_le_bytes());
                out.extend_from_slice(&span.first_batch.to_le_bytes());
                out.extend_from_slice(&span.last_batch.to_le_bytes());
                out.extend_from_slice(&span.anchor);
                out.extend_from_slice(&span.last);
            }
            Record::Cursor { victim, next } => {
                out.push(TAG_CURSOR);
                out.extend_from_slice(&victim.to_le_bytes());
                out.extend_from_slice(&next.to_le_bytes());
            }
        }
    }

    /// Decodes the record at the start of `bytes`, returning it and its length.
    pub fn decode(bytes: &[u8]) -> Result<(Record<'_>, usize), &'static str> {
        let tag = *bytes.first().ok_or("empty record")?;
        match tag {
            TAG_PUT | TAG_PUT_MOVED => {
                if bytes.len() < PUT_HEADER_LEN {
                    return Err("truncated put record header");
                }
                let key_len = u16::from_le_bytes([bytes[1], bytes[2]]) as usize;
                let value_len = read_u32(bytes, 3) as usize;
                let supersedes = read_u32(bytes, 7);
                let end = PUT_HEADER_LEN + key_len + value_len;
                if bytes.len() < end {
                    return Err("put record runs past the batch");
                }
                let key = &bytes[PUT_HEADER_LEN..PUT_HEADER_LEN + key_len];
                let value = &bytes[PUT_HEADER_LEN + key_len..end];
                Ok((
                    Record::Put {
                        key,
                        value,
                        supersedes,
                        moved: tag == TAG_PUT_MOVED,
                    },
                    end,
                ))
            }
            TAG_NULLIFY => {
                if bytes.len() < NULLIFY_HEADER_LEN {
                    return Err("truncated nullify record header");
                }
                let key_len = u16::from_le_bytes([bytes[1], bytes[2]]) as usize;
                let target = read_u32(bytes, 3);
                let end = NULLIFY_HEADER_LEN + key_len;
                if bytes.len() < end {
                    return Err("nullify record runs past the batch");
                }
                Ok((
                    Record::Nullify {
                        key: &bytes[NULLIFY_HEADER_LEN..end],
                        target,
                    },
                    end,
                ))
            }
            TAG_DROP => {
                if bytes.len() < DROP_LEN {
                    return Err("truncated drop record");
                }
                Ok((
                    Record::Drop(FileSpan {
                        file_id: read_u32(bytes, 1),
                        first_batch: read_u64(bytes, 5),
                        last_batch: read_u64(bytes, 13),
                        anchor: read_array(bytes, 21),
                        last: read_array(bytes, 53),
                    }),
                    DROP_LEN,
                ))
            }
            TAG_CURSOR => {
                if bytes.len() < CURSOR_LEN {
                    return Err("truncated cursor record");
                }
                Ok((
                    Record::Cursor {
                        victim: read_u32(bytes, 1),
                        next: read_u64(bytes, 5),
                    },
                    CURSOR_LEN,
                ))
            }
            _ => Err("unknown record tag"),
        }
    }
}

/// The key of the record at the start of `bytes`, for puts and nullifies. The caller
/// guarantees the record was validated when its batch was read.
#[inline]
pub fn record_key(bytes: &[u8]) -> &[u8] {
    let key_len = u16::from_le_bytes([bytes[1], bytes[2]]) as usize;
    let start = if bytes[0] == TAG_PUT || bytes[0] == TAG_PUT_MOVED {
        PUT_HEADER_LEN
    } else {
        NULLIFY_HEADER_LEN
    };
    &bytes[start..start + key_len]
}

/// The value of the put record at the start of `bytes` (validated when its batch was read).
#[inline]
pub fn put_value(bytes: &[u8]) -> &[u8] {
    let key_len = u16::from_le_bytes([bytes[1], bytes[2]]) as usize;
    let value_len = read_u32(bytes, 3) as usize;
    let start = PUT_HEADER_LEN + key_len;
    &bytes[start..start + value_len]
}

/// Length and superseded file of the put record at the start of `bytes` (validated when its
/// batch was read).
#[inline]
pub fn put_len_and_supersedes(bytes: &[u8]) -> (usize, u32) {
    let key_len = u16::from_le_bytes([bytes[1], bytes[2]]) as usize;
    let value_len = read_u32(bytes, 3) as usize;
    (PUT_HEADER_LEN + key_len + value_len, read_u32(bytes, 7))
}

/// Encodes a batch header. Its last four bytes check the first twenty, so that a flipped
/// length cannot make a complete batch look like a torn one.
pub fn encode_batch_header(number: u64, records: u32, body_len: u32) -> [u8; BATCH_HEADER_LEN] {
    let mut out = [0u8; BATCH_HEADER_LEN];
    out[0..4].copy_from_slice(&BATCH_MAGIC);
    out[4..12].copy_from_slice(&number.to_le_bytes());
    out[12..16].copy_from_slice(&records.to_le_bytes());
    out[16..20].copy_from_slice(&body_len.to_le_bytes());
    let check = blake3::hash(&out[0..20]);
    out[20..24].copy_from_slice(&check.as_bytes()[0..4]);
    out
}

/// A batch header as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Batch number.
    pub number: u64,
    /// Records in the body.
    pub records: u32,
    /// Length of the body.
    pub body_len: u32,
}

/// Decodes a batch header, or says what is wrong with it.
pub fn decode_batch_header(bytes: &[u8]) -> Result<BatchHeader, &'static str> {
    if bytes.len() < BATCH_HEADER_LEN {
        return Err("truncated batch header");
    }
    if bytes[0..4] != BATCH_MAGIC {
        return Err("bad batch magic");
    }
    let check = blake3::hash(&bytes[0..20]);
    if bytes[20..24] != check.as_bytes()[0..4] {
        return Err("batch header check mismatch");
    }
    Ok(BatchHeader {
        number: read_u64(bytes, 4),
        records: read_u32(bytes, 12),
        body_len: read_u32(bytes, 16),
    })
}

/// The chained checksum of a batch: BLAKE3 over the previous checksum, the batch header and
/// the body.
pub fn batch_checksum(previous: &Checksum, header: &[u8], body: &[u8]) -> Checksum {
    let mut hasher = blake3::Hasher::new();
    hasher.update(previous);
    hasher.update(header);
    if body.len() >= 1 << 20 {
        hasher.update_rayon(body);
    } else {
        hasher.update(body);
    }
    *hasher.finalize().as_bytes()
}

#[inline]
fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

#[inline]
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

#[inline]
fn read_array(bytes: &[u8], at: usize) -> [u8; 32] {
    let mut b = [0u8; 32];
    b.copy_from_slice(&bytes[at..at + 32]);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let span = FileSpan {
            file_id: 7,
            first_batch: 10,
            last_batch: 20,
            anchor: [1; 32],
            last: [2; 32],
        };
        let records = [
            Record::Put {
                key: b"key",
                value: b"value",
                supersedes: 3,
                moved: false,
            },
            Record::Put {
                key: b"k2",
                value: b"v2",
                supersedes: NO_FILE,
                moved: true,
            },
            Record::Cursor {
                victim: 2,
                next: 640,
            },
            Record::Nullify {
                key: b"gone",
                target: 4,
            },
            Record::Drop(span),
        ];
        let mut buf = Vec::new();
        for r in &records {
            r.encode_into(&mut buf);
        }
        let mut at = 0;
        for r in &records {
            let (decoded, len) = Record::decode(&buf[at..]).expect("decodes");
            assert_eq!(&decoded, r);
            assert_eq!(len, r.encoded_len());
            at += len;
        }
        assert_eq!(at, buf.len());
        assert_eq!(record_key(&buf), b"key");
        assert_eq!(put_value(&buf), b"value");
    }

    #[test]
    fn file_header_round_trips_and_detects_flips() {
        let header = FileHeader {
            file_id: 3,
            first_batch: 42,
            anchor: [9; 32],
        };
        let mut bytes = header.encode();
        assert_eq!(FileHeader::decode(&bytes), Ok(header));
        bytes[30] ^= 1;
        assert!(FileHeader::decode(&bytes).is_err());
    }
}

/// A place in a log file's verified bytes where compaction can stop reading and resume: a
/// batch's start, a record boundary inside a batch's body, or the end of the file's batches.
/// Compaction may stop inside a batch, so that a batch of any size (a genesis of millions of
/// keys is one batch) is compacted in bounded steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPos {
    /// The start of the batch `at` lies in (`at` itself at a batch start or the end).
    pub batch: usize,
    /// The next byte to read.
    pub at: usize,
}

impl ReadPos {
    /// The first batch of a file.
    pub const START: ReadPos = ReadPos {
        batch: FILE_HEADER_LEN,
        at: FILE_HEADER_LEN,
    };

    /// Moves forward to `target`, or returns `None` if `target` is not a place to resume at in
    /// `bytes`. Walks whole batches by their headers and decodes records only inside the batch
    /// that holds `target`, from `self` when it is in that batch: a cursor that advances by
    /// small steps through one large batch costs the records it advances over, not the batch.
    pub fn seek(self, bytes: &[u8], target: usize) -> Option<ReadPos> {
        let mut p = if target < self.at { Self::START } else { self };
        loop {
            if p.at == target {
                return Some(p);
            }
            let (body_start, body_end, batch_end) = p.batch_bounds(bytes)?;
            if target >= batch_end {
                p = ReadPos {
                    batch: batch_end,
                    at: batch_end,
                };
                continue;
            }
            if target < body_start || target >= body_end {
                // Inside the header or the footer.
                return None;
            }
            let mut at = p.at.max(body_start);
            while at < target {
                let (_, len) = Record::decode(bytes.get(at..body_end)?).ok()?;
                at += len;
            }
            return (at == target).then_some(ReadPos { batch: p.batch, at });
        }
    }

    /// The batch `self` lies in: where its body starts and ends, and where the next batch
    /// starts. `None` if no batch header decodes there (the end of the file's batches).
    pub fn batch_bounds(self, bytes: &[u8]) -> Option<(usize, usize, usize)> {
        let header = decode_batch_header(bytes.get(self.batch..)?).ok()?;
        let body_start = self.batch + BATCH_HEADER_LEN;
        let body_end = body_start + header.body_len as usize;
        Some((body_start, body_end, body_end + FOOTER_LEN))
    }
}
