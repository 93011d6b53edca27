//! gigas-snapshot: verifiable state snapshots as plain immutable files, so that a new full
//! node starts from the newest state instead of replaying every diff since genesis.
//!
//! **Owns:** the snapshot's two file formats ([`Manifest`], chunks: [`format`]), every check
//! of them against the sequencer's signed state commitment ([`Manifest::verify`],
//! [`verify_chunk`]), writing a snapshot from a full node's read view ([`write_snapshot`])
//! and pruning old ones ([`prune`]), writing a checked snapshot into an empty state database
//! ([`Restore`]), and the HTTP routes that serve a snapshots directory ([`http::router`]).
//!
//! **Must not:** fetch over the network (the full node's bootstrap does, and decides which
//! source to ask again), choose when to snapshot, or touch MDBX other than through
//! `gigas-statedb`'s snapshot API.
//!
//! # What a snapshot is checked against
//!
//! The sequencer signs, in every diff, a commitment to the state after the block: the
//! checksum of its lattice hash `L_N` (`gigas_statediff::commitment`,
//! `crates/statediff/SNAPSHOT.md`). A manifest carries header N with its signature, that
//! commitment with its signature, `L_N` itself, and each chunk's share of `L_N`. A new node
//! that trusts only the sequencer's key checks the two signatures and that the shares add up
//! to `L_N`; then each chunk, as it arrives and in any order, against its share. Nothing of a
//! snapshot is served until every chunk is written and the head recorded.

pub mod error;
pub mod format;
pub mod http;
pub mod produce;
pub mod restore;

pub use error::{ChunkFault, SnapshotError};
pub use format::{
    encode_chunk, manifest_id, max_file_len, share_of, verify_chunk, ChunkInfo, ChunkKind,
    Manifest, MAX_CHUNK_RAW, MAX_MANIFEST_BYTES,
};
pub use produce::{
    list, prune, read_head, write_snapshot, ProduceOptions, Produced, SnapshotHead, HEAD_FILE,
};
pub use restore::{read_manifest, restore_dir, Restore};
