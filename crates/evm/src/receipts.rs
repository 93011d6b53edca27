//! Receipts, the logs bloom and the receipts root, and the checks of a block against its
//! header.

use alloy_consensus::{
    proofs::calculate_receipt_root, Eip658Value, Receipt, ReceiptEnvelope, ReceiptWithBloom, TxType,
};
use alloy_primitives::{Bloom, Log, B256};
use serde::Serialize;

/// What a transaction left behind, before the bloom is computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxReceipt {
    /// The EIP-2718 type of the transaction.
    pub tx_type: TxType,
    /// Whether it succeeded.
    pub success: bool,
    /// Gas used by the block up to and including this transaction.
    pub cumulative_gas_used: u64,
    /// Its logs.
    pub logs: Vec<Log>,
}

impl TxReceipt {
    /// The receipt of a transaction that ended with `result`, after the block had used
    /// `cumulative_gas_used` gas before it; adds the transaction's gas to that counter.
    pub fn after(
        tx_type: TxType,
        result: revm::context::result::ExecutionResult,
        cumulative_gas_used: &mut u64,
    ) -> Self {
        *cumulative_gas_used += result.tx_gas_used();
        Self {
            tx_type,
            success: result.is_success(),
            cumulative_gas_used: *cumulative_gas_used,
            logs: result.into_logs(),
        }
    }

    /// The consensus receipt envelope, bloom included.
    pub fn envelope(&self) -> ReceiptEnvelope {
        let receipt = Receipt {
            status: Eip658Value::Eip658(self.success),
            cumulative_gas_used: self.cumulative_gas_used,
            logs: self.logs.clone(),
        };
        ReceiptEnvelope::from_typed(self.tx_type, ReceiptWithBloom::from(receipt))
    }
}

/// The receipts root and logs bloom of a block's receipts.
pub fn receipts_root_and_bloom(receipts: &[TxReceipt]) -> (B256, Bloom) {
    let envelopes: Vec<ReceiptEnvelope> = receipts.iter().map(TxReceipt::envelope).collect();
    let mut bloom = Bloom::ZERO;
    for envelope in &envelopes {
        bloom.accrue_bloom(envelope.logs_bloom());
    }
    (calculate_receipt_root(&envelopes), bloom)
}

/// The header fields a replay must reproduce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpectedHeader {
    /// `gasUsed`.
    pub gas_used: u64,
    /// `receiptsRoot`.
    pub receipts_root: B256,
    /// `logsBloom`.
    pub logs_bloom: Bloom,
    /// Whether receipts carry a status (Byzantium and later), so that the receipts root and
    /// bloom can be recomputed. Before Byzantium receipts hold an intermediate state root that
    /// a replay from a partial pre-state cannot produce.
    pub receipts_checkable: bool,
}

/// A field of the header that the replay did not reproduce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
pub enum HeaderMismatch {
    /// Summed transaction gas differs from `gasUsed`.
    #[error("gasUsed: header {header}, computed {computed}")]
    GasUsed {
        /// The header's value.
        header: u64,
        /// The replay's value.
        computed: u64,
    },
    /// The receipts root differs.
    #[error("receiptsRoot: header {header}, computed {computed}")]
    ReceiptsRoot {
        /// The header's value.
        header: B256,
        /// The replay's value.
        computed: B256,
    },
    /// The logs bloom differs.
    #[error("logsBloom: header {header}, computed {computed}")]
    LogsBloom {
        /// The header's value.
        header: Box<Bloom>,
        /// The replay's value.
        computed: Box<Bloom>,
    },
}

/// The result of checking a replayed block against its header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockCheck {
    /// Block number.
    pub number: u64,
    /// The header's `gasUsed`.
    pub header_gas_used: u64,
    /// The summed gas of the replayed transactions.
    pub computed_gas_used: u64,
    /// The computed receipts root, when the fork allows checking it.
    pub computed_receipts_root: Option<B256>,
    /// Whether the receipts root and bloom were checked.
    pub receipts_checked: bool,
    /// Every field that differs; empty when the block matches.
    pub mismatches: Vec<HeaderMismatch>,
}

impl BlockCheck {
    /// Compares a replay's receipts with the header.
    pub fn new(number: u64, expected: &ExpectedHeader, receipts: &[TxReceipt]) -> Self {
        let computed_gas_used = receipts.last().map_or(0, |r| r.cumulative_gas_used);
        let mut mismatches = Vec::new();
        if computed_gas_used != expected.gas_used {
            mismatches.push(HeaderMismatch::GasUsed {
                header: expected.gas_used,
                computed: computed_gas_used,
            });
        }
        let mut computed_receipts_root = None;
        if expected.receipts_checkable {
            let (root, bloom) = receipts_root_and_bloom(receipts);
            computed_receipts_root = Some(root);
            if root != expected.receipts_root {
                mismatches.push(HeaderMismatch::ReceiptsRoot {
                    header: expected.receipts_root,
                    computed: root,
                });
            }
            if bloom != expected.logs_bloom {
                mismatches.push(HeaderMismatch::LogsBloom {
                    header: Box::new(expected.logs_bloom),
                    computed: Box::new(bloom),
                });
            }
        }
        Self {
            number,
            header_gas_used: expected.gas_used,
            computed_gas_used,
            computed_receipts_root,
            receipts_checked: expected.receipts_checkable,
            mismatches,
        }
    }

    /// Whether every checked field matches.
    pub fn is_match(&self) -> bool {
        self.mismatches.is_empty()
    }
}
