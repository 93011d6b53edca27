//! Why a snapshot was refused or could not be written.

use std::path::PathBuf;

use alloy_primitives::{Address, B256};

/// What is wrong with one chunk: the chunk is refused and fetched again (from another
/// source where there is one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkFault {
    /// Not the size the manifest lists (a truncated download, or another file).
    #[error("{got} bytes, the manifest lists {expected}")]
    Size {
        /// Bytes received.
        got: u64,
        /// Bytes listed.
        expected: u64,
    },
    /// A chunk of another snapshot, or another chunk of this one.
    #[error("it is chunk {chunk} of the snapshot at block {block}, not this one")]
    OtherSnapshot {
        /// The block its header names.
        block: u64,
        /// The chunk number its header names.
        chunk: u32,
    },
    /// The bytes are not the ones the manifest lists (damaged or tampered with).
    #[error("its BLAKE3 is {got}, the manifest lists {expected}")]
    Hash {
        /// The hash of the bytes received.
        got: B256,
        /// The hash listed.
        expected: B256,
    },
    /// The file does not decode.
    #[error("malformed: {0}")]
    Malformed(String),
    /// Its entries are not in strict key order, or not within the range the manifest lists.
    #[error("entries out of order: {0}")]
    Order(String),
    /// Its entries do not sum to the share of the commitment the manifest lists.
    #[error("its entries sum to the lattice checksum {computed}, the manifest lists {listed}")]
    Share {
        /// Checksum of the entries' sum.
        computed: B256,
        /// Checksum of the listed share.
        listed: B256,
    },
    /// A code whose keccak is not the hash it is stored under.
    #[error("code stored under {hash} hashes to {computed}")]
    Code {
        /// The hash it is stored under.
        hash: B256,
        /// Its keccak.
        computed: B256,
    },
}

/// Why a snapshot was refused, or could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The manifest does not decode, or is inconsistent in itself.
    #[error("snapshot manifest: {0}")]
    Manifest(String),
    /// A signature in the manifest is not the sequencer's.
    #[error("snapshot manifest: the {what} is signed by {signer}, not by the chain's sequencer {expected}")]
    Signer {
        /// Which signature ("header", "state commitment").
        what: &'static str,
        /// Who signed it (`none` when it does not recover).
        signer: String,
        /// The sequencer.
        expected: Address,
    },
    /// The lattice hash the manifest carries is not the one the sequencer signed.
    #[error("snapshot manifest: its lattice hash has checksum {computed}, the sequencer signed {signed}")]
    Lattice {
        /// What the sequencer signed.
        signed: B256,
        /// The checksum of the manifest's lattice hash.
        computed: B256,
    },
    /// The chunks' shares do not add up to the signed lattice hash.
    #[error(
        "snapshot manifest: its chunks' shares sum to {computed}, the sequencer signed {signed}"
    )]
    Shares {
        /// What the sequencer signed.
        signed: B256,
        /// The checksum of the shares' sum.
        computed: B256,
    },
    /// A chunk was refused.
    #[error("snapshot chunk {chunk}: {fault}")]
    Chunk {
        /// Its number.
        chunk: u32,
        /// What is wrong.
        fault: ChunkFault,
    },
    /// The state written is incomplete (a code an account names is in no chunk).
    #[error("snapshot: {0}")]
    Incomplete(String),
    /// The node's own state cannot make a snapshot (no commitment kept, no header).
    #[error("cannot write a snapshot: {0}")]
    Unsupported(String),
    /// A file or directory operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] gigas_statedb::StateDbError),
}

impl SnapshotError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The chunk this error refuses, if it is about one chunk (which another source may
    /// serve intact).
    pub fn chunk(&self) -> Option<u32> {
        match self {
            Self::Chunk { chunk, .. } => Some(*chunk),
            _ => None,
        }
    }
}
