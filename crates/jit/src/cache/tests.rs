//! The eviction policy, the bounds and the lifetime guarantee of the code cache.

use super::*;
use alloy_primitives::keccak256;
use gigas_evm::executor::BlockContext;
use prometheus_client::registry::Registry;
use revm::bytecode::opcode::*;
use revm::database::{CacheDB, EmptyDB};
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::{instruction_table, InterpreterAction};
use revm::primitives::U256;

const CANCUN: u64 = 1_720_000_000;

/// Code that returns the one byte `value`, after `padding` GAS/POP pairs that make its
/// machine code longer (each GAS is a call out of compiled code).
fn program(value: u8, padding: usize) -> Vec<u8> {
    let mut code = Vec::new();
    for _ in 0..padding {
        code.extend([GAS, POP]);
    }
    code.extend([PUSH1, value, PUSH0, MSTORE8, PUSH1, 1, PUSH0, RETURN]);
    code
}

/// What `compiled` (compiled from `code`) returns when run as a frame on its own.
fn run(code: &[u8], compiled: &CompiledCode) -> Vec<u8> {
    let (mut interpreter, mut host) =
        gigas_evm::program::frame(code, &[], U256::ZERO, 100_000, CANCUN);
    let spec = interpreter.runtime_flag.spec_id;
    let table = instruction_table::<EthInterpreter, BlockContext<CacheDB<EmptyDB>>>();
    // SAFETY: compiled from this code for this spec.
    let (action, _) = unsafe {
        crate::runtime::run_frame(
            compiled,
            &mut interpreter,
            &mut host,
            &table,
            &crate::analysis::gas_table(spec),
        )
    };
    match action {
        InterpreterAction::Return(r) => r.output.to_vec(),
        other => panic!("{other:?}"),
    }
}

fn key(code: &[u8]) -> Key {
    (keccak256(code), SpecId::CANCUN)
}

/// A table under `budget` and the compiler feeding it, with shared counters.
struct Fixture {
    stats: JitStats,
    config: CacheConfig,
    table: Table,
    compiler: Compiler,
}

impl Fixture {
    fn new(budget_bytes: u64) -> Self {
        let stats = JitStats::default();
        let compiler = Compiler::with_metrics(stats.memory.clone()).expect("host ISA");
        Self {
            table: Table::new(&stats),
            config: CacheConfig {
                budget_bytes,
                ..CacheConfig::new(JitMode::Eager)
            },
            stats,
            compiler,
        }
    }

    fn compile(&mut self, code: &[u8]) -> CompiledCode {
        self.compiler
            .compile(code, SpecId::CANCUN)
            .expect("compiles")
    }

    /// Admits `code` as the compiler thread would, with `credit` gas.
    fn admit(&mut self, code: &[u8], credit: u64) -> Option<CompiledCode> {
        let compiled = self.compile(code);
        let key = key(code);
        self.table.set(key, Some(Entry::Pending { gas: credit }));
        self.table
            .admit(key, compiled, credit, &self.config, &self.stats)
    }

    fn resident(&self, code: &[u8]) -> bool {
        matches!(self.table.entries.get(&key(code)), Some(Entry::Ready(_)))
    }
}

fn page() -> u64 {
    crate::compiler::page_size()
}

/// A frame that holds compiled code keeps it mapped, and running, after the cache evicted it;
/// the code is unmapped when the frame drops its handle, and not before. Code that no frame
/// holds is unmapped as it is evicted.
#[test]
fn a_frame_keeps_evicted_code_alive_until_it_drops_it() {
    let (a, b, c) = (program(1, 0), program(2, 0), program(3, 0));
    let mut f = Fixture::new(page());
    let held = f.admit(&a, 0).expect("fits");
    assert_eq!(
        held.mapped_bytes(),
        page(),
        "a small contract takes one page"
    );
    // The "frame" holds `held`; compiling `b` evicts `a` from the cache.
    f.admit(&b, 0).expect("fits");
    let counts = f.stats.snapshot();
    assert_eq!((counts.evictions, counts.evicted_in_use), (1, 1));
    assert!(!f.resident(&a) && f.resident(&b));
    assert_eq!(
        (counts.mapped_modules, counts.freed_modules),
        (2, 0),
        "evicted code a frame holds stays mapped"
    );
    assert_eq!(counts.resident_bytes, page());
    assert_eq!(counts.mapped_bytes, 2 * page());
    // The evicted code still runs.
    assert_eq!(run(&a, &held), vec![1]);
    let also_held = held.clone();
    drop(held);
    assert_eq!(
        f.stats.snapshot().freed_modules,
        0,
        "a second handle keeps it"
    );
    assert_eq!(run(&a, &also_held), vec![1]);
    drop(also_held);
    let counts = f.stats.snapshot();
    assert_eq!((counts.mapped_modules, counts.freed_modules), (1, 1));
    assert_eq!(counts.mapped_bytes, page());
    // `b` is held by the cache alone: evicting it unmaps it at once.
    f.admit(&c, 0).expect("fits");
    let counts = f.stats.snapshot();
    assert_eq!(
        (
            counts.evictions,
            counts.mapped_modules,
            counts.freed_modules
        ),
        (2, 1, 2)
    );
    assert_eq!(counts.evicted_in_use, 1, "nothing held `b`");
    // Dropping the table drops the cache's handles: everything is unmapped.
    drop(f.table);
    let counts = f.stats.snapshot();
    assert_eq!((counts.mapped_modules, counts.mapped_bytes), (0, 0));
    assert_eq!(counts.freed_modules, 3);
}

