//! The chained state checksum that every block header carries.
//!
//! A block's checksum commits to its ChangeSet and, through its parent's checksum, to every
//! block before it back to the genesis state. It is computed from the canonical bytes alone
//! (not from how a store lays them out), so that the sequencer, which keeps state in Vilmo,
//! and a full node, which keeps it in MDBX, derive the same value and a follower can prove
//! that it holds exactly the sequencer's state. Vilmo's own batch checksum cannot serve: it
//! also covers compaction records and file numbers, which only a Vilmo store reproduces.

use alloy_primitives::B256;

use crate::state_keys::Write;

/// Domain separation: a checksum can never be mistaken for a hash of anything else.
const BLOCK_DOMAIN: &[u8] = b"gigas/state-checksum/v1";
const GENESIS_DOMAIN: &[u8] = b"gigas/genesis-checksum/v1";

/// The checksum of a block whose encoded ChangeSet is `changeset`, chained to its parent's:
/// BLAKE3(domain ‖ parent ‖ len(changeset) as u64 LE ‖ changeset).
pub fn state_checksum(parent: &B256, changeset: &[u8]) -> B256 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(BLOCK_DOMAIN);
    hasher.update(parent.as_slice());
    hasher.update(&(changeset.len() as u64).to_le_bytes());
    hasher.update(changeset);
    B256::from(*hasher.finalize().as_bytes())
}

/// The checksum of the genesis state, from its writes (see
/// [`crate::state_keys::genesis_writes`]) in any order: they are hashed sorted by key, each
/// as key length (u16 LE) ‖ key ‖ value length (u32 LE) ‖ value.
pub fn genesis_checksum(writes: &[Write]) -> B256 {
    let mut sorted: Vec<&Write> = writes.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut hasher = blake3::Hasher::new();
    hasher.update(GENESIS_DOMAIN);
    hasher.update(&(sorted.len() as u64).to_le_bytes());
    for (key, value) in sorted {
        let value = value.as_deref().unwrap_or_default();
        hasher.update(&(key.len() as u16).to_le_bytes());
        hasher.update(key);
        hasher.update(&(value.len() as u32).to_le_bytes());
        hasher.update(value);
    }
    B256::from(*hasher.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_and_separates() {
        let a = state_checksum(&B256::ZERO, b"x");
        assert_ne!(a, state_checksum(&B256::ZERO, b"y"));
        assert_ne!(a, state_checksum(&B256::repeat_byte(1), b"x"));
        // The length prefix keeps (parent, "ab") apart from any other split of the bytes.
        assert_ne!(state_checksum(&a, b"ab"), state_checksum(&a, b"a"));
        let w1: Write = (b"k1".to_vec(), Some(b"v".to_vec()));
        let w2: Write = (b"k2".to_vec(), Some(b"w".to_vec()));
        assert_eq!(
            genesis_checksum(&[w1.clone(), w2.clone()]),
            genesis_checksum(&[w2, w1])
        );
    }
}
