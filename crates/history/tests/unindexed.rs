//! Every history query answers the same for a block still in memory (durable in the block
//! log, not yet indexed), while the indexer catches up, once it has, and after a reopen:
//! transactions by hash, receipts, logs, blocks by number and by hash, ChangeSets, and state
//! at older blocks.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use alloy_consensus::transaction::Recovered;
use alloy_consensus::{ReceiptEnvelope, TxEnvelope};
use common::{brute_force, generate_chain, random_query, OwnedBlock, Rng};
use gigas_history::{
    HistoricValue, History, HistoryOptions, IndexedLog, LogQuery, SealedHeader, TxLocation,
};

const BLOCKS: u64 = 240;
const KEYS: u64 = 40;

/// Every state key's value at the end of a block.
type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn options() -> HistoryOptions {
    HistoryOptions {
        max_size_bytes: 4 << 30,
        growth_step_bytes: 16 << 20,
        // Small batches, started at once: many instants with some blocks indexed and some
        // not.
        index_batch_blocks: 8,
        index_min_blocks: 1,
        max_unindexed_blocks: 1_000,
        // A window that prunes during the run.
        state_history_blocks: 180,
        log_segment_bytes: 64 << 10,
        ..HistoryOptions::default()
    }
}

/// A generated chain whose blocks also change state keys, with the model's state after each
/// block (`states[n]`: every key's value at the end of block `n`).
fn chain_with_state() -> (Vec<OwnedBlock>, Vec<State>) {
    let mut chain = generate_chain(21, BLOCKS, &[30, 200]);
    let mut rng = Rng(77);
    let mut state = State::new();
    let mut states = Vec::with_capacity(chain.len());
    for block in &mut chain {
        let mut changed = Vec::new();
        for _ in 0..rng.below(5) {
            let key = format!("key-{}", rng.below(KEYS)).into_bytes();
            if changed.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let old = state.get(&key).cloned();
            if rng.chance(20) {
                state.remove(&key);
            } else {
                state.insert(key.clone(), rng.bytes_below(40));
            }
            changed.push((key, old));
        }
        block.state_history = changed;
        states.push(state.clone());
    }
    (chain, states)
}

/// Everything the history answers about one block.
type BlockAnswers = (
    Option<SealedHeader>,
    Option<u64>,
    Option<Vec<Recovered<TxEnvelope>>>,
    Option<Vec<ReceiptEnvelope>>,
    Option<Vec<u8>>,
);

/// Everything the history answers about `chain`, as one comparable value.
#[derive(Debug, PartialEq)]
struct Answers {
    head: Option<u64>,
    blocks: Vec<BlockAnswers>,
    transactions: Vec<Option<(TxLocation, Recovered<TxEnvelope>)>>,
    logs: Vec<Vec<IndexedLog>>,
    state: Vec<(u64, u64, HistoricValue)>,
}

fn answers(history: &History, chain: &[OwnedBlock], queries: &[LogQuery]) -> Answers {
    let mut blocks = Vec::new();
    let mut transactions = Vec::new();
    for block in chain {
        let n = block.header.number;
        blocks.push((
            history.sealed_header(n).unwrap(),
            history.number_by_hash(block.hash).unwrap(),
            history.transactions(n).unwrap(),
            history.receipts(n).unwrap(),
            history.changeset(n).unwrap(),
        ));
        for tx in &block.transactions {
            transactions.push(history.transaction(*tx.tx_hash()).unwrap());
        }
    }
    let logs = queries
        .iter()
        .map(|q| history.logs(q, 10_000).unwrap())
        .collect();
    let mut state = Vec::new();
    for key in 0..KEYS {
        let name = format!("key-{key}").into_bytes();
        for block in (0..BLOCKS + 2).step_by(7) {
            state.push((key, block, history.value_at(&name, block).unwrap()));
        }
    }
    Answers {
        head: history.head().unwrap(),
        blocks,
        transactions,
        logs,
        state,
    }
}

