//! The tries over MDBX: the account trie over `HashedAccounts` and `AccountsTrie`, each
//! account's storage trie over its `HashedStorages` and `StoragesTrie` duplicates, and the
//! changed-key tables that carry the prefix sets across commits.

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;
use std::sync::Mutex;

use alloy_primitives::map::{B256Map, B256Set};
use alloy_primitives::{B256, U256};
use alloy_rlp::Encodable;
use alloy_trie::{BranchNodeCompact, Nibbles, TrieAccount, EMPTY_ROOT_HASH};
use gigas_primitives::AccountState;
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Cursor, MdbxError, TransactionKind, WriteFlags};

use crate::cache::{CachedSource, Found, OwnerNodes, StorageNodes};
use crate::codec::{self, PATH_LEN};
use crate::error::TrieDbError;
use crate::layer::NodesFrom;
use crate::rows::cursor;
use crate::rows::put_or_delete;
use crate::tables::TrieDbs;
use crate::tables::TrieTable;
use gigas_trie::walk::{self, TrieRun, TrieSource};
use gigas_trie::PrefixSet;

type Row<'tx> = Option<(Cow<'tx, [u8]>, Cow<'tx, [u8]>)>;

pub(crate) fn hashed_key(table: TrieTable, key: &[u8]) -> Result<B256, TrieDbError> {
    if key.len() != 32 {
        return Err(TrieDbError::corrupt(
            table.name(),
            key,
            "key is not 32 bytes",
        ));
    }
    Ok(B256::from_slice(key))
}

/// The account trie's stored root node, if any.
pub fn stored_account_root<K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &Tx<K>,
) -> Result<Option<BranchNodeCompact>, TrieDbError> {
    let top = Nibbles::new();
    let found = seek_account_node(&mut cursor(dbs, txn, TrieTable::AccountsTrie)?, &top)?;
    Ok(found
        .filter(|(path, _)| path.is_empty())
        .map(|(_, node)| node))
}

/// The first stored node under `path` from a cursor over `AccountsTrie`.
fn seek_account_node<K: TransactionKind>(
    nodes: &mut Cursor<'_, K>,
    path: &Nibbles,
) -> Result<Found, TrieDbError> {
    let table = TrieTable::AccountsTrie;
    let row: Row<'_> = nodes
        .set_range(&codec::encode_path(path))
        .map_err(TrieDbError::read(table.name()))?;
    let found = row
        .map(|(k, v)| -> Result<_, TrieDbError> {
            Ok((
                codec::decode_path(table, &k, &k)?,
                codec::decode_node(table, &k, &v)?,
            ))
        })
        .transpose()?;
    Ok(found.filter(|(found, _)| found.starts_with(path)))
}

/// The account trie: stored nodes (unless ignored) and the hashed accounts, each leaf
/// completed with its storage root from `R`.
pub(crate) struct AccountSource<'tx, K: TransactionKind, R> {
    nodes: Option<Cursor<'tx, K>>,
    leaves: Cursor<'tx, K>,
    pub roots: R,
}

impl<'tx, K: TransactionKind, R> AccountSource<'tx, K, R> {
    pub(crate) fn new(
        dbs: &TrieDbs,
        txn: &'tx Tx<K>,
        use_nodes: bool,
        roots: R,
    ) -> Result<Self, TrieDbError> {
        Ok(Self {
            nodes: use_nodes
                .then(|| cursor(dbs, txn, TrieTable::AccountsTrie))
                .transpose()?,
            leaves: cursor(dbs, txn, TrieTable::HashedAccounts)?,
            roots,
        })
    }

    fn leaf(row: Row<'_>) -> Result<Option<(B256, AccountState)>, TrieDbError> {
        row.map(|(k, v)| {
            Ok((
                hashed_key(TrieTable::HashedAccounts, &k)?,
                codec::decode_account(TrieTable::HashedAccounts, &k, &v)?,
            ))
        })
        .transpose()
    }
}

