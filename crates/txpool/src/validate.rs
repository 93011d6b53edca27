//! Stateless checks: size, EIP-2718 decoding, chain id, gas, and sender recovery.

use std::sync::Arc;

use alloy_consensus::transaction::{Recovered, SignerRecoverable};
use alloy_consensus::{Transaction, TxEnvelope};
use alloy_eips::eip2718::{
    Decodable2718, Eip2718Error, EIP1559_TX_TYPE_ID, EIP2930_TX_TYPE_ID, EIP4844_TX_TYPE_ID,
    EIP7702_TX_TYPE_ID,
};
use alloy_primitives::{Address, Bytes, B256, U256};
use gigas_evm::revm::context_interface::result::InvalidTransaction;
use gigas_evm::revm::handler::validation::validate_initial_tx_gas;
use gigas_evm::revm::primitives::eip3860::MAX_INITCODE_SIZE;
use gigas_evm::revm::primitives::hardfork::SpecId;

use crate::{PoolConfig, TxPoolError};

/// A decoded transaction whose sender is recovered, with what the pool orders it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PooledTx {
    /// The transaction hash.
    pub hash: B256,
    /// The recovered sender.
    pub sender: Address,
    /// The transaction with its sender.
    pub tx: Recovered<TxEnvelope>,
    /// The EIP-2718 encoding it arrived in (what the journal keeps).
    pub encoded: Bytes,
    /// The nonce.
    pub nonce: u64,
    /// The gas limit.
    pub gas_limit: u64,
    /// The fee cap (the gas price for legacy and EIP-2930 transactions).
    pub max_fee_per_gas: u128,
    /// The tip cap (the gas price for legacy and EIP-2930 transactions).
    pub max_priority_fee_per_gas: u128,
    /// The most the transaction can take from its sender: `gas_limit * max_fee + value`.
    pub cost: U256,
}

impl PooledTx {
    /// What a block with this base fee pays its producer per gas; `None` when the fee cap is
    /// below the base fee, so no such block may include it.
    pub fn effective_tip(&self, base_fee: u64) -> Option<u128> {
        let remaining = self.max_fee_per_gas.checked_sub(u128::from(base_fee))?;
        Some(remaining.min(self.max_priority_fee_per_gas))
    }

    /// Bytes of the encoding.
    pub fn size(&self) -> usize {
        self.encoded.len()
    }
}

/// Runs every check that needs no state, decodes `raw` (EIP-2718: legacy with or without
/// EIP-155, EIP-2930, EIP-1559, EIP-7702) and recovers its sender through libsecp256k1.
///
/// This is the expensive step (the signature recovery); call it off the RPC threads, through a
/// [`crate::Recoverer`].
pub fn decode_and_recover(raw: &[u8], config: &PoolConfig) -> Result<PooledTx, TxPoolError> {
    decode_and_recover_bytes(Bytes::copy_from_slice(raw), config)
}

/// [`decode_and_recover`] of bytes the caller already owns (no copy).
pub fn decode_and_recover_bytes(raw: Bytes, config: &PoolConfig) -> Result<PooledTx, TxPoolError> {
    if raw.len() > config.max_tx_bytes {
        return Err(TxPoolError::Oversized {
            size: raw.len(),
            max: config.max_tx_bytes,
        });
    }
    let Some(&first) = raw.first() else {
        return Err(TxPoolError::Decode("empty input".to_string()));
    };
    // Refused before decoding so that a blob transaction, even a malformed one, gets the error
    // that says why it can never be accepted here.
    if first == EIP4844_TX_TYPE_ID {
        return Err(TxPoolError::BlobNotSupported);
    }
    // Bytes up to 0x7f are a type (EIP-2718); from 0xc0 on, a legacy RLP list.
    if first <= 0x7f
        && ![EIP2930_TX_TYPE_ID, EIP1559_TX_TYPE_ID, EIP7702_TX_TYPE_ID].contains(&first)
    {
        return Err(TxPoolError::UnsupportedType(first));
    }
    // The type byte was checked above, so every failure here is a malformed encoding.
    let envelope = TxEnvelope::decode_2718_exact(&raw).map_err(|err| match err {
        Eip2718Error::RlpError(err) => TxPoolError::Decode(format!("rlp: {err}")),
        other => TxPoolError::Decode(format!("rlp: {other}")),
    })?;
    check_stateless(&envelope, config)?;
    let sender = envelope
        .recover_signer()
        .map_err(|_| TxPoolError::InvalidSender)?;
    let hash = *envelope.tx_hash();
    let gas_limit = envelope.gas_limit();
    let max_fee_per_gas = envelope.max_fee_per_gas();
    let max_priority_fee_per_gas = envelope.priority_fee_or_price();
    let cost =
        (U256::from(gas_limit) * U256::from(max_fee_per_gas)).saturating_add(envelope.value());
    Ok(PooledTx {
        hash,
        sender,
        nonce: envelope.nonce(),
        gas_limit,
        max_fee_per_gas,
        max_priority_fee_per_gas,
        cost,
        tx: Recovered::new_unchecked(envelope, sender),
        encoded: raw,
    })
}

