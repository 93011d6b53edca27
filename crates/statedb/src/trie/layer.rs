//! Roots over the last commit plus the open group, held in memory, on several threads.
//!
//! **Why.** A root computed inside the writer's transaction runs on the writer's thread
//! (MDBX ties a write transaction to one thread), and writes every block's changed branch
//! nodes and hashed leaves into it: over 10M accounts the same upper nodes are copied and
//! rewritten by every block of a group. Here the group's hashed leaves and branch nodes stay
//! in memory ([`TrieLayer`]) until the commit writes them once, sorted; a root reads the
//! last commit through read transactions of its own, with the layer laid over it
//! ([`Layered`]), so it can run on every core.
//!
//! **Exact.** A read transaction begun while the writer's group is open sees the last
//! commit, and the layer holds every hashed and trie change since: together they are what
//! the writer's transaction holds, so a root over them is the root over it, and the
//! branch nodes it returns are those a walk inside the transaction would store.
//!
//! **In parallel.** The storage tries of different accounts are independent walks. The
//! account trie is split under its root node: one walk per first nibble with changed keys,
//! each recomputing its child and taking every other child's hash from the root node as
//! stored; the root node is then assembled from the sixteen children's hashes. When the
//! split cannot hold (no stored root node, a child that is not a hashed branch before or
//! after), the account trie is walked whole, on one thread.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use alloy_primitives::map::B256Map;
use alloy_primitives::{keccak256, B256, U256};
use alloy_rlp::Encodable;
use alloy_trie::nodes::{BranchNode, RlpNode};
use alloy_trie::{BranchNodeCompact, Nibbles, TrieMask};
use gigas_mdbx::StoreError as _;
use gigas_primitives::AccountState;
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Environment, Ro, TransactionKind};

use crate::error::StateDbError;
use crate::read::Dbs;
use crate::trie::cache::{CachedSource, Found, OwnerNodes, StorageNodes, TrieCache};
use crate::trie::prefix::PrefixSet;
use crate::trie::root::RootOutcome;
use crate::trie::sparse::{Emitted, SparseAccounts};
use crate::trie::store::{AccountSource, ChangedKeys, StorageRoots, StorageSource, StoredRoots};
use crate::trie::walk::{self, TrieRun, TrieSource};

/// Branch nodes changed since the last commit, by path (`None`: removed).
pub(crate) type NodeLayer = BTreeMap<Nibbles, Option<BranchNodeCompact>>;

/// One account's storage changed since the last commit.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct StorageLayer {
    /// The committed slots and storage trie are gone (self-destruct): only what is here.
    pub(crate) wiped: bool,
    /// Hashed slot to value (zero: the slot is empty).
    pub(crate) slots: BTreeMap<B256, U256>,
    /// The storage trie's branch nodes.
    pub(crate) nodes: NodeLayer,
}

/// The hashed tables' and trie tables' changes of the open group.
#[derive(Debug, Default, Clone)]
pub(crate) struct TrieLayer {
    /// Hashed account to state (`None`: the account does not exist).
    pub(crate) accounts: BTreeMap<B256, Option<AccountState>>,
    /// The account trie's branch nodes.
    pub(crate) account_nodes: NodeLayer,
    pub(crate) storage: B256Map<StorageLayer>,
}

/// Heap bytes per layer entry, estimated: key and value with a B-tree's share of node
/// overhead (about half again), and for a branch node its hashes (about eight).
const ACCOUNT_ENTRY_BYTES: u64 = 170;
const SLOT_ENTRY_BYTES: u64 = 100;
const NODE_ENTRY_BYTES: u64 = 400;
const STORAGE_ENTRY_BYTES: u64 = 120;

impl TrieLayer {
    pub(crate) fn is_empty(&self) -> bool {
        self.accounts.is_empty() && self.account_nodes.is_empty() && self.storage.is_empty()
    }

    /// The memory it holds, estimated from its entry counts (a pass over the accounts with
    /// storage changes, none for plain transfers).
    pub(crate) fn approx_bytes(&self) -> u64 {
        let storage: u64 = self
            .storage
            .values()
            .map(|s| {
                STORAGE_ENTRY_BYTES
                    + s.slots.len() as u64 * SLOT_ENTRY_BYTES
                    + s.nodes.len() as u64 * NODE_ENTRY_BYTES
            })
            .sum();
        self.accounts.len() as u64 * ACCOUNT_ENTRY_BYTES
            + self.account_nodes.len() as u64 * NODE_ENTRY_BYTES
            + storage
    }

