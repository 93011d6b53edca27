//! On every shipped mainnet block, with 1, 2, 4 and 8 threads, Block-STM gives the receipts,
//! gas, logs and ChangeSet bytes of sequential execution, and the state it commits holds that
//! ChangeSet.

use gigas_blockstm::{Bailout, ParallelExecutor};
use gigas_evm::{execute_block, PlainEvm};
use gigas_test_support::{assert_holds, assert_same_changes, mainnet_blocks};

#[test]
fn parallel_equals_sequential_on_every_shipped_block() {
    let blocks = mainnet_blocks();
    let mut total_aborts = 0;
    // One executor per thread count for all blocks, as a sequencer keeps one: its memory is
    // reset, not rebuilt, between blocks, and a block must never see the previous one's.
    // Pure Block-STM at every thread count, then 2 and 8 threads with a bailout that sends
    // every block to the sequential continuation after a few executions.
    let always_bail = Bailout {
        after_executions: 5,
        conflicts_per_execution: 0.0,
        min_execution_ns: u64::MAX,
    };
    let mut executors: Vec<ParallelExecutor> = [1, 2, 4, 8]
        .into_iter()
        .map(|t| ParallelExecutor::new(t).with_bailout(None))
        .chain(
            [2, 8]
                .into_iter()
                .map(|t| ParallelExecutor::new(t).with_bailout(Some(always_bail))),
        )
        .collect();
    let mut bailed = 0;
    for (fixture, block) in &blocks {
        let base = fixture.database();

        let mut sequential = PlainEvm::new(base.clone(), block);
        let expected = execute_block(&mut sequential, block).expect("sequential executes");

        for executor in &mut executors {
            let threads = executor.threads();
            // Half the thread counts keep each transaction's changes and commit them after
            // the block; the other half commit in order while the block executes.
            let mut state = base.clone();
            let (outcome, stats) = if threads % 4 == 0 {
                let parallel = executor.execute(block, &base).unwrap_or_else(|e| {
                    panic!("block {} with {threads} threads: {e}", block.number)
                });
                let result = (parallel.outcome.clone(), parallel.stats);
                parallel.commit_into(&mut state).expect("commit");
                result
            } else {
                executor
                    .execute_into(block, &base, &mut state)
                    .unwrap_or_else(|e| {
                        panic!("block {} with {threads} threads: {e}", block.number)
                    })
            };
            let what = format!("block {} with {threads} threads", block.number);
            assert_same_changes(&what, &outcome.changes, &expected.changes);
            assert_eq!(outcome, expected, "{what}: receipts");
            assert!(
                stats.executions >= block.txs.len(),
                "block {}: {} executions for {} txs",
                block.number,
                stats.executions,
                block.txs.len()
            );
            if stats.sequential_from.is_some() {
                bailed += 1;
            } else {
                total_aborts += stats.aborts;
            }
            assert_holds(&what, &state, &expected.changes);
        }
        let check = expected.check(block).expect("header");
        assert!(check.is_match());
    }
    // Mainnet blocks conflict (every transaction pays the same beneficiary), so the
    // validation machinery must actually have been exercised.
    assert!(total_aborts > 0, "no incarnation was ever aborted");
    // Every block much longer than the bailout's window (and the executions in flight when
    // it fires) continued sequentially, once per bailing executor.
    let long = 2 * blocks.iter().filter(|(_, b)| b.txs.len() > 50).count();
    assert!(bailed >= long, "{bailed} bailouts for {long} long blocks");
}

#[test]
fn policy_fallback_gives_the_sequential_outcome_and_counts_decisions() {
    use gigas_blockstm::{execute_block_with_policy, Metrics, Policy, Strategy};
    let blocks = mainnet_blocks();
    let metrics = Metrics::default();
    // A threshold in the middle of the shipped block sizes exercises both strategies.
    let policy = Policy {
        min_parallel_txs: 150,
        min_avg_gas_limit: 60_000,
    };
    for (fixture, block) in &blocks {
        let base = fixture.database();
        let mut sequential = PlainEvm::new(base.clone(), block);
        let expected = execute_block(&mut sequential, block).expect("sequential executes");
        let (strategy, outcome) =
            execute_block_with_policy(block, &base, 2, &policy, &metrics).expect("executes");
        let want = if block.txs.len() < 150 || Policy::avg_gas_limit(block) < 60_000 {
            Strategy::Sequential
        } else {
            Strategy::Parallel(2)
        };
        assert_eq!(strategy, want, "block {}", block.number);
        let what = format!("block {} via {strategy:?}", block.number);
        assert_same_changes(&what, &outcome.outcome.changes, &expected.changes);
        assert_eq!(outcome.outcome, expected, "{what}: receipts");
        let mut state = base.clone();
        outcome.commit_into(&mut state).expect("commit");
        assert_holds(&what, &state, &expected.changes);
    }
    let parallel = metrics.parallel_blocks.get();
    let sequential = metrics.sequential_blocks.get();
    assert_eq!(parallel + sequential, blocks.len() as u64);
    assert!(
        parallel > 0 && sequential > 0,
        "{parallel} parallel, {sequential} sequential"
    );
    assert_eq!(
        Policy::default().choose(&blocks[0].1, 1),
        Strategy::Sequential
    );
}
