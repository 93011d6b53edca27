//! Block and transaction environments from alloy types.

use alloy_consensus::{BlockHeader, Typed2718};
use alloy_rpc_types_eth::{Header, Transaction};
use gigas_primitives::Hardfork;
use revm::context::{BlockEnv, TxEnv};
use revm::context_interface::block::BlobExcessGasAndPrice;
use revm::context_interface::either::Either;
use revm::primitives::{Address, U256};

use crate::spec::blob_base_fee_update_fraction;

/// The block environment of an RPC header executed under `fork`.
pub fn block_env(header: &Header, fork: Hardfork) -> BlockEnv {
    block_env_of(&header.inner, fork)
}

/// The block environment of a consensus header executed under `fork`.
pub fn block_env_of(header: &alloy_consensus::Header, fork: Hardfork) -> BlockEnv {
    // After the Merge the mixHash field carries PREVRANDAO and DIFFICULTY reads it.
    let prevrandao = (fork >= Hardfork::Paris).then_some(header.mix_hash);
    let blob_excess_gas_and_price = if fork >= Hardfork::Cancun {
        header
            .excess_blob_gas()
            .map(|excess| BlobExcessGasAndPrice::new(excess, blob_base_fee_update_fraction(fork)))
    } else {
        None
    };
    BlockEnv {
        number: U256::from(header.number),
        beneficiary: header.beneficiary,
        timestamp: U256::from(header.timestamp),
        gas_limit: header.gas_limit,
        basefee: header.base_fee_per_gas.unwrap_or_default(),
        difficulty: header.difficulty,
        prevrandao,
        blob_excess_gas_and_price,
        ..Default::default()
    }
}

/// The transaction environment of an RPC transaction, with its sender as recovered by the
/// node that served it (the `from` field).
pub fn tx_env(tx: &Transaction) -> TxEnv {
    tx_env_from(tx.inner.inner(), tx.inner.signer())
}

/// The transaction environment of a signed transaction whose sender is already recovered
/// (recovering it is the caller's job, done once per transaction).
pub fn tx_env_from<T>(envelope: &T, caller: Address) -> TxEnv
where
    T: alloy_consensus::Transaction + Typed2718,
{
    TxEnv {
        tx_type: envelope.ty(),
        caller,
        gas_limit: envelope.gas_limit(),
        // For legacy and EIP-2930 transactions this is the gas price; for EIP-1559 and later
        // it is the fee cap, with the tip in `gas_priority_fee`.
        gas_price: envelope.max_fee_per_gas(),
        gas_priority_fee: envelope.max_priority_fee_per_gas(),
        kind: envelope.kind(),
        value: envelope.value(),
        data: envelope.input().clone(),
        nonce: envelope.nonce(),
        chain_id: envelope.chain_id(),
        access_list: envelope.access_list().cloned().unwrap_or_default(),
        blob_hashes: envelope
            .blob_versioned_hashes()
            .map(<[_]>::to_vec)
            .unwrap_or_default(),
        max_fee_per_blob_gas: envelope.max_fee_per_blob_gas().unwrap_or_default(),
        authorization_list: envelope
            .authorization_list()
            .map(|list| list.iter().cloned().map(Either::Left).collect())
            .unwrap_or_default(),
    }
}
