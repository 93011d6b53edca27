//! The one-frame programs and burntpix, apart from the report model and the mainnet blocks,
//! so each workload's setup and its check against the interpreter read in one place.

use std::sync::Arc;
use std::time::Instant;

use alloy_primitives::{Bytes, U256};
use eyre::{eyre, Context, Result};
use gigas_evm::jit::{CodeCache, JitMode};
use gigas_evm::program::frame;
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::interpreter::interpreter::EthInterpreter;
use gigas_evm::revm::interpreter::{instruction_table, Interpreter, InterpreterAction};
use gigas_evm::{execute_block, BlockOutcome, PlainEvm};
use gigas_jit::analysis::gas_table;
use gigas_jit::runtime::{run_frame, Exit};
use gigas_jit::Compiler;

use super::{CacheFigures, ProgramResult, TxResult};
use crate::median;

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

/// The one-frame programs and burntpix.
pub(super) fn programs(rounds: usize) -> Result<(Vec<ProgramResult>, TxResult)> {
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
