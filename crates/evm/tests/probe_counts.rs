//! The probe counts every dispatched opcode exactly, and changes nothing the EVM computes.

use alloy_primitives::Bytes;
use gigas_evm::probe::{Probe, ProbedEvm};
use gigas_evm::program::call_block;
use gigas_evm::revm::bytecode::opcode::*;
use gigas_evm::revm::database::{CacheDB, EmptyDB};
use gigas_evm::{execute_block, PlainEvm, PreparedBlock};
use gigas_primitives::Hardfork;

/// A loop that runs `n` times, then stores the counter and stops:
///
/// ```text
/// 0  PUSH1 n
/// 2  JUMPDEST          <- loop head
/// 3  PUSH1 1
/// 5  SWAP1
/// 6  SUB
/// 7  DUP1
/// 8  PUSH1 2
/// 10 JUMPI
/// 11 PUSH1 0
/// 13 SSTORE
/// 14 STOP
/// ```
fn loop_program(n: u8) -> Vec<u8> {
    vec![
        PUSH1, n, JUMPDEST, PUSH1, 1, SWAP1, SUB, DUP1, PUSH1, 2, JUMPI, PUSH1, 0, SSTORE, STOP,
    ]
}

fn block_calling(code: Vec<u8>) -> (PreparedBlock, CacheDB<EmptyDB>) {
    let (block, db) = call_block(Bytes::from(code), Bytes::new(), 1_000_000);
    assert_eq!(block.hardfork, Hardfork::Cancun);
    (block, db)
}

#[test]
fn counts_of_a_known_loop_are_exact() {
    let n = 7u8;
    let (block, db) = block_calling(loop_program(n));
    let mut probed = ProbedEvm::new(db.clone(), &block, Probe::default());
    let outcome = execute_block(&mut probed, &block).expect("executes");
    assert!(outcome.receipts[0].success);

    let counts = probed.probe().counts;
    let n = n as u64;
    let mut expected = [0u64; 256];
    expected[PUSH1 as usize] = 1 + 2 * n + 1; // the initial push, two per iteration, the slot
    expected[JUMPDEST as usize] = n;
    expected[SWAP1 as usize] = n;
    expected[SUB as usize] = n;
    expected[DUP1 as usize] = n;
    expected[JUMPI as usize] = n;
    expected[SSTORE as usize] = 1;
    expected[STOP as usize] = 1;
    for op in 0..256 {
        assert_eq!(
            counts[op], expected[op],
            "opcode 0x{op:02x} counted {} times, expected {}",
            counts[op], expected[op]
        );
    }
    assert_eq!(probed.probe().precompile_calls, 0);

    // The plain EVM computes the same receipt, gas included.
    let mut plain = PlainEvm::new(db, &block);
    let plain_outcome = execute_block(&mut plain, &block).expect("executes");
    assert_eq!(plain_outcome, outcome);
}

#[test]
fn precompile_calls_are_counted() {
    // STATICCALL the identity precompile (0x04) with no input, then stop.
    let code = vec![
        PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 0, PUSH1, 4, GAS, STATICCALL, POP, STOP,
    ];
    let (block, db) = block_calling(code);
    let mut probed = ProbedEvm::new(db, &block, Probe::default());
    let outcome = execute_block(&mut probed, &block).expect("executes");
    assert!(outcome.receipts[0].success);
    assert_eq!(probed.probe().precompile_calls, 1);
    assert_eq!(probed.probe().counts[STATICCALL as usize], 1);
    assert_eq!(probed.probe().counts[PUSH1 as usize], 5);
}

#[test]
fn phases_are_published_around_transactions() {
    use gigas_evm::probe::Phase;
    let (block, db) = block_calling(loop_program(3));
    let mut probed = ProbedEvm::new(db, &block, Probe::new());
    let (reader, evm) = probed.reader();
    assert_eq!(reader.activity(), Phase::Idle as u16);
    execute_block(evm, &block).expect("executes");
    // After a transaction is committed the probe marks the block loop, not the last opcode.
    assert_eq!(reader.activity(), Phase::BlockLoop as u16);
    assert_eq!(probed.probe().cell().activity(), Phase::BlockLoop as u16);
    assert_eq!(
        Phase::from_activity(Phase::Commit as u16),
        Some(Phase::Commit)
    );
    assert_eq!(Phase::from_activity(SSTORE as u16), None);
}

#[test]
fn a_probe_without_counts_publishes_and_changes_nothing() {
    use gigas_evm::probe::Phase;
    let (block, db) = block_calling(loop_program(5));
    let mut counted = ProbedEvm::new(db.clone(), &block, Probe::new());
    let counted_outcome = execute_block(&mut counted, &block).expect("executes");
    assert!(counted.probe().counts_opcodes());
    assert_eq!(counted.probe().counts[JUMPI as usize], 5);

    let mut timed = ProbedEvm::new(db, &block, Probe::new().without_counts());
    assert!(!timed.probe().counts_opcodes());
    let (reader, evm) = timed.reader();
    let timed_outcome = execute_block(evm, &block).expect("executes");
    assert_eq!(timed_outcome, counted_outcome);
    // The reader sees the probe's own cell: the last word is the block loop's, published
    // after the transaction's commit.
    assert_eq!(reader.activity(), Phase::BlockLoop as u16);
    assert_eq!(timed.probe().counts, [0; 256], "it counted nothing");
}
