//! Row encodings of the trie tables ([`crate::tables`]).
//!
//! Values are kept small because the page cache is the budget on a small machine: a typical
//! account (small nonce, a balance of a few bytes, no code) is 14 bytes instead of 72, and
//! a slot value is trimmed of its leading zeros.

use alloy_primitives::{B256, KECCAK256_EMPTY, U256};
use alloy_trie::{BranchNodeCompact, Nibbles, TrieMask};
use gigas_mdbx::StoreError as _;
use gigas_primitives::AccountState;

use crate::error::TrieDbError;
use crate::tables::TrieTable;

// Nibble path keys (packed nibbles padded to 32 bytes, then the count) are the trie
// engine's: the stored nodes' byte order must be the order its walks seek in.
pub use gigas_trie::keys::{encode_path, PATH_LEN};

/// The big-endian bytes of `x` without leading zeros (empty for zero).
fn trimmed(bytes: &[u8]) -> &[u8] {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    &bytes[first..]
}

/// Compact account: nonce length (1) ‖ nonce ‖ balance length (1) ‖ balance ‖ code hash (32,
/// only when the account has code). Integers big-endian without leading zeros.
pub fn encode_account(state: &AccountState, out: &mut Vec<u8>) {
    out.clear();
    let nonce = state.nonce.to_be_bytes();
    let nonce = trimmed(&nonce);
    out.push(nonce.len() as u8);
    out.extend_from_slice(nonce);
    let balance = state.balance.to_be_bytes::<32>();
    let balance = trimmed(&balance);
    out.push(balance.len() as u8);
    out.extend_from_slice(balance);
    if state.code_hash != KECCAK256_EMPTY {
        out.extend_from_slice(state.code_hash.as_slice());
    }
}

/// Reads a compact account (`table` and `key` name the row for errors).
pub fn decode_account(
    table: TrieTable,
    key: &[u8],
    bytes: &[u8],
) -> Result<AccountState, TrieDbError> {
    let corrupt = |reason: &str| TrieDbError::corrupt(table.name(), key, reason);
    let (&nonce_len, rest) = bytes
        .split_first()
        .ok_or_else(|| corrupt("empty account"))?;
    let nonce_len = usize::from(nonce_len);
    if nonce_len > 8 || rest.len() < nonce_len + 1 {
        return Err(corrupt("bad nonce length"));
    }
    let mut nonce = [0u8; 8];
    nonce[8 - nonce_len..].copy_from_slice(&rest[..nonce_len]);
    let rest = &rest[nonce_len..];
    let balance_len = usize::from(rest[0]);
    let rest = &rest[1..];
    if balance_len > 32 || rest.len() < balance_len {
        return Err(corrupt("bad balance length"));
    }
    let balance = U256::from_be_slice(&rest[..balance_len]);
    let code_hash = match &rest[balance_len..] {
        [] => KECCAK256_EMPTY,
        hash if hash.len() == 32 => B256::from_slice(hash),
        _ => return Err(corrupt("bad code hash length")),
    };
    Ok(AccountState {
        nonce: u64::from_be_bytes(nonce),
        balance,
        code_hash,
    })
}

/// A storage duplicate: slot or keccak(slot) (32) ‖ the value without leading zeros. Zero
/// values are never stored.
pub fn encode_slot(slot: &B256, value: &U256, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(slot.as_slice());
    let value = value.to_be_bytes::<32>();
    out.extend_from_slice(trimmed(&value));
}

/// Reads a storage duplicate: keccak(slot) and the value.
pub fn decode_slot(
    table: TrieTable,
    key: &[u8],
    bytes: &[u8],
) -> Result<(B256, U256), TrieDbError> {
    if bytes.len() <= 32 || bytes.len() > 64 {
        return Err(TrieDbError::corrupt(
            table.name(),
            key,
            format!("storage entry of {} bytes", bytes.len()),
        ));
    }
    Ok((
        B256::from_slice(&bytes[..32]),
        U256::from_be_slice(&bytes[32..]),
    ))
}

/// Reads a nibble path key (see [`encode_path`]).
pub fn decode_path(table: TrieTable, key: &[u8], bytes: &[u8]) -> Result<Nibbles, TrieDbError> {
    if bytes.len() < PATH_LEN {
        return Err(TrieDbError::corrupt(table.name(), key, "short nibble path"));
    }
    let len = usize::from(bytes[32]);
    // A branch node sits above at least one more nibble of a 64-nibble key.
    if len >= 64 {
        return Err(TrieDbError::corrupt(
            table.name(),
            key,
            format!("nibble path of length {len}"),
        ));
    }
    let mut path = Nibbles::unpack(&bytes[..32]);
    path.truncate(len);
    Ok(path)
}

