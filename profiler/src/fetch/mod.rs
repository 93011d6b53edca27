//! `gigas-profiler fetch`: block fixtures from any node that serves `eth_getBlockByNumber` and
//! `debug_traceBlockByNumber` with geth's `prestateTracer` (an archive node, or a Gigas
//! sequencer within its state history).
//!
//! For each block it writes, under `OUT/<number>/`, the files
//! [`gigas_evm::fixture::load_fixture`] reads (see `shared/data/README.md`):
//! - `block.json.zst`: the node's answer to `eth_getBlockByNumber(N, true)`, unchanged;
//! - `prestate.json.zst`: the per-transaction prestates merged into the state the block reads
//!   (see [`merge_prestates`]);
//! - `block_hashes.json`: the hashes BLOCKHASH asks for. To know which, the block is replayed
//!   through `gigas-evm` on a database that records every BLOCKHASH number and answers from
//!   the hashes fetched so far; missing ones are fetched (`eth_getBlockByNumber(n, false)`)
//!   and the block replayed again until no new number comes up (a contract may branch on a
//!   hash). Only those headers are fetched. If the block cannot be replayed, the hashes of all
//!   of its (up to 256) predecessors are written instead and the block is named in the summary.
//!
//! and `OUT/chain.json`: the chain's id and fork schedule ([`ChainSpec`] as JSON), which the
//! profiler's replay uses instead of mainnet's when present ([`load_chain`]). Chain id 1 gets
//! mainnet's schedule; another chain gets the one fork `--fork` names, or else the fork its
//! first fetched header shows (requestsHash: Prague, blob fields: Cancun, withdrawals:
//! Shanghai, base fee with zero difficulty: Paris, base fee: London). That is right for an L2
//! or a dev chain that runs one fork from genesis; a range crossing a fork needs a chain.json
//! written by hand.
//!
//! Transport failures are retried with exponential backoff; an error the node answers is not
//! retried and is reported with the method and the node's own message. Owns the RPC client
//! and the fixture writer; must not change how blocks are executed (that is `gigas-evm`'s).

mod blockhash;
mod client;
mod prestate;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use alloy_primitives::{B256, U256};
use gigas_evm::{load_fixture, FixtureError};
use gigas_primitives::{ChainSpec, Hardfork};
use serde::Serialize;
use serde_json::Value;

use blockhash::blockhash_set;
use client::Client;
pub use prestate::{merge_prestates, MergedAccount};

/// The file in a fixture directory that holds the chain's id and fork schedule.
pub const CHAIN_FILE: &str = "chain.json";

/// How many blocks back BLOCKHASH reaches.
const BLOCKHASH_WINDOW: u64 = 256;

/// What to fetch and where to write it.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// The node's HTTP JSON-RPC URL.
    pub rpc: String,
    /// First block.
    pub from: u64,
    /// Last block (inclusive).
    pub to: u64,
    /// Directory the fixtures go to (created if missing).
    pub out: PathBuf,
    /// The fork the chain runs from genesis, for a chain other than mainnet; inferred from
    /// the first header when `None`.
    pub fork: Option<Hardfork>,
    /// Attempts after the first on a transport error, with the wait doubling from 250 ms.
    pub retries: u32,
}

/// What a fetch wrote.
#[derive(Debug, Clone)]
pub struct FetchSummary {
    /// The chain spec written to `chain.json`.
    pub chain: ChainSpec,
    /// Blocks written.
    pub blocks: u64,
    /// Transactions in them.
    pub transactions: usize,
    /// Accounts over all prestates.
    pub accounts: usize,
    /// Storage slots over all prestates.
    pub slots: usize,
    /// Block hashes written over all `block_hashes.json` files.
    pub block_hashes: usize,
    /// Headers fetched only for their hash.
    pub headers_fetched: usize,
    /// Blocks that could not be replayed to find their BLOCKHASH numbers, with the reason;
    /// they got the hashes of all their predecessors in the window.
    pub unreplayable: Vec<(u64, String)>,
}

