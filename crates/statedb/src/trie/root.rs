//! The entry points of the trie over MDBX: the incremental root inside the write
//! transaction, the rebuild, the root from scratch (a check), and proofs. The sources and
//! the node writes they use are in [`crate::trie::store`]; roots over the open group held in
//! memory are in [`crate::trie::layer`].

use alloy_primitives::map::B256Map;
use alloy_primitives::{Bytes, B256};
use alloy_trie::{BranchNodeCompact, Nibbles};
use signet_libmdbx::tx::aliases::RwTxUnsync;
use signet_libmdbx::tx::Tx;
use signet_libmdbx::TransactionKind;

use crate::error::StateDbError;
use crate::read::Dbs;
use crate::tables::Table;
use crate::trie::cache::{CachedSource, OwnerNodes, TrieCache};
use crate::trie::layer::{account_leaf, slot_leaf, Layered, StorageLayer, TrieLayer};
use crate::trie::store::{
    clear, put_account_nodes, write_account_trie, write_storage_trie, AccountSource, ChangedKeys,
    Discard, StorageSource, StoredRoots, WriteTo,
};
use gigas_trie::walk;
use gigas_trie::PrefixSet;

/// What a root computation did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RootOutcome {
    pub(crate) root: B256,
    pub(crate) changed_accounts: u64,
    pub(crate) storage_tries: u64,
    pub(crate) leaves: u64,
    pub(crate) skipped: u64,
    /// Leaves taken from their remembered hash.
    pub(crate) remembered: u64,
    /// Walks done again without remembered hashes.
    pub(crate) rereads: u64,
}

/// The incremental root: recomputes the storage tries and account leaves `changed` names,
/// stores the new nodes, and empties the changed-key tables (whose contents `changed` must
/// already hold). Stored nodes are sought through `cache` (which must describe the
/// transaction's nodes, and is kept so) unless it is off.
pub(crate) fn update_root(
    dbs: &Dbs,
    txn: &RwTxUnsync,
    changed: ChangedKeys,
    cache: &TrieCache,
) -> Result<RootOutcome, StateDbError> {
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
        &[Table::TrieChangedAccounts, Table::TrieChangedStorages],
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
pub(crate) fn rebuild_root(dbs: &Dbs, txn: &RwTxUnsync) -> Result<RootOutcome, StateDbError> {
    clear(
        dbs,
        txn,
        &[
            Table::AccountsTrie,
            Table::StoragesTrie,
            Table::TrieChangedAccounts,
            Table::TrieChangedStorages,
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
                every: crate::trie::rebuild::SPILL_NODES,
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
pub(crate) fn root_from_scratch<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
) -> Result<B256, StateDbError> {
    let known = B256Map::default();
    let roots = StoredRoots::new(dbs, txn, &known, false, Discard)?;
    let mut source = AccountSource::new(dbs, txn, false, roots)?;
    Ok(walk::run(&mut source, &PrefixSet::all(), Vec::new(), false)?.root)
}

/// Proof nodes of one account and some of its slots, against the state the transaction sees
/// (`changed`: what the committed state changed since its last root).
pub(crate) struct Proven {
    pub(crate) state_root: B256,
    pub(crate) storage_root: B256,
    pub(crate) account_proof: Vec<Bytes>,
    pub(crate) storage_proofs: Vec<Vec<Bytes>>,
}

pub(crate) fn prove<K: TransactionKind>(
    dbs: &Dbs,
    txn: &Tx<K>,
    mut changed: ChangedKeys,
    overlay: &TrieLayer,
    address: B256,
    slots: &[B256],
    deadline: Option<std::time::Instant>,
) -> Result<Proven, StateDbError> {
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
    let storage_source = |account: B256| -> Result<_, StateDbError> {
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
