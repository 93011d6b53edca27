//! Mainnet block fixtures: the RPC block, the pre-state it reads, and the block hashes it asks
//! for.
//!
//! A fixture is a directory named after the block number holding
//! - `block.json.zst`: zstd JSON of `eth_getBlockByNumber(N, true)`;
//! - `prestate.json.zst`: zstd JSON of `debug_traceBlockByNumber(N, {"tracer":"prestateTracer"})`
//!   merged over the block's transactions: `{ "0xaddr": { "balance", "nonce", "code", "storage" } }`;
//! - `block_hashes.json` (optional): `{ "number": "0xhash" }` for BLOCKHASH.
//!
//! Anyone can add a block fetched from an archive node in this shape.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_rpc_types_eth::{Block, Transaction};
use revm::database::{CacheDB, EmptyDB};
use revm::state::{AccountInfo, Bytecode};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// The file holding the RPC block.
pub const BLOCK_FILE: &str = "block.json.zst";
/// The file holding the pre-state.
pub const PRESTATE_FILE: &str = "prestate.json.zst";
/// The optional file holding the hashes BLOCKHASH reads.
pub const BLOCK_HASHES_FILE: &str = "block_hashes.json";

/// What can go wrong while loading a fixture. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// A file the fixture needs is not there.
    #[error("{file}: missing (a block fixture needs {BLOCK_FILE} and {PRESTATE_FILE})")]
    Missing {
        /// The file.
        file: PathBuf,
    },
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid zstd.
    #[error("{file}: not a valid zstd stream: {source}")]
    Zstd {
        /// The file.
        file: PathBuf,
        /// The decoder's error.
        source: std::io::Error,
    },
    /// The JSON does not have the expected shape; serde's message names the field.
    #[error("{file}: {source}")]
    Json {
        /// The file.
        file: PathBuf,
        /// The parser's error, naming the field and position.
        source: serde_json::Error,
    },
    /// A value is well-formed JSON but wrong for the field.
    #[error("{file}: field `{field}`: {reason}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The directory of fixtures could not be listed or holds none.
    #[error("{dir}: {reason}")]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// One account of a prestateTracer pre-state.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrestateAccount {
    /// Balance in wei.
    #[serde(default)]
    pub balance: U256,
    /// Nonce.
    #[serde(default)]
    pub nonce: u64,
    /// Runtime code, absent when empty.
    #[serde(default)]
    pub code: Option<Bytes>,
    /// Storage slots the block reads, absent when none.
    #[serde(default)]
    pub storage: Option<BTreeMap<U256, U256>>,
}

impl PrestateAccount {
    /// The account as Gigas's state keeps it: nonce, balance and the hash of its code (the
    /// empty code's hash when it has none).
    pub fn state(&self) -> gigas_primitives::AccountState {
        gigas_primitives::AccountState {
            nonce: self.nonce,
            balance: self.balance,
            code_hash: match &self.code {
                Some(code) if !code.is_empty() => alloy_primitives::keccak256(code),
                _ => alloy_primitives::KECCAK256_EMPTY,
            },
        }
    }

    /// The storage slots the block reads, with their values before it.
    pub fn slots(&self) -> impl Iterator<Item = (U256, U256)> + '_ {
        self.storage
            .iter()
            .flatten()
            .map(|(slot, value)| (*slot, *value))
    }
}

/// A block with everything needed to replay it.
#[derive(Debug, Clone)]
pub struct BlockFixture {
    /// The fixture's directory.
    pub dir: PathBuf,
    /// The block as the RPC returned it, with full transactions.
    pub block: Block<Transaction>,
    /// The accounts and slots the block reads, before the block.
    pub prestate: BTreeMap<Address, PrestateAccount>,
    /// Hashes of earlier blocks, for BLOCKHASH.
    pub block_hashes: BTreeMap<u64, B256>,
}

impl BlockFixture {
    /// The block number.
    pub fn number(&self) -> u64 {
        self.block.header.inner.number
    }

    /// An in-memory revm database holding the pre-state and block hashes.
    pub fn database(&self) -> CacheDB<EmptyDB> {
        let mut db = CacheDB::new(EmptyDB::default());
        for (address, account) in &self.prestate {
            let code = account
                .code
                .as_ref()
                .filter(|c| !c.is_empty())
                .map(|c| Bytecode::new_raw(c.clone()));
            let info = AccountInfo {
                balance: account.balance,
                nonce: account.nonce,
                code_hash: code
                    .as_ref()
                    .map(|c| c.hash_slow())
                    .unwrap_or(revm::primitives::KECCAK_EMPTY),
                code,
                ..Default::default()
            };
            db.insert_account_info(*address, info);
            if let Some(storage) = &account.storage {
                for (slot, value) in storage {
                    // The address was inserted just above, so this cannot fail.
                    let _ = db.insert_account_storage(*address, *slot, *value);
                }
            }
        }
        for (number, hash) in &self.block_hashes {
            db.cache.block_hashes.insert(U256::from(*number), *hash);
        }
        db
    }
}

