//! gigas-statediff: the compact, verifiable encoding of each block's state changes, which
//! full nodes apply instead of re-executing.
//!
//! Owns: state keys and their enumeration indices ([`KeyIndex`], [`MemoryKeyIndex`]), prior
//! values ([`PriorState`], [`PriorValues`], [`MemoryState`]), the packed body
//! ([`encode_body`], [`decode_body`]), the signed state commitment ([`commitment`]), the two files published per block ([`DiffFile`],
//! [`BlockFile`]), verification against the chain tip ([`verify_and_decode`]), and the
//! archive's file layout ([`archive`]). The byte layout is specified in `FORMAT.md` beside
//! this crate, with the measurements behind its choices.
//!
//! Must not: execute anything, write state, or extend an index by itself. Encoding and
//! decoding only read the index and the prior state; the caller extends the index with a
//! diff's new keys when the diff is durable (sequencer) or verified and applied (full node).
//! Decoding is total: every input either decodes to exactly the ChangeSet whose encoding it
//! is, or gives a [`DiffError`] naming the block and the byte offset, without panicking and
//! without allocating more than the input can justify.

pub mod archive;
mod body;
pub mod commitment;
mod error;
mod file;
mod key;
mod prior;
mod verify;

pub use alloy_consensus::Header;
pub use body::{body_keys, decode_body, encode_body, DecodedBody, PackedBody};
pub use commitment::{
    commitment_digest, index_lattice, lattice_delta, lattice_delta_hashed, StateCommitment,
};
pub use error::{BodyError, BodyErrorKind, DiffError, DiffErrorKind, Section, StoreError};
pub use file::{
    decompress_one_frame, BlockFile, Compression, DiffFile, FramedDiff, BLOCK_MAGIC, DIFF_MAGIC,
    FORMAT_VERSION, MAX_CONTENT_LEN, MAX_HEADER_LEN,
};
pub use gigas_primitives::HashedKeys;
pub use key::{KeyIndex, MemoryKeyIndex, StateKey};
pub use prior::{MemoryState, PriorState, PriorValues, EMPTY_ACCOUNT};
pub use verify::{
    encode_diff, open_signed, pack_diff, verify_and_decode, verify_and_decode_timed, ChainTip,
    EncodedDiff, PackedDiff, VerifiedDiff, VerifyTimings,
};
/// The zstd crate the files are compressed with, re-exported so that benchmarks compare
/// levels and dictionaries with the same build.
pub use zstd;
