//! Fee suggestions: the lowest tips sampled per block for `eth_maxPriorityFeePerGas`, and
//! the reward percentiles of `eth_feeHistory`.

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, Transaction as _, TxEnvelope};

/// Blocks the tip suggestion looks back over.
pub(super) const TIP_BLOCKS: u64 = 20;
/// Tips sampled per block.
const TIP_SAMPLES: usize = 3;
/// The smallest tip suggested, in wei.
pub(super) const MIN_SUGGESTED_TIP: u128 = 1_000_000;

/// The [`TIP_SAMPLES`] lowest effective tips of a block's transactions.
pub(super) fn lowest_tips(txs: &[Recovered<TxEnvelope>], base_fee: u64) -> Vec<u128> {
    let mut tips: Vec<u128> = txs
        .iter()
        .map(|tx| {
            tx.inner()
                .effective_tip_per_gas(base_fee)
                .unwrap_or_default()
        })
        .collect();
    let n = tips.len().min(TIP_SAMPLES);
    if n > 0 && tips.len() > n {
        tips.select_nth_unstable(n - 1);
    }
    tips.truncate(n);
    tips
}

pub(super) fn rewards(
    txs: &[Recovered<TxEnvelope>],
    receipts: &[ReceiptEnvelope],
    base_fee: u64,
    gas_used: u64,
    percentiles: &[f64],
) -> Vec<u128> {
    let mut previous = 0u64;
    let mut by_tip: Vec<(u128, u64)> = txs
        .iter()
        .zip(receipts)
        .map(|(tx, r)| {
            let gas = r.cumulative_gas_used() - previous;
            previous = r.cumulative_gas_used();
            (
                tx.inner()
                    .effective_tip_per_gas(base_fee)
                    .unwrap_or_default(),
                gas,
            )
        })
        .collect();
    by_tip.sort_unstable();
    percentiles
        .iter()
        .map(|p| {
            if by_tip.is_empty() {
                return 0;
            }
            let threshold = (gas_used as f64 * p / 100.0) as u64;
            let mut sum = 0u64;
            for (tip, gas) in &by_tip {
                sum += gas;
                if sum >= threshold {
                    return *tip;
                }
            }
            by_tip.last().map_or(0, |(t, _)| *t)
        })
        .collect()
}
