//! `gigas-bench blockstm`: Block-STM against sequential execution, same process, alternating.
//!
//! Workloads (shared/BENCHMARKING.md): the mainnet blocks of any directory in the shipped
//! format, independent transfers, Zipf-Mandelbrot transfers over many accounts, ERC-20
//! transfers through WETH9's real mainnet bytecode taken from the fixtures' pre-state, and a
//! fully dependent chain. Every parallel run is checked against the sequential one (receipts);
//! a difference is an error.

use std::path::{Path, PathBuf};
use std::time::Instant;

use alloy_primitives::{address, keccak256, Address, Bytes, B256, U256};
use eyre::{eyre, Context, Result};
use gigas_blockstm::ParallelExecutor;
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::context::{BlockEnv, TxEnv};
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::revm::primitives::TxKind;
use gigas_evm::revm::state::{AccountInfo, Bytecode};
use gigas_evm::{execute_block, load_fixtures_dir, PlainEvm, PreparedBlock, PreparedTx};
use gigas_primitives::machine::Machine;
use gigas_primitives::ChainSpec;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::median;
use crate::zipf::{SplitMix64, ZipfMandelbrot, DEVNET_S, DEVNET_V};

/// WETH9 on mainnet.
const WETH: Address = address!("c02aaa39b223fe8d0a0e5c4f27ead9083c756cc2");

/// What to run.
#[derive(Debug, Clone, clap::Args)]
pub struct BlockstmArgs {
    /// Directory of mainnet block fixtures. Defaults to ../shared/data/mainnet.
    #[arg(long, value_name = "DIR")]
    pub blocks: Option<PathBuf>,
    /// Workloads to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "mainnet,independent,zipf,erc20,dependent"
    )]
    pub workloads: Vec<Workload>,
    /// Thread counts for the parallel runs, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Transactions per synthetic block.
    #[arg(long, default_value_t = 10_000)]
    pub txs: usize,
    /// Accounts the Zipf transfers draw from.
    #[arg(long, default_value_t = 1_000_000)]
    pub accounts: usize,
    /// Repetitions; medians are reported.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "reports/blockstm")]
    pub out: PathBuf,
    /// Seed of the synthetic workloads.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// A workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// The shipped mainnet blocks.
    Mainnet,
    /// Transfers between disjoint pairs of accounts.
    Independent,
    /// Transfers with Zipf-Mandelbrot senders and receivers.
    Zipf,
    /// WETH9 transfers.
    Erc20,
    /// Every transaction increments the same counter.
    Dependent,
}

/// Results of one workload.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    /// The workload.
    pub workload: Workload,
    /// Blocks in it.
    pub blocks: usize,
    /// Transactions.
    pub txs: usize,
    /// Gas.
    pub gas: u64,
    /// Median sequential seconds for all blocks.
    pub sequential_s: f64,
    /// Per thread count: median parallel seconds, speed-up, executions and validations per tx.
    pub parallel: Vec<ParallelResult>,
    /// The slowest block relative to sequential (mainnet: speed-up of the worst block at the
    /// largest thread count).
    pub worst_block_speedup: Option<(u64, f64)>,
    /// For workloads of several blocks: the threshold on transactions per block that minimises
    /// the total time when smaller blocks run sequentially (the measured fallback policy), and
    /// the speed-up over sequential that policy gives at the largest thread count.
    pub fallback: Option<Fallback>,
}

/// The measured fallback threshold.
#[derive(Debug, Clone, Serialize)]
pub struct Fallback {
    /// Blocks with fewer transactions run sequentially.
    pub min_parallel_txs: usize,
    /// Sequential total over the policy's total.
    pub speedup: f64,
    /// Blocks the policy runs in parallel.
    pub parallel_blocks: usize,
}

