//! Nonce queues, promotion, replacement, eviction and block selection, with real signed
//! transactions.

mod common;

use std::collections::{BTreeMap, HashMap};

use alloy_primitives::{Address, B256, U256};
use common::*;
use gigas_txpool::{AddOutcome, PoolStats, TxPool, TxPoolError};
use proptest::prelude::*;

fn hashes(txs: &[std::sync::Arc<gigas_txpool::PooledTx>]) -> Vec<B256> {
    txs.iter().map(|tx| tx.hash).collect()
}

#[test]
fn gaps_queue_and_closing_them_promotes() {
    let key = signer(0);
    let state = MemState::funded([key.address()], U256::from(ETH));
    let pool = TxPool::new(config());
    let mut pending = pool.subscribe_pending();
    let raws: Vec<_> = (0..4).map(|n| transfer(&key, n, 10, 1)).collect();
    let txs: Vec<_> = raws.iter().map(pooled).collect();

    assert_eq!(pool.add(txs[0].clone(), &state, 1), Ok(AddOutcome::Pending));
    assert_eq!(pool.add(txs[2].clone(), &state, 1), Ok(AddOutcome::Queued));
    assert_eq!(pool.add(txs[3].clone(), &state, 1), Ok(AddOutcome::Queued));
    assert_eq!(
        pool.stats(),
        PoolStats {
            pending: 1,
            queued: 2,
            senders: 1,
            bytes: raws[0].len() + raws[2].len() + raws[3].len(),
        }
    );
    assert_eq!(pool.pending_nonce(key.address()), Some(1));
    assert_eq!(pool.pending_nonce(Address::ZERO), None);
    assert_eq!(hashes(&pool.best(1, BLOCK_GAS, 100)), vec![txs[0].hash]);

    assert_eq!(pool.add(txs[1].clone(), &state, 1), Ok(AddOutcome::Pending));
    assert_eq!(pool.stats().pending, 4);
    assert_eq!(pool.stats().queued, 0);
    assert_eq!(pool.pending_nonce(key.address()), Some(4));
    let announced: Vec<B256> = std::iter::from_fn(|| pending.try_recv().ok()).collect();
    assert_eq!(
        announced,
        vec![txs[0].hash, txs[1].hash, txs[2].hash, txs[3].hash]
    );
    assert_eq!(
        hashes(&pool.best(1, BLOCK_GAS, 100)),
        txs.iter().map(|tx| tx.hash).collect::<Vec<_>>()
    );

    // A block included nonces 0 and 1.
    state.set(key.address(), 2, U256::from(ETH));
    pool.on_block(&state, &[key.address()], 1);
    assert!(!pool.contains(txs[0].hash) && !pool.contains(txs[1].hash));
    assert_eq!(pool.stats().pending, 2);
    assert_eq!(pool.metrics().included.get(), 2);
    assert_eq!(pool.pending_nonce(key.address()), Some(4));

    // Senders not in the pool and repeated senders cost nothing.
    pool.on_block(&state, &[Address::ZERO, key.address(), key.address()], 1);
    assert_eq!(pool.stats().pending, 2);
}

#[test]
fn a_block_that_fills_the_gap_promotes_the_queued() {
    let key = signer(0);
    let state = MemState::funded([key.address()], U256::from(ETH));
    let pool = TxPool::new(config());
    let gapped = pooled(&transfer(&key, 2, 10, 1));
    assert_eq!(pool.add(gapped.clone(), &state, 1), Ok(AddOutcome::Queued));
    assert!(pool.best(1, BLOCK_GAS, 10).is_empty());
    let mut pending = pool.subscribe_pending();
    // Nonces 0 and 1 arrived through a block, not through this pool.
    state.set(key.address(), 2, U256::from(ETH));
    pool.on_block(&state, &[key.address()], 1);
    assert_eq!(pool.stats().pending, 1);
    assert_eq!(pending.try_recv().ok(), Some(gapped.hash));
    assert_eq!(hashes(&pool.best(1, BLOCK_GAS, 10)), vec![gapped.hash]);
}

