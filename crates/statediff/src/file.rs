//! The two immutable files published per block (FORMAT.md, "Files"): the diff file (sealed
//! header, the sequencer's signature, the packed body under zstd) and the block file
//! (transactions and receipts under zstd). Both start with a magic and version, carry their
//! block number in the clear and end with a CRC-32 of everything before it, so that a copy
//! damaged in transit is told apart from a diff that is wrong.

use std::io::Read;

use alloy_consensus::{Header, ReceiptEnvelope, TxEnvelope};
use alloy_eips::eip2718::{Decodable2718, Encodable2718};
use alloy_primitives::{Signature, B256, U256};

use crate::body::write_varint;
use crate::commitment::StateCommitment;
use crate::error::{DiffError, DiffErrorKind};

/// The diff file's magic.
pub const DIFF_MAGIC: [u8; 3] = *b"GSD";
/// The block file's magic.
pub const BLOCK_MAGIC: [u8; 3] = *b"GSB";
/// The format version this build writes and reads (both files and the body).
pub const FORMAT_VERSION: u8 = 2;
/// The largest header accepted (RLP bytes). A header is about 600 bytes; `extra_data` is
/// the only field of variable length.
pub const MAX_HEADER_LEN: u32 = 64 * 1024;
/// The largest uncompressed body or block contents accepted. What decompression allocates
/// grows with the bytes actually produced, never with a length field, and stops here.
pub const MAX_CONTENT_LEN: u32 = 256 << 20;
/// The largest zstd window accepted when decompressing (2^23 = 8 MiB; level 19 uses at most
/// this): a frame cannot make the decoder reserve more.
const WINDOW_LOG_MAX: u32 = 23;

/// Flags: the payload is one zstd frame.
const FLAG_ZSTD: u8 = 1;
/// Flags (diff files): a state commitment follows the header's signature (bit 2; bit 1 is
/// reserved for an embedded dictionary, FORMAT.md).
const FLAG_COMMITMENT: u8 = 4;

/// How a file's payload is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    /// zstd's level; `None` stores the payload as it is.
    pub level: Option<i32>,
}

impl Compression {
    /// The level the benchmark chose (FORMAT.md, "Choices and measurements").
    pub const DEFAULT_LEVEL: i32 = 3;

    /// No compression (tests, debugging).
    pub const NONE: Compression = Compression { level: None };
}

impl Default for Compression {
    fn default() -> Self {
        Self {
            level: Some(Self::DEFAULT_LEVEL),
        }
    }
}

fn compress(data: &[u8], compression: &Compression) -> Result<(u8, Vec<u8>), DiffError> {
    match compression.level {
        None => Ok((0, data.to_vec())),
        Some(level) => {
            let compressed = zstd::bulk::compress(data, level)
                .map_err(|e| DiffError::new(None, DiffErrorKind::Compress(e.to_string())))?;
            Ok((FLAG_ZSTD, compressed))
        }
    }
}

/// Decompresses one zstd frame of exactly `declared` bytes. The output buffer grows with what
/// the frame really produces (a length field reserves at most what the payload could hold
/// uncompressed several times over), and reading stops one byte past `declared`.
fn decompress(
    block: Option<u64>,
    at: usize,
    flags: u8,
    payload: &[u8],
    declared: usize,
) -> Result<Vec<u8>, DiffError> {
    let error = |reason: String| DiffError::new(block, DiffErrorKind::Decompress { at, reason });
    if flags & FLAG_ZSTD == 0 {
        if payload.len() != declared {
            return Err(error(format!(
                "{} stored bytes, {declared} declared",
                payload.len()
            )));
        }
        return Ok(payload.to_vec());
    }
    decompress_one_frame(payload, declared).map_err(error)
}

