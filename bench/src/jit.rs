//! `gigas-bench jit`: the interpreter against compiled code, frame for frame, same process,
//! alternating; compile time reported apart from run time.
//!
//! Programs: snailtracer and analysis from shared/data/evm-bench, a tight arithmetic loop
//! (Fibonacci, a million iterations) and a KECCAK-heavy loop. Each run of compiled code is
//! checked against the interpreter's (status, output, gas left); a difference is an error.
//! Programs that call other contracts (burntpix) and the mainnet blocks need compiled code
//! wired into revm's frame loop, which is not done yet; this benchmark says so instead of
//! timing them.

use std::path::PathBuf;
use std::time::Instant;

use alloy_primitives::{Bytes, U256};
use eyre::{eyre, Context, Result};
use gigas_evm::program::frame;
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::interpreter::interpreter::EthInterpreter;
use gigas_evm::revm::interpreter::{instruction_table, Interpreter, InterpreterAction};
use gigas_jit::analysis::gas_table;
use gigas_jit::runtime::{run_frame, Exit};
use gigas_jit::Compiler;
use gigas_primitives::machine::Machine;
use serde::Serialize;

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
    /// Programs.
    pub programs: Vec<ProgramResult>,
    /// What is not measured yet, and why.
    pub not_measured: Vec<String>,
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
                unsafe { run_frame(compiled.function, &mut interpreter, &mut host, &table, &gas) };
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
        machine_code_bytes: compiled.code_size,
        blocks: compiled.blocks,
        exit: match exit {
            Some(Exit::Done) | None => "done".to_string(),
            Some(Exit::InvalidJump) => "invalid jump".to_string(),
            Some(Exit::Bailed(pc)) => format!("interpreter from offset {pc}"),
        },
    })
}

/// Runs the benchmark and writes the report.
pub fn run(args: &JitArgs) -> Result<JitReport> {
    let machine = Machine::current();
    println!("gigas-bench jit: interpreter against compiled code, frame for frame");
    println!(
        "  {} rounds, alternating, medians; machine: {}",
        args.rounds,
        machine.describe()
    );
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
        let result = measure(program, args.rounds)?;
        println!(
            "  {:<30} interpreter {:>8.2} ms  jit {:>8.2} ms  {:>5.2}x  compile {:.2} ms",
            result.name, result.interpreter_ms, result.jit_ms, result.speedup, result.compile_ms
        );
        results.push(result);
    }
    let report = JitReport {
        machine,
        programs: results,
        not_measured: vec![
            "burntpix: calls between contracts need compiled code to suspend at CALL and resume, not done yet".into(),
            "the 50 mainnet blocks: need compiled code wired into revm's frame loop (the --jit switch), not done yet".into(),
        ],
    };
    std::fs::create_dir_all(&args.out)
        .wrap_err_with(|| format!("cannot create {}", args.out.display()))?;
    std::fs::write(
        args.out.join("jit.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let md = markdown(&report);
    std::fs::write(args.out.join("jit.md"), &md)?;
    println!("{md}");
    println!(
        "report written to {}/ (jit.md, jit.json)",
        args.out.display()
    );
    Ok(report)
}

/// The report as Markdown.
pub fn markdown(r: &JitReport) -> String {
    use std::fmt::Write as _;
    let mut md = String::from("# Compiled code against the interpreter (one frame)\n\n");
    let _ = writeln!(md, "- machine: {}\n", r.machine.describe());
    let _ = writeln!(md, "| program | code bytes | Mgas | interpreter ms | jit ms | speed-up | compile ms | compile us/KB | machine code bytes | blocks translated | compiled code left |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
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
    let _ = writeln!(md, "\nNot measured yet:\n");
    for n in &r.not_measured {
        let _ = writeln!(md, "- {n}");
    }
    md
}
