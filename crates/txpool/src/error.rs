//! Why a transaction was refused, in the words Ethereum tools match on.

use alloy_primitives::{Address, U256};

/// A transaction the pool refused.
///
/// `Display` is the JSON-RPC error message (code -32000) of `eth_sendRawTransaction`: the
/// leading words are geth's and reth's, which wallets and libraries match on; numbers follow a
/// colon so that a person can see what to change. [`TxPoolError::reason`] is the short label
/// of the rejection metric.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxPoolError {
    /// The encoding is larger than the pool accepts.
    #[error("oversized data: size {size}, max {max}")]
    Oversized {
        /// Bytes of the encoded transaction.
        size: usize,
        /// The configured bound.
        max: usize,
    },
    /// The bytes are not an EIP-2718 transaction (bad RLP, trailing bytes, empty input).
    #[error("failed to decode signed transaction: {0}")]
    Decode(String),
    /// An EIP-4844 blob transaction: this sequencer keeps no blobs.
    #[error(
        "transaction type not supported: EIP-4844 blob transactions are not accepted by this sequencer"
    )]
    BlobNotSupported,
    /// A transaction type this chain does not know.
    #[error("transaction type not supported: type {0:#04x}")]
    UnsupportedType(u8),
    /// Signed for another chain.
    #[error("invalid chain id: expected {expected}, got {got}")]
    InvalidChainId {
        /// This chain's id.
        expected: u64,
        /// The id the transaction was signed for.
        got: u64,
    },
    /// The signature does not recover to an address (or has a high `s`, EIP-2).
    #[error("invalid sender")]
    InvalidSender,
    /// The gas limit does not cover the intrinsic gas (or the EIP-7623 calldata floor).
    #[error("intrinsic gas too low: have {have}, want {want}")]
    IntrinsicGasTooLow {
        /// The transaction's gas limit.
        have: u64,
        /// The gas it needs before executing anything.
        want: u64,
    },
    /// The gas limit is above the block gas limit, so no block could include it.
    #[error("exceeds block gas limit: gas limit {gas_limit}, block gas limit {block_gas_limit}")]
    ExceedsBlockGasLimit {
        /// The transaction's gas limit.
        gas_limit: u64,
        /// The chain's block gas limit.
        block_gas_limit: u64,
    },
    /// An EIP-1559 style transaction whose tip is above its fee cap.
    #[error(
        "max priority fee per gas higher than max fee per gas: maxPriorityFeePerGas: {tip}, maxFeePerGas: {fee_cap}"
    )]
    TipAboveFeeCap {
        /// `max_priority_fee_per_gas`.
        tip: u128,
        /// `max_fee_per_gas`.
        fee_cap: u128,
    },
    /// An EIP-7702 transaction without authorizations.
    #[error("EIP-7702 transaction with empty auth list")]
    EmptyAuthorizationList,
    /// A contract creation whose init code is above the EIP-3860 limit.
    #[error("max initcode size exceeded: code size {size}, limit {max}")]
    InitcodeTooLarge {
        /// Bytes of init code.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A nonce of `u64::MAX`, which could never be followed.
    #[error("nonce has max value")]
    NonceMax,
    /// The account's nonce is already past this transaction's.
    #[error("nonce too low: next nonce {next}, tx nonce {tx}")]
    NonceTooLow {
        /// The account's nonce at the head.
        next: u64,
        /// The transaction's nonce.
        tx: u64,
    },
    /// The nonce is further ahead of the account's than the pool keeps per sender.
    #[error("nonce too high: next nonce {next}, tx nonce {tx}, highest accepted {max}")]
    NonceTooHigh {
        /// The next nonce this sender can use without a gap.
        next: u64,
        /// The transaction's nonce.
        tx: u64,
        /// The highest nonce the pool accepts for this sender now.
        max: u64,
    },
    /// The balance does not cover this transaction after the sender's earlier ones in the pool.
    #[error(
        "insufficient funds for gas * price + value: address {address} have {have} want {want}"
    )]
    InsufficientFunds {
        /// The sender.
        address: Address,
        /// The sender's balance at the head, in wei.
        have: U256,
        /// `gas_limit * max_fee_per_gas + value` of this transaction and of the sender's pooled
        /// transactions before it, in wei.
        want: U256,
    },
    /// The fee cap is below the base fee of the next block.
    #[error(
        "max fee per gas less than block base fee: address {address}, maxFeePerGas: {max_fee_per_gas}, baseFee: {base_fee}"
    )]
    FeeCapBelowBaseFee {
        /// The sender.
        address: Address,
        /// The transaction's fee cap (gas price for legacy and EIP-2930).
        max_fee_per_gas: u128,
        /// The next block's base fee.
        base_fee: u64,
    },
    /// The tip is below the pool's minimum.
    #[error("transaction underpriced: gas tip cap {tip}, minimum needed {min}")]
    Underpriced {
        /// The transaction's tip cap.
        tip: u128,
        /// The configured minimum.
        min: u128,
    },
    /// The pool is full and this transaction pays no more than the cheapest one it could evict.
    #[error(
        "transaction underpriced: the pool is full and its cheapest evictable transaction pays a tip of {cheapest}, this one {tip}"
    )]
    UnderpricedPoolFull {
        /// The effective tip of the cheapest evictable transaction.
        cheapest: u128,
        /// This transaction's effective tip.
        tip: u128,
    },
    /// A transaction with this sender and nonce is pooled and this one does not raise both its
    /// fee cap and its tip by the configured bump.
    #[error("replacement transaction underpriced")]
    ReplacementUnderpriced,
    /// The pool holds this transaction already.
    #[error("already known")]
    AlreadyKnown,
    /// The pool is full and nothing can be evicted for this transaction.
    #[error("txpool is full")]
    PoolFull,
    /// The queue of transactions waiting for sender recovery is full.
    #[error("txpool is busy: the sender recovery queue is full, retry later")]
    Busy,
    /// The pool's workers are gone (the node is shutting down).
    #[error("txpool is shutting down")]
    ShuttingDown,
    /// The head state could not be read.
    #[error("failed to read account state: {0}")]
    State(String),
}

