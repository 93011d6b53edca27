//! `gigas-bench jit`: the interpreter against compiled code, frame for frame, same process,
//! alternating; compile time reported apart from run time.
//!
//! Programs, one frame each: snailtracer and analysis from shared/data/evm-bench, a tight
//! arithmetic loop (Fibonacci, a million iterations) and a KECCAK-heavy loop. Whole
//! transactions through revm's frame loop with the code cache (`--jit`): burntpix (four
//! contracts calling each other) and the shipped mainnet blocks, the latter both with every
//! contract compiled (`eager`) and with contracts compiled once hot (`on`, the default of a
//! node). Every compiled run is checked against the interpreter's (status, output and gas of
//! a frame; receipts of a block); a difference is an error.
//!
//! `--budget` sets the code cache's budget of machine code for the mainnet blocks (gigas-jit's
//! default otherwise); the report gives, per mode, what the cache holds at the end, and what it
//! compiled and evicted per timed pass, so that runs at several budgets show what a budget
//! costs. `--blocks-only` and `--skip-eager` shorten such runs.

mod blocks;
mod frames;
mod markdown;

use std::path::PathBuf;

use eyre::Result;
use gigas_evm::jit::{JitCounts, DEFAULT_BUDGET_BYTES};
use gigas_primitives::machine::Machine;
use serde::Serialize;

pub use markdown::markdown;

use blocks::{mainnet, profiler_ceiling};
use frames::programs;

/// What to run.
#[derive(Debug, Clone, clap::Args)]
pub struct JitArgs {
    /// Rounds of interpreter and compiled runs, alternating; medians are reported.
    #[arg(long, default_value_t = 11)]
    pub rounds: usize,
    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "reports/jit")]
    pub out: PathBuf,
    /// Directory of mainnet block fixtures. Defaults to ../shared/data/mainnet.
    #[arg(long, value_name = "DIR")]
    pub blocks: Option<PathBuf>,
    /// Rounds over the mainnet blocks (each round runs every block interpreted, with
    /// `--jit eager` and with `--jit on`, the order rotating).
    #[arg(long, default_value_t = 7)]
    pub block_rounds: usize,
    /// Skip the mainnet blocks (the slowest part: `eager` compiles about 21 MB of EVM code).
    #[arg(long)]
    pub skip_blocks: bool,
    /// The profiler's report, for its JIT ceiling on the same blocks.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "reports/profile/profile.json"
    )]
    pub profile: PathBuf,
    /// The code cache's budget of machine code on the mainnet blocks, in MiB, or `unlimited`
    /// (defaults to gigas-jit's default budget).
    #[arg(long, value_name = "MIB", value_parser = parse_budget)]
    pub budget: Option<u64>,
    /// Only the mainnet blocks: skip the one-frame programs and burntpix.
    #[arg(long)]
    pub blocks_only: bool,
    /// Skip `--jit eager` on the mainnet blocks (under a budget smaller than every contract's
    /// code, every pass compiles evicted contracts again, in the foreground).
    #[arg(long)]
    pub skip_eager: bool,
    /// A hot list (`gigas-profiler` writes `jit-hotlist.txt`): adds to the mainnet blocks'
    /// rotation `on` compiling its contracts at their first call and no others, and `on`
    /// compiling them first and the rest by the threshold.
    #[arg(long, value_name = "FILE")]
    pub hotlist: Option<std::path::PathBuf>,
}

/// A budget in MiB (fractions allowed) or `unlimited`, in bytes (`u64::MAX`: unlimited).
pub fn parse_budget(text: &str) -> Result<u64, String> {
    if text == "unlimited" {
        return Ok(u64::MAX);
    }
    match text.parse::<f64>() {
        Ok(mib) if mib.is_finite() && mib > 0.0 && mib < (1u64 << 43) as f64 => {
            Ok((mib * (1u64 << 20) as f64) as u64)
        }
        _ => Err(format!(
            "{text:?} is not a budget: expected MiB (a positive number) or `unlimited`"
        )),
    }
}

