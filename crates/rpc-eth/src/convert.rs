//! Conversions both nodes answer with: a header and a block's size as Ethereum's JSON-RPC
//! reports them.

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{Header, TxEnvelope};
use alloy_primitives::{B256, U256};
use alloy_rpc_types_eth::Header as RpcHeader;

/// The RLP length of the block of `header` with `txs`, no ommers and an empty withdrawals
/// list: what `size` reports.
pub fn block_size(header: &Header, txs: &[Recovered<TxEnvelope>]) -> usize {
    // Summed from the parts' lengths: building the block to encode it would copy every
    // transaction on each block request.
    let list = |payload_length: usize| {
        alloy_rlp::Header {
            list: true,
            payload_length,
        }
        .length_with_payload()
    };
    let txs: usize = txs
        .iter()
        .map(|tx| alloy_rlp::Encodable::length(tx.inner()))
        .sum();
    // header, transactions, ommers (none), withdrawals (none)
    list(alloy_rlp::Encodable::length(header) + list(txs) + list(0) + list(0))
}

/// The RPC header of a sealed header.
pub fn rpc_header(header: &alloy_consensus::Header, hash: B256) -> RpcHeader {
    let size = alloy_rlp::Encodable::length(header);
    RpcHeader {
        hash,
        inner: header.clone(),
        total_difficulty: Some(U256::ZERO),
        size: Some(U256::from(size)),
    }
}
