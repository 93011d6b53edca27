//! The entry points of the trie over MDBX: the incremental root inside the write
//! transaction, the rebuild, the root from scratch (a check), and proofs. The sources and
//! the node writes they use are in [`crate::store`]; roots over the open group held in
//! memory are in [`crate::layer`].

use alloy_primitives::map::B256Map;
use alloy_primitives::{Bytes, B256};
use alloy_trie::{BranchNodeCompact, Nibbles};
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::tx::Tx;
use signet_libmdbx::TransactionKind;

use crate::cache::{CachedSource, OwnerNodes, TrieCache};
use crate::error::TrieDbError;
use crate::layer::{account_leaf, slot_leaf, Layered, StorageLayer, TrieLayer};
use crate::store::{
    clear, put_account_nodes, write_account_trie, write_storage_trie, AccountSource, ChangedKeys,
    Discard, StorageSource, StoredRoots, WriteTo,
};
use crate::tables::TrieDbs;
use crate::tables::TrieTable;
use gigas_trie::walk;
use gigas_trie::PrefixSet;

/// What a root computation did.
#[derive(Debug, Clone, Copy, Default)]
pub struct RootOutcome {
    /// The state root.
    pub root: B256,
    /// Accounts whose leaf the walk recomputed.
    pub changed_accounts: u64,
    /// Storage tries it walked.
    pub storage_tries: u64,
    /// Leaves it read.
    pub leaves: u64,
    /// Subtries it took from their stored hash without descending.
    pub skipped: u64,
    /// Leaves taken from their remembered hash.
    pub remembered: u64,
    /// Walks done again without remembered hashes.
    pub rereads: u64,
}

/// The incremental root: recomputes the storage tries and account leaves `changed` names,
/// stores the new nodes, and empties the changed-key tables (whose contents `changed` must
/// already hold). Stored nodes are sought through `cache` (which must describe the
/// transaction's nodes, and is kept so) unless it is off.
pub fn update_root(
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    changed: ChangedKeys,
    cache: &TrieCache,
) -> Result<RootOutcome, TrieDbError> {
    let mut out = RootOutcome::default();
    let mut storage: Vec<(B256, Vec<B256>)> = changed.storage.into_iter().collect();
    storage.sort_unstable_by_key(|(a, _)| *a);
    let mut known = B256Map::default();
    let mut accounts: Vec<B256> = changed.accounts.into_iter().collect();
    for (address, slots) in storage {
        let run = {
            let owner = cache.storage_nodes().map(|storage| OwnerNodes {
                storage,
                owner: address,
            });
            let mut source = CachedSource::new(StorageSource::new(dbs, txn, address, true)?, owner);
            walk::run_updates(&mut source, &PrefixSet::new(slots))?
        };
        out.remembered += run.remembered;
        out.rereads += u64::from(run.reread);
        write_storage_trie(dbs, txn, &address, &run)?;
        cache.walked(Some(&address), &run);
        out.storage_tries += 1;
        out.leaves += run.leaves;
        out.skipped += run.skipped;
        known.insert(address, run.root);
        accounts.push(address);
    }
    let set = PrefixSet::new(accounts);
    let (run, computed, leaves) = {
        let roots =
            StoredRoots::new(dbs, txn, &known, true, Discard)?.cached(cache.storage_nodes());
        let mut source = CachedSource::new(
            AccountSource::new(dbs, txn, true, roots)?,
            cache.account_nodes(),
        );
        let run = walk::run_updates(&mut source, &set)?;
        let roots = source.into_inner().roots;
        (run, roots.computed, roots.leaves)
    };
    write_account_trie(dbs, txn, &run)?;
    cache.walked(None, &run);
    clear(
        dbs,
        txn,
        &[
            TrieTable::TrieChangedAccounts,
            TrieTable::TrieChangedStorages,
        ],
    )?;
    out.root = run.root;
    out.changed_accounts = set.len() as u64;
    out.storage_tries += computed;
    out.leaves += run.leaves + leaves;
    out.skipped += run.skipped;
    out.remembered += run.remembered;
    out.rereads += u64::from(run.reread);
    Ok(out)
}

