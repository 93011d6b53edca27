//! Ethereum state tests (the `GeneralStateTests` JSON of ethereum/tests), run by the
//! interpreter and by compiled code side by side.
//!
//! A state test names a pre-state, one transaction with several choices of data, gas and value,
//! and for each fork and choice the expected post-state root and hash of the logs. Each such
//! choice is a *vector*. Here every vector runs twice from the same pre-state: once
//! interpreted, once with the JIT (every contract compiled before its first frame, so that
//! compiled code, not the interpreter's fallback, is what is checked). A vector *differs* when
//! either run misses the expected root or logs hash, or when the two runs disagree on anything
//! (root, logs, gas used, status).
//!
//! Must not: decide how the EVM is configured. Forks and gas parameters come from
//! [`crate::spec`], exactly as for mainnet blocks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use alloy_primitives::{keccak256, Log, B256};
use gigas_primitives::{ChainSpec, Hardfork};
use revm::context::result::ExecutionResult;
use revm::database::{CacheState, State};
use revm_statetest_types::{SpecName, Test, TestSuite, TestUnit};

use crate::executor::{BlockEvm, PlainEvm, PreparedBlock};
use crate::jit::{CodeCache, JitCounts, JitMode};
use crate::spec::cfg_env;

/// Vectors whose expected root no client can reach from a real chain, and for which the
/// interpreter's result is the reference (compiled code must still agree with it).
///
/// `dynamicAccountOverwriteEmpty_Paris` starts from an account with storage but no code and no
/// nonce, which EIP-7610 rules out; revm's own runner skips it.
pub const KNOWN_DEVIATIONS: &[&str] = &["dynamicAccountOverwriteEmpty_Paris"];

/// Why a state-test file could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum StateTestError {
    /// The file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not state-test JSON.
    #[error("{path} is not a state test: {source}")]
    Parse {
        /// The path.
        path: PathBuf,
        /// The error.
        source: serde_json::Error,
    },
}

/// What one run of a vector produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The post-state root.
    pub state_root: B256,
    /// keccak256 of the RLP list of the logs.
    pub logs_hash: B256,
    /// Gas used, if the transaction was valid.
    pub gas_used: Option<u64>,
    /// `success`, `revert`, the halt reason, or why the transaction was rejected.
    pub status: String,
    /// Whether the transaction was rejected (not included at all).
    pub rejected: bool,
}

/// One vector: which test, fork and choice of data, gas and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorId {
    /// The file.
    pub file: PathBuf,
    /// The test's name in the file.
    pub test: String,
    /// The fork, as the file names it.
    pub fork: String,
    /// Indexes of data, gas and value.
    pub indexes: (usize, usize, usize),
}

impl std::fmt::Display for VectorId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} d{} g{} v{}",
            self.file.display(),
            self.test,
            self.fork,
            self.indexes.0,
            self.indexes.1,
            self.indexes.2
        )
    }
}

/// The result of one vector, both ways.
#[derive(Debug, Clone)]
pub struct VectorResult {
    /// Which vector.
    pub id: VectorId,
    /// Expected post-state root.
    pub expected_root: B256,
    /// Expected logs hash.
    pub expected_logs: B256,
    /// Whether the file expects the transaction to be rejected.
    pub expects_exception: bool,
    /// The interpreter's run.
    pub interpreter: RunOutcome,
    /// The JIT's run (`None` when the JIT was not asked for).
    pub jit: Option<RunOutcome>,
    /// Whether the vector is in [`KNOWN_DEVIATIONS`].
    pub known_deviation: bool,
}

impl VectorResult {
    /// Everything wrong with the vector; empty when it passes.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut check = |who: &str, run: &RunOutcome| {
            if self.expects_exception {
                if !run.rejected {
                    problems.push(format!(
                        "{who}: expected the transaction to be rejected, it ran ({})",
                        run.status
                    ));
                }
                return;
            }
            if run.rejected {
                problems.push(format!("{who}: transaction rejected: {}", run.status));
                return;
            }
            if self.known_deviation {
                return;
            }
            if run.state_root != self.expected_root {
                problems.push(format!(
                    "{who}: state root {} but expected {}",
                    run.state_root, self.expected_root
                ));
            }
            if run.logs_hash != self.expected_logs {
                problems.push(format!(
                    "{who}: logs hash {} but expected {}",
                    run.logs_hash, self.expected_logs
                ));
            }
        };
        check("interpreter", &self.interpreter);
        if let Some(jit) = &self.jit {
            check("jit", jit);
            if jit != &self.interpreter {
                problems.push(format!(
                    "jit differs from the interpreter: jit {jit:?}, interpreter {:?}",
                    self.interpreter
                ));
            }
        }
        problems
    }
}