/// The contract with the least gas run per byte goes first; the one that ran stays.
#[test]
fn eviction_takes_the_least_gas_per_byte() {
    let (a, b, c) = (program(1, 0), program(2, 0), program(3, 0));
    let mut f = Fixture::new(2 * page());
    let ran = f.admit(&a, 0).expect("fits");
    let idle = f.admit(&b, 0).expect("fits");
    ran.record_gas(1_000_000);
    idle.record_gas(10);
    drop((ran, idle));
    f.admit(&c, 0).expect("fits");
    assert!(f.resident(&a), "the contract that ran was evicted");
    assert!(!f.resident(&b) && f.resident(&c));
    assert_eq!(f.stats.snapshot().evictions, 1);
}

/// Worth is per byte: a large contract must run proportionally more gas to stay than a small
/// one.
#[test]
fn eviction_weighs_gas_by_size() {
    let (small, large, new) = (program(1, 0), program(2, 400), program(3, 0));
    let mut f = Fixture::new(u64::MAX);
    let pages = f.compile(&large).mapped_bytes() / page();
    assert!(pages >= 3, "the large contract takes {pages} pages");
    f.config.budget_bytes = (pages + 1) * page();
    let large_code = f.admit(&large, 0).expect("fits");
    let small_code = f.admit(&small, 0).expect("fits");
    // Twice the gas of the small one, on at least three times the bytes.
    large_code.record_gas(2_000);
    small_code.record_gas(1_000);
    drop((large_code, small_code));
    f.admit(&new, 0).expect("fits");
    assert!(!f.resident(&large), "the large contract stayed");
    assert!(f.resident(&small) && f.resident(&new));
}

/// Aging: a contract that ran a lot long ago gives way to contracts that run now. Without
/// aging, its gas would outweigh each newcomer's for ever.
#[test]
fn old_gas_fades_as_new_code_comes_in() {
    let mut f = Fixture::new(4 * page());
    let old = program(0, 0);
    f.admit(&old, 0).expect("fits").record_gas(1_000_000);
    let mut evicted_after = None;
    for i in 1..=40u8 {
        // Each newcomer made itself hot with 100,000 gas, and runs that much again.
        f.admit(&program(i, 0), 100_000)
            .expect("fits")
            .record_gas(100_000);
        if !f.resident(&old) {
            evicted_after = Some(i);
            break;
        }
    }
    let evicted_after = evicted_after.expect("the old contract was never evicted");
    assert!(
        evicted_after > 4,
        "the old contract's gas did not count: evicted after {evicted_after} newcomers"
    );
    assert!(f.table.resident_bytes <= f.config.budget_bytes);
}

/// A contract larger than the whole budget is not kept, and not compiled again.
#[test]
fn a_contract_over_the_budget_is_not_kept() {
    let small = program(1, 0);
    let large = program(2, 400);
    let mut f = Fixture::new(page());
    f.admit(&small, 0).expect("fits");
    assert!(f.admit(&large, 7).is_none());
    assert!(
        f.resident(&small),
        "nothing evicted for a contract that cannot fit"
    );
    assert!(matches!(
        f.table.entries.get(&key(&large)),
        Some(Entry::Failed { gas: 7 })
    ));
    let counts = f.stats.snapshot();
    assert_eq!((counts.failed, counts.evictions), (1, 0));
    assert_eq!(
        (counts.mapped_modules, counts.freed_modules),
        (1, 1),
        "its code was unmapped at once"
    );
}

