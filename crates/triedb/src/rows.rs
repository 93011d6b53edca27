//! Point reads and writes of the trie tables' rows, the same for a read view and for a
//! write transaction (MDBX lets a write transaction read its own writes).

use std::borrow::Cow;

use alloy_primitives::{B256, U256};
use gigas_mdbx::StoreError as _;
use gigas_primitives::AccountState;
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Cursor, Rw, TransactionKind, WriteFlags};

use crate::codec;
use crate::error::TrieDbError;
use crate::tables::{TrieDbs, TrieTable};

/// The row of `key` in `table`.
pub fn get<'tx, K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &'tx Tx<K>,
    table: TrieTable,
    key: &[u8],
) -> Result<Option<Cow<'tx, [u8]>>, TrieDbError> {
    txn.get(dbs.get(table).dbi(), key)
        .map_err(TrieDbError::read(table.name()))
}

/// An account by keccak(address).
pub fn hashed_account<K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &Tx<K>,
    hashed: &B256,
) -> Result<Option<AccountState>, TrieDbError> {
    get(dbs, txn, TrieTable::HashedAccounts, hashed.as_slice())?
        .map(|v| codec::decode_account(TrieTable::HashedAccounts, hashed.as_slice(), &v))
        .transpose()
}

/// A slot's value by keccak(address) and keccak(slot) (zero when it is not stored).
pub fn hashed_slot<K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &Tx<K>,
    hashed_address: &B256,
    hashed_slot: &B256,
) -> Result<U256, TrieDbError> {
    let table = TrieTable::HashedStorages;
    let mut cursor = txn
        .cursor(dbs.get(table))
        .map_err(TrieDbError::mdbx("open a HashedStorages cursor"))?;
    let found: Option<Cow<'_, [u8]>> = cursor
        .get_both_range(hashed_address.as_slice(), hashed_slot.as_slice())
        .map_err(TrieDbError::read(table.name()))?;
    match found {
        Some(row) if row.starts_with(hashed_slot.as_slice()) => {
            Ok(codec::decode_slot(table, hashed_address.as_slice(), &row)?.1)
        }
        _ => Ok(U256::ZERO),
    }
}

/// A cursor over `table` (a write cursor in a write transaction).
pub fn cursor<'tx, K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &'tx Tx<K>,
    table: TrieTable,
) -> Result<Cursor<'tx, K>, TrieDbError> {
    txn.cursor(dbs.get(table))
        .map_err(TrieDbError::mdbx("open a cursor"))
}

/// Writes one storage entry (`key` is the slot's hash) under `owner`: replaces the duplicate
/// for the same key, or deletes it for a zero value. `known_absent`: the caller knows no
/// duplicate for `key` exists (a wipe came first), which spares the search.
pub fn put_slot(
    c: &mut Cursor<'_, Rw>,
    table: TrieTable,
    owner: &[u8],
    key: &B256,
    value: &U256,
    known_absent: bool,
    buf: &mut Vec<u8>,
) -> Result<(), TrieDbError> {
    if !known_absent {
        let found: Option<Cow<'_, [u8]>> = c
            .get_both_range(owner, key.as_slice())
            .map_err(TrieDbError::read(table.name()))?;
        if found.is_some_and(|v| v.starts_with(key.as_slice())) {
            c.del()
                .map_err(TrieDbError::mdbx("delete a storage entry"))?;
        }
    }
    if !value.is_zero() {
        codec::encode_slot(key, value, buf);
        c.put(owner, buf, WriteFlags::empty())
            .map_err(TrieDbError::mdbx("write a storage entry"))?;
    }
    Ok(())
}

/// Writes `value` under `key` through `c` (a cursor of a table without duplicates), or
/// deletes the key for `None`; `ops` names the write and the delete for errors. A run of
/// sorted keys through one cursor lets MDBX search from the cursor's page before walking
/// down from the root.
pub fn put_or_delete(
    c: &mut Cursor<'_, Rw>,
    key: &[u8],
    value: Option<&[u8]>,
    ops: (&'static str, &'static str),
) -> Result<(), TrieDbError> {
    let (write, delete) = ops;
    match value {
        Some(value) => c
            .put(key, value, WriteFlags::empty())
            .map_err(TrieDbError::mdbx(write)),
        None => {
            let found: Option<Cow<'_, [u8]>> = c.set(key).map_err(TrieDbError::read(delete))?;
            if found.is_some() {
                c.del().map_err(TrieDbError::mdbx(delete))?;
            }
            Ok(())
        }
    }
}

/// Deletes every duplicate under `key` (an account's storage, or its stored storage trie).
pub fn delete_dups(c: &mut Cursor<'_, Rw>, key: &[u8]) -> Result<(), TrieDbError> {
    c.del_all_dups_of(key)
        .map_err(TrieDbError::mdbx("delete an account's storage"))
}

/// Writes or deletes (`None`) the hashed account `h` through `c`, a `HashedAccounts` cursor.
pub fn put_hashed_account(
    c: &mut Cursor<'_, Rw>,
    h: &B256,
    state: Option<&AccountState>,
    buf: &mut Vec<u8>,
) -> Result<(), TrieDbError> {
    let value = state.map(|state| {
        codec::encode_account(state, buf);
        buf.as_slice()
    });
    put_or_delete(
        c,
        h.as_slice(),
        value,
        ("write HashedAccounts", "delete from HashedAccounts"),
    )
}

/// Puts hashed accounts (`accounts` in key order, which makes each put an append to the
/// cursor's page), replacing any stored under the same key: a genesis or a chunk of one.
pub fn put_accounts(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    accounts: &[(B256, AccountState)],
    buf: &mut Vec<u8>,
) -> Result<(), TrieDbError> {
    let db = dbs.get(TrieTable::HashedAccounts);
    for (h, state) in accounts {
        codec::encode_account(state, buf);
        txn.put(db, h, &buf, WriteFlags::empty())
            .map_err(TrieDbError::mdbx("write HashedAccounts"))?;
    }
    Ok(())
}

/// Puts hashed slots (keccak(address), keccak(slot), value), in key order, replacing one for
/// the same slot (a slot named twice in a genesis, or in two chunks, ends with the later
/// value); a zero value is no slot (deleted if stored).
pub fn put_slots(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    slots: impl Iterator<Item = (B256, B256, U256)>,
    buf: &mut Vec<u8>,
) -> Result<(), TrieDbError> {
    let table = TrieTable::HashedStorages;
    let mut c = cursor(dbs, txn, table)?;
    for (owner, key, value) in slots {
        let found: Option<Cow<'_, [u8]>> = c
            .get_both_range(owner.as_slice(), key.as_slice())
            .map_err(TrieDbError::read(table.name()))?;
        if found.is_some_and(|v| v.starts_with(key.as_slice())) {
            c.del().map_err(TrieDbError::mdbx("replace a slot"))?;
        }
        if value.is_zero() {
            continue;
        }
        codec::encode_slot(&key, &value, buf);
        c.put(owner.as_slice(), buf, WriteFlags::empty())
            .map_err(TrieDbError::mdbx("write a slot"))?;
    }
    Ok(())
}
