//! Headers, transactions, receipts and lookups round-trip through a real MDBX environment;
//! the write path refuses what it must; reopen, concurrent readers and SIGKILL keep the head.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use alloy_consensus::Typed2718;
use alloy_primitives::{Address, Bytes, B256};
use common::{generate_chain, receipt, signed_tx, signer, OwnedBlock};
use gigas_history::{
    HistoricValue, History, HistoryError, HistoryOptions, TxLocation, MAX_STATE_KEY_LEN,
};

fn small_options() -> HistoryOptions {
    HistoryOptions {
        // Tests open many environments in one process: keep the reserved address space small.
        max_size_bytes: 4 << 30,
        growth_step_bytes: 16 << 20,
        // Small batches started early, so that a SIGKILL also lands inside the indexer.
        index_min_blocks: 3,
        index_batch_blocks: 5,
        log_segment_bytes: 32 << 10,
        // Durable points often enough that kills land in syncs and log segments go.
        index_sync_period: std::time::Duration::from_millis(50),
        ..HistoryOptions::default()
    }
}

fn verify(history: &History, chain: &[OwnedBlock]) {
    for block in chain {
        let n = block.header.number;
        let sealed = history.sealed_header(n).unwrap().expect("header");
        assert_eq!(sealed.header, block.header);
        assert_eq!(sealed.hash, block.hash);
        assert_eq!(sealed.signature, block.signature);
        assert_eq!(history.number_by_hash(block.hash).unwrap(), Some(n));

        let txs = history.transactions(n).unwrap().expect("transactions");
        assert_eq!(txs, block.transactions);
        for (read, written) in txs.iter().zip(&block.transactions) {
            assert_eq!(read.signer(), written.signer());
        }
        let receipts = history.receipts(n).unwrap().expect("receipts");
        assert_eq!(receipts, block.receipts);

        for (index, tx) in (0u32..).zip(&block.transactions) {
            let hash = *tx.tx_hash();
            let location = TxLocation { block: n, index };
            assert_eq!(history.transaction_location(hash).unwrap(), Some(location));
            let (found_at, found) = history.transaction(hash).unwrap().expect("transaction");
            assert_eq!(found_at, location);
            assert_eq!(&found, tx);
            assert_eq!(found.signer(), tx.signer());
            assert_eq!(found.tx_hash(), tx.tx_hash());
        }
        assert_eq!(
            history.changeset(n).unwrap().as_deref(),
            Some(block.changeset.as_slice())
        );
    }
    let past = chain.len() as u64;
    assert!(history.sealed_header(past).unwrap().is_none());
    assert!(history.transactions(past).unwrap().is_none());
    assert!(history.receipts(past).unwrap().is_none());
    assert!(history.changeset(past).unwrap().is_none());
    assert!(history
        .number_by_hash(B256::repeat_byte(7))
        .unwrap()
        .is_none());
    assert!(history.transaction(B256::repeat_byte(7)).unwrap().is_none());
    assert!(history
        .transaction_location(B256::repeat_byte(7))
        .unwrap()
        .is_none());
}

#[test]
fn a_few_hundred_blocks_read_back_equal_also_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let chain = generate_chain(1, 300, &[]);
    let mut kinds = [0usize; 5];
    for block in &chain {
        common::assert_senders_recover(block);
        for tx in &block.transactions {
            kinds[tx.ty() as usize] += 1;
        }
    }
    // Legacy (EIP-155), EIP-2930, EIP-1559 and EIP-7702 all present; no EIP-4844.
    assert!(
        kinds[0] > 0 && kinds[1] > 0 && kinds[2] > 0 && kinds[4] > 0,
        "{kinds:?}"
    );

    let history = History::open(dir.path(), small_options()).unwrap();
    assert_eq!(history.head().unwrap(), None);
    for block in &chain {
        history.commit_block(&block.record()).unwrap();
    }
    assert_eq!(history.head().unwrap(), Some(299));
    assert_eq!(history.transactions(0).unwrap(), Some(Vec::new()));
    verify(&history, &chain);
    assert_eq!(history.metrics().blocks_committed.get(), 300);
    drop(history);

    let history = History::open(dir.path(), small_options()).unwrap();
    assert_eq!(history.head().unwrap(), Some(299));
    verify(&history, &chain);
}