    /// Records a walk's nodes: the entered ones replaced by its updates or removed.
    fn record(nodes: &mut NodeLayer, run: TrieRun) {
        // Most entered nodes come back as updates: each path goes into the (large) map
        // once, not once as removed and again as updated.
        for path in run.removed {
            if run
                .updates
                .binary_search_by(|(updated, _)| updated.cmp(&path))
                .is_err()
            {
                nodes.insert(path, None);
            }
        }
        for (path, node) in run.updates {
            nodes.insert(path, Some(node));
        }
    }

    /// Lays `later` (the writes made after this layer was taken for a root running
    /// meanwhile) over this one: its values win, and a storage it wiped hides this one's
    /// slots and nodes of that account.
    pub(crate) fn absorb(&mut self, later: TrieLayer) {
        self.accounts.extend(later.accounts);
        self.account_nodes.extend(later.account_nodes);
        for (address, storage) in later.storage {
            if storage.wiped {
                self.storage.insert(address, storage);
            } else {
                let entry = self.storage.entry(address).or_default();
                entry.slots.extend(storage.slots);
                entry.nodes.extend(storage.nodes);
            }
        }
    }

    /// Drops what `committed` (a layer the last commit now holds) holds with the same
    /// value: a read of the commit finds it there. What was written again since with
    /// another value stays, and so does a wiped storage unless nothing was written under
    /// it since (its wipe hides the commit's slots).
    pub(crate) fn prune_committed(&mut self, committed: &TrieLayer) {
        for (h, state) in &committed.accounts {
            if self.accounts.get(h) == Some(state) {
                self.accounts.remove(h);
            }
        }
        prune_nodes(&mut self.account_nodes, &committed.account_nodes);
        for (h, done) in &committed.storage {
            let Some(mine) = self.storage.get_mut(h) else {
                continue;
            };
            if mine.wiped {
                if mine == done {
                    self.storage.remove(h);
                }
                continue;
            }
            for (slot, value) in &done.slots {
                if mine.slots.get(slot) == Some(value) {
                    mine.slots.remove(slot);
                }
            }
            prune_nodes(&mut mine.nodes, &done.nodes);
            if mine.slots.is_empty() && mine.nodes.is_empty() {
                self.storage.remove(h);
            }
        }
    }

    /// Takes in the nodes a root computed, and returns what it did.
    pub(crate) fn record_root(&mut self, root: LayeredRoot) -> (RootOutcome, bool) {
        for (address, run) in root.storage {
            Self::record(&mut self.storage.entry(address).or_default().nodes, run);
        }
        Self::record(&mut self.account_nodes, root.accounts);
        (root.outcome, root.split)
    }
}

/// Drops from `nodes` the entries `committed` holds with the same value.
fn prune_nodes(nodes: &mut NodeLayer, committed: &NodeLayer) {
    for (path, node) in committed {
        if nodes.get(path) == Some(node) {
            nodes.remove(path);
        }
    }
}

/// A source that can find the first stored node at or after a path, whatever its prefix.
pub(crate) trait NodesFrom: TrieSource {
    fn seek_node_from(&mut self, from: &Nibbles) -> Result<Found, StateDbError>;
}

/// The path right after `path` in path order (its first possible descendant).
fn successor(path: &Nibbles) -> Nibbles {
    let mut next = *path;
    next.push(0);
    next
}

/// A committed trie (`inner`) with the layer's nodes and leaves (values `V`) laid over it.
pub(crate) struct Layered<'l, S: TrieSource, V> {
    inner: S,
    nodes: &'l NodeLayer,
    leaves: &'l BTreeMap<B256, V>,
    /// A layer value as a leaf (`None`: no leaf there, an empty slot or a deleted account).
    leaf: fn(&V) -> Option<S::Leaf>,
    /// The committed trie is not there (a wiped storage trie).
    hidden: bool,
    /// The committed leaf the merge stands at, not yet returned.
    pending: Option<(B256, S::Leaf)>,
    /// The layer entry the merge stands at, not yet returned.
    next: Option<(B256, Option<S::Leaf>)>,
}

impl<'l, S: TrieSource, V> Layered<'l, S, V> {
    pub(crate) fn new(
        inner: S,
        nodes: &'l NodeLayer,
        leaves: &'l BTreeMap<B256, V>,
        leaf: fn(&V) -> Option<S::Leaf>,
        hidden: bool,
    ) -> Self {
        Self {
            inner,
            nodes,
            leaves,
            leaf,
            hidden,
            pending: None,
            next: None,
        }
    }

    fn into_inner(self) -> S {
        self.inner
    }

