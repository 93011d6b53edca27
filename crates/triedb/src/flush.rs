//! Writing the open group's state changes, held in memory ([`TrieLayer`]), into the write
//! transaction: at the commit (or before a root inside the transaction), and, while a
//! follower waits for its next block (the full node's `StateWriter::flush_idle`), those changed
//! since the last such write.
//!
//! **Why between blocks.** Over 10M accounts a group of 32 blocks changes about 140,000
//! accounts, and writing them and their trie nodes into MDBX's B-trees takes about 0.7 s of
//! the commit. A follower at the head applies nothing meanwhile and falls behind by a few
//! blocks at every commit. It also waits for most of every block time: writing each block's
//! changes then leaves the commit the last block's and MDBX's own commit.
//!
//! **Nothing else changes.** The layer keeps every change since the last commit whether or
//! not it is in the transaction yet: layered roots read the last commit with the layer over
//! it, and the writer's reads look in the layer first, so what reaches the transaction early
//! is invisible to both. Only the commit makes it visible to readers, all at once.

use std::collections::BTreeSet;

use alloy_primitives::map::B256Map;
use alloy_primitives::B256;
use alloy_trie::Nibbles;
use signet_libmdbx::tx::aliases::RwTxUnsync;

use crate::error::TrieDbError;
use crate::layer::{LayeredRoot, TrieLayer};
use crate::rows::{cursor, delete_dups, put_hashed_account, put_slot};
use crate::store;
use crate::tables::{TrieDbs, TrieTable};

/// The layer's keys changed since the last idle write, so that the next one writes only
/// those. A writer tracks them only once an idle write happened in the group: until then
/// the whole layer is unwritten and nothing needs tracking (a follower catching up, which is
/// never idle, pays nothing).
#[derive(Debug, Default)]
pub struct PendingKeys {
    accounts: BTreeSet<B256>,
    account_nodes: BTreeSet<Nibbles>,
    storage: B256Map<PendingStorage>,
}

#[derive(Debug, Default)]
struct PendingStorage {
    /// The account's storage was wiped since the last write: the wipe is written, then every
    /// slot and node the layer holds for it (all of them came after the wipe).
    wiped: bool,
    slots: BTreeSet<B256>,
    nodes: BTreeSet<Nibbles>,
}

impl PendingKeys {
    /// Whether no key changed since the last idle write.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty() && self.account_nodes.is_empty() && self.storage.is_empty()
    }

    /// An account changed (`wiped`: with its storage).
    pub fn account(&mut self, h: B256, wiped: bool) {
        self.accounts.insert(h);
        if wiped {
            let storage = self.storage.entry(h).or_default();
            storage.wiped = true;
            storage.slots.clear();
            storage.nodes.clear();
        }
    }

    /// A slot changed.
    pub fn slot(&mut self, h: B256, slot: B256) {
        self.storage.entry(h).or_default().slots.insert(slot);
    }

    /// The trie nodes a root replaced or removed.
    pub fn root(&mut self, root: &LayeredRoot) {
        let run = &root.accounts;
        self.account_nodes.extend(run.removed.iter().copied());
        self.account_nodes
            .extend(run.updates.iter().map(|(path, _)| *path));
        for (h, run) in &root.storage {
            let nodes = &mut self.storage.entry(*h).or_default().nodes;
            nodes.extend(run.removed.iter().copied());
            nodes.extend(run.updates.iter().map(|(path, _)| *path));
        }
    }
}

/// What a write put into the transaction.
#[derive(Debug, Default)]
pub struct Written {
    /// Accounts, slots and trie nodes written.
    pub entries: u64,
    /// Accounts whose stored storage trie it deleted (a wipe).
    pub wiped: Vec<B256>,
}