/// The budget holds through a long run of admissions, and the running totals match the
/// entries.
#[test]
fn resident_bytes_never_exceed_the_budget() {
    let mut f = Fixture::new(5 * page());
    for i in 0..60u8 {
        let padding = (i as usize % 7) * 60;
        let code = f.admit(&program(i, padding), u64::from(i) * 1_000);
        if let Some(code) = code {
            code.record_gas(u64::from(i % 5) * 10_000);
        }
        assert!(f.table.resident_bytes <= f.config.budget_bytes);
        let recount = f.table.recount(f.config.budget_bytes);
        assert_eq!(recount.resident_bytes, f.table.resident_bytes);
        assert_eq!(recount.resident_contracts, f.table.resident);
    }
    let counts = f.stats.snapshot();
    assert!(counts.evictions > 0);
    assert_eq!(counts.mapped_bytes, f.table.resident_bytes);
}

/// The table of contracts counted towards hotness stays within its bound, and keeps the
/// contracts that came closest to hot.
#[test]
fn the_hotness_table_is_bounded() {
    let cache = CodeCache::with_config(CacheConfig {
        hotness: Hotness {
            calls: 1,
            gas: 1_000_000,
        },
        max_tracked: 64,
        ..CacheConfig::new(JitMode::On)
    });
    let warm = program(0, 0);
    assert!(cache
        .lookup(keccak256(&warm), &warm, SpecId::CANCUN)
        .is_none());
    cache.spent(keccak256(&warm), &warm, SpecId::CANCUN, 900_000);
    for i in 0..200u32 {
        let hash = keccak256(i.to_be_bytes());
        assert!(cache.lookup(hash, &[STOP], SpecId::CANCUN).is_none());
        let residency = cache.residency().expect("invariants hold");
        assert!(residency.tracked_contracts <= 64);
    }
    // The warm contract survived the sweeps (its gas halved at each): enough more gas makes
    // it hot and compiled.
    cache.spent(keccak256(&warm), &warm, SpecId::CANCUN, 1_000_000);
    cache.wait_for_compiles();
    assert_eq!(cache.stats().compiled.get(), 1);
    let code = cache
        .lookup(keccak256(&warm), &warm, SpecId::CANCUN)
        .expect("compiled");
    assert_eq!(run(&warm, &code), vec![0]);
}

/// Requests beyond the compile queue's bound are dropped and counted; the contracts are
/// counted again from zero, and compiled once hot again.
#[test]
fn the_compile_queue_is_bounded() {
    let cache = CodeCache::with_config(CacheConfig {
        hotness: Hotness { calls: 1, gas: 0 },
        max_queued: 1,
        ..CacheConfig::new(JitMode::On)
    });
    let programs: Vec<Vec<u8>> = (0..50u8).map(|i| program(i, 200)).collect();
    for code in &programs {
        assert!(cache
            .lookup(keccak256(code), code, SpecId::CANCUN)
            .is_none());
    }
    cache.wait_for_compiles();
    let counts = cache.stats().snapshot();
    assert!(counts.dropped_requests > 0, "{counts:?}");
    assert_eq!(counts.compiled + counts.dropped_requests, 50, "{counts:?}");
    let residency = cache.residency().expect("invariants hold");
    assert_eq!(residency.pending_contracts, 0);
    // A dropped contract is requested again at its next call.
    for code in &programs {
        cache.lookup(keccak256(code), code, SpecId::CANCUN);
        cache.wait_for_compiles();
    }
    for code in &programs {
        let compiled = cache
            .lookup(keccak256(code), code, SpecId::CANCUN)
            .expect("compiled");
        assert_eq!(run(code, &compiled), vec![code[code.len() - 7]]);
    }
}