    fn layer_from(&self, from: Bound<B256>) -> Option<(B256, Option<S::Leaf>)> {
        self.leaves
            .range((from, Bound::Unbounded))
            .next()
            .map(|(k, v)| (*k, (self.leaf)(v)))
    }

    fn advance_inner(&mut self) -> Result<(), StateDbError> {
        self.pending = if self.hidden {
            None
        } else {
            self.inner.next_leaf()?
        };
        Ok(())
    }

    fn merged(&mut self) -> Result<Option<(B256, S::Leaf)>, StateDbError> {
        loop {
            let layer_first = match (&self.pending, &self.next) {
                (None, None) => return Ok(None),
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((key, _)), Some((l_key, _))) => l_key <= key,
            };
            if !layer_first {
                let leaf = self.pending.take();
                self.advance_inner()?;
                return Ok(leaf);
            }
            let Some((key, leaf)) = self.next.take() else {
                return Ok(None);
            };
            if self.pending.as_ref().is_some_and(|(k, _)| *k == key) {
                self.advance_inner()?;
            }
            self.next = self.layer_from(Bound::Excluded(key));
            if let Some(leaf) = leaf {
                return Ok(Some((key, leaf)));
            }
        }
    }
}

impl<S: NodesFrom, V> TrieSource for Layered<'_, S, V> {
    type Leaf = S::Leaf;

    fn seek_node(&mut self, path: &Nibbles) -> Result<Found, StateDbError> {
        let layer = self
            .nodes
            .range(*path..)
            .take_while(|(k, _)| k.starts_with(path))
            .find_map(|(k, node)| node.as_ref().map(|n| (*k, n.clone())));
        if self.hidden || layer.as_ref().is_some_and(|(k, _)| k == path) {
            return Ok(layer);
        }
        let mut from = *path;
        loop {
            let Some((found, node)) = self
                .inner
                .seek_node_from(&from)?
                .filter(|(k, _)| k.starts_with(path))
            else {
                return Ok(layer);
            };
            if layer.as_ref().is_some_and(|(k, _)| *k <= found) {
                return Ok(layer);
            }
            // A committed node the layer names is one it removed (one it replaced would
            // sort at or before `found` in `layer`): look past it.
            if self.nodes.contains_key(&found) {
                from = successor(&found);
                continue;
            }
            return Ok(Some((found, node)));
        }
    }

    fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, S::Leaf)>, StateDbError> {
        self.pending = if self.hidden {
            None
        } else {
            self.inner.seek_leaf(key)?
        };
        self.next = self.layer_from(Bound::Included(*key));
        self.merged()
    }

    fn next_leaf(&mut self) -> Result<Option<(B256, S::Leaf)>, StateDbError> {
        self.merged()
    }

    fn leaf_value(
        &mut self,
        key: &B256,
        leaf: &S::Leaf,
        out: &mut Vec<u8>,
    ) -> Result<(), StateDbError> {
        self.inner.leaf_value(key, leaf, out)
    }
}

/// A layer's account value as a leaf.
pub(crate) fn account_leaf(state: &Option<AccountState>) -> Option<AccountState> {
    *state
}

/// A layer's slot value as a leaf (zero: no leaf).
pub(crate) fn slot_leaf(value: &U256) -> Option<U256> {
    (!value.is_zero()).then_some(*value)
}

/// Storage roots for the account walk: those computed by this root (`known`), else over
/// the layer for an account whose storage the group changed, else from the committed trie.
struct LayeredRoots<'a, 'tx, K: TransactionKind> {
    dbs: Dbs,
    txn: &'tx Tx<K>,
    layer: &'a TrieLayer,
    cache: Option<&'a Mutex<StorageNodes>>,
    committed: StoredRoots<'a, 'tx, K, crate::trie::store::Discard>,
    computed: u64,
    leaves: u64,
}

/// The account trie's leaves and stored nodes: the last commit with the layer over it,
/// each leaf's storage root from `known`, else as [`LayeredRoots`] finds it (its storage
/// nodes through `cache`).
type AccountsOverLayer<'a, 'tx, K> =
    Layered<'a, AccountSource<'tx, K, LayeredRoots<'a, 'tx, K>>, Option<AccountState>>;

fn accounts_over_layer<'a, 'tx, K: TransactionKind>(
    dbs: &Dbs,
    txn: &'tx Tx<K>,
    layer: &'a TrieLayer,
    known: &'a B256Map<B256>,
    cache: Option<&'a Mutex<StorageNodes>>,
) -> Result<AccountsOverLayer<'a, 'tx, K>, StateDbError> {
    let roots = LayeredRoots {
        dbs: *dbs,
        txn,
        layer,
        cache,
        committed: StoredRoots::new(dbs, txn, known, true, crate::trie::store::Discard)?
            .cached(cache),
        computed: 0,
        leaves: 0,
    };
    Ok(Layered::new(
        AccountSource::new(dbs, txn, true, roots)?,
        &layer.account_nodes,
        &layer.accounts,
        account_leaf,
        false,
    ))
}