/// Why a fetch failed. Every variant names the node or the file.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The arguments are inconsistent.
    #[error("{0}")]
    Usage(String),
    /// The URL does not parse.
    #[error("--rpc {url} is not a URL: {reason}")]
    BadUrl {
        /// The URL given.
        url: String,
        /// The parser's message.
        reason: String,
    },
    /// The node answered a call with an error.
    #[error("the node at {url} refused {method}: {message}")]
    Refused {
        /// The node.
        url: String,
        /// The method.
        method: String,
        /// Its error, with code.
        message: String,
    },
    /// The node answered the prestate trace with an error.
    #[error("the node at {url} does not serve debug_traceBlockByNumber with prestateTracer (block {number}): {message}")]
    NoPrestateTracer {
        /// The node.
        url: String,
        /// The block asked for.
        number: u64,
        /// Its error, with code.
        message: String,
    },
    /// The call never got an answer.
    #[error("no answer from {url} to {method} after {attempts} attempts: {message}")]
    Transport {
        /// The node.
        url: String,
        /// The method.
        method: String,
        /// Attempts made.
        attempts: u32,
        /// The last transport error.
        message: String,
    },
    /// The node does not have the block.
    #[error("the node at {url} has no block {number} (its head is {head})")]
    NoBlock {
        /// The node.
        url: String,
        /// The block.
        number: u64,
        /// The node's latest block number.
        head: u64,
    },
    /// An answer does not have the expected shape.
    #[error("the node at {url} answered {method} for block {number} with something unexpected: {reason}")]
    Malformed {
        /// The node.
        url: String,
        /// The method.
        method: String,
        /// The block.
        number: u64,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A written fixture does not load back.
    #[error("the fixture written for block {number} does not load: {source}")]
    Fixture {
        /// The block.
        number: u64,
        /// The loader's error.
        source: FixtureError,
    },
    /// `chain.json` is unreadable.
    #[error("{path}: not a chain spec: {reason}")]
    ChainFile {
        /// The file.
        path: PathBuf,
        /// What serde said.
        reason: String,
    },
    /// The output directory already holds blocks of another chain.
    #[error("{path} describes {existing}, but the node serves {fetched}: use another --out")]
    ChainMismatch {
        /// The file.
        path: PathBuf,
        /// What it holds.
        existing: String,
        /// What this fetch found.
        fetched: String,
    },
    /// The fork of a chain other than mainnet cannot be told from its headers.
    #[error("cannot tell which fork chain {chain_id} runs from the header of block {number}: pass --fork")]
    UnknownFork {
        /// The chain.
        chain_id: u64,
        /// The header looked at.
        number: u64,
    },
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A JSON number, or a hex (0x) or decimal string; absent or null is zero.
fn quantity(value: Option<&Value>) -> Result<U256, String> {
    match value {
        None | Some(Value::Null) => Ok(U256::ZERO),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(U256::from)
            .ok_or_else(|| format!("{n} is not a non-negative integer")),
        Some(Value::String(s)) => parse_u256(s),
        Some(other) => Err(format!("{} instead of a quantity", kind(other))),
    }
}

fn parse_u256(s: &str) -> Result<U256, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some("") => Ok(U256::ZERO),
        Some(hex) => U256::from_str_radix(hex, 16),
        None => U256::from_str_radix(s, 10),
    };
    parsed.map_err(|e| format!("{s:?}: {e}"))
}

/// The fork a header shows by the fields it carries, for a chain that runs one fork.
pub fn infer_fork(header: &Value) -> Option<Hardfork> {
    let has = |field: &str| header.get(field).is_some_and(|v| !v.is_null());
    if has("requestsHash") {
        Some(Hardfork::Prague)
    } else if has("excessBlobGas") || has("parentBeaconBlockRoot") {
        Some(Hardfork::Cancun)
    } else if has("withdrawalsRoot") {
        Some(Hardfork::Shanghai)
    } else if has("baseFeePerGas") {
        let difficulty = header
            .get("difficulty")
            .and_then(|d| quantity(Some(d)).ok());
        if difficulty == Some(U256::ZERO) {
            Some(Hardfork::Paris)
        } else {
            Some(Hardfork::London)
        }
    } else {
        None
    }
}

/// The chain spec of a fixture directory: its `chain.json` if there is one.
pub fn load_chain(dir: &Path) -> Result<Option<ChainSpec>, FetchError> {
    let path = dir.join(CHAIN_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(FetchError::Io { path, source }),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| FetchError::ChainFile {
            path,
            reason: e.to_string(),
        })
}

fn describe(chain: &ChainSpec) -> String {
    if *chain == ChainSpec::mainnet() {
        "Ethereum mainnet".into()
    } else {
        let forks: Vec<String> = chain
            .activations
            .iter()
            .map(|(fork, at)| match at {
                gigas_primitives::Activation::Block(b) => format!("{fork} at block {b}"),
                gigas_primitives::Activation::Timestamp(t) => format!("{fork} at time {t}"),
            })
            .collect();
        format!("chain {} ({})", chain.chain_id, forks.join(", "))
    }
}

