//! Why a diff or block file is refused. Every error names the block (when the bytes got far
//! enough to say which) and the byte offset where the problem was found, so that an operator
//! can tell a corrupted transfer from a sequencer that published something wrong.

use std::fmt;
use std::sync::Arc;

use alloy_primitives::{Address, B256};

/// A failure of a [`crate::KeyIndex`] or [`crate::PriorState`] implementation (an MDBX read,
/// a missing prior value): the store's own error, kept as its source.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct StoreError(Arc<dyn std::error::Error + Send + Sync>);

impl StoreError {
    /// Wraps a store's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// An error that is only a message.
    pub fn msg(message: impl Into<String>) -> Self {
        let boxed: Box<dyn std::error::Error + Send + Sync> = message.into().into();
        Self(Arc::from(boxed))
    }
}

/// Which part of a packed body a record belongs to (for error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Accounts named by their enumeration index.
    RepeatedAccounts,
    /// Accounts written for the first time (full address).
    FirstAccounts,
    /// Slots named by their enumeration index.
    RepeatedSlots,
    /// Slots written for the first time (grouped by address).
    FirstSlots,
    /// New bytecodes.
    Bytecodes,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Section::RepeatedAccounts => "repeated accounts",
            Section::FirstAccounts => "first-write accounts",
            Section::RepeatedSlots => "repeated slots",
            Section::FirstSlots => "first-write slots",
            Section::Bytecodes => "bytecodes",
        })
    }
}