/// Decompresses `payload`, which must be exactly one zstd frame of exactly `declared` bytes
/// with nothing after it (no second frame, no skippable frame), with a window of at most
/// 8 MiB. The output buffer grows with what the frame really produces (a length field
/// reserves at most what the payload could hold uncompressed several times over), and
/// reading stops one byte past `declared`: a hostile payload costs at most `declared + 1`
/// bytes of output. What the state diffs and the snapshot chunks both decode.
pub fn decompress_one_frame(payload: &[u8], declared: usize) -> Result<Vec<u8>, String> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(payload)
        .map_err(|e| e.to_string())?
        .single_frame();
    decoder
        .window_log_max(WINDOW_LOG_MAX)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(declared.min(payload.len().saturating_mul(4) + 4096));
    (&mut decoder)
        .take(declared as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() != declared {
        return Err(format!(
            "decompresses to {}{} bytes, {declared} declared",
            if out.len() > declared {
                "more than "
            } else {
                ""
            },
            out.len().min(declared)
        ));
    }
    let rest = decoder.finish();
    if !rest.is_empty() {
        return Err(format!("{} bytes after the zstd frame", rest.len()));
    }
    Ok(out)
}

/// Reads a file's fields in order, naming the offset and the block in its errors.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
    block: Option<u64>,
}