impl<K: TransactionKind> LayeredRoots<'_, '_, K> {
    /// Storage tries computed for leaves, and the leaves they hashed.
    fn counts(&self) -> (u64, u64) {
        (
            self.computed + self.committed.computed,
            self.leaves + self.committed.leaves,
        )
    }
}

impl<K: TransactionKind> StorageRoots for LayeredRoots<'_, '_, K> {
    fn storage_root(&mut self, address: &B256) -> Result<B256, StateDbError> {
        if let Some(root) = self.committed.known(address) {
            return Ok(root);
        }
        let Some(storage) = self.layer.storage.get(address) else {
            return self.committed.storage_root(address);
        };
        let cache = self.cache.map(|storage| OwnerNodes {
            storage,
            owner: *address,
        });
        let run = storage_walk(
            &self.dbs,
            self.txn,
            address,
            storage,
            &PrefixSet::default(),
            false,
            cache,
        )?;
        self.computed += 1;
        self.leaves += run.leaves;
        Ok(run.root)
    }
}

/// Walks one account's storage trie over the layer, its node seeks through `cache`.
fn storage_walk<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    address: &B256,
    storage: &StorageLayer,
    changed: &PrefixSet,
    updates: bool,
    cache: Option<OwnerNodes<'_>>,
) -> Result<TrieRun, StateDbError> {
    let layered = Layered::new(
        StorageSource::new(dbs, txn, *address, true)?,
        &storage.nodes,
        &storage.slots,
        slot_leaf,
        storage.wiped,
    );
    let mut source = CachedSource::new(layered, cache);
    if updates {
        walk::run_updates(&mut source, changed)
    } else {
        walk::run(&mut source, changed, Vec::new(), false)
    }
}

/// The account trie, over the layer, with storage roots from `known` or found as needed,
/// its node seeks through `cache`.
fn account_walk<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    layer: &TrieLayer,
    known: &B256Map<B256>,
    changed: &PrefixSet,
    cache: Option<&TrieCache>,
) -> Result<(TrieRun, u64, u64), StateDbError> {
    let layered = accounts_over_layer(dbs, txn, layer, known, cache.map(|c| &c.storage))?;
    let mut source = CachedSource::new(layered, cache.map(|c| &c.accounts));
    let run = walk::run_updates(&mut source, changed)?;
    let (computed, leaves) = source.into_inner().into_inner().roots.counts();
    Ok((run, computed, leaves))
}

/// What a layered root computed: the root, and the nodes to take into the layer.
#[derive(Debug, Default)]
pub(crate) struct LayeredRoot {
    pub(crate) outcome: RootOutcome,
    /// Each changed storage trie's walk, by account.
    pub(crate) storage: Vec<(B256, TrieRun)>,
    /// The account trie's walk (its root, updates and removed nodes).
    pub(crate) accounts: TrieRun,
    /// The account trie was split under its root node and walked on several threads.
    pub(crate) split: bool,
}

impl LayeredRoot {
    /// Tells the cache the nodes this root changes (before they go into the layer), with
    /// the leaf hashes the walks knew.
    pub(crate) fn update_cache(&self, cache: &TrieCache) {
        for (address, run) in &self.storage {
            cache.walked(Some(address), run);
        }
        cache.walked(None, &self.accounts);
    }
}

/// How a layered root spreads its work.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parallelism {
    /// Threads, the caller's included.
    pub(crate) threads: usize,
    /// Fewest changed accounts for which the account trie is split.
    pub(crate) min_split_accounts: usize,
}

/// One piece of a root, given a read transaction at the last commit and its index.
type Job<'a, T> = dyn Fn(&Tx<Ro>, usize) -> Result<T, StateDbError> + Sync + 'a;

