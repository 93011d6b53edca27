//! The stored branch nodes kept in memory across blocks, under a byte budget.
//!
//! Every root walks from the top of the account trie down to each changed key, entering
//! the stored node at each level. Over 10M accounts that is about 16,000 node seeks per
//! block of 6,300 changes, each a B-tree search in MDBX (`AccountsTrie` holds about a
//! million nodes), and the same upper nodes are sought again by the next block. The cache
//! answers those seeks from memory: what it holds is exactly what the seek would find in
//! the write transaction, so a root computed through it is the root computed without it.
//!
//! **What is cached:** the answer to "the first stored node under this path" (the walk's
//! only question, [`gigas_trie::walk::TrieSource::seek_node`]), found or not found, per
//! trie (the account trie, and each account's storage trie).
//!
//! **Kept exact by:** every write of trie nodes goes through [`NodeMap::written`], which
//! drops the answer of every path above a node that changed (only those answers can
//! change) and records the new nodes; a wiped account's storage trie is dropped whole; a
//! rebuild or a discarded group drops everything.
//!
//! **Kept with each node:** the hashes of its leaf children as the last walk that entered it
//! knew them ([`gigas_trie::walk::run_memo`]): a stored node keeps hashes for its branch
//! children only, so without them every root reads and hashes again each sibling leaf of
//! each changed key. They stay true until a key under the node changes, and then the walk
//! enters the node and they are replaced with it.
//!
//! **Bounded by:** a byte budget, enforced after each root ([`TrieCache::enforce_budget`]):
//! answers not used for the most roots go first, down to three quarters of the budget, so
//! the upper levels, which every block uses, stay. A budget of 0 turns the cache off.

use std::mem::size_of;
use std::sync::{Mutex, MutexGuard};

use alloy_primitives::map::{B256Map, HashMap};
use alloy_primitives::B256;
use alloy_trie::{BranchNodeCompact, Nibbles};

use crate::error::TrieDbError;
use gigas_trie::walk::{LeafHashes, TrieRun, TrieSource};

/// One trie's stored node, as a seek under a path finds it.
pub type Found = Option<(Nibbles, BranchNodeCompact)>;

#[derive(Debug)]
struct Cached {
    found: Found,
    /// The found node's leaf children's hashes.
    leaves: Option<LeafHashes>,
    /// The root (epoch) that last used it.
    used: u32,
}

/// What an entry costs: the map's slot (key, value and control byte, rounded) and the
/// node's and its leaf hashes on the heap.
fn entry_bytes(found: &Found, leaves: &Option<LeafHashes>) -> usize {
    let heap = found.as_ref().map_or(0, |(_, node)| {
        // The Arc's counts and the Vec's header, then the hashes.
        2 * size_of::<usize>() + size_of::<Vec<B256>>() + node.hashes.len() * size_of::<B256>()
    });
    let leaves = leaves.as_ref().map_or(0, LeafHashes::heap_bytes);
    size_of::<Nibbles>() + size_of::<Cached>() + 8 + heap + leaves
}

impl Cached {
    fn bytes(&self) -> usize {
        entry_bytes(&self.found, &self.leaves)
    }
}

/// Hits, misses and evictions since the cache was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrieCacheStats {
    /// Seeks answered from memory.
    pub hits: u64,
    /// Seeks that went to MDBX.
    pub misses: u64,
    /// Entries dropped to keep within the budget.
    pub evicted: u64,
    /// Entries held now.
    pub entries: u64,
    /// Bytes held now (estimated as the entries' sizes).
    pub bytes: u64,
}

/// One trie's cached seeks.
#[derive(Debug, Default)]
pub struct NodeMap {
    entries: HashMap<Nibbles, Cached>,
    bytes: usize,
    epoch: u32,
    hits: u64,
    misses: u64,
}

