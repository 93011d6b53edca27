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

use std::path::PathBuf;
use std::time::Instant;

use alloy_primitives::{Bytes, U256};
use eyre::{eyre, Context, Result};
use gigas_evm::jit::{CacheConfig, CodeCache, JitCounts, JitMode, DEFAULT_BUDGET_BYTES};
use gigas_evm::program::frame;
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::revm::interpreter::interpreter::EthInterpreter;
use gigas_evm::revm::interpreter::{instruction_table, Interpreter, InterpreterAction};
use gigas_evm::{execute_block, load_fixtures_dir, BlockOutcome, PlainEvm, PreparedBlock};
use gigas_jit::analysis::gas_table;
use gigas_jit::runtime::{run_frame, Exit};
use gigas_jit::Compiler;
use gigas_primitives::machine::Machine;
use gigas_primitives::ChainSpec;
use serde::Serialize;
use std::sync::Arc;

use crate::median;

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
}

struct Program {
    name: &'static str,
    code: Vec<u8>,
    calldata: Vec<u8>,
    gas_limit: u64,
}

fn hex_file(name: &str) -> Result<Vec<u8>> {
    let path = crate::shared_data("evm-bench").join(name);
    let text = std::fs::read_to_string(&path)
        .wrap_err_with(|| format!("cannot read {}", path.display()))?;
    alloy_primitives::hex::decode(text.trim())
        .wrap_err_with(|| format!("{} is not hex", path.display()))
}

/// a, b = b, a + b, a million times; returns b (mod 2^256).
fn fibonacci() -> Vec<u8> {
    let mut code = vec![PUSH1, 0, PUSH1, 1, PUSH3, 0x0f, 0x42, 0x40];
    let head = code.len() as u8;
    code.extend_from_slice(&[
        JUMPDEST, PUSH1, 1, SWAP1, SUB, SWAP2, DUP2, ADD, SWAP1, SWAP2, DUP1, PUSH1, head, JUMPI,
        POP, PUSH1, 0, MSTORE, POP, PUSH1, 32, PUSH1, 0, RETURN,
    ]);
    code
}

/// Hashes 64 bytes of memory and writes the hash back, 200,000 times; returns the hash.
fn keccak_loop() -> Vec<u8> {
    let mut code = vec![PUSH3, 0x03, 0x0d, 0x40];
    let head = code.len() as u8;
    code.extend_from_slice(&[
        JUMPDEST, PUSH1, 64, PUSH1, 0, KECCAK256, PUSH1, 0, MSTORE, PUSH1, 1, SWAP1, SUB, DUP1,
        PUSH1, head, JUMPI, POP, PUSH1, 32, PUSH1, 0, RETURN,
    ]);
    code
}

/// The observable result of a frame, for the equality check.
fn summary(action: &InterpreterAction) -> Result<(String, Bytes, u64)> {
    match action {
        InterpreterAction::Return(r) => Ok((
            format!("{:?}", r.result),
            r.output.clone(),
            r.gas.remaining(),
        )),
        other => Err(eyre!("the frame tried to start another frame: {other:?}")),
    }
}

const CANCUN: u64 = 1_720_000_000;

/// Seconds, the observable result, and how compiled code left (compiled runs only).
type Run = (f64, (String, Bytes, u64), Option<Exit>);

