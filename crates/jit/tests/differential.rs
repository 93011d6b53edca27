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
use gigas_jit::analysis::{active, gas_table};
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
        gigas_jit::runtime::run_frame(&compiled, &mut interpreter, &mut host, &table, &gas)
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

/// The snippets whose instructions `spec` has (PUSH0 from Shanghai, the shifts from
/// Petersburg, ...).
fn active_in(snippets: Vec<Snippet>, spec: SpecId) -> Vec<Snippet> {
    snippets
        .into_iter()
        .filter(|s| match s {
            Snippet::Push(0, _) => active(PUSH0, spec),
            Snippet::Binary(op, ..) | Snippet::Env(op) => active(*op, spec),
            _ => true,
        })
        .collect()
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
        only_active in any::<bool>(),
    ) {
        let fork = FORKS[fork];
        // Half the programs keep instructions their fork does not have yet (they halt there);
        // the others run deep on old forks too.
        let snippets = if only_active { active_in(snippets, fork.spec) } else { snippets };
        let code = assemble(&snippets, ending);
        COMPILER.with(|c| compare(&mut c.borrow_mut(), &code, &calldata, gas, fork));
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
        compiled.blocks().0,
        compiled.blocks().1,
        "every block translated"
    );
    assert!(compare(&mut compiler, &code, &[], 10_000_000, CANCUN));
    for gas in [3_000, 2_500, 100, 0] {
        compare(&mut compiler, &code, &[], gas, CANCUN);
    }
}