impl<'a> Fields<'a> {
    fn error(&self, kind: DiffErrorKind) -> DiffError {
        DiffError::new(self.block, kind)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DiffError> {
        if n > self.bytes.len() - self.at {
            return Err(self.error(DiffErrorKind::Truncated {
                at: self.at,
                need: n,
                len: self.bytes.len(),
            }));
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DiffError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, DiffError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A length field no larger than `max`.
    fn length(&mut self, what: &'static str, max: u32) -> Result<usize, DiffError> {
        let at = self.at;
        let len = self.u32()?;
        if len > max {
            return Err(self.error(DiffErrorKind::Length {
                at,
                what,
                len: len.into(),
                max: max.into(),
            }));
        }
        Ok(len as usize)
    }

    /// Magic, version, flags and block number: the opening every file shares.
    fn opening(&mut self, magic: [u8; 3]) -> Result<(usize, u8), DiffError> {
        let found: [u8; 3] = self.array()?;
        if found != magic {
            return Err(self.error(DiffErrorKind::Magic {
                found,
                expected: magic,
            }));
        }
        let version = self.array::<1>()?[0];
        if version != FORMAT_VERSION {
            return Err(self.error(DiffErrorKind::Version(version)));
        }
        let flags_at = self.at;
        let flags = self.array::<1>()?[0];
        self.block = Some(u64::from_le_bytes(self.array()?));
        Ok((flags_at, flags))
    }

    /// The payload, its declared uncompressed length, and the CRC that must end the file.
    fn payload_and_crc(
        &mut self,
        what: &'static str,
    ) -> Result<(usize, usize, &'a [u8]), DiffError> {
        let declared = self.length(what, MAX_CONTENT_LEN)?;
        let len_at = self.at;
        let len = self.u32()? as usize;
        let room = (self.bytes.len() - self.at).saturating_sub(4);
        if len > room {
            return Err(self.error(DiffErrorKind::Truncated {
                at: len_at,
                need: len + 4,
                len: self.bytes.len(),
            }));
        }
        let at = self.at;
        let payload = self.take(len)?;
        // Fewer than the CRC's four bytes left (a zero length at the end of a short file).
        let Some(extra) = (self.bytes.len() - self.at).checked_sub(4) else {
            return Err(self.error(DiffErrorKind::Truncated {
                at: self.at,
                need: 4,
                len: self.bytes.len(),
            }));
        };
        if extra > 0 {
            return Err(self.error(DiffErrorKind::Trailing { at: self.at, extra }));
        }
        let crc_at = self.at;
        let stored = self.u32()?;
        let computed = crc32fast::hash(&self.bytes[..crc_at]);
        if stored != computed {
            return Err(self.error(DiffErrorKind::Crc {
                at: crc_at,
                stored,
                computed,
            }));
        }
        Ok((at, declared, payload))
    }
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn payload_len(block: u64, what: &'static str, len: usize) -> Result<u32, DiffError> {
    u32::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_CONTENT_LEN)
        .ok_or_else(|| {
            DiffError::new(
                Some(block),
                DiffErrorKind::Length {
                    at: 0,
                    what,
                    len: len as u64,
                    max: MAX_CONTENT_LEN.into(),
                },
            )
        })
}

/// One block's diff file: what a follower needs to apply the block, and to check that the
/// sequencer published it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffFile {
    /// The sealed header; `state_root` holds the chained state checksum.
    pub header: Header,
    /// The sequencer's signature over the header's hash.
    pub signature: Signature,
    /// The signed lattice hash of the state after the block ([`crate::commitment`]); `None`
    /// from a sequencer that does not keep one.
    pub commitment: Option<StateCommitment>,
    /// The packed body ([`crate::encode_body`]), uncompressed.
    pub body: Vec<u8>,
}

fn put_signature(out: &mut Vec<u8>, signature: &Signature) {
    out.extend_from_slice(&signature.r().to_be_bytes::<32>());
    out.extend_from_slice(&signature.s().to_be_bytes::<32>());
    out.push(u8::from(signature.v()));
}

/// A signature's 65 bytes, read at `at` (parity checked here, after the file's CRC).
fn signature_from(f: &Fields<'_>, at: usize, bytes: &[u8; 65]) -> Result<Signature, DiffError> {
    let parity = match bytes[64] {
        0 => false,
        1 => true,
        v => {
            return Err(f.error(DiffErrorKind::Signature {
                at: at + 64,
                reason: format!("parity byte {v} (0 or 1 expected)"),
            }))
        }
    };
    Ok(Signature::new(
        U256::from_be_slice(&bytes[..32]),
        U256::from_be_slice(&bytes[32..64]),
        parity,
    ))
}

impl DiffFile {
    /// The block number.
    pub fn number(&self) -> u64 {
        self.header.number
    }

    /// The file's bytes.
    pub fn encode(&self, compression: &Compression) -> Result<Vec<u8>, DiffError> {
        let number = self.header.number;
        let body_len = payload_len(number, "body", self.body.len())?;
        let (mut flags, payload) =
            compress(&self.body, compression).map_err(|e| DiffError::new(Some(number), e.kind))?;
        if self.commitment.is_some() {
            flags |= FLAG_COMMITMENT;
        }
        let header = alloy_rlp::encode(&self.header);
        let mut out = Vec::with_capacity(payload.len() + header.len() + 100);
        out.extend_from_slice(&DIFF_MAGIC);
        out.push(FORMAT_VERSION);
        out.push(flags);
        out.extend_from_slice(&number.to_le_bytes());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        put_signature(&mut out, &self.signature);
        if let Some(commitment) = &self.commitment {
            out.extend_from_slice(commitment.lattice.as_slice());
            put_signature(&mut out, &commitment.signature);
        }
        out.extend_from_slice(&body_len.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&payload);
        Ok(finish(out))
    }

    /// Parses and decompresses a diff file. Checks its framing, CRC, header and signature
    /// encoding; whether the diff verifies is [`crate::verify_and_decode`]'s business, which
    /// checks the signature before it decompresses anything ([`FramedDiff`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, DiffError> {
        FramedDiff::parse(bytes)?.decompress()
    }
}

/// A diff file whose framing, CRC, header and signature encoding checked out, with its body
/// still compressed: what a follower checks the signature of before it spends any work on
/// the body (decompressing allocates up to [`MAX_CONTENT_LEN`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedDiff<'a> {
    /// The sealed header.
    pub header: Header,
    /// The sequencer's signature over the header's hash.
    pub signature: Signature,
    /// The signed state commitment, if the file carries one.
    pub commitment: Option<StateCommitment>,
    flags: u8,
    payload_at: usize,
    payload: &'a [u8],
    declared: usize,
}

