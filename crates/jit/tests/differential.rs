//! Compiled code against the interpreter, one frame at a time: random programs (structured
//! snippets that run deep, and raw bytes that fail early in every possible way) with random
//! gas limits, on every fork from Frontier on. Status, output, gas left, refunds, storage
//! written and logs must be identical.

use alloy_primitives::{Bytes, U256};
use gigas_evm::executor::BlockContext;
use gigas_evm::program::PROGRAM_ADDRESS;
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::context_interface::ContextTr;
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::revm::interpreter::interpreter::EthInterpreter;
use gigas_evm::revm::interpreter::{instruction_table, Interpreter, InterpreterAction};
use gigas_evm::revm::primitives::hardfork::SpecId;
use gigas_jit::analysis::gas_table;
use gigas_jit::Compiler;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

type Host = BlockContext<CacheDB<EmptyDB>>;

/// A fork to run frames under: a block of it on mainnet (number and timestamp) and its revm
/// spec. revm has no Constantinople (Petersburg replaced it at the same block on mainnet), so
/// the shifts, CREATE2 and EXTCODEHASH start at Petersburg; Osaka and Amsterdam are past the
/// forks Gigas replays and are here for what revm gives them (CLZ; DUPN, SWAPN, EXCHANGE).
#[derive(Debug, Clone, Copy)]
struct Fork {
    spec: SpecId,
    number: u64,
    timestamp: u64,
}

const fn fork(spec: SpecId, number: u64, timestamp: u64) -> Fork {
    Fork {
        spec,
        number,
        timestamp,
    }
}

const FRONTIER: Fork = fork(SpecId::FRONTIER, 1_000_000, 1_455_000_000);
const HOMESTEAD: Fork = fork(SpecId::HOMESTEAD, 2_000_000, 1_470_000_000);
const TANGERINE: Fork = fork(SpecId::TANGERINE, 2_500_000, 1_477_000_000);
const SPURIOUS_DRAGON: Fork = fork(SpecId::SPURIOUS_DRAGON, 3_000_000, 1_484_000_000);
const BYZANTIUM: Fork = fork(SpecId::BYZANTIUM, 5_000_000, 1_517_000_000);
const PETERSBURG: Fork = fork(SpecId::PETERSBURG, 8_000_000, 1_561_000_000);
const ISTANBUL: Fork = fork(SpecId::ISTANBUL, 10_000_000, 1_588_000_000);
const BERLIN: Fork = fork(SpecId::BERLIN, 12_500_000, 1_621_000_000);
const LONDON: Fork = fork(SpecId::LONDON, 13_000_000, 1_628_000_000);
const MERGE: Fork = fork(SpecId::MERGE, 16_000_000, 1_668_000_000);
const SHANGHAI: Fork = fork(SpecId::SHANGHAI, 17_500_000, 1_690_000_000);
const CANCUN: Fork = fork(SpecId::CANCUN, 20_000_000, 1_720_000_000);
const PRAGUE: Fork = fork(SpecId::PRAGUE, 22_500_000, 1_750_000_000);
const OSAKA: Fork = fork(SpecId::OSAKA, 24_000_000, 1_770_000_000);
const AMSTERDAM: Fork = fork(SpecId::AMSTERDAM, 25_000_000, 1_790_000_000);

/// Every fork the random programs run under.
const FORKS: [Fork; 15] = [
    FRONTIER,
    HOMESTEAD,
    TANGERINE,
    SPURIOUS_DRAGON,
    BYZANTIUM,
    PETERSBURG,
    ISTANBUL,
    BERLIN,
    LONDON,
    MERGE,
    SHANGHAI,
    CANCUN,
    PRAGUE,
    OSAKA,
    AMSTERDAM,
];

/// The program's frame under `fork`: revm configured for its spec with that spec's mainnet
/// gas parameters, in a block at its number and timestamp.
fn setup(code: &[u8], calldata: &[u8], gas_limit: u64, fork: Fork) -> (Interpreter, Host) {
    let (mut interpreter, mut host) =
        gigas_evm::program::frame(code, calldata, U256::from(7), gas_limit, fork.timestamp);
    host.modify_cfg(|cfg| cfg.set_spec_and_mainnet_gas_params(fork.spec));
    host.modify_block(|block| block.number = U256::from(fork.number));
    interpreter.runtime_flag.spec_id = fork.spec;
    (interpreter, host)
}

