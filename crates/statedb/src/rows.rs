//! [`GroupRows`]: the open group's code, key-index and header rows, held in memory until the
//! commit (or an idle write) puts them into the write transaction in key order.
//!
//! Owns: those rows and their reads. Must not: hold state (accounts, slots) or trie nodes,
//! which the hashed layer ([`gigas_triedb::layer::TrieLayer`]) holds.
//!
//! Why: with these rows out of the transaction, everything the writer's reads need of the
//! open group is in memory, so that its reads of older blocks can come from any snapshot of
//! the last commit, not only from the write transaction (the step a commit on a thread of
//! its own needs). Written at the commit, they also go in sorted: the key index's new keys
//! are random, and a sorted run through one cursor searches from the last page.

use gigas_mdbx::StoreError as _;
use std::collections::{BTreeMap, HashMap};

use alloy_primitives::{Bytes, B256};
use gigas_statediff::StateKey;
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::{MdbxError, WriteFlags};

use crate::codec;
use crate::error::StateDbError;
use crate::read::Dbs;
use crate::tables::Table;
use crate::types::StoredHeader;
use crate::writer::cursor;

/// Rows of the open group not yet in the write transaction.
#[derive(Debug, Default)]
pub(crate) struct GroupRows {
    codes: HashMap<B256, Bytes>,
    /// The index of the first key of `keys`.
    first_index: u64,
    /// New keys in index order.
    keys: Vec<StateKey>,
    indices: HashMap<StateKey, u64>,
    headers: BTreeMap<u64, StoredHeader>,
    /// Bytes held, estimated.
    bytes: u64,
}

impl GroupRows {
    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.codes.is_empty() && self.keys.is_empty() && self.headers.is_empty()
    }

    /// Memory held, estimated.
    pub(crate) fn approx_bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn put_code(&mut self, hash: B256, code: &Bytes) {
        self.bytes += 64 + code.len() as u64;
        self.codes.insert(hash, code.clone());
    }

    pub(crate) fn code(&self, hash: &B256) -> Option<&Bytes> {
        self.codes.get(hash)
    }

    /// Gives `key` the next index, `index` (one past the last key's, or the committed
    /// index's length for the first).
    pub(crate) fn push_key(&mut self, key: StateKey, index: u64) -> Result<(), StateDbError> {
        if self.keys.is_empty() {
            self.first_index = index;
        }
        let expected = self.first_index + self.keys.len() as u64;
        if index != expected {
            return Err(StateDbError::Invariant {
                what: format!("new key index {index} where {expected} was next"),
            });
        }
        self.bytes += 2 * (std::mem::size_of::<StateKey>() as u64 + 16);
        self.keys.push(key);
        self.indices.insert(key, index);
        Ok(())
    }

    pub(crate) fn index_of(&self, key: &StateKey) -> Option<u64> {
        self.indices.get(key).copied()
    }

    pub(crate) fn key_at(&self, index: u64) -> Option<StateKey> {
        let at = usize::try_from(index.checked_sub(self.first_index)?).ok()?;
        self.keys.get(at).copied()
    }

    /// Stores `header`.
    pub(crate) fn put_header(&mut self, header: StoredHeader) {
        if !self.headers.contains_key(&header.header.number) {
            self.bytes += 1024;
        }
        self.headers.insert(header.header.number, header);
    }

    pub(crate) fn header(&self, number: u64) -> Option<&StoredHeader> {
        self.headers.get(&number)
    }

    /// Sets the state root of block `number`'s row; `false` when the row is not held.
    pub(crate) fn set_state_root(&mut self, number: u64, root: B256) -> bool {
        match self.headers.get_mut(&number) {
            Some(header) => {
                header.state_root = Some(root);
                true
            }
            None => false,
        }
    }

    /// Writes every row into `txn` in key order (the caller then empties the set, or, on
    /// the commit thread, drops its share of it).
    pub(crate) fn write(&self, dbs: &Dbs, txn: &RwTxUnsync) -> Result<(), StateDbError> {
        if !self.codes.is_empty() {
            let mut codes: Vec<_> = self.codes.iter().collect();
            codes.sort_unstable_by_key(|(hash, _)| **hash);
            let mut c = cursor(dbs, txn, Table::Bytecodes)?;
            for (hash, code) in codes {
                c.put(hash.as_slice(), code, WriteFlags::empty())
                    .map_err(StateDbError::mdbx("write Bytecodes"))?;
            }
        }
        if !self.keys.is_empty() {
            let mut by_key: Vec<(Vec<u8>, u64)> = self
                .keys
                .iter()
                .zip(self.first_index..)
                .map(|(key, index)| (codec::encode_state_key(key), index))
                .collect();
            by_key.sort_unstable();
            let mut c = cursor(dbs, txn, Table::KeyIndices)?;
            for (bytes, index) in &by_key {
                match c.put(bytes, &index.to_be_bytes(), WriteFlags::NO_OVERWRITE) {
                    Ok(()) => {}
                    // Checked when the block was applied; a second writer cannot exist.
                    Err(MdbxError::KeyExist) => {
                        return Err(StateDbError::Invariant {
                            what: format!("key index {index}'s key was indexed at the commit"),
                        })
                    }
                    Err(e) => return Err(StateDbError::mdbx("write KeyIndices")(e)),
                }
            }
            let indexed = dbs.get(Table::IndexedKeys);
            for (key, index) in self.keys.iter().zip(self.first_index..) {
                // Indices only grow: appending keeps IndexedKeys' pages full.
                txn.append(indexed, index.to_be_bytes(), codec::encode_state_key(key))
                    .map_err(StateDbError::mdbx("write IndexedKeys"))?;
            }
        }
        if !self.headers.is_empty() {
            let mut buf = Vec::with_capacity(1024);
            let mut c = cursor(dbs, txn, Table::Headers)?;
            for (number, header) in &self.headers {
                codec::encode_header_row(header, &mut buf);
                c.put(&codec::block_key(*number), &buf, WriteFlags::empty())
                    .map_err(StateDbError::mdbx("write Headers"))?;
            }
            let mut by_hash: Vec<(B256, u64)> = self
                .headers
                .values()
                .map(|h| (h.hash, h.header.number))
                .collect();
            by_hash.sort_unstable();
            let mut c = cursor(dbs, txn, Table::HeaderNumbers)?;
            for (hash, number) in &by_hash {
                c.put(
                    hash.as_slice(),
                    &codec::block_key(*number),
                    WriteFlags::empty(),
                )
                .map_err(StateDbError::mdbx("write HeaderNumbers"))?;
            }
        }
        Ok(())
    }
}
