//! The chain a sequencer runs: its spec file, the dev chain, and the genesis state.
//!
//! A chain spec file is JSON (see [`ChainConfig`]); `--dev` builds one in memory from the
//! well-known test mnemonic, as anvil and reth `--dev` do. The genesis block is a pure
//! function of the config, so that a full node given the same file derives the same genesis
//! hash and state checksum.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use alloy_eips::eip1559::BaseFeeParams;
use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use alloy_signer_local::{coins_bip39::English, MnemonicBuilder, PrivateKeySigner};
use gigas_primitives::state_keys::{genesis_writes, Write};
use gigas_primitives::{AccountState, ChainSpec, Hardfork, LatticeHash};
use serde::{Deserialize, Serialize};

/// The mnemonic of every Ethereum dev node (anvil, hardhat, reth `--dev`).
pub const DEV_MNEMONIC: &str = "test test test test test test test test test test test junk";
/// How many dev accounts are prefunded and printed.
pub const DEV_ACCOUNTS: u32 = 10;
/// The dev chain's id (reth `--dev` uses the same).
pub const DEV_CHAIN_ID: u64 = 1337;
/// Derivation index of the dev sequencer's key: after the prefunded accounts, so that fees
/// do not blur the dev accounts' balances.
const DEV_SEQUENCER_INDEX: u32 = 10;

/// Why a chain config could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The file could not be read.
    #[error("reading chain spec {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A chain spec could not be written.
    #[error("writing chain spec {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a valid chain spec.
    #[error("chain spec {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What serde said, with line and column.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("chain spec: {0}")]
    Invalid(String),
    /// The sequencer key could not be read or parsed.
    #[error("sequencer key: {0}")]
    Key(String),
}

/// EIP-1559 base fee parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseFeeConfig {
    /// The genesis block's base fee, in wei.
    pub initial: u64,
    /// At most 1/denominator change per block (8 on Ethereum).
    pub max_change_denominator: u64,
    /// The gas target is the gas limit / elasticity (2 on Ethereum).
    pub elasticity_multiplier: u64,
    /// The base fee never falls under this (0: EIP-1559's rule alone).
    #[serde(default)]
    pub minimum: u64,
}

impl Default for BaseFeeConfig {
    fn default() -> Self {
        Self {
            initial: 1_000_000_000,
            max_change_denominator: 8,
            elasticity_multiplier: 2,
            minimum: 0,
        }
    }
}

impl BaseFeeConfig {
    /// The base fee of the block after one with `gas_used` of `gas_limit` at `base_fee`.
    pub fn next(&self, gas_used: u64, gas_limit: u64, base_fee: u64) -> u64 {
        let params = BaseFeeParams::new(
            self.max_change_denominator as u128,
            self.elasticity_multiplier as u128,
        );
        alloy_eips::eip1559::calc_next_block_base_fee(gas_used, gas_limit, base_fee, params)
            .max(self.minimum)
    }
}

/// One account of the genesis state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenesisAccount {
    /// Balance in wei.
    #[serde(default)]
    pub balance: U256,
    /// Nonce.
    #[serde(default)]
    pub nonce: u64,
    /// Runtime code.
    #[serde(default, skip_serializing_if = "no_code")]
    pub code: Bytes,
    /// Storage slots.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub storage: BTreeMap<U256, U256>,
}

/// Benchmark accounts: `count` keys derived from `seed` (see [`bench_key`]), each with
/// `balance`, their addresses precomputed once into `file` by `gigas-sequencer genesis`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchAccounts {
    /// How many accounts.
    pub count: u64,
    /// The seed the keys derive from.
    pub seed: u64,
    /// Each account's balance in wei.
    pub balance: U256,
    /// The addresses file (relative paths are relative to the chain spec file).
    pub file: PathBuf,
}

