//! Resident memory by component on `/metrics` (issue 29, finding 19): a real `gigas-sequencer
//! --dev` reports `gigas_sequencer_memory_bytes{component}` for the pool, the JIT's code,
//! Vilmo's index, the diff writer's index, the process's anonymous memory and what the
//! components leave unaccounted; and the pool's memory flag holds: transactions past
//! `--txpool.max-mib 1` are refused or evict others, never held.

mod common;

use std::time::{Duration, Instant};

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, Bytes, TxKind, U256};
use alloy_provider::{Provider, ProviderBuilder};
use common::NodeProcess;
use gigas_chain::dev_signer;

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn component(text: &str, name: &str) -> f64 {
    value(
        text,
        &format!("gigas_sequencer_memory_bytes{{component=\"{name}\"}}"),
    )
    .unwrap_or_else(|| panic!("no memory_bytes for {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_by_component_is_reported_and_the_pool_is_held_to_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", gigas_launch::free_port().unwrap());
    let node = NodeProcess::start(
        &dir.path().join("node"),
        &[
            "--metrics",
            &addr,
            "--txpool.max-mib",
            "1",
            "--jit.budget-mib",
            "2",
        ],
    );
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    // 24 transactions of 100 KB of calldata, queued behind a nonce gap (nonce 0 is never
    // sent), so that nothing includes them: 2.4 MB against a 1 MiB pool.
    let key = dev_signer(3).unwrap();
    let (mut accepted, mut refused) = (0, Vec::new());
    for nonce in 1..=24u64 {
        let raw = gigas_test_support::sign_raw(
            &key,
            TxEip1559 {
                chain_id: 1337,
                nonce,
                gas_limit: 5_000_000,
                max_fee_per_gas: 100_000_000_000,
                max_priority_fee_per_gas: 1_000_000_000 + nonce as u128,
                to: TxKind::Call(Address::repeat_byte(0x42)),
                value: U256::ZERO,
                input: Bytes::from(vec![0xab; 100_000]),
                ..TxEip1559::default()
            },
        );
        match provider.send_raw_transaction(&raw).await {
            Ok(_) => accepted += 1,
            Err(e) => refused.push(e.to_string()),
        }
    }
    println!(
        "accepted {accepted}, refused {}: {:?}",
        refused.len(),
        refused.first()
    );
    // One transfer that a block includes, so that the diff writer's index holds keys.
    let included = provider
        .send_raw_transaction(&gigas_test_support::sign_raw(
            &dev_signer(4).unwrap(),
            TxEip1559 {
                chain_id: 1337,
                nonce: 0,
                gas_limit: 21_000,
                max_fee_per_gas: 100_000_000_000,
                max_priority_fee_per_gas: 1,
                to: TxKind::Call(Address::repeat_byte(0x43)),
                value: U256::from(1),
                ..TxEip1559::default()
            },
        ))
        .await
        .unwrap();
    included.get_receipt().await.unwrap();

    // The sampler runs once a second: wait for a sample taken after the sends.
    let deadline = Instant::now() + Duration::from_secs(30);
    let sampled = |text: &str, name: &str| {
        value(
            text,
            &format!("gigas_sequencer_memory_bytes{{component=\"{name}\"}}"),
        )
        .is_some_and(|v| v > 0.0)
    };
    let text = loop {
        let text = common::scrape_metrics(&addr);
        if sampled(&text, "txpool") && sampled(&text, "diff_key_index") {
            break text;
        }
        assert!(Instant::now() < deadline, "no memory gauges:\n{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let pool_bytes = value(&text, "gigas_txpool_bytes").expect("pool bytes");
    let [txpool, jit, vilmo, diffs, trie_sparse, trie_layer, anon, unaccounted] = [
        "txpool",
        "jit_code",
        "vilmo_index",
        "diff_key_index",
        "trie_sparse",
        "trie_layer",
        "process_anon",
        "unaccounted",
    ]
    .map(|name| component(&text, name));
    println!(
        "pool {pool_bytes} encoded bytes; memory: txpool {txpool}, jit_code {jit}, vilmo_index \
         {vilmo}, diff_key_index {diffs}, trie_sparse {trie_sparse}, trie_layer {trie_layer}, \
         process_anon {anon}, unaccounted {unaccounted}"
    );
    assert!(
        pool_bytes <= (1 << 20) as f64,
        "the pool holds {pool_bytes} bytes past --txpool.max-mib 1"
    );
    assert!(
        accepted >= 5,
        "the pool took {accepted} of the transactions"
    );
    assert!(
        !refused.is_empty() || pool_bytes < 2_400_000.0,
        "everything accepted and kept"
    );
    assert!(txpool >= pool_bytes, "the pool's memory counts its bytes");
    assert!(
        vilmo > 0.0 && diffs > 0.0,
        "the state's indices hold the genesis keys"
    );
    let accounted = txpool + jit + vilmo + diffs + trie_sparse + trie_layer;
    assert!(anon > accounted);
    assert_eq!(unaccounted, anon - accounted);
    // Threads are reported, and the blocking pool's bound holds them.
    let threads = value(&text, "gigas_sequencer_threads").expect("threads");
    let bound = gigas_rpc_eth::max_blocking_threads() + 64;
    assert!(
        threads > 2.0 && threads < bound as f64,
        "{threads} threads (bound {bound})"
    );
    assert_eq!(
        value(&text, "gigas_jit_budget_bytes"),
        Some((2u64 << 20) as f64),
        "--jit.budget-mib reaches the code cache"
    );
}
