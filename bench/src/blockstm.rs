//! `gigas-bench blockstm`: Block-STM against sequential execution, same process, alternating.
//!
//! Workloads (shared/BENCHMARKING.md): the mainnet blocks of any directory in the shipped
//! format, independent transfers, Zipf-Mandelbrot transfers over many accounts, ERC-20
//! transfers through WETH9's real mainnet bytecode taken from the fixtures' pre-state, and a
//! fully dependent chain. Every parallel run is checked against the sequential one (receipts);
//! a difference is an error.

use std::path::PathBuf;
use std::time::Instant;

use alloy_primitives::{address, keccak256, Address, Bytes, B256, U256};
use eyre::{eyre, Context, Result};
use gigas_blockstm::{ParallelExecutor, Policy};
use gigas_chain::bench::{weth9_code, WETH9};
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
use crate::Table;

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
    /// The slowest non-empty block relative to sequential (mainnet: speed-up of the worst
    /// block at the largest thread count).
    pub worst_block_speedup: Option<(u64, f64)>,
    /// Blocks that bailed out to sequential execution at the largest thread count (first run).
    pub bailed_blocks: usize,
    /// Per block, at the largest thread count (workloads of several blocks).
    pub per_block: Vec<BlockResult>,
    /// For workloads of several blocks: the threshold on transactions per block that minimises
    /// the total time when smaller blocks run sequentially (the measured fallback policy), and
    /// the speed-up over sequential that policy gives at the largest thread count.
    pub fallback: Option<Fallback>,
}

/// One block at the largest thread count.
#[derive(Debug, Clone, Serialize)]
pub struct BlockResult {
    /// Block number.
    pub number: u64,
    /// Transactions.
    pub txs: usize,
    /// Median sequential milliseconds.
    pub sequential_ms: f64,
    /// Median parallel milliseconds.
    pub parallel_ms: f64,
    /// Median parallel milliseconds without the bailout to sequential execution.
    pub parallel_ms_without_bailout: f64,
    /// Sequential over parallel.
    pub speedup: f64,
    /// Average gas limit per transaction (what the policy looks at).
    pub avg_gas_limit: u64,
    /// Executions per transaction (first run).
    pub executions_per_tx: f64,
    /// Where the block bailed out to sequential execution (first run), if it did.
    pub sequential_from: Option<usize>,
}

/// The measured fallback thresholds.
#[derive(Debug, Clone, Serialize)]
pub struct Fallback {
    /// Blocks with fewer transactions run sequentially.
    pub min_parallel_txs: usize,
    /// Blocks whose transactions' gas limits average less run sequentially.
    pub min_avg_gas_limit: u64,
    /// Sequential total over the policy's total.
    pub speedup: f64,
    /// Blocks the policy runs in parallel.
    pub parallel_blocks: usize,
    /// The slowest block under the policy relative to sequential.
    pub worst_block_speedup: f64,
}

/// A block as the fallback search sees it.
struct BlockTimes {
    txs: usize,
    avg_gas_limit: u64,
    sequential: f64,
    parallel: f64,
}

/// The thresholds (transactions per block, average gas limit per transaction) minimising the
/// total time when the blocks below either run sequentially, from per-block medians.
fn choose_fallback(blocks: &[BlockTimes]) -> Fallback {
    let sequential: f64 = blocks.iter().map(|b| b.sequential).sum();
    let mut by_txs: Vec<usize> = blocks.iter().map(|b| b.txs).collect();
    by_txs.push(usize::MAX);
    by_txs.sort_unstable();
    by_txs.dedup();
    let mut by_gas: Vec<u64> = blocks.iter().map(|b| b.avg_gas_limit).collect();
    by_gas.push(0);
    by_gas.sort_unstable();
    by_gas.dedup();
    let parallel = |b: &BlockTimes, t: usize, g: u64| b.txs >= t && b.avg_gas_limit >= g;
    let mut best: Option<(usize, u64, f64)> = None;
    for &t in &by_txs {
        for &g in &by_gas {
            let total: f64 = blocks
                .iter()
                .map(|b| {
                    if parallel(b, t, g) {
                        b.parallel
                    } else {
                        b.sequential
                    }
                })
                .sum();
            // Ties go to the lower thresholds (more parallel blocks), found first.
            if best.is_none_or(|(_, _, b)| total < b) {
                best = Some((t, g, total));
            }
        }
    }
    let (t, g, total) = best.unwrap_or((usize::MAX, 0, sequential));
    let chosen: Vec<&BlockTimes> = blocks.iter().filter(|b| parallel(b, t, g)).collect();
    Fallback {
        min_parallel_txs: t,
        min_avg_gas_limit: g,
        speedup: if total > 0.0 { sequential / total } else { 1.0 },
        parallel_blocks: chosen.len(),
        worst_block_speedup: chosen
            .iter()
            .map(|b| b.sequential / b.parallel)
            .fold(1.0, f64::min),
    }
}

