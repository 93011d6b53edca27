//! Sender recovery through the bounded worker pool, from many tasks at once.

mod common;

use std::time::Instant;

use alloy_consensus::TxEnvelope;
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{Address, Bytes};
use common::*;
use gigas_txpool::{decode_and_recover, decode_and_recover_all, Metrics, Recoverer, TxPoolError};
use tokio::task::JoinSet;

/// `count` distinct transfers from `senders` keys, with the address that signed each.
fn signed(count: usize, senders: u64) -> Vec<(Address, Bytes)> {
    let keys: Vec<_> = (0..senders).map(signer).collect();
    (0..count)
        .map(|i| {
            let key = &keys[i % keys.len()];
            let nonce = (i / keys.len()) as u64;
            (key.address(), transfer(key, nonce, 10, 1))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_recover_their_own_senders() {
    let txs = signed(2000, 50);
    let metrics = Metrics::default();
    let recoverer =
        std::sync::Arc::new(Recoverer::new(config(), metrics.clone()).expect("threads"));
    let mut tasks = JoinSet::new();
    for (address, raw) in txs.clone() {
        let recoverer = std::sync::Arc::clone(&recoverer);
        tasks.spawn(async move {
            // A full queue is the caller's cue to retry; these callers do.
            loop {
                match recoverer.recover(raw.clone()).await {
                    Err(TxPoolError::Busy) => tokio::task::yield_now().await,
                    other => return (address, other),
                }
            }
        });
    }
    let mut recovered = 0;
    while let Some(joined) = tasks.join_next().await {
        let (address, result) = joined.expect("task");
        let tx = result.expect("valid transaction");
        assert_eq!(tx.sender, address);
        recovered += 1;
    }
    assert_eq!(recovered, txs.len());
    assert!(metrics.received.get() >= txs.len() as u64);
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_answers_busy_at_once() {
    let txs = signed(64, 8);
    let mut small = config();
    small.recovery_threads = 1;
    small.recovery_queue = 1;
    let metrics = Metrics::default();
    let recoverer = std::sync::Arc::new(Recoverer::new(small, metrics.clone()).expect("threads"));
    let mut tasks = JoinSet::new();
    for (address, raw) in txs {
        let recoverer = std::sync::Arc::clone(&recoverer);
        tasks.spawn(async move { (address, recoverer.recover(raw).await) });
    }
    let (mut ok, mut busy) = (0u64, 0u64);
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("task") {
            (address, Ok(tx)) => {
                assert_eq!(tx.sender, address);
                ok += 1;
            }
            (_, Err(TxPoolError::Busy)) => busy += 1,
            (_, Err(other)) => panic!("unexpected {other}"),
        }
    }
    // All 64 were submitted before the one worker could finish more than a few.
    assert!(busy > 0, "no busy answers ({ok} recovered)");
    assert!(ok > 0);
    assert_eq!(metrics.rejected_count("busy"), busy);
    assert_eq!(
        TxPoolError::Busy.to_string(),
        "txpool is busy: the sender recovery queue is full, retry later"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn stateless_rejections_come_back_through_the_workers() {
    let metrics = Metrics::default();
    let recoverer = Recoverer::new(config(), metrics.clone()).expect("threads");
    let err = recoverer.recover(eip4844(&signer(0), 0)).await.unwrap_err();
    assert_eq!(err, TxPoolError::BlobNotSupported);
    let err = recoverer
        .recover(Bytes::from_static(&[0xc0]))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "decode");
    assert_eq!(metrics.rejected_count("blob_not_supported"), 1);
    assert_eq!(metrics.rejected_count("decode"), 1);
    assert_eq!(metrics.received.get(), 2);
}

#[test]
fn batch_recovery_keeps_input_order() {
    let txs = signed(300, 7);
    let raws: Vec<Bytes> = txs.iter().map(|(_, raw)| raw.clone()).collect();
    let mut with_bad = raws.clone();
    with_bad.insert(100, Bytes::from_static(&[0x03]));
    let results = decode_and_recover_all(&with_bad, &config(), 3);
    assert_eq!(results.len(), with_bad.len());
    assert_eq!(results[100], Err(TxPoolError::BlobNotSupported));
    let recovered: Vec<Address> = results
        .into_iter()
        .filter_map(Result::ok)
        .map(|tx| tx.sender)
        .collect();
    assert_eq!(
        recovered,
        txs.iter().map(|(address, _)| *address).collect::<Vec<_>>()
    );
}

/// Prints what decoding, checking and recovering one transaction costs here (run with
/// `--release -- --nocapture`). Measures, asserts nothing about time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_cost_per_transaction() {
    let count = 4000;
    let txs = signed(count, 200);
    let config = config();

    let started = Instant::now();
    for (_, raw) in &txs {
        let envelope = TxEnvelope::decode_2718(&mut raw.as_ref()).expect("decodes");
        std::hint::black_box(envelope);
    }
    let decode = started.elapsed();

    let started = Instant::now();
    for (address, raw) in &txs {
        let tx = decode_and_recover(raw, &config).expect("valid");
        assert_eq!(tx.sender, *address);
    }
    let full = started.elapsed();

    let recoverer =
        std::sync::Arc::new(Recoverer::new(config.clone(), Metrics::default()).expect("threads"));
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for (_, raw) in txs.clone() {
        let recoverer = std::sync::Arc::clone(&recoverer);
        tasks.spawn(async move {
            loop {
                match recoverer.recover(raw.clone()).await {
                    Err(TxPoolError::Busy) => tokio::task::yield_now().await,
                    other => return other,
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("task").expect("valid");
    }
    let pooled = started.elapsed();

    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / count as f64;
    println!(
        "recovery cost over {count} transfers: decode only {:.1} us/tx; decode + checks + \
         recovery {:.1} us/tx on one thread; through the Recoverer ({} threads) {:.1} us/tx \
         = {:.0} tx/s",
        per(decode),
        per(full),
        recoverer.threads(),
        per(pooled),
        count as f64 / pooled.as_secs_f64()
    );
}