fn field_hash(value: &Value, field: &str) -> Option<B256> {
    value.get(field)?.as_str()?.parse().ok()
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FetchError> {
    let io = |source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)
}

fn write_zstd_json(path: &Path, value: &impl Serialize) -> Result<(), FetchError> {
    let io = |source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    };
    let json = serde_json::to_vec(value).map_err(|e| io(std::io::Error::other(e)))?;
    let compressed = zstd::encode_all(json.as_slice(), 10).map_err(io)?;
    write_atomic(path, &compressed)
}

/// Fetches `config.from..=config.to` into `config.out`, calling `progress(done, total)` after
/// each block. Blocks already in `out` are overwritten.
pub async fn fetch(
    config: &FetchConfig,
    mut progress: impl FnMut(u64, u64),
) -> Result<FetchSummary, FetchError> {
    if config.from > config.to {
        return Err(FetchError::Usage(format!(
            "--from {} is after --to {}",
            config.from, config.to
        )));
    }
    let client = Client::new(&config.rpc, config.retries).await?;
    let chain_id = client.number("eth_chainId").await?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Io { path, source }
    };
    std::fs::create_dir_all(&config.out).map_err(io(&config.out))?;
    let total = config.to - config.from + 1;
    let mut summary = FetchSummary {
        chain: ChainSpec::mainnet(),
        blocks: 0,
        transactions: 0,
        accounts: 0,
        slots: 0,
        block_hashes: 0,
        headers_fetched: 0,
        unreplayable: Vec::new(),
    };
    let mut chain: Option<ChainSpec> = None;
    // Hashes learnt so far: every fetched block's own and its parent's, and headers fetched
    // for BLOCKHASH.
    let mut hashes: BTreeMap<u64, B256> = BTreeMap::new();
    for number in config.from..=config.to {
        let (block, transactions) = {
            let block = client.block(number, true).await?;
            let count = match block.get("transactions") {
                Some(Value::Array(txs)) => {
                    if txs.iter().any(|t| !t.is_object()) {
                        return Err(malformed(
                            &client,
                            number,
                            "transactions are hashes, not objects",
                        ));
                    }
                    txs.len()
                }
                _ => return Err(malformed(&client, number, "no `transactions` list")),
            };
            (block, count)
        };
        if block_number(&block) != Some(number) {
            return Err(malformed(
                &client,
                number,
                "its `number` is another block's",
            ));
        }
        let spec = match &chain {
            Some(spec) => spec.clone(),
            None => {
                let spec = chain_spec(chain_id, config.fork, &block, number)?;
                let path = config.out.join(CHAIN_FILE);
                match load_chain(&config.out)? {
                    Some(existing) if existing != spec => {
                        return Err(FetchError::ChainMismatch {
                            path,
                            existing: describe(&existing),
                            fetched: describe(&spec),
                        })
                    }
                    Some(_) => {}
                    None => {
                        let text =
                            serde_json::to_vec_pretty(&spec).map_err(|e| FetchError::Io {
                                path: path.clone(),
                                source: std::io::Error::other(e),
                            })?;
                        write_atomic(&path, &text)?;
                    }
                }
                chain = Some(spec.clone());
                spec
            }
        };
        if let Some(hash) = field_hash(&block, "hash") {
            hashes.insert(number, hash);
        }
        if let (Some(parent), Some(n)) = (field_hash(&block, "parentHash"), number.checked_sub(1)) {
            hashes.insert(n, parent);
        }

        // A block without transactions reads nothing; not asking spares nodes that refuse
        // to trace the genesis block.
        let prestate = if transactions == 0 {
            BTreeMap::new()
        } else {
            let traces = client.prestate_trace(number).await?;
            check_trace_order(&block, &traces)
                .map_err(|reason| malformed_trace(&client, number, reason))?;
            merge_prestates(&traces).map_err(|reason| malformed_trace(&client, number, reason))?
        };

        let dir = config.out.join(number.to_string());
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        write_zstd_json(&dir.join(gigas_evm::fixture::BLOCK_FILE), &block)?;
        let prestate_json: BTreeMap<String, &MergedAccount> = prestate
            .iter()
            .map(|(address, account)| (format!("{address:#x}"), account))
            .collect();
        write_zstd_json(&dir.join(gigas_evm::fixture::PRESTATE_FILE), &prestate_json)?;
        let hashes_path = dir.join(gigas_evm::fixture::BLOCK_HASHES_FILE);
        if hashes_path.exists() {
            std::fs::remove_file(&hashes_path).map_err(io(&hashes_path))?;
        }
        let fixture =
            load_fixture(&dir).map_err(|source| FetchError::Fixture { number, source })?;

        let needed = if transactions == 0 {
            BTreeSet::new()
        } else {
            match blockhash_set(&client, &fixture, &spec, &mut hashes, &mut summary).await? {
                Ok(numbers) => numbers,
                Err(reason) => {
                    summary.unreplayable.push((number, reason));
                    (number.saturating_sub(BLOCKHASH_WINDOW)..number).collect()
                }
            }
        };
        if !needed.is_empty() {
            let mut written = BTreeMap::new();
            for n in needed {
                let hash = match hashes.get(&n) {
                    Some(hash) => *hash,
                    None => {
                        let hash = client.block_hash(n).await?;
                        summary.headers_fetched += 1;
                        hashes.insert(n, hash);
                        hash
                    }
                };
                written.insert(n.to_string(), hash);
            }
            summary.block_hashes += written.len();
            let text = serde_json::to_vec_pretty(&written).map_err(|e| FetchError::Io {
                path: hashes_path.clone(),
                source: std::io::Error::other(e),
            })?;
            write_atomic(&hashes_path, &text)?;
        }

        summary.blocks += 1;
        summary.transactions += transactions;
        summary.accounts += prestate.len();
        summary.slots += prestate.values().map(|a| a.storage.len()).sum::<usize>();
        progress(number - config.from + 1, total);
    }
    if let Some(spec) = chain {
        summary.chain = spec;
    }
    Ok(summary)
}