impl NodeMap {
    /// The cached answer for `path`, with the found node's leaf hashes, if any.
    pub fn get(&mut self, path: &Nibbles) -> Option<(Found, Option<LeafHashes>)> {
        match self.entries.get_mut(path) {
            Some(entry) => {
                entry.used = self.epoch;
                self.hits += 1;
                Some((entry.found.clone(), entry.leaves.clone()))
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Records what a seek under `path` found in MDBX.
    pub fn insert(&mut self, path: Nibbles, found: Found) {
        self.put(path, found, None);
    }

    fn put(&mut self, path: Nibbles, found: Found, leaves: Option<LeafHashes>) {
        let entry = Cached {
            found,
            leaves,
            used: self.epoch,
        };
        let bytes = entry.bytes();
        if let Some(old) = self.entries.insert(path, entry) {
            self.bytes -= old.bytes();
        }
        self.bytes += bytes;
    }

    fn remove(&mut self, path: &Nibbles) {
        if let Some(old) = self.entries.remove(path) {
            self.bytes -= old.bytes();
        }
    }

    /// The trie's stored nodes at `removed` were deleted or replaced, and `updates` were
    /// stored (both sorted by path, as a walk gives them), with the leaf hashes the walk
    /// knew for them (sorted by path): the answer for a path changes only if a changed node
    /// lies under it, so the answers of every prefix of a changed path go, and each stored
    /// node answers for its own path.
    pub fn written(
        &mut self,
        removed: &[Nibbles],
        updates: &[(Nibbles, BranchNodeCompact)],
        leaf_hashes: &[(Nibbles, LeafHashes)],
    ) {
        if self.entries.is_empty() && updates.is_empty() {
            return;
        }
        let is_update = |path: &Nibbles| updates.binary_search_by(|(p, _)| p.cmp(path)).is_ok();
        // Merged in path order, consecutive paths share their ancestors: each prefix is
        // dropped once, and an updated path is overwritten below rather than dropped.
        let mut last: Option<Nibbles> = None;
        let mut drop_prefixes = |path: &Nibbles, map: &mut Self| {
            let shared = last.map_or(0, |l| l.common_prefix_length(path) + 1);
            for len in shared.min(path.len() + 1)..=path.len() {
                let prefix = path.slice(..len);
                if !is_update(&prefix) {
                    map.remove(&prefix);
                }
            }
            last = Some(*path);
        };
        let (mut r, mut u) = (0, 0);
        while r < removed.len() || u < updates.len() {
            let take_removed = match (removed.get(r), updates.get(u)) {
                (Some(a), Some((b, _))) => a <= b,
                (Some(_), None) => true,
                _ => false,
            };
            let path = if take_removed {
                r += 1;
                removed[r - 1]
            } else {
                u += 1;
                updates[u - 1].0
            };
            drop_prefixes(&path, self);
        }
        let mut hashes = leaf_hashes.iter().peekable();
        for (path, node) in updates {
            while hashes.next_if(|(p, _)| p < path).is_some() {}
            let leaves = hashes.next_if(|(p, _)| p == path).map(|(_, h)| h.clone());
            self.put(*path, Some((*path, node.clone())), leaves);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Each account's storage trie's cached seeks.
#[derive(Debug, Default)]
pub struct StorageNodes {
    owners: B256Map<NodeMap>,
    /// Bytes of every owner's map as of its last change through this type.
    bytes: usize,
    epoch: u32,
    hits: u64,
    misses: u64,
}

impl StorageNodes {
    /// The cached answer for `path` in `owner`'s storage trie, if any.
    pub fn get(&mut self, owner: &B256, path: &Nibbles) -> Option<(Found, Option<LeafHashes>)> {
        let found = self.owners.get_mut(owner).and_then(|map| {
            map.epoch = self.epoch;
            map.get(path)
        });
        match found {
            Some(_) => self.hits += 1,
            None => self.misses += 1,
        }
        found
    }

    /// Records what a seek under `path` in `owner`'s storage trie found in MDBX.
    pub fn insert(&mut self, owner: B256, path: Nibbles, found: Found) {
        let map = self.owners.entry(owner).or_default();
        map.epoch = self.epoch;
        let before = map.bytes;
        map.insert(path, found);
        self.bytes = self.bytes + map.bytes - before;
    }

    /// [`NodeMap::written`] for `owner`'s storage trie.
    pub fn written(
        &mut self,
        owner: &B256,
        removed: &[Nibbles],
        updates: &[(Nibbles, BranchNodeCompact)],
        leaf_hashes: &[(Nibbles, LeafHashes)],
    ) {
        if removed.is_empty() && updates.is_empty() {
            return;
        }
        let map = self.owners.entry(*owner).or_default();
        map.epoch = self.epoch;
        let before = map.bytes;
        map.written(removed, updates, leaf_hashes);
        self.bytes = self.bytes + map.bytes - before;
    }

    /// `owner`'s storage trie was deleted whole (the account's storage was wiped).
    pub fn forget(&mut self, owner: &B256) {
        if let Some(map) = self.owners.remove(owner) {
            self.bytes -= map.bytes;
        }
    }

    fn clear(&mut self) {
        self.owners.clear();
        self.bytes = 0;
    }
}

/// Takes a lock whatever an earlier holder did: the maps' operations leave them whole at
/// every point a panic could start, and a root whose thread panicked discards its group,
/// which empties the cache anyway.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Shards of the account trie's map: one per first nibble, and one for the root path.
const ACCOUNT_SHARDS: usize = 17;

/// The account trie's cached seeks, in shards by the path's first nibble (the root path in
/// a shard of its own), each behind its own lock: a root splits the account trie under its
/// root node and walks each first nibble on its own thread
/// ([`crate::layer`]), so each thread takes one shard's lock and the root's, and
/// never waits on another's.
#[derive(Debug)]
pub(crate) struct AccountNodes {
    shards: Vec<Mutex<NodeMap>>,
}

impl Default for AccountNodes {
    fn default() -> Self {
        Self {
            shards: (0..ACCOUNT_SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

/// The shard of a path: its first nibble, or the last shard for the root path.
fn shard_of(path: &Nibbles) -> usize {
    path.first().map_or(ACCOUNT_SHARDS - 1, usize::from)
}

/// The run of `items` (sorted by path) whose first nibble is `nibble`.
fn with_first<T>(items: &[T], nibble: u8, path: impl Fn(&T) -> &Nibbles) -> &[T] {
    // In path order the root path sorts first, then by first nibble.
    let rank = |item: &T| path(item).first().map_or(0, |n| u16::from(n) + 1);
    let key = u16::from(nibble) + 1;
    let from = items.partition_point(|item| rank(item) < key);
    let to = items.partition_point(|item| rank(item) <= key);
    &items[from..to]
}

impl AccountNodes {
    fn shard(&self, path: &Nibbles) -> MutexGuard<'_, NodeMap> {
        lock(&self.shards[shard_of(path)])
    }

    /// The cached answer for `path`, with the found node's leaf hashes, if any.
    pub(crate) fn get(&self, path: &Nibbles) -> Option<(Found, Option<LeafHashes>)> {
        self.shard(path).get(path)
    }

    /// Records what a seek under `path` found.
    pub(crate) fn insert(&self, path: Nibbles, found: Found) {
        self.shard(&path).insert(path, found);
    }

    /// [`NodeMap::written`], each shard given its own paths. Every change lies under the
    /// root path, so any change drops the root path's answer.
    pub(crate) fn written(
        &self,
        removed: &[Nibbles],
        updates: &[(Nibbles, BranchNodeCompact)],
        leaf_hashes: &[(Nibbles, LeafHashes)],
    ) {
        if removed.is_empty() && updates.is_empty() {
            return;
        }
        let top = Nibbles::new();
        let top_updates: Vec<_> = updates
            .iter()
            .filter(|(p, _)| p.is_empty())
            .cloned()
            .collect();
        let top_hashes: Vec<_> = leaf_hashes
            .iter()
            .filter(|(p, _)| p.is_empty())
            .cloned()
            .collect();
        lock(&self.shards[ACCOUNT_SHARDS - 1]).written(
            std::slice::from_ref(&top),
            &top_updates,
            &top_hashes,
        );
        for nibble in 0..16u8 {
            let removed = with_first(removed, nibble, |p| p);
            let updates = with_first(updates, nibble, |(p, _)| p);
            if removed.is_empty() && updates.is_empty() {
                continue;
            }
            let hashes = with_first(leaf_hashes, nibble, |(p, _)| p);
            lock(&self.shards[usize::from(nibble)]).written(removed, updates, hashes);
        }
    }

    fn each(&self, mut f: impl FnMut(&mut NodeMap)) {
        for shard in &self.shards {
            f(&mut lock(shard));
        }
    }
}

/// Where a [`CachedSource`] keeps its answers: one trie's map.
pub trait NodeCache {
    /// The cached answer for `path`, with the found node's leaf hashes, if any.
    fn get(&mut self, path: &Nibbles) -> Option<(Found, Option<LeafHashes>)>;
    /// Records what a seek under `path` found in the source.
    fn insert(&mut self, path: Nibbles, found: Found);
}

impl NodeCache for &AccountNodes {
    fn get(&mut self, path: &Nibbles) -> Option<(Found, Option<LeafHashes>)> {
        AccountNodes::get(self, path)
    }

    fn insert(&mut self, path: Nibbles, found: Found) {
        AccountNodes::insert(self, path, found);
    }
}

/// One account's storage trie in the shared storage map.
pub(crate) struct OwnerNodes<'a> {
    pub storage: &'a Mutex<StorageNodes>,
    pub owner: B256,
}

impl NodeCache for OwnerNodes<'_> {
    fn get(&mut self, path: &Nibbles) -> Option<(Found, Option<LeafHashes>)> {
        lock(self.storage).get(&self.owner, path)
    }

    fn insert(&mut self, path: Nibbles, found: Found) {
        lock(self.storage).insert(self.owner, path, found);
    }
}

/// A trie source whose node seeks go through a cache, which must describe the source's
/// nodes (and is kept so by the writer, through [`NodeMap::written`] after each root):
/// answered from memory when held, else sought in the source and remembered. The leaves
/// are the source's, read as before.
pub(crate) struct CachedSource<S, C> {
    inner: S,
    cache: Option<C>,
    /// The leaf hashes the cache kept with the node the last seek found.
    stash: Option<LeafHashes>,
}

impl<S, C> CachedSource<S, C> {
    /// `inner`'s seeks through `cache`, or straight to `inner` without one.
    pub(crate) fn new(inner: S, cache: Option<C>) -> Self {
        Self {
            inner,
            cache,
            stash: None,
        }
    }

    pub(crate) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: TrieSource<Error = TrieDbError>, C: NodeCache> TrieSource for CachedSource<S, C> {
    type Leaf = S::Leaf;
    type Error = TrieDbError;

    fn seek_node(&mut self, path: &Nibbles) -> Result<Found, TrieDbError> {
        self.stash = None;
        let Some(cache) = self.cache.as_mut() else {
            return self.inner.seek_node(path);
        };
        if let Some((found, leaves)) = cache.get(path) {
            self.stash = leaves;
            return Ok(found);
        }
        let found = self.inner.seek_node(path)?;
        cache.insert(*path, found.clone());
        Ok(found)
    }

    fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, S::Leaf)>, TrieDbError> {
        self.inner.seek_leaf(key)
    }

    fn next_leaf(&mut self) -> Result<Option<(B256, S::Leaf)>, TrieDbError> {
        self.inner.next_leaf()
    }

    fn leaf_value(
        &mut self,
        key: &B256,
        leaf: &S::Leaf,
        out: &mut Vec<u8>,
    ) -> Result<(), TrieDbError> {
        self.inner.leaf_value(key, leaf, out)
    }

    fn take_leaf_hashes(&mut self) -> Option<LeafHashes> {
        if self.cache.is_some() {
            self.stash.take()
        } else {
            self.inner.take_leaf_hashes()
        }
    }

    fn remembers_leaves(&self) -> bool {
        self.cache.is_some() || self.inner.remembers_leaves()
    }
}

/// The account trie's and the storage tries' cached seeks, under one budget. Shared by the
/// threads of one root through locks ([`AccountNodes`]; the storage map behind one lock,
/// each storage walk holding it only for a lookup).
#[derive(Debug)]
pub struct TrieCache {
    pub(crate) accounts: AccountNodes,
    pub(crate) storage: Mutex<StorageNodes>,
    budget: usize,
    epoch: u32,
    evicted: u64,
}

impl TrieCache {
    /// An empty cache holding at most `budget` bytes (0: off).
    pub fn new(budget: usize) -> Self {
        Self {
            accounts: AccountNodes::default(),
            storage: Mutex::default(),
            budget,
            epoch: 0,
            evicted: 0,
        }
    }

    /// Whether seeks should go through the cache at all.
    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// The storage tries' map.
    pub fn storage(&self) -> MutexGuard<'_, StorageNodes> {
        lock(&self.storage)
    }

    /// The account trie's map, when the cache is on.
    pub(crate) fn account_nodes(&self) -> Option<&AccountNodes> {
        self.enabled().then_some(&self.accounts)
    }

    /// The storage tries' map, when the cache is on.
    pub fn storage_nodes(&self) -> Option<&Mutex<StorageNodes>> {
        self.enabled().then_some(&self.storage)
    }

    /// A root's walk of one trie changed its stored nodes: `owner`'s storage trie, or the
    /// account trie (`None`). Each changed path's answer goes and the walk's nodes, with
    /// the leaf hashes it knew, answer for their paths ([`NodeMap::written`]). Nothing
    /// when the cache is off.
    pub fn walked(&self, owner: Option<&B256>, run: &TrieRun) {
        if !self.enabled() {
            return;
        }
        let (removed, updates, hashes) = (&run.removed, &run.updates, &run.leaf_hashes);
        match owner {
            Some(owner) => self.storage().written(owner, removed, updates, hashes),
            None => self.accounts.written(removed, updates, hashes),
        }
    }

    /// `owner`'s storage trie was deleted whole (the account's storage was wiped).
    pub fn forget_storage(&self, owner: &B256) {
        self.storage().forget(owner);
    }

    /// Starts a root: what it uses is marked with a new epoch.
    pub fn begin_root(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        let epoch = self.epoch;
        self.accounts.each(|map| map.epoch = epoch);
        self.storage().epoch = epoch;
    }

    /// Drops everything: the stored nodes changed in ways the cache did not follow (a
    /// rebuild, a discarded write transaction).
    pub fn clear(&mut self) {
        self.accounts.each(NodeMap::clear);
        self.storage().clear();
    }

    fn bytes(&self) -> usize {
        let mut bytes = self.storage().bytes;
        self.accounts.each(|map| bytes += map.bytes);
        bytes
    }

    /// Evicts the entries unused for the most roots until at most three quarters of the
    /// budget is held, if the budget is exceeded. Returns how many went.
    pub fn enforce_budget(&mut self) -> u64 {
        if self.bytes() <= self.budget {
            return 0;
        }
        // Bytes by age in roots (the last bucket: that old or older), then the youngest
        // ages that fit in the target.
        const AGES: usize = 64;
        let epoch = self.epoch;
        let age = |used: u32| (epoch.wrapping_sub(used) as usize).min(AGES - 1);
        let mut by_age = [0usize; AGES];
        let mut count = |map: &mut NodeMap| {
            for entry in map.entries.values() {
                by_age[age(entry.used)] += entry.bytes();
            }
        };
        self.accounts.each(&mut count);
        for map in self.storage().owners.values_mut() {
            count(map);
        }
        let target = self.budget / 4 * 3;
        let mut kept = 0;
        let mut keep_below = 0;
        for (a, bytes) in by_age.iter().enumerate() {
            if kept + bytes > target {
                break;
            }
            kept += bytes;
            keep_below = a + 1;
        }
        let before = self.entries();
        let retain = |map: &mut NodeMap| {
            let mut bytes = 0;
            map.entries.retain(|_, entry| {
                let keep = age(entry.used) < keep_below;
                if keep {
                    bytes += entry.bytes();
                }
                keep
            });
            map.bytes = bytes;
        };
        self.accounts.each(retain);
        let mut storage = self.storage();
        storage.owners.retain(|_, map| {
            retain(map);
            map.len() > 0
        });
        storage.bytes = storage.owners.values().map(|m| m.bytes).sum();
        drop(storage);
        let after = self.entries();
        let evicted = (before - after) as u64;
        self.evicted += evicted;
        evicted
    }

    fn entries(&self) -> usize {
        let mut entries: usize = self.storage().owners.values().map(NodeMap::len).sum();
        self.accounts.each(|map| entries += map.len());
        entries
    }

    /// Counters and sizes.
    pub fn stats(&self) -> TrieCacheStats {
        let mut stats = TrieCacheStats {
            evicted: self.evicted,
            ..TrieCacheStats::default()
        };
        // One pass, each lock taken once (at every root, the cache on or off).
        let storage = self.storage();
        stats.hits = storage.hits;
        stats.misses = storage.misses;
        stats.bytes = storage.bytes as u64;
        stats.entries = storage.owners.values().map(NodeMap::len).sum::<usize>() as u64;
        drop(storage);
        self.accounts.each(|map| {
            stats.hits += map.hits;
            stats.misses += map.misses;
            stats.bytes += map.bytes as u64;
            stats.entries += map.len() as u64;
        });
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_trie::TrieMask;
    use std::sync::Arc;

    fn node(hashes: usize) -> BranchNodeCompact {
        BranchNodeCompact {
            state_mask: TrieMask::new(0xffff),
            tree_mask: TrieMask::new(0),
            hash_mask: TrieMask::new((1u16 << hashes) - 1),
            hashes: Arc::new(vec![B256::ZERO; hashes]),
            root_hash: None,
        }
    }

    fn path(nibbles: &[u8]) -> Nibbles {
        Nibbles::from_nibbles(nibbles)
    }

    #[test]
    fn a_write_drops_the_answers_above_it_and_keeps_the_others() {
        let mut map = NodeMap::default();
        map.insert(path(&[]), Some((path(&[]), node(2))));
        // Under [1] the first stored node is behind an extension, at [1, 2, 3].
        map.insert(path(&[1]), Some((path(&[1, 2, 3]), node(1))));
        map.insert(path(&[1, 2, 3]), Some((path(&[1, 2, 3]), node(1))));
        map.insert(path(&[2]), Some((path(&[2]), node(1))));
        map.insert(path(&[3]), None);
        let leaf = LeafHashes::single(7, B256::with_last_byte(7));
        map.written(
            &[path(&[]), path(&[1, 2, 3])],
            &[(path(&[1, 2]), node(3))],
            &[(path(&[1, 2]), leaf.clone())],
        );
        // The root and [1] lie above a changed node; [1, 2, 3] was removed; [1, 2] is new.
        assert!(map.get(&path(&[])).is_none());
        assert!(map.get(&path(&[1])).is_none());
        assert!(map.get(&path(&[1, 2, 3])).is_none());
        assert_eq!(
            map.get(&path(&[1, 2])),
            Some((Some((path(&[1, 2]), node(3))), Some(leaf.clone())))
        );
        assert_eq!(leaf.get(7), Some(B256::with_last_byte(7)));
        assert_eq!(leaf.get(6), None);
        // Siblings are untouched, found and not found alike.
        assert_eq!(
            map.get(&path(&[2])),
            Some((Some((path(&[2]), node(1))), None))
        );
        assert_eq!(map.get(&path(&[3])), Some((None, None)));
        let expected: usize = map.entries.values().map(Cached::bytes).sum();
        assert_eq!(map.bytes, expected);
    }

    /// The account map in shards answers as one map would: a write drops the root
    /// path's answer (every path lies under it) and the answers above each changed path
    /// in that path's shard, and leaves the other shards alone.
    #[test]
    fn account_shards_drop_what_one_map_would() {
        let nodes = AccountNodes::default();
        let leaf = LeafHashes::single(7, B256::with_last_byte(7));
        nodes.insert(path(&[]), Some((path(&[]), node(3))));
        nodes.insert(path(&[1]), Some((path(&[1, 2, 3]), node(1))));
        nodes.insert(path(&[1, 2, 3]), Some((path(&[1, 2, 3]), node(1))));
        nodes.insert(path(&[2]), Some((path(&[2]), node(1))));
        nodes.insert(path(&[2, 4]), Some((path(&[2, 4]), node(1))));
        nodes.insert(path(&[15]), None);
        nodes.written(
            &[path(&[1, 2, 3])],
            &[(path(&[1, 2]), node(3)), (path(&[2, 4, 5]), node(2))],
            &[(path(&[2, 4, 5]), leaf.clone())],
        );
        assert!(nodes.get(&path(&[])).is_none(), "the root path's answer");
        assert!(nodes.get(&path(&[1])).is_none());
        assert!(nodes.get(&path(&[1, 2, 3])).is_none());
        assert_eq!(
            nodes.get(&path(&[1, 2])),
            Some((Some((path(&[1, 2]), node(3))), None))
        );
        // [2] and [2, 4] lie above the new node at [2, 4, 5].
        assert!(nodes.get(&path(&[2])).is_none());
        assert!(nodes.get(&path(&[2, 4])).is_none());
        assert_eq!(
            nodes.get(&path(&[2, 4, 5])),
            Some((Some((path(&[2, 4, 5]), node(2))), Some(leaf)))
        );
        assert_eq!(nodes.get(&path(&[15])), Some((None, None)));
        // A new root node is the root path's answer again.
        nodes.written(&[path(&[])], &[(path(&[]), node(4))], &[]);
        assert_eq!(
            nodes.get(&path(&[])),
            Some((Some((path(&[]), node(4))), None))
        );
        let mut cache = TrieCache::new(1 << 20);
        cache.accounts = nodes;
        assert_eq!(cache.stats().entries, 4);
    }

    #[test]
    fn the_budget_keeps_what_recent_roots_used() {
        let one = entry_bytes(&Some((path(&[]), node(16))), &None);
        let mut cache = TrieCache::new(one * 28);
        // Root 1 finds 16 account nodes, root 3 ten storage tries' roots, root 5 uses
        // four of the account nodes again.
        cache.begin_root();
        for i in 0..16u8 {
            cache
                .accounts
                .insert(path(&[i]), Some((path(&[i]), node(16))));
        }
        cache.begin_root();
        cache.begin_root();
        for i in 0..10u8 {
            let root = Some((path(&[]), node(16)));
            cache
                .storage()
                .insert(B256::with_last_byte(i), path(&[]), root);
        }
        cache.begin_root();
        cache.begin_root();
        for i in 0..4u8 {
            assert!(cache.accounts.get(&path(&[i])).is_some());
        }
        assert_eq!(cache.enforce_budget(), 0, "within the budget");
        for i in 1..4u8 {
            let p = path(&[1, i]);
            cache.accounts.insert(p, Some((p, node(16))));
        }
        assert_eq!(cache.bytes(), one * 29);
        // Over it: down to 21 entries' worth, the oldest first. Those root 5 used (7) and
        // root 3's (10) fit; root 1's other twelve go.
        assert_eq!(cache.enforce_budget(), 12);
        assert_eq!(cache.bytes(), one * 17);
        for i in 0..4u8 {
            assert!(cache.accounts.get(&path(&[i])).is_some(), "{i} evicted");
        }
        for i in 4..16u8 {
            assert!(cache.accounts.get(&path(&[i])).is_none(), "{i} kept");
        }
        for i in 0..10u8 {
            let owner = B256::with_last_byte(i);
            assert!(
                cache.storage().get(&owner, &path(&[])).is_some(),
                "{i} evicted"
            );
        }
        let stats = cache.stats();
        assert_eq!(stats.evicted, 12);
        assert_eq!(stats.entries, 17);
        assert_eq!(stats.bytes as usize, cache.bytes());
        cache.storage().forget(&B256::with_last_byte(0));
        cache.clear();
        assert_eq!(cache.stats().entries, 0);
        assert_eq!(cache.bytes(), 0);
    }
}