/// The fork a state test's spec name stands for, if Gigas runs it.
pub fn hardfork_of(spec: &SpecName) -> Option<Hardfork> {
    Some(match spec {
        SpecName::Frontier => Hardfork::Frontier,
        SpecName::Homestead => Hardfork::Homestead,
        SpecName::EIP150 => Hardfork::Tangerine,
        SpecName::EIP158 => Hardfork::SpuriousDragon,
        SpecName::Byzantium => Hardfork::Byzantium,
        SpecName::ConstantinopleFix => Hardfork::Petersburg,
        SpecName::Istanbul => Hardfork::Istanbul,
        SpecName::Berlin => Hardfork::Berlin,
        SpecName::London => Hardfork::London,
        SpecName::Paris | SpecName::Merge => Hardfork::Paris,
        SpecName::Shanghai => Hardfork::Shanghai,
        SpecName::Cancun => Hardfork::Cancun,
        SpecName::Prague => Hardfork::Prague,
        // Transition forks need two blocks; Constantinople never ran on mainnet; later forks
        // are not configured in `crate::spec` yet.
        _ => return None,
    })
}

/// The results of one file.
#[derive(Debug, Default)]
pub struct FileResults {
    /// Every vector run.
    pub vectors: Vec<VectorResult>,
    /// Vectors not run, with why (a fork Gigas does not configure).
    pub skipped: Vec<(VectorId, String)>,
}

/// Runs every vector of the state-test file at `path`, interpreted and, with `jit`, compiled.
pub fn run_file(path: &Path, jit: Option<&Arc<CodeCache>>) -> Result<FileResults, StateTestError> {
    let text = std::fs::read(path).map_err(|source| StateTestError::Io {
        path: path.to_owned(),
        source,
    })?;
    let suite: TestSuite =
        serde_json::from_slice(&text).map_err(|source| StateTestError::Parse {
            path: path.to_owned(),
            source,
        })?;
    let chain = ChainSpec::mainnet();
    let mut results = FileResults::default();
    for (name, unit) in &suite.0 {
        let pre = unit.state();
        for (spec_name, tests) in &unit.post {
            for test in tests {
                let id = VectorId {
                    file: path.to_owned(),
                    test: name.clone(),
                    fork: format!("{spec_name:?}"),
                    indexes: (test.indexes.data, test.indexes.gas, test.indexes.value),
                };
                let Some(fork) = hardfork_of(spec_name) else {
                    results
                        .skipped
                        .push((id, "fork not configured in Gigas".into()));
                    continue;
                };
                let interpreter = run_vector(unit, test, &pre, &chain, fork, None);
                let jit = jit.map(|cache| run_vector(unit, test, &pre, &chain, fork, Some(cache)));
                results.vectors.push(VectorResult {
                    known_deviation: KNOWN_DEVIATIONS.contains(&name.as_str()),
                    id,
                    expected_root: test.hash,
                    expected_logs: test.logs,
                    expects_exception: test.expect_exception.is_some(),
                    interpreter,
                    jit,
                });
            }
        }
    }
    Ok(results)
}

fn rejected(pre: &CacheState, why: String) -> RunOutcome {
    RunOutcome {
        state_root: state_root(pre),
        logs_hash: logs_hash(&[]),
        gas_used: None,
        status: why,
        rejected: true,
    }
}