/// One thread count.
#[derive(Debug, Clone, Serialize)]
pub struct ParallelResult {
    /// Threads.
    pub threads: usize,
    /// Whether the executor could bail out to sequential execution within a block.
    pub bailout: bool,
    /// Blocks that bailed out (first run).
    pub bailed_blocks: usize,
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
        WETH9,
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
        db.insert_account_storage(WETH9, slot, U256::from(1_000_000u64))
            .map_err(|e| eyre!("WETH9 storage: {e:?}"))?;
        // transfer(address to, uint256 amount)
        let mut data = vec![0xa9, 0x05, 0x9c, 0xbb];
        data.extend_from_slice(&[0u8; 12]);
        data.extend_from_slice(account(n as u64 + i).as_slice());
        data.extend_from_slice(&U256::from(1).to_be_bytes::<32>());
        txs.push(TxEnv {
            caller: from,
            kind: TxKind::Call(WETH9),
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

fn measure(
    workload: Workload,
    items: &[Item],
    args: &BlockstmArgs,
    bar: &ProgressBar,
) -> Result<WorkloadResult> {
    let txs: usize = items.iter().map(|(b, _)| b.txs.len()).sum();
    let mut gas = 0u64;
    let mut seq_runs = Vec::new();
    // Each thread count with the executor's bailout to sequential execution (what a sequencer
    // runs), then the largest without it (what Block-STM alone costs). The per-block figures
    // come from the first variant of the largest thread count.
    let max_threads = args.threads.iter().copied().max().unwrap_or(1);
    let mut variants: Vec<(usize, bool)> = args.threads.iter().map(|&t| (t, true)).collect();
    variants.push((max_threads, false));
    let per_block_variant = args
        .threads
        .iter()
        .position(|&t| t == max_threads)
        .unwrap_or(0);
    let mut par_runs: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut executions = vec![0usize; variants.len()];
    let mut validations = vec![0usize; variants.len()];
    let mut bailed = vec![0usize; variants.len()];
    // Per block: sequential and largest-thread-count times, for the worst block.
    let mut per_block: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); items.len()];
    let mut per_block_stats = vec![gigas_blockstm::Stats::default(); items.len()];
    let mut raw_per_block: Vec<Vec<f64>> = vec![Vec::new(); items.len()];
    // One executor per thread count for the whole run, as a sequencer keeps one: its memory
    // is reused from block to block.
    let mut executors: Vec<ParallelExecutor> = variants
        .iter()
        .map(|&(t, bailout)| {
            let executor = ParallelExecutor::new(t);
            if bailout {
                executor
            } else {
                executor.with_bailout(None)
            }
        })
        .collect();
    // Warm up once outside the measurement: precompile tables and KZG setup, and each
    // executor's memory (its first block pays the allocation and page faults that a
    // long-running sequencer pays once).
    for (block, base) in items {
        let mut evm = PlainEvm::new(base.clone(), block);
        execute_block(&mut evm, block)?;
        for executor in &mut executors {
            let mut state = base.clone();
            executor.execute_into(block, base, &mut state)?;
        }
    }
    for r in 0..args.repeats {
        let mut seq_total = 0.0;
        let mut par_total = vec![0.0; variants.len()];
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
                (0..variants.len()).collect()
            } else {
                (0..variants.len()).rev().collect()
            };
            for t in order {
                let threads = variants[t].0;
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
                    bailed[t] += usize::from(stats.sequential_from.is_some());
                }
                if t + 1 == variants.len() {
                    raw_per_block[b].push(elapsed);
                }
                if t == per_block_variant {
                    per_block[b].1.push(elapsed);
                    if r == 0 {
                        per_block_stats[b] = stats;
                    }
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
    let parallel = variants
        .iter()
        .enumerate()
        .map(|(t, &(threads, bailout))| {
            let seconds = median(par_runs[t].clone());
            ParallelResult {
                threads,
                bailout,
                bailed_blocks: bailed[t],
                seconds,
                speedup: sequential_s / seconds,
                gas_per_second: gas as f64 / seconds,
                executions_per_tx: executions[t] as f64 / txs.max(1) as f64,
                validations_per_tx: validations[t] as f64 / txs.max(1) as f64,
            }
        })
        .collect();
    let blocks: Vec<BlockResult> = if items.len() > 1 {
        items
            .iter()
            .zip(&per_block)
            .zip(&per_block_stats)
            .zip(&raw_per_block)
            .map(|((((block, _), (s, p)), stats), raw)| {
                let (s, p) = (median(s.clone()), median(p.clone()));
                BlockResult {
                    number: block.number,
                    txs: block.txs.len(),
                    avg_gas_limit: Policy::avg_gas_limit(block),
                    sequential_ms: s * 1e3,
                    parallel_ms: p * 1e3,
                    parallel_ms_without_bailout: median(raw.clone()) * 1e3,
                    speedup: if p > 0.0 { s / p } else { 1.0 },
                    executions_per_tx: stats.executions as f64 / block.txs.len().max(1) as f64,
                    sequential_from: stats.sequential_from,
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    // An empty block has nothing to execute either way; its ratio is noise.
    let worst_block_speedup = blocks
        .iter()
        .filter(|b| b.txs > 0)
        .map(|b| (b.number, b.speedup))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let bailed_blocks = per_block_stats
        .iter()
        .filter(|s| s.sequential_from.is_some())
        .count();
    let fallback = (items.len() > 1).then(|| {
        let per: Vec<BlockTimes> = items
            .iter()
            .zip(&per_block)
            .map(|((block, _), (s, p))| BlockTimes {
                txs: block.txs.len(),
                avg_gas_limit: Policy::avg_gas_limit(block),
                sequential: median(s.clone()),
                parallel: median(p.clone()),
            })
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
        bailed_blocks,
        per_block: blocks,
        fallback,
    })
}

/// Runs the benchmark and writes the report.
pub fn run(args: &BlockstmArgs) -> Result<BlockstmReport> {
    let machine = Machine::current();
    let build_profile = crate::build_profile();
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
            Workload::Erc20 => vec![erc20(args.txs, &weth9_code(&blocks_dir)?)?],
            Workload::Dependent => vec![dependent(args.txs)?],
        };
        results.push(measure(workload, &items, args, &bar)?);
    }
    bar.finish_and_clear();
    let report = BlockstmReport {
        machine,
        build_profile,
        workloads: results,
    };
    crate::write_report(&args.out, "blockstm", &report, &markdown(&report))?;
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
    let mut t = Table::new(
        "lrrrrrlrrrrr",
        [
            "workload",
            "blocks",
            "txs",
            "Mgas",
            "sequential ms",
            "threads",
            "bailout",
            "parallel ms",
            "speed-up",
            "Mgas/s",
            "executions/tx",
            "validations/tx",
        ],
    );
    for w in &r.workloads {
        for p in &w.parallel {
            let bailout = if p.bailout {
                format!("on ({} bailed)", p.bailed_blocks)
            } else {
                "off".to_string()
            };
            t.row([
                format!("{:?}", w.workload),
                w.blocks.to_string(),
                w.txs.to_string(),
                format!("{:.1}", w.gas as f64 / 1e6),
                format!("{:.1}", w.sequential_s * 1e3),
                p.threads.to_string(),
                bailout,
                format!("{:.1}", p.seconds * 1e3),
                format!("{:.2}x", p.speedup),
                format!("{:.0}", p.gas_per_second / 1e6),
                format!("{:.2}", p.executions_per_tx),
                format!("{:.2}", p.validations_per_tx),
            ]);
        }
    }
    let _ = write!(md, "{t}");
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
                    "run blocks of at least {} transactions averaging at least {} gas limit per transaction in parallel",
                    f.min_parallel_txs, f.min_avg_gas_limit
                )
            };
            let _ = writeln!(
                md,
                "- {:?}: measured fallback: {threshold} ({} of {} blocks in parallel); the policy's speed-up over sequential: {:.2}x; slowest block under the policy: {:.2}x",
                w.workload, f.parallel_blocks, w.blocks, f.speedup, f.worst_block_speedup
            );
        }
        if w.blocks > 1 {
            let _ = writeln!(
                md,
                "- {:?}: {} of {} blocks bailed out to sequential execution within the block",
                w.workload, w.bailed_blocks, w.blocks
            );
        }
    }
    let _ = writeln!(
        md,
        "\n## Reading these figures\n\n\
         - `bailout on` is the executor a sequencer runs: a block whose first executions are \
         cheap or conflict heavily finishes sequentially. `bailout off` is Block-STM alone, \
         what its machinery costs on each workload.\n\
         - The ceiling with 2 threads is 2.0x. Cheap transactions (plain transfers, 2 to 4 us \
         each) cost about as much to execute as the multi-version bookkeeping around them, so \
         Block-STM alone loses on them; heavier transactions gain.\n\
         - Scaling to 32 threads: the in-order committer, conflicts on hot contracts, the \
         shared scheduler counters and per-block thread start-up would limit it, in that order; \
         see the crate documentation of `gigas-blockstm` (\"How this scales to 32 threads\")."
    );
    md
}