/// Runs `job(i)` for `i in 0..jobs` on `threads` threads (the caller's one of them), each
/// thread with one read transaction of its own, and returns the results in job order.
fn run_jobs<T: Send>(
    env: &Environment,
    jobs: usize,
    threads: usize,
    job: &Job<'_, T>,
) -> Result<Vec<T>, StateDbError> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..jobs).map(|_| None).collect());
    let work = || -> Result<(), StateDbError> {
        if next.load(Ordering::Relaxed) >= jobs {
            return Ok(());
        }
        let txn = env
            .begin_ro_unsync()
            .map_err(StateDbError::mdbx("begin a read transaction for a root"))?;
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= jobs {
                return Ok(());
            }
            let out = job(&txn, i)?;
            if let Ok(mut results) = results.lock() {
                results[i] = Some(out);
            }
        }
    };
    let threads = threads.clamp(1, jobs.max(1));
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut outcome = work();
        for helper in helpers {
            let joined = helper
                .join()
                .unwrap_or_else(|_| Err(StateDbError::RootThreadPanicked));
            outcome = outcome.and(joined);
        }
        outcome
    })?;
    let results = results
        .into_inner()
        .map_err(|_| StateDbError::RootThreadPanicked)?;
    results
        .into_iter()
        .map(|r| {
            // Every job ran, or the first error returned above.
            r.ok_or(StateDbError::RootThreadPanicked)
        })
        .collect()
}

/// The root of the last commit with `layer` over it, recomputing what `changed` names,
/// its node seeks through `cache` when given (which must describe the last commit with
/// `layer` over it; [`LayeredRoot::update_cache`] keeps it so).
pub(crate) fn layered_root(
    env: &Environment,
    dbs: &Dbs,
    layer: &TrieLayer,
    changed: ChangedKeys,
    parallelism: Parallelism,
    cache: Option<&TrieCache>,
    sparse: Option<&SparseAccounts>,
) -> Result<LayeredRoot, StateDbError> {
    let mut out = LayeredRoot::default();
    let mut storage: Vec<(B256, PrefixSet)> = changed
        .storage
        .into_iter()
        .map(|(address, slots)| (address, PrefixSet::new(slots)))
        .collect();
    storage.sort_unstable_by_key(|(a, _)| *a);
    let no_storage = StorageLayer::default();
    let runs = run_jobs(env, storage.len(), parallelism.threads, &|txn, i| {
        let (address, slots) = &storage[i];
        let layered = layer.storage.get(address).unwrap_or(&no_storage);
        let owner = cache.map(|c| OwnerNodes {
            storage: &c.storage,
            owner: *address,
        });
        storage_walk(dbs, txn, address, layered, slots, true, owner)
    })?;
    let mut known = B256Map::default();
    let mut accounts: Vec<B256> = changed.accounts.into_iter().collect();
    for ((address, _), run) in storage.iter().zip(runs) {
        out.outcome.storage_tries += 1;
        out.outcome.leaves += run.leaves;
        out.outcome.skipped += run.skipped;
        out.outcome.remembered += run.remembered;
        out.outcome.rereads += u64::from(run.reread);
        known.insert(*address, run.root);
        accounts.push(*address);
        out.storage.push((*address, run));
    }
    let set = PrefixSet::new(accounts);
    out.outcome.changed_accounts = set.len() as u64;
    let in_memory = match sparse.filter(|s| s.enabled()) {
        Some(sparse) => {
            match sparse_account_root(env, dbs, layer, &known, &set, parallelism, sparse) {
                Ok(done) => Some(done),
                Err(e) => {
                    // A failed root leaves the parts half changed (and the group is
                    // discarded).
                    sparse.clear();
                    return Err(e);
                }
            }
        }
        None => None,
    };
    // Through the trie in memory, the account trie is split when its parts run on several
    // threads.
    let (split, parallel) = match in_memory {
        Some(done) => (Some(done), parallelism.threads > 1),
        None if parallelism.threads > 1 && set.len() >= parallelism.min_split_accounts => {
            let done =
                split_account_walk(env, dbs, layer, &known, &set, parallelism.threads, cache)?;
            let parallel = done.is_some();
            (done, parallel)
        }
        None => (None, false),
    };
    let (run, computed, leaves) = match split {
        Some(done) => {
            out.split = parallel;
            done
        }
        None => {
            let txn = env
                .begin_ro_unsync()
                .map_err(StateDbError::mdbx("begin a read transaction for a root"))?;
            account_walk(dbs, &txn, layer, &known, &set, cache)?
        }
    };
    out.outcome.root = run.root;
    out.outcome.storage_tries += computed;
    out.outcome.leaves += run.leaves + leaves;
    out.outcome.skipped += run.skipped;
    out.outcome.remembered += run.remembered;
    out.outcome.rereads += u64::from(run.reread);
    out.accounts = run;
    Ok(out)
}