/// The answers the chain itself gives: the stored block, the brute-force log filter, the
/// model's state (a `Changed` or `Unchanged` answer resolved against the final state).
fn check_against_chain(
    history: &History,
    chain: &[OwnedBlock],
    states: &[State],
    queries: &[LogQuery],
) {
    for block in chain {
        let n = block.header.number;
        assert_eq!(history.sealed_header(n).unwrap().unwrap().hash, block.hash);
        assert_eq!(history.number_by_hash(block.hash).unwrap(), Some(n));
        assert_eq!(history.receipts(n).unwrap().unwrap(), block.receipts);
        for (index, tx) in (0u32..).zip(&block.transactions) {
            let (at, found) = history.transaction(*tx.tx_hash()).unwrap().unwrap();
            assert_eq!(at, TxLocation { block: n, index });
            assert_eq!(found.signer(), tx.signer());
        }
    }
    for query in queries {
        assert_eq!(
            history.logs(query, 10_000).unwrap(),
            brute_force(chain, query)
        );
    }
    let last = states.last().unwrap();
    let oldest = history.oldest_state_block().unwrap();
    for key in 0..KEYS {
        let name = format!("key-{key}").into_bytes();
        for block in oldest..BLOCKS {
            let resolved = match history.value_at(&name, block).unwrap() {
                HistoricValue::Changed(old) => old,
                HistoricValue::Unchanged => last.get(&name).cloned(),
                HistoricValue::Pruned { oldest } => panic!("block {block} pruned below {oldest}"),
            };
            assert_eq!(
                resolved,
                states[block as usize].get(&name).cloned(),
                "key-{key} at block {block}"
            );
        }
    }
}