impl<'a> FramedDiff<'a> {
    /// Parses everything but the body.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, DiffError> {
        let mut f = Fields {
            bytes,
            at: 0,
            block: None,
        };
        let (flags_at, flags) = f.opening(DIFF_MAGIC)?;
        let header_at = f.at + 4;
        let header_len = f.length("header", MAX_HEADER_LEN)?;
        let mut header_bytes = f.take(header_len)?;
        let signature_at = f.at;
        let signature: [u8; 65] = f.array()?;
        // The commitment's fields are read now and checked after the CRC, as the header's.
        let commitment = if flags & FLAG_COMMITMENT != 0 {
            let lattice = B256::from(f.array::<32>()?);
            let at = f.at;
            Some((lattice, at, f.array::<65>()?))
        } else {
            None
        };
        let (payload_at, declared, payload) = f.payload_and_crc("body")?;
        if flags & !(FLAG_ZSTD | FLAG_COMMITMENT) != 0 {
            return Err(f.error(DiffErrorKind::Flags {
                at: flags_at,
                flags,
            }));
        }
        let header = <Header as alloy_rlp::Decodable>::decode(&mut header_bytes).map_err(|e| {
            f.error(DiffErrorKind::Header {
                at: header_at,
                reason: e.to_string(),
            })
        })?;
        if !header_bytes.is_empty() {
            return Err(f.error(DiffErrorKind::Header {
                at: header_at,
                reason: format!("{} bytes after the header's RLP", header_bytes.len()),
            }));
        }
        let number = f.block.unwrap_or_default();
        if header.number != number {
            return Err(f.error(DiffErrorKind::NumberMismatch {
                frame: number,
                header: header.number,
            }));
        }
        let signature = signature_from(&f, signature_at, &signature)?;
        let commitment = match commitment {
            Some((lattice, at, bytes)) => Some(StateCommitment {
                lattice,
                signature: signature_from(&f, at, &bytes)?,
            }),
            None => None,
        };
        Ok(Self {
            header,
            signature,
            commitment,
            flags,
            payload_at,
            payload,
            declared,
        })
    }

    /// The compressed body's length in bytes.
    pub fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// Decompresses the body.
    pub fn decompress(self) -> Result<DiffFile, DiffError> {
        let body = decompress(
            Some(self.header.number),
            self.payload_at,
            self.flags,
            self.payload,
            self.declared,
        )?;
        Ok(DiffFile {
            header: self.header,
            signature: self.signature,
            commitment: self.commitment,
            body,
        })
    }
}

/// One block's transactions and receipts, for nodes that re-execute to check the sequencer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockFile {
    /// The block number.
    pub number: u64,
    /// The block's hash (of its sealed header).
    pub hash: B256,
    /// The transactions, in order.
    pub transactions: Vec<TxEnvelope>,
    /// Their receipts.
    pub receipts: Vec<ReceiptEnvelope>,
}

impl BlockFile {
    /// The file's bytes: the transactions' and receipts' EIP-2718 encodings, length-prefixed,
    /// under zstd.
    pub fn encode(&self, compression: &Compression) -> Result<Vec<u8>, DiffError> {
        let mut contents = Vec::new();
        write_varint(&mut contents, self.transactions.len() as u64);
        for tx in &self.transactions {
            write_varint(&mut contents, tx.encode_2718_len() as u64);
            tx.encode_2718(&mut contents);
        }
        write_varint(&mut contents, self.receipts.len() as u64);
        for receipt in &self.receipts {
            write_varint(&mut contents, receipt.encode_2718_len() as u64);
            receipt.encode_2718(&mut contents);
        }
        let contents_len = payload_len(self.number, "contents", contents.len())?;
        let (flags, payload) = compress(&contents, compression)
            .map_err(|e| DiffError::new(Some(self.number), e.kind))?;
        let mut out = Vec::with_capacity(payload.len() + 64);
        out.extend_from_slice(&BLOCK_MAGIC);
        out.push(FORMAT_VERSION);
        out.push(flags);
        out.extend_from_slice(&self.number.to_le_bytes());
        out.extend_from_slice(self.hash.as_slice());
        out.extend_from_slice(&contents_len.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&payload);
        Ok(finish(out))
    }

