//! Faults below compiled code: a panic in the database (or the host, or a revm instruction)
//! while a compiled frame runs must reach the caller as an ordinary Rust panic, exactly as it
//! does from the interpreter, and not abort the process on its way through the native frames.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::sync::Arc;

use alloy_primitives::{Address, Bytes, B256, U256};
use gigas_evm::executor::{execute_block, PlainEvm};
use gigas_evm::jit::{CodeCache, JitMode};
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::revm::primitives::{AddressMap, StorageKey, StorageValue};
use gigas_evm::revm::state::{Account, AccountInfo, Bytecode};
use gigas_evm::revm::{Database, DatabaseCommit};

/// Set in the child process that runs the panicking scenario on its own.
const CHILD: &str = "GIGAS_JIT_PANIC_CHILD";
/// What the database panics with.
const MESSAGE: &str = "database failure under compiled code";
/// The slot whose read panics.
const POISONED_SLOT: u64 = 7;

/// An in-memory database whose read of one storage slot panics, as a broken backend might.
#[derive(Clone)]
struct PanickingDb(CacheDB<EmptyDB>);

impl Database for PanickingDb {
    type Error = <CacheDB<EmptyDB> as Database>::Error;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, Self::Error> {
        self.0.basic(address)
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, Self::Error> {
        self.0.code_by_hash(code_hash)
    }

    fn storage(
        &mut self,
        address: Address,
        index: StorageKey,
    ) -> Result<StorageValue, Self::Error> {
        if index == U256::from(POISONED_SLOT) {
            panic!("{MESSAGE}");
        }
        self.0.storage(address, index)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, Self::Error> {
        self.0.block_hash(number)
    }
}

impl DatabaseCommit for PanickingDb {
    fn commit(&mut self, changes: AddressMap<Account>) {
        self.0.commit(changes);
    }
}

/// Runs a transaction whose compiled code reads the poisoned slot (SLOAD runs through the
/// interpreter's instruction function, called from compiled code).
fn run_poisoned_transaction(cache: &Arc<CodeCache>) {
    let code = Bytes::from(vec![PUSH1, POISONED_SLOT as u8, SLOAD, PUSH0, SSTORE, STOP]);
    let (block, db) = gigas_evm::program::call_block(code, Bytes::new(), 1_000_000);
    let mut evm = PlainEvm::with_jit(PanickingDb(db), &block, Arc::clone(cache));
    let _ = execute_block(&mut evm, &block);
}

/// The panicking scenario alone, for the child process: the panic ends this test as a failed
/// test (exit code 101), unless it aborts the process on its way.
#[test]
#[ignore = "run as the child process of a_panic_under_compiled_code_unwinds_to_the_caller"]
fn panic_child() {
    if std::env::var_os(CHILD).is_some() {
        run_poisoned_transaction(&CodeCache::new(JitMode::Eager));
    }
}

#[test]
fn a_panic_under_compiled_code_unwinds_to_the_caller() {
    // First in a child process, so that an abort shows up as a failed assertion here instead
    // of killing this test binary.
    let exe = std::env::current_exe().expect("test binary");
    let output = Command::new(exe)
        .args(["--exact", "panic_child", "--ignored", "--test-threads=1"])
        .env(CHILD, "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("spawn child");
    // libtest reports the failed test's panic message on stdout, the runtime's on stderr.
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            (output.status.code(), output.status.signal()),
            (Some(101), None),
            "the child must end with an ordinary panic (exit code 101), not a signal; \
             its output:\n{report}"
        );
    }
    assert!(report.contains(MESSAGE), "child output:\n{report}");

    // Then here: the panic is caught like any other, its payload intact, and it came through
    // compiled code.
    let cache = CodeCache::new(JitMode::Eager);
    let caught = catch_unwind(AssertUnwindSafe(|| run_poisoned_transaction(&cache)));
    let payload = caught.expect_err("the database panic reaches the caller");
    let text = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert_eq!(text, MESSAGE);
    assert_eq!(cache.stats().compiled_frames.get(), 1, "compiled code ran");

    // The cache's compiled code goes on working for the next transaction.
    let code = Bytes::from(vec![PUSH1, 42, PUSH1, 1, SSTORE, STOP]);
    let (block, db) = gigas_evm::program::call_block(code, Bytes::new(), 1_000_000);
    let mut evm = PlainEvm::with_jit(PanickingDb(db), &block, Arc::clone(&cache));
    let outcome = execute_block(&mut evm, &block).expect("executes");
    assert!(outcome.receipts[0].success);
    assert_eq!(cache.stats().compiled_frames.get(), 2);

    // Interpreted, the same transaction panics the same way.
    let caught = catch_unwind(AssertUnwindSafe(|| {
        run_poisoned_transaction(&CodeCache::new(JitMode::Off))
    }));
    assert!(caught.is_err());
}