/// The threshold minimising total time, from per-block (transactions, sequential, parallel)
/// medians.
fn choose_fallback(blocks: &[(usize, f64, f64)]) -> Fallback {
    let sequential: f64 = blocks.iter().map(|b| b.1).sum();
    let mut candidates: Vec<usize> = blocks.iter().map(|b| b.0).collect();
    candidates.push(usize::MAX);
    candidates.sort_unstable();
    candidates.dedup();
    let mut best: Option<(usize, f64)> = None;
    for t in candidates {
        let total: f64 = blocks
            .iter()
            .map(|&(n, s, p)| if n < t { s } else { p })
            .sum();
        if best.is_none_or(|(_, b)| total < b) {
            best = Some((t, total));
        }
    }
    let (t, total) = best.unwrap_or((usize::MAX, sequential));
    Fallback {
        min_parallel_txs: t,
        speedup: if total > 0.0 { sequential / total } else { 1.0 },
        parallel_blocks: blocks.iter().filter(|b| b.0 >= t).count(),
    }
}

/// One thread count.
#[derive(Debug, Clone, Serialize)]
pub struct ParallelResult {
    /// Threads.
    pub threads: usize,
    /// Median seconds for all blocks.
    pub seconds: f64,
    /// Sequential over parallel.
    pub speedup: f64,
    /// Gas per second.
    pub gas_per_second: f64,
    /// Executions per transaction (1.0 = no re-execution).
    pub executions_per_tx: f64,
    /// Validations per transaction.
    pub validations_per_tx: f64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct BlockstmReport {
    /// Machine.
    pub machine: Machine,
    /// Build profile.
    pub build_profile: &'static str,
    /// Results.
    pub workloads: Vec<WorkloadResult>,
}

type Item = (PreparedBlock, CacheDB<EmptyDB>);

fn funded(balance: u64) -> AccountInfo {
    AccountInfo {
        balance: U256::from(balance) * U256::from(10u64).pow(U256::from(18)),
        ..Default::default()
    }
}

fn account(i: u64) -> Address {
    let mut bytes = [0u8; 20];
    bytes[0] = 0xAA;
    bytes[12..].copy_from_slice(&i.to_be_bytes());
    Address::from(bytes)
}

fn block_of(txs: Vec<TxEnv>) -> Result<PreparedBlock> {
    let txs = txs
        .into_iter()
        .map(PreparedTx::from_env)
        .collect::<Result<Vec<_>, _>>()?;
    let block_env = BlockEnv {
        number: U256::from(20_000_000u64),
        timestamp: U256::from(1_720_000_000u64),
        gas_limit: u64::MAX / 4,
        beneficiary: address!("00000000000000000000000000000000000b0b00"),
        basefee: 1,
        prevrandao: Some(B256::with_last_byte(1)),
        ..Default::default()
    };
    Ok(PreparedBlock::synthetic(
        &ChainSpec::mainnet(),
        block_env,
        txs,
    ))
}

fn transfer(from: Address, to: Address, nonce: u64) -> TxEnv {
    TxEnv {
        caller: from,
        kind: TxKind::Call(to),
        value: U256::from(1),
        nonce,
        gas_limit: 21_000,
        gas_price: 2,
        chain_id: Some(1),
        ..Default::default()
    }
}

fn independent(n: usize) -> Result<Item> {
    let mut db = CacheDB::new(EmptyDB::default());
    let mut txs = Vec::with_capacity(n);
    for i in 0..n as u64 {
        db.insert_account_info(account(i), funded(1));
        txs.push(transfer(account(i), account(n as u64 + i), 0));
    }
    Ok((block_of(txs)?, db))
}

fn zipf(n: usize, accounts: usize, seed: u64) -> Result<Item> {
    let dist = ZipfMandelbrot::new(accounts, DEVNET_S, DEVNET_V);
    let mut rng = SplitMix64(seed);
    let mut db = CacheDB::new(EmptyDB::default());
    let mut nonces = std::collections::HashMap::new();
    let mut txs = Vec::with_capacity(n);
    for _ in 0..n {
        let from = account(dist.rank(rng.next_f64()) as u64);
        let to = account(dist.rank(rng.next_f64()) as u64);
        let nonce = nonces.entry(from).or_insert(0u64);
        if *nonce == 0 {
            db.insert_account_info(from, funded(1));
        }
        txs.push(transfer(from, to, *nonce));
        *nonce += 1;
    }
    Ok((block_of(txs)?, db))
}

fn erc20(n: usize, weth_code: &Bytes) -> Result<Item> {
    let mut db = CacheDB::new(EmptyDB::default());
    let code = Bytecode::new_raw(weth_code.clone());
    db.insert_account_info(
        WETH,
        AccountInfo {
            code_hash: code.hash_slow(),
            code: Some(code),
            balance: U256::from(10u64).pow(U256::from(24)),
            ..Default::default()
        },
    );
    let mut txs = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let from = account(i);
        db.insert_account_info(from, funded(1));
        // WETH9 keeps balanceOf at mapping slot 3.
        let mut preimage = [0u8; 64];
        preimage[12..32].copy_from_slice(from.as_slice());
        preimage[63] = 3;
        let slot = U256::from_be_bytes(keccak256(preimage).0);
        db.insert_account_storage(WETH, slot, U256::from(1_000_000u64))
            .map_err(|e| eyre!("WETH storage: {e:?}"))?;
        // transfer(address to, uint256 amount)
        let mut data = vec![0xa9, 0x05, 0x9c, 0xbb];
        data.extend_from_slice(&[0u8; 12]);
        data.extend_from_slice(account(n as u64 + i).as_slice());
        data.extend_from_slice(&U256::from(1).to_be_bytes::<32>());
        txs.push(TxEnv {
            caller: from,
            kind: TxKind::Call(WETH),
            data: data.into(),
            nonce: 0,
            gas_limit: 100_000,
            gas_price: 2,
            chain_id: Some(1),
            ..Default::default()
        });
    }
    Ok((block_of(txs)?, db))
}