    /// Parses a block file; every transaction and receipt must decode and fill its length.
    pub fn decode(bytes: &[u8]) -> Result<Self, DiffError> {
        let mut f = Fields {
            bytes,
            at: 0,
            block: None,
        };
        let (flags_at, flags) = f.opening(BLOCK_MAGIC)?;
        let hash = B256::from(f.array::<32>()?);
        let (payload_at, declared, payload) = f.payload_and_crc("contents")?;
        if flags & !FLAG_ZSTD != 0 {
            return Err(f.error(DiffErrorKind::Flags {
                at: flags_at,
                flags,
            }));
        }
        let contents = decompress(f.block, payload_at, flags, payload, declared)?;
        let mut items = Items {
            bytes: &contents,
            at: 0,
            block: f.block,
        };
        let transactions = items.list("transaction", TxEnvelope::decode_2718)?;
        let receipts = items.list("receipt", ReceiptEnvelope::decode_2718)?;
        if items.at != contents.len() {
            return Err(f.error(DiffErrorKind::Trailing {
                at: payload_at,
                extra: contents.len() - items.at,
            }));
        }
        Ok(Self {
            number: f.block.unwrap_or_default(),
            hash,
            transactions,
            receipts,
        })
    }

    /// Checks the file against the block's (verified) header: number, hash, transactions root
    /// and receipts root.
    pub fn check(&self, header: &Header) -> Result<(), DiffError> {
        let error = |kind| Err(DiffError::new(Some(self.number), kind));
        if header.number != self.number {
            return error(DiffErrorKind::NumberMismatch {
                frame: self.number,
                header: header.number,
            });
        }
        let checks = [
            ("block hash", header.hash_slow(), self.hash),
            (
                "transactions root",
                header.transactions_root,
                alloy_consensus::proofs::calculate_transaction_root(&self.transactions),
            ),
            (
                "receipts root",
                header.receipts_root,
                alloy_consensus::proofs::calculate_receipt_root(&self.receipts),
            ),
        ];
        for (what, expected, found) in checks {
            if expected != found {
                return error(DiffErrorKind::Mismatch {
                    what,
                    expected,
                    found,
                });
            }
        }
        Ok(())
    }
}

/// Reads the length-prefixed items of a block file's contents.
struct Items<'a> {
    bytes: &'a [u8],
    at: usize,
    block: Option<u64>,
}

impl Items<'_> {
    fn fail(&self, what: &'static str, index: usize, at: usize, reason: String) -> DiffError {
        DiffError::new(
            self.block,
            DiffErrorKind::Item {
                what,
                index,
                at,
                reason,
            },
        )
    }

    fn varint(&mut self, what: &'static str, index: usize) -> Result<u64, DiffError> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.bytes.get(self.at) else {
                return Err(self.fail(what, index, start, "truncated length".into()));
            };
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                if (byte == 0 && shift > 0) || (shift == 63 && byte > 1) {
                    return Err(self.fail(what, index, start, "bad length varint".into()));
                }
                return Ok(value);
            }
        }
        Err(self.fail(what, index, start, "bad length varint".into()))
    }

    fn list<T>(
        &mut self,
        what: &'static str,
        decode: impl Fn(&mut &[u8]) -> alloy_eips::eip2718::Eip2718Result<T>,
    ) -> Result<Vec<T>, DiffError> {
        let count = self.varint(what, 0)?;
        // Every item takes at least two bytes: reserve no more than the contents could hold.
        let mut out = Vec::with_capacity((count as usize).min((self.bytes.len() - self.at) / 2));
        for index in 0..count as usize {
            let len = self.varint(what, index)?;
            let at = self.at;
            if len > (self.bytes.len() - at) as u64 {
                return Err(self.fail(what, index, at, format!("length {len} past the end")));
            }
            let mut item = &self.bytes[at..at + len as usize];
            let value = decode(&mut item).map_err(|e| self.fail(what, index, at, e.to_string()))?;
            if !item.is_empty() {
                return Err(self.fail(
                    what,
                    index,
                    at,
                    format!("{} bytes after the encoding", item.len()),
                ));
            }
            self.at = at + len as usize;
            out.push(value);
        }
        Ok(out)
    }
}
