//! Shipped mainnet blocks replay exactly with compiled code while the code cache's
//! budget is small enough to keep evicting: under `eager` (every contract compiled before its
//! first frame, so frames suspended at a CALL keep running code the cache has evicted
//! meanwhile) and under `on` (contracts compiled in the background once hot, two replay
//! threads sharing one cache, so that one thread's compiles evict code the other thread's
//! frames are running). Receipts, header checks and the ChangeSet must be the interpreter's,
//! the cache must have evicted, and its totals must hold (within the budget, recounted).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gigas_evm::jit::{CacheConfig, CodeCache, Hotness, JitMode};
use gigas_evm::{execute_block, BlockFixture, PlainEvm, PreparedBlock};
use gigas_test_support::{assert_same_changes, mainnet_blocks};

/// Replays `blocks` through `cache` and checks each against the interpreter.
fn replay_exactly(cache: &Arc<CodeCache>, blocks: &[&(BlockFixture, PreparedBlock)], pass: usize) {
    let mode = cache.mode();
    for (fixture, block) in blocks {
        let mut plain = PlainEvm::new(fixture.database(), block);
        let expected = execute_block(&mut plain, block).expect("interpreted");
        let mut jit = PlainEvm::with_jit(fixture.database(), block, Arc::clone(cache));
        let outcome = execute_block(&mut jit, block)
            .unwrap_or_else(|e| panic!("block {} with JIT {mode} fails: {e}", block.number));
        let what = format!("block {} with JIT {mode} (pass {pass})", block.number);
        assert_same_changes(&what, &outcome.changes, &expected.changes);
        assert_eq!(outcome, expected, "{what}: receipts");
        let check = outcome.check(block).expect("fixtures have headers");
        assert!(check.is_match(), "{what}: {check:?}");
        let residency = cache.residency().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(residency.resident_bytes <= residency.budget_bytes);
    }
}

fn report(what: &str, cache: &CodeCache) {
    let c = cache.stats().snapshot();
    eprintln!(
        "{what}: budget {} KiB, {} compiles, {} evictions ({} of code an EVM still held), {} not \
         compilable, {} frames started compiled, {} hand-overs; resident {} KiB in {} contracts, \
         mapped {} KiB, {} modules freed",
        cache.config().budget_bytes / 1024,
        c.compiled,
        c.evictions,
        c.evicted_in_use,
        c.failed,
        c.compiled_frames,
        c.bailed_frames,
        c.resident_bytes / 1024,
        c.resident_contracts,
        c.mapped_bytes / 1024,
        c.freed_modules
    );
}

/// Eagerly, every contract of a block is compiled at its first call (some 50 contracts a
/// block, up to 100 ms each here), so the eager run takes one block in ten, halfway between
/// those `jit_replay` compiles eagerly: together they take every fifth block, which spans
/// every fork of the fixtures; `gigas-bench jit` replays all 50 eagerly. Two lanes, each with its own cache and compiler thread, take the
/// blocks in order as they become free. Each lane's budget is 4 MiB, where one block's
/// contracts take some 15 MiB: a lane evicts within its first block, so frames suspended at
/// a CALL keep running code evicted meanwhile, while its most used contracts stay.
#[test]
fn eager_under_a_small_budget_replays_every_block_exactly() {
    let all = mainnet_blocks();
    let blocks: Vec<&(BlockFixture, PreparedBlock)> = all.iter().skip(5).step_by(10).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for lane in 0..2 {
            let (blocks, next) = (&blocks, &next);
            scope.spawn(move || {
                let cache = CodeCache::with_config(CacheConfig {
                    budget_bytes: 4 << 20,
                    ..CacheConfig::new(JitMode::Eager)
                });
                let mut replayed = 0;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(block) = blocks.get(i) else {
                        break;
                    };
                    replay_exactly(&cache, &[*block], 0);
                    replayed += 1;
                }
                report(&format!("eager, lane {lane} ({replayed} blocks)"), &cache);
                let counts = cache.stats().snapshot();
                assert!(counts.evictions > 0, "lane {lane}: nothing was evicted");
                assert!(
                    counts.evicted_in_use > 0,
                    "lane {lane}: no code was evicted while an EVM held it: {counts:?}"
                );
                assert!(counts.compiled_frames > 20, "lane {lane}: {counts:?}");
                // Every EVM is gone: what stays mapped is what the cache holds.
                assert_eq!(counts.mapped_bytes, counts.resident_bytes, "{counts:?}");
            });
        }
    });
}

/// In the background, with a hotness of 1,000,000 gas (about 60 of these blocks' contracts,
/// some 300 KiB of machine code each) and a budget of 4 MiB, two passes over the 50 blocks
/// by two threads sharing the cache.
#[test]
fn on_under_a_small_budget_replays_every_block_exactly() {
    let blocks = mainnet_blocks();
    let cache = CodeCache::with_config(CacheConfig {
        budget_bytes: 4 << 20,
        hotness: Hotness {
            calls: 1,
            gas: 1_000_000,
        },
        ..CacheConfig::new(JitMode::On)
    });
    let lanes: Vec<Vec<&(BlockFixture, PreparedBlock)>> = (0..2)
        .map(|lane| blocks.iter().skip(lane).step_by(2).collect())
        .collect();
    for pass in 0..2 {
        std::thread::scope(|scope| {
            for blocks in &lanes {
                let cache = &cache;
                scope.spawn(move || replay_exactly(cache, blocks, pass));
            }
        });
        cache.wait_for_compiles();
    }
    report("on", &cache);
    let counts = cache.stats().snapshot();
    assert!(counts.evictions > 0, "nothing was evicted: {counts:?}");
    assert!(counts.compiled_frames > 500, "{counts:?}");
    assert_eq!(counts.mapped_bytes, counts.resident_bytes, "{counts:?}");
}