fn dependent(n: usize) -> Result<Item> {
    let counter = address!("00000000000000000000000000000000c0c0c0c0");
    let mut db = CacheDB::new(EmptyDB::default());
    let code = Bytecode::new_raw(Bytes::from(vec![
        PUSH1, 0, SLOAD, PUSH1, 1, ADD, PUSH1, 0, SSTORE, STOP,
    ]));
    db.insert_account_info(
        counter,
        AccountInfo {
            code_hash: code.hash_slow(),
            code: Some(code),
            ..Default::default()
        },
    );
    let mut txs = Vec::with_capacity(n);
    for i in 0..n as u64 {
        db.insert_account_info(account(i), funded(1));
        txs.push(TxEnv {
            caller: account(i),
            kind: TxKind::Call(counter),
            nonce: 0,
            gas_limit: 60_000,
            gas_price: 2,
            chain_id: Some(1),
            ..Default::default()
        });
    }
    Ok((block_of(txs)?, db))
}

fn weth_code(blocks_dir: &Path) -> Result<Bytes> {
    for fixture in load_fixtures_dir(blocks_dir)? {
        if let Some(code) = fixture.prestate.get(&WETH).and_then(|a| a.code.clone()) {
            if !code.is_empty() {
                return Ok(code);
            }
        }
    }
    Err(eyre!(
        "no fixture in {} holds WETH9's code",
        blocks_dir.display()
    ))
}

