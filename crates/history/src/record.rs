//! A block as the block log holds it: one record with everything [`BlockRecord`] carries, so
//! that the index (and a reopened history) can be rebuilt from the log alone.
//!
//! ```text
//! record = version: u8 (1) | header row: bytes | transactions: u32 | tx row: bytes ...
//!          | receipt (EIP-2718): bytes ... (one per transaction) | ChangeSet: bytes
//!          | state keys: u32 | (key: u8-length bytes | 0 | 1 value: bytes) ...
//! bytes  = length: u32 | the bytes
//! ```
//!
//! Integers are little-endian. The header and transaction rows are the index's own
//! (`codec`): hash ‖ signature ‖ header RLP, sender ‖ EIP-2718 transaction.

use std::sync::Arc;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;

use crate::codec::{self, block_key, tx_key};
use crate::error::HistoryError;
use crate::types::{BlockRecord, SealedHeader};

const RECORD_VERSION: u8 = 1;

/// One whole block, owned: what the history keeps in memory until the index has it.
#[derive(Debug, Clone)]
pub(crate) struct OwnedBlock {
    pub(crate) sealed: SealedHeader,
    pub(crate) transactions: Arc<[Recovered<TxEnvelope>]>,
    pub(crate) receipts: Vec<ReceiptEnvelope>,
    pub(crate) changeset: Vec<u8>,
    pub(crate) state_history: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl OwnedBlock {
    pub(crate) fn from_record(record: &BlockRecord<'_>) -> Self {
        Self {
            sealed: SealedHeader {
                header: record.header.clone(),
                hash: record.hash,
                signature: record.signature,
            },
            transactions: record.transactions.iter().cloned().collect(),
            receipts: record.receipts.to_vec(),
            changeset: record.changeset.to_vec(),
            state_history: record.state_history.to_vec(),
        }
    }

    pub(crate) fn number(&self) -> u64 {
        self.sealed.header.number
    }

    pub(crate) fn as_record(&self) -> BlockRecord<'_> {
        BlockRecord {
            header: &self.sealed.header,
            hash: self.sealed.hash,
            signature: self.sealed.signature,
            transactions: &self.transactions,
            receipts: &self.receipts,
            changeset: &self.changeset,
            state_history: &self.state_history,
        }
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The log record of `record` (checked by the caller: lengths fit their fields).
pub(crate) fn encode(record: &BlockRecord<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        256 + record.transactions.len() * 400
            + record.changeset.len()
            + record.state_history.len() * 100,
    );
    out.push(RECORD_VERSION);
    let mut row = Vec::with_capacity(1024);
    codec::encode_header_row(record.header, &record.hash, &record.signature, &mut row);
    put_bytes(&mut out, &row);
    out.extend_from_slice(&(record.transactions.len() as u32).to_le_bytes());
    for tx in record.transactions {
        codec::encode_tx_row(tx, &mut row);
        put_bytes(&mut out, &row);
    }
    for receipt in record.receipts {
        row.clear();
        receipt.encode_2718(&mut row);
        put_bytes(&mut out, &row);
    }
    put_bytes(&mut out, record.changeset);
    out.extend_from_slice(&(record.state_history.len() as u32).to_le_bytes());
    for (key, old) in record.state_history {
        out.push(key.len() as u8);
        out.extend_from_slice(key);
        match old {
            None => out.push(0),
            Some(value) => {
                out.push(1);
                put_bytes(&mut out, value);
            }
        }
    }
    out
}

/// A reader over a record's bytes that names the block in every error.
struct Reader<'a> {
    bytes: &'a [u8],
    block: u64,
}

impl<'a> Reader<'a> {
    fn bad(&self, reason: impl Into<String>) -> HistoryError {
        HistoryError::BadRecord {
            block: self.block,
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], HistoryError> {
        if self.bytes.len() < n {
            return Err(self.bad(format!("ends inside {what}")));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> Result<u8, HistoryError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, HistoryError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self, what: &str) -> Result<&'a [u8], HistoryError> {
        let len = self.u32(what)? as usize;
        self.take(len, what)
    }
}

/// Decodes the record of block `block`.
pub(crate) fn decode(block: u64, bytes: &[u8]) -> Result<OwnedBlock, HistoryError> {
    let mut r = Reader { bytes, block };
    let version = r.u8("the version")?;
    if version != RECORD_VERSION {
        return Err(r.bad(format!("unknown record version {version}")));
    }
    let sealed = codec::decode_header_row(&block_key(block), r.bytes("the header")?)?;
    if sealed.header.number != block {
        return Err(r.bad(format!(
            "holds the header of block {}",
            sealed.header.number
        )));
    }
    let count = r.u32("the transaction count")?;
    // Each transaction and receipt takes at least 8 bytes: a count beyond that is damage,
    // not a reason to reserve gigabytes.
    if count as usize > r.bytes.len() / 8 {
        return Err(r.bad(format!("{count} transactions in {} bytes", r.bytes.len())));
    }
    let mut transactions = Vec::with_capacity(count as usize);
    for index in 0..count {
        let row = r.bytes("a transaction")?;
        transactions.push(codec::decode_tx_row(&tx_key(block, index), row)?);
    }
    let mut receipts = Vec::with_capacity(count as usize);
    for index in 0..count {
        let row = r.bytes("a receipt")?;
        receipts.push(codec::decode_receipt_row(&tx_key(block, index), row)?);
    }
    let changeset = r.bytes("the ChangeSet")?.to_vec();
    let keys = r.u32("the state key count")?;
    if keys as usize > r.bytes.len() / 2 {
        return Err(r.bad(format!("{keys} state keys in {} bytes", r.bytes.len())));
    }
    let mut state_history = Vec::with_capacity(keys as usize);
    for _ in 0..keys {
        let len = r.u8("a state key length")? as usize;
        let key = r.take(len, "a state key")?.to_vec();
        let old = match r.u8("a state value flag")? {
            0 => None,
            1 => Some(r.bytes("a state value")?.to_vec()),
            other => return Err(r.bad(format!("state value flag {other}"))),
        };
        state_history.push((key, old));
    }
    if !r.bytes.is_empty() {
        return Err(r.bad(format!("{} bytes after the record", r.bytes.len())));
    }
    Ok(OwnedBlock {
        sealed,
        transactions: transactions.into(),
        receipts,
        changeset,
        state_history,
    })
}
