//! The 50 shipped mainnet blocks: each block's ChangeSet (from gigas-evm's execution) applied
//! over its fixture's pre-state. The fixtures hold only the accounts the block touches, not
//! the full state, so the header's stateRoot cannot be reproduced; the root is checked
//! instead against alloy-trie's root of the same accounts and slots, and every changed key
//! against the model. Each block is then reverted by a second block that sets every key it
//! changed back, whose root must be the pre-state's again: a root that seeks the nodes the
//! first one left, through the writer's trie cache (every other block with a budget too
//! small to keep them, so that the second root finds them evicted).

mod common;

use alloy_primitives::Bytes;
use common::{apply_genesis, block, new_keys, open, Chain, Model};
use gigas_evm::{execute_block, BlockFixture, PlainEvm};
use gigas_primitives::{ChangeSet, ChangeSetBuilder};
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

/// The block that takes every key `changes` touched back to its value in `before`.
fn revert(changes: &ChangeSet, before: &Model) -> ChangeSet {
    let mut out = ChangeSetBuilder::new();
    for (address, change) in changes.accounts() {
        match before.accounts.get(address) {
            Some(state) => out.account(*address, *state, change.storage_wiped),
            None => out.destroyed(*address),
        }
        if change.storage_wiped {
            for (slot, value) in before.storage.get(address).into_iter().flatten() {
                out.slot(*address, *slot, *value);
            }
        }
    }
    for (address, slot, _) in changes.storage() {
        out.slot(*address, *slot, before.slot(address, slot));
    }
    out.build()
}

#[test]
fn mainnet_changesets_over_their_pre_state_give_alloy_trie_s_root() {
    let blocks = mainnet_blocks();
    assert_eq!(blocks.len(), 50);
    let mut changes_total = 0;
    let (mut splits, mut layered_roots) = (0, 0);
    for (i, (fixture, prepared)) in blocks.iter().enumerate() {
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
        let before = model.clone();
        // In turn: roots through a cache evicting everything, through a cache holding
        // everything, layered roots split across four threads, and roots through the
        // account trie held in memory (every other time within a budget so small that each
        // root folds all it loaded back into hashes).
        let (tiny, layered, sparse) = (i % 4 == 0, i % 4 == 2, i % 4 == 3);
        let tiny_sparse = i % 8 == 3;
        let mut writer = db
            .writer(WriterOptions {
                trie_cache_bytes: match (tiny, layered || sparse) {
                    (true, _) => 512,
                    (_, true) => 0,
                    _ => 64 << 20,
                },
                sparse_trie_bytes: match (sparse, tiny_sparse) {
                    (false, _) => 0,
                    (true, true) => 1,
                    (true, false) => 64 << 20,
                },
                root_threads: 4,
                root_split_min_accounts: 1,
                // Through the trie in memory the root runs on while the writer returns,
                // and the commit waits for it.
                overlap_roots: sparse,
                ..common::synthetic_headers()
            })
            .unwrap();
        let mut apply_and_commit = |header, hash, changes: &ChangeSet, keys| {
            let applied = writer.apply(block(header, hash, changes, keys)).unwrap();
            let committed = writer.commit().unwrap().and_then(|c| c.root);
            assert!(
                applied.is_none() || committed.is_none(),
                "one root per block"
            );
            let root = applied.or(committed).expect("root");
            assert_eq!(Some(&root.block), Some(&header.number));
            if sparse {
                assert!(applied.is_none(), "the root ran on past the apply");
            }
            root
        };
        let root = apply_and_commit(&header, hash, &changes, &keys);
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
        drop(view);
        let back = revert(&changes, &before);
        let keys = new_keys(&mut index, &model, &back);
        let (header, hash) = chain.next(&back);
        let reverted = apply_and_commit(&header, hash, &back, &keys);
        model.apply(&back);
        assert_eq!(
            reverted.root,
            before.root(),
            "block {} reverted",
            prepared.number
        );
        let cache = writer.trie_cache_stats();
        let in_memory = writer.sparse_trie_stats();
        if sparse {
            splits += u64::from(root.split) + u64::from(reverted.split);
            layered_roots += 2;
            assert!(in_memory.loaded_leaves > 0, "{in_memory:?}");
            if tiny_sparse {
                assert!(in_memory.pruned > 0, "{in_memory:?}");
            } else {
                assert!(
                    in_memory.nodes > 0 && in_memory.pruned == 0,
                    "{in_memory:?}"
                );
            }
        } else if tiny {
            assert!(cache.bytes <= 512, "{cache:?}");
        } else if layered {
            splits += u64::from(root.split) + u64::from(reverted.split);
            layered_roots += 2;
        } else {
            assert!(cache.hits > 0 && cache.evicted == 0, "{cache:?}");
        }
        drop(writer);
        let view = db.view().unwrap();
        assert_eq!(view.state_root_from_scratch().unwrap(), before.root());
        changes_total += changes.accounts().len() + changes.storage().len();
    }
    println!(
        "50 mainnet blocks, {changes_total} state changes applied and rooted; \
         {splits} of {layered_roots} layered roots split across threads"
    );
    assert!(
        splits * 2 >= layered_roots,
        "{splits} of {layered_roots} layered roots split the account trie"
    );
}