impl<K: TransactionKind, R: StorageRoots> TrieSource for AccountSource<'_, K, R> {
    type Leaf = AccountState;
    type Error = TrieDbError;

    fn seek_node(&mut self, path: &Nibbles) -> Result<Found, TrieDbError> {
        match self.nodes.as_mut() {
            Some(nodes) => seek_account_node(nodes, path),
            None => Ok(None),
        }
    }

    fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, AccountState)>, TrieDbError> {
        let row: Row<'_> = self
            .leaves
            .set_range(key.as_slice())
            .map_err(TrieDbError::read("HashedAccounts"))?;
        Self::leaf(row)
    }

    fn next_leaf(&mut self) -> Result<Option<(B256, AccountState)>, TrieDbError> {
        let row: Row<'_> = self
            .leaves
            .next()
            .map_err(TrieDbError::read("HashedAccounts"))?;
        Self::leaf(row)
    }

    fn leaf_value(
        &mut self,
        key: &B256,
        leaf: &AccountState,
        out: &mut Vec<u8>,
    ) -> Result<(), TrieDbError> {
        let storage_root = self.roots.storage_root(key)?;
        TrieAccount::new(leaf.nonce, leaf.balance, storage_root, leaf.code_hash).encode(out);
        Ok(())
    }
}

impl<K: TransactionKind, R: StorageRoots> NodesFrom for AccountSource<'_, K, R> {
    fn seek_node_from(&mut self, from: &Nibbles) -> Result<Found, TrieDbError> {
        let Some(nodes) = self.nodes.as_mut() else {
            return Ok(None);
        };
        let table = TrieTable::AccountsTrie;
        let row: Row<'_> = nodes
            .set_range(&codec::encode_path(from))
            .map_err(TrieDbError::read(table.name()))?;
        row.map(|(k, v)| -> Result<_, TrieDbError> {
            Ok((
                codec::decode_path(table, &k, &k)?,
                codec::decode_node(table, &k, &v)?,
            ))
        })
        .transpose()
    }
}

/// One account's storage trie.
pub(crate) struct StorageSource<'tx, K: TransactionKind> {
    address: B256,
    nodes: Option<Cursor<'tx, K>>,
    leaves: Cursor<'tx, K>,
}

impl<'tx, K: TransactionKind> StorageSource<'tx, K> {
    pub(crate) fn new(
        dbs: &TrieDbs,
        txn: &'tx Tx<K>,
        address: B256,
        use_nodes: bool,
    ) -> Result<Self, TrieDbError> {
        Ok(Self {
            address,
            nodes: use_nodes
                .then(|| cursor(dbs, txn, TrieTable::StoragesTrie))
                .transpose()?,
            leaves: cursor(dbs, txn, TrieTable::HashedStorages)?,
        })
    }

    fn seek_stored(&mut self, path: &Nibbles) -> Result<Found, TrieDbError> {
        Ok(self
            .seek_node_from(path)?
            .filter(|(found, _)| found.starts_with(path)))
    }

    fn leaf(&self, row: Option<Cow<'_, [u8]>>) -> Result<Option<(B256, U256)>, TrieDbError> {
        row.map(|v| codec::decode_slot(TrieTable::HashedStorages, self.address.as_slice(), &v))
            .transpose()
    }
}

impl<K: TransactionKind> NodesFrom for StorageSource<'_, K> {
    fn seek_node_from(&mut self, from: &Nibbles) -> Result<Found, TrieDbError> {
        let Some(nodes) = self.nodes.as_mut() else {
            return Ok(None);
        };
        let table = TrieTable::StoragesTrie;
        let row: Option<Cow<'_, [u8]>> = nodes
            .get_both_range(self.address.as_slice(), &codec::encode_path(from))
            .map_err(TrieDbError::read(table.name()))?;
        let key = self.address.as_slice();
        row.map(|v| -> Result<_, TrieDbError> {
            Ok((
                codec::decode_path(table, key, &v)?,
                codec::decode_node(table, key, &v[PATH_LEN..])?,
            ))
        })
        .transpose()
    }
}

impl<K: TransactionKind> TrieSource for StorageSource<'_, K> {
    type Leaf = U256;
    type Error = TrieDbError;

    fn seek_node(&mut self, path: &Nibbles) -> Result<Found, TrieDbError> {
        if self.nodes.is_none() {
            return Ok(None);
        }
        self.seek_stored(path)
    }

    fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, U256)>, TrieDbError> {
        let row: Option<Cow<'_, [u8]>> = self
            .leaves
            .get_both_range(self.address.as_slice(), key.as_slice())
            .map_err(TrieDbError::read("HashedStorages"))?;
        self.leaf(row)
    }

    fn next_leaf(&mut self) -> Result<Option<(B256, U256)>, TrieDbError> {
        let row: Option<((), Cow<'_, [u8]>)> = self
            .leaves
            .next_dup()
            .map_err(TrieDbError::read("HashedStorages"))?;
        self.leaf(row.map(|(_, v)| v))
    }

    fn leaf_value(
        &mut self,
        _key: &B256,
        leaf: &U256,
        out: &mut Vec<u8>,
    ) -> Result<(), TrieDbError> {
        leaf.encode(out);
        Ok(())
    }
}