/// Everything observable about a finished frame.
#[derive(Debug, PartialEq)]
struct Outcome {
    result: String,
    output: Bytes,
    gas_remaining: u64,
    gas_refunded: i64,
    storage: Vec<(U256, U256)>,
    logs: String,
}

fn outcome(action: InterpreterAction, interpreter: &Interpreter, host: &Host) -> Outcome {
    let (result, output, gas_remaining, gas_refunded) = match action {
        InterpreterAction::Return(r) => (
            format!("{:?}", r.result),
            r.output,
            r.gas.remaining(),
            r.gas.refunded(),
        ),
        // A random program may reach a CALL or CREATE: both ways must suspend the same way.
        new_frame => (
            format!("{new_frame:?}"),
            Bytes::new(),
            interpreter.gas.remaining(),
            interpreter.gas.refunded(),
        ),
    };
    let mut storage: Vec<(U256, U256)> = host
        .journal_ref()
        .state
        .get(&PROGRAM_ADDRESS)
        .map(|a| {
            a.storage
                .iter()
                .map(|(k, v)| (*k, v.present_value()))
                .collect()
        })
        .unwrap_or_default();
    storage.sort();
    Outcome {
        result,
        output,
        gas_remaining,
        gas_refunded,
        storage,
        logs: format!("{:?}", host.journal_ref().logs),
    }
}

/// Compares both ways; returns whether compiled code ran the frame to its end itself.
fn compare(
    compiler: &mut Compiler,
    code: &[u8],
    calldata: &[u8],
    gas_limit: u64,
    fork: Fork,
) -> bool {
    let (mut interpreter, mut host) = setup(code, calldata, gas_limit, fork);
    let spec = interpreter.runtime_flag.spec_id;
    let table = instruction_table::<EthInterpreter, Host>();
    let gas = gas_table(spec);
    let expected = interpreter.run_plain(&table, &gas, &mut host);
    let expected = outcome(expected, &interpreter, &host);

    let (mut interpreter, mut host) = setup(code, calldata, gas_limit, fork);
    let compiled = match compiler.compile(code, spec) {
        Ok(compiled) => compiled,
        // Nothing to compile (every block starts a frame): the interpreter runs it anyway.
        Err(gigas_jit::CompileError::NothingToCompile) => return false,
        Err(e) => panic!(
            "{} does not compile: {e}",
            alloy_primitives::hex::encode(code)
        ),
    };
    // SAFETY: compiled from this code for this spec.
    let (action, exit) = unsafe {
        gigas_jit::runtime::run_frame(compiled.function, &mut interpreter, &mut host, &table, &gas)
    };
    let got = outcome(action, &interpreter, &host);
    assert_eq!(
        got,
        expected,
        "code {} with {gas_limit} gas under {:?}",
        alloy_primitives::hex::encode(code),
        fork.spec
    );
    exit == gigas_jit::runtime::Exit::Done
}

/// A stack-balanced piece of code (its net effect on the stack is zero or one push), so that
/// programs of many snippets run deep instead of underflowing at once.
#[derive(Debug, Clone)]
enum Snippet {
    Push(u8, Vec<u8>),
    Binary(u8, U256, U256),
    Unary(u8, U256),
    Ternary(u8, U256, U256, U256),
    Shuffle(u8),
    Memory(u8, u16, U256),
    Hash(u16, u16),
    Calldata(u16),
    Env(u8),
    Storage(u8, u8),
    Log(u16, u16),
    Loop(u8),
    Raw(Vec<u8>),
}

fn word() -> impl Strategy<Value = U256> {
    prop_oneof![
        (0u64..300).prop_map(U256::from),
        any::<[u64; 4]>().prop_map(U256::from_limbs),
        Just(U256::MAX),
        (0usize..256).prop_map(|s| U256::from(1) << s),
        (0usize..256).prop_map(|s| U256::MAX >> s),
    ]
}

