//! The 50 shipped mainnet blocks: each block's ChangeSet (from gigas-evm's execution) applied
//! over its fixture's pre-state. The fixtures hold only the accounts the block touches, not
//! the full state, so the header's stateRoot cannot be reproduced; the root is checked
//! instead against alloy-trie's root of the same accounts and slots, and every changed key
//! against the model.

mod common;

use alloy_primitives::Bytes;
use common::{apply_genesis, block, new_keys, open, Chain, Model};
use gigas_evm::{execute_block, BlockFixture, PlainEvm};
use gigas_statedb::WriterOptions;
use gigas_statediff::MemoryKeyIndex;
use gigas_test_support::mainnet_blocks;

fn prestate(fixture: &BlockFixture) -> Model {
    let mut model = Model::default();
    for (address, account) in &fixture.prestate {
        let state = account.state();
        if let Some(code) = account.code.clone().filter(|c| !c.is_empty()) {
            model
                .codes
                .insert(state.code_hash, Bytes::from(code.to_vec()));
        }
        model.accounts.insert(*address, state);
        for (slot, value) in account.slots() {
            if !value.is_zero() {
                model
                    .storage
                    .entry(*address)
                    .or_default()
                    .insert(slot, value);
            }
        }
    }
    model
}

#[test]
fn mainnet_changesets_over_their_pre_state_give_alloy_trie_s_root() {
    let blocks = mainnet_blocks();
    assert_eq!(blocks.len(), 50);
    let mut changes_total = 0;
    for (fixture, prepared) in &blocks {
        let mut evm = PlainEvm::new(fixture.database(), prepared);
        let outcome = execute_block(&mut evm, prepared)
            .unwrap_or_else(|e| panic!("block {} does not execute: {e}", prepared.number));
        let changes = outcome.changes;
        let mut model = prestate(fixture);
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let mut chain = Chain::genesis();
        assert_eq!(
            apply_genesis(&db, &chain, &model, 500),
            model.root(),
            "pre-state of block {}",
            prepared.number
        );
        let mut index = MemoryKeyIndex::new();
        let keys = new_keys(&mut index, &model, &changes);
        let (header, hash) = chain.next(&changes);
        let mut writer = db.writer(WriterOptions::default()).unwrap();
        let root = writer
            .apply(block(&header, hash, &changes, &keys))
            .unwrap()
            .expect("root");
        writer.commit().unwrap();
        drop(writer);
        model.apply(&changes);
        assert_eq!(root.root, model.root(), "block {}", prepared.number);
        let view = db.view().unwrap();
        assert_eq!(view.state_root_from_scratch().unwrap(), root.root);
        model.assert_held_by(&view, &[]);
        for (address, change) in changes.accounts() {
            assert_eq!(view.account(address).unwrap(), change.state);
        }
        for (address, slot, value) in changes.storage() {
            assert_eq!(&view.storage(address, slot).unwrap(), value);
        }
        changes_total += changes.accounts().len() + changes.storage().len();
    }
    println!("50 mainnet blocks, {changes_total} state changes applied and rooted");
}