fn read_zstd_json<T: DeserializeOwned>(file: &Path) -> Result<T, FixtureError> {
    let raw = read_file(file)?;
    let mut decoder =
        zstd::stream::read::Decoder::new(raw.as_slice()).map_err(|source| FixtureError::Zstd {
            file: file.to_path_buf(),
            source,
        })?;
    let mut json = Vec::new();
    decoder
        .read_to_end(&mut json)
        .map_err(|source| FixtureError::Zstd {
            file: file.to_path_buf(),
            source,
        })?;
    serde_json::from_slice(&json).map_err(|source| FixtureError::Json {
        file: file.to_path_buf(),
        source,
    })
}

fn read_file(file: &Path) -> Result<Vec<u8>, FixtureError> {
    fs::read(file).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            FixtureError::Missing {
                file: file.to_path_buf(),
            }
        } else {
            FixtureError::Io {
                file: file.to_path_buf(),
                source,
            }
        }
    })
}

fn read_block_hashes(file: &Path) -> Result<BTreeMap<u64, B256>, FixtureError> {
    if !file.exists() {
        return Ok(BTreeMap::new());
    }
    let raw = read_file(file)?;
    let by_string: BTreeMap<String, B256> =
        serde_json::from_slice(&raw).map_err(|source| FixtureError::Json {
            file: file.to_path_buf(),
            source,
        })?;
    by_string
        .into_iter()
        .map(|(number, hash)| {
            let parsed = parse_block_number(&number).ok_or_else(|| FixtureError::Invalid {
                file: file.to_path_buf(),
                field: number.clone(),
                reason: "key is not a block number (decimal or 0x-hex)".into(),
            })?;
            Ok((parsed, hash))
        })
        .collect()
}

fn parse_block_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Loads the fixture in `dir`.
pub fn load_fixture(dir: impl AsRef<Path>) -> Result<BlockFixture, FixtureError> {
    let dir = dir.as_ref();
    let block_file = dir.join(BLOCK_FILE);
    let block: Block<Transaction> = read_zstd_json(&block_file)?;
    if block.transactions.as_transactions().is_none() && !block.transactions.is_empty() {
        return Err(FixtureError::Invalid {
            file: block_file,
            field: "transactions".into(),
            reason: "holds hashes only; fetch the block with full transactions \
                     (eth_getBlockByNumber(N, true))"
                .into(),
        });
    }
    if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
        if let Some(number) = parse_block_number(name) {
            if number != block.header.inner.number {
                return Err(FixtureError::Invalid {
                    file: block_file,
                    field: "number".into(),
                    reason: format!(
                        "block {} is stored in the directory of block {number}",
                        block.header.inner.number
                    ),
                });
            }
        }
    }
    let prestate = read_zstd_json(&dir.join(PRESTATE_FILE))?;
    let block_hashes = read_block_hashes(&dir.join(BLOCK_HASHES_FILE))?;
    Ok(BlockFixture {
        dir: dir.to_path_buf(),
        block,
        prestate,
        block_hashes,
    })
}

/// The fixture directories below `dir` (those holding a `block.json.zst`), in block order.
pub fn fixture_dirs(dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, FixtureError> {
    let dir = dir.as_ref();
    let entries = fs::read_dir(dir).map_err(|e| FixtureError::Directory {
        dir: dir.to_path_buf(),
        reason: format!("cannot list: {e}"),
    })?;
    let mut dirs: Vec<(u64, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FixtureError::Directory {
            dir: dir.to_path_buf(),
            reason: format!("cannot list: {e}"),
        })?;
        let path = entry.path();
        if path.join(BLOCK_FILE).exists() {
            let order = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(parse_block_number)
                .unwrap_or(u64::MAX);
            dirs.push((order, path));
        }
    }
    if dirs.is_empty() {
        return Err(FixtureError::Directory {
            dir: dir.to_path_buf(),
            reason: format!("holds no block fixtures (sub-directories with a {BLOCK_FILE})"),
        });
    }
    dirs.sort();
    Ok(dirs.into_iter().map(|(_, p)| p).collect())
}

/// Loads every fixture below `dir`, in block order.
pub fn load_fixtures_dir(dir: impl AsRef<Path>) -> Result<Vec<BlockFixture>, FixtureError> {
    fixture_dirs(dir)?.iter().map(load_fixture).collect()
}
