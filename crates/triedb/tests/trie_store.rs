//! The store's root of every block equals alloy-trie's root of the same state computed from
//! scratch, over random streams of blocks (transfers, new accounts, slots written and
//! cleared, accounts destroyed and re-created with storage), across commits (handed to the
//! commit thread every few blocks), reopens (replaying from the last commit), a commit
//! gate that holds the commit back, and with the trie in memory on and off.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use alloy_primitives::{keccak256, Address, B256, KECCAK256_EMPTY, U256};
use gigas_primitives::HashedKeys;
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder};
use gigas_test_support::XorShift;
use gigas_trie::ScratchState;
use gigas_triedb::{TrieDbError, TrieStore, TrieStoreOptions};

/// Hashed accounts and hashed slots, as [`TrieStore::reset`] takes them.
type HashedState = (Vec<(B256, AccountState)>, Vec<(B256, B256, U256)>);

/// The state as a plain map: address to (account, slots).
#[derive(Clone, Default)]
struct Model(BTreeMap<Address, (AccountState, BTreeMap<U256, U256>)>);

impl Model {
    fn root(&self) -> B256 {
        let mut scratch = ScratchState::new();
        for (address, (state, slots)) in &self.0 {
            scratch.account(*address, *state);
            for (slot, value) in slots {
                scratch.slot(*address, *slot, *value);
            }
        }
        scratch.root().expect("scratch root")
    }

    fn hashed(&self) -> HashedState {
        let mut accounts = Vec::new();
        let mut slots = Vec::new();
        for (address, (state, storage)) in &self.0 {
            let h = keccak256(address);
            accounts.push((h, *state));
            for (slot, value) in storage {
                slots.push((h, keccak256(slot.to_be_bytes::<32>()), *value));
            }
        }
        (accounts, slots)
    }
}

fn address(n: u64) -> Address {
    Address::left_padding_from(&n.to_be_bytes())
}

fn state(nonce: u64, balance: u64) -> AccountState {
    AccountState {
        nonce,
        balance: U256::from(balance),
        code_hash: KECCAK256_EMPTY,
    }
}

/// A random block over `model` (which it updates): transfers between existing accounts,
/// some new ones, slot writes and clears, and now and then an account destroyed or
/// destroyed and re-created with new storage in the same block.
fn block(rng: &mut XorShift, model: &mut Model, next_account: &mut u64) -> ChangeSet {
    let mut b = ChangeSetBuilder::new();
    let existing: Vec<Address> = model.0.keys().copied().collect();
    let pick = |rng: &mut XorShift| existing[(rng.next_u64() % existing.len() as u64) as usize];
    for _ in 0..(1 + rng.next_u64() % 40) {
        let a = pick(rng);
        let entry = model.0.get_mut(&a).expect("picked");
        entry.0.nonce += 1;
        entry.0.balance = U256::from(rng.next_u64() % 1_000_000);
        b.account(a, entry.0, false);
    }
    for _ in 0..(rng.next_u64() % 6) {
        let a = address(*next_account);
        *next_account += 1;
        let s = state(0, rng.next_u64() % 1000 + 1);
        model.0.insert(a, (s, BTreeMap::new()));
        b.account(a, s, false);
    }
    for _ in 0..(rng.next_u64() % 30) {
        // Storage on a few owners, so that storage tries grow deep enough to split.
        let a = existing[(rng.next_u64() % existing.len().min(8) as u64) as usize];
        let slot = U256::from(rng.next_u64() % 400);
        let value = if rng.next_u64().is_multiple_of(4) {
            U256::ZERO
        } else {
            U256::from(rng.next_u64())
        };
        let entry = model.0.get_mut(&a).expect("owner");
        if value.is_zero() {
            entry.1.remove(&slot);
        } else {
            entry.1.insert(slot, value);
        }
        b.account(a, entry.0, false);
        b.slot(a, slot, value);
    }
    if rng.next_u64().is_multiple_of(5) {
        let a = pick(rng);
        if rng.next_u64().is_multiple_of(2) {
            model.0.remove(&a);
            b.destroyed(a);
        } else {
            // Destroyed and re-created: the old storage goes, the new slots stay.
            let s = state(1, 5);
            let mut storage = BTreeMap::new();
            b.destroyed(a);
            b.account(a, s, true);
            for k in 0..(rng.next_u64() % 5) {
                let (slot, value) = (U256::from(1000 + k), U256::from(k + 1));
                storage.insert(slot, value);
                b.slot(a, slot, value);
            }
            model.0.insert(a, (s, storage));
        }
    }
    b.build()
}

fn genesis(accounts: u64) -> Model {
    let mut model = Model::default();
    for n in 0..accounts {
        model
            .0
            .insert(address(n), (state(n, n * 3 + 1), BTreeMap::new()));
    }
    // Owners with storage from the start.
    for n in 0..8 {
        let slots = (0..(n * 40)).map(|s| (U256::from(s), U256::from(s + 7)));
        model.0.get_mut(&address(n)).expect("owner").1.extend(slots);
    }
    model
}

