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

/// A database of layout 1 or 2 holds a chain whose headers carried a state checksum, not
/// the state root: it is refused with what to do, and so is a later layout than this build's.
/// A database of this build's layout opens.
#[test]
fn a_database_of_another_layout_is_refused_with_what_to_do() {
    use gigas_mdbx::signet_libmdbx::WriteFlags;

    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(13);
    let model = random_model(&mut rng, 300);
    {
        let db = open(dir.path());
        common::apply_genesis(&db, &Chain::genesis(), &model, 50);
    }
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
    let set_version = |version: u32| {
        let env = gigas_mdbx::open_env(dir.path(), &env_options).unwrap();
        let txn = env.begin_rw_unsync().unwrap();
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
    for old in [1, 2] {
        set_version(old);
        let err = gigas_statedb::StateDb::open(dir.path(), common::small_options()).unwrap_err();
        assert!(
            matches!(err, gigas_statedb::StateDbError::OldLayout { found, .. } if found == old),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("state root") && text.contains("start again"),
            "{text}"
        );
    }
    set_version(gigas_statedb::SCHEMA_VERSION + 1);
    let err = gigas_statedb::StateDb::open(dir.path(), common::small_options()).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("{}", gigas_statedb::SCHEMA_VERSION + 1)),
        "{err}"
    );
    set_version(gigas_statedb::SCHEMA_VERSION);
    let db = open(dir.path());
    model.assert_held_by(&db.view().unwrap(), &[]);
}

/// A snapshot's state is checked against its signed header's `stateRoot` as the bootstrap
/// finishes: a header whose root the state does not give is refused and no head is recorded
/// (nothing of the snapshot is served); the header with the state's root then finishes it.
#[test]
fn a_snapshot_whose_root_is_not_its_headers_gets_no_head() {
    use alloy_consensus::Header;
    use alloy_primitives::{keccak256, B256};
    use gigas_statedb::{SnapshotEntries, StateDbError, StoredHeader};

    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let mut rng = Rng::new(21);
    let model = random_model(&mut rng, 200);
    let mut accounts: Vec<(B256, gigas_primitives::AccountState)> = model
        .accounts
        .iter()
        .map(|(a, s)| (keccak256(a), *s))
        .collect();
    accounts.sort_unstable_by_key(|a| a.0);
    let mut slots: Vec<(B256, B256, alloy_primitives::U256)> = model
        .storage
        .iter()
        .flat_map(|(a, slots)| {
            slots
                .iter()
                .map(move |(s, v)| (keccak256(a), keccak256(s.to_be_bytes::<32>()), *v))
        })
        .filter(|(_, _, v)| !v.is_zero())
        .collect();
    slots.sort_unstable_by_key(|s| (s.0, s.1));
    let manifest = B256::repeat_byte(9);
    let stored = |root: B256| {
        let header = Header {
            number: 7,
            state_root: root,
            ..Header::default()
        };
        StoredHeader {
            hash: header.hash_slow(),
            header,
            signature: None,
            state_root: None,
            commitment: None,
        }
    };
    let write = || {
        let mut b = db.bootstrap(7, manifest).unwrap();
        if b.progress().chunks_done == 0 {
            b.write_chunk(0, &SnapshotEntries::Accounts(accounts.clone()))
                .unwrap();
            b.write_chunk(1, &SnapshotEntries::Slots(slots.clone()))
                .unwrap();
        }
        b
    };
    let wrong = B256::repeat_byte(0x66);
    let err = write().finish(&stored(wrong), &[], 0, None).unwrap_err();
    assert!(
        matches!(err, StateDbError::StateRootMismatch { block: 7, header, computed }
            if header == wrong && computed == model.root()),
        "{err}"
    );
    assert_eq!(db.head().unwrap(), None, "no head after a refused snapshot");
    let outcome = write().finish(&stored(model.root()), &[], 0, None).unwrap();
    assert_eq!(outcome.state_root, model.root());
    assert_eq!(db.head().unwrap().map(|t| t.number), Some(7));
}