fn measure(program: &Program, rounds: usize) -> Result<ProgramResult> {
    let (interpreter, _) = frame(
        &program.code,
        &program.calldata,
        U256::ZERO,
        program.gas_limit,
        CANCUN,
    );
    let spec = interpreter.runtime_flag.spec_id;
    let gas = gas_table(spec);
    let mut compile_times = Vec::new();
    let mut compiler = Compiler::new()?;
    let mut compiled = None;
    for _ in 0..5 {
        let started = Instant::now();
        let code = compiler.compile(&program.code, spec)?;
        compile_times.push(started.elapsed().as_secs_f64());
        compiled = Some(code);
    }
    let compiled = compiled.ok_or_else(|| eyre!("no compile ran"))?;
    let run = |jit: bool| -> Result<Run> {
        let (mut interpreter, mut host): (Interpreter, _) = frame(
            &program.code,
            &program.calldata,
            U256::ZERO,
            program.gas_limit,
            CANCUN,
        );
        let table = instruction_table::<EthInterpreter, _>();
        let started = Instant::now();
        let (action, exit) = if jit {
            // SAFETY: compiled from this code for this spec.
            let (action, exit) =
                unsafe { run_frame(&compiled, &mut interpreter, &mut host, &table, &gas) };
            (action, Some(exit))
        } else {
            (interpreter.run_plain(&table, &gas, &mut host), None)
        };
        let elapsed = started.elapsed().as_secs_f64();
        Ok((elapsed, summary(&action)?, exit))
    };
    // One untimed run of each warms caches.
    let (_, expected, _) = run(false)?;
    let (_, got, _) = run(true)?;
    if got != expected {
        return Err(eyre!(
            "{}: compiled code gives {got:?}, the interpreter {expected:?}",
            program.name
        ));
    }
    let (mut interp, mut jit, mut exit) = (Vec::new(), Vec::new(), None);
    for round in 0..rounds {
        for first_jit in [round % 2 == 1, round % 2 == 0] {
            let (t, result, e) = run(first_jit)?;
            if result != expected {
                return Err(eyre!("{}: results differ in round {round}", program.name));
            }
            if first_jit {
                jit.push(t);
                exit = e;
            } else {
                interp.push(t);
            }
        }
    }
    let (interpreter_s, jit_s) = (median(interp), median(jit));
    let compile_s = median(compile_times);
    Ok(ProgramResult {
        name: program.name.to_string(),
        code_bytes: program.code.len(),
        gas_used: program.gas_limit - expected.2,
        interpreter_ms: interpreter_s * 1e3,
        jit_ms: jit_s * 1e3,
        speedup: interpreter_s / jit_s,
        compile_ms: compile_s * 1e3,
        compile_us_per_kb: compile_s * 1e6 / (program.code.len() as f64 / 1024.0),
        machine_code_bytes: compiled.code_size(),
        blocks: compiled.blocks(),
        exit: match exit {
            Some(Exit::Done) | None => "done".to_string(),
            Some(Exit::InvalidJump) => "invalid jump".to_string(),
            Some(Exit::Bailed(pc)) => format!("interpreter from offset {pc}"),
            Some(Exit::Suspended) => "suspended at a CALL".to_string(),
        },
    })
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
        let mut mainnet = mainnet(&blocks_dir, args.block_rounds, budget, !args.skip_eager)?;
        mainnet.profiler_ceiling = profiler_ceiling(&args.profile);
        let eager = match (mainnet.eager_ms, mainnet.eager_speedup) {
            (Some(ms), Some(speedup)) => format!("eager {ms:>8.2} ms ({speedup:.2}x)  "),
            _ => String::new(),
        };
        println!(
            "  {:<30} interpreter {:>8.2} ms  {eager}on {:>8.2} ms ({:.2}x)",
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

/// The one-frame programs and burntpix.
fn programs(rounds: usize) -> Result<(Vec<ProgramResult>, TxResult)> {
    let programs = vec![
        Program {
            name: "snailtracer",
            code: hex_file("snailtracer.hex")?,
            calldata: vec![0x30, 0x62, 0x7b, 0x7c],
            gas_limit: 1_000_000_000,
        },
        Program {
            name: "analysis",
            code: hex_file("analysis.hex")?,
            calldata: vec![0x80, 0x35, 0xf0, 0xce],
            gas_limit: 1_000_000_000,
        },
        Program {
            name: "fibonacci (1M iterations)",
            code: fibonacci(),
            calldata: Vec::new(),
            gas_limit: 1_000_000_000,
        },
        Program {
            name: "keccak256 loop (200k hashes)",
            code: keccak_loop(),
            calldata: Vec::new(),
            gas_limit: 1_000_000_000,
        },
    ];
    let mut results = Vec::new();
    for program in &programs {
        let result = measure(program, rounds)?;
        println!(
            "  {:<30} interpreter {:>8.2} ms  jit {:>8.2} ms  {:>5.2}x  compile {:.2} ms",
            result.name, result.interpreter_ms, result.jit_ms, result.speedup, result.compile_ms
        );
        results.push(result);
    }
    let burntpix = burntpix(rounds)?;
    println!(
        "  {:<30} interpreter {:>8.2} ms  jit {:>8.2} ms  {:>5.2}x  compile {:.2} ms",
        burntpix.name,
        burntpix.interpreter_ms,
        burntpix.jit_ms,
        burntpix.speedup,
        burntpix.cache.compile_ms
    );
    Ok((results, burntpix))
}

/// The report as Markdown.
pub fn markdown(r: &JitReport) -> String {
    use std::fmt::Write as _;
    let mut md = String::from("# Compiled code against the interpreter\n\n");
    let _ = writeln!(md, "- machine: {}\n", r.machine.describe());
    if !r.programs.is_empty() {
        let _ = writeln!(md, "## One frame\n");
        let _ = writeln!(md, "| program | code bytes | Mgas | interpreter ms | jit ms | speed-up | compile ms | compile us/KB | machine code bytes | blocks translated | compiled code left |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    }
    for p in &r.programs {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {:.2} | {:.2} | {:.2}x | {:.2} | {:.0} | {} | {}/{} | {} |",
            p.name,
            p.code_bytes,
            p.gas_used as f64 / 1e6,
            p.interpreter_ms,
            p.jit_ms,
            p.speedup,
            p.compile_ms,
            p.compile_us_per_kb,
            p.machine_code_bytes,
            p.blocks.0,
            p.blocks.1,
            p.exit
        );
    }
    let cache_row = |md: &mut String, what: &str, c: &CacheFigures| {
        let _ = writeln!(
            md,
            "| {what} | {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1}x | {} / {} / {} | {:.1} ({}) | {} | {:.1} | {:.1} |",
            c.contracts,
            c.failed,
            c.evm_bytes as f64 / 1024.0,
            c.machine_code_bytes as f64 / (1024.0 * 1024.0),
            c.compile_ms,
            c.compile_ms_per_kb,
            c.machine_code_bytes as f64 / c.evm_bytes.max(1) as f64,
            c.frames.0,
            c.frames.1,
            c.frames.2,
            c.resident_bytes as f64 / (1024.0 * 1024.0),
            c.resident_contracts,
            c.evictions,
            c.timed_compiles_per_pass,
            c.timed_evictions_per_pass
        );
    };
    let cache_header = "| cache | contracts compiled | not compiled | EVM KiB | machine code MiB | compile ms | compile ms/KB | machine/EVM bytes | frames / suspensions / hand-overs per pass | resident MiB (contracts) | evictions | compiles per timed pass | evictions per timed pass |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|";
    if r.burntpix.is_some() || r.mainnet.is_some() {
        let _ = writeln!(md, "\n## Whole transactions through revm's frame loop\n");
        let _ = writeln!(
            md,
            "| workload | Mgas | interpreter ms | jit ms | speed-up |\n|---|---:|---:|---:|---:|"
        );
    }
    if let Some(b) = &r.burntpix {
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.2} | {:.2} | {:.2}x |",
            b.name,
            b.gas_used as f64 / 1e6,
            b.interpreter_ms,
            b.jit_ms,
            b.speedup
        );
    }
    let Some(m) = &r.mainnet else {
        if let Some(b) = &r.burntpix {
            let _ = writeln!(md, "\n## Code cache\n");
            let _ = writeln!(md, "{cache_header}");
            cache_row(&mut md, "burntpix, eager", &b.cache);
        }
        return md;
    };
    if let (Some(eager_ms), Some(eager_speedup)) = (m.eager_ms, m.eager_speedup) {
        let _ = writeln!(
            md,
            "| {} mainnet blocks, `--jit eager` | | {:.2} | {:.2} | {:.2}x |",
            m.blocks, m.interpreter_ms, eager_ms, eager_speedup
        );
    }
    let _ = writeln!(
        md,
        "| {} mainnet blocks, `--jit on` (hot after {} gas) | | {:.2} | {:.2} | {:.2}x |",
        m.blocks, m.on_hot_gas, m.interpreter_ms, m.on_ms, m.on_speedup
    );
    let _ = writeln!(
        md,
        "\n- code cache budget on the mainnet blocks: {}{}",
        describe_budget(m.budget_bytes),
        if m.budget_bytes == DEFAULT_BUDGET_BYTES {
            " (gigas-jit's default, chosen from runs at several budgets: see its crate documentation)"
        } else {
            ""
        }
    );
    let _ = write!(
        md,
        "- slowest block against the interpreter: `on` block {} at {:.2}x",
        m.worst_on_block.0, m.worst_on_block.1
    );
    match m.worst_eager_block {
        Some((block, ratio)) => {
            let _ = writeln!(md, ", `eager` block {block} at {ratio:.2}x");
        }
        None => {
            let _ = writeln!(md);
        }
    }
    match m.profiler_ceiling {
        Some(c) => {
            let _ = writeln!(
                md,
                "- the profiler's JIT ceiling on these blocks (all opcode time gone): {c:.2}x; `on` reaches {:.0}% of the way",
                100.0 * (m.on_speedup - 1.0) / (c - 1.0)
            );
        }
        None => {
            let _ = writeln!(
                md,
                "- the profiler's JIT ceiling: run `cargo run --release -p gigas-profiler` first to compare"
            );
        }
    }
    let _ = writeln!(md, "\n## Code cache\n");
    let _ = writeln!(md, "{cache_header}");
    if let Some(b) = &r.burntpix {
        cache_row(&mut md, "burntpix, eager", &b.cache);
    }
    if let Some(eager) = &m.eager_cache {
        cache_row(&mut md, "mainnet, eager", eager);
    }
    cache_row(&mut md, "mainnet, on", &m.on_cache);
    md
}

/// The burntpix entry point and its three helpers (shared/data/README.md).
const BURNTPIX: [(&str, &str); 4] = [
    (
        "bytecode_two.hex",
        "49206861766520746f6f206d7563682074696d65",
    ),
    (
        "bytecode_one.hex",
        "0a743ba7304efcc9e384ece9be7631e2470e401e",
    ),
    (
        "bytecode_three.hex",
        "c917e98213a05d271adc5d93d2fee6c1f1006f75",
    ),
    (
        "bytecode_four.hex",
        "f529c70db0800449ebd81fbc6e4221523a989f05",
    ),
];

/// `run(0, 20_000)` on burntpix, interpreted and with every contract compiled.
fn burntpix(rounds: usize) -> Result<TxResult> {
    use alloy_primitives::Address;
    use gigas_evm::revm::state::{AccountInfo, Bytecode};
    let mut addresses = Vec::new();
    let mut codes = Vec::new();
    for (file, address) in BURNTPIX {
        let address: Address = address
            .parse()
            .map_err(|e| eyre!("burntpix address {address}: {e}"))?;
        addresses.push(address);
        codes.push(hex_file(&format!("burntpix/{file}"))?);
    }
    let code_bytes = codes.iter().map(Vec::len).sum();
    let mut calldata = alloy_primitives::keccak256("run(uint32,uint256)")[..4].to_vec();
    calldata.extend_from_slice(&[0u8; 32]);
    calldata.extend_from_slice(&U256::from(20_000u64).to_be_bytes::<32>());
    let (block, mut db) =
        gigas_evm::program::call_block(Bytes::new(), calldata.into(), 1_000_000_000);
    for (address, code) in addresses.iter().zip(&codes) {
        let bytecode = Bytecode::new_raw(Bytes::copy_from_slice(code));
        db.insert_account_info(
            *address,
            AccountInfo {
                code_hash: bytecode.hash_slow(),
                code: Some(bytecode),
                ..Default::default()
            },
        );
    }
    // The entry point knows its helpers from storage: slot 0 = four, 1 = one, 2 = three.
    for (slot, helper) in [(0u64, 3usize), (1, 1), (2, 2)] {
        db.insert_account_storage(
            addresses[0],
            U256::from(slot),
            U256::from_be_slice(addresses[helper].as_slice()),
        )
        .map_err(|e| eyre!("burntpix storage: {e}"))?;
    }
    // The transaction goes to the entry point rather than the program address.
    let mut block = block;
    block.txs[0].env.kind = gigas_evm::revm::primitives::TxKind::Call(addresses[0]);
    let cache = CodeCache::new(JitMode::Eager);
    let run = |jit: bool| -> Result<(f64, BlockOutcome)> {
        let mut evm = if jit {
            PlainEvm::with_jit(db.clone(), &block, Arc::clone(&cache))
        } else {
            PlainEvm::new(db.clone(), &block)
        };
        let started = Instant::now();
        let outcome = execute_block(&mut evm, &block)?;
        Ok((started.elapsed().as_secs_f64(), outcome))
    };
    let (_, expected) = run(false)?;
    let status = &expected.receipts[0];
    if !status.success {
        return Err(eyre!("burntpix run(0, 20000) failed: {status:?}"));
    }
    let before = cache.stats().snapshot();
    let (_, got) = run(true)?;
    if got != expected {
        return Err(eyre!(
            "burntpix: compiled code gives other receipts than the interpreter"
        ));
    }
    let compiles = cache.stats().snapshot();
    let (mut interp, mut jit) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for first_jit in [round % 2 == 1, round % 2 == 0] {
            let (t, outcome) = run(first_jit)?;
            if outcome != expected {
                return Err(eyre!("burntpix: results differ in round {round}"));
            }
            if first_jit {
                jit.push(t);
            } else {
                interp.push(t);
            }
        }
    }
    let after = cache.stats().snapshot();
    let (interpreter_s, jit_s) = (median(interp), median(jit));
    let _ = before;
    Ok(TxResult {
        name: "burntpix run(0, 20000)".into(),
        code_bytes,
        gas_used: expected.gas_used(),
        interpreter_ms: interpreter_s * 1e3,
        jit_ms: jit_s * 1e3,
        speedup: interpreter_s / jit_s,
        cache: CacheFigures::of(compiles, after, compiles, rounds as u64),
    })
}