impl TxPoolError {
    /// A short, fixed label for the `reason` of the rejection metric.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Oversized { .. } => "oversized",
            Self::Decode(_) => "decode",
            Self::BlobNotSupported => "blob_not_supported",
            Self::UnsupportedType(_) => "unsupported_type",
            Self::InvalidChainId { .. } => "invalid_chain_id",
            Self::InvalidSender => "invalid_sender",
            Self::IntrinsicGasTooLow { .. } => "intrinsic_gas_too_low",
            Self::ExceedsBlockGasLimit { .. } => "exceeds_block_gas_limit",
            Self::TipAboveFeeCap { .. } => "tip_above_fee_cap",
            Self::EmptyAuthorizationList => "empty_authorization_list",
            Self::InitcodeTooLarge { .. } => "initcode_too_large",
            Self::NonceMax => "nonce_max",
            Self::NonceTooLow { .. } => "nonce_too_low",
            Self::NonceTooHigh { .. } => "nonce_too_high",
            Self::InsufficientFunds { .. } => "insufficient_funds",
            Self::FeeCapBelowBaseFee { .. } => "fee_cap_below_base_fee",
            Self::Underpriced { .. } => "underpriced",
            Self::UnderpricedPoolFull { .. } => "underpriced_pool_full",
            Self::ReplacementUnderpriced => "replacement_underpriced",
            Self::AlreadyKnown => "already_known",
            Self::PoolFull => "pool_full",
            Self::Busy => "busy",
            Self::ShuttingDown => "shutting_down",
            Self::State(_) => "state",
        }
    }
}