/// A branch node: state mask (2) ‖ tree mask (2) ‖ hash mask (2), big-endian, ‖ the child
/// hashes the hash mask names (32 each, by nibble) ‖ the subtrie's root hash (32, only on the
/// node at the empty path).
pub fn encode_node(node: &BranchNodeCompact, out: &mut Vec<u8>) {
    out.extend_from_slice(&node.state_mask.get().to_be_bytes());
    out.extend_from_slice(&node.tree_mask.get().to_be_bytes());
    out.extend_from_slice(&node.hash_mask.get().to_be_bytes());
    for hash in node.hashes.iter() {
        out.extend_from_slice(hash.as_slice());
    }
    if let Some(root) = &node.root_hash {
        out.extend_from_slice(root.as_slice());
    }
}

/// Reads a branch node (see [`encode_node`]); a corrupt row is an error, never a panic.
pub fn decode_node(
    table: TrieTable,
    key: &[u8],
    bytes: &[u8],
) -> Result<BranchNodeCompact, TrieDbError> {
    let corrupt = |reason: String| TrieDbError::corrupt(table.name(), key, reason);
    if bytes.len() < 6 {
        return Err(corrupt(format!("branch node of {} bytes", bytes.len())));
    }
    let mask = |at: usize| TrieMask::new(u16::from_be_bytes([bytes[at], bytes[at + 1]]));
    let (state, tree, hash) = (mask(0), mask(2), mask(4));
    // BranchNodeCompact::new asserts these: a corrupt row must be an error, not a panic.
    if !tree.is_subset_of(state) || !hash.is_subset_of(state) {
        return Err(corrupt("tree or hash mask outside the state mask".into()));
    }
    let count = hash.count_ones() as usize;
    let rest = &bytes[6..];
    let root = match rest.len().checked_sub(count * 32) {
        Some(0) => None,
        Some(32) => Some(B256::from_slice(&rest[count * 32..])),
        _ => {
            return Err(corrupt(format!(
                "{} bytes of hashes for {count} hashed children",
                rest.len()
            )))
        }
    };
    let hashes = rest[..count * 32]
        .chunks_exact(32)
        .map(B256::from_slice)
        .collect();
    Ok(BranchNodeCompact::new(state, tree, hash, hashes, root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_round_trip_compactly() {
        let mut buf = Vec::new();
        for state in [
            AccountState {
                nonce: 0,
                balance: U256::ZERO,
                code_hash: KECCAK256_EMPTY,
            },
            AccountState {
                nonce: 7,
                balance: U256::from(10u64.pow(18)),
                code_hash: KECCAK256_EMPTY,
            },
            AccountState {
                nonce: u64::MAX,
                balance: U256::MAX,
                code_hash: B256::repeat_byte(3),
            },
        ] {
            encode_account(&state, &mut buf);
            assert_eq!(
                decode_account(TrieTable::HashedAccounts, &[], &buf).unwrap(),
                state
            );
        }
        encode_account(
            &AccountState {
                nonce: 1,
                balance: U256::from(10u64.pow(18)),
                code_hash: KECCAK256_EMPTY,
            },
            &mut buf,
        );
        assert_eq!(buf.len(), 1 + 1 + 1 + 8);
        assert!(decode_account(TrieTable::HashedAccounts, &[], &[9]).is_err());
        assert!(decode_account(TrieTable::HashedAccounts, &[], &[0, 0, 1]).is_err());
    }

    #[test]
    fn path_keys_decode_to_their_path_at_every_length() {
        // Their byte order is the trie engine's to test (`gigas_trie::keys`); a stored key
        // must read back as the path it was written for, up to a branch's 63 nibbles.
        let full = Nibbles::unpack(B256::repeat_byte(0x5a));
        for len in 0..64 {
            let path = full.slice(..len);
            let key = encode_path(&path);
            assert_eq!(
                decode_path(TrieTable::AccountsTrie, &[], &key).unwrap(),
                path
            );
        }
        let mut too_long = encode_path(&full.slice(..63));
        too_long[32] = 64;
        assert!(decode_path(TrieTable::AccountsTrie, &[], &too_long).is_err());
        assert!(decode_path(TrieTable::AccountsTrie, &[], &too_long[..32]).is_err());
    }

    #[test]
    fn nodes_round_trip_and_corrupt_masks_are_errors() {
        let node = BranchNodeCompact::new(
            TrieMask::new(0b1011),
            TrieMask::new(0b0001),
            TrieMask::new(0b1010),
            vec![B256::repeat_byte(1), B256::repeat_byte(2)],
            Some(B256::repeat_byte(9)),
        );
        let mut buf = Vec::new();
        encode_node(&node, &mut buf);
        assert_eq!(
            decode_node(TrieTable::AccountsTrie, &[], &buf).unwrap(),
            node
        );
        let mut bad = buf.clone();
        bad[1] = 0; // state mask loses the children the other masks name
        assert!(decode_node(TrieTable::AccountsTrie, &[], &bad).is_err());
        assert!(decode_node(TrieTable::AccountsTrie, &[], &buf[..buf.len() - 1]).is_err());
    }
}