fn snippet() -> impl Strategy<Value = Snippet> {
    let binary = prop::sample::select(vec![
        ADD, MUL, SUB, DIV, SDIV, MOD, SMOD, EXP, SIGNEXTEND, LT, GT, SLT, SGT, EQ, AND, OR, XOR,
        BYTE, SHL, SHR, SAR,
    ]);
    prop_oneof![
        (0u8..=32, prop::collection::vec(any::<u8>(), 32)).prop_map(|(n, d)| Snippet::Push(n, d)),
        (binary, word(), word()).prop_map(|(o, a, b)| Snippet::Binary(o, a, b)),
        (prop::sample::select(vec![ISZERO, NOT]), word()).prop_map(|(o, a)| Snippet::Unary(o, a)),
        (
            prop::sample::select(vec![ADDMOD, MULMOD]),
            word(),
            word(),
            word()
        )
            .prop_map(|(o, a, b, c)| Snippet::Ternary(o, a, b, c)),
        (0u8..48).prop_map(Snippet::Shuffle),
        (
            prop::sample::select(vec![MLOAD, MSTORE, MSTORE8]),
            0u16..2048,
            word()
        )
            .prop_map(|(o, off, v)| Snippet::Memory(o, off, v)),
        (0u16..512, 0u16..300).prop_map(|(o, l)| Snippet::Hash(o, l)),
        (0u16..80).prop_map(Snippet::Calldata),
        prop::sample::select(vec![
            CALLVALUE,
            CALLDATASIZE,
            CODESIZE,
            PC,
            MSIZE,
            GAS,
            ADDRESS,
            CALLER,
            ORIGIN,
            NUMBER,
            TIMESTAMP,
            CHAINID,
            SELFBALANCE,
            BASEFEE,
            DIFFICULTY,
            PUSH0,
            RETURNDATASIZE
        ])
        .prop_map(Snippet::Env),
        (0u8..4, any::<u8>()).prop_map(|(k, v)| Snippet::Storage(k, v)),
        (0u16..256, 0u16..128).prop_map(|(o, l)| Snippet::Log(o, l)),
        (0u8..40).prop_map(Snippet::Loop),
        prop::collection::vec(any::<u8>(), 0..6).prop_map(Snippet::Raw),
    ]
}

fn push(code: &mut Vec<u8>, value: U256) {
    code.push(PUSH32);
    code.extend_from_slice(&value.to_be_bytes::<32>());
}

fn push_u16(code: &mut Vec<u8>, value: u16) {
    code.push(PUSH2);
    code.extend_from_slice(&value.to_be_bytes());
}

fn assemble(snippets: &[Snippet], ending: u8) -> Vec<u8> {
    let mut code = Vec::new();
    for s in snippets {
        match s {
            Snippet::Push(n, data) => {
                code.push(PUSH0 + n);
                code.extend_from_slice(&data[..*n as usize]);
            }
            Snippet::Binary(op, a, b) => {
                push(&mut code, *b);
                push(&mut code, *a);
                code.push(*op);
            }
            Snippet::Unary(op, a) => {
                push(&mut code, *a);
                code.push(*op);
            }
            Snippet::Ternary(op, a, b, c) => {
                push(&mut code, *c);
                push(&mut code, *b);
                push(&mut code, *a);
                code.push(*op);
            }
            Snippet::Shuffle(k) => code.push(match k % 3 {
                0 => DUP1 + k % 16,
                1 => SWAP1 + k % 16,
                _ => POP,
            }),
            Snippet::Memory(op, offset, value) => {
                if *op != MLOAD {
                    push(&mut code, *value);
                }
                push_u16(&mut code, *offset);
                code.push(*op);
            }
            Snippet::Hash(offset, len) => {
                push_u16(&mut code, *len);
                push_u16(&mut code, *offset);
                code.push(KECCAK256);
            }
            Snippet::Calldata(offset) => {
                push_u16(&mut code, *offset);
                code.push(CALLDATALOAD);
            }
            Snippet::Env(op) => code.push(*op),
            Snippet::Storage(key, value) => {
                code.extend_from_slice(&[PUSH1, *value, PUSH1, *key, SSTORE, PUSH1, *key, SLOAD]);
            }
            Snippet::Log(offset, len) => {
                push_u16(&mut code, *len);
                push_u16(&mut code, *offset);
                code.push(LOG0);
            }
            Snippet::Loop(n) => {
                // counter = n; do { counter -= 1 } while counter != 0
                code.extend_from_slice(&[PUSH1, *n]);
                let head = code.len();
                code.push(JUMPDEST);
                code.extend_from_slice(&[PUSH1, 1, SWAP1, SUB, DUP1]);
                push_u16(&mut code, head as u16);
                code.extend_from_slice(&[JUMPI, POP]);
            }
            Snippet::Raw(bytes) => code.extend_from_slice(bytes),
        }
    }
    match ending % 4 {
        0 => code.push(STOP),
        1 => code.extend_from_slice(&[PUSH1, 64, PUSH1, 0, RETURN]),
        2 => code.extend_from_slice(&[PUSH1, 32, PUSH1, 0, REVERT]),
        _ => {}
    }
    code
}

