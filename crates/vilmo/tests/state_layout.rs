//! The state in Vilmo after a block is the state before it plus the block's ChangeSet: on
//! every shipped mainnet block, the pre-state is written with `genesis_writes`, the block's
//! ChangeSet with `changeset_writes`, and the store then holds, key for key, what a plain
//! model of accounts and storage holds after applying the same ChangeSet, also after a reopen.

mod common;

use std::collections::BTreeMap;

use common::contents;

use alloy_primitives::{Address, B256, U256};
use gigas_evm::revm::database::{AccountState as DbState, CacheDB, EmptyDB};
use gigas_evm::revm::primitives::KECCAK_EMPTY;
use gigas_primitives::state_keys::{
    account_key, changeset_writes, code_key, genesis_writes, slot_key, StoredAccount, Write,
};
use gigas_primitives::{AccountState, ChangeSet};
use gigas_test_support::{execute_with_reference, mainnet_blocks};
use gigas_vilmo::{Batch, Options, Vilmo};

/// Accounts with their storage, and bytecodes: the state as a test can hold it.
#[derive(Default)]
struct Model {
    accounts: BTreeMap<Address, (AccountState, BTreeMap<U256, U256>)>,
    codes: BTreeMap<B256, Vec<u8>>,
}

impl Model {
    fn from_db(db: &CacheDB<EmptyDB>) -> Self {
        let mut model = Model::default();
        for (address, account) in &db.cache.accounts {
            if matches!(account.account_state, DbState::NotExisting) {
                continue;
            }
            let state = AccountState {
                nonce: account.info.nonce,
                balance: account.info.balance,
                code_hash: account.info.code_hash,
            };
            let storage = account
                .storage
                .iter()
                .filter(|(_, v)| !v.is_zero())
                .map(|(k, v)| (*k, *v))
                .collect();
            model.accounts.insert(*address, (state, storage));
        }
        for (hash, code) in &db.cache.contracts {
            if *hash != KECCAK_EMPTY && !code.is_empty() {
                model
                    .codes
                    .insert(*hash, code.original_byte_slice().to_vec());
            }
        }
        model
    }

    /// Applies `changes` as their documentation says, with no reference to the key layout.
    fn apply(&mut self, changes: &ChangeSet) {
        for (address, change) in changes.accounts() {
            match change.state {
                None => {
                    self.accounts.remove(address);
                }
                Some(state) => {
                    let entry = self
                        .accounts
                        .entry(*address)
                        .or_insert_with(|| (state, BTreeMap::new()));
                    if change.storage_wiped {
                        entry.1.clear();
                    }
                    entry.0 = state;
                }
            }
        }
        for (address, slot, value) in changes.storage() {
            let storage = &mut self
                .accounts
                .get_mut(address)
                .expect("slots only of accounts that exist")
                .1;
            if value.is_zero() {
                storage.remove(slot);
            } else {
                storage.insert(*slot, *value);
            }
        }
        for (hash, code) in changes.bytecodes() {
            self.codes.insert(*hash, code.to_vec());
        }
    }

    fn genesis(&self) -> Vec<Write> {
        genesis_writes(
            self.accounts
                .iter()
                .map(|(a, (s, storage))| (*a, *s, storage.iter().map(|(k, v)| (*k, *v)).collect())),
            self.codes.iter().map(|(h, c)| (*h, c.as_slice())),
        )
    }

    /// Every key and value the store must hold.
    fn expected(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut out = BTreeMap::new();
        for (address, (state, storage)) in &self.accounts {
            let record = StoredAccount {
                state: *state,
                slots: storage.len() as u64,
            };
            out.insert(account_key(address).to_vec(), record.encode().to_vec());
            for (slot, value) in storage {
                out.insert(
                    slot_key(address, slot).to_vec(),
                    value.to_be_bytes::<32>().to_vec(),
                );
            }
        }
        for (hash, code) in &self.codes {
            out.insert(code_key(hash).to_vec(), code.clone());
        }
        out
    }
}

fn commit(store: &mut Vilmo, writes: Vec<Write>) {
    let mut batch = Batch::new();
    for (key, value) in writes {
        match value {
            Some(value) => batch.put(&key, &value),
            None => batch.delete(&key),
        }
        .expect("key and value within Vilmo's bounds");
    }
    store.commit(batch).expect("commit");
}

#[test]
fn vilmo_after_a_block_is_the_pre_state_plus_its_changeset() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut wipes_with_slots, mut slot_deletes) = (0, 0);
    for (fixture, block) in mainnet_blocks() {
        let path = dir.path().join(block.number.to_string());
        let mut model = Model::from_db(&fixture.database());
        let mut store = Vilmo::open(&path, Options::default()).expect("open");
        commit(&mut store, model.genesis());
        assert_eq!(
            contents(&store),
            model.expected(),
            "block {} pre-state",
            block.number
        );

        let (outcome, _) = execute_with_reference(&fixture, &block);
        let changes = &outcome.changes;
        wipes_with_slots += changes
            .accounts()
            .iter()
            .filter(|(a, c)| {
                c.storage_wiped && model.accounts.get(a).is_some_and(|(_, s)| !s.is_empty())
            })
            .count();
        let writes = changeset_writes(changes, &store).expect("writes");
        slot_deletes += writes
            .iter()
            .filter(|(k, v)| k[0] == b's' && v.is_none())
            .count();
        commit(&mut store, writes);
        model.apply(changes);
        let expected = model.expected();
        assert!(
            contents(&store) == expected,
            "block {}: the store differs from pre-state plus ChangeSet",
            block.number
        );
        drop(store);
        let store = Vilmo::open(&path, Options::default()).expect("reopen");
        assert!(
            contents(&store) == expected,
            "block {} after reopen",
            block.number
        );
    }
    eprintln!(
        "{wipes_with_slots} wipes of accounts with stored slots, {slot_deletes} slot deletes"
    );
    // Old blocks destroy contracts that have storage: the scan path must have run.
    assert!(wipes_with_slots > 0 && slot_deletes > 0);
}