/// Storage roots for the account trie's leaves.
pub(crate) trait StorageRoots {
    fn storage_root(&mut self, address: &B256) -> Result<B256, TrieDbError>;
}

/// What happens to the storage tries computed for the account walk's leaves.
pub trait StorageSink {
    /// Whether the walks must collect their changed nodes for [`StorageSink::store`].
    fn wants_updates(&self) -> bool;
    /// Takes one storage trie's finished walk.
    fn store(&mut self, address: &B256, run: &TrieRun) -> Result<(), TrieDbError>;
    /// Finished nodes of a storage trie being rebuilt, before its walk ends.
    fn spill(
        &mut self,
        address: &B256,
        nodes: &[(Nibbles, BranchNodeCompact)],
    ) -> Result<(), TrieDbError>;
}

/// Keeps nothing: the stored tries already describe these accounts.
pub(crate) struct Discard;

impl StorageSink for Discard {
    fn wants_updates(&self) -> bool {
        false
    }

    fn store(&mut self, _: &B256, _: &TrieRun) -> Result<(), TrieDbError> {
        Ok(())
    }

    fn spill(&mut self, _: &B256, _: &[(Nibbles, BranchNodeCompact)]) -> Result<(), TrieDbError> {
        Ok(())
    }
}

/// Writes each storage trie's nodes (a rebuild).
pub(crate) struct WriteTo<'tx> {
    pub dbs: TrieDbs,
    pub txn: &'tx RwTxUnsync,
}

impl StorageSink for WriteTo<'_> {
    fn wants_updates(&self) -> bool {
        true
    }

    fn store(&mut self, address: &B256, run: &TrieRun) -> Result<(), TrieDbError> {
        write_storage_trie(&self.dbs, self.txn, address, run)
    }

    fn spill(
        &mut self,
        address: &B256,
        nodes: &[(Nibbles, BranchNodeCompact)],
    ) -> Result<(), TrieDbError> {
        put_storage_nodes(&self.dbs, self.txn, address, nodes)
    }
}

/// Storage roots computed in this run (`known`), else the stored root node's hash, else
/// computed from the account's slots (an account without slots: the empty root).
pub(crate) struct StoredRoots<'a, 'tx, K: TransactionKind, W> {
    dbs: TrieDbs,
    txn: &'tx Tx<K>,
    known: &'a B256Map<B256>,
    /// `HashedStorages`, to find whether an account has slots.
    probe: Cursor<'tx, K>,
    /// `(low, next)`: `next` is the first account with slots at or after `low`.
    probe_at: Option<(B256, Option<B256>)>,
    use_nodes: bool,
    cache: Option<&'a Mutex<StorageNodes>>,
    sink: W,
    /// Storage tries walked for roots not `known`.
    pub computed: u64,
    /// Leaves those walks hashed.
    pub leaves: u64,
}

impl<'a, 'tx, K: TransactionKind, W: StorageSink> StoredRoots<'a, 'tx, K, W> {
    pub(crate) fn new(
        dbs: &TrieDbs,
        txn: &'tx Tx<K>,
        known: &'a B256Map<B256>,
        use_nodes: bool,
        sink: W,
    ) -> Result<Self, TrieDbError> {
        Ok(Self {
            dbs: *dbs,
            txn,
            known,
            probe: cursor(dbs, txn, TrieTable::HashedStorages)?,
            probe_at: None,
            use_nodes,
            cache: None,
            sink,
            computed: 0,
            leaves: 0,
        })
    }

    /// Seeks storage tries' stored nodes through `cache`, which must describe this
    /// transaction's nodes.
    pub(crate) fn cached(mut self, cache: Option<&'a Mutex<StorageNodes>>) -> Self {
        self.cache = cache;
        self
    }

    /// The root this run computed for `address`, if it did.
    pub(crate) fn known(&self, address: &B256) -> Option<B256> {
        self.known.get(address).copied()
    }

