//! The benchmark genesis: N accounts derived from a seed, built once and kept.
//!
//! Deriving an address costs an elliptic-curve multiplication (tens of microseconds), so 10M
//! accounts cost minutes of CPU: `gigas-sequencer genesis` derives them once, in parallel,
//! into an addresses file beside a chain spec that names it. A node then starts on that spec
//! by reading the file (about a second per million accounts), and a load generator derives
//! any account's key from the seed without curve work ([`crate::spec::bench_key`]).
//!
//! File layout: magic `GIGASACC`, version u32 LE (1), seed u64 LE, count u64 LE, then
//! `count` 20-byte addresses in index order, then BLAKE3 of everything before it (32 bytes).
//!
//! An ERC-20 token can join the benchmark genesis ([`BenchGenesis::token`]): WETH9's real
//! runtime code from the mainnet fixtures' pre-state, with a balance for every benchmark
//! account written into its `balanceOf` mapping. Those slots go through the chain spec's
//! `alloc`, so a spec with a token over N accounts holds N storage entries in its JSON (about
//! 140 bytes each).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use alloy_primitives::{address, keccak256, Address, Bytes, U256};
use alloy_signer_local::PrivateKeySigner;
use rayon::prelude::*;

use crate::spec::{bench_key, BenchAccounts, ChainConfig, GenesisAccount};

/// WETH9 on Ethereum mainnet: the token of the ERC-20 benchmark, at its mainnet address.
pub const WETH9: Address = address!("c02aaa39b223fe8d0a0e5c4f27ead9083c756cc2");
/// The storage slot of WETH9's `balanceOf` mapping.
pub const WETH9_BALANCE_SLOT: u64 = 3;

const MAGIC: &[u8; 8] = b"GIGASACC";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 8 + 8;

/// Why an addresses file could not be built or read.
#[derive(Debug, thiserror::Error)]
pub enum GenesisError {
    /// An I/O error on the file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not what the chain spec says it is.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and what to do.
        message: String,
    },
    /// The chain spec built is not valid.
    #[error(transparent)]
    Chain(#[from] crate::spec::ChainError),
    /// The mainnet fixtures could not give a token's code.
    #[error("mainnet fixtures in {dir}: {message}")]
    Fixtures {
        /// The fixtures directory.
        dir: String,
        /// What went wrong.
        message: String,
    },
}

/// The storage slot of `key`'s entry in a Solidity `mapping(address => ...)` declared at
/// `slot`: keccak256(pad32(key) ‖ pad32(slot)).
pub fn mapping_slot(key: &Address, slot: u64) -> U256 {
    let mut preimage = [0u8; 64];
    preimage[12..32].copy_from_slice(key.as_slice());
    preimage[56..].copy_from_slice(&slot.to_be_bytes());
    U256::from_be_bytes(keccak256(preimage).0)
}

/// An ERC-20 token deployed in the benchmark genesis with a balance for every benchmark
/// account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchToken {
    /// Where the token lives.
    pub address: Address,
    /// Its runtime code.
    pub code: Bytes,
    /// The slot of its `balanceOf` mapping.
    pub balance_slot: u64,
    /// Each benchmark account's token balance.
    pub balance: U256,
}

impl BenchToken {
    /// WETH9 with its mainnet runtime code, found in the pre-state of the fixtures in `dir`
    /// (`shared/data/mainnet`).
    pub fn weth9(fixtures: &Path, balance: U256) -> Result<Self, GenesisError> {
        Ok(Self {
            address: WETH9,
            code: weth9_code(fixtures)?,
            balance_slot: WETH9_BALANCE_SLOT,
            balance,
        })
    }
}

