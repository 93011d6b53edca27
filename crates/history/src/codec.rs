//! Row encodings of the tables declared in [`crate::tables`]: fixed-width big-endian keys, and
//! alloy's own encodings (RLP header, EIP-2718 transactions and receipts) in values.

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{Header, ReceiptEnvelope, TxEnvelope};
use alloy_eips::eip2718::{Decodable2718, Encodable2718};
use alloy_primitives::{keccak256, Address, Signature, B256};
use alloy_rlp::{Decodable, Encodable};
use gigas_mdbx::StoreError as _;

use crate::error::HistoryError;
use crate::tables::Table;
use crate::types::{SealedHeader, TxLocation};

/// The longest state key stored: its length is one byte of the StateHistory key.
pub const MAX_STATE_KEY_LEN: usize = u8::MAX as usize;

const SIGNATURE_LEN: usize = 65;
const HEADER_PREFIX: usize = 32 + SIGNATURE_LEN;

pub(crate) const fn block_key(block: u64) -> [u8; 8] {
    block.to_be_bytes()
}

pub(crate) fn tx_key(block: u64, index: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&block.to_be_bytes());
    key[8..].copy_from_slice(&index.to_be_bytes());
    key
}

pub(crate) fn topic_key(position: u8, topic: &B256) -> [u8; 33] {
    let mut key = [0u8; 33];
    key[0] = position;
    key[1..].copy_from_slice(topic.as_slice());
    key
}

pub(crate) fn decode_u64(table: Table, key: &[u8], bytes: &[u8]) -> Result<u64, HistoryError> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        HistoryError::corrupt(
            table.name(),
            key,
            format!("{} bytes, expected a u64", bytes.len()),
        )
    })?;
    Ok(u64::from_be_bytes(array))
}

pub(crate) fn decode_u32(table: Table, key: &[u8], bytes: &[u8]) -> Result<u32, HistoryError> {
    let array: [u8; 4] = bytes.try_into().map_err(|_| {
        HistoryError::corrupt(
            table.name(),
            key,
            format!("{} bytes, expected a u32", bytes.len()),
        )
    })?;
    Ok(u32::from_be_bytes(array))
}

pub(crate) fn decode_location(
    table: Table,
    key: &[u8],
    bytes: &[u8],
) -> Result<TxLocation, HistoryError> {
    if bytes.len() != 12 {
        return Err(HistoryError::corrupt(
            table.name(),
            key,
            format!("{} bytes, expected block and index (12)", bytes.len()),
        ));
    }
    let (block, index) = bytes.split_at(8);
    Ok(TxLocation {
        block: decode_u64(table, key, block)?,
        index: decode_u32(table, key, index)?,
    })
}

pub(crate) fn encode_header_row(
    header: &Header,
    hash: &B256,
    signature: &Signature,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.reserve(HEADER_PREFIX + header.length());
    out.extend_from_slice(hash.as_slice());
    out.extend_from_slice(&signature.as_bytes());
    header.encode(out);
}

pub(crate) fn decode_header_row(key: &[u8], bytes: &[u8]) -> Result<SealedHeader, HistoryError> {
    let corrupt = |reason: String| HistoryError::corrupt(Table::Headers.name(), key, reason);
    if bytes.len() < HEADER_PREFIX {
        return Err(corrupt(format!(
            "{} bytes, shorter than hash and signature",
            bytes.len()
        )));
    }
    let hash = B256::from_slice(&bytes[..32]);
    let signature = Signature::from_raw(&bytes[32..HEADER_PREFIX])
        .map_err(|e| corrupt(format!("signature: {e}")))?;
    let mut rlp = &bytes[HEADER_PREFIX..];
    let header = Header::decode(&mut rlp).map_err(|e| corrupt(format!("header RLP: {e}")))?;
    if !rlp.is_empty() {
        return Err(corrupt(format!("{} bytes after the header", rlp.len())));
    }
    Ok(SealedHeader {
        header,
        hash,
        signature,
    })
}

