//! A transaction that turns invalid inside the block being built is left out in its place,
//! alone (issue 29, finding 8). The attack: one EIP-7702 transaction whose authorizations,
//! signed by 100 senders that have transactions in the pool, bump each of those senders'
//! nonces before their transactions run. Before the fix the builder re-executed the whole
//! block once per victim (101 executions of a 201-transaction block) and dropped every victim's
//! later transactions from the pool; now the block executes once, each victim's stale
//! transaction is skipped where it stands, and its next one, valid now, is in the same block.

use std::time::{Duration, Instant};

use alloy_consensus::TxEip7702;
use alloy_eips::eip7702::Authorization;
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use gigas_chain::{bench_key, dev_signer, ChainConfig, GenesisAccount};
use gigas_sequencer::{Node, NodeConfig};

const VICTIMS: u64 = 100;
const GWEI: u128 = 1_000_000_000;

fn transfer(key: &PrivateKeySigner, nonce: u64) -> Bytes {
    gigas_test_support::dev_transfer(key, nonce)
}

#[test]
fn a_transaction_invalidated_in_the_block_is_skipped_alone() {
    let dir = tempfile::tempdir().unwrap();
    let victims: Vec<PrivateKeySigner> = (0..VICTIMS)
        .map(|i| PrivateKeySigner::from_bytes(&bench_key(29, i)).unwrap())
        .collect();
    // Long blocks, so that the first block holds the whole attack.
    let mut chain = ChainConfig::dev(2_000).unwrap();
    for victim in &victims {
        chain.alloc.insert(
            victim.address(),
            GenesisAccount {
                balance: U256::from(10u128.pow(18)),
                ..GenesisAccount::default()
            },
        );
    }
    let config = NodeConfig {
        threads: 2,
        recovery_threads: 1,
        ..NodeConfig::new(dir.path().join("node"), chain)
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _enter = rt.enter();
    let node = Node::open(config).unwrap();

    let mut stale = Vec::new();
    let mut next = Vec::new();
    for victim in &victims {
        stale.push(rt.block_on(node.submit(transfer(victim, 0))).unwrap());
        next.push(rt.block_on(node.submit(transfer(victim, 1))).unwrap());
    }
    // Each victim's authorization at its nonce 0 (to an empty account: a delegation that does
    // nothing but take the nonce), carried by a transaction that pays the highest tip, so
    // that the builder puts it first.
    let authorizations = victims
        .iter()
        .map(|victim| {
            let auth = Authorization {
                chain_id: U256::from(1337),
                address: Address::repeat_byte(0x55),
                nonce: 0,
            };
            let signature = victim.sign_hash_sync(&auth.signature_hash()).unwrap();
            auth.into_signed(signature)
        })
        .collect();
    let attacker = dev_signer(0).unwrap();
    let attack = rt
        .block_on(node.submit(gigas_test_support::sign_raw(
            &attacker,
            TxEip7702 {
                chain_id: 1337,
                nonce: 0,
                gas_limit: 21_000 + 25_000 * VICTIMS,
                max_fee_per_gas: 1_000 * GWEI,
                max_priority_fee_per_gas: 100 * GWEI,
                to: attacker.address(),
                authorization_list: authorizations,
                ..TxEip7702::default()
            },
        )))
        .unwrap();

    let producer = {
        let node = node.clone();
        std::thread::spawn(move || node.run_producer())
    };
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    while node.head_number() < 1 {
        assert!(Instant::now() < deadline, "no block within two minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    node.stop();
    producer.join().unwrap().unwrap();
    println!(
        "block 1 produced {:.0} ms after the producer started (2,000 ms block time)",
        started.elapsed().as_secs_f64() * 1e3
    );

    let location = |hash: B256| {
        node.history()
            .transaction_location(hash)
            .unwrap()
            .map(|l| (l.block, l.index))
    };
    assert_eq!(
        location(attack),
        Some((1, 0)),
        "the attack is first in block 1"
    );
    for (i, (stale, next)) in stale.iter().zip(&next).enumerate() {
        assert_eq!(
            location(*stale),
            None,
            "victim {i}'s nonce 0 was taken by the authorization: it cannot be in a block"
        );
        assert!(
            !node.pool().contains(*stale),
            "victim {i}'s stale transaction is still pooled"
        );
        assert_eq!(
            location(*next).map(|(block, _)| block),
            Some(1),
            "victim {i}'s next transaction (nonce 1, valid once the authorization took nonce 0) \
             is not in block 1 (in the pool: {})",
            node.pool().contains(*next)
        );
    }
    let receipts = node.history().receipts(1).unwrap().unwrap();
    assert_eq!(receipts.len() as u64, 1 + VICTIMS);
    assert!(receipts.iter().all(|r| r.status()));
    assert_eq!(node.metrics().transactions_dropped.get(), VICTIMS);
    // One execution per block produced, Block-STM or sequential: not the block once more for
    // each victim.
    let blockstm = node.blockstm_metrics();
    let executions = blockstm.parallel_blocks.get() + blockstm.sequential_blocks.get();
    assert_eq!(
        executions,
        node.head_number(),
        "block executions for {} blocks",
        node.head_number()
    );
}