/// WETH9's runtime code from the first fixture below `dir` whose pre-state holds it.
pub fn weth9_code(dir: &Path) -> Result<Bytes, GenesisError> {
    let error = |message: String| GenesisError::Fixtures {
        dir: dir.display().to_string(),
        message,
    };
    let dirs = gigas_evm::fixture::fixture_dirs(dir).map_err(|e| error(e.to_string()))?;
    for fixture_dir in dirs {
        let fixture = gigas_evm::load_fixture(&fixture_dir).map_err(|e| error(e.to_string()))?;
        if let Some(code) = fixture.prestate.get(&WETH9).and_then(|a| a.code.clone()) {
            if !code.is_empty() {
                return Ok(code);
            }
        }
    }
    Err(error(format!(
        "no pre-state holds the code of WETH9 ({WETH9})"
    )))
}

/// The shipped mainnet fixtures: `../shared/data/mainnet` from the working directory (the
/// README's commands run from the checkout), else beside the checkout this binary was
/// built from.
pub fn default_fixtures_dir() -> PathBuf {
    let relative = PathBuf::from("../shared/data/mainnet");
    if relative.is_dir() {
        return relative;
    }
    // This crate sits at `crates/chain` in the checkout; `shared` is beside the checkout.
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/mainnet")
}

/// What a benchmark chain holds beyond the dev chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchGenesis {
    /// How many benchmark accounts.
    pub count: u64,
    /// The seed their keys derive from.
    pub seed: u64,
    /// Each account's balance, in wei.
    pub balance: U256,
    /// The block time written into the chain spec, in milliseconds.
    pub block_time_ms: u64,
    /// Gas limit of every block (None: the dev chain's).
    pub gas_limit: Option<u64>,
    /// An ERC-20 token with a balance for every benchmark account.
    pub token: Option<BenchToken>,
}

/// The address of benchmark account `index` of `seed`.
pub fn bench_address(seed: u64, index: u64) -> Address {
    let key = bench_key(seed, index);
    // `bench_key` only returns keys the signer accepts.
    PrivateKeySigner::from_bytes(&key)
        .map(|s| s.address())
        .unwrap_or_default()
}

/// Derives `count` addresses of `seed` on every core, calling `progress` with the number
/// done now and then.
pub fn derive_addresses(seed: u64, count: u64, progress: &(dyn Fn(u64) + Sync)) -> Vec<Address> {
    const REPORT_EVERY: u64 = 16_384;
    let done = std::sync::atomic::AtomicU64::new(0);
    (0..count)
        .into_par_iter()
        .map(|i| {
            if i % REPORT_EVERY == REPORT_EVERY - 1 {
                let n = done.fetch_add(REPORT_EVERY, std::sync::atomic::Ordering::Relaxed);
                progress(n + REPORT_EVERY);
            }
            bench_address(seed, i)
        })
        .collect()
}