/// [`decode_and_recover`] of many transactions on `threads` threads, results in input order
/// (for replaying the journal at start, before the node serves).
pub fn decode_and_recover_all(
    raws: &[Bytes],
    config: &PoolConfig,
    threads: usize,
) -> Vec<Result<PooledTx, TxPoolError>> {
    let threads = threads.max(1);
    let chunk = raws.len().div_ceil(threads).max(1);
    let config = Arc::new(config.clone());
    std::thread::scope(|scope| {
        let handles: Vec<_> = raws
            .chunks(chunk)
            .map(|part| {
                let config = Arc::clone(&config);
                scope.spawn(move || {
                    part.iter()
                        .map(|raw| decode_and_recover_bytes(raw.clone(), &config))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| {
                // A panic in the decoder is a bug; report the chunk's transactions as
                // undecodable rather than take the node down at start.
                handle.join().unwrap_or_else(|_| {
                    vec![Err(TxPoolError::Decode("decoder panicked".to_string())); chunk]
                })
            })
            .take(raws.len())
            .collect()
    })
}

fn check_stateless(envelope: &TxEnvelope, config: &PoolConfig) -> Result<(), TxPoolError> {
    if let Some(got) = envelope.chain_id() {
        if got != config.chain_id {
            return Err(TxPoolError::InvalidChainId {
                expected: config.chain_id,
                got,
            });
        }
    }
    if envelope.nonce() == u64::MAX {
        return Err(TxPoolError::NonceMax);
    }
    if let Some(tip) = envelope.max_priority_fee_per_gas() {
        let fee_cap = envelope.max_fee_per_gas();
        if tip > fee_cap {
            return Err(TxPoolError::TipAboveFeeCap { tip, fee_cap });
        }
    }
    if envelope.gas_limit() > config.block_gas_limit {
        return Err(TxPoolError::ExceedsBlockGasLimit {
            gas_limit: envelope.gas_limit(),
            block_gas_limit: config.block_gas_limit,
        });
    }
    if let Some(list) = envelope.authorization_list() {
        if list.is_empty() {
            return Err(TxPoolError::EmptyAuthorizationList);
        }
    }
    if envelope.kind().is_create()
        && config.spec.is_enabled_in(SpecId::SHANGHAI)
        && envelope.input().len() > MAX_INITCODE_SIZE
    {
        return Err(TxPoolError::InitcodeTooLarge {
            size: envelope.input().len(),
            max: MAX_INITCODE_SIZE,
        });
    }
    intrinsic_gas(envelope, config.spec)
}

/// revm's own intrinsic gas rules (the same function block execution runs), with the EIP-7623
/// calldata floor from Prague on.
fn intrinsic_gas(envelope: &TxEnvelope, spec: SpecId) -> Result<(), TxPoolError> {
    // The caller does not enter intrinsic gas; recovery (the costly part) comes after.
    let tx_env = gigas_evm::env::tx_env_from(envelope, Address::ZERO);
    match validate_initial_tx_gas(&tx_env, spec, false, false, u64::MAX, None) {
        Ok(_) => Ok(()),
        Err(InvalidTransaction::CallGasCostMoreThanGasLimit {
            gas_limit,
            initial_gas,
        }) => Err(TxPoolError::IntrinsicGasTooLow {
            have: gas_limit,
            want: initial_gas,
        }),
        Err(InvalidTransaction::GasFloorMoreThanGasLimit {
            gas_floor,
            gas_limit,
        }) => Err(TxPoolError::IntrinsicGasTooLow {
            have: gas_limit,
            want: gas_floor,
        }),
        // No other error comes from this check today; name it rather than guess a number.
        Err(other) => Err(TxPoolError::Decode(format!("intrinsic gas check: {other}"))),
    }
}
