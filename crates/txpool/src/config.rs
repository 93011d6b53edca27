//! The pool's bounds and the chain rules its checks need.

use gigas_evm::revm::primitives::hardfork::SpecId;

/// Bounds and chain rules of a [`crate::TxPool`] and of the stateless checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// The chain id transactions must be signed for (legacy transactions without EIP-155 carry
    /// none and are accepted).
    pub chain_id: u64,
    /// No transaction may ask for more gas than one block holds.
    pub block_gas_limit: u64,
    /// Largest encoded transaction accepted, in bytes (geth: 128 KiB).
    pub max_tx_bytes: usize,
    /// Most transactions held, pending and queued together.
    pub max_txs: usize,
    /// Most encoded bytes held: with `max_tx_bytes` of 128 KiB, `max_txs` alone would let the
    /// pool grow to gigabytes.
    pub max_bytes: usize,
    /// Most transactions per sender; also how far ahead of the account's nonce a transaction
    /// may be (a nonce at or beyond `account nonce + max_per_sender` is "nonce too high").
    pub max_per_sender: usize,
    /// A replacement must raise both the fee cap and the tip by at least this many percent.
    pub price_bump_percent: u64,
    /// Lowest tip cap (`max_priority_fee_per_gas`, gas price for legacy) accepted, in wei.
    pub min_priority_fee: u128,
    /// Threads of the [`crate::Recoverer`].
    pub recovery_threads: usize,
    /// Transactions that may wait for a recovery thread before `recover` answers "busy".
    pub recovery_queue: usize,
    /// Capacity of the channel of newly pending hashes; a slower subscriber loses the oldest.
    pub pending_broadcast_capacity: usize,
    /// The fork whose intrinsic gas rules apply (`gigas_evm::spec::spec_id(fork)`).
    pub spec: SpecId,
}

impl PoolConfig {
    /// The default bounds (geth's sizes where geth has one) for a chain under Prague.
    pub fn new(chain_id: u64, block_gas_limit: u64) -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            chain_id,
            block_gas_limit,
            max_tx_bytes: 128 * 1024,
            max_txs: 100_000,
            max_bytes: 256 * 1024 * 1024,
            max_per_sender: 256,
            price_bump_percent: 10,
            min_priority_fee: 0,
            recovery_threads: threads,
            recovery_queue: 16_384,
            pending_broadcast_capacity: 4096,
            spec: SpecId::PRAGUE,
        }
    }
}