fn measure(
    workload: Workload,
    items: &[Item],
    args: &BlockstmArgs,
    bar: &ProgressBar,
) -> Result<WorkloadResult> {
    let txs: usize = items.iter().map(|(b, _)| b.txs.len()).sum();
    let mut gas = 0u64;
    let mut seq_runs = Vec::new();
    let mut par_runs: Vec<Vec<f64>> = vec![Vec::new(); args.threads.len()];
    let mut executions = vec![0usize; args.threads.len()];
    let mut validations = vec![0usize; args.threads.len()];
    // Per block: sequential and largest-thread-count times, for the worst block.
    let mut per_block: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); items.len()];
    // One executor per thread count for the whole run, as a sequencer keeps one: its memory
    // is reused from block to block.
    let mut executors: Vec<ParallelExecutor> = args
        .threads
        .iter()
        .map(|&t| ParallelExecutor::new(t))
        .collect();
    for r in 0..args.repeats {
        let mut seq_total = 0.0;
        let mut par_total = vec![0.0; args.threads.len()];
        for (b, (block, base)) in items.iter().enumerate() {
            let run_sequential = || -> Result<(f64, gigas_evm::BlockOutcome)> {
                let mut evm = PlainEvm::new(base.clone(), block);
                let started = Instant::now();
                let outcome = execute_block(&mut evm, block)?;
                Ok((started.elapsed().as_secs_f64(), outcome))
            };
            let (seq_time, expected) = run_sequential()?;
            if r == 0 {
                gas += expected.gas_used();
            }
            seq_total += seq_time;
            per_block[b].0.push(seq_time);
            // Alternate which parallel thread count runs first.
            let order: Vec<usize> = if r % 2 == 0 {
                (0..args.threads.len()).collect()
            } else {
                (0..args.threads.len()).rev().collect()
            };
            for t in order {
                let threads = args.threads[t];
                let mut state = base.clone();
                let started = Instant::now();
                let (outcome, stats) = executors[t].execute_into(block, base, &mut state)?;
                let elapsed = started.elapsed().as_secs_f64();
                if outcome != expected {
                    return Err(eyre!(
                        "{workload:?} block {}: parallel execution with {threads} threads differs from sequential",
                        block.number
                    ));
                }
                par_total[t] += elapsed;
                if r == 0 {
                    executions[t] += stats.executions;
                    validations[t] += stats.validations;
                }
                if t + 1 == args.threads.len() {
                    per_block[b].1.push(elapsed);
                }
            }
        }
        seq_runs.push(seq_total);
        for (t, total) in par_total.into_iter().enumerate() {
            par_runs[t].push(total);
        }
        bar.inc(1);
    }
    let sequential_s = median(seq_runs);
    let parallel = args
        .threads
        .iter()
        .enumerate()
        .map(|(t, &threads)| {
            let seconds = median(par_runs[t].clone());
            ParallelResult {
                threads,
                seconds,
                speedup: sequential_s / seconds,
                gas_per_second: gas as f64 / seconds,
                executions_per_tx: executions[t] as f64 / txs.max(1) as f64,
                validations_per_tx: validations[t] as f64 / txs.max(1) as f64,
            }
        })
        .collect();
    let worst_block_speedup = (items.len() > 1)
        .then(|| {
            items
                .iter()
                .zip(&per_block)
                .map(|((block, _), (s, p))| (block.number, median(s.clone()) / median(p.clone())))
                .min_by(|a, b| a.1.total_cmp(&b.1))
        })
        .flatten();
    let fallback = (items.len() > 1).then(|| {
        let per: Vec<(usize, f64, f64)> = items
            .iter()
            .zip(&per_block)
            .map(|((block, _), (s, p))| (block.txs.len(), median(s.clone()), median(p.clone())))
            .collect();
        choose_fallback(&per)
    });
    Ok(WorkloadResult {
        workload,
        blocks: items.len(),
        txs,
        gas,
        sequential_s,
        parallel,
        worst_block_speedup,
        fallback,
    })
}