/// A chain spec file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainConfig {
    /// EIP-155 chain id.
    pub chain_id: u64,
    /// Time between blocks, in milliseconds.
    #[serde(default = "default_block_time_ms")]
    pub block_time_ms: u64,
    /// Gas limit of every block.
    #[serde(default = "default_gas_limit")]
    pub block_gas_limit: u64,
    /// The fork the chain runs from genesis (Prague by default; Cancun or later).
    #[serde(default = "default_fork")]
    pub fork: Hardfork,
    /// EIP-1559 parameters.
    #[serde(default)]
    pub base_fee: BaseFeeConfig,
    /// The genesis block's timestamp (seconds).
    #[serde(default)]
    pub genesis_timestamp: u64,
    /// The sequencer's secp256k1 private key, hex (or use `sequencer_key_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequencer_key: Option<B256>,
    /// A file holding the key as hex (relative to the chain spec file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequencer_key_file: Option<PathBuf>,
    /// The sequencer's address, for followers that are given no key (checked against the key
    /// when both are present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequencer_address: Option<Address>,
    /// Prefunded accounts and contracts.
    #[serde(default)]
    pub alloc: BTreeMap<Address, GenesisAccount>,
    /// Benchmark accounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench_accounts: Option<BenchAccounts>,
}

impl GenesisAccount {
    /// Its nonce, balance and code hash.
    pub fn state(&self) -> AccountState {
        AccountState {
            nonce: self.nonce,
            balance: self.balance,
            code_hash: if self.code.is_empty() {
                alloy_primitives::KECCAK256_EMPTY
            } else {
                keccak256(&self.code)
            },
        }
    }
}

/// The benchmark accounts' addresses, from their file, and the state each starts with.
fn bench_accounts(bench: &BenchAccounts) -> Result<(Vec<Address>, AccountState), ChainError> {
    let addresses =
        crate::bench::read_addresses(bench).map_err(|e| ChainError::Invalid(e.to_string()))?;
    let state = AccountState {
        nonce: 0,
        balance: bench.balance,
        code_hash: alloy_primitives::KECCAK256_EMPTY,
    };
    Ok((addresses, state))
}

fn no_code(code: &Bytes) -> bool {
    code.is_empty()
}

fn default_block_time_ms() -> u64 {
    250
}
fn default_gas_limit() -> u64 {
    60_000_000
}
fn default_fork() -> Hardfork {
    Hardfork::Prague
}

/// A dev account: address and key, for printing at start.
#[derive(Debug, Clone)]
pub struct DevAccount {
    /// The address.
    pub address: Address,
    /// The private key.
    pub key: B256,
}

/// The dev accounts derived from [`DEV_MNEMONIC`] at m/44'/60'/0'/0/i.
pub fn dev_signer(index: u32) -> Result<PrivateKeySigner, ChainError> {
    MnemonicBuilder::<English>::default()
        .phrase(DEV_MNEMONIC)
        .index(index)
        .map_err(|e| ChainError::Key(e.to_string()))?
        .build()
        .map_err(|e| ChainError::Key(e.to_string()))
}

/// The ten prefunded dev accounts.
pub fn dev_accounts() -> Result<Vec<DevAccount>, ChainError> {
    (0..DEV_ACCOUNTS)
        .map(|i| {
            let signer = dev_signer(i)?;
            Ok(DevAccount {
                address: signer.address(),
                key: B256::from_slice(&signer.credential().to_bytes()),
            })
        })
        .collect()
}

/// The private key of benchmark account `index` of `seed`: keccak(seed ‖ index), which is a
/// valid secp256k1 scalar with overwhelming probability (the derivation retries with a
/// counter in the astronomically unlikely other case). Cheap: only the address needs curve
/// work.
pub fn bench_key(seed: u64, index: u64) -> B256 {
    let mut counter = 0u64;
    loop {
        let mut preimage = [0u8; 24];
        preimage[..8].copy_from_slice(&seed.to_be_bytes());
        preimage[8..16].copy_from_slice(&index.to_be_bytes());
        preimage[16..].copy_from_slice(&counter.to_be_bytes());
        let key = keccak256(preimage);
        if PrivateKeySigner::from_bytes(&key).is_ok() {
            return key;
        }
        counter += 1;
    }
}