/// Writes `layer` into `txn`, in key order: all of it (`only: None`), or the entries of the
/// keys in `only`. `tracking`: the trie tables follow the hashed tables (a wipe deletes the
/// account's stored storage trie too).
pub fn write_layer(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    layer: &TrieLayer,
    only: Option<&PendingKeys>,
    tracking: bool,
) -> Result<Written, TrieDbError> {
    let mut written = Written::default();
    let buf = &mut Vec::with_capacity(128);
    // One cursor for the whole sorted run: MDBX searches from its page first, and only
    // walks down from the root when the key lies beyond it.
    let mut accounts_cursor = cursor(dbs, txn, TrieTable::HashedAccounts)?;
    let mut put_account = |h: &B256, state: &Option<gigas_primitives::AccountState>| {
        written.entries += 1;
        put_hashed_account(&mut accounts_cursor, h, state.as_ref(), buf)
    };
    match only {
        None => {
            for (h, state) in &layer.accounts {
                put_account(h, state)?;
            }
            written.entries += layer.account_nodes.len() as u64;
            store::write_account_nodes(dbs, txn, &layer.account_nodes)?;
        }
        Some(only) => {
            for h in &only.accounts {
                put_account(h, layer_entry(layer.accounts.get(h), "account")?)?;
            }
            written.entries += only.account_nodes.len() as u64;
            store::write_account_nodes(
                dbs,
                txn,
                only.account_nodes
                    .iter()
                    .map(|p| layer.account_nodes.get_key_value(p))
                    .map(|node| layer_entry(node, "account trie node"))
                    .collect::<Result<Vec<_>, _>>()?,
            )?;
        }
    }

    let mut slots_cursor = cursor(dbs, txn, TrieTable::HashedStorages)?;
    let mut trie = cursor(dbs, txn, TrieTable::StoragesTrie)?;
    let mut accounts: Vec<&B256> = match only {
        None => layer.storage.keys().collect(),
        Some(only) => only.storage.keys().collect(),
    };
    accounts.sort_unstable();
    let buf = &mut Vec::with_capacity(128);
    for h in accounts {
        let storage = layer_entry(layer.storage.get(h), "storage")?;
        let pending = only.and_then(|o| o.storage.get(h));
        // The wipe to write now, if any: the layer's since the last commit, or the pending
        // keys' since the last idle write (an earlier one is in the transaction already).
        let wipe = pending.map_or(storage.wiped, |p| p.wiped);
        if wipe {
            delete_dups(&mut slots_cursor, h.as_slice())?;
            // The stored storage trie went with the slots: the next root recomputes this
            // account's storage from its leaves.
            if tracking {
                delete_dups(&mut trie, h.as_slice())?;
                written.wiped.push(*h);
            }
        }
        match pending {
            Some(pending) if !pending.wiped => {
                for s in &pending.slots {
                    let value = layer_entry(storage.slots.get(s), "slot")?;
                    put_slot(
                        &mut slots_cursor,
                        TrieTable::HashedStorages,
                        h.as_slice(),
                        s,
                        value,
                        false,
                        buf,
                    )?;
                }
                written.entries += (pending.slots.len() + pending.nodes.len()) as u64;
                store::write_storage_nodes(
                    &mut trie,
                    h,
                    pending
                        .nodes
                        .iter()
                        .map(|p| layer_entry(storage.nodes.get_key_value(p), "storage trie node"))
                        .collect::<Result<Vec<_>, _>>()?,
                )?;
            }
            // Everything the layer holds for the account: no idle write yet, or a wipe since.
            _ => {
                for (s, value) in &storage.slots {
                    put_slot(
                        &mut slots_cursor,
                        TrieTable::HashedStorages,
                        h.as_slice(),
                        s,
                        value,
                        wipe,
                        buf,
                    )?;
                }
                written.entries += (storage.slots.len() + storage.nodes.len()) as u64;
                store::write_storage_nodes(&mut trie, h, &storage.nodes)?;
            }
        }
    }
    Ok(written)
}

/// A pending key's entry in the layer, which holds every key changed since the commit.
fn layer_entry<T>(entry: Option<T>, what: &str) -> Result<T, TrieDbError> {
    entry.ok_or_else(|| TrieDbError::Invariant {
        what: format!("a pending {what} is missing from the open group's layer"),
    })
}