fn run_vector(
    unit: &TestUnit,
    test: &Test,
    pre: &CacheState,
    chain: &ChainSpec,
    fork: Hardfork,
    jit: Option<&Arc<CodeCache>>,
) -> RunOutcome {
    let tx = match test.tx_env(unit) {
        Ok(tx) => tx,
        Err(e) => return rejected(pre, e.to_string()),
    };
    let mut cfg = cfg_env(chain, fork);
    let block_env = unit.block_env(&mut cfg);
    let block = PreparedBlock {
        number: block_env.number.saturating_to(),
        hardfork: fork,
        cfg,
        block_env,
        txs: Vec::new(),
        expected: None,
    };
    let state = State::builder().with_cached_prestate(pre.clone()).build();
    let mut evm = match jit {
        Some(cache) => PlainEvm::with_jit(state, &block, Arc::clone(cache)),
        None => PlainEvm::new(state, &block),
    };
    // revm asserts on some inputs a file can hold (fee values past u128, for one); a vector
    // that trips one is reported, not allowed to end the run.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| evm.transact_commit(tx)));
    let result = match result {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => return rejected(pre, e.to_string()),
        Err(_) => return rejected(pre, "revm panicked".into()),
    };
    let db = evm.into_db();
    let status = match &result {
        ExecutionResult::Success { .. } => "success".to_string(),
        ExecutionResult::Revert { .. } => "revert".to_string(),
        ExecutionResult::Halt { reason, .. } => format!("halt: {reason:?}"),
    };
    RunOutcome {
        state_root: state_root(&db.cache),
        logs_hash: logs_hash(result.logs()),
        gas_used: Some(result.tx_gas_used()),
        status,
        rejected: false,
    }
}

/// The Merkle-Patricia root of every account in `cache`, as a client would compute it.
pub fn state_root(cache: &CacheState) -> B256 {
    let accounts = cache.trie_account().into_iter().map(|(address, account)| {
        let storage_root = alloy_trie::root::storage_root_unhashed(
            account
                .storage
                .iter()
                .filter(|(_, value)| !value.is_zero())
                .map(|(slot, value)| (B256::from(*slot), *value)),
        );
        (
            address,
            alloy_trie::TrieAccount::new(
                account.info.nonce,
                account.info.balance,
                storage_root,
                account.info.code_hash,
            ),
        )
    });
    alloy_trie::root::state_root_unhashed(accounts)
}

/// keccak256 of the RLP list of `logs`, the logs hash state tests give.
pub fn logs_hash(logs: &[Log]) -> B256 {
    let mut out = Vec::new();
    alloy_rlp::encode_list::<Log, Log>(logs, &mut out);
    keccak256(out)
}

/// The state-test files under `dir` (recursively, `.json` only), sorted.
pub fn find_files(dir: &Path) -> Result<Vec<PathBuf>, StateTestError> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| StateTestError::Io {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| StateTestError::Io {
                path: dir.clone(),
                source,
            })?;
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The results of a directory.
#[derive(Debug, Default)]
pub struct DirResults {
    /// Files run.
    pub files: usize,
    /// Every vector run.
    pub vectors: Vec<VectorResult>,
    /// Vectors not run, with why.
    pub skipped: Vec<(VectorId, String)>,
    /// Files that could not be run.
    pub errors: Vec<StateTestError>,
    /// The JIT's counters at the end, when it ran.
    pub jit: Option<JitCounts>,
}

impl DirResults {
    /// The vectors with problems, each with its problems.
    pub fn differing(&self) -> Vec<(&VectorResult, Vec<String>)> {
        self.vectors
            .iter()
            .filter_map(|v| {
                let problems = v.problems();
                (!problems.is_empty()).then_some((v, problems))
            })
            .collect()
    }
}

/// Runs every state test under `dir` on `threads` threads, interpreted and, unless `mode` is
/// [`JitMode::Off`], with the JIT in that mode. `progress` gets (files done, files).
pub fn run_dir(
    dir: &Path,
    mode: JitMode,
    threads: usize,
    progress: impl Fn(usize, usize) + Sync,
) -> Result<DirResults, StateTestError> {
    let files = find_files(dir)?;
    let cache = (mode != JitMode::Off).then(|| CodeCache::new(mode));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(files.len()));
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(file) = files.get(i) else { break };
                let result = run_file(file, cache.as_ref());
                results
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((i, result));
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, files.len());
            });
        }
    });
    let mut results = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    results.sort_by_key(|(i, _)| *i);
    let mut out = DirResults {
        files: files.len(),
        jit: cache.as_ref().map(|c| c.stats().snapshot()),
        ..Default::default()
    };
    for (_, result) in results {
        match result {
            Ok(file) => {
                out.vectors.extend(file.vectors);
                out.skipped.extend(file.skipped);
            }
            Err(e) => out.errors.push(e),
        }
    }
    Ok(out)
}
