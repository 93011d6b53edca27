//! The parallel layered root: storage tries walked on several threads, and the account trie
//! split under its root node (or set in the trie held in memory) across them.
//!
//! **In parallel.** The storage tries of different accounts are independent walks. The
//! account trie is split under its root node: one walk per first nibble with changed keys,
//! each recomputing its child and taking every other child's hash from the root node as
//! stored; the root node is then assembled from the sixteen children's hashes. When the
//! split cannot hold (no stored root node, a child that is not a hashed branch before or
//! after), the account trie is walked whole, on one thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use alloy_primitives::map::B256Map;
use alloy_primitives::{keccak256, B256};
use alloy_rlp::Encodable;
use alloy_trie::nodes::{BranchNode, RlpNode};
use alloy_trie::{BranchNodeCompact, Nibbles, TrieMask};
use gigas_mdbx::StoreError as _;
use gigas_primitives::AccountState;
use signet_libmdbx::tx::Tx;
use signet_libmdbx::{Environment, Ro, TransactionKind};

use super::{account_leaf, slot_leaf, Layered, StorageLayer, TrieLayer};
use crate::cache::{CachedSource, OwnerNodes, StorageNodes, TrieCache};
use crate::error::TrieDbError;
use crate::root::RootOutcome;
use crate::store::{AccountSource, ChangedKeys, StorageRoots, StorageSource, StoredRoots};
use crate::tables::TrieDbs;
use gigas_trie::sparse::{Emitted, SparseAccounts};
use gigas_trie::walk::{self, TrieRun, TrieSource};
use gigas_trie::PrefixSet;

/// Storage roots for the account walk: those computed by this root (`known`), else over
/// the layer for an account whose storage the group changed, else from the committed trie.
struct LayeredRoots<'a, 'tx, K: TransactionKind> {
    dbs: TrieDbs,
    txn: &'tx Tx<K>,
    layer: &'a TrieLayer,
    cache: Option<&'a Mutex<StorageNodes>>,
    committed: StoredRoots<'a, 'tx, K, crate::store::Discard>,
    computed: u64,
    leaves: u64,
}

/// The account trie's leaves and stored nodes: the last commit with the layer over it,
/// each leaf's storage root from `known`, else as [`LayeredRoots`] finds it (its storage
/// nodes through `cache`).
type AccountsOverLayer<'a, 'tx, K> =
    Layered<'a, AccountSource<'tx, K, LayeredRoots<'a, 'tx, K>>, Option<AccountState>>;

fn accounts_over_layer<'a, 'tx, K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &'tx Tx<K>,
    layer: &'a TrieLayer,
    known: &'a B256Map<B256>,
    cache: Option<&'a Mutex<StorageNodes>>,
) -> Result<AccountsOverLayer<'a, 'tx, K>, TrieDbError> {
    let roots = LayeredRoots {
        dbs: *dbs,
        txn,
        layer,
        cache,
        committed: StoredRoots::new(dbs, txn, known, true, crate::store::Discard)?.cached(cache),
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
    fn storage_root(&mut self, address: &B256) -> Result<B256, TrieDbError> {
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
    dbs: &TrieDbs,
    txn: &Tx<K>,
    address: &B256,
    storage: &StorageLayer,
    changed: &PrefixSet,
    updates: bool,
    cache: Option<OwnerNodes<'_>>,
) -> Result<TrieRun, TrieDbError> {
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
    dbs: &TrieDbs,
    txn: &Tx<K>,
    layer: &TrieLayer,
    known: &B256Map<B256>,
    changed: &PrefixSet,
    cache: Option<&TrieCache>,
) -> Result<(TrieRun, u64, u64), TrieDbError> {
    let layered = accounts_over_layer(dbs, txn, layer, known, cache.map(|c| &c.storage))?;
    let mut source = CachedSource::new(layered, cache.map(|c| &c.accounts));
    let run = walk::run_updates(&mut source, changed)?;
    let (computed, leaves) = source.into_inner().into_inner().roots.counts();
    Ok((run, computed, leaves))
}

/// What a layered root computed: the root, and the nodes to take into the layer.
#[derive(Debug, Default)]
pub struct LayeredRoot {
    /// The root and what computing it cost.
    pub outcome: RootOutcome,
    /// Each changed storage trie's walk, by account.
    pub storage: Vec<(B256, TrieRun)>,
    /// The account trie's walk (its root, updates and removed nodes).
    pub accounts: TrieRun,
    /// The account trie was split under its root node and walked on several threads.
    pub split: bool,
}

impl LayeredRoot {
    /// Tells the cache the nodes this root changes (before they go into the layer), with
    /// the leaf hashes the walks knew.
    pub fn update_cache(&self, cache: &TrieCache) {
        for (address, run) in &self.storage {
            cache.walked(Some(address), run);
        }
        cache.walked(None, &self.accounts);
    }
}

/// How a layered root spreads its work.
#[derive(Debug, Clone, Copy)]
pub struct Parallelism {
    /// Threads, the caller's included.
    pub threads: usize,
    /// Fewest changed accounts for which the account trie is split.
    pub min_split_accounts: usize,
}

/// One piece of a root, given a read transaction at the last commit and its index.
type Job<'a, T> = dyn Fn(&Tx<Ro>, usize) -> Result<T, TrieDbError> + Sync + 'a;

/// Runs `job(i)` for `i in 0..jobs` on `threads` threads (the caller's one of them), each
/// thread with one read transaction of its own, and returns the results in job order.
fn run_jobs<T: Send>(
    env: &Environment,
    jobs: usize,
    threads: usize,
    job: &Job<'_, T>,
) -> Result<Vec<T>, TrieDbError> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..jobs).map(|_| None).collect());
    let work = || -> Result<(), TrieDbError> {
        if next.load(Ordering::Relaxed) >= jobs {
            return Ok(());
        }
        let txn = env
            .begin_ro_unsync()
            .map_err(TrieDbError::mdbx("begin a read transaction for a root"))?;
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
                .unwrap_or(Err(TrieDbError::RootThreadPanicked));
            outcome = outcome.and(joined);
        }
        outcome
    })?;
    let results = results
        .into_inner()
        .map_err(|_| TrieDbError::RootThreadPanicked)?;
    results
        .into_iter()
        .map(|r| {
            // Every job ran, or the first error returned above.
            r.ok_or(TrieDbError::RootThreadPanicked)
        })
        .collect()
}