#[test]
fn a_block_that_drains_the_balance_drops_what_it_cannot_pay() {
    let key = signer(0);
    let state = MemState::funded([key.address()], U256::from(ETH));
    let pool = TxPool::new(config());
    let cheap = pooled(&eip1559(&key, 0, 10, 1, 21_000, 0));
    let dear = pooled(&eip1559(&key, 1, 10, 1, 21_000, ETH / 2));
    let after = pooled(&eip1559(&key, 2, 10, 1, 21_000, 0));
    for tx in [&cheap, &dear, &after] {
        assert_eq!(pool.add(tx.clone(), &state, 1), Ok(AddOutcome::Pending));
    }
    state.set(key.address(), 0, U256::from(ETH / 4));
    pool.on_block(&state, &[key.address()], 1);
    assert!(pool.contains(cheap.hash) && !pool.contains(dear.hash) && pool.contains(after.hash));
    // The gap left behind queues what follows it.
    assert_eq!(pool.stats().pending, 1);
    assert_eq!(pool.stats().queued, 1);
    assert_eq!(pool.metrics().unpayable.get(), 1);
}

#[test]
fn replacement_needs_both_fees_raised_by_the_bump() {
    let key = signer(0);
    let state = MemState::funded([key.address()], U256::from(ETH));
    let pool = TxPool::new(config());
    let original = pooled(&transfer(&key, 0, 100, 10));
    pool.add(original.clone(), &state, 1).expect("first");

    for (max_fee, tip) in [(110, 10), (100, 11), (200, 10), (109, 11), (110, 10)] {
        assert_eq!(
            pool.add(pooled(&transfer(&key, 0, max_fee, tip)), &state, 1),
            Err(TxPoolError::ReplacementUnderpriced),
            "max fee {max_fee}, tip {tip}"
        );
    }
    let bumped = pooled(&transfer(&key, 0, 110, 11));
    assert_eq!(
        pool.add(bumped.clone(), &state, 1),
        Ok(AddOutcome::Replaced { old: original.hash })
    );
    assert!(!pool.contains(original.hash));
    assert_eq!(pool.get(bumped.hash).map(|tx| tx.hash), Some(bumped.hash));
    assert_eq!(pool.stats().pending, 1);
    assert_eq!(pool.stats().bytes, bumped.size());
    assert_eq!(pool.metrics().replaced.get(), 1);

    // A queued transaction is replaced in place and stays queued.
    let queued = pooled(&transfer(&key, 5, 100, 10));
    assert_eq!(pool.add(queued.clone(), &state, 1), Ok(AddOutcome::Queued));
    let requeued = pooled(&transfer(&key, 5, 1000, 100));
    assert_eq!(
        pool.add(requeued, &state, 1),
        Ok(AddOutcome::Replaced { old: queued.hash })
    );
    assert_eq!(pool.stats().queued, 1);

    // A larger bump setting is honoured.
    let mut strict = config();
    strict.price_bump_percent = 50;
    let strict = TxPool::new(strict);
    strict.add(original.clone(), &state, 1).expect("first");
    assert_eq!(
        strict.add(pooled(&transfer(&key, 0, 149, 15)), &state, 1),
        Err(TxPoolError::ReplacementUnderpriced)
    );
    assert!(matches!(
        strict.add(pooled(&transfer(&key, 0, 150, 15)), &state, 1),
        Ok(AddOutcome::Replaced { .. })
    ));
}

