//! The state root and proofs through the cases that break tries: storage created with its
//! account in one block, accounts destroyed, storage wiped and re-created in one block, slots
//! zeroed, the empty storage root, every account gone. Each root against alloy-trie's root
//! of the model and against the database's from-scratch root; each proof verified with
//! alloy-trie's `verify_proof`, for present and absent accounts and slots.

mod common;

use alloy_primitives::{keccak256, Address, Bytes, KECCAK256_EMPTY, U256};
use alloy_trie::proof::verify_proof;
use alloy_trie::{Nibbles, EMPTY_ROOT_HASH};
use common::{apply_genesis, block, new_keys, open, Chain, Model};
use gigas_primitives::{AccountState, ChangeSet, ChangeSetBuilder};
use gigas_statedb::{StateDb, StateOverlay, StateView};
use gigas_statediff::MemoryKeyIndex;

fn acct(nonce: u64, balance: u64) -> AccountState {
    AccountState {
        nonce,
        balance: U256::from(balance),
        code_hash: KECCAK256_EMPTY,
    }
}

/// Verifies an account proof and its slot proofs against the model.
#[track_caller]
fn check_proof(view: &StateView<'_>, model: &Model, address: Address, slots: &[U256]) {
    check_proof_through(view, model, &StateOverlay::new(), address, slots);
}

/// [`check_proof`] of the state `overlay` makes of the view's, which must be `model`.
#[track_caller]
fn check_proof_through(
    view: &StateView<'_>,
    model: &Model,
    overlay: &StateOverlay,
    address: Address,
    slots: &[U256],
) {
    let proof = view.proof_through(&address, slots, overlay).unwrap();
    let root = model.root();
    assert_eq!(proof.state_root, root);
    let key = Nibbles::unpack(keccak256(address));
    let expected = model.trie_account(&address).map(alloy_rlp::encode);
    assert_eq!(proof.exists, expected.is_some());
    verify_proof(root, key, expected.clone(), &proof.account_proof)
        .unwrap_or_else(|e| panic!("account proof of {address}: {e}"));
    // A proof must not verify a different value.
    let wrong = Some(alloy_rlp::encode(alloy_trie::TrieAccount::new(
        999,
        U256::from(1),
        EMPTY_ROOT_HASH,
        KECCAK256_EMPTY,
    )));
    assert!(verify_proof(root, key, wrong, &proof.account_proof).is_err());
    assert_eq!(proof.storage_root, model.storage_root(&address));
    assert_eq!(proof.storage_proofs.len(), slots.len());
    for (slot, sp) in slots.iter().zip(&proof.storage_proofs) {
        let value = model.slot(&address, slot);
        assert_eq!(sp.slot, *slot);
        assert_eq!(sp.value, value);
        let expected = (!value.is_zero()).then(|| alloy_rlp::encode(value));
        verify_proof(
            proof.storage_root,
            Nibbles::unpack(keccak256(slot.to_be_bytes::<32>())),
            expected,
            &sp.proof,
        )
        .unwrap_or_else(|e| panic!("storage proof of slot {slot} of {address}: {e}"));
    }
}

struct Harness {
    db: StateDb,
    model: Model,
    chain: Chain,
    index: MemoryKeyIndex,
    /// The state after each block so far, genesis first.
    past: Vec<Model>,
}

/// The overlay that turns `head`'s state into `past`'s: every account and slot that differs
/// set back, and the storage of an account that had none cleared as a whole.
fn overlay_to(past: &Model, head: &Model) -> StateOverlay {
    let mut overlay = StateOverlay::new();
    for address in past.accounts.keys().chain(head.accounts.keys()) {
        let was = past.accounts.get(address).copied();
        if was != head.accounts.get(address).copied() {
            overlay.set_account(*address, was);
        }
    }
    for address in past.storage.keys().chain(head.storage.keys()) {
        let Some(was) = past.storage.get(address) else {
            overlay.clear_storage(*address);
            continue;
        };
        let now = head.storage.get(address);
        for slot in was.keys().chain(now.into_iter().flat_map(|s| s.keys())) {
            let value = past.slot(address, slot);
            if value != head.slot(address, slot) {
                overlay.set_slot(*address, *slot, value);
            }
        }
    }
    overlay
}