#[test]
fn commit_refuses_a_block_that_is_not_next() {
    let dir = tempfile::tempdir().unwrap();
    let chain = generate_chain(2, 4, &[]);
    let history = History::open(dir.path(), small_options()).unwrap();

    let err = history.commit_block(&chain[1].record()).unwrap_err();
    assert!(
        matches!(
            err,
            HistoryError::NotNext {
                expected: 0,
                got: 1
            }
        ),
        "{err}"
    );
    assert_eq!(history.head().unwrap(), None);

    history.commit_block(&chain[0].record()).unwrap();
    let err = history.commit_block(&chain[0].record()).unwrap_err();
    assert!(
        matches!(
            err,
            HistoryError::NotNext {
                expected: 1,
                got: 0
            }
        ),
        "{err}"
    );
    let err = history.commit_block(&chain[2].record()).unwrap_err();
    assert!(
        matches!(
            err,
            HistoryError::NotNext {
                expected: 1,
                got: 2
            }
        ),
        "{err}"
    );
    assert_eq!(err.to_string(), "block 2 is not the next block: expected 1");
    assert_eq!(history.head().unwrap(), Some(0));

    history.commit_block(&chain[1].record()).unwrap();
    assert_eq!(history.head().unwrap(), Some(1));
}

#[test]
fn reopen_keeps_the_head_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let chain = generate_chain(3, 20, &[]);
    {
        let history = History::open(dir.path(), small_options()).unwrap();
        for block in &chain[..10] {
            history.commit_block(&block.record()).unwrap();
        }
    }
    let history = History::open(dir.path(), small_options()).unwrap();
    assert_eq!(history.head().unwrap(), Some(9));
    let err = history.commit_block(&chain[5].record()).unwrap_err();
    assert!(
        matches!(
            err,
            HistoryError::NotNext {
                expected: 10,
                got: 5
            }
        ),
        "{err}"
    );
    for block in &chain[10..] {
        history.commit_block(&block.record()).unwrap();
    }
    verify(&history, &chain);
}