#[test]
fn eviction_takes_the_cheapest_tail_and_keeps_nonces_contiguous() {
    let cheap = signer(0);
    let mid = signer(1);
    let rich = signer(2);
    let gapped = signer(3);
    let state = MemState::funded(
        [&cheap, &mid, &rich, &gapped].map(|k| k.address()),
        U256::from(ETH),
    );
    let mut small = config();
    small.max_txs = 5;
    let pool = TxPool::new(small);
    // The cheap sender's middle transaction pays the least of all, but evicting it would open
    // a gap: its tail goes first.
    let cheap_txs: Vec<_> = [(0, 3), (1, 1), (2, 4)]
        .map(|(nonce, tip)| pooled(&transfer(&cheap, nonce, 100, tip)))
        .to_vec();
    for tx in &cheap_txs {
        assert_eq!(pool.add(tx.clone(), &state, 1), Ok(AddOutcome::Pending));
    }
    pool.add(pooled(&transfer(&mid, 0, 100, 5)), &state, 1)
        .expect("room");
    // A gapped transaction with a high tip.
    let future = pooled(&transfer(&gapped, 4, 100, 90));
    assert_eq!(pool.add(future.clone(), &state, 1), Ok(AddOutcome::Queued));

    // Full: the queued transaction goes first, though it pays the most.
    pool.add(pooled(&transfer(&rich, 0, 100, 50)), &state, 1)
        .expect("evicts the queued one");
    assert!(!pool.contains(future.hash));
    // Then the cheap sender's tail (tip 4, below the mid sender's 5).
    pool.add(pooled(&transfer(&rich, 1, 100, 50)), &state, 1)
        .expect("evicts a tail");
    assert!(!pool.contains(cheap_txs[2].hash));
    assert!(pool.contains(cheap_txs[1].hash));
    // Now the cheap sender's tail is its tip-1 transaction.
    pool.add(pooled(&transfer(&rich, 2, 100, 50)), &state, 1)
        .expect("evicts a tail");
    assert!(!pool.contains(cheap_txs[1].hash));
    assert!(pool.contains(cheap_txs[0].hash));
    assert_eq!(pool.metrics().evicted.get(), 3);
    assert_eq!(pool.pending_nonce(cheap.address()), Some(1));
    let stats = pool.stats();
    assert_eq!((stats.pending, stats.queued), (5, 0));

    // Bytes bound: a pool of at most two transfers' bytes evicts by size too.
    let mid0 = pooled(&transfer(&mid, 0, 100, 5));
    let max_bytes = cheap_txs[0].size() + mid0.size();
    let mut tiny = config();
    tiny.max_bytes = max_bytes;
    let tiny = TxPool::new(tiny);
    tiny.add(cheap_txs[0].clone(), &state, 1).expect("room");
    tiny.add(mid0, &state, 1).expect("room");
    tiny.add(pooled(&transfer(&rich, 0, 100, 50)), &state, 1)
        .expect("evicts the cheapest");
    assert!(!tiny.contains(cheap_txs[0].hash));
    assert!(tiny.stats().bytes <= max_bytes);
}

#[test]
fn best_orders_by_tip_under_nonce_order_and_fits_the_gas() {
    let a = signer(0);
    let b = signer(1);
    let c = signer(2);
    let state = MemState::funded([&a, &b, &c].map(|k| k.address()), U256::from(ETH));
    let pool = TxPool::new(config());
    let a0 = pooled(&transfer(&a, 0, 1000, 1));
    let a1 = pooled(&transfer(&a, 1, 1000, 100));
    let b0 = pooled(&transfer(&b, 0, 1000, 50));
    let c0 = pooled(&eip1559(&c, 0, 1000, 200, 100_000, 0));
    let c1 = pooled(&transfer(&c, 1, 1000, 300));
    for tx in [&a1, &a0, &b0, &c0, &c1] {
        pool.add(tx.clone(), &state, 10).expect("valid");
    }
    assert_eq!(
        hashes(&pool.best(10, BLOCK_GAS, 100)),
        vec![c0.hash, c1.hash, b0.hash, a0.hash, a1.hash]
    );
    assert_eq!(hashes(&pool.best(10, BLOCK_GAS, 2)), vec![c0.hash, c1.hash]);
    // c0 needs 100,000 gas: with 70,000 the sender is skipped, the rest fill what is left.
    assert_eq!(
        hashes(&pool.best(10, 70_000, 100)),
        vec![b0.hash, a0.hash, a1.hash]
    );
    assert_eq!(hashes(&pool.best(10, 20_999, 100)), Vec::<B256>::new());
    // At a base fee of 950 every tip above 50 is capped at 50: among equals the older
    // transaction goes first (b0 arrived before c0), and a0 still pays only 1.
    assert_eq!(
        hashes(&pool.best(950, BLOCK_GAS, 100)),
        vec![b0.hash, c0.hash, c1.hash, a0.hash, a1.hash]
    );
    // Above every fee cap nothing is executable.
    assert!(pool.best(1001, BLOCK_GAS, 100).is_empty());
}