/// The root of the last commit with `layer` over it, recomputing what `changed` names,
/// its node seeks through `cache` when given (which must describe the last commit with
/// `layer` over it; [`LayeredRoot::update_cache`] keeps it so).
pub fn layered_root(
    env: &Environment,
    dbs: &TrieDbs,
    layer: &TrieLayer,
    changed: ChangedKeys,
    parallelism: Parallelism,
    cache: Option<&TrieCache>,
    sparse: Option<&SparseAccounts>,
) -> Result<LayeredRoot, TrieDbError> {
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
                .map_err(TrieDbError::mdbx("begin a read transaction for a root"))?;
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
    dbs: &TrieDbs,
    layer: &TrieLayer,
    known: &B256Map<B256>,
    set: &PrefixSet,
    parallelism: Parallelism,
    sparse: &SparseAccounts,
) -> Result<(TrieRun, u64, u64), TrieDbError> {
    if !sparse.ready() {
        let txn = env
            .begin_ro_unsync()
            .map_err(TrieDbError::mdbx("begin a read transaction for a root"))?;
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

/// Loads the stored branch nodes of the account trie into `sparse` ahead of any root
/// ([`gigas_trie::sparse::SparseTrie::preload`]), each of its sixteen parts a job on
/// `parallelism`'s threads, until the parts hold `max_bytes` together. The trie must
/// describe the last commit with `layer` over it and no root may be running (its parts are
/// locked one at a time, as a root's jobs lock them). Returns the leaves read.
pub fn preload_sparse_accounts(
    env: &Environment,
    dbs: &TrieDbs,
    layer: &TrieLayer,
    parallelism: Parallelism,
    sparse: &SparseAccounts,
    max_bytes: usize,
) -> Result<u64, TrieDbError> {
    if !sparse.ready() {
        let txn = env.begin_ro_unsync().map_err(TrieDbError::mdbx(
            "begin a read transaction to load the trie",
        ))?;
        sparse.set_up(root_node(dbs, &txn, layer)?.as_ref())?;
    }
    // No storage root is known ahead: an account whose storage the layer changed gets its
    // root walked over the layer, any other the committed one (the writer loads only
    // between groups, when the layer holds no change).
    let known = B256Map::default();
    let per_part = max_bytes / 16;
    let done = run_jobs(env, 16, parallelism.threads, &|txn, i| {
        let mut source = accounts_over_layer(dbs, txn, layer, &known, None)?;
        let mut part = sparse.part(i as u8)?;
        let mut emitted = Emitted::default();
        part.preload(&mut source, &mut emitted, per_part)?;
        Ok(emitted.leaves_read)
    })?;
    let leaves: u64 = done.iter().sum();
    sparse.loaded(leaves);
    sparse.enforce_budget()?;
    Ok(leaves)
}

/// The account trie's root node as the layer has it, else as committed.
fn root_node<K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &Tx<K>,
    layer: &TrieLayer,
) -> Result<Option<BranchNodeCompact>, TrieDbError> {
    match layer.account_nodes.get(&Nibbles::new()) {
        Some(node) => Ok(node.clone()),
        None => crate::store::stored_account_root(dbs, txn),
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
    dbs: &TrieDbs,
    layer: &TrieLayer,
    known: &B256Map<B256>,
    set: &PrefixSet,
    threads: usize,
    cache: Option<&TrieCache>,
) -> Result<Option<(TrieRun, u64, u64)>, TrieDbError> {
    let old = {
        let txn = env
            .begin_ro_unsync()
            .map_err(TrieDbError::mdbx("begin a read transaction for a root"))?;
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