/// The account trie's root through the trie held in memory: each first nibble's changed
/// keys set in its part on one of the threads (loading what their paths enter from the last
/// commit with the layer over it), the part re-hashed there, and the root node assembled
/// from the parts' tops (or, when fewer than two first nibbles hold keys, the one part's top
/// lifted).
fn sparse_account_root(
    env: &Environment,
    dbs: &Dbs,
    layer: &TrieLayer,
    known: &B256Map<B256>,
    set: &PrefixSet,
    parallelism: Parallelism,
    sparse: &SparseAccounts,
) -> Result<(TrieRun, u64, u64), StateDbError> {
    if !sparse.ready() {
        let txn = env
            .begin_ro_unsync()
            .map_err(StateDbError::mdbx("begin a read transaction for a root"))?;
        sparse.set_up(root_node(dbs, &txn, layer)?.as_ref())?;
    }
    let now = sparse.next_root();
    let mut keys: Vec<Vec<B256>> = vec![Vec::new(); 16];
    for key in set.keys() {
        keys[usize::from(key[0] >> 4)].push(*key);
    }
    let mut jobs = Vec::new();
    for n in 0..16u8 {
        if !keys[usize::from(n)].is_empty() || sparse.part(n)?.top_unknown() {
            jobs.push(n);
        }
    }
    let done = run_jobs(env, jobs.len(), parallelism.threads, &|txn, i| {
        let nibble = jobs[i];
        let mut source = accounts_over_layer(dbs, txn, layer, known, None)?;
        let mut part = sparse.part(nibble)?;
        part.begin_at(now);
        let mut emitted = Emitted::default();
        part.ensure_top(&mut source, &mut emitted)?;
        let mut value = Vec::with_capacity(128);
        for key in &keys[usize::from(nibble)] {
            let state = match layer.accounts.get(key) {
                Some(state) => *state,
                // Only its storage changed: its state as committed.
                None => source
                    .seek_leaf(key)?
                    .filter(|(found, _)| found == key)
                    .map(|(_, state)| state),
            };
            let leaf = match state {
                Some(state) => {
                    value.clear();
                    source.leaf_value(key, &state, &mut value)?;
                    Some(value.clone())
                }
                None => None,
            };
            part.set(&Nibbles::unpack(key), leaf, &mut source, &mut emitted)?;
        }
        part.hash(&mut emitted)?;
        drop(part);
        let (computed, leaves) = source.into_inner().roots.counts();
        Ok((emitted, computed, leaves))
    })?;
    let (root, node) = sparse.assemble()?;
    // The branch nodes stay in the parts until the writer drains them (at the commit, an
    // idle write, or before a root that reads the stored trie through the layer): a node
    // changed by every root of a group is stored once, not put into the layer every time.
    let mut run = TrieRun {
        root,
        ..TrieRun::default()
    };
    let (mut computed, mut leaves) = (0, 0);
    for (emitted, c, l) in done {
        computed += c;
        leaves += l;
        run.leaves += emitted.leaves_read;
    }
    if !set.is_empty() {
        sparse.set_root_node(node)?;
    }
    sparse.loaded(run.leaves);
    sparse.enforce_budget()?;
    Ok((run, computed, leaves))
}

/// The account trie's root node as the layer has it, else as committed.
fn root_node<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    layer: &TrieLayer,
) -> Result<Option<BranchNodeCompact>, StateDbError> {
    match layer.account_nodes.get(&Nibbles::new()) {
        Some(node) => Ok(node.clone()),
        None => crate::trie::store::stored_account_root(dbs, txn),
    }
}

/// One child of the root node, recomputed by its own walk.
struct Child {
    nibble: u8,
    run: TrieRun,
    computed: u64,
    leaves: u64,
    /// Stored nodes lie below it.
    below: bool,
    hash: B256,
}

