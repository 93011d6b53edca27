//! The `txpool_*` views of the pool: its counts, its content and its summary.

use std::collections::BTreeMap;
use std::sync::Arc;

use alloy_primitives::Address;
use alloy_rpc_types_eth::Transaction;
use alloy_rpc_types_txpool::{TxpoolContent, TxpoolInspect, TxpoolInspectSummary, TxpoolStatus};

use super::SequencerBackend;

impl SequencerBackend {
    /// `txpool_status`.
    pub fn txpool_status(&self) -> TxpoolStatus {
        let stats = self.node.pool().stats();
        TxpoolStatus {
            pending: stats.pending as u64,
            queued: stats.queued as u64,
        }
    }

    /// `txpool_content`, of every sender or of `from`. The whole pool (up to
    /// `--txpool.max-txs` transactions) is bounded by the response size.
    pub fn txpool_content(&self, from: Option<Address>) -> TxpoolContent {
        let content = self.node.pool().content(from);
        let group = |list: Vec<(Address, Arc<gigas_txpool::PooledTx>)>| {
            let mut out: BTreeMap<Address, BTreeMap<String, Transaction>> = BTreeMap::new();
            for (sender, tx) in list {
                out.entry(sender).or_default().insert(
                    tx.nonce.to_string(),
                    Transaction {
                        inner: tx.tx.clone(),
                        block_hash: None,
                        block_number: None,
                        transaction_index: None,
                        effective_gas_price: None,
                        block_timestamp: None,
                    },
                );
            }
            out
        };
        TxpoolContent {
            pending: group(content.pending),
            queued: group(content.queued),
        }
    }

    /// `txpool_inspect`.
    pub fn txpool_inspect(&self) -> TxpoolInspect {
        let content = self.node.pool().content(None);
        let group = |list: Vec<(Address, Arc<gigas_txpool::PooledTx>)>| {
            let mut out: BTreeMap<Address, BTreeMap<String, TxpoolInspectSummary>> =
                BTreeMap::new();
            for (sender, tx) in list {
                out.entry(sender).or_default().insert(
                    tx.nonce.to_string(),
                    TxpoolInspectSummary::from_tx(tx.tx.inner().clone()),
                );
            }
            out
        };
        TxpoolInspect {
            pending: group(content.pending),
            queued: group(content.queued),
        }
    }
}