/// The block hash of a Headers row, without decoding the header.
pub(crate) fn header_row_hash(key: &[u8], bytes: &[u8]) -> Result<B256, HistoryError> {
    if bytes.len() < HEADER_PREFIX {
        return Err(HistoryError::corrupt(
            Table::Headers.name(),
            key,
            format!("{} bytes, shorter than hash and signature", bytes.len()),
        ));
    }
    Ok(B256::from_slice(&bytes[..32]))
}

pub(crate) fn encode_tx_row(tx: &Recovered<TxEnvelope>, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(20 + tx.inner().encode_2718_len());
    out.extend_from_slice(tx.signer().as_slice());
    tx.inner().encode_2718(out);
}

fn split_tx_row<'a>(key: &[u8], bytes: &'a [u8]) -> Result<(Address, &'a [u8]), HistoryError> {
    if bytes.len() < 20 {
        return Err(HistoryError::corrupt(
            Table::Transactions.name(),
            key,
            format!("{} bytes, shorter than a sender", bytes.len()),
        ));
    }
    let (sender, tx) = bytes.split_at(20);
    Ok((Address::from_slice(sender), tx))
}

pub(crate) fn decode_tx_row(
    key: &[u8],
    bytes: &[u8],
) -> Result<Recovered<TxEnvelope>, HistoryError> {
    let (sender, encoded) = split_tx_row(key, bytes)?;
    let tx = TxEnvelope::decode_2718_exact(encoded).map_err(|e| {
        HistoryError::corrupt(Table::Transactions.name(), key, format!("transaction: {e}"))
    })?;
    Ok(Recovered::new_unchecked(tx, sender))
}

/// The transaction hash of a Transactions row: keccak-256 of its EIP-2718 bytes, without
/// decoding the transaction.
pub(crate) fn tx_row_hash(key: &[u8], bytes: &[u8]) -> Result<B256, HistoryError> {
    let (_, encoded) = split_tx_row(key, bytes)?;
    Ok(keccak256(encoded))
}

pub(crate) fn decode_receipt_row(
    key: &[u8],
    bytes: &[u8],
) -> Result<ReceiptEnvelope, HistoryError> {
    ReceiptEnvelope::decode_2718_exact(bytes)
        .map_err(|e| HistoryError::corrupt(Table::Receipts.name(), key, format!("receipt: {e}")))
}

/// `len ‖ key`: the part of a StateHistory key before the block, and a StateHistoryKeys value.
/// The length byte makes the encoding prefix-free, so one key's rows are contiguous and
/// ordered by block even when another key starts with its bytes.
pub(crate) fn state_prefix(block: u64, key: &[u8]) -> Result<Vec<u8>, HistoryError> {
    let len = u8::try_from(key.len()).map_err(|_| HistoryError::StateKeyTooLong {
        block,
        len: key.len(),
        max: MAX_STATE_KEY_LEN,
    })?;
    let mut out = Vec::with_capacity(1 + key.len() + 8);
    out.push(len);
    out.extend_from_slice(key);
    Ok(out)
}

/// A StateHistory key from a prefix made by [`state_prefix`].
pub(crate) fn state_history_key(prefix: &[u8], block: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(prefix);
    out.extend_from_slice(&block.to_be_bytes());
}

pub(crate) fn encode_state_value(value: Option<&[u8]>, out: &mut Vec<u8>) {
    out.clear();
    match value {
        None => out.push(0),
        Some(v) => {
            out.reserve(1 + v.len());
            out.push(1);
            out.extend_from_slice(v);
        }
    }
}

pub(crate) fn decode_state_value(
    key: &[u8],
    bytes: &[u8],
) -> Result<Option<Vec<u8>>, HistoryError> {
    match bytes.split_first() {
        Some((0, [])) => Ok(None),
        Some((1, value)) => Ok(Some(value.to_vec())),
        _ => Err(HistoryError::corrupt(
            Table::StateHistory.name(),
            key,
            "value is neither 0 (absent) nor 1 ‖ value",
        )),
    }
}
