//! The bytes of a segment file. All integers are little-endian.
//!
//! ```text
//! segment  = header record*
//! header   = "GIGASBLK" | version: u16 | 0: [u8; 6] | first: u64 | anchor: [u8; 32]
//!            | check: first 8 bytes of BLAKE3(the 56 bytes before)          (64 bytes)
//! record   = "GBLK" | length: u32 | number: u64 | payload: [u8; length]
//!            | checksum: BLAKE3(previous checksum | the record's bytes before it) (32 bytes)
//! ```
//!
//! `first` is the number of the segment's first record, `anchor` the checksum of the record
//! before it (zeros for the very first record of a log). A record's "previous checksum" is the
//! checksum of the record before it, in this segment or, for its first record, the anchor.

/// The magic bytes that open every segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"GIGASBLK";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Size of a segment header.
pub const SEGMENT_HEADER_LEN: usize = 64;
/// The magic bytes that open every record.
pub const RECORD_MAGIC: [u8; 4] = *b"GBLK";
/// Size of a record's header (magic, length, number).
pub const RECORD_HEADER_LEN: usize = 16;
/// Size of a record's checksum.
pub const CHECKSUM_LEN: usize = 32;
/// The largest payload: 1 GiB, far above any block (a block's gas limit bounds its bytes to
/// tens of megabytes), and small enough that a torn length cannot make open read gigabytes.
pub const MAX_PAYLOAD: usize = 1 << 30;
/// The anchor of a log's very first record.
pub const GENESIS: Checksum = [0u8; 32];
/// The file name suffix of a segment.
pub const SEGMENT_SUFFIX: &str = ".blocks";

/// A record checksum.
pub type Checksum = [u8; 32];

/// A segment's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The number of its first record.
    pub first: u64,
    /// The checksum its first record continues from.
    pub anchor: Checksum,
}

impl SegmentHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut out = [0u8; SEGMENT_HEADER_LEN];
        out[0..8].copy_from_slice(&SEGMENT_MAGIC);
        out[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.first.to_le_bytes());
        out[24..56].copy_from_slice(&self.anchor);
        let check = blake3::hash(&out[0..56]);
        out[56..64].copy_from_slice(&check.as_bytes()[0..8]);
        out
    }

    /// Decodes a header, or says what is wrong with it.
    pub fn decode(bytes: &[u8]) -> Result<Self, &'static str> {
        let bytes = bytes
            .get(..SEGMENT_HEADER_LEN)
            .ok_or("file shorter than a segment header")?;
        if bytes[0..8] != SEGMENT_MAGIC {
            return Err("not a block log segment (bad magic)");
        }
        if blake3::hash(&bytes[0..56]).as_bytes()[0..8] != bytes[56..64] {
            return Err("segment header checksum mismatch");
        }
        if u16::from_le_bytes([bytes[8], bytes[9]]) != FORMAT_VERSION {
            return Err("segment written by an unknown format version");
        }
        let mut first = [0u8; 8];
        first.copy_from_slice(&bytes[16..24]);
        let mut anchor = [0u8; 32];
        anchor.copy_from_slice(&bytes[24..56]);
        Ok(Self {
            first: u64::from_le_bytes(first),
            anchor,
        })
    }
}

/// A record's header bytes.
pub fn record_header(number: u64, len: u32) -> [u8; RECORD_HEADER_LEN] {
    let mut out = [0u8; RECORD_HEADER_LEN];
    out[0..4].copy_from_slice(&RECORD_MAGIC);
    out[4..8].copy_from_slice(&len.to_le_bytes());
    out[8..16].copy_from_slice(&number.to_le_bytes());
    out
}

/// A record header's payload length and number, or what is wrong with it.
pub fn decode_record_header(bytes: &[u8; RECORD_HEADER_LEN]) -> Result<(usize, u64), &'static str> {
    if bytes[0..4] != RECORD_MAGIC {
        return Err("no record header here (bad magic)");
    }
    let len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    if len > MAX_PAYLOAD {
        return Err("record length beyond the format's limit");
    }
    let mut number = [0u8; 8];
    number.copy_from_slice(&bytes[8..16]);
    Ok((len, u64::from_le_bytes(number)))
}

/// A record's checksum: BLAKE3 of the previous checksum, its header and its payload.
pub fn checksum(previous: &Checksum, header: &[u8; RECORD_HEADER_LEN], payload: &[u8]) -> Checksum {
    let mut hasher = blake3::Hasher::new();
    hasher.update(previous);
    hasher.update(header);
    hasher.update(payload);
    *hasher.finalize().as_bytes()
}

/// The file name of the segment whose first record is `first`.
pub fn segment_name(first: u64) -> String {
    format!("{first:020}{SEGMENT_SUFFIX}")
}

/// The first record number a segment file name gives, `None` for any other name.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_any_flipped_bit_is_caught() {
        let header = SegmentHeader {
            first: 1234,
            anchor: [7; 32],
        };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
        for bit in 0..(56 * 8) {
            let mut bad = bytes;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(SegmentHeader::decode(&bad).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn segment_names_sort_as_numbers_and_parse_back() {
        assert_eq!(segment_name(42), "00000000000000000042.blocks");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert!(segment_name(9) < segment_name(10));
        assert_eq!(parse_segment_name("42.blocks"), None);
        assert_eq!(parse_segment_name("LOCK"), None);
    }

    #[test]
    fn a_record_header_refuses_bad_magic_and_huge_lengths() {
        let good = record_header(5, 100);
        assert_eq!(decode_record_header(&good), Ok((100, 5)));
        assert!(decode_record_header(&[0; RECORD_HEADER_LEN]).is_err());
        let mut huge = record_header(5, u32::MAX);
        assert!(decode_record_header(&huge).is_err());
        huge[0] = b'X';
        assert!(decode_record_header(&huge).is_err());
    }
}