/// Rebuilds both tries from the hashed tables: clears every trie table, computes all of it
/// and stores every node.
pub fn rebuild_root(dbs: &TrieDbs, txn: &RwTxUnsync) -> Result<RootOutcome, TrieDbError> {
    clear(
        dbs,
        txn,
        &[
            TrieTable::AccountsTrie,
            TrieTable::StoragesTrie,
            TrieTable::TrieChangedAccounts,
            TrieTable::TrieChangedStorages,
        ],
    )?;
    let known = B256Map::default();
    let (run, computed, leaves) = {
        let roots = StoredRoots::new(dbs, txn, &known, false, WriteTo { dbs: *dbs, txn })?;
        let mut source = AccountSource::new(dbs, txn, false, roots)?;
        let mut spill = |nodes: &[(Nibbles, BranchNodeCompact)]| put_account_nodes(dbs, txn, nodes);
        let run = walk::run_spilling(
            &mut source,
            &PrefixSet::all(),
            Vec::new(),
            true,
            Some(walk::Spill {
                every: crate::rebuild::SPILL_NODES,
                to: &mut spill,
            }),
        )?;
        (run, source.roots.computed, source.roots.leaves)
    };
    write_account_trie(dbs, txn, &run)?;
    Ok(RootOutcome {
        root: run.root,
        changed_accounts: run.leaves,
        storage_tries: computed,
        leaves: run.leaves + leaves,
        ..RootOutcome::default()
    })
}

/// The root from the hashed tables alone, ignoring every stored node (a check on the
/// incremental root).
pub fn root_from_scratch<K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &Tx<K>,
) -> Result<B256, TrieDbError> {
    let known = B256Map::default();
    let roots = StoredRoots::new(dbs, txn, &known, false, Discard)?;
    let mut source = AccountSource::new(dbs, txn, false, roots)?;
    Ok(walk::run(&mut source, &PrefixSet::all(), Vec::new(), false)?.root)
}

/// Proof nodes of one account and some of its slots, against the state the transaction sees
/// (`changed`: what the committed state changed since its last root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proven {
    /// The state root the proofs lead from.
    pub state_root: B256,
    /// The account's storage root.
    pub storage_root: B256,
    /// The account trie's nodes from the root to the account's leaf (or to where it would
    /// be), RLP-encoded.
    pub account_proof: Vec<Bytes>,
    /// For each slot asked, in order, the storage trie's nodes from its root.
    pub storage_proofs: Vec<Vec<Bytes>>,
}

/// Proves `address` (hashed) and its `slots` (hashed) against the state `txn` sees with
/// `overlay` laid over it; `changed`: what that state changed since its stored nodes were
/// last brought up to date. Stops with [`TrieDbError::DeadlinePassed`] at `deadline`.
pub fn prove<K: TransactionKind>(
    dbs: &TrieDbs,
    txn: &Tx<K>,
    mut changed: ChangedKeys,
    overlay: &TrieLayer,
    address: B256,
    slots: &[B256],
    deadline: Option<std::time::Instant>,
) -> Result<Proven, TrieDbError> {
    // Every overlaid key is a changed one: the walk recomputes its path from the leaves the
    // overlay serves.
    for account in overlay.accounts.keys() {
        changed.account(*account);
    }
    for (account, storage) in &overlay.storage {
        changed
            .storage_of(*account)
            .extend(storage.slots.keys().copied());
    }
    let no_slots = StorageLayer::default();
    let storage_source = |account: B256| -> Result<_, TrieDbError> {
        let over = overlay.storage.get(&account).unwrap_or(&no_slots);
        Ok(Layered::new(
            StorageSource::new(dbs, txn, account, true)?,
            &over.nodes,
            &over.slots,
            slot_leaf,
            over.wiped,
        ))
    };
    let targets: Vec<Nibbles> = slots.iter().map(Nibbles::unpack).collect();
    let mut keys = changed.storage.remove(&address).unwrap_or_default();
    keys.extend_from_slice(slots);
    let storage = {
        let mut source = storage_source(address)?;
        walk::run_until(
            &mut source,
            &PrefixSet::new(keys),
            targets.clone(),
            deadline,
        )?
    };
    let mut known = B256Map::default();
    known.insert(address, storage.root);
    let mut accounts: Vec<B256> = changed.accounts.into_iter().collect();
    accounts.push(address);
    for (other, slots) in changed.storage {
        let run = {
            let mut source = storage_source(other)?;
            walk::run_until(&mut source, &PrefixSet::new(slots), Vec::new(), deadline)?
        };
        known.insert(other, run.root);
        accounts.push(other);
    }
    let target = Nibbles::unpack(address);
    let account = {
        let roots = StoredRoots::new(dbs, txn, &known, true, Discard)?;
        let mut source = Layered::new(
            AccountSource::new(dbs, txn, true, roots)?,
            &overlay.account_nodes,
            &overlay.accounts,
            account_leaf,
            false,
        );
        walk::run_until(
            &mut source,
            &PrefixSet::new(accounts),
            vec![target],
            deadline,
        )?
    };
    let nodes = |proof: &alloy_trie::proof::ProofNodes, target: &Nibbles| {
        proof
            .matching_nodes_sorted(target)
            .into_iter()
            .map(|(_, node)| node)
            .collect::<Vec<Bytes>>()
    };
    Ok(Proven {
        state_root: account.root,
        storage_root: storage.root,
        account_proof: nodes(&account.proof, &target),
        storage_proofs: targets.iter().map(|t| nodes(&storage.proof, t)).collect(),
    })
}
