//! Point reads, the same for a read view and for the writer's open transaction (MDBX lets a
//! write transaction read its own writes).

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;

use alloy_primitives::{keccak256, Address, Bytes, B256, U256};
use gigas_primitives::AccountState;
use gigas_statediff::{ChainTip, StateKey};
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Database, TransactionKind};

use crate::codec::{self, block_key};
use crate::error::StateDbError;
use gigas_triedb::TrieDbs;

use crate::tables::{Table, META_HEAD, META_INDEX_LEN, META_LAST_ROOT, META_TRIE};
use crate::types::{AnyTable, StoredHeader};

/// The table handles of one environment: the state database's own and the trie's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dbs {
    pub(crate) state: [Database; Table::COUNT],
    pub(crate) trie: TrieDbs,
}

impl Dbs {
    pub(crate) fn get(&self, table: Table) -> Database {
        self.state[table.slot()]
    }

    pub(crate) fn trie(&self) -> &TrieDbs {
        &self.trie
    }

    /// The handle of a table of either set.
    pub(crate) fn any(&self, table: impl Into<AnyTable>) -> Database {
        match table.into() {
            AnyTable::State(t) => self.get(t),
            AnyTable::Trie(t) => self.trie.get(t),
        }
    }
}

pub(crate) fn get<'tx, K: TransactionKind>(
    dbs: &Dbs,
    txn: &'tx Tx<K>,
    table: Table,
    key: &[u8],
) -> Result<Option<Cow<'tx, [u8]>>, StateDbError> {
    txn.get(dbs.get(table).dbi(), key)
        .map_err(StateDbError::read(table.name()))
}

/// An account by address: its row in `HashedAccounts` (the state keeps no table by address;
/// see [`crate::tables`]).
pub(crate) fn account<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    address: &Address,
) -> Result<Option<AccountState>, StateDbError> {
    hashed_account(dbs, txn, &keccak256(address))
}

/// An account by keccak(address).
pub(crate) fn hashed_account<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    hashed: &B256,
) -> Result<Option<AccountState>, StateDbError> {
    Ok(gigas_triedb::rows::hashed_account(dbs.trie(), txn, hashed)?)
}

/// A slot's value by address and slot (zero when it is not stored).
pub(crate) fn slot<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    address: &Address,
    slot: &U256,
) -> Result<U256, StateDbError> {
    hashed_slot(
        dbs,
        txn,
        &keccak256(address),
        &keccak256(slot.to_be_bytes::<32>()),
    )
}

/// A slot's value by keccak(address) and keccak(slot) (zero when it is not stored).
pub(crate) fn hashed_slot<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    hashed_address: &B256,
    hashed_slot: &B256,
) -> Result<U256, StateDbError> {
    Ok(gigas_triedb::rows::hashed_slot(
        dbs.trie(),
        txn,
        hashed_address,
        hashed_slot,
    )?)
}

pub(crate) fn code<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    hash: &B256,
) -> Result<Option<Bytes>, StateDbError> {
    Ok(get(dbs, txn, Table::Bytecodes, hash.as_slice())?.map(|c| Bytes::copy_from_slice(&c)))
}

pub(crate) fn header<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    number: u64,
) -> Result<Option<StoredHeader>, StateDbError> {
    let key = block_key(number);
    get(dbs, txn, Table::Headers, &key)?
        .map(|row| codec::decode_header_row(&key, &row))
        .transpose()
}

/// The number of the block whose header hash is `hash`, if the database holds it.
pub(crate) fn number_by_hash<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    hash: &B256,
) -> Result<Option<u64>, StateDbError> {
    get(dbs, txn, Table::HeaderNumbers, hash.as_slice())?
        .map(|row| codec::decode_u64(Table::HeaderNumbers, hash.as_slice(), &row))
        .transpose()
}

/// The hash of block `number` if the database holds its header (BLOCKHASH).
pub(crate) fn block_hash<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    number: u64,
) -> Result<Option<B256>, StateDbError> {
    let key = block_key(number);
    match get(dbs, txn, Table::Headers, &key)? {
        Some(row) if row.len() >= 32 => Ok(Some(B256::from_slice(&row[..32]))),
        Some(_) => Err(StateDbError::corrupt(
            Table::Headers.name(),
            &key,
            "row shorter than a hash",
        )),
        None => Ok(None),
    }
}

pub(crate) fn index_of<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    key: &StateKey,
) -> Result<Option<u64>, StateDbError> {
    let bytes = codec::encode_state_key(key);
    get(dbs, txn, Table::KeyIndices, &bytes)?
        .map(|v| codec::decode_u64(Table::KeyIndices, &bytes, &v))
        .transpose()
}

pub(crate) fn key_at<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    index: u64,
) -> Result<Option<StateKey>, StateDbError> {
    let key = index.to_be_bytes();
    get(dbs, txn, Table::IndexedKeys, &key)?
        .map(|v| codec::decode_state_key(&key, &v))
        .transpose()
}

/// What `Meta` says about the committed state (or the writer's open group, through its
/// transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetaState {
    pub(crate) head: Option<ChainTip>,
    pub(crate) last_root: Option<(u64, B256)>,
    pub(crate) trie_valid: bool,
    pub(crate) index_len: u64,
    pub(crate) lattice: Option<gigas_primitives::LatticeHash>,
}

pub(crate) fn meta<K: TransactionKind>(dbs: &Dbs, txn: &Tx<K>) -> Result<MetaState, StateDbError> {
    let head = get(dbs, txn, Table::Meta, META_HEAD)?
        .map(|v| codec::decode_tip(META_HEAD, &v))
        .transpose()?;
    let last_root = get(dbs, txn, Table::Meta, META_LAST_ROOT)?
        .map(|v| codec::decode_root(META_LAST_ROOT, &v))
        .transpose()?;
    let trie_valid = get(dbs, txn, Table::Meta, META_TRIE)?.is_some_and(|v| v.as_ref() == [1]);
    let index_len = get(dbs, txn, Table::Meta, META_INDEX_LEN)?
        .map(|v| codec::decode_u64(Table::Meta, META_INDEX_LEN, &v))
        .transpose()?
        .unwrap_or(0);
    let lattice = get(dbs, txn, Table::Meta, crate::tables::META_LATTICE)?
        .map(|v| {
            gigas_primitives::LatticeHash::from_bytes(&v).ok_or_else(|| {
                StateDbError::corrupt(
                    Table::Meta.name(),
                    crate::tables::META_LATTICE,
                    format!("{} bytes, not 2048", v.len()),
                )
            })
        })
        .transpose()?;
    Ok(MetaState {
        head,
        last_root,
        trie_valid,
        index_len,
        lattice,
    })
}