/// The account walk split under the root node (see the module doc), or `None` when the
/// split cannot hold and the whole trie must be walked instead.
fn split_account_walk(
    env: &Environment,
    dbs: &Dbs,
    layer: &TrieLayer,
    known: &B256Map<B256>,
    set: &PrefixSet,
    threads: usize,
    cache: Option<&TrieCache>,
) -> Result<Option<(TrieRun, u64, u64)>, StateDbError> {
    let old = {
        let txn = env
            .begin_ro_unsync()
            .map_err(StateDbError::mdbx("begin a read transaction for a root"))?;
        root_node(dbs, &txn, layer)?
    };
    let Some(old) = old else {
        return Ok(None);
    };
    // Every child a hashed branch: each can be recomputed alone and given back as a hash.
    if old.state_mask != old.hash_mask {
        return Ok(None);
    }
    let parts = set.split_by_first_nibble();
    let children = run_jobs(env, parts.len(), threads, &|txn, i| {
        let (nibble, keys) = &parts[i];
        let (run, computed, leaves) = account_walk(dbs, txn, layer, known, keys, cache)?;
        let top = run
            .updates
            .first()
            .filter(|(path, _)| path.is_empty())
            .map(|(_, node)| node);
        let bit = |mask: TrieMask| mask.is_bit_set(*nibble);
        let Some((below, hash)) = top
            .filter(|top| bit(top.state_mask) && bit(top.hash_mask))
            .map(|top| (bit(top.tree_mask), top.hash_for_nibble(*nibble)))
        else {
            return Ok(None);
        };
        Ok(Some(Child {
            nibble: *nibble,
            below,
            hash,
            run,
            computed,
            leaves,
        }))
    })?;
    let Some(children) = children.into_iter().collect::<Option<Vec<Child>>>() else {
        return Ok(None);
    };
    let mut hashes: [Option<B256>; 16] = [None; 16];
    let mut tree = old.tree_mask.get();
    for n in 0..16u8 {
        if old.state_mask.is_bit_set(n) {
            hashes[usize::from(n)] = Some(old.hash_for_nibble(n));
        }
    }
    let mut run = TrieRun::default();
    let (mut computed, mut leaves) = (0, 0);
    let mut state = old.state_mask.get();
    for child in children {
        hashes[usize::from(child.nibble)] = Some(child.hash);
        let bit = 1u16 << child.nibble;
        // A child the old root did not have (the first keys under a nibble).
        state |= bit;
        tree = if child.below { tree | bit } else { tree & !bit };
        computed += child.computed;
        leaves += child.leaves;
        run.leaves += child.run.leaves;
        run.skipped += child.run.skipped;
        run.remembered += child.run.remembered;
        run.reread |= child.run.reread;
        // The root node's own leaf hashes: it has none (every child is a branch).
        run.leaf_hashes.extend(
            child
                .run
                .leaf_hashes
                .into_iter()
                .filter(|(path, _)| !path.is_empty()),
        );
        run.updates.extend(
            child
                .run
                .updates
                .into_iter()
                .filter(|(path, _)| !path.is_empty()),
        );
        run.removed.extend(
            child
                .run
                .removed
                .into_iter()
                .filter(|path| !path.is_empty()),
        );
    }
    let state = TrieMask::new(state);
    let present: Vec<B256> = hashes.iter().flatten().copied().collect();
    let stack: Vec<RlpNode> = present.iter().map(RlpNode::word_rlp).collect();
    let mut rlp = Vec::with_capacity(3 + 33 * 16 + 1);
    BranchNode::new(stack, state).encode(&mut rlp);
    let root = keccak256(&rlp);
    let top = BranchNodeCompact::new(state, TrieMask::new(tree), state, present, Some(root));
    run.root = root;
    run.updates.push((Nibbles::new(), top));
    run.updates.sort_unstable_by_key(|(path, _)| *path);
    run.removed.push(Nibbles::new());
    run.removed.sort_unstable();
    run.leaf_hashes.sort_unstable_by_key(|(path, _)| *path);
    Ok(Some((run, computed, leaves)))
}

#[cfg(test)]
mod tests {
    //! The merge of a committed trie with a layer, against the merged maps it stands for.

    use super::*;

    /// A committed trie in memory: nodes and leaves in sorted maps.
    #[derive(Default)]
    struct Committed {
        nodes: BTreeMap<Nibbles, BranchNodeCompact>,
        leaves: BTreeMap<B256, U256>,
        at: Option<B256>,
    }

    impl TrieSource for Committed {
        type Leaf = U256;

        fn seek_node(&mut self, path: &Nibbles) -> Result<Found, StateDbError> {
            Ok(self
                .seek_node_from(path)?
                .filter(|(k, _)| k.starts_with(path)))
        }

        fn seek_leaf(&mut self, key: &B256) -> Result<Option<(B256, U256)>, StateDbError> {
            let found = self.leaves.range(*key..).next().map(|(k, v)| (*k, *v));
            self.at = found.map(|(k, _)| k);
            Ok(found)
        }

        fn next_leaf(&mut self) -> Result<Option<(B256, U256)>, StateDbError> {
            let Some(at) = self.at else { return Ok(None) };
            let found = self
                .leaves
                .range((Bound::Excluded(at), Bound::Unbounded))
                .next()
                .map(|(k, v)| (*k, *v));
            self.at = found.map(|(k, _)| k);
            Ok(found)
        }

        fn leaf_value(&mut self, _: &B256, _: &U256, _: &mut Vec<u8>) -> Result<(), StateDbError> {
            Ok(())
        }
    }