/// A transaction the builder found invalid in its place goes alone (issue 29, finding 8):
/// its sender's later transactions stay, queued behind the gap (before, the builder dropped
/// all of them, so one EIP-7702 authorization that bumped a victim's nonce cost the victim
/// every transaction it had sent).
#[test]
fn remove_invalid_drops_only_that_transaction() {
    let key = signer(0);
    let other = signer(1);
    let state = MemState::funded([key.address(), other.address()], U256::from(ETH));
    let pool = TxPool::new(config());
    let txs: Vec<_> = (0..4).map(|n| pooled(&transfer(&key, n, 10, 1))).collect();
    for tx in &txs {
        pool.add(tx.clone(), &state, 1).expect("valid");
    }
    let bystander = pooled(&transfer(&other, 0, 10, 1));
    pool.add(bystander.clone(), &state, 1).expect("valid");
    assert!(pool.remove_invalid(txs[1].hash, "insufficient funds"));
    assert!(!pool.remove_invalid(txs[1].hash, "again"));
    assert!(pool.contains(txs[0].hash) && pool.contains(bystander.hash));
    assert!(pool.contains(txs[2].hash) && pool.contains(txs[3].hash));
    assert_eq!(pool.len(), 4);
    assert_eq!(pool.stats().queued, 2);
    assert_eq!(pool.pending_nonce(key.address()), Some(1));
    assert_eq!(pool.metrics().invalid.get(), 1);
}

/// A transaction whose journal append failed is taken back alone: the sender's later
/// transactions were accepted and stay, queued behind the gap.
#[test]
fn withdraw_takes_back_one_transaction_and_keeps_the_later_ones() {
    let key = signer(0);
    let state = MemState::funded([key.address()], U256::from(ETH));
    let pool = TxPool::new(config());
    let txs: Vec<_> = (0..4).map(|n| pooled(&transfer(&key, n, 10, 1))).collect();
    for tx in &txs {
        pool.add(tx.clone(), &state, 1).expect("valid");
    }
    assert!(pool.withdraw(txs[1].hash));
    assert!(!pool.withdraw(txs[1].hash), "already withdrawn");
    assert!(!pool.contains(txs[1].hash));
    assert!(pool.contains(txs[2].hash) && pool.contains(txs[3].hash));
    assert_eq!(pool.stats().pending, 1);
    assert_eq!(pool.stats().queued, 2);
    assert_eq!(pool.pending_nonce(key.address()), Some(1));
    // Sent again, it closes the gap and promotes the rest.
    assert_eq!(pool.add(txs[1].clone(), &state, 1), Ok(AddOutcome::Pending));
    assert_eq!(pool.stats().pending, 4);
}

/// A transaction the pool holds while its fee cap is below the base fee comes back after a
/// restart: `readmit` skips the price checks that `add` makes at the door (before, journal
/// replay used `add` and dropped it for good when the base fee had risen).
#[test]
fn readmit_keeps_a_journaled_transaction_under_a_risen_base_fee() {
    let key = signer(0);
    let state = MemState::funded([key.address()], U256::from(ETH));
    let pool = TxPool::new(config());
    let tx = pooled(&transfer(&key, 0, 10, 1));
    assert!(matches!(
        pool.add(tx.clone(), &state, 50),
        Err(TxPoolError::FeeCapBelowBaseFee { .. })
    ));
    assert_eq!(
        pool.readmit(tx.clone(), &state, 50),
        Ok(AddOutcome::Pending)
    );
    assert!(
        pool.best(50, BLOCK_GAS, 100).is_empty(),
        "not selected under the base fee"
    );
    assert_eq!(hashes(&pool.best(5, BLOCK_GAS, 100)), vec![tx.hash]);
}

#[test]
fn all_encoded_rebuilds_the_same_pool() {
    let keys: Vec<_> = (0..5).map(signer).collect();
    let state = MemState::funded(keys.iter().map(|k| k.address()), U256::from(ETH));
    let pool = TxPool::new(config());
    for (i, key) in keys.iter().enumerate() {
        for nonce in [0, 1, 3] {
            pool.add(pooled(&transfer(key, nonce, 10 + i as u128, 1)), &state, 1)
                .expect("valid");
        }
    }
    let again = TxPool::new(config());
    for raw in pool.all_encoded() {
        again.add(pooled(&raw), &state, 1).expect("replays");
    }
    assert_eq!(pool.stats(), again.stats());
    assert_eq!(
        hashes(&pool.best(1, BLOCK_GAS, 100)).len(),
        hashes(&again.best(1, BLOCK_GAS, 100)).len()
    );

    let mut registry = prometheus_client::registry::Registry::default();
    pool.metrics().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(text.contains("gigas_txpool_pending 10"), "{text}");
    assert!(text.contains("gigas_txpool_queued 5"), "{text}");
    assert!(text.contains("gigas_txpool_accepted_total 15"), "{text}");
}