    fn has_slots(&mut self, address: &B256) -> Result<bool, TrieDbError> {
        // Leaves come in key order, so the last probe usually answers without a seek: an
        // account without storage costs nothing.
        if let Some((low, next)) = self.probe_at {
            if low <= *address && next.is_none_or(|n| n >= *address) {
                return Ok(next == Some(*address));
            }
        }
        let row: Option<(Cow<'_, [u8]>, ())> = self
            .probe
            .set_range(address.as_slice())
            .map_err(TrieDbError::read("HashedStorages"))?;
        let next = row
            .map(|(k, ())| hashed_key(TrieTable::HashedStorages, &k))
            .transpose()?;
        self.probe_at = Some((*address, next));
        Ok(next == Some(*address))
    }
}

impl<K: TransactionKind, W: StorageSink> StorageRoots for StoredRoots<'_, '_, K, W> {
    fn storage_root(&mut self, address: &B256) -> Result<B256, TrieDbError> {
        if let Some(root) = self.known.get(address) {
            return Ok(*root);
        }
        if !self.has_slots(address)? {
            return Ok(EMPTY_ROOT_HASH);
        }
        let run = {
            let cache = self.cache.map(|storage| OwnerNodes {
                storage,
                owner: *address,
            });
            let mut source = CachedSource::new(
                StorageSource::new(&self.dbs, self.txn, *address, self.use_nodes)?,
                cache,
            );
            let updates = self.sink.wants_updates();
            let sink = &mut self.sink;
            let mut spill = |nodes: &[(Nibbles, BranchNodeCompact)]| sink.spill(address, nodes);
            // Only a rebuild (no stored nodes read) may write nodes before the walk ends.
            let spill = (updates && !self.use_nodes).then_some(walk::Spill {
                every: crate::rebuild::SPILL_NODES,
                to: &mut spill,
            });
            walk::run_spilling(
                &mut source,
                &PrefixSet::default(),
                Vec::new(),
                updates,
                spill,
            )?
        };
        self.computed += 1;
        self.leaves += run.leaves;
        self.sink.store(address, &run)?;
        Ok(run.root)
    }
}

/// Replaces the account trie nodes a walk entered with its updates.
pub fn write_account_trie(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    run: &TrieRun,
) -> Result<(), TrieDbError> {
    let db = dbs.get(TrieTable::AccountsTrie);
    for path in &run.removed {
        if run.updates.binary_search_by(|u| u.0.cmp(path)).is_err() {
            txn.del(db, codec::encode_path(path), None)
                .map_err(TrieDbError::mdbx("delete from AccountsTrie"))?;
        }
    }
    put_account_nodes(dbs, txn, &run.updates)
}

/// Replaces the storage trie nodes of `address` a walk entered with its updates.
pub fn write_storage_trie(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    address: &B256,
    run: &TrieRun,
) -> Result<(), TrieDbError> {
    if run.removed.is_empty() && run.updates.is_empty() {
        return Ok(());
    }
    let mut c = cursor(dbs, txn, TrieTable::StoragesTrie)?;
    for path in &run.removed {
        delete_storage_node(&mut c, address, path)?;
    }
    drop(c);
    put_storage_nodes(dbs, txn, address, &run.updates)
}

/// Deletes the duplicate of `address` at `path`, found by its path prefix (the node bytes
/// after it differ).
fn delete_storage_node(
    c: &mut Cursor<'_, signet_libmdbx::Rw>,
    address: &B256,
    path: &Nibbles,
) -> Result<(), TrieDbError> {
    let key = codec::encode_path(path);
    let found: Option<Cow<'_, [u8]>> = c
        .get_both_range(address.as_slice(), &key)
        .map_err(TrieDbError::read("StoragesTrie"))?;
    if found.is_some_and(|v| v.starts_with(&key)) {
        c.del()
            .map_err(TrieDbError::mdbx("delete from StoragesTrie"))?;
    }
    Ok(())
}

/// Stores storage trie nodes of `address`, replacing any at the same paths.
pub fn put_storage_nodes(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    address: &B256,
    nodes: &[(Nibbles, BranchNodeCompact)],
) -> Result<(), TrieDbError> {
    let mut c = cursor(dbs, txn, TrieTable::StoragesTrie)?;
    let mut buf = Vec::with_capacity(600);
    for (path, node) in nodes {
        put_storage_node(&mut c, address, path, Some(node), &mut buf)?;
    }
    Ok(())
}

/// Replaces the storage trie node of `address` at `path` with `node` (`None`: deletes it).
fn put_storage_node(
    c: &mut Cursor<'_, signet_libmdbx::Rw>,
    address: &B256,
    path: &Nibbles,
    node: Option<&BranchNodeCompact>,
    buf: &mut Vec<u8>,
) -> Result<(), TrieDbError> {
    delete_storage_node(c, address, path)?;
    if let Some(node) = node {
        buf.clear();
        buf.extend_from_slice(&codec::encode_path(path));
        codec::encode_node(node, buf);
        c.put(address.as_slice(), &*buf, WriteFlags::empty())
            .map_err(TrieDbError::mdbx("write StoragesTrie"))?;
    }
    Ok(())
}

/// Writes a layer's account trie nodes: each stored, or deleted where the layer removed it.
pub fn write_account_nodes<'a>(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    nodes: impl IntoIterator<Item = (&'a Nibbles, &'a Option<BranchNodeCompact>)>,
) -> Result<(), TrieDbError> {
    // One cursor for the run (in path order): MDBX searches from its page first.
    let mut c = cursor(dbs, txn, TrieTable::AccountsTrie)?;
    let mut buf = Vec::with_capacity(600);
    for (path, node) in nodes {
        let value = node.as_ref().map(|node| {
            buf.clear();
            codec::encode_node(node, &mut buf);
            buf.as_slice()
        });
        put_or_delete(
            &mut c,
            &codec::encode_path(path),
            value,
            ("write AccountsTrie", "delete from AccountsTrie"),
        )?;
    }
    Ok(())
}