impl Harness {
    fn apply(&mut self, changes: ChangeSet) {
        let keys = new_keys(&mut self.index, &self.model, &changes);
        let (header, hash) = self.chain.next(&changes);
        let mut writer = self.db.writer(common::synthetic_headers()).unwrap();
        let root = writer
            .apply(block(&header, hash, &changes, &keys))
            .unwrap()
            .expect("a root every block");
        writer.commit().unwrap();
        self.model.apply(&changes);
        self.past.push(self.model.clone());
        assert_eq!(root.root, self.model.root(), "block {}", header.number);
        let view = self.db.view().unwrap();
        assert_eq!(view.state_root_from_scratch().unwrap(), root.root);
        assert_eq!(
            view.header(header.number).unwrap().unwrap().state_root,
            Some(root.root)
        );
    }
}

fn a(i: u8) -> Address {
    Address::repeat_byte(i)
}

#[test]
fn roots_and_proofs_through_the_hard_cases() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::default();
    let code = Bytes::from_static(&[0x60, 0x00, 0x54, 0x00]);
    let code_hash = keccak256(&code);
    model.codes.insert(code_hash, code.clone());
    model.accounts.insert(a(1), acct(1, 100));
    model.accounts.insert(a(2), acct(0, 5));
    model.accounts.insert(
        a(3),
        AccountState {
            nonce: 1,
            balance: U256::ZERO,
            code_hash,
        },
    );
    let s1 = model.storage.entry(a(1)).or_default();
    for i in 1..=3u64 {
        s1.insert(U256::from(i), U256::from(i * 10));
    }
    // Enough slots for stored branch nodes in the storage trie.
    let s3 = model.storage.entry(a(3)).or_default();
    for i in 0..600u64 {
        s3.insert(U256::from(i), U256::from(i + 1));
    }
    let chain = Chain::genesis();
    let db = open(dir.path());
    let root = apply_genesis(&db, &chain, &model, 64);
    assert_eq!(root, model.root());
    let model_at_genesis = model.clone();
    let mut h = Harness {
        db,
        model,
        past: vec![model_at_genesis],
        chain,
        index: MemoryKeyIndex::new(),
    };
    let probe = |h: &Harness| {
        let view = h.db.view().unwrap();
        let slots: Vec<U256> = [0u64, 1, 2, 3, 7, 599, 600, 10_000]
            .iter()
            .map(|s| U256::from(*s))
            .collect();
        for i in [1u8, 2, 3, 4, 5, 0xee] {
            check_proof(&view, &h.model, a(i), &slots);
        }
        // Every earlier state, proven through the overlay that sets it back, and its root
        // the one stored with its block.
        for (number, past) in h.past.iter().enumerate() {
            let overlay = overlay_to(past, &h.model);
            for i in [1u8, 2, 3, 4, 5, 0xee] {
                check_proof_through(&view, past, &overlay, a(i), &slots);
            }
            let proof = view.proof_through(&a(1), &[], &overlay).unwrap();
            assert_eq!(
                view.header(number as u64).unwrap().unwrap().state_root,
                Some(proof.state_root),
                "block {number}"
            );
        }
    };
    probe(&h);

    // An account created with its storage in one block; a plain transfer.
    let mut b = ChangeSetBuilder::new();
    b.account(a(4), acct(0, 7), false);
    b.slot(a(4), U256::from(1), U256::from(11));
    b.slot(a(4), U256::from(2), U256::from(22));
    b.account(a(2), acct(1, 4), false);
    h.apply(b.build());
    probe(&h);

    // A destroyed account with storage.
    let mut b = ChangeSetBuilder::new();
    b.destroyed(a(1));
    h.apply(b.build());
    probe(&h);

    // Destroyed and re-created with new storage in one block, a big storage trie gone.
    let mut b = ChangeSetBuilder::new();
    b.destroyed(a(3));
    b.account(a(3), acct(0, 1), true);
    b.slot(a(3), U256::from(7), U256::from(70));
    h.apply(b.build());
    probe(&h);

    // Slots zeroed: one deleted of several, then the last one (the empty storage root again).
    let mut b = ChangeSetBuilder::new();
    b.slot(a(4), U256::from(1), U256::ZERO);
    h.apply(b.build());
    probe(&h);
    let mut b = ChangeSetBuilder::new();
    b.slot(a(4), U256::from(2), U256::ZERO);
    b.slot(a(3), U256::from(7), U256::ZERO);
    h.apply(b.build());
    assert_eq!(h.model.storage_root(&a(4)), EMPTY_ROOT_HASH);
    probe(&h);

    // Storage grown back past stored-node size on an existing account, in one block.
    let mut b = ChangeSetBuilder::new();
    for i in 0..300u64 {
        b.slot(a(2), U256::from(i * 7), U256::from(i + 5));
    }
    h.apply(b.build());
    probe(&h);
    // And shrunk to one slot again.
    let mut b = ChangeSetBuilder::new();
    for i in 1..300u64 {
        b.slot(a(2), U256::from(i * 7), U256::ZERO);
    }
    h.apply(b.build());
    probe(&h);

    // Every account gone: the empty trie, and proofs of absence in it.
    let mut b = ChangeSetBuilder::new();
    for address in h.model.accounts.keys().copied().collect::<Vec<_>>() {
        b.destroyed(address);
    }
    h.apply(b.build());
    assert_eq!(h.model.root(), EMPTY_ROOT_HASH);
    probe(&h);

    // And back from empty.
    let mut b = ChangeSetBuilder::new();
    b.account(a(9), acct(0, 1), false);
    h.apply(b.build());
    probe(&h);
}