/// Writes the addresses file (to a temporary name, synced, then renamed).
pub fn write_addresses(path: &Path, seed: u64, addresses: &[Address]) -> Result<(), GenesisError> {
    let io = |source| GenesisError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut bytes = Vec::with_capacity(HEADER_LEN + addresses.len() * 20 + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&seed.to_le_bytes());
    bytes.extend_from_slice(&(addresses.len() as u64).to_le_bytes());
    for a in addresses {
        bytes.extend_from_slice(a.as_slice());
    }
    let digest = blake3::hash(&bytes);
    bytes.extend_from_slice(digest.as_bytes());
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(&bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(())
}

/// The addresses file's own checksum (its last 32 bytes), after checking its header and
/// length against the chain spec: what a restart compares instead of reading every address.
pub fn addresses_checksum(bench: &BenchAccounts) -> Result<[u8; 32], GenesisError> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let path = bench.file.display().to_string();
    let io = |source| GenesisError::Io {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::File::open(&bench.file).map_err(io)?;
    let mut header = [0u8; HEADER_LEN];
    file.read_exact(&mut header).map_err(io)?;
    let expected_len = (HEADER_LEN + 32) as u64 + bench.count * 20;
    let len = file.metadata().map_err(io)?.len();
    let seed = u64::from_le_bytes(header[12..20].try_into().unwrap_or_default());
    let count = u64::from_le_bytes(header[20..28].try_into().unwrap_or_default());
    if &header[..8] != MAGIC || seed != bench.seed || count != bench.count || len != expected_len {
        return Err(GenesisError::Invalid {
            path,
            message: format!(
                "does not hold the chain spec's {} accounts of seed {}",
                bench.count, bench.seed
            ),
        });
    }
    let mut digest = [0u8; 32];
    file.seek(SeekFrom::End(-32)).map_err(io)?;
    file.read_exact(&mut digest).map_err(io)?;
    Ok(digest)
}

/// Reads and checks the addresses file a chain spec names.
pub fn read_addresses(bench: &BenchAccounts) -> Result<Vec<Address>, GenesisError> {
    let path = bench.file.display().to_string();
    let bytes = std::fs::read(&bench.file).map_err(|source| GenesisError::Io {
        path: path.clone(),
        source,
    })?;
    let invalid = |message: String| GenesisError::Invalid {
        path: path.clone(),
        message,
    };
    if bytes.len() < HEADER_LEN + 32 || &bytes[..8] != MAGIC {
        return Err(invalid(
            "not a Gigas addresses file; build one with `gigas-sequencer genesis`".into(),
        ));
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or([0; 4]));
    if version != VERSION {
        return Err(invalid(format!("version {version}, expected {VERSION}")));
    }
    let (seed, count) = (word(12), word(20));
    if seed != bench.seed || count != bench.count {
        return Err(invalid(format!(
            "holds {count} accounts of seed {seed}, the chain spec says {} of seed {}",
            bench.count, bench.seed
        )));
    }
    let body = HEADER_LEN + count as usize * 20;
    if bytes.len() != body + 32 {
        return Err(invalid(format!(
            "{} bytes, expected {} for {count} accounts (truncated?)",
            bytes.len(),
            body + 32
        )));
    }
    if blake3::hash(&bytes[..body]).as_bytes() != &bytes[body..] {
        return Err(invalid("checksum mismatch: the file is corrupt".into()));
    }
    Ok(bytes[HEADER_LEN..body]
        .chunks_exact(20)
        .map(Address::from_slice)
        .collect())
}

/// Builds a benchmark chain in `dir`: `chain.json` (the dev chain's settings and dev
/// accounts, plus `count` benchmark accounts of `seed` with `balance` each) and the
/// addresses file it names.
pub fn build_bench_chain(
    dir: &Path,
    count: u64,
    seed: u64,
    balance: U256,
    block_time_ms: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PathBuf, GenesisError> {
    build_bench_chain_with(
        dir,
        &BenchGenesis {
            count,
            seed,
            balance,
            block_time_ms,
            gas_limit: None,
            token: None,
        },
        progress,
    )
}

/// Builds the benchmark chain `genesis` describes in `dir` (see [`build_bench_chain`]); a
/// token's balances go into its storage in the spec's `alloc`.
pub fn build_bench_chain_with(
    dir: &Path,
    genesis: &BenchGenesis,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PathBuf, GenesisError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| GenesisError::Io { path, source }
    };
    let (count, seed) = (genesis.count, genesis.seed);
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let file_name = format!("accounts-{count}-{seed}.bin");
    let addresses = derive_addresses(seed, count, progress);
    write_addresses(&dir.join(&file_name), seed, &addresses)?;
    let mut config = ChainConfig::dev(genesis.block_time_ms)?;
    if let Some(gas_limit) = genesis.gas_limit {
        config.block_gas_limit = gas_limit;
    }
    if let Some(token) = &genesis.token {
        let storage = addresses
            .iter()
            .map(|holder| (mapping_slot(holder, token.balance_slot), token.balance))
            .collect();
        // WETH9's totalSupply is its ether balance: back every holder's tokens with ether.
        let supply = token.balance.saturating_mul(U256::from(count));
        config.alloc.insert(
            token.address,
            GenesisAccount {
                balance: supply,
                nonce: 1,
                code: token.code.clone(),
                storage,
            },
        );
    }
    config.validate()?;
    config.bench_accounts = Some(BenchAccounts {
        count,
        seed,
        balance: genesis.balance,
        file: file_name.into(),
    });
    let spec = dir.join("chain.json");
    let tmp = dir.join("chain.json.tmp");
    let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer_pretty(&mut out, &config)
        .map_err(std::io::Error::from)
        .map_err(io(&tmp))?;
    out.flush().map_err(io(&tmp))?;
    drop(out);
    // Written whole or not at all: a cache of benchmark chains keys on this file existing.
    std::fs::rename(&tmp, &spec).map_err(io(&spec))?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_file_round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let spec = build_bench_chain(dir.path(), 100, 7, U256::from(5u64), 250, &|_| {}).unwrap();
        let config = ChainConfig::load(&spec).unwrap();
        let bench = config.bench_accounts.clone().unwrap();
        let addresses = read_addresses(&bench).unwrap();
        assert_eq!(addresses.len(), 100);
        assert_eq!(addresses[42], bench_address(7, 42));
        // The key of account 42 signs for its address.
        let signer = PrivateKeySigner::from_bytes(&bench_key(7, 42)).unwrap();
        assert_eq!(signer.address(), addresses[42]);
        // Genesis holds the dev accounts and every benchmark account.
        let writes = config.genesis_writes().unwrap();
        assert_eq!(writes.len(), 10 + 100);

        let mut bytes = std::fs::read(&bench.file).unwrap();
        bytes[HEADER_LEN + 5] ^= 1;
        std::fs::write(&bench.file, &bytes).unwrap();
        let err = read_addresses(&bench).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
        let wrong = BenchAccounts {
            count: 99,
            ..bench.clone()
        };
        let err = read_addresses(&wrong).unwrap_err().to_string();
        assert!(err.contains("the chain spec says 99"), "{err}");
    }

    #[test]
    fn a_token_holds_a_balance_for_every_account() {
        let fixtures = default_fixtures_dir();
        assert!(
            fixtures.is_dir(),
            "shared data missing at {}",
            fixtures.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let token = BenchToken::weth9(&fixtures, U256::from(77u64)).unwrap();
        // The mainnet contract's first bytes: the Solidity 0.4 free-memory-pointer prologue.
        assert!(token.code.len() > 1_000 && token.code.starts_with(&[0x60, 0x60, 0x60, 0x40]));
        let genesis = BenchGenesis {
            count: 50,
            seed: 3,
            balance: U256::from(5u64),
            block_time_ms: 250,
            gas_limit: Some(1_000_000_000),
            token: Some(token.clone()),
        };
        let spec = build_bench_chain_with(dir.path(), &genesis, &|_| {}).unwrap();
        let config = ChainConfig::load(&spec).unwrap();
        assert_eq!(config.block_gas_limit, 1_000_000_000);
        let weth = &config.alloc[&WETH9];
        assert_eq!(weth.code, token.code);
        assert_eq!(weth.storage.len(), 50);
        assert_eq!(weth.balance, U256::from(77u64 * 50));
        let holder = bench_address(3, 17);
        assert_eq!(weth.storage[&mapping_slot(&holder, 3)], U256::from(77u64));
        // Dev accounts, benchmark accounts, WETH9 with its 50 slots and its code.
        let writes = config.genesis_writes().unwrap();
        assert_eq!(writes.len(), 10 + 50 + 1 + 50 + 1);

        // The genesis lattice, summed from the spec in parallel, is the sum of the stored
        // entries the genesis writes: the same state, counted the way a store is.
        let mut from_writes = gigas_primitives::LatticeHash::zero();
        let mut elements = 0;
        for (key, value) in &writes {
            let value = value.as_deref().unwrap();
            if let Some(e) = gigas_primitives::LatticeHash::of_entry(key, value).unwrap() {
                from_writes.add(&e);
                elements += 1;
            }
        }
        assert_eq!(
            elements,
            10 + 50 + 1 + 50,
            "every account and slot, no code"
        );
        assert_eq!(config.genesis_lattice().unwrap(), from_writes);
        assert_ne!(from_writes, gigas_primitives::LatticeHash::zero());
    }
}
