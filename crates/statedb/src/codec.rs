//! Row encodings of the tables declared in [`crate::tables`].
//!
//! Values are kept small because the page cache is the budget on a small machine: a typical
//! account (small nonce, a balance of a few bytes, no code) is 14 bytes instead of 72, and
//! a slot value is trimmed of its leading zeros.

use alloy_consensus::Header;
use alloy_primitives::{Address, Signature, B256, KECCAK256_EMPTY, U256};
use alloy_rlp::{Decodable, Encodable};
use alloy_trie::{BranchNodeCompact, Nibbles, TrieMask};
use gigas_mdbx::StoreError as _;
use gigas_primitives::AccountState;
use gigas_statediff::{ChainTip, StateKey};

use crate::error::StateDbError;
use crate::tables::Table;
use crate::types::StoredHeader;

// Nibble path keys (packed nibbles padded to 32 bytes, then the count) are the trie
// engine's: the stored nodes' byte order must be the order its walks seek in.
pub(crate) use gigas_trie::keys::{encode_path, PATH_LEN};
const SIGNATURE_LEN: usize = 65;
const HAS_SIGNATURE: u8 = 1;
const HAS_ROOT: u8 = 2;
const HAS_COMMITMENT: u8 = 4;

pub(crate) const fn block_key(block: u64) -> [u8; 8] {
    block.to_be_bytes()
}

/// The big-endian bytes of `x` without leading zeros (empty for zero).
fn trimmed(bytes: &[u8]) -> &[u8] {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    &bytes[first..]
}

