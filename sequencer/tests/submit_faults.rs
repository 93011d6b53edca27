//! What `eth_sendRawTransaction` does when what it waits on stalls or fails (issue 29):
//!
//! - finding 2: a commit holding the state's write lock must not hold the async worker a
//!   submission runs on (every connection is served from those few threads);
//! - finding 11: a journal write that fails withdraws only its own transaction, keeping the
//!   sender's later ones; one that fails after a block took the transaction answers its hash,
//!   since the block holds it (before, "not accepted" for a mined transaction).
//!
//! The journal's failure is simulated ([`gigas_txpool::Journal::fail_next_write`]): the write
//! fails as a full disk's does, through the real error path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::Bytes;
use alloy_signer_local::PrivateKeySigner;
use gigas_chain::{dev_signer, ChainConfig};
use gigas_sequencer::{Node, NodeConfig, SubmitError};

fn transfer(key: &PrivateKeySigner, nonce: u64) -> Bytes {
    gigas_test_support::dev_transfer(key, nonce)
}

fn open(dir: &std::path::Path, block_time_ms: u64) -> Arc<Node> {
    let config = NodeConfig {
        threads: 2,
        recovery_threads: 1,
        ..NodeConfig::new(dir.to_path_buf(), ChainConfig::dev(block_time_ms).unwrap())
    };
    Node::open(config).unwrap()
}

#[test]
fn a_submission_waiting_on_a_stalled_commit_leaves_the_async_worker_free() {
    let dir = tempfile::tempdir().unwrap();
    // One async worker: if the submission blocked it, nothing else could run.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _enter = rt.enter();
    let node = open(dir.path(), 1_000);
    let sender = dev_signer(1).unwrap();

    let stalled = node.hold_state_write_lock();
    let submission = {
        let node = node.clone();
        rt.spawn(async move { node.submit(transfer(&sender, 0)).await })
    };
    // Let the submission reach the lock.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !submission.is_finished(),
        "the submission cannot pass the lock"
    );
    // Any other task on the one worker (a connection's `eth_blockNumber`) still runs. Watched
    // from this thread: a held worker drives no timer either.
    let other = rt.spawn(async { 7 });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !other.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        other.is_finished(),
        "the async worker was held by a submission waiting on the state lock"
    );
    drop(stalled);
    let hash = rt.block_on(submission).unwrap().unwrap();
    assert!(node.pool().contains(hash));
}

#[test]
fn a_failed_journal_write_withdraws_only_its_own_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _enter = rt.enter();
    // The producer does not run: nothing leaves the pool but what the failure takes.
    let node = open(dir.path(), 1_000);
    let sender = dev_signer(1).unwrap();
    let first = rt.block_on(node.submit(transfer(&sender, 0))).unwrap();
    // Nonce 2 waits behind the gap at nonce 1.
    let later = rt.block_on(node.submit(transfer(&sender, 2))).unwrap();
    node.journal().fail_next_write(Duration::ZERO);
    let gap = transfer(&sender, 1);
    let gap_hash = alloy_primitives::keccak256(&gap);
    let error = rt
        .block_on(node.submit(gap))
        .expect_err("a transaction that is not durable is not accepted");
    assert!(matches!(error, SubmitError::Journal(_)), "{error}");
    assert!(error.to_string().contains("write"), "{error}");
    assert!(
        !node.pool().contains(gap_hash),
        "the failed one is withdrawn"
    );
    assert!(
        node.pool().contains(first) && node.pool().contains(later),
        "the sender's other transactions stay pooled"
    );
    // The journal is poisoned: nothing more is accepted until a restart, and it says so.
    let next = rt
        .block_on(node.submit(transfer(&dev_signer(2).unwrap(), 0)))
        .expect_err("a poisoned journal accepts nothing");
    assert!(next.to_string().contains("earlier write"), "{next}");
}

#[test]
fn a_journal_write_failing_after_its_block_was_sealed_answers_the_hash() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _enter = rt.enter();
    let node = open(dir.path(), 100);
    let producer = {
        let node = node.clone();
        std::thread::spawn(move || node.run_producer())
    };
    let sender = dev_signer(1).unwrap();
    // The write fails long after the transaction entered the pool: ten block times, in
    // which a block takes it.
    node.journal().fail_next_write(Duration::from_millis(1_000));
    let answer = rt.block_on(node.submit(transfer(&sender, 0)));
    let hash = answer.expect("a transaction a block holds is answered with its hash");
    let deadline = Instant::now() + Duration::from_secs(60);
    while node.history().transaction_location(hash).unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the block with {hash} was never committed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    node.stop();
    producer.join().unwrap().unwrap();
}

/// Issue 66, item 11: a journal write that fails after a block took the transaction answers
/// the hash only once that block is durable. Before, it answered at once, while the block
/// was only sealed: a crash then lost a transaction the client was told was accepted.
#[test]
fn a_journal_write_failing_after_its_block_was_sealed_answers_only_once_the_block_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _enter = rt.enter();
    let node = open(dir.path(), 100);
    // No block becomes durable while this is held.
    let held = node.hold_commits();
    let sender = dev_signer(1).unwrap();
    node.journal().fail_next_write(Duration::from_millis(1_500));
    let raw = transfer(&sender, 0);
    let hash = alloy_primitives::keccak256(&raw);
    let submission = {
        let node = node.clone();
        rt.spawn(async move { node.submit(raw).await })
    };
    // The producer starts once the transaction is pooled, so that its first block takes it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !node.pool().contains(hash) {
        assert!(
            Instant::now() < deadline,
            "the transaction never reached the pool"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let producer = {
        let node = node.clone();
        std::thread::spawn(move || node.run_producer())
    };
    // The journal write fails at 1.5 s; the block holding the transaction is sealed and
    // cannot become durable.
    std::thread::sleep(Duration::from_millis(3_000));
    assert!(
        node.in_flight_block_of(hash).is_some(),
        "a sealed block holds the transaction"
    );
    assert!(
        !submission.is_finished(),
        "answered {:?} while the block holding the transaction was not durable",
        rt.block_on(submission)
    );
    drop(held);
    let answered = rt
        .block_on(submission)
        .unwrap()
        .expect("a transaction a durable block holds is answered with its hash");
    assert_eq!(answered, hash);
    assert!(
        node.history().transaction_location(hash).unwrap().is_some(),
        "answered, so its block is durable and published"
    );
    node.stop();
    producer.join().unwrap().unwrap();
}