/// Writes a layer's storage trie nodes of `address` through `c` (a `StoragesTrie` cursor).
pub fn write_storage_nodes<'a>(
    c: &mut Cursor<'_, signet_libmdbx::Rw>,
    address: &B256,
    nodes: impl IntoIterator<Item = (&'a Nibbles, &'a Option<BranchNodeCompact>)>,
) -> Result<(), TrieDbError> {
    let mut buf = Vec::with_capacity(600);
    for (path, node) in nodes {
        put_storage_node(c, address, path, node.as_ref(), &mut buf)?;
    }
    Ok(())
}

/// Empties the changed-key tables (a root took their keys).
pub fn clear_changed(dbs: &TrieDbs, txn: &RwTxUnsync) -> Result<(), TrieDbError> {
    clear(
        dbs,
        txn,
        &[
            TrieTable::TrieChangedAccounts,
            TrieTable::TrieChangedStorages,
        ],
    )
}

/// Stores account trie nodes, replacing any at the same paths.
pub fn put_account_nodes(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    nodes: &[(Nibbles, BranchNodeCompact)],
) -> Result<(), TrieDbError> {
    let db = dbs.get(TrieTable::AccountsTrie);
    let mut buf = Vec::with_capacity(600);
    for (path, node) in nodes {
        put_account_node(txn, db, path, Some(node), &mut buf)?;
    }
    Ok(())
}

/// Stores the account trie node at `path` (`None`: deletes it).
fn put_account_node(
    txn: &RwTxUnsync,
    db: signet_libmdbx::Database,
    path: &Nibbles,
    node: Option<&BranchNodeCompact>,
    buf: &mut Vec<u8>,
) -> Result<(), TrieDbError> {
    match node {
        Some(node) => {
            buf.clear();
            codec::encode_node(node, buf);
            txn.put(db, codec::encode_path(path), &*buf, WriteFlags::empty())
                .map_err(TrieDbError::mdbx("write AccountsTrie"))
        }
        None => txn
            .del(db, codec::encode_path(path), None)
            .map(|_| ())
            .map_err(TrieDbError::mdbx("delete from AccountsTrie")),
    }
}

/// Hashed keys changed since the last root.
#[derive(Debug, Clone, Default)]
pub struct ChangedKeys {
    /// Accounts whose leaf changed (their state, or their storage root).
    pub accounts: B256Set,
    /// Accounts whose storage changed, with the slots (a wiped account may list none: its
    /// stored trie is gone, so all of it is recomputed).
    pub storage: B256Map<Vec<B256>>,
}

