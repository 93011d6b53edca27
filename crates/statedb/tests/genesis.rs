//! Genesis states streamed in chunks: the root, every account and slot, entries in any
//! order, an interrupted genesis cleared by the next one, and the refusals.

mod common;

use alloy_primitives::{keccak256, Bytes, KECCAK256_EMPTY, U256};
use common::{address, open, random_model, Chain, Model, Rng};
use gigas_primitives::AccountState;
use gigas_statedb::{GenesisEntry, StateDbError};

#[test]
fn a_chunked_genesis_gives_the_model_s_state_and_root() {
    let mut rng = Rng::new(11);
    let mut model = random_model(&mut rng, 3000);
    // One contract with many slots, spread over many chunks.
    let token = address(10_000);
    let code = Bytes::from_static(&[0x60, 0x01]);
    model.codes.insert(keccak256(&code), code.clone());
    model.accounts.insert(
        token,
        AccountState {
            nonce: 1,
            balance: U256::ZERO,
            code_hash: keccak256(&code),
        },
    );
    let slots = model.storage.entry(token).or_default();
    for i in 0..5000u64 {
        slots.insert(
            U256::from_be_bytes(keccak256(i.to_be_bytes()).0),
            U256::from(i + 1),
        );
    }
    // Slots before accounts, and a zero value (skipped).
    let mut entries = model.genesis_entries();
    entries.reverse();
    entries.push(GenesisEntry::Slot {
        address: token,
        slot: U256::from(1),
        value: U256::ZERO,
    });
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let chain = Chain::genesis();
    let outcome = db
        .apply_genesis(
            chain.genesis_block(),
            entries.into_iter().map(Ok::<_, std::io::Error>),
            777,
        )
        .unwrap();
    assert_eq!(outcome.state_root, model.root());
    assert_eq!(outcome.accounts, model.accounts.len() as u64);
    assert_eq!(
        outcome.slots,
        model.storage.values().map(|s| s.len() as u64).sum::<u64>()
    );
    assert!(outcome.transactions > 10);
    let view = db.view().unwrap();
    assert_eq!(view.tip().unwrap().unwrap().hash, chain.hash);
    assert_eq!(view.last_root().unwrap(), Some((0, model.root())));
    assert_eq!(
        view.header(0).unwrap().unwrap().state_root,
        Some(model.root())
    );
    assert_eq!(view.state_root_from_scratch().unwrap(), model.root());
    model.assert_held_by(&view, &[]);
    drop(view);
    assert!(matches!(
        db.apply_genesis(
            chain.genesis_block(),
            Vec::<Result<GenesisEntry, std::io::Error>>::new(),
            10
        ),
        Err(StateDbError::AlreadyInitialized { head: 0 })
    ));
}

#[test]
fn an_interrupted_genesis_is_cleared_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::genesis();
    let mut rng = Rng::new(12);
    let first = random_model(&mut rng, 500);
    {
        let db = open(dir.path());
        // Nothing applies before a genesis.
        assert!(matches!(
            db.writer(common::synthetic_headers()),
            Err(StateDbError::NotInitialized)
        ));
        let entries = first
            .genesis_entries()
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                if i == 400 {
                    Err(std::io::Error::other("the chain file is truncated"))
                } else {
                    Ok(e)
                }
            });
        let err = db
            .apply_genesis(chain.genesis_block(), entries, 100)
            .unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        assert_eq!(db.head().unwrap(), None);
    }
    // Another state entirely: nothing of the first may remain.
    let mut second = Model::default();
    for i in 1000..1100u64 {
        second.accounts.insert(
            address(i),
            AccountState {
                nonce: 1,
                balance: U256::from(i),
                code_hash: KECCAK256_EMPTY,
            },
        );
    }
    let db = open(dir.path());
    let root = common::apply_genesis(&db, &chain, &second, 30);
    assert_eq!(root, second.root());
    let view = db.view().unwrap();
    assert_eq!(view.state_root_from_scratch().unwrap(), second.root());
    for a in first.accounts.keys() {
        assert_eq!(view.account(a).unwrap(), None);
    }
    second.assert_held_by(&view, &[]);
}

/// Layout version 1 kept accounts and slots by address as well. Opening such a database
/// empties those tables and marks it version 2, and every account and slot still reads the
/// same, through the hashed tables; a later layout than this build's is refused.
#[test]
fn a_layout_1_database_is_upgraded_in_place() {
    use gigas_mdbx::signet_libmdbx::{DatabaseFlags, WriteFlags};

    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(13);
    let model = random_model(&mut rng, 300);
    let root = {
        let db = open(dir.path());
        common::apply_genesis(&db, &Chain::genesis(), &model, 50)
    };
    let env_options = gigas_mdbx::EnvOptions {
        max_size_bytes: 4 << 30,
        growth_step_bytes: 16 << 20,
        page_size: None,
        max_readers: 16,
        sync_mode: gigas_mdbx::signet_libmdbx::SyncMode::Durable,
        readahead: false,
        write_map: false,
        autosync_period: None,
        max_dirty_pages: None,
    };
    let set_version = |version: u32, plain_rows: bool| {
        let env = gigas_mdbx::open_env(dir.path(), &env_options).unwrap();
        let txn = env.begin_rw_unsync().unwrap();
        if plain_rows {
            // What version 1 held: a row per account and per slot, by address.
            let accounts = txn
                .create_db(Some("PlainAccountState"), DatabaseFlags::empty())
                .unwrap();
            let storage = txn
                .create_db(Some("PlainStorageState"), DatabaseFlags::DUP_SORT)
                .unwrap();
            for address in model.accounts.keys() {
                txn.put(accounts, address, [1u8, 2, 0], WriteFlags::empty())
                    .unwrap();
                txn.put(storage, address, [7u8; 33], WriteFlags::empty())
                    .unwrap();
            }
        }
        let meta = txn.open_db(Some("Meta")).unwrap();
        txn.put(
            meta,
            b"schema_version",
            version.to_be_bytes(),
            WriteFlags::empty(),
        )
        .unwrap();
        txn.commit().unwrap();
    };
    let plain_entries = || {
        let env = gigas_mdbx::open_env(dir.path(), &env_options).unwrap();
        let txn = env.begin_ro_unsync().unwrap();
        ["PlainAccountState", "PlainStorageState"].map(|name| {
            let db = txn.open_db(Some(name)).unwrap();
            txn.db_stat(&db).unwrap().entries()
        })
    };
    set_version(1, true);
    assert_eq!(
        plain_entries(),
        [model.accounts.len(), model.accounts.len()]
    );

    let db = open(dir.path());
    let view = db.view().unwrap();
    assert_eq!(view.last_root().unwrap(), Some((0, root)));
    assert_eq!(view.state_root_from_scratch().unwrap(), root);
    model.assert_held_by(&view, &[]);
    drop(view);
    drop(db);
    assert_eq!(plain_entries(), [0, 0]);
    // Upgraded once: opening again changes nothing.
    let db = open(dir.path());
    model.assert_held_by(&db.view().unwrap(), &[]);
    drop(db);

    set_version(gigas_statedb::SCHEMA_VERSION + 1, false);
    let err = gigas_statedb::StateDb::open(dir.path(), common::small_options()).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("{}", gigas_statedb::SCHEMA_VERSION + 1)),
        "{err}"
    );
}