/// [`fetch`] on a runtime of its own, for callers that are not async.
pub fn fetch_blocking(
    config: &FetchConfig,
    progress: impl FnMut(u64, u64),
) -> Result<FetchSummary, FetchError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| FetchError::Io {
            path: PathBuf::from("(tokio runtime)"),
            source,
        })?;
    runtime.block_on(fetch(config, progress))
}

fn chain_spec(
    chain_id: u64,
    fork: Option<Hardfork>,
    block: &Value,
    number: u64,
) -> Result<ChainSpec, FetchError> {
    match fork {
        Some(fork) => Ok(ChainSpec::single_fork(chain_id, fork)),
        None if chain_id == 1 => Ok(ChainSpec::mainnet()),
        None => infer_fork(block)
            .map(|fork| ChainSpec::single_fork(chain_id, fork))
            .ok_or(FetchError::UnknownFork { chain_id, number }),
    }
}

fn block_number(block: &Value) -> Option<u64> {
    quantity(block.get("number")).ok()?.try_into().ok()
}

/// The trace lists one result per transaction, in the block's order.
fn check_trace_order(block: &Value, traces: &Value) -> Result<(), String> {
    let txs = block
        .get("transactions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let results = traces
        .as_array()
        .ok_or_else(|| format!("expected a list, got {}", kind(traces)))?;
    if results.len() != txs.len() {
        return Err(format!(
            "{} results for {} transactions",
            results.len(),
            txs.len()
        ));
    }
    for (index, (tx, result)) in txs.iter().zip(results).enumerate() {
        // Older nodes leave txHash out; when given it must match.
        if let (Some(traced), Some(hash)) = (field_hash(result, "txHash"), field_hash(tx, "hash")) {
            if traced != hash {
                return Err(format!(
                    "result {index} is for transaction {traced}, the block's is {hash}"
                ));
            }
        }
    }
    Ok(())
}

fn malformed(client: &Client, number: u64, reason: &str) -> FetchError {
    FetchError::Malformed {
        url: client.url.clone(),
        method: "eth_getBlockByNumber".into(),
        number,
        reason: reason.into(),
    }
}

fn malformed_trace(client: &Client, number: u64, reason: String) -> FetchError {
    FetchError::Malformed {
        url: client.url.clone(),
        method: "debug_traceBlockByNumber".into(),
        number,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::Address;
    use serde_json::json;

    use super::*;

    fn slot(n: u8) -> String {
        format!("{:#066x}", n)
    }

    #[test]
    fn the_earliest_transaction_decides_each_field_and_slot() {
        let a = "0x00000000000000000000000000000000000000aa";
        let c = "0x00000000000000000000000000000000000000cc";
        let traces = json!([
            {"txHash": "0x01", "result": {
                a: {"balance": "0x64", "nonce": 7, "storage": {slot(1): slot(10)}},
                // Created by this transaction: no code, no nonce yet.
                c: {"balance": "0x0"},
            }},
            {"txHash": "0x02", "result": {
                a: {"balance": "0x32", "nonce": 8, "storage": {slot(1): slot(11), slot(2): slot(20)}},
                c: {"balance": "0x5", "nonce": 1, "code": "0x6000", "codeHash": "0x00",
                    "storage": {slot(3): slot(0)}},
            }},
        ]);
        let merged = merge_prestates(&traces).unwrap();
        let a = &merged[&a.parse::<Address>().unwrap()];
        assert_eq!(a.balance, U256::from(100));
        assert_eq!(a.nonce, 7);
        assert_eq!(a.storage.len(), 2);
        assert_eq!(
            a.storage[&B256::with_last_byte(1)],
            B256::with_last_byte(10)
        );
        assert_eq!(
            a.storage[&B256::with_last_byte(2)],
            B256::with_last_byte(20)
        );
        let c = &merged[&c.parse::<Address>().unwrap()];
        assert_eq!((c.balance, c.nonce, c.code.clone()), (U256::ZERO, 0, None));
        assert_eq!(c.storage[&B256::with_last_byte(3)], B256::ZERO);
    }

    #[test]
    fn short_quantities_and_decimal_strings_are_read() {
        let traces = json!([{"result": {
            "0x00000000000000000000000000000000000000aa":
                {"balance": "1000", "nonce": "0x2", "code": "0x", "storage": {"0x1": "0x2"}}
        }}]);
        let merged = merge_prestates(&traces).unwrap();
        let a = merged.values().next().unwrap();
        assert_eq!(
            (a.balance, a.nonce, a.code.clone()),
            (U256::from(1000), 2, None)
        );
        assert_eq!(a.storage[&B256::with_last_byte(1)], B256::with_last_byte(2));
    }

    #[test]
    fn a_failed_transaction_trace_is_an_error() {
        let err = merge_prestates(&json!([{"txHash": "0x01", "error": "execution timeout"}]))
            .unwrap_err();
        assert!(err.contains("execution timeout"), "{err}");
        let err = merge_prestates(&json!({"0xaa": {}})).unwrap_err();
        assert!(err.contains("list"), "{err}");
        let err = merge_prestates(&json!([{"result": {"0xzz": {}}}])).unwrap_err();
        assert!(err.contains("0xzz"), "{err}");
    }

    #[test]
    fn forks_from_header_fields() {
        assert_eq!(
            infer_fork(&json!({"requestsHash": "0x00", "excessBlobGas": "0x0"})),
            Some(Hardfork::Prague)
        );
        assert_eq!(
            infer_fork(&json!({"excessBlobGas": "0x0"})),
            Some(Hardfork::Cancun)
        );
        assert_eq!(
            infer_fork(&json!({"withdrawalsRoot": "0x00"})),
            Some(Hardfork::Shanghai)
        );
        assert_eq!(
            infer_fork(&json!({"baseFeePerGas": "0x7", "difficulty": "0x0"})),
            Some(Hardfork::Paris)
        );
        assert_eq!(
            infer_fork(&json!({"baseFeePerGas": "0x7", "difficulty": "0x1"})),
            Some(Hardfork::London)
        );
        assert_eq!(infer_fork(&json!({"difficulty": "0x1"})), None);
    }

    #[test]
    fn trace_results_must_follow_the_block() {
        let block = json!({"transactions": [{"hash": format!("{:#066x}", 1)}]});
        assert!(check_trace_order(
            &block,
            &json!([{"txHash": format!("{:#066x}", 1), "result": {}}])
        )
        .is_ok());
        assert!(check_trace_order(&block, &json!([{"result": {}}])).is_ok());
        let err = check_trace_order(
            &block,
            &json!([{"txHash": format!("{:#066x}", 2), "result": {}}]),
        )
        .unwrap_err();
        assert!(err.contains("result 0"), "{err}");
        let err = check_trace_order(&block, &json!([])).unwrap_err();
        assert!(err.contains("0 results for 1"), "{err}");
    }

    #[test]
    fn chain_json_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_chain(dir.path()).unwrap().is_none());
        let spec = ChainSpec::single_fork(1337, Hardfork::Prague);
        std::fs::write(
            dir.path().join(CHAIN_FILE),
            serde_json::to_vec(&spec).unwrap(),
        )
        .unwrap();
        assert_eq!(load_chain(dir.path()).unwrap(), Some(spec));
        std::fs::write(dir.path().join(CHAIN_FILE), b"{").unwrap();
        assert!(matches!(
            load_chain(dir.path()),
            Err(FetchError::ChainFile { .. })
        ));
    }
}