    impl NodesFrom for Committed {
        fn seek_node_from(&mut self, from: &Nibbles) -> Result<Found, StateDbError> {
            Ok(self
                .nodes
                .range(*from..)
                .next()
                .map(|(k, n)| (*k, n.clone())))
        }
    }

    /// A node told apart by its root hash.
    fn node(tag: u8) -> BranchNodeCompact {
        BranchNodeCompact::new(
            TrieMask::new(0b11),
            TrieMask::new(0),
            TrieMask::new(0),
            vec![],
            Some(B256::repeat_byte(tag)),
        )
    }

    fn path(nibbles: &[u8]) -> Nibbles {
        Nibbles::from_nibbles(nibbles)
    }

    fn key(first: u8) -> B256 {
        B256::repeat_byte(first)
    }

    /// Every path the committed nodes and the layer name, with their prefixes.
    fn probes(committed: &Committed, layer: &NodeLayer) -> Vec<Nibbles> {
        let mut out = vec![Nibbles::new()];
        for p in committed.nodes.keys().chain(layer.keys()) {
            for len in 0..=p.len() {
                out.push(p.slice(..len));
            }
            out.push(successor(p));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    #[test]
    fn node_seeks_equal_the_merged_tables() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..300 {
            let mut committed = Committed::default();
            let mut layer = NodeLayer::new();
            let random_path = |next: &mut dyn FnMut() -> u64| {
                let len = (next() % 4) as usize;
                let nibbles: Vec<u8> = (0..len).map(|_| (next() % 3) as u8).collect();
                path(&nibbles)
            };
            for i in 0..(next() % 8) {
                committed
                    .nodes
                    .insert(random_path(&mut next), node(i as u8));
            }
            for i in 0..(next() % 8) {
                let value = (next() % 2 == 0).then(|| node(100 + i as u8));
                layer.insert(random_path(&mut next), value);
            }
            // What the writer's transaction would hold after the layer's writes.
            let mut merged = committed.nodes.clone();
            for (p, n) in &layer {
                match n {
                    Some(n) => merged.insert(*p, n.clone()),
                    None => merged.remove(p),
                };
            }
            let hidden = round % 10 == 0;
            if hidden {
                merged = layer
                    .iter()
                    .filter_map(|(p, n)| n.clone().map(|n| (*p, n)))
                    .collect();
            }
            let probes = probes(&committed, &layer);
            let leaves = BTreeMap::new();
            let mut source = Layered::new(committed, &layer, &leaves, slot_leaf, hidden);
            for probe in probes {
                let expected = merged
                    .range(probe..)
                    .next()
                    .filter(|(k, _)| k.starts_with(&probe))
                    .map(|(k, n)| (*k, n.clone()));
                assert_eq!(
                    source.seek_node(&probe).unwrap(),
                    expected,
                    "round {round}, seek under {probe:?}, layer {layer:?}"
                );
            }
        }
    }

    #[test]
    fn leaves_merge_in_key_order_with_replacements_and_removals() {
        let mut committed = Committed::default();
        for k in [1u8, 3, 5, 7] {
            committed.leaves.insert(key(k), U256::from(k));
        }
        // 2 added, 3 replaced, 5 emptied (removed), 9 added past the committed end.
        let layer: BTreeMap<B256, U256> = [(2u8, 20u64), (3, 30), (5, 0), (9, 90)]
            .into_iter()
            .map(|(k, v)| (key(k), U256::from(v)))
            .collect();
        let nodes = NodeLayer::new();
        let all = |source: &mut Layered<'_, Committed, U256>, from: u8| {
            let mut out = Vec::new();
            let mut leaf = source.seek_leaf(&key(from)).unwrap();
            while let Some((k, v)) = leaf {
                out.push((k[0], v.to::<u64>()));
                leaf = source.next_leaf().unwrap();
            }
            out
        };
        let mut source = Layered::new(committed, &nodes, &layer, slot_leaf, false);
        assert_eq!(
            all(&mut source, 0),
            [(1, 1), (2, 20), (3, 30), (7, 7), (9, 90)]
        );
        assert_eq!(all(&mut source, 3), [(3, 30), (7, 7), (9, 90)]);
        assert_eq!(all(&mut source, 4), [(7, 7), (9, 90)]);
        assert_eq!(all(&mut source, 8), [(9, 90)]);
        let committed = source.into_inner();
        let mut wiped = Layered::new(committed, &nodes, &layer, slot_leaf, true);
        assert_eq!(all(&mut wiped, 0), [(2, 20), (3, 30), (9, 90)]);
    }
}