/// What `best` must return, computed the slow and obvious way.
fn model(
    txs: &[(usize, gigas_txpool::PooledTx)],
    state_nonces: &HashMap<Address, u64>,
    base_fee: u64,
    gas_limit: u64,
    max_txs: usize,
) -> Vec<B256> {
    // Each sender's pending run, with the arrival index of each transaction.
    let mut by_sender: HashMap<Address, BTreeMap<u64, (usize, &gigas_txpool::PooledTx)>> =
        HashMap::new();
    for (arrival, tx) in txs {
        by_sender
            .entry(tx.sender)
            .or_default()
            .insert(tx.nonce, (*arrival, tx));
    }
    let mut runs: HashMap<Address, Vec<(usize, &gigas_txpool::PooledTx)>> = HashMap::new();
    for (sender, txs) in by_sender {
        let mut next = state_nonces[&sender];
        let mut run = Vec::new();
        while let Some(entry) = txs.get(&next) {
            run.push(*entry);
            next += 1;
        }
        run.reverse();
        runs.insert(sender, run);
    }
    let mut out = Vec::new();
    let mut remaining = gas_limit;
    while out.len() < max_txs {
        let best = runs
            .iter()
            .filter_map(|(sender, run)| {
                let (arrival, tx) = run.last()?;
                let tip = tx.effective_tip(base_fee)?;
                Some((tip, std::cmp::Reverse(*arrival), *sender))
            })
            .max();
        let Some((_, _, sender)) = best else {
            break;
        };
        let run = runs.get_mut(&sender).expect("chosen from the map");
        let (_, tx) = *run.last().expect("non-empty");
        if tx.gas_limit > remaining {
            runs.remove(&sender);
            continue;
        }
        remaining -= tx.gas_limit;
        out.push(tx.hash);
        run.pop();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn best_matches_a_simple_model(
        state_nonces in proptest::collection::vec(0u64..3, 4),
        txs in proptest::collection::vec(
            (0usize..4, 0u64..7, 1u128..300, 0u128..300, prop_oneof![Just(21_000u64), 21_000u64..200_000]),
            1..28,
        ),
        base_fee in 0u64..250,
        gas_limit in 0u64..600_000,
        max_txs in 0usize..24,
    ) {
        let keys: Vec<_> = (0..4).map(signer).collect();
        let state = MemState::default();
        let mut nonces = HashMap::new();
        for (key, nonce) in keys.iter().zip(&state_nonces) {
            state.set(key.address(), *nonce, U256::from(ETH));
            nonces.insert(key.address(), *nonce);
        }
        let pool = TxPool::new(config());
        let mut accepted: Vec<(usize, gigas_txpool::PooledTx)> = Vec::new();
        for (arrival, (sender, nonce, max_fee, tip, gas)) in txs.into_iter().enumerate() {
            let tip = tip.min(max_fee);
            let tx = pooled(&eip1559(&keys[sender], nonce, max_fee, tip, gas, 0));
            match pool.add(tx.clone(), &state, 0) {
                Ok(AddOutcome::Replaced { old }) => {
                    accepted.retain(|(_, held)| held.hash != old);
                    accepted.push((arrival, tx));
                }
                Ok(_) => accepted.push((arrival, tx)),
                Err(err) => prop_assert!(
                    matches!(err, TxPoolError::NonceTooLow { .. } | TxPoolError::ReplacementUnderpriced | TxPoolError::AlreadyKnown),
                    "unexpected rejection {err}"
                ),
            }
        }
        let chosen = pool.best(base_fee, gas_limit, max_txs);
        prop_assert_eq!(hashes(&chosen), model(&accepted, &nonces, base_fee, gas_limit, max_txs));
        prop_assert!(chosen.iter().map(|tx| tx.gas_limit).sum::<u64>() <= gas_limit);
        let mut last_nonce: HashMap<Address, u64> = HashMap::new();
        for tx in &chosen {
            let expected = last_nonce.get(&tx.sender).map_or(nonces[&tx.sender], |n| n + 1);
            prop_assert_eq!(tx.nonce, expected);
            last_nonce.insert(tx.sender, tx.nonce);
        }
    }
}