fn gas_limit() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(10_000_000u64),
        2 => 0u64..3_000,
        2 => 3_000u64..60_000,
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

thread_local! {
    static COMPILER: std::cell::RefCell<Compiler> =
        std::cell::RefCell::new(Compiler::new().expect("host ISA"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn structured_programs_match_the_interpreter(
        snippets in prop::collection::vec(snippet(), 0..40),
        ending in any::<u8>(),
        calldata in prop::collection::vec(any::<u8>(), 0..100),
        gas in gas_limit(),
        fork in 0usize..FORKS.len(),
    ) {
        let code = assemble(&snippets, ending);
        COMPILER.with(|c| compare(&mut c.borrow_mut(), &code, &calldata, gas, FORKS[fork]));
    }

    #[test]
    fn raw_bytes_match_the_interpreter(
        code in prop::collection::vec(any::<u8>(), 0..64),
        gas in gas_limit(),
        fork in 0usize..FORKS.len(),
    ) {
        COMPILER.with(|c| compare(&mut c.borrow_mut(), &code, &[], gas, FORKS[fork]));
    }
}

#[test]
fn a_counting_loop_matches_and_runs_native() {
    let mut compiler = Compiler::new().expect("host ISA");
    let code = assemble(&[Snippet::Loop(200), Snippet::Loop(3)], 1);
    let compiled = compiler.compile(&code, SpecId::CANCUN);
    let compiled = compiled.expect("compiles");
    assert_eq!(
        compiled.blocks.0, compiled.blocks.1,
        "every block translated"
    );
    assert!(compare(&mut compiler, &code, &[], 10_000_000, CANCUN));
    for gas in [3_000, 2_500, 100, 0] {
        compare(&mut compiler, &code, &[], gas, CANCUN);
    }
}

/// Most structured programs must run to their end in compiled code, not in the interpreter
/// after a bail (which would make the comparison above trivially true).
#[test]
fn structured_programs_mostly_run_native() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (prop::collection::vec(snippet(), 0..40), any::<u8>());
    let mut compiler = Compiler::new().expect("host ISA");
    let (mut native, total) = (0, 300);
    for _ in 0..total {
        let (snippets, ending) = strategy.new_tree(&mut runner).expect("generates").current();
        // Raw bytes make a program fail at once; leave them out here.
        let snippets: Vec<Snippet> = snippets
            .into_iter()
            .filter(|s| !matches!(s, Snippet::Raw(_)))
            .collect();
        let code = assemble(&snippets, ending);
        native += usize::from(compare(
            &mut compiler,
            &code,
            &[1, 2, 3],
            10_000_000,
            PRAGUE,
        ));
    }
    assert!(
        native * 2 > total,
        "only {native} of {total} programs ran natively to the end"
    );
}

/// A CALL stops compiled code with the interpreter's new-frame action, and compiled code is
/// entered again after it.
#[test]
fn a_call_suspends_compiled_code_and_resumes_after_it() {
    let mut compiler = Compiler::new().expect("host ISA");
    // CALL(gas, address 0x04 (identity), 0 value, no input, no output), then SSTORE the
    // success flag at slot 1, STOP.
    let code = [
        PUSH0, PUSH0, PUSH0, PUSH0, PUSH0, PUSH1, 4, GAS, CALL, PUSH1, 1, SSTORE, STOP,
    ];
    assert!(!compare(&mut compiler, &code, &[], 1_000_000, CANCUN));
    let (mut interpreter, mut host) = setup(&code, &[], 1_000_000, CANCUN);
    let spec = interpreter.runtime_flag.spec_id;
    let table = instruction_table::<EthInterpreter, Host>();
    let gas = gas_table(spec);
    let compiled = compiler.compile(&code, spec).expect("compiles");
    // SAFETY: compiled from this code for this spec.
    let (action, exit) = unsafe {
        gigas_jit::runtime::run_frame(compiled.function, &mut interpreter, &mut host, &table, &gas)
    };
    assert_eq!(exit, gigas_jit::runtime::Exit::Suspended, "{action:?}");
    assert!(matches!(action, InterpreterAction::NewFrame(_)));
    assert_eq!(interpreter.bytecode.pc(), 9);
    // What revm does when the child returns: push its success flag.
    use gigas_evm::revm::interpreter::interpreter_types::Jumps;
    assert!(interpreter.stack.push(U256::from(1)));
    let (action, exit) = unsafe {
        gigas_jit::runtime::run_frame(compiled.function, &mut interpreter, &mut host, &table, &gas)
    };
    assert_eq!(exit, gigas_jit::runtime::Exit::Done);
    assert!(matches!(action, InterpreterAction::Return(_)));
    let slot = host
        .journal_ref()
        .state
        .get(&PROGRAM_ADDRESS)
        .and_then(|a| a.storage.get(&U256::from(1)))
        .map(|s| s.present_value());
    assert_eq!(slot, Some(U256::from(1)));
}

/// DUPN, SWAPN and EXCHANGE (Amsterdam) carry a one-byte immediate. Compiled code must not run
/// that byte as an instruction of its own, under any fork: before Amsterdam the three halt,
/// from it they run with their immediate, valid or not, at the end of the code too, and a
/// jump may still land on an immediate that is a JUMPDEST byte.
#[test]
fn immediates_of_dupn_swapn_and_exchange_are_not_instructions() {
    let mut compiler = Compiler::new().expect("host ISA");
    // Seventeen distinct words, so that a wrong DUP or SWAP shows in the result.
    let mut base = Vec::new();
    for i in 1..=17u8 {
        base.extend_from_slice(&[PUSH1, i]);
    }
    // Returns the two top words.
    let ret = [PUSH0, MSTORE, PUSH1, 32, MSTORE, PUSH1, 64, PUSH0, RETURN];
    let mut programs: Vec<Vec<u8>> = Vec::new();
    // 0x80 decodes to 17 for DUPN and SWAPN, and is DUP1 as an opcode; 0x8e decodes to the
    // pair (1, 2) for EXCHANGE and is SWAP15 as an opcode.
    for (op, immediate) in [(DUPN, 0x80), (SWAPN, 0x80), (EXCHANGE, 0x8e), (DUPN, 0xff)] {
        programs.push([&base[..], &[op, immediate], &ret[..]].concat());
        // The same in a loop body entered by a jump, after a CALL-free block of its own.
        programs.push(
            [
                &base[..],
                &[PUSH1, 40, JUMP],
                &[INVALID; 3],
                &[JUMPDEST, op, immediate],
                &ret[..],
            ]
            .concat(),
        );
    }
    // Invalid immediates halt; a JUMPDEST byte as the immediate is still a jump destination.
    programs.push([&base[..], &[DUPN, JUMPDEST, STOP]].concat());
    programs.push(
        [
            &base[..],
            &[PUSH1, 38, JUMP, DUPN, JUMPDEST, PUSH1, 1, STOP],
        ]
        .concat(),
    );
    programs.push([&base[..], &[SWAPN, PUSH1, 1, STOP]].concat());
    // At the end of the code, the immediate is the padding's zero.
    for op in [DUPN, SWAPN, EXCHANGE] {
        programs.push([&base[..], &[op]].concat());
    }
    for code in &programs {
        for fork in [PRAGUE, OSAKA, AMSTERDAM] {
            for gas in [1_000_000, 60, 0] {
                compare(&mut compiler, code, &[], gas, fork);
            }
        }
    }
}
