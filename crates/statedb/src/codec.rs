//! Row encodings of the tables declared in [`crate::tables`].
//!
//! Values are kept small because the page cache is the budget on a small machine: a typical
//! account (small nonce, a balance of a few bytes, no code) is 14 bytes instead of 72, and
//! a slot value is trimmed of its leading zeros.

use alloy_consensus::Header;
use alloy_primitives::{Address, Signature, B256, U256};
use alloy_rlp::{Decodable, Encodable};
use gigas_mdbx::StoreError as _;
use gigas_statediff::{ChainTip, StateKey};

use crate::error::StateDbError;
use crate::tables::Table;
use crate::types::StoredHeader;

// The trie tables' rows are the trie store's.
pub(crate) use gigas_triedb::codec::{
    decode_account, decode_slot, encode_account, encode_path, encode_slot,
};
const SIGNATURE_LEN: usize = 65;
const HAS_SIGNATURE: u8 = 1;
const HAS_ROOT: u8 = 2;
const HAS_COMMITMENT: u8 = 4;

pub(crate) const fn block_key(block: u64) -> [u8; 8] {
    block.to_be_bytes()
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
    out[40..].copy_from_slice(tip.state_root.as_slice());
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
        state_root: B256::from_slice(&bytes[40..]),
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
}