/// A panic in the compiler is caught on the compiler thread and counted as a failed compile;
/// the thread lives on and compiles the next contract.
#[test]
fn a_compiler_panic_leaves_the_compiler_thread_alive() {
    let cache = CodeCache::new(JitMode::Eager);
    let poison = crate::compiler::PANIC_FOR_TESTS;
    assert!(cache
        .lookup(keccak256(poison), poison, SpecId::CANCUN)
        .is_none());
    let counts = cache.stats().snapshot();
    assert_eq!((counts.compile_panics, counts.failed), (1, 1));
    // Remembered as not compilable: not tried again.
    assert!(cache
        .lookup(keccak256(poison), poison, SpecId::CANCUN)
        .is_none());
    assert_eq!(cache.stats().snapshot().compile_panics, 1);
    let code = program(9, 0);
    let compiled = cache
        .lookup(keccak256(&code), &code, SpecId::CANCUN)
        .expect("the compiler thread still compiles");
    assert_eq!(run(&code, &compiled), vec![9]);
    let mut registry = Registry::default();
    cache.stats().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    assert!(text.contains("gigas_jit_compile_panics_total 1"), "{text}");
}

/// The budget, evictions and resident bytes are in `/metrics`.
#[test]
fn budget_and_evictions_are_in_metrics() {
    let cache = CodeCache::with_config(CacheConfig {
        budget_bytes: page(),
        ..CacheConfig::new(JitMode::Eager)
    });
    for i in 0..3u8 {
        let code = program(i, 0);
        let compiled = cache
            .lookup(keccak256(&code), &code, SpecId::CANCUN)
            .expect("compiled");
        assert_eq!(run(&code, &compiled), vec![i]);
    }
    let mut registry = Registry::default();
    cache.stats().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    for line in [
        format!("gigas_jit_budget_bytes {}", page()),
        format!("gigas_jit_resident_code_bytes {}", page()),
        "gigas_jit_evictions_total 2".to_string(),
        "gigas_jit_freed_code_modules_total 2".to_string(),
        "gigas_jit_resident_contracts 1".to_string(),
        "gigas_jit_contracts_compiled_total 3".to_string(),
    ] {
        assert!(text.contains(&line), "{line} missing from\n{text}");
    }
}

/// With a hot list, `On` compiles a listed contract at its first call, whatever the gas
/// threshold; unlisted contracts still wait for the threshold (never, when it cannot be
/// reached).
#[test]
fn a_hot_list_compiles_its_contracts_at_their_first_call() {
    let listed = program(1, 0);
    let unlisted = program(2, 0);
    let hot = || HotList::of([keccak256(&listed)]);
    let list_only = CodeCache::with_hot_list(
        CacheConfig {
            hotness: Hotness::NEVER,
            ..CacheConfig::new(JitMode::On)
        },
        hot(),
    );
    assert_eq!(list_only.hot_list().map(HotList::len), Some(1));
    assert!(list_only
        .lookup(keccak256(&listed), &listed, SpecId::CANCUN)
        .is_none());
    for _ in 0..5 {
        assert!(list_only
            .lookup(keccak256(&unlisted), &unlisted, SpecId::CANCUN)
            .is_none());
        list_only.spent(keccak256(&unlisted), &unlisted, SpecId::CANCUN, 10_000_000);
    }
    list_only.wait_for_compiles();
    assert_eq!(list_only.stats().compiled.get(), 1);
    let code = list_only
        .lookup(keccak256(&listed), &listed, SpecId::CANCUN)
        .expect("the listed contract is compiled after its first call");
    assert_eq!(run(&listed, &code), vec![1]);
    assert!(list_only
        .lookup(keccak256(&unlisted), &unlisted, SpecId::CANCUN)
        .is_none());
    assert_eq!(list_only.stats().compiled.get(), 1);
    list_only.residency().expect("invariants hold");

    // With a threshold that can be reached, the list comes first and the rest follow.
    let both = CodeCache::with_hot_list(
        CacheConfig {
            hotness: Hotness {
                calls: 1,
                gas: 50_000,
            },
            ..CacheConfig::new(JitMode::On)
        },
        hot(),
    );
    assert!(both
        .lookup(keccak256(&listed), &listed, SpecId::CANCUN)
        .is_none());
    assert!(both
        .lookup(keccak256(&unlisted), &unlisted, SpecId::CANCUN)
        .is_none());
    both.wait_for_compiles();
    assert_eq!(both.stats().compiled.get(), 1, "only the listed one so far");
    both.spent(keccak256(&unlisted), &unlisted, SpecId::CANCUN, 60_000);
    both.wait_for_compiles();
    assert_eq!(both.stats().compiled.get(), 2);
    let code = both
        .lookup(keccak256(&unlisted), &unlisted, SpecId::CANCUN)
        .expect("the unlisted contract is compiled once past the threshold");
    assert_eq!(run(&unlisted, &code), vec![2]);
    both.residency().expect("invariants hold");
}