impl ChainConfig {
    /// The dev chain: ten accounts with 10,000 ETH each, chain id 1337, Prague.
    pub fn dev(block_time_ms: u64) -> Result<Self, ChainError> {
        let ten_thousand_eth = U256::from(10_000u64) * U256::from(10u64).pow(U256::from(18));
        let alloc = dev_accounts()?
            .into_iter()
            .map(|a| {
                (
                    a.address,
                    GenesisAccount {
                        balance: ten_thousand_eth,
                        ..Default::default()
                    },
                )
            })
            .collect();
        let key = dev_signer(DEV_SEQUENCER_INDEX)?;
        Ok(Self {
            chain_id: DEV_CHAIN_ID,
            block_time_ms,
            block_gas_limit: default_gas_limit(),
            fork: Hardfork::Prague,
            base_fee: BaseFeeConfig::default(),
            genesis_timestamp: 0,
            sequencer_key: Some(B256::from_slice(&key.credential().to_bytes())),
            sequencer_key_file: None,
            sequencer_address: Some(key.address()),
            alloc,
            bench_accounts: None,
        })
    }

    /// Reads a chain spec file; relative paths inside it are resolved against its directory.
    pub fn load(path: &Path) -> Result<Self, ChainError> {
        let text = std::fs::read_to_string(path).map_err(|source| ChainError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config: Self = serde_json::from_str(&text).map_err(|e| ChainError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(file) = config.sequencer_key_file.as_mut() {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        }
        if let Some(bench) = config.bench_accounts.as_mut() {
            if bench.file.is_relative() {
                bench.file = base.join(&bench.file);
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// The chain spec a follower gets: everything but the sequencer's signing key, which is
    /// replaced by its address (`sequencer_address`). A full node refuses a spec that carries
    /// a key; `gigas-sequencer export-chain` writes this one.
    pub fn public(&self) -> Result<Self, ChainError> {
        let address = self.sequencer()?;
        Ok(Self {
            sequencer_key: None,
            sequencer_key_file: None,
            sequencer_address: Some(address),
            ..self.clone()
        })
    }

    /// Whether the spec carries the sequencer's signing key (inline or as a file).
    pub fn has_signing_key(&self) -> bool {
        self.sequencer_key.is_some() || self.sequencer_key_file.is_some()
    }

    /// The sequencer's address: the key's when the spec has one (checked against
    /// `sequencer_address`), else `sequencer_address`.
    pub fn sequencer(&self) -> Result<Address, ChainError> {
        if self.has_signing_key() {
            return self.signer().map(|s| s.address());
        }
        self.sequencer_address.ok_or_else(|| {
            ChainError::Key(
                "the chain spec names neither the sequencer's key nor its sequencer_address".into(),
            )
        })
    }

    /// Checks ranges and consistency.
    pub fn validate(&self) -> Result<(), ChainError> {
        if self.block_time_ms == 0 || self.block_time_ms > 3_600_000 {
            return Err(ChainError::Invalid(format!(
                "block_time_ms {} must be between 1 and 3,600,000",
                self.block_time_ms
            )));
        }
        if self.block_gas_limit < 21_000 {
            return Err(ChainError::Invalid(format!(
                "block_gas_limit {} is below one transfer (21000)",
                self.block_gas_limit
            )));
        }
        if self.fork < Hardfork::Cancun {
            return Err(ChainError::Invalid(format!(
                "fork {} is not supported: a Gigas chain runs Cancun or later",
                self.fork
            )));
        }
        if self.base_fee.max_change_denominator == 0 || self.base_fee.elasticity_multiplier == 0 {
            return Err(ChainError::Invalid(
                "base_fee.max_change_denominator and elasticity_multiplier must be at least 1"
                    .into(),
            ));
        }
        if self.sequencer_key.is_some() && self.sequencer_key_file.is_some() {
            return Err(ChainError::Invalid(
                "give sequencer_key or sequencer_key_file, not both".into(),
            ));
        }
        self.validate_alloc()
    }

    /// EIP-7610: creating a contract at an address with storage fails. revm 43 does not check
    /// it (only nonce and code, EIP-684), and only an account with no code and nonce 0 can be
    /// created over; nonces never fall and code leaves only with the storage (a self-destruct)
    /// or with a nonce of at least 1 (an EIP-7702 reset). So the one way to an account with
    /// storage that a creation could land on is the genesis: refused here, the rule holds on
    /// every Gigas chain, and the state accounting that relies on it (a created account's
    /// storage starts empty; an account deleted as empty had none: `gigas-evm`'s ChangeSet
    /// fold, the lattice hash every snapshot is checked against) is exact.
    fn validate_alloc(&self) -> Result<(), ChainError> {
        for (address, account) in &self.alloc {
            let stores = account.storage.values().any(|v| !v.is_zero());
            if stores && account.code.is_empty() && account.nonce == 0 {
                return Err(ChainError::Invalid(format!(
                    "alloc {address} has storage but no code and nonce 0: a contract could be \
                     created over its storage (EIP-7610); give it its code, or a nonce of at \
                     least 1, or no storage"
                )));
            }
        }
        Ok(())
    }

    /// The fork schedule revm is configured from.
    pub fn spec(&self) -> ChainSpec {
        ChainSpec::single_fork(self.chain_id, self.fork)
    }

    /// The sequencer's signing key, from the config or its key file.
    pub fn signer(&self) -> Result<PrivateKeySigner, ChainError> {
        let key = match (&self.sequencer_key, &self.sequencer_key_file) {
            (Some(key), _) => *key,
            (None, Some(file)) => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| ChainError::Key(format!("{}: {e}", file.display())))?;
                text.trim().parse::<B256>().map_err(|e| {
                    ChainError::Key(format!(
                        "{}: not a 32-byte hex private key: {e}",
                        file.display()
                    ))
                })?
            }
            (None, None) => {
                return Err(ChainError::Key(
                    "the chain spec names no sequencer_key or sequencer_key_file".into(),
                ))
            }
        };
        let signer =
            PrivateKeySigner::from_bytes(&key).map_err(|e| ChainError::Key(e.to_string()))?;
        if let Some(expected) = self.sequencer_address {
            if expected != signer.address() {
                return Err(ChainError::Key(format!(
                    "the key's address {} differs from sequencer_address {expected}",
                    signer.address()
                )));
            }
        }
        Ok(signer)
    }

    /// A digest of everything the genesis block derives from: this spec (without the path of
    /// its addresses file), the addresses file's own checksum and the sequencer's address.
    /// A node keeps it beside its stores, so that a restart checks it is on the same chain
    /// without rebuilding a genesis of millions of accounts.
    pub fn genesis_fingerprint(&self) -> Result<B256, ChainError> {
        let mut spec = self.clone();
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"gigas genesis fingerprint v1");
        if let Some(bench) = &mut spec.bench_accounts {
            let digest = crate::bench::addresses_checksum(bench)
                .map_err(|e| ChainError::Invalid(e.to_string()))?;
            hasher.update(&digest);
            bench.file = PathBuf::new();
        }
        // The key file's path is not the chain: the key is, through its address.
        spec.sequencer_key = None;
        spec.sequencer_key_file = None;
        hasher.update(self.sequencer()?.as_slice());
        let json = serde_json::to_vec(&spec).map_err(|e| ChainError::Invalid(e.to_string()))?;
        hasher.update(&json);
        Ok(B256::from(*hasher.finalize().as_bytes()))
    }

    /// The genesis state's writes in the state key layout (accounts, slots, codes), the
    /// benchmark accounts included.
    pub fn genesis_writes(&self) -> Result<Vec<Write>, ChainError> {
        let accounts = self.alloc.iter().map(|(address, account)| {
            (
                *address,
                account.state(),
                account.storage.iter().map(|(k, v)| (*k, *v)).collect(),
            )
        });
        let codes: Vec<(B256, &[u8])> = self
            .alloc
            .values()
            .filter(|a| !a.code.is_empty())
            .map(|a| (keccak256(&a.code), a.code.as_ref()))
            .collect();
        let mut writes = genesis_writes(accounts, codes);
        if let Some(bench) = &self.bench_accounts {
            let (addresses, state) = bench_accounts(bench)?;
            writes.reserve(addresses.len());
            for address in addresses {
                if self.alloc.contains_key(&address) {
                    return Err(ChainError::Invalid(format!(
                        "benchmark account {address} is also in alloc"
                    )));
                }
                writes.extend(genesis_writes([(address, state, Vec::new())], []));
            }
        }
        Ok(writes)
    }
}

impl ChainConfig {
    /// The lattice hash of the genesis state (`gigas_primitives::lattice`): every account of
    /// `alloc` with its nonzero slots, and every benchmark account, summed on rayon's pool
    /// (10M accounts take seconds). The key index is empty at genesis: the first diff to
    /// write a genesis key names it in full.
    pub fn genesis_lattice(&self) -> Result<LatticeHash, ChainError> {
        use rayon::prelude::*;
        let mut sum = LatticeHash::zero();
        for (address, account) in &self.alloc {
            sum.add(&LatticeHash::account(address, &account.state()));
            for (slot, value) in &account.storage {
                sum.add_slot(address, slot, value);
            }
        }
        if let Some(bench) = &self.bench_accounts {
            let (addresses, state) = bench_accounts(bench)?;
            let bench_sum = addresses
                .par_chunks(4096)
                .map(|chunk| {
                    let mut part = LatticeHash::zero();
                    for address in chunk {
                        part.add(&LatticeHash::account(address, &state));
                    }
                    part
                })
                .reduce(LatticeHash::zero, |mut a, b| {
                    a.add(&b);
                    a
                });
            sum.add(&bench_sum);
        }
        Ok(sum)
    }
}

/// Writes `chain`'s public spec ([`ChainConfig::public`]) as JSON to `out` (when given) and
/// returns the text. A benchmark chain's addresses file is named relative to `out`'s
/// directory when it lies there, else by its absolute path, so that the spec opens from where
/// it is written.
pub fn write_public_spec(chain: &ChainConfig, out: Option<&Path>) -> Result<String, ChainError> {
    let mut public = chain.public()?;
    if let Some(bench) = public.bench_accounts.as_mut() {
        let absolute = std::fs::canonicalize(&bench.file).unwrap_or_else(|_| bench.file.clone());
        let out_dir = out
            .and_then(Path::parent)
            .map(|d| {
                if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                }
            })
            .and_then(|d| std::fs::canonicalize(d).ok());
        bench.file = match (&out_dir, absolute.parent(), absolute.file_name()) {
            (Some(dir), Some(parent), Some(name)) if dir == parent => PathBuf::from(name),
            _ => absolute,
        };
    }
    let text = serde_json::to_string_pretty(&public)
        .map_err(|e| ChainError::Invalid(format!("encoding the public spec: {e}")))?;
    if let Some(path) = out {
        std::fs::write(path, format!("{text}\n")).map_err(|source| ChainError::Write {
            path: path.to_path_buf(),
            source,
        })?;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 66, item 12: genesis storage on an account a contract could be created over
    /// (no code, nonce 0) breaks EIP-7610's assumption, which revm 43 does not enforce.
    #[test]
    fn genesis_storage_without_code_or_nonce_is_refused() {
        let with = |nonce: u64, code: &[u8], value: u64| {
            let mut chain = ChainConfig::dev(250).expect("the dev chain");
            chain.alloc.insert(
                Address::repeat_byte(0x77),
                GenesisAccount {
                    balance: U256::from(1),
                    nonce,
                    code: Bytes::copy_from_slice(code),
                    storage: BTreeMap::from([(U256::from(1), U256::from(value))]),
                },
            );
            chain.validate()
        };
        match with(0, &[], 5) {
            Err(ChainError::Invalid(reason)) => {
                assert!(reason.contains("EIP-7610"), "{reason}")
            }
            other => panic!("storage on an account with no code and nonce 0: {other:?}"),
        }
        with(1, &[], 5).expect("a nonce of 1: no creation can land there");
        with(0, &[0x60, 0x00], 5).expect("code: no creation can land there");
        with(0, &[], 0).expect("a zero slot is no storage");
    }
}