fn options(sparse: bool) -> TrieStoreOptions {
    TrieStoreOptions {
        max_size_bytes: 1 << 30,
        growth_step_bytes: 4 << 20,
        sparse_trie_bytes: if sparse { 64 << 20 } else { 0 },
        commit_blocks: 3,
        root_threads: 2,
        ..TrieStoreOptions::default()
    }
}

fn run_stream(seed: u64, sparse: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = XorShift(seed);
    let mut model = genesis(600);
    let mut next_account = 600;
    let mut store = TrieStore::open(dir.path(), options(sparse)).expect("open");
    assert_eq!(store.head(), None);
    let (accounts, slots) = model.hashed();
    let head = store.reset(0, accounts, slots).expect("genesis");
    assert_eq!(head.root, model.root(), "genesis root");
    // The blocks given so far, to replay after a reopen.
    let mut blocks: Vec<ChangeSet> = Vec::new();
    let mut models: Vec<Model> = vec![model.clone()];
    for number in 1..=40u64 {
        let changes = block(&mut rng, &mut model, &mut next_account);
        let applied = store
            .apply(number, &changes, &HashedKeys::of(&changes))
            .expect("apply");
        assert_eq!(applied.head.block, number);
        assert_eq!(
            applied.head.root,
            model.root(),
            "seed {seed} block {number}"
        );
        blocks.push(changes);
        models.push(model.clone());
        if number.is_multiple_of(13) {
            // A restart: the store comes back at its last commit, and the blocks after it
            // replay to the same roots.
            drop(store);
            store = TrieStore::open(dir.path(), options(sparse)).expect("reopen");
            let committed = store.committed().expect("a commit landed");
            assert!(committed.block <= number);
            assert_eq!(committed.root, models[committed.block as usize].root());
            for replay in committed.block + 1..=number {
                let block = &blocks[replay as usize - 1];
                let again = store
                    .apply(replay, block, &HashedKeys::of(block))
                    .expect("replay");
                assert_eq!(again.head.root, models[replay as usize].root());
            }
        }
    }
    store.flush().expect("flush");
    assert_eq!(store.committed(), store.head());
    drop(store);
    let store = TrieStore::open(dir.path(), options(sparse)).expect("reopen");
    assert_eq!(
        store.committed().map(|h| (h.block, h.root)),
        Some((40, model.root()))
    );
}

#[test]
fn every_root_equals_the_scratch_root_with_the_trie_in_memory() {
    for seed in [1, 2, 3] {
        run_stream(seed, true);
    }
}

#[test]
fn every_root_equals_the_scratch_root_walking_the_stored_trie() {
    for seed in [4, 5] {
        run_stream(seed, false);
    }
}

#[test]
fn a_commit_waits_for_its_gate_and_a_refused_gate_commits_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = XorShift(9);
    let mut model = genesis(100);
    let mut next_account = 100;
    let mut store = TrieStore::open(dir.path(), options(true)).expect("open");
    let (accounts, slots) = model.hashed();
    store.reset(0, accounts, slots).expect("genesis");
    // The owner has made nothing after the genesis durable, and says so by refusing.
    let durable = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&durable);
    store.set_gate(Arc::new(move |block| block <= seen.load(Ordering::SeqCst)));
    for number in 1..=7u64 {
        let changes = block(&mut rng, &mut model, &mut next_account);
        let applied = store
            .apply(number, &changes, &HashedKeys::of(&changes))
            .expect("apply");
        assert_eq!(applied.head.root, model.root());
    }
    store.finish_commit().expect("finish");
    assert_eq!(
        store.committed().map(|h| h.block),
        Some(0),
        "nothing passed the gate"
    );
    // Once the blocks are durable the next hand-over commits them all.
    durable.store(7, Ordering::SeqCst);
    store.flush().expect("flush");
    assert_eq!(store.committed().map(|h| h.block), Some(7));
    assert_eq!(store.committed().map(|h| h.root), Some(model.root()));
}

#[test]
fn a_block_out_of_order_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = TrieStore::open(dir.path(), options(true)).expect("open");
    let empty = ChangeSet::default();
    let no_keys = HashedKeys::default();
    assert!(matches!(
        store.apply(1, &empty, &no_keys),
        Err(TrieDbError::NoGenesis)
    ));
    let model = genesis(10);
    let (accounts, slots) = model.hashed();
    store.reset(5, accounts, slots).expect("genesis");
    assert!(matches!(
        store.apply(7, &empty, &no_keys),
        Err(TrieDbError::NotNext {
            expected: 6,
            got: 7
        })
    ));
    let root = store
        .apply(6, &empty, &no_keys)
        .expect("an empty block")
        .head
        .root;
    assert_eq!(root, model.root());
}