#[test]
fn many_accounts_keep_stored_nodes_small_and_proofs_short() {
    // 5,000 accounts: the account trie has stored branch nodes at two levels, and a block
    // touching a few accounts recomputes a few paths only.
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::default();
    for i in 0..5000u64 {
        model.accounts.insert(common::address(i), acct(i, i * 3));
    }
    let chain = Chain::genesis();
    let db = open(dir.path());
    assert_eq!(apply_genesis(&db, &chain, &model, 1000), model.root());
    let model_at_genesis = model.clone();
    let mut h = Harness {
        db,
        model,
        past: vec![model_at_genesis],
        chain,
        index: MemoryKeyIndex::new(),
    };
    let mut b = ChangeSetBuilder::new();
    for i in [3u64, 1000, 4999] {
        b.account(common::address(i), acct(i + 1, 1), false);
    }
    let changes = b.build();
    let keys = new_keys(&mut h.index, &h.model, &changes);
    let (header, hash) = h.chain.next(&changes);
    let mut writer = h.db.writer(common::synthetic_headers()).unwrap();
    let root = writer
        .apply(block(&header, hash, &changes, &keys))
        .unwrap()
        .unwrap();
    writer.commit().unwrap();
    drop(writer);
    h.model.apply(&changes);
    assert_eq!(root.root, h.model.root());
    assert_eq!(root.changed_accounts, 3);
    assert!(
        root.leaves < 200,
        "{} leaves hashed for 3 changed accounts",
        root.leaves
    );
    assert!(root.skipped > 0);
    let view = h.db.view().unwrap();
    check_proof(&view, &h.model, common::address(1000), &[U256::from(1)]);
    check_proof(&view, &h.model, Address::repeat_byte(0x42), &[]);
    let proof = view.proof(&common::address(7), &[]).unwrap();
    assert!(
        proof.account_proof.len() <= 5,
        "{}",
        proof.account_proof.len()
    );

    // A proof at the genesis through an overlay of the changed accounts, held to a deadline
    // (issue 66, item 9): one that has passed stops the walk; one far off lets it through.
    let overlay = overlay_to(&h.past[0], &h.model);
    match view.proof_through_until(
        &common::address(1000),
        &[],
        &overlay,
        Some(std::time::Instant::now()),
    ) {
        Err(gigas_statedb::StateDbError::DeadlinePassed(_)) => {}
        other => panic!("a walk past its deadline: {other:?}"),
    }
    let far = std::time::Instant::now() + std::time::Duration::from_secs(600);
    let proof = view
        .proof_through_until(&common::address(1000), &[], &overlay, Some(far))
        .unwrap();
    assert_eq!(proof.state_root, h.past[0].root());
}