/// Runs the benchmark and writes the report.
pub fn run(args: &BlockstmArgs) -> Result<BlockstmReport> {
    let machine = Machine::current();
    let build_profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let blocks_dir = args
        .blocks
        .clone()
        .unwrap_or_else(|| crate::shared_data("mainnet"));
    println!("gigas-bench blockstm configuration");
    println!(
        "  workloads : {:?}; {} txs per synthetic block; Zipf over {} accounts; seed {}",
        args.workloads, args.txs, args.accounts, args.seed
    );
    println!(
        "  threads   : {:?}; {} repeats, medians; sequential and parallel alternate per block",
        args.threads, args.repeats
    );
    println!("  blocks    : {}", blocks_dir.display());
    println!(
        "  build     : {build_profile}; machine: {}",
        machine.describe()
    );

    let bar = ProgressBar::new((args.workloads.len() * args.repeats) as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message("blockstm");
    let mut results = Vec::new();
    for &workload in &args.workloads {
        let items: Vec<Item> = match workload {
            Workload::Mainnet => {
                let chain = ChainSpec::mainnet();
                load_fixtures_dir(&blocks_dir)
                    .wrap_err_with(|| format!("cannot load blocks from {}", blocks_dir.display()))?
                    .iter()
                    .map(|f| Ok((PreparedBlock::from_fixture(f, &chain)?, f.database())))
                    .collect::<Result<_>>()?
            }
            Workload::Independent => vec![independent(args.txs)?],
            Workload::Zipf => vec![zipf(args.txs, args.accounts, args.seed)?],
            Workload::Erc20 => vec![erc20(args.txs, &weth_code(&blocks_dir)?)?],
            Workload::Dependent => vec![dependent(args.txs)?],
        };
        // Warm up once (precompile tables, KZG setup) outside the measurement.
        for (block, base) in &items {
            let mut evm = PlainEvm::new(base.clone(), block);
            execute_block(&mut evm, block)?;
        }
        results.push(measure(workload, &items, args, &bar)?);
    }
    bar.finish_and_clear();
    let report = BlockstmReport {
        machine,
        build_profile,
        workloads: results,
    };
    std::fs::create_dir_all(&args.out)
        .wrap_err_with(|| format!("cannot create {}", args.out.display()))?;
    std::fs::write(
        args.out.join("blockstm.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let md = markdown(&report);
    std::fs::write(args.out.join("blockstm.md"), &md)?;
    println!("{md}");
    println!(
        "report written to {}/ (blockstm.md, blockstm.json)",
        args.out.display()
    );
    Ok(report)
}

/// The report as Markdown.
pub fn markdown(r: &BlockstmReport) -> String {
    use std::fmt::Write as _;
    let mut md = String::from("# Block-STM against sequential execution\n\n");
    let _ = writeln!(
        md,
        "- machine: {}; build: {}\n",
        r.machine.describe(),
        r.build_profile
    );
    let _ = writeln!(md, "| workload | blocks | txs | Mgas | sequential ms | threads | parallel ms | speed-up | Mgas/s | executions/tx | validations/tx |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for w in &r.workloads {
        for p in &w.parallel {
            let _ = writeln!(
                md,
                "| {:?} | {} | {} | {:.1} | {:.1} | {} | {:.1} | {:.2}x | {:.0} | {:.2} | {:.2} |",
                w.workload,
                w.blocks,
                w.txs,
                w.gas as f64 / 1e6,
                w.sequential_s * 1e3,
                p.threads,
                p.seconds * 1e3,
                p.speedup,
                p.gas_per_second / 1e6,
                p.executions_per_tx,
                p.validations_per_tx
            );
        }
    }
    for w in &r.workloads {
        if let Some((block, s)) = w.worst_block_speedup {
            let _ = writeln!(
                md,
                "\n- {:?}: slowest block relative to sequential: {block} at {s:.2}x",
                w.workload
            );
        }
        if let Some(f) = &w.fallback {
            let threshold = if f.min_parallel_txs == usize::MAX {
                "run every block sequentially".to_string()
            } else {
                format!(
                    "run blocks of at least {} transactions in parallel",
                    f.min_parallel_txs
                )
            };
            let _ = writeln!(
                md,
                "- {:?}: measured fallback: {threshold} ({} of {} blocks in parallel); the policy's speed-up over sequential: {:.2}x",
                w.workload, f.parallel_blocks, w.blocks, f.speedup
            );
        }
    }
    md
}