/// A budget for people: `unlimited` or MiB.
fn describe_budget(bytes: u64) -> String {
    if bytes == u64::MAX {
        "unlimited".to_string()
    } else {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// One program's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ProgramResult {
    /// Program name.
    pub name: String,
    /// Bytecode size in bytes.
    pub code_bytes: usize,
    /// Gas one call uses.
    pub gas_used: u64,
    /// Median interpreter milliseconds per call.
    pub interpreter_ms: f64,
    /// Median compiled milliseconds per call.
    pub jit_ms: f64,
    /// Interpreter over compiled.
    pub speedup: f64,
    /// Median compile milliseconds.
    pub compile_ms: f64,
    /// Compile microseconds per KB of bytecode.
    pub compile_us_per_kb: f64,
    /// Machine code bytes.
    pub machine_code_bytes: usize,
    /// Basic blocks translated and total.
    pub blocks: (usize, usize),
    /// How compiled code left the frame (`done`, or the offset where the interpreter took
    /// over).
    pub exit: String,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct JitReport {
    /// Machine.
    pub machine: Machine,
    /// Programs (none with `--blocks-only`).
    pub programs: Vec<ProgramResult>,
    /// burntpix, whole transactions (`None` with `--blocks-only`).
    pub burntpix: Option<TxResult>,
    /// The mainnet blocks (`None` with `--skip-blocks`).
    pub mainnet: Option<MainnetResult>,
}

/// A whole transaction, interpreted and through the code cache.
#[derive(Debug, Clone, Serialize)]
pub struct TxResult {
    /// What ran.
    pub name: String,
    /// Bytes of EVM code of the contracts.
    pub code_bytes: usize,
    /// Gas used.
    pub gas_used: u64,
    /// Median interpreter milliseconds.
    pub interpreter_ms: f64,
    /// Median milliseconds with every contract compiled.
    pub jit_ms: f64,
    /// Interpreter over compiled.
    pub speedup: f64,
    /// The code cache after the warm-up.
    pub cache: CacheFigures,
}

/// What the code cache holds and what filling it cost.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CacheFigures {
    /// Contracts compiled.
    pub contracts: u64,
    /// Contracts not compiled.
    pub failed: u64,
    /// Bytes of EVM code compiled.
    pub evm_bytes: u64,
    /// Bytes of machine code held.
    pub machine_code_bytes: u64,
    /// Milliseconds of compiling, in total.
    pub compile_ms: f64,
    /// Compile milliseconds per KB of EVM code.
    pub compile_ms_per_kb: f64,
    /// Frames started in compiled code per timed pass, suspensions at CALLs, hand-overs to
    /// the interpreter.
    pub frames: (u64, u64, u64),
    /// Bytes of machine code the cache holds at the end (pages).
    pub resident_bytes: u64,
    /// Compiled contracts the cache holds at the end.
    pub resident_contracts: u64,
    /// Evictions, in total.
    pub evictions: u64,
    /// Contracts compiled per timed pass (after the warm-up: contracts compiled again after
    /// an eviction, or hot only now).
    pub timed_compiles_per_pass: f64,
    /// Evictions per timed pass.
    pub timed_evictions_per_pass: f64,
}

impl CacheFigures {
    fn of(before: JitCounts, after: JitCounts, compiles: JitCounts, passes: u64) -> Self {
        let passes = passes.max(1);
        let per_pass = |a: u64, b: u64| a.saturating_sub(b) as f64 / passes as f64;
        Self {
            resident_bytes: after.resident_bytes,
            resident_contracts: after.resident_contracts,
            evictions: after.evictions,
            timed_compiles_per_pass: per_pass(after.compiled, before.compiled),
            timed_evictions_per_pass: per_pass(after.evictions, before.evictions),
            contracts: compiles.compiled,
            failed: compiles.failed,
            evm_bytes: compiles.evm_bytes,
            machine_code_bytes: compiles.code_bytes,
            compile_ms: compiles.compile_ns as f64 / 1e6,
            compile_ms_per_kb: compiles.compile_ns as f64
                / 1e6
                / (compiles.evm_bytes.max(1) as f64 / 1024.0),
            frames: (
                (after.compiled_frames - before.compiled_frames) / passes,
                (after.suspensions - before.suspensions) / passes,
                (after.bailed_frames - before.bailed_frames) / passes,
            ),
        }
    }
}

/// The mainnet blocks.
#[derive(Debug, Clone, Serialize)]
pub struct MainnetResult {
    /// Blocks.
    pub blocks: usize,
    /// Median interpreter milliseconds per pass over every block.
    pub interpreter_ms: f64,
    /// Median milliseconds per pass with every contract compiled (`eager`; `None` with
    /// `--skip-eager`).
    pub eager_ms: Option<f64>,
    /// Median milliseconds per pass with hot contracts compiled (`on`).
    pub on_ms: f64,
    /// Interpreter over `eager`.
    pub eager_speedup: Option<f64>,
    /// Interpreter over `on`.
    pub on_speedup: f64,
    /// The slowest block relative to the interpreter (median over rounds of each block's
    /// interpreter time over its `on` time), and its number.
    pub worst_on_block: (u64, f64),
    /// The same for `eager`.
    pub worst_eager_block: Option<(u64, f64)>,
    /// The profiler's JIT ceiling on these blocks, if its report was found.
    pub profiler_ceiling: Option<f64>,
    /// The code caches' budget of machine code in bytes (`u64::MAX`: unlimited).
    pub budget_bytes: u64,
    /// The `eager` cache.
    pub eager_cache: Option<CacheFigures>,
    /// The `on` cache.
    pub on_cache: CacheFigures,
    /// Gas a contract's interpreted frames spend before `on` compiles it.
    pub on_hot_gas: u64,
    /// `on` by a hot list (`--hotlist`), if one was given.
    pub hot_list: Option<HotListResult>,
}

/// The mainnet blocks compiled by a hot list.
#[derive(Debug, Clone, Serialize)]
pub struct HotListResult {
    /// Contracts listed.
    pub listed: usize,
    /// The listed contracts at their first call, no others.
    pub only: HotFigures,
    /// The listed contracts at their first call, the others by the threshold.
    pub first: HotFigures,
}

/// One way of compiling by a hot list.
#[derive(Debug, Clone, Serialize)]
pub struct HotFigures {
    /// Median milliseconds per pass.
    pub ms: f64,
    /// Interpreter over this way.
    pub speedup: f64,
    /// The block it gains least on: number, median ratio.
    pub worst_block: (u64, f64),
    /// Its code cache.
    pub cache: CacheFigures,
}

/// Runs the benchmark and writes the report.
pub fn run(args: &JitArgs) -> Result<JitReport> {
    let machine = Machine::current();
    let budget = args.budget.unwrap_or(DEFAULT_BUDGET_BYTES);
    println!("gigas-bench jit: interpreter against compiled code, frame for frame");
    println!(
        "  {} rounds, alternating, medians; code cache budget on the mainnet blocks: {}; machine: {}",
        args.rounds,
        describe_budget(budget),
        machine.describe()
    );
    let (results, burntpix) = if args.blocks_only {
        (Vec::new(), None)
    } else {
        let (results, burntpix) = programs(args.rounds)?;
        (results, Some(burntpix))
    };
    let blocks_dir = args
        .blocks
        .clone()
        .unwrap_or_else(|| crate::shared_data("mainnet"));
    let mainnet = if args.skip_blocks {
        None
    } else {
        let hot_list = match &args.hotlist {
            Some(file) => Some(gigas_evm::jit::HotList::read(file)?),
            None => None,
        };
        let mut mainnet = mainnet(
            &blocks_dir,
            args.block_rounds,
            budget,
            !args.skip_eager,
            hot_list,
        )?;
        mainnet.profiler_ceiling = profiler_ceiling(&args.profile);
        let eager = match (mainnet.eager_ms, mainnet.eager_speedup) {
            (Some(ms), Some(speedup)) => format!("eager {ms:>8.2} ms ({speedup:.2}x)  "),
            _ => String::new(),
        };
        let hot = match &mainnet.hot_list {
            Some(h) => format!(
                "\n  {:<30} list only {:>8.2} ms ({:.2}x)  list first {:>8.2} ms ({:.2}x)",
                format!("hot list ({} contracts)", h.listed),
                h.only.ms,
                h.only.speedup,
                h.first.ms,
                h.first.speedup
            ),
            None => String::new(),
        };
        println!(
            "  {:<30} interpreter {:>8.2} ms  {eager}on {:>8.2} ms ({:.2}x){hot}",
            format!("{} mainnet blocks", mainnet.blocks),
            mainnet.interpreter_ms,
            mainnet.on_ms,
            mainnet.on_speedup
        );
        Some(mainnet)
    };
    let report = JitReport {
        machine,
        programs: results,
        burntpix,
        mainnet,
    };
    crate::write_report(&args.out, "jit", &report, &markdown(&report))?;
    Ok(report)
}
