//! Real signed transactions and an in-memory head state for the pool's tests.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::RwLock;

use alloy_consensus::{
    SignableTransaction, TxEip1559, TxEip2930, TxEip4844, TxEip7702, TxEnvelope, TxLegacy,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_eips::eip7702::Authorization;
use alloy_network::TxSignerSync;
use alloy_primitives::{Address, Bytes, TxKind, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use gigas_txpool::{decode_and_recover, HeadAccounts, PoolConfig, PooledTx};

/// The chain id the tests' pool runs.
pub const CHAIN_ID: u64 = 1337;
/// The block gas limit of the tests' chain.
pub const BLOCK_GAS: u64 = 30_000_000;
/// One ether, in wei.
pub const ETH: u128 = 1_000_000_000_000_000_000;

pub fn config() -> PoolConfig {
    let mut config = PoolConfig::new(CHAIN_ID, BLOCK_GAS);
    config.recovery_threads = 2;
    config
}

/// A deterministic key per index (index + 1 as the secret).
pub fn signer(index: u64) -> PrivateKeySigner {
    let mut secret = [0u8; 32];
    secret[24..].copy_from_slice(&(index + 1).to_be_bytes());
    PrivateKeySigner::from_slice(&secret).expect("a small nonzero secret is a valid key")
}

/// An EIP-1559 transfer of `value` wei to a fixed address.
pub fn eip1559(
    signer: &PrivateKeySigner,
    nonce: u64,
    max_fee: u128,
    tip: u128,
    gas_limit: u64,
    value: u128,
) -> Bytes {
    let mut tx = TxEip1559 {
        chain_id: CHAIN_ID,
        nonce,
        gas_limit,
        max_fee_per_gas: max_fee,
        max_priority_fee_per_gas: tip,
        to: TxKind::Call(Address::repeat_byte(0x42)),
        value: U256::from(value),
        ..Default::default()
    };
    sign(signer, &mut tx)
}

/// A transfer paying `max_fee` and `tip` per gas with 21,000 gas.
pub fn transfer(signer: &PrivateKeySigner, nonce: u64, max_fee: u128, tip: u128) -> Bytes {
    eip1559(signer, nonce, max_fee, tip, 21_000, 1)
}

pub fn sign<T>(signer: &PrivateKeySigner, tx: &mut T) -> Bytes
where
    T: SignableTransaction<alloy_primitives::Signature> + Clone,
    TxEnvelope: From<alloy_consensus::Signed<T>>,
{
    let signature = signer.sign_transaction_sync(tx).expect("signing");
    let envelope = TxEnvelope::from(tx.clone().into_signed(signature));
    Bytes::from(envelope.encoded_2718())
}

pub fn legacy(
    signer: &PrivateKeySigner,
    nonce: u64,
    chain_id: Option<u64>,
    gas_price: u128,
) -> Bytes {
    let mut tx = TxLegacy {
        chain_id,
        nonce,
        gas_price,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x42)),
        value: U256::from(1),
        input: Bytes::new(),
    };
    sign(signer, &mut tx)
}

pub fn eip2930(signer: &PrivateKeySigner, nonce: u64, gas_price: u128) -> Bytes {
    let mut tx = TxEip2930 {
        chain_id: CHAIN_ID,
        nonce,
        gas_price,
        gas_limit: 30_000,
        to: TxKind::Call(Address::repeat_byte(0x42)),
        value: U256::from(1),
        ..Default::default()
    };
    sign(signer, &mut tx)
}

pub fn eip7702(signer: &PrivateKeySigner, nonce: u64, with_authorization: bool) -> Bytes {
    let authorization_list = if with_authorization {
        let authorization = Authorization {
            chain_id: U256::from(CHAIN_ID),
            address: Address::repeat_byte(0x77),
            nonce: nonce + 1,
        };
        let signature = signer
            .sign_hash_sync(&authorization.signature_hash())
            .expect("signing");
        vec![authorization.into_signed(signature)]
    } else {
        Vec::new()
    };
    let mut tx = TxEip7702 {
        chain_id: CHAIN_ID,
        nonce,
        gas_limit: 100_000,
        max_fee_per_gas: 10,
        max_priority_fee_per_gas: 1,
        to: Address::repeat_byte(0x42),
        authorization_list,
        ..Default::default()
    };
    sign(signer, &mut tx)
}

pub fn eip4844(signer: &PrivateKeySigner, nonce: u64) -> Bytes {
    let mut tx = TxEip4844 {
        chain_id: CHAIN_ID,
        nonce,
        gas_limit: 21_000,
        max_fee_per_gas: 10,
        max_priority_fee_per_gas: 1,
        to: Address::repeat_byte(0x42),
        max_fee_per_blob_gas: 1,
        blob_versioned_hashes: vec![alloy_primitives::B256::repeat_byte(1)],
        ..Default::default()
    };
    let signature = signer.sign_transaction_sync(&mut tx).expect("signing");
    let envelope = TxEnvelope::from(tx.into_signed(signature));
    Bytes::from(envelope.encoded_2718())
}

/// Decodes and recovers with the tests' configuration; the transaction must be valid.
pub fn pooled(raw: &Bytes) -> PooledTx {
    decode_and_recover(raw, &config()).expect("a valid transaction")
}

/// The head state: accounts not listed have nonce 0 and no balance.
#[derive(Debug, Default)]
pub struct MemState {
    accounts: RwLock<HashMap<Address, (u64, U256)>>,
}

impl MemState {
    pub fn set(&self, address: Address, nonce: u64, balance: U256) {
        self.accounts
            .write()
            .expect("lock")
            .insert(address, (nonce, balance));
    }

    /// Gives each address `balance` at nonce 0.
    pub fn funded(addresses: impl IntoIterator<Item = Address>, balance: U256) -> Self {
        let state = Self::default();
        for address in addresses {
            state.set(address, 0, balance);
        }
        state
    }
}

impl HeadAccounts for MemState {
    fn account(&self, address: Address) -> Result<(u64, U256), String> {
        Ok(self
            .accounts
            .read()
            .map_err(|_| "poisoned".to_string())?
            .get(&address)
            .copied()
            .unwrap_or((0, U256::ZERO)))
    }
}