/// How a block runs in the mainnet comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Interpreter,
    Eager,
    On,
}

/// Every mainnet block per round: interpreted, `eager` (unless skipped) and `on`, the order
/// rotating; both code caches under `budget` bytes of machine code.
fn mainnet(
    dir: &std::path::Path,
    rounds: usize,
    budget: u64,
    with_eager: bool,
) -> Result<MainnetResult> {
    let chain = ChainSpec::mainnet();
    let items: Vec<(PreparedBlock, CacheDB<EmptyDB>)> = load_fixtures_dir(dir)
        .wrap_err_with(|| format!("cannot load blocks from {}", dir.display()))?
        .iter()
        .map(|f| Ok((PreparedBlock::from_fixture(f, &chain)?, f.database())))
        .collect::<Result<_>>()?;
    let cache = |mode| {
        CodeCache::with_config(CacheConfig {
            budget_bytes: budget,
            ..CacheConfig::new(mode)
        })
    };
    let eager = cache(JitMode::Eager);
    let on = cache(JitMode::On);
    let ways: Vec<Way> = if with_eager {
        vec![Way::Interpreter, Way::Eager, Way::On]
    } else {
        vec![Way::Interpreter, Way::On]
    };
    let run =
        |way: Way, block: &PreparedBlock, db: &CacheDB<EmptyDB>| -> Result<(f64, BlockOutcome)> {
            let mut evm = match way {
                Way::Interpreter => PlainEvm::new(db.clone(), block),
                Way::Eager => PlainEvm::with_jit(db.clone(), block, Arc::clone(&eager)),
                Way::On => PlainEvm::with_jit(db.clone(), block, Arc::clone(&on)),
            };
            let started = Instant::now();
            let outcome = execute_block(&mut evm, block)?;
            Ok((started.elapsed().as_secs_f64(), outcome))
        };
    // Warm-up, untimed: the interpreter's receipts are the reference; `eager` compiles every
    // contract, `on` compiles what two passes make hot.
    let mut expected = Vec::new();
    for (block, db) in &items {
        expected.push(run(Way::Interpreter, block, db)?.1);
    }
    let warm_ups: &[Way] = if with_eager {
        &[Way::Eager, Way::On, Way::On]
    } else {
        &[Way::On, Way::On]
    };
    for &way in warm_ups {
        for ((block, db), expected) in items.iter().zip(&expected) {
            if &run(way, block, db)?.1 != expected {
                return Err(eyre!(
                    "block {}: compiled code gives other receipts than the interpreter",
                    block.number
                ));
            }
        }
        on.wait_for_compiles();
    }
    let (eager_compiles, on_compiles) = (eager.stats().snapshot(), on.stats().snapshot());
    let n = ways.len();
    let mut pass = vec![Vec::new(); n];
    let mut per_block = vec![vec![Vec::new(); n]; items.len()];
    for round in 0..rounds {
        let mut totals = vec![0.0; n];
        for (i, ((block, db), expected)) in items.iter().zip(&expected).enumerate() {
            for k in 0..n {
                let w = (round + i + k) % n;
                let (t, outcome) = run(ways[w], block, db)?;
                if &outcome != expected {
                    return Err(eyre!(
                        "block {}: results differ in round {round}",
                        block.number
                    ));
                }
                totals[w] += t;
                per_block[i][w].push(t);
            }
        }
        for (w, total) in totals.into_iter().enumerate() {
            pass[w].push(total);
        }
    }
    let worst = |w: usize| -> (u64, f64) {
        items
            .iter()
            .zip(&per_block)
            .filter(|((block, _), _)| !block.txs.is_empty())
            .map(|((block, _), times)| {
                let ratios = times[0].iter().zip(&times[w]).map(|(i, j)| i / j).collect();
                (block.number, median(ratios))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 1.0))
    };
    let medians: Vec<f64> = pass.into_iter().map(median).collect();
    let (interp, on_t) = (medians[0], medians[n - 1]);
    let eager_t = with_eager.then(|| medians[1]);
    Ok(MainnetResult {
        blocks: items.len(),
        interpreter_ms: interp * 1e3,
        eager_ms: eager_t.map(|t| t * 1e3),
        on_ms: on_t * 1e3,
        eager_speedup: eager_t.map(|t| interp / t),
        on_speedup: interp / on_t,
        worst_on_block: worst(n - 1),
        worst_eager_block: with_eager.then(|| worst(1)),
        profiler_ceiling: None,
        budget_bytes: budget,
        eager_cache: with_eager.then(|| {
            CacheFigures::of(
                eager_compiles,
                eager.stats().snapshot(),
                eager_compiles,
                rounds as u64,
            )
        }),
        on_cache: CacheFigures::of(
            on_compiles,
            on.stats().snapshot(),
            on_compiles,
            rounds as u64,
        ),
        on_hot_gas: on.hotness().gas,
    })
}

/// The JIT ceiling from a profiler report, if there is one.
fn profiler_ceiling(path: &std::path::Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    find_key(&json, "jit_ceiling_speedup")
}

fn find_key(value: &serde_json::Value, key: &str) -> Option<f64> {
    match value {
        serde_json::Value::Object(map) => map.iter().find_map(|(k, v)| {
            if k == key {
                v.as_f64().or_else(|| find_key(v, key))
            } else {
                find_key(v, key)
            }
        }),
        serde_json::Value::Array(items) => items.iter().find_map(|v| find_key(v, key)),
        _ => None,
    }
}