#[test]
fn queries_answer_the_same_before_during_and_after_the_index_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let (chain, states) = chain_with_state();
    let mut rng = Rng(3);
    let mut queries: Vec<LogQuery> = (0..60).map(|_| random_query(&mut rng, BLOCKS)).collect();
    queries.push(LogQuery {
        from: 0,
        to: BLOCKS + 10,
        ..LogQuery::default()
    });

    let history = Arc::new(History::open(dir.path(), options()).unwrap());
    // The first half indexed, the second durable in the log and in memory only.
    let half = BLOCKS as usize / 2;
    for group in chain[..half].chunks(3) {
        let records: Vec<_> = group.iter().map(OwnedBlock::record).collect();
        history.commit_blocks(&records).unwrap();
    }
    assert!(history.wait_indexed(Duration::from_secs(120)).unwrap());
    let hold = history.hold_index();
    for group in chain[half..].chunks(5) {
        let records: Vec<_> = group.iter().map(OwnedBlock::record).collect();
        history.commit_blocks(&records).unwrap();
    }
    assert_eq!(history.unindexed_blocks(), BLOCKS as usize - half);
    assert_eq!(history.indexed_head().unwrap(), Some(half as u64 - 1));
    check_against_chain(&history, &chain, &states, &queries);
    let before = answers(&history, &chain, &queries);

    // While the indexer works through the backlog, readers on other threads see the same.
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (history, chain, done) = (history.clone(), chain.clone(), done.clone());
            let expected_logs: Vec<_> = queries.iter().map(|q| brute_force(&chain, q)).collect();
            let queries = queries.clone();
            std::thread::spawn(move || {
                let mut rounds = 0;
                while !done.load(Ordering::Acquire) || rounds == 0 {
                    for (i, q) in queries.iter().enumerate().skip(r).step_by(2) {
                        assert_eq!(history.logs(q, 10_000).unwrap(), expected_logs[i]);
                    }
                    for block in chain.iter().skip(r * 3).step_by(5) {
                        let n = block.header.number;
                        assert_eq!(history.receipts(n).unwrap().unwrap(), block.receipts);
                        assert_eq!(history.number_by_hash(block.hash).unwrap(), Some(n));
                    }
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    drop(hold);
    assert!(history.wait_indexed(Duration::from_secs(120)).unwrap());
    done.store(true, Ordering::Release);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    assert_eq!(history.unindexed_blocks(), 0);
    assert_eq!(history.indexed_head().unwrap(), Some(BLOCKS - 1));
    // Pruning moved the window during catch-up: compare what both still answer.
    let after = answers(&history, &chain, &queries);
    compare(&before, &after, history.oldest_state_block().unwrap());
    check_against_chain(&history, &chain, &states, &queries);

    // Reopened: the same again, and the log holds no more than the index needs.
    drop(history);
    let history = History::open(dir.path(), options()).unwrap();
    let reopened = answers(&history, &chain, &queries);
    assert_eq!(reopened, after);
    assert!(history.metrics().log_bytes.get() < 200 << 10);
}

/// Equal, except state answers at blocks the index has since pruned.
fn compare(before: &Answers, after: &Answers, oldest: u64) {
    assert_eq!(before.head, after.head);
    assert_eq!(before.blocks.len(), after.blocks.len());
    for (i, (b, a)) in before.blocks.iter().zip(&after.blocks).enumerate() {
        // ChangeSets leave the window too; the rest of a block stays for ever.
        if i as u64 > oldest {
            assert_eq!(b, a, "block {i}");
        }
    }
    assert_eq!(before.transactions, after.transactions);
    assert_eq!(before.logs, after.logs);
    for (b, a) in before.state.iter().zip(&after.state) {
        if b.1 >= oldest {
            assert_eq!(b, a);
        } else {
            assert!(matches!(a.2, HistoricValue::Pruned { .. }), "{a:?}");
        }
    }
}

/// A crash after blocks reached the log and before the indexer took them: the reopened
/// history indexes them from the log before it answers, with the same answers.
#[test]
fn a_reopen_indexes_what_the_log_holds_beyond_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let (chain, states) = chain_with_state();
    let queries: Vec<LogQuery> = {
        let mut rng = Rng(9);
        (0..30).map(|_| random_query(&mut rng, BLOCKS)).collect()
    };
    {
        let history = History::open(dir.path(), options()).unwrap();
        let _hold = history.hold_index();
        for block in &chain {
            history.commit_block(&block.record()).unwrap();
        }
        assert_eq!(history.indexed_head().unwrap(), None);
        // Dropped with every block unindexed: only the log has them.
    }
    let history = History::open(dir.path(), options()).unwrap();
    assert_eq!(history.indexed_head().unwrap(), Some(BLOCKS - 1));
    assert_eq!(history.unindexed_blocks(), 0);
    check_against_chain(&history, &chain, &states, &queries);
}

/// Indexed batches that no durable point covers yet stay in the block log (a power loss may
/// take them from the index); a durable point lets the log drop them, and so does a reopen,
/// which makes one first.
#[test]
fn the_log_keeps_what_no_durable_point_of_the_index_covers() {
    let dir = tempfile::tempdir().unwrap();
    let (chain, _) = chain_with_state();
    let never = HistoryOptions {
        index_sync_period: Duration::from_secs(3_600),
        ..options()
    };
    let log_bytes = |history: &History| history.metrics().log_bytes.get();
    let all_logged;
    {
        let history = History::open(dir.path(), never.clone()).unwrap();
        for block in &chain {
            history.commit_block(&block.record()).unwrap();
        }
        assert!(history.wait_indexed(Duration::from_secs(120)).unwrap());
        assert_eq!(history.indexed_head().unwrap(), Some(BLOCKS - 1));
        all_logged = log_bytes(&history);
        // Several segments' worth, none removed although every block is indexed.
        assert!(
            all_logged > 4 * options().log_segment_bytes as i64,
            "{all_logged} bytes in the log"
        );
    }
    {
        // Reopened: the open makes the index durable, then the log drops what it covers.
        let history = History::open(dir.path(), never).unwrap();
        assert_eq!(history.indexed_head().unwrap(), Some(BLOCKS - 1));
        assert!(
            log_bytes(&history) < options().log_segment_bytes as i64 * 2,
            "{} bytes left in the log after a durable point",
            log_bytes(&history)
        );
    }
    // With a sync every batch the log follows the index as it goes.
    let dir = tempfile::tempdir().unwrap();
    let history = History::open(
        dir.path(),
        HistoryOptions {
            index_sync_period: Duration::ZERO,
            ..options()
        },
    )
    .unwrap();
    for block in &chain {
        history.commit_block(&block.record()).unwrap();
    }
    assert!(history.wait_indexed(Duration::from_secs(120)).unwrap());
    assert!(
        log_bytes(&history) < all_logged / 2,
        "{} bytes in the log with a durable index, {all_logged} without",
        log_bytes(&history)
    );
}