#[test]
fn refused_blocks_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let history = History::open(dir.path(), small_options()).unwrap();
    let chain = generate_chain(4, 1, &[]);
    history.commit_block(&chain[0].record()).unwrap();

    let alice = signer(1);
    let tx = signed_tx(&alice, 2, 0, Address::with_last_byte(9), Bytes::new());
    let r = receipt(&tx, 21_000, true, Vec::new());

    // Transactions and receipts must pair up.
    let mut block = OwnedBlock::seal(
        1,
        chain[0].hash,
        vec![tx.clone()],
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    let err = history.commit_block(&block.record()).unwrap_err();
    assert!(
        matches!(
            err,
            HistoryError::ReceiptCount {
                block: 1,
                transactions: 1,
                receipts: 0
            }
        ),
        "{err}"
    );

    // A state key named twice, and one too long to store.
    block.receipts = vec![r.clone()];
    block.state_history = vec![(b"k".to_vec(), None), (b"k".to_vec(), Some(b"v".to_vec()))];
    let err = history.commit_block(&block.record()).unwrap_err();
    assert!(
        matches!(err, HistoryError::DuplicateStateKey { block: 1, .. }),
        "{err}"
    );
    block.state_history = vec![(vec![7u8; MAX_STATE_KEY_LEN + 1], None)];
    let err = history.commit_block(&block.record()).unwrap_err();
    assert!(
        matches!(
            err,
            HistoryError::StateKeyTooLong {
                block: 1,
                len: 256,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(history.head().unwrap(), Some(0));

    // The longest key is stored and answered.
    let longest = vec![7u8; MAX_STATE_KEY_LEN];
    block.state_history = vec![(longest.clone(), Some(vec![1; 1000]))];
    history.commit_block(&block.record()).unwrap();
    assert_eq!(
        history.value_at(&longest, 0).unwrap(),
        HistoricValue::Changed(Some(vec![1; 1000]))
    );
    assert_eq!(
        history.value_at(&longest, 1).unwrap(),
        HistoricValue::Unchanged
    );

    // The same transaction again: refused, and the block is not half-written.
    let again = OwnedBlock::seal(
        2,
        block.hash,
        vec![tx.clone()],
        vec![r],
        Vec::new(),
        Vec::new(),
    );
    let err = history.commit_block(&again.record()).unwrap_err();
    assert!(
        matches!(
            err,
            HistoryError::DuplicateTransaction {
                block: 1,
                index: 0,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(history.head().unwrap(), Some(1));
    assert!(history.sealed_header(2).unwrap().is_none());
    assert!(history.number_by_hash(again.hash).unwrap().is_none());
    assert_eq!(
        history.transaction_location(*tx.tx_hash()).unwrap(),
        Some(TxLocation { block: 1, index: 0 })
    );
}

#[test]
fn readers_on_other_threads_see_whole_blocks_while_one_commits() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Arc::new(generate_chain(5, 150, &[]));
    let history = Arc::new(History::open(dir.path(), small_options()).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    // Each reader's last seen head + 1 (0: none yet).
    let seen: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);

    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (history, chain, done, seen) =
                (history.clone(), chain.clone(), done.clone(), seen.clone());
            std::thread::spawn(move || {
                // A reader that fails releases the writer instead of leaving it waiting.
                let _release = Release(seen.clone(), r);
                let mut heads_seen = std::collections::BTreeSet::new();
                let mut last = None;
                while !done.load(Ordering::Acquire) {
                    let head = history.head().unwrap();
                    assert!(head >= last, "the head went back from {last:?} to {head:?}");
                    last = head;
                    let Some(head) = head else { continue };
                    heads_seen.insert(head);
                    let block = &chain[head as usize];
                    assert_eq!(
                        history.sealed_header(head).unwrap().unwrap().hash,
                        block.hash
                    );
                    assert_eq!(
                        history.transactions(head).unwrap().unwrap(),
                        block.transactions
                    );
                    assert_eq!(history.receipts(head).unwrap().unwrap(), block.receipts);
                    if let Some(tx) = block.transactions.first() {
                        let (at, _) = history.transaction(*tx.tx_hash()).unwrap().unwrap();
                        assert_eq!(at.block, head);
                    }
                    seen[r].store(head + 1, Ordering::Release);
                }
                heads_seen.len()
            })
        })
        .collect();

    let writer = {
        let (history, chain, seen) = (history.clone(), chain.clone(), seen.clone());
        std::thread::spawn(move || {
            for block in chain.iter() {
                history.commit_block(&block.record()).unwrap();
                // Twice, wait until every reader has read this head: each then sees at least
                // two heads, whatever the scheduling.
                let n = block.header.number;
                if n == 10 || n == 75 {
                    while seen.iter().any(|s| s.load(Ordering::Acquire) <= n) {
                        std::thread::yield_now();
                    }
                }
            }
        })
    };
    writer.join().unwrap();
    done.store(true, Ordering::Release);
    for reader in readers {
        let distinct = reader.join().unwrap();
        assert!(distinct >= 2, "a reader saw only {distinct} distinct heads");
    }
    assert_eq!(history.head().unwrap(), Some(149));
}

struct Release(Arc<[AtomicU64; 2]>, usize);

impl Drop for Release {
    fn drop(&mut self) {
        self.0[self.1].store(u64::MAX, Ordering::Release);
    }
}

/// The child half of `sigkill_keeps_every_reported_block`: commits blocks and prints each
/// number once `commit_block` has returned.
#[test]
#[ignore = "run by sigkill_keeps_every_reported_block as a child process"]
fn sigkill_child_writer() {
    let Ok(dir) = std::env::var("GIGAS_HISTORY_CHILD_DIR") else {
        return;
    };
    let chain = generate_chain(6, 400, &[]);
    let history = History::open(dir.as_ref(), small_options()).unwrap();
    let start = history.head().unwrap().map_or(0, |h| h + 1);
    for block in &chain[start as usize..] {
        history.commit_block(&block.record()).unwrap();
        println!("committed {}", block.header.number);
    }
}

#[test]
fn sigkill_keeps_every_reported_block() {
    let dir = tempfile::tempdir().unwrap();
    let chain = generate_chain(6, 400, &[]);
    let exe = std::env::current_exe().unwrap();
    let mut rng = common::Rng(99);
    let mut reported: Option<u64> = None;
    for round in 0..6 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "sigkill_child_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GIGAS_HISTORY_CHILD_DIR", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let wanted = 5 + rng.below(25);
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = 0;
        while seen < wanted {
            let Some(line) = lines.next() else { break };
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("committed ") {
                reported = Some(n.trim().parse().unwrap());
                seen += 1;
            }
        }
        // SIGKILL mid-stream: the child is likely inside a commit.
        child.kill().unwrap();
        child.wait().unwrap();

        let history = History::open(dir.path(), small_options()).unwrap();
        let head = history.head().unwrap();
        assert!(
            head >= reported,
            "round {round}: head {head:?} lost reported block {reported:?}"
        );
        let head = head.unwrap() as usize;
        verify(&history, &chain[..=head]);
    }
}

#[test]
fn a_second_open_of_the_same_directory_in_one_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = History::open(dir.path(), small_options()).unwrap();
    // MDBX refuses it (EAGAIN): share one History through an Arc instead.
    let err = History::open(dir.path(), small_options()).unwrap_err();
    assert!(
        matches!(
            err,
            HistoryError::Mdbx {
                op: "open the environment",
                ..
            }
        ),
        "{err}"
    );
    drop(first);
    History::open(dir.path(), small_options()).unwrap();
}