/// What is wrong inside a packed body (see FORMAT.md, "Body").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyErrorKind {
    /// The body ends inside a field.
    #[error("truncated: {need} more bytes needed")]
    Truncated {
        /// Bytes the field needs.
        need: usize,
    },
    /// A LEB128 integer that is longer than 10 bytes, overflows 64 bits or is not minimal.
    #[error("bad varint ({0})")]
    Varint(&'static str),
    /// A count that the remaining bytes cannot hold.
    #[error("{section}: count {count} exceeds what {remaining} remaining bytes can hold")]
    Count {
        /// The section.
        section: Section,
        /// The count read.
        count: u64,
        /// Bytes left in the body.
        remaining: usize,
    },
    /// An enumeration index beyond the table.
    #[error("{section}: index {index} is not in the table ({len} keys)")]
    UnknownIndex {
        /// The section.
        section: Section,
        /// The index.
        index: u64,
        /// Keys in the table.
        len: u64,
    },
    /// An index that names a slot where an account is expected, or the reverse.
    #[error("{section}: index {index} names a {found}")]
    WrongKind {
        /// The section.
        section: Section,
        /// The index.
        index: u64,
        /// What the index names.
        found: &'static str,
    },
    /// A record whose key is not greater than the previous one: reordered or repeated.
    #[error("{section}: key out of order or repeated")]
    Unordered {
        /// The section.
        section: Section,
    },
    /// A first write of a key that already has an enumeration index.
    #[error("{section}: first write of a key that already has index {index}")]
    AlreadyIndexed {
        /// The section.
        section: Section,
        /// Its index.
        index: u64,
    },
    /// An account's flags byte with unknown bits or an impossible combination.
    #[error("account flags {0:#04x} are invalid")]
    Flags(u8),
    /// A value's metadata byte with an unknown operation or a length over 32.
    #[error("value metadata {0:#04x} is invalid")]
    ValueMeta(u8),
    /// A field that decodes but is not what the encoder writes for this value (a longer
    /// operation, a leading zero byte, an empty group).
    #[error("non-canonical {0}")]
    NonCanonical(&'static str),
    /// A nonce that would overflow 64 bits.
    #[error("nonce overflows")]
    NonceOverflow,
    /// Bytes after the last section.
    #[error("{0} bytes after the last section")]
    Trailing(usize),
    /// The key index failed.
    #[error("key index: {0}")]
    Index(StoreError),
    /// The prior-state store failed.
    #[error("prior state: {0}")]
    Prior(StoreError),
}

/// A problem in a packed body, at a byte offset of the (uncompressed) body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("body byte {at}: {kind}")]
pub struct BodyError {
    /// Offset in the uncompressed body.
    pub at: usize,
    /// What is wrong.
    pub kind: BodyErrorKind,
}

impl PartialEq for StoreError {
    /// Store errors compare by message: tests match on them, and two stores never share one.
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for StoreError {}

/// What is wrong with a diff or block file, or with the diff as a successor of the tip.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiffErrorKind {
    /// The file ends before a field it declares.
    #[error("truncated: {need} bytes needed at byte {at}, the file has {len}")]
    Truncated {
        /// Offset of the field.
        at: usize,
        /// Its length.
        need: usize,
        /// The file's length.
        len: usize,
    },
    /// Not a file of this kind.
    #[error("bad magic {found:02x?} (expected {expected:02x?})")]
    Magic {
        /// The first three bytes.
        found: [u8; 3],
        /// What this kind of file starts with.
        expected: [u8; 3],
    },
    /// A format version this build does not read.
    #[error("format version {0} is not supported (this build reads version 2; version 1 files come from a sequencer whose headers carried a state checksum instead of the state root: follow a chain started by this build)")]
    Version(u8),
    /// Flags with unknown bits.
    #[error("flags {flags:#04x} at byte {at} are invalid")]
    Flags {
        /// Offset of the flags.
        at: usize,
        /// Their value.
        flags: u8,
    },
    /// A length field over its limit.
    #[error("{what} length {len} at byte {at} exceeds the limit {max}")]
    Length {
        /// Offset of the length field.
        at: usize,
        /// Which length.
        what: &'static str,
        /// The declared length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The CRC-32 at the end does not match the bytes before it: a corrupted copy.
    #[error("CRC-32 at byte {at} is {stored:#010x}, the bytes give {computed:#010x}")]
    Crc {
        /// Offset of the CRC.
        at: usize,
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// Bytes between the payload and the CRC.
    #[error("{extra} unexpected bytes at byte {at}")]
    Trailing {
        /// Where they start.
        at: usize,
        /// How many.
        extra: usize,
    },
    /// The header's RLP does not decode, or does not fill its length.
    #[error("header at byte {at}: {reason}")]
    Header {
        /// Offset of the header.
        at: usize,
        /// The decoder's words.
        reason: String,
    },
    /// The frame's block number and the header's differ.
    #[error("the frame says block {frame}, its header says {header}")]
    NumberMismatch {
        /// Number in the frame.
        frame: u64,
        /// Number in the header.
        header: u64,
    },
    /// The signature bytes are not a signature (parity byte other than 0 or 1).
    #[error("signature at byte {at}: {reason}")]
    Signature {
        /// Offset of the signature.
        at: usize,
        /// What is wrong.
        reason: String,
    },
    /// The zstd payload does not decompress, or to another length than declared.
    #[error("payload at byte {at}: {reason}")]
    Decompress {
        /// Offset of the payload.
        at: usize,
        /// What is wrong.
        reason: String,
    },
    /// The packed body is malformed.
    #[error("{0}")]
    Body(BodyError),
    /// A transaction or receipt in a block file does not decode.
    #[error("{what} {index} at content byte {at}: {reason}")]
    Item {
        /// "transaction" or "receipt".
        what: &'static str,
        /// Its position.
        index: usize,
        /// Offset in the uncompressed contents.
        at: usize,
        /// The decoder's words.
        reason: String,
    },
    /// A code the diff carries that no account of the block names: the state root commits
    /// to accounts' code hashes, not to codes, so a code must be named to be stored.
    #[error("code {hash} is named by no account the block changes")]
    UnnamedCode {
        /// The code's keccak-256.
        hash: B256,
    },
    /// The diff is not for the block after the tip (a block was skipped or repeated).
    #[error("expected block {expected}")]
    NotNext {
        /// The block the follower needs.
        expected: u64,
    },
    /// The header's parent is not the tip: a diff of another chain or of a replaced block.
    #[error("parent hash {found} is not the tip's hash {expected}")]
    WrongParent {
        /// The tip's hash.
        expected: B256,
        /// The header's parent hash.
        found: B256,
    },
    /// The signature does not recover to the sequencer.
    #[error("{}, not by the sequencer {expected}", signer_words(.recovered))]
    WrongSigner {
        /// The sequencer.
        expected: Address,
        /// Who signed (`None` when the signature recovers to no key).
        recovered: Option<Address>,
    },
    /// A block file's contents do not match the header it is checked against.
    #[error("{what} {found} does not match the header's {expected}")]
    Mismatch {
        /// Which field.
        what: &'static str,
        /// The header's value.
        expected: B256,
        /// The file's value.
        found: B256,
    },
    /// Compression failed on the writer's side (zstd's words).
    #[error("compression: {0}")]
    Compress(String),
    /// The follower keeps the state commitment and the diff carries none.
    #[error(
        "the diff carries no state commitment (a sequencer run with `--state-commitment off`? \
         follow it with `--state-commitment off` too)"
    )]
    NoCommitment,
    /// The state commitment's signature does not recover to the sequencer.
    #[error("state commitment {}, not by the sequencer {expected}", signer_words(.recovered))]
    CommitmentSigner {
        /// The sequencer.
        expected: Address,
        /// Who signed (`None` when the signature recovers to no key).
        recovered: Option<Address>,
    },
    /// The lattice hash after the decoded changes is not the one the sequencer signed.
    #[error("state commitment: the block's changes give lattice {computed}, the sequencer signed {signed}")]
    Commitment {
        /// The signed lattice checksum.
        signed: B256,
        /// What the follower's lattice moved by the block gives.
        computed: B256,
    },
    /// Reading the key index or the prior values for the state commitment failed.
    #[error("state commitment: {0}")]
    CommitmentStore(StoreError),
}

fn signer_words(recovered: &Option<Address>) -> String {
    match recovered {
        Some(a) => format!("signed by {a}"),
        None => "the signature recovers to no key".to_string(),
    }
}

/// A refused diff or block file: which block (when known) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffError {
    /// The block, when the bytes got far enough to name it.
    pub block: Option<u64>,
    /// What is wrong.
    pub kind: DiffErrorKind,
}

impl DiffError {
    pub(crate) fn new(block: Option<u64>, kind: DiffErrorKind) -> Self {
        Self { block, kind }
    }
}

impl fmt::Display for DiffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.block {
            Some(n) => write!(f, "block {n}: {}", self.kind),
            None => write!(f, "block unknown: {}", self.kind),
        }
    }
}

impl std::error::Error for DiffError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            DiffErrorKind::Body(e) => Some(e),
            _ => None,
        }
    }
}
