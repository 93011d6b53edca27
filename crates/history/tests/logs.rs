//! `logs` against a brute-force filter over every receipt, its limit, and the receipts it
//! reads: only those of blocks the index names for every part of the filter.

mod common;

use alloy_primitives::{Address, B256};
use common::{
    brute_force, emitter, generate_chain, rare_emitter, rare_topic, topic, OwnedBlock, Rng,
};
use gigas_history::{History, HistoryError, HistoryOptions, LogQuery};

const BLOCKS: u64 = 300;
const RARE: [u64; 3] = [17, 150, 233];

fn setup() -> (tempfile::TempDir, History, Vec<OwnedBlock>) {
    let dir = tempfile::tempdir().unwrap();
    let chain = generate_chain(11, BLOCKS, &RARE);
    let history = History::open(
        dir.path(),
        HistoryOptions {
            max_size_bytes: 4 << 30,
            growth_step_bytes: 16 << 20,
            ..HistoryOptions::default()
        },
    )
    .unwrap();
    for block in &chain {
        history.commit_block(&block.record()).unwrap();
    }
    // These tests are about the log index: let it hold every block. (`unindexed.rs` asks
    // the same questions of blocks still in memory.)
    assert!(history
        .wait_indexed(std::time::Duration::from_secs(120))
        .unwrap());
    (dir, history, chain)
}

#[test]
fn random_queries_match_a_brute_force_filter_and_respect_the_limit() {
    let (_dir, history, chain) = setup();
    let mut rng = Rng(5);
    let mut nonempty = 0;
    for _ in 0..400 {
        let query = common::random_query(&mut rng, BLOCKS);
        let want = brute_force(&chain, &query);
        let got = history.logs(&query, usize::MAX).unwrap();
        assert_eq!(got, want, "{query:?}");
        if !want.is_empty() {
            nonempty += 1;
            assert_eq!(history.logs(&query, want.len()).unwrap(), want);
            let err = history.logs(&query, want.len() - 1).unwrap_err();
            assert!(
                matches!(err, HistoryError::TooManyLogs { limit } if limit == want.len() - 1),
                "{err}"
            );
        }
    }
    assert!(nonempty > 100, "only {nonempty} queries matched anything");

    // Everything, from the genesis to past the head.
    let all = LogQuery {
        from: 0,
        to: BLOCKS + 100,
        ..LogQuery::default()
    };
    let want = brute_force(&chain, &all);
    assert!(want.len() > 500);
    assert_eq!(history.logs(&all, usize::MAX).unwrap(), want);
    let err = history.logs(&all, 10).unwrap_err();
    assert_eq!(err.to_string(), "more than 10 logs match the query");

    // An inverted range matches nothing.
    let inverted = LogQuery {
        from: 10,
        to: 9,
        ..LogQuery::default()
    };
    assert!(history.logs(&inverted, 1).unwrap().is_empty());
}

#[test]
fn selective_queries_read_only_the_receipts_of_matching_blocks() {
    let (_dir, history, chain) = setup();
    let reads = || history.metrics().receipt_blocks_read.get();
    let whole = |addresses: Vec<Address>, topics: [Option<Vec<B256>>; 4]| LogQuery {
        from: 0,
        to: BLOCKS - 1,
        addresses,
        topics,
    };

    // The rare address: three blocks in 300, three receipt reads.
    let before = reads();
    let found = history
        .logs(&whole(vec![rare_emitter()], Default::default()), 100)
        .unwrap();
    assert_eq!(
        found.iter().map(|l| l.block_number).collect::<Vec<_>>(),
        RARE
    );
    assert_eq!(reads() - before, RARE.len() as u64);

    // The rare topic at its position, with a common address OR-ed in the address group and
    // a common topic at position 0: still only the rare blocks qualify.
    let before = reads();
    let query = whole(
        vec![rare_emitter(), emitter(0)],
        [Some(vec![topic(0)]), Some(vec![rare_topic()]), None, None],
    );
    let found = history.logs(&query, 100).unwrap();
    assert_eq!(found, brute_force(&chain, &query));
    assert_eq!(found.len(), RARE.len());
    assert_eq!(reads() - before, RARE.len() as u64);

    // The rare topic at a position where it never appears: no block qualifies, nothing read.
    let before = reads();
    let found = history
        .logs(
            &whole(Vec::new(), [Some(vec![rare_topic()]), None, None, None]),
            100,
        )
        .unwrap();
    assert!(found.is_empty());
    assert_eq!(reads() - before, 0);

    // An address that never logged: nothing read.
    let before = reads();
    assert!(history
        .logs(
            &whole(vec![Address::repeat_byte(0x42)], Default::default()),
            100
        )
        .unwrap()
        .is_empty());
    assert_eq!(reads() - before, 0);

    // No filter at all reads the blocks that have logs, not every block.
    let with_logs = chain
        .iter()
        .filter(|b| b.receipts.iter().any(|r| !r.logs().is_empty()))
        .count() as u64;
    assert!(with_logs < BLOCKS);
    let before = reads();
    history
        .logs(&whole(Vec::new(), Default::default()), usize::MAX)
        .unwrap();
    assert_eq!(reads() - before, with_logs);
    assert!(history.metrics().log_index_seeks.get() > 0);
}