/// Compact account: nonce length (1) ‖ nonce ‖ balance length (1) ‖ balance ‖ code hash (32,
/// only when the account has code). Integers big-endian without leading zeros.
pub(crate) fn encode_account(state: &AccountState, out: &mut Vec<u8>) {
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

pub(crate) fn decode_account(
    table: Table,
    key: &[u8],
    bytes: &[u8],
) -> Result<AccountState, StateDbError> {
    let corrupt = |reason: &str| StateDbError::corrupt(table.name(), key, reason);
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
pub(crate) fn encode_slot(slot: &B256, value: &U256, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(slot.as_slice());
    let value = value.to_be_bytes::<32>();
    out.extend_from_slice(trimmed(&value));
}

pub(crate) fn decode_slot(
    table: Table,
    key: &[u8],
    bytes: &[u8],
) -> Result<(B256, U256), StateDbError> {
    if bytes.len() <= 32 || bytes.len() > 64 {
        return Err(StateDbError::corrupt(
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

pub(crate) fn decode_path(table: Table, key: &[u8], bytes: &[u8]) -> Result<Nibbles, StateDbError> {
    if bytes.len() < PATH_LEN {
        return Err(StateDbError::corrupt(
            table.name(),
            key,
            "short nibble path",
        ));
    }
    let len = usize::from(bytes[32]);
    // A branch node sits above at least one more nibble of a 64-nibble key.
    if len >= 64 {
        return Err(StateDbError::corrupt(
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
pub(crate) fn encode_node(node: &BranchNodeCompact, out: &mut Vec<u8>) {
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

pub(crate) fn decode_node(
    table: Table,
    key: &[u8],
    bytes: &[u8],
) -> Result<BranchNodeCompact, StateDbError> {
    let corrupt = |reason: String| StateDbError::corrupt(table.name(), key, reason);
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

/// The enumeration index's key bytes: the address, or the address and the slot.
pub(crate) fn encode_state_key(key: &StateKey) -> Vec<u8> {
    match key {
        StateKey::Account(address) => address.to_vec(),
        StateKey::Slot(address, slot) => {
            let mut out = Vec::with_capacity(52);
            out.extend_from_slice(address.as_slice());
            out.extend_from_slice(&slot.to_be_bytes::<32>());
            out
        }
    }
}

pub(crate) fn decode_state_key(key: &[u8], bytes: &[u8]) -> Result<StateKey, StateDbError> {
    match bytes.len() {
        20 => Ok(StateKey::Account(Address::from_slice(bytes))),
        52 => Ok(StateKey::Slot(
            Address::from_slice(&bytes[..20]),
            U256::from_be_slice(&bytes[20..]),
        )),
        n => Err(StateDbError::corrupt(
            Table::IndexedKeys.name(),
            key,
            format!("state key of {n} bytes"),
        )),
    }
}

pub(crate) fn decode_u64(table: Table, key: &[u8], bytes: &[u8]) -> Result<u64, StateDbError> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        StateDbError::corrupt(
            table.name(),
            key,
            format!("{} bytes, expected a u64", bytes.len()),
        )
    })?;
    Ok(u64::from_be_bytes(array))
}

pub(crate) fn encode_tip(tip: &ChainTip) -> [u8; 72] {
    let mut out = [0u8; 72];
    out[..8].copy_from_slice(&tip.number.to_be_bytes());
    out[8..40].copy_from_slice(tip.hash.as_slice());
    out[40..].copy_from_slice(tip.state_checksum.as_slice());
    out
}

pub(crate) fn decode_tip(key: &[u8], bytes: &[u8]) -> Result<ChainTip, StateDbError> {
    if bytes.len() != 72 {
        return Err(StateDbError::corrupt(
            Table::Meta.name(),
            key,
            format!("head of {} bytes", bytes.len()),
        ));
    }
    Ok(ChainTip {
        number: u64::from_be_bytes(bytes[..8].try_into().unwrap_or_default()),
        hash: B256::from_slice(&bytes[8..40]),
        state_checksum: B256::from_slice(&bytes[40..]),
    })
}

pub(crate) fn encode_root(block: u64, root: &B256) -> [u8; 40] {
    let mut out = [0u8; 40];
    out[..8].copy_from_slice(&block.to_be_bytes());
    out[8..].copy_from_slice(root.as_slice());
    out
}

pub(crate) fn decode_root(key: &[u8], bytes: &[u8]) -> Result<(u64, B256), StateDbError> {
    if bytes.len() != 40 {
        return Err(StateDbError::corrupt(
            Table::Meta.name(),
            key,
            format!("root of {} bytes", bytes.len()),
        ));
    }
    Ok((
        u64::from_be_bytes(bytes[..8].try_into().unwrap_or_default()),
        B256::from_slice(&bytes[8..]),
    ))
}

pub(crate) fn encode_header_row(header: &StoredHeader, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(header.hash.as_slice());
    let mut flags = 0u8;
    if header.signature.is_some() {
        flags |= HAS_SIGNATURE;
    }
    if header.state_root.is_some() {
        flags |= HAS_ROOT;
    }
    if header.commitment.is_some() {
        flags |= HAS_COMMITMENT;
    }
    out.push(flags);
    if let Some(signature) = &header.signature {
        out.extend_from_slice(&signature.as_bytes());
    }
    if let Some(root) = &header.state_root {
        out.extend_from_slice(root.as_slice());
    }
    if let Some(commitment) = &header.commitment {
        out.extend_from_slice(commitment.lattice.as_slice());
        out.extend_from_slice(&commitment.signature.as_bytes());
    }
    header.header.encode(out);
}

pub(crate) fn decode_header_row(key: &[u8], bytes: &[u8]) -> Result<StoredHeader, StateDbError> {
    let corrupt = |reason: String| StateDbError::corrupt(Table::Headers.name(), key, reason);
    if bytes.len() < 33 {
        return Err(corrupt(format!("header row of {} bytes", bytes.len())));
    }
    let hash = B256::from_slice(&bytes[..32]);
    let flags = bytes[32];
    if flags & !(HAS_SIGNATURE | HAS_ROOT | HAS_COMMITMENT) != 0 {
        return Err(corrupt(format!("unknown flags {flags:#x}")));
    }
    let mut rest = &bytes[33..];
    let signature = if flags & HAS_SIGNATURE != 0 {
        if rest.len() < SIGNATURE_LEN {
            return Err(corrupt("truncated signature".into()));
        }
        let signature = Signature::from_raw(&rest[..SIGNATURE_LEN])
            .map_err(|e| corrupt(format!("signature: {e}")))?;
        rest = &rest[SIGNATURE_LEN..];
        Some(signature)
    } else {
        None
    };
    let state_root = if flags & HAS_ROOT != 0 {
        if rest.len() < 32 {
            return Err(corrupt("truncated root".into()));
        }
        let root = B256::from_slice(&rest[..32]);
        rest = &rest[32..];
        Some(root)
    } else {
        None
    };
    let commitment = if flags & HAS_COMMITMENT != 0 {
        if rest.len() < 32 + SIGNATURE_LEN {
            return Err(corrupt("truncated state commitment".into()));
        }
        let lattice = B256::from_slice(&rest[..32]);
        let signature = Signature::from_raw(&rest[32..32 + SIGNATURE_LEN])
            .map_err(|e| corrupt(format!("commitment signature: {e}")))?;
        rest = &rest[32 + SIGNATURE_LEN..];
        Some(gigas_statediff::StateCommitment { lattice, signature })
    } else {
        None
    };
    let header = Header::decode(&mut rest).map_err(|e| corrupt(format!("header RLP: {e}")))?;
    if !rest.is_empty() {
        return Err(corrupt(format!("{} bytes after the header", rest.len())));
    }
    Ok(StoredHeader {
        header,
        hash,
        signature,
        state_root,
        commitment,
    })
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
                decode_account(Table::HashedAccounts, &[], &buf).unwrap(),
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
        assert!(decode_account(Table::HashedAccounts, &[], &[9]).is_err());
        assert!(decode_account(Table::HashedAccounts, &[], &[0, 0, 1]).is_err());
    }

    #[test]
    fn header_rows_round_trip_with_every_optional_part() {
        let signature = Signature::new(U256::from(3), U256::from(4), true);
        let commitment = gigas_statediff::StateCommitment {
            lattice: B256::repeat_byte(5),
            signature: Signature::new(U256::from(6), U256::from(7), false),
        };
        let mut buf = Vec::new();
        for bits in 0..8u8 {
            let row = StoredHeader {
                header: Header {
                    number: 9,
                    ..Header::default()
                },
                hash: B256::repeat_byte(1),
                signature: (bits & 1 != 0).then_some(signature),
                state_root: (bits & 2 != 0).then(|| B256::repeat_byte(2)),
                commitment: (bits & 4 != 0).then_some(commitment),
            };
            encode_header_row(&row, &mut buf);
            assert_eq!(decode_header_row(&[], &buf).unwrap(), row, "flags {bits}");
            // Cut anywhere, the row is an error, not a shorter header.
            for cut in [33, buf.len() - 1] {
                assert!(decode_header_row(&[], &buf[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn path_keys_decode_to_their_path_at_every_length() {
        // Their byte order is the trie engine's to test (`gigas_trie::keys`); a stored key
        // must read back as the path it was written for, up to a branch's 63 nibbles.
        let full = Nibbles::unpack(B256::repeat_byte(0x5a));
        for len in 0..64 {
            let path = full.slice(..len);
            let key = encode_path(&path);
            assert_eq!(decode_path(Table::AccountsTrie, &[], &key).unwrap(), path);
        }
        let mut too_long = encode_path(&full.slice(..63));
        too_long[32] = 64;
        assert!(decode_path(Table::AccountsTrie, &[], &too_long).is_err());
        assert!(decode_path(Table::AccountsTrie, &[], &too_long[..32]).is_err());
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
        assert_eq!(decode_node(Table::AccountsTrie, &[], &buf).unwrap(), node);
        let mut bad = buf.clone();
        bad[1] = 0; // state mask loses the children the other masks name
        assert!(decode_node(Table::AccountsTrie, &[], &bad).is_err());
        assert!(decode_node(Table::AccountsTrie, &[], &buf[..buf.len() - 1]).is_err());
    }
}