impl ChangedKeys {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty() && self.storage.is_empty()
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.accounts.clear();
        self.storage.clear();
    }

    /// An account's leaf changed.
    pub fn account(&mut self, address: B256) {
        self.accounts.insert(address);
    }

    /// An account's storage changed: its slot list, to push the changed slots to.
    pub fn storage_of(&mut self, address: B256) -> &mut Vec<B256> {
        self.accounts.insert(address);
        self.storage.entry(address).or_default()
    }

    /// The keys one block changes (`keys` fit `changes`): each account's leaf, and for a
    /// wiped storage or a changed slot the account's storage trie.
    pub fn add_block(
        &mut self,
        changes: &gigas_primitives::ChangeSet,
        keys: &gigas_primitives::HashedKeys,
    ) {
        for ((_, change), &h) in changes.accounts().iter().zip(keys.accounts()) {
            if change.storage_wiped {
                self.storage_of(h);
            } else {
                self.account(h);
            }
        }
        for &(h, s) in keys.slots() {
            self.storage_of(h).push(s);
        }
    }

    /// Takes in the keys `other` changed (later changes over these).
    pub fn merge(&mut self, other: ChangedKeys) {
        self.accounts.extend(other.accounts);
        for (address, slots) in other.storage {
            self.storage_of(address).extend(slots);
        }
    }
}

const STORAGE_CHANGED: u8 = 1;

/// The changed keys the committed state carries (a root was not computed at its head).
pub fn load_changed<K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &Tx<K>,
) -> Result<ChangedKeys, TrieDbError> {
    let mut out = ChangedKeys::default();
    let table = TrieTable::TrieChangedAccounts;
    let mut c = cursor(dbs, txn, table)?;
    let mut row: Row<'_> = c.first().map_err(TrieDbError::read(table.name()))?;
    while let Some((k, flags)) = row {
        let address = hashed_key(table, &k)?;
        if flags.first().is_some_and(|f| f & STORAGE_CHANGED != 0) {
            out.storage_of(address);
        } else {
            out.account(address);
        }
        row = c.next().map_err(TrieDbError::read(table.name()))?;
    }
    let table = TrieTable::TrieChangedStorages;
    let mut c = cursor(dbs, txn, table)?;
    let mut row: Row<'_> = c.first().map_err(TrieDbError::read(table.name()))?;
    while let Some((k, slot)) = row {
        let address = hashed_key(table, &k)?;
        let slot = hashed_key(table, &slot)?;
        out.storage_of(address).push(slot);
        row = c.next().map_err(TrieDbError::read(table.name()))?;
    }
    Ok(out)
}

/// Adds `changed` to the changed-key tables, for a root after the commit.
pub fn persist_changed(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    changed: &ChangedKeys,
) -> Result<(), TrieDbError> {
    let accounts_db = dbs.get(TrieTable::TrieChangedAccounts);
    let mut accounts: Vec<&B256> = changed.accounts.iter().collect();
    accounts.sort_unstable();
    for address in accounts {
        let storage = changed.storage.contains_key(address);
        // A storage flag already there must survive a later plain change.
        let (flags, write) = if storage {
            (STORAGE_CHANGED, WriteFlags::empty())
        } else {
            (0, WriteFlags::NO_OVERWRITE)
        };
        match txn.put(accounts_db, address, [flags], write) {
            Ok(()) | Err(MdbxError::KeyExist) => {}
            Err(e) => return Err(TrieDbError::mdbx("write TrieChangedAccounts")(e)),
        }
    }
    let slots_db = dbs.get(TrieTable::TrieChangedStorages);
    let mut storage: Vec<(&B256, &Vec<B256>)> = changed.storage.iter().collect();
    storage.sort_unstable_by_key(|(a, _)| **a);
    for (address, slots) in storage {
        for slot in slots {
            match txn.put(slots_db, address, slot, WriteFlags::NO_DUP_DATA) {
                Ok(()) | Err(MdbxError::KeyExist) => {}
                Err(e) => return Err(TrieDbError::mdbx("write TrieChangedStorages")(e)),
            }
        }
    }
    Ok(())
}

/// Empties `tables`.
pub fn clear(dbs: &TrieDbs, txn: &RwTxUnsync, tables: &[TrieTable]) -> Result<(), TrieDbError> {
    for table in tables {
        txn.clear_db(dbs.get(*table))
            .map_err(TrieDbError::mdbx("clear a trie table"))?;
    }
    Ok(())
}
