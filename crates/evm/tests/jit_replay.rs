//! Shipped mainnet blocks replay exactly with compiled code: every contract compiled when
//! first called (`JitMode::Eager`, every tenth block, and `jit_budget` the blocks halfway
//! between, so that together they take every fifth and every fork; `gigas-bench jit` replays
//! all 50 that way) and compiled once hot in the background (`JitMode::On`, all blocks). Receipts
//! (status, gas, logs), header checks and the ChangeSet must be the interpreter's.

use gigas_evm::jit::{CodeCache, JitMode};
use gigas_evm::{execute_block, PlainEvm};
use gigas_test_support::{assert_same_changes, mainnet_blocks};

#[test]
fn every_shipped_block_replays_exactly_with_compiled_code() {
    let blocks = mainnet_blocks();
    for mode in [JitMode::Eager, JitMode::On] {
        let cache = CodeCache::new(mode);
        // Compiling every contract of all 50 blocks takes minutes (about 2,700 contracts);
        // eagerly, every tenth block, once (jit_budget takes the ones halfway between). In
        // the background, all blocks twice, so that the contracts the first pass made hot
        // run compiled in the second.
        let (passes, step) = match mode {
            JitMode::Eager => (1, 10),
            _ => (2, 1),
        };
        for pass in 0..passes {
            for (fixture, block) in blocks.iter().step_by(step) {
                let mut plain = PlainEvm::new(fixture.database(), block);
                let expected = execute_block(&mut plain, block).expect("interpreted");

                let mut jit = PlainEvm::with_jit(fixture.database(), block, cache.clone());
                let outcome = execute_block(&mut jit, block).unwrap_or_else(|e| {
                    panic!("block {} with JIT {mode} fails: {e}", block.number)
                });
                assert_same_changes(
                    &format!("block {} with JIT {mode} (pass {pass})", block.number),
                    &outcome.changes,
                    &expected.changes,
                );
                assert_eq!(
                    outcome, expected,
                    "block {} receipts with JIT {mode} (pass {pass})",
                    block.number
                );
                let check = outcome.check(block).expect("fixtures have headers");
                assert!(check.is_match(), "block {}: {:?}", block.number, check);
            }
            cache.wait_for_compiles();
        }
        let stats = cache.stats();
        let compiled = stats.compiled.get();
        let frames = stats.compiled_frames.get();
        eprintln!(
            "JIT {mode}: {compiled} contracts compiled, {} not compilable, {frames} frames \
             started compiled, {} suspensions at a CALL, {} hand-overs to the interpreter, {} KiB of machine code",
            stats.failed.get(),
            stats.suspensions.get(),
            stats.bailed_frames.get(),
            stats.code_bytes.get() / 1024
        );
        // Compiled code must really have run, not just been built: eagerly, every contract
        // called is compiled; in the background, those whose frames spent enough gas (about
        // 240 of these blocks' contracts after two passes).
        let (min_compiled, min_frames) = match mode {
            JitMode::Eager => (100, 500),
            _ => (100, 3_000),
        };
        assert!(
            compiled >= min_compiled,
            "only {compiled} contracts compiled"
        );
        assert!(
            frames >= min_frames,
            "only {frames} frames ran compiled code"
        );
    }
}
