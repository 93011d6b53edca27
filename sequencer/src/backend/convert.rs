//! History turned into the RPC types: transactions with their block fields, and receipts
//! with their logs numbered within the block.

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, Transaction as _, TxEnvelope};
use alloy_rpc_types_eth::{Log, Transaction, TransactionReceipt};
use gigas_history::SealedHeader;

pub(super) fn rpc_transaction(
    tx: Recovered<TxEnvelope>,
    header: &SealedHeader,
    index: usize,
) -> Transaction {
    let price = tx
        .inner()
        .effective_gas_price(header.header.base_fee_per_gas);
    Transaction {
        inner: tx,
        block_hash: Some(header.hash),
        block_number: Some(header.header.number),
        transaction_index: Some(index as u64),
        effective_gas_price: Some(price),
        block_timestamp: Some(header.header.timestamp),
    }
}

/// The RPC receipt of transaction `index` of a block, given the cumulative gas and the number
/// of logs of the transactions before it.
pub(super) fn rpc_receipt(
    header: &SealedHeader,
    tx: &Recovered<TxEnvelope>,
    receipt: ReceiptEnvelope,
    index: usize,
    gas_before: u64,
    logs_before: u64,
) -> TransactionReceipt {
    let gas_used = receipt.cumulative_gas_used() - gas_before;
    let hash = *tx.inner().tx_hash();
    let mut log_index = logs_before;
    let inner = receipt.map_logs(|log| {
        let rpc = Log {
            inner: log,
            block_hash: Some(header.hash),
            block_number: Some(header.header.number),
            block_timestamp: Some(header.header.timestamp),
            transaction_hash: Some(hash),
            transaction_index: Some(index as u64),
            log_index: Some(log_index),
            removed: false,
        };
        log_index += 1;
        rpc
    });
    let contract_address = tx
        .inner()
        .kind()
        .is_create()
        .then(|| tx.signer().create(tx.inner().nonce()));
    TransactionReceipt {
        inner,
        transaction_hash: hash,
        transaction_index: Some(index as u64),
        block_hash: Some(header.hash),
        block_number: Some(header.header.number),
        gas_used,
        effective_gas_price: tx
            .inner()
            .effective_gas_price(header.header.base_fee_per_gas),
        blob_gas_used: None,
        blob_gas_price: None,
        from: tx.signer(),
        to: tx.inner().to(),
        contract_address,
    }
}

/// The RPC receipts of a block, with logs numbered within the block.
pub(super) fn rpc_receipts(
    header: &SealedHeader,
    txs: &[Recovered<TxEnvelope>],
    receipts: Vec<ReceiptEnvelope>,
) -> Vec<TransactionReceipt> {
    let (mut gas, mut logs) = (0u64, 0u64);
    txs.iter()
        .zip(receipts)
        .enumerate()
        .map(|(index, (tx, receipt))| {
            let (next_gas, next_logs) = (receipt.cumulative_gas_used(), receipt.logs().len());
            let rpc = rpc_receipt(header, tx, receipt, index, gas, logs);
            gas = next_gas;
            logs += next_logs as u64;
            rpc
        })
        .collect()
}