/// Most structured programs must run to their end in compiled code, not in the interpreter
/// after a bail (which would make the comparison above trivially true); on old forks, with
/// the instructions they do not have left out, about as many as on Prague.
#[test]
fn structured_programs_mostly_run_native() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (prop::collection::vec(snippet(), 0..40), any::<u8>());
    let mut compiler = Compiler::new().expect("host ISA");
    let total = 300;
    let programs: Vec<(Vec<Snippet>, u8)> = (0..total)
        .map(|_| {
            let (snippets, ending) = strategy.new_tree(&mut runner).expect("generates").current();
            // Raw bytes make a program fail at once; leave them out here.
            let snippets = snippets
                .into_iter()
                .filter(|s| !matches!(s, Snippet::Raw(_)))
                .collect();
            (snippets, ending)
        })
        .collect();
    let mut native_on = |fork: Fork| {
        let mut native = 0;
        for (snippets, ending) in &programs {
            let snippets = active_in(snippets.clone(), fork.spec);
            // Before Byzantium there is no REVERT: end with STOP or RETURN instead.
            let ending = if active(REVERT, fork.spec) {
                *ending
            } else {
                ending & 1
            };
            let code = assemble(&snippets, ending);
            native += usize::from(compare(&mut compiler, &code, &[1, 2, 3], 10_000_000, fork));
        }
        native
    };
    let prague = native_on(PRAGUE);
    assert!(
        prague * 2 > total,
        "only {prague} of {total} programs ran natively to the end"
    );
    for fork in [FRONTIER, BYZANTIUM] {
        let native = native_on(fork);
        assert!(
            native * 10 >= prague * 9,
            "{native} of {total} programs ran natively to the end under {:?}, {prague} under Prague",
            fork.spec
        );
    }
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
        gigas_jit::runtime::run_frame(&compiled, &mut interpreter, &mut host, &table, &gas)
    };
    assert_eq!(exit, gigas_jit::runtime::Exit::Suspended, "{action:?}");
    assert!(matches!(action, InterpreterAction::NewFrame(_)));
    assert_eq!(interpreter.bytecode.pc(), 9);
    // What revm does when the child returns: push its success flag.
    use gigas_evm::revm::interpreter::interpreter_types::Jumps;
    assert!(interpreter.stack.push(U256::from(1)));
    let (action, exit) = unsafe {
        gigas_jit::runtime::run_frame(&compiled, &mut interpreter, &mut host, &table, &gas)
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

/// Every fork, on programs that reach what changed between forks: instructions added later
/// (they halt before their fork), gas of SLOAD, BALANCE, EXP, SSTORE and memory, and the
/// shifts that Byzantium and earlier do not have.
#[test]
fn fork_specific_instructions_match_the_interpreter_on_every_fork() {
    let mut compiler = Compiler::new().expect("host ISA");
    let two = |op: u8| vec![PUSH1, 0x81, PUSH1, 3, op, PUSH1, 0, SSTORE, STOP];
    let mut programs: Vec<Vec<u8>> = [SHL, SHR, SAR, EXP, ADD, BYTE, SIGNEXTEND]
        .into_iter()
        .map(two)
        .collect();
    for op in [
        RETURNDATASIZE,
        CHAINID,
        SELFBALANCE,
        BASEFEE,
        PUSH0,
        BLOBBASEFEE,
        GAS,
    ] {
        programs.push(vec![op, PUSH1, 0, SSTORE, STOP]);
    }
    programs.extend([
        vec![PUSH1, 1, SLOAD, PUSH1, 2, SSTORE, STOP],
        vec![ADDRESS, BALANCE, PUSH1, 0, SSTORE, STOP],
        vec![PUSH1, 1, PUSH1, 0, TSTORE, PUSH1, 0, TLOAD, STOP],
        vec![PUSH1, 32, PUSH1, 0, PUSH1, 64, MCOPY, STOP],
        vec![PUSH1, 1, CLZ, STOP],
        vec![PUSH1, 1, PUSH1, 0, MSTORE, PUSH1, 32, PUSH1, 0, REVERT],
        // SSTORE refunds and net metering: set, reset, clear.
        vec![
            PUSH1, 5, PUSH1, 1, SSTORE, PUSH1, 0, PUSH1, 1, SSTORE, PUSH1, 0, PUSH1, 2, SSTORE,
            STOP,
        ],
        // A long loop of arithmetic and memory, to run well inside compiled blocks.
        assemble(
            &[
                Snippet::Memory(MSTORE, 100, U256::MAX),
                Snippet::Loop(30),
                Snippet::Memory(MLOAD, 90, U256::ZERO),
                Snippet::Hash(0, 200),
            ],
            1,
        ),
    ]);
    for code in &programs {
        for fork in FORKS {
            for gas in [1_000_000, 25_000, 2_300, 30] {
                compare(&mut compiler, code, &[], gas, fork);
            }
        }
    }
}

/// A computed JUMP or JUMPI (its target not a pushed constant) to a JUMPDEST byte inside PUSH
/// data, or to an offset at or above 2^64 (whose low 64 bits may name a real JUMPDEST), is an
/// invalid jump; so is the same target pushed as a constant.
#[test]
fn jumps_into_push_data_and_past_two_to_the_64_are_invalid() {
    let mut compiler = Compiler::new().expect("host ISA");
    // 0: JUMPDEST (a target whose low limb is 0 would land here), 1: PUSH1 0, 3: CALLDATALOAD,
    // 4: JUMP, 5: PUSH2 0x5b5b (JUMPDEST bytes at 6 and 7), 8: JUMPDEST, 9: PUSH1 1,
    // 11: PUSH1 0, 13: SSTORE, 14: STOP
    let computed_jump = [
        JUMPDEST,
        PUSH1,
        0,
        CALLDATALOAD,
        JUMP,
        PUSH2,
        JUMPDEST,
        JUMPDEST,
        JUMPDEST,
        PUSH1,
        1,
        PUSH1,
        0,
        SSTORE,
        STOP,
    ];
    // The same with JUMPI, taken: 0: JUMPDEST, 1: PUSH1 1, 3: PUSH1 0, 5: CALLDATALOAD,
    // 6: JUMPI, 7: STOP, 8: PUSH2 0x5b5b (JUMPDEST bytes at 9 and 10), 11: JUMPDEST, ...
    let computed_jumpi = [
        JUMPDEST,
        PUSH1,
        1,
        PUSH1,
        0,
        CALLDATALOAD,
        JUMPI,
        STOP,
        PUSH2,
        JUMPDEST,
        JUMPDEST,
        JUMPDEST,
        PUSH1,
        1,
        PUSH1,
        0,
        SSTORE,
        STOP,
    ];
    let two64 = U256::from(1) << 64;
    let targets = |valid: u64, in_push_data: [u64; 2]| {
        let valid = U256::from(valid);
        vec![
            valid,
            U256::from(in_push_data[0]),
            U256::from(in_push_data[1]),
            U256::ZERO,
            two64,
            two64 + valid,
            two64 + U256::from(in_push_data[0]),
            (U256::from(1) << 128) + valid,
            (U256::from(1) << 192) + valid,
            (U256::from(1) << 255) + valid,
            U256::from(1u64 << 63) + valid,
            U256::from(1u64 << 32) + valid,
            U256::from(u64::MAX),
            U256::MAX,
        ]
    };
    for fork in [FRONTIER, BYZANTIUM, CANCUN] {
        for (code, valid, in_push_data) in [
            (&computed_jump[..], 8, [6, 7]),
            (&computed_jumpi[..], 11, [9, 10]),
        ] {
            for target in targets(valid, in_push_data) {
                let native = compare(
                    &mut compiler,
                    code,
                    &target.to_be_bytes::<32>(),
                    100_000,
                    fork,
                );
                // The valid jump runs to the end in compiled code, through the jump table.
                assert_eq!(native, target == U256::from(valid), "{target:#x}");
            }
        }
        // The same targets pushed as constants, which compiled code resolves while compiling:
        // 0: PUSH32 target, 33: JUMP, 34: PUSH2 0x5b5b (JUMPDEST bytes at 35 and 36),
        // 37: JUMPDEST, 38: STOP; and 0: PUSH1 1, 2: PUSH32 target, 35: JUMPI, 36: STOP,
        // 37: PUSH2 0x5b5b (38 and 39), 40: JUMPDEST, 41: STOP.
        let tail = [PUSH2, JUMPDEST, JUMPDEST, JUMPDEST, STOP];
        for target in targets(37, [35, 36]) {
            let code = [&[PUSH32][..], &target.to_be_bytes::<32>(), &[JUMP], &tail].concat();
            compare(&mut compiler, &code, &[], 100_000, fork);
        }
        for target in targets(40, [38, 39]) {
            let code = [
                &[PUSH1, 1, PUSH32][..],
                &target.to_be_bytes::<32>(),
                &[JUMPI, STOP],
                &tail,
            ]
            .concat();
            compare(&mut compiler, &code, &[], 100_000, fork);
        }
    }
}

/// A compiled parent that reads and writes its memory inline (inside memory it has paid for)
/// before and after a CALL whose compiled child grows its own memory by 1 MiB: the shared
/// memory buffer moves under the parent while it is suspended, and the child's return data
/// lands in the parent's memory. The block must end as it does interpreted, and the frames
/// must really have run compiled.
#[test]
fn parent_memory_survives_a_child_that_grows_memory_by_a_mebibyte() {
    use alloy_primitives::{address, Address};
    use gigas_evm::executor::{execute_block, PlainEvm};
    use gigas_evm::jit::{CodeCache, JitMode};
    use gigas_evm::revm::state::{AccountInfo, Bytecode};
    use std::sync::Arc;

    const CHILD: Address = address!("00000000000000000000000000000000000c41d0");
    let word = |byte: u8| {
        let mut code = vec![PUSH32];
        code.extend_from_slice(&[byte; 32]);
        code
    };
    // Child: MSTORE 0x33.. at 0 (expands to one word), MSTORE 1 at 1 MiB - 32 (expands to
    // 1 MiB, moving the shared buffer), MSTORE 0x44.. at 32 inline, then RETURN its first
    // 64 bytes.
    let child = [
        word(0x33),
        vec![PUSH0, MSTORE, PUSH1, 1, PUSH3, 0x0f, 0xff, 0xe0, MSTORE],
        word(0x44),
        vec![PUSH1, 32, MSTORE, PUSH1, 64, PUSH0, RETURN],
    ]
    .concat();
    // Parent: MSTORE 0x11.. at 64 (expands memory to 96 bytes), MSTORE 0x22.. at 0 inline,
    // MLOAD 0 inline; CALL the child with all gas, its output to [32, 64); then MLOAD 0, 32
    // and 64 inline, MSTORE 0x55.. at 64 inline, SSTORE the three loads at slots 1, 2, 3 and
    // LOG0 the 96 bytes.
    let mut parent = [
        word(0x11),
        vec![PUSH1, 64, MSTORE],
        word(0x22),
        vec![PUSH0, MSTORE, PUSH0, MLOAD, POP],
        vec![PUSH1, 32, PUSH1, 32, PUSH0, PUSH0, PUSH0, PUSH20],
    ]
    .concat();
    parent.extend_from_slice(CHILD.as_slice());
    parent.extend([
        GAS, CALL, PUSH1, 4, SSTORE, PUSH0, MLOAD, PUSH1, 32, MLOAD, PUSH1, 64, MLOAD,
    ]);
    parent.extend(word(0x55));
    parent.extend([
        PUSH1, 64, MSTORE, PUSH1, 3, SSTORE, PUSH1, 2, SSTORE, PUSH1, 1, SSTORE, PUSH1, 96, PUSH0,
        LOG0, STOP,
    ]);

    let run = |mode: JitMode| {
        let cache = CodeCache::new(mode);
        let (block, mut db) =
            gigas_evm::program::call_block(Bytes::from(parent.clone()), Bytes::new(), 5_000_000);
        let bytecode = Bytecode::new_raw(Bytes::from(child.clone()));
        db.insert_account_info(
            CHILD,
            AccountInfo {
                code_hash: bytecode.hash_slow(),
                code: Some(bytecode),
                ..Default::default()
            },
        );
        let mut evm = PlainEvm::with_jit(db, &block, Arc::clone(&cache));
        let outcome = execute_block(&mut evm, &block).expect("executes");
        let db = evm.into_db();
        let mut storage: Vec<(U256, U256)> = db
            .cache
            .accounts
            .get(&PROGRAM_ADDRESS)
            .map(|a| a.storage.iter().map(|(k, v)| (*k, *v)).collect())
            .unwrap_or_default();
        storage.sort();
        (outcome.receipts, storage, cache.stats().snapshot())
    };
    let (receipts, storage, _) = run(JitMode::Off);
    assert!(receipts[0].success, "{receipts:?}");
    let words = |byte: u8| U256::from_be_bytes([byte; 32]);
    assert_eq!(
        storage,
        vec![
            (U256::from(1), words(0x22)),
            (U256::from(2), words(0x33)),
            (U256::from(3), words(0x11)),
            (U256::from(4), U256::from(1)),
        ]
    );
    let (jit_receipts, jit_storage, counts) = run(JitMode::Eager);
    assert_eq!(jit_receipts, receipts);
    assert_eq!(jit_storage, storage);
    assert_eq!(
        (counts.compiled, counts.compiled_frames, counts.suspensions),
        (2, 2, 1),
        "both frames compiled; the parent suspended at the CALL"
    );
    assert_eq!(
        counts.bailed_frames, 0,
        "no frame handed to the interpreter"
    );
}
