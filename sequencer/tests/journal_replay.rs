//! A transaction that was given a hash is, after a restart, in a durable block or back in the
//! pool, even when load has raised the base fee above its fee cap meanwhile (issue 29,
//! finding 10). Before the fix the journal replay re-added transactions through the pool's
//! front door, which refuses a fee cap below the base fee, and then rewrote the journal
//! without them: the transaction was gone.

use std::time::{Duration, Instant};

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, Bytes, TxKind, U256};
use gigas_chain::{dev_signer, ChainConfig};
use gigas_sequencer::{Node, NodeConfig};

fn transfer(from: u32, nonce: u64, max_fee: u128) -> Bytes {
    gigas_test_support::sign_raw(
        &dev_signer(from).unwrap(),
        TxEip1559 {
            chain_id: 1337,
            nonce,
            gas_limit: 21_000,
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: 1,
            to: TxKind::Call(Address::repeat_byte(0x77)),
            value: U256::from(1),
            ..TxEip1559::default()
        },
    )
}

#[test]
fn a_journaled_transaction_survives_a_restart_under_a_risen_base_fee() {
    let dir = tempfile::tempdir().unwrap();
    // Long blocks: the first block takes the whole load and raises the base fee; the empty
    // ones after it lower it again, so the producer must be stopped before the second. At
    // 50 ms blocks a slow CI machine's poll missed that window.
    let chain = ChainConfig::dev(1_500).unwrap();
    let config = NodeConfig {
        threads: 2,
        recovery_threads: 1,
        ..NodeConfig::new(dir.path().join("node"), chain)
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _enter = rt.enter();

    let node = Node::open(config.clone()).unwrap();
    let base_fee = node.next_base_fee();
    // Account 9's nonce 1 (its nonce 0 is not sent): queued, so no block takes it, with a
    // fee cap of exactly today's base fee.
    let waiting = transfer(9, 1, u128::from(base_fee));
    let hash = rt
        .block_on(node.submit(waiting))
        .expect("accepted at today's base fee");
    // Load that fills blocks past their target (2,304 transfers, 48M gas against a 30M
    // target): the base fee rises.
    for from in 0..9 {
        for nonce in 0..256 {
            rt.block_on(node.submit(transfer(from, nonce, 1_000_000_000_000)))
                .expect("load accepted");
        }
    }
    let producer = {
        let node = node.clone();
        std::thread::spawn(move || node.run_producer())
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while node.next_base_fee() <= base_fee || !node.pool().is_empty() && node.pool().len() > 1 {
        assert!(
            Instant::now() < deadline,
            "the base fee did not rise: {} (pool {})",
            node.next_base_fee(),
            node.pool().len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    node.stop();
    producer.join().unwrap().unwrap();
    let risen = node.next_base_fee();
    assert!(
        node.pool().contains(hash),
        "still pooled before the restart"
    );
    drop(node);
    println!("base fee {base_fee} -> {risen}; restarting");

    let node = Node::open(config).unwrap();
    assert!(
        node.next_base_fee() > base_fee,
        "the restarted node's base fee is the risen one"
    );
    assert!(
        node.pool().contains(hash),
        "the transaction given a hash before the restart is lost: the base fee rose from \
         {base_fee} to {} above its fee cap",
        node.next_base_fee()
    );
}
