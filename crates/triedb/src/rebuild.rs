//! The rebuild of both tries on several threads, for a state written whole (a genesis, a
//! snapshot's bootstrap): every leaf is read and hashed, so the serial rebuild is bound by
//! one core while the others wait.
//!
//! A trie is computed as the sixteen subtries under its root's children, each by its own
//! hash builder over the keys after their first nibble, from its own read transaction: the
//! subtrie's top is then that builder's root, and its nodes are the builder's with the nibble
//! put back in front. The root node is built from the sixteen hashes the way the incremental
//! walk feeds a stored child it skips, so the stored trie is the one the serial rebuild
//! writes, node for node. That holds only where each non-empty part's top is a stored branch
//! node (the hash builder keeps a hash and a tree bit only for those): a part that is one
//! leaf, an extension or a branch of leaves (a small or contrived trie) makes its trie be
//! rebuilt serially instead, its parts' nodes cleared first.
//!
//! The account trie is always split; each account part computes the storage roots of its
//! leaves as it meets them, inline for a storage trie under the split size and split the same
//! way (nested, on rayon's pool) above it. Finished nodes go over a bounded channel to the
//! thread holding the write transaction, which MDBX allows on one thread only.
//!
//! Must not be used inside a write transaction that wrote hashed state: the parts read the
//! last commit, not the transaction's own writes.

use gigas_mdbx::StoreError as _;
use std::borrow::Cow;
use std::sync::mpsc::{sync_channel, SyncSender};

use alloy_primitives::map::{B256Map, HashMap};
use alloy_primitives::B256;
use alloy_trie::{BranchNodeCompact, HashBuilder, Nibbles, EMPTY_ROOT_HASH};
use rayon::prelude::*;
use signet_libmdbx::tx::aliases::{RoTxUnsync, RwTxUnsync};
use signet_libmdbx::{Cursor, Environment, Ro};

use crate::error::TrieDbError;
use crate::root::RootOutcome;
use crate::rows::cursor;
use crate::store::{
    clear, hashed_key, put_account_nodes, put_storage_nodes, write_account_trie, AccountSource,
    Discard, StorageRoots, StorageSource, StoredRoots,
};
use crate::tables::TrieDbs;
use crate::tables::TrieTable;
use gigas_trie::walk::{self, Spill, TrieSource};
use gigas_trie::PrefixSet;

/// Branch nodes a rebuild holds before writing them (about 200 bytes each); the tests spill
/// often so that a small trie crosses the bound.
#[cfg(not(test))]
pub(crate) const SPILL_NODES: usize = walk::SPILL_NODES;
#[cfg(test)]
pub(crate) const SPILL_NODES: usize = 16;

/// Storage tries with at least this many slots are split into parts; smaller ones are
/// computed whole by the account part that reaches them (a part per 4,096 slots: below that
/// the threads' start costs more than it saves).
pub const SPLIT_SLOTS: u64 = 1 << 16;

/// Messages the writer may hold unwritten: each is at most [`SPILL_NODES`] nodes (about
/// 13 MB), so this bounds the rebuild's memory beside the parts' own.
const QUEUED_WRITES: usize = 8;

type Nodes = Vec<(Nibbles, BranchNodeCompact)>;

/// What the parts hand to the writer.
enum Write {
    Accounts(Nodes),
    Storage(B256, Nodes),
    /// A storage trie's parts are void: it is being rebuilt whole.
    ClearStorage(B256),
}

/// A part's outcome.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// No key starts with its nibble.
    Empty,
    /// Its top is a stored branch node with this hash.
    Stored(B256),
    /// Its top is anything else: the trie is rebuilt serially.
    Other,
}

/// Leaves and storage tries the parts computed.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    accounts: u64,
    storage_tries: u64,
    slots: u64,
    /// Storage tries computed in parts.
    split_tries: u64,
    /// Storage tries computed in parts that did not split them (computed again whole).
    unsplit_tries: u64,
}

impl Counts {
    fn add(self, other: Self) -> Self {
        Self {
            accounts: self.accounts + other.accounts,
            storage_tries: self.storage_tries + other.storage_tries,
            slots: self.slots + other.slots,
            split_tries: self.split_tries + other.split_tries,
            unsplit_tries: self.unsplit_tries + other.unsplit_tries,
        }
    }
}

/// What the parts share.
struct Ctx<'e> {
    env: &'e Environment,
    dbs: TrieDbs,
    split: u64,
    out: SyncSender<Write>,
}

impl Ctx<'_> {
    fn begin(&self) -> Result<RoTxUnsync, TrieDbError> {
        self.env.begin_ro_unsync().map_err(TrieDbError::mdbx(
            "begin a read transaction for a trie part",
        ))
    }

    fn send(&self, write: Write) -> Result<(), TrieDbError> {
        // The writer stops early only on an error of its own, which the caller reports.
        self.out
            .send(write)
            .map_err(|_| TrieDbError::RebuildWriterStopped)
    }
}

/// Rebuilds both tries from the hashed tables of the last commit, on rayon's pool, storing
/// every node through `txn` (which must hold no hashed-state writes of its own). Storage
/// tries of at least `split` slots are split too.
pub fn rebuild_root(
    env: &Environment,
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    split: u64,
) -> Result<RootOutcome, TrieDbError> {
    rebuild(env, dbs, txn, split).map(|(outcome, _, _)| outcome)
}

/// [`rebuild_root`], also saying whether the account trie was split, and the parts' counts.
fn rebuild(
    env: &Environment,
    dbs: &TrieDbs,
    txn: &RwTxUnsync,
    split: u64,
) -> Result<(RootOutcome, bool, Counts), TrieDbError> {
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
    let (out, queue) = sync_channel(QUEUED_WRITES);
    let ctx = Ctx {
        env,
        dbs: *dbs,
        split: split.max(1),
        out,
    };
    let (computed, written) = std::thread::scope(|s| {
        let parts = s.spawn(move || compute(&ctx));
        let mut written = Ok(());
        for write in queue.iter() {
            written = match write {
                Write::Accounts(nodes) => put_account_nodes(dbs, txn, &nodes),
                Write::Storage(address, nodes) => put_storage_nodes(dbs, txn, &address, &nodes),
                Write::ClearStorage(address) => txn
                    .del(dbs.get(TrieTable::StoragesTrie), address, None)
                    .map(|_| ())
                    .map_err(TrieDbError::mdbx("clear a storage trie's parts")),
            };
            if written.is_err() {
                break;
            }
        }
        // Unblocks the parts still sending, so that they end.
        drop(queue);
        (parts.join(), written)
    });
    let computed = computed.map_err(|_| TrieDbError::RootThreadPanicked);
    written?;
    let (root, counts) = computed??;
    let split_accounts = root.is_some();
    let root = match root {
        Some(root) => root,
        None => {
            tracing::debug!("the account trie's parts do not split it; rebuilt serially");
            clear(dbs, txn, &[TrieTable::AccountsTrie])?;
            serial_account_trie(dbs, txn)?
        }
    };
    let outcome = RootOutcome {
        root,
        changed_accounts: counts.accounts,
        storage_tries: counts.storage_tries,
        leaves: counts.accounts + counts.slots,
        ..RootOutcome::default()
    };
    Ok((outcome, split_accounts, counts))
}

/// The account trie's parts and, where they split it, its root (its nodes sent).
fn compute(ctx: &Ctx<'_>) -> Result<(Option<B256>, Counts), TrieDbError> {
    let parts = (0..16u8)
        .into_par_iter()
        .map(|nibble| account_part(ctx, nibble))
        .collect::<Result<Vec<_>, TrieDbError>>()?;
    let counts = parts
        .iter()
        .fold(Counts::default(), |sum, (_, counts)| sum.add(*counts));
    let tops: Vec<Part> = parts.iter().map(|(part, _)| *part).collect();
    let Some((root, nodes)) = combine(&tops) else {
        return Ok((None, counts));
    };
    if !nodes.is_empty() {
        ctx.send(Write::Accounts(nodes))?;
    }
    Ok((Some(root), counts))
}

fn account_part(ctx: &Ctx<'_>, nibble: u8) -> Result<(Part, Counts), TrieDbError> {
    let txn = ctx.begin()?;
    let roots = PartRoots {
        ctx,
        txn: &txn,
        probe: cursor(&ctx.dbs, &txn, TrieTable::HashedStorages)?,
        probe_at: None,
        counts: Counts::default(),
    };
    let mut source = AccountSource::new(&ctx.dbs, &txn, false, roots)?;
    let mut accounts = 0;
    let part = part(&mut source, nibble, &mut accounts, |nodes| {
        ctx.send(Write::Accounts(nodes))
    })?;
    let mut counts = source.roots.counts;
    counts.accounts = accounts;
    Ok((part, counts))
}

/// The storage roots of an account part's leaves, computed as the part meets them.
struct PartRoots<'c, 'e, 'tx> {
    ctx: &'c Ctx<'e>,
    txn: &'tx RoTxUnsync,
    /// `HashedStorages`, to find whether an account has slots, and how many.
    probe: Cursor<'tx, Ro>,
    /// `(low, next)`: `next` is the first account with slots at or after `low`, with its
    /// slot count.
    probe_at: Option<(B256, Option<(B256, u64)>)>,
    counts: Counts,
}

impl PartRoots<'_, '_, '_> {
    fn slots(&mut self, address: &B256) -> Result<u64, TrieDbError> {
        // Leaves come in key order: the last probe answers for every account up to the next
        // one with slots, without a seek.
        if let Some((low, next)) = self.probe_at {
            if low <= *address && next.is_none_or(|(n, _)| n >= *address) {
                return Ok(next.filter(|(n, _)| n == address).map_or(0, |(_, c)| c));
            }
        }
        let row: Option<(Cow<'_, [u8]>, ())> = self
            .probe
            .set_range(address.as_slice())
            .map_err(TrieDbError::read("HashedStorages"))?;
        let next = match row {
            Some((key, ())) => {
                let owner = hashed_key(TrieTable::HashedStorages, &key)?;
                let count = self
                    .probe
                    .dup_count()
                    .map_err(TrieDbError::mdbx("count an account's slots"))?;
                Some((owner, count as u64))
            }
            None => None,
        };
        self.probe_at = Some((*address, next));
        Ok(next.filter(|(n, _)| n == address).map_or(0, |(_, c)| c))
    }
}

impl StorageRoots for PartRoots<'_, '_, '_> {
    fn storage_root(&mut self, address: &B256) -> Result<B256, TrieDbError> {
        let slots = self.slots(address)?;
        if slots == 0 {
            return Ok(EMPTY_ROOT_HASH);
        }
        let (root, leaves) = if slots >= self.ctx.split {
            let (root, leaves, split) = split_storage_root(self.ctx, address)?;
            self.counts.split_tries += 1;
            self.counts.unsplit_tries += u64::from(!split);
            (root, leaves)
        } else {
            whole_storage_root(self.ctx, self.txn, address)?
        };
        self.counts.storage_tries += 1;
        self.counts.slots += leaves;
        Ok(root)
    }
}

/// One storage trie computed whole, its nodes sent: its root and leaves.
fn whole_storage_root(
    ctx: &Ctx<'_>,
    txn: &RoTxUnsync,
    address: &B256,
) -> Result<(B256, u64), TrieDbError> {
    let mut source = StorageSource::new(&ctx.dbs, txn, *address, false)?;
    let mut spill =
        |nodes: &[(Nibbles, BranchNodeCompact)]| ctx.send(Write::Storage(*address, nodes.to_vec()));
    let run = walk::run_spilling(
        &mut source,
        &PrefixSet::default(),
        Vec::new(),
        true,
        Some(Spill {
            every: SPILL_NODES,
            to: &mut spill,
        }),
    )?;
    if !run.updates.is_empty() {
        ctx.send(Write::Storage(*address, run.updates))?;
    }
    Ok((run.root, run.leaves))
}

/// One storage trie computed in parts, its nodes sent: its root, leaves, and whether the
/// parts split it (else it was computed again whole).
fn split_storage_root(ctx: &Ctx<'_>, address: &B256) -> Result<(B256, u64, bool), TrieDbError> {
    let parts = (0..16u8)
        .into_par_iter()
        .map(|nibble| {
            let txn = ctx.begin()?;
            let mut source = StorageSource::new(&ctx.dbs, &txn, *address, false)?;
            let mut leaves = 0;
            let part = part(&mut source, nibble, &mut leaves, |nodes| {
                ctx.send(Write::Storage(*address, nodes))
            })?;
            Ok((part, leaves))
        })
        .collect::<Result<Vec<_>, TrieDbError>>()?;
    let tops: Vec<Part> = parts.iter().map(|(part, _)| *part).collect();
    match combine(&tops) {
        Some((root, nodes)) => {
            if !nodes.is_empty() {
                ctx.send(Write::Storage(*address, nodes))?;
            }
            Ok((root, parts.iter().map(|(_, leaves)| leaves).sum(), true))
        }
        None => {
            tracing::debug!(%address, "a storage trie's parts do not split it; rebuilt whole");
            ctx.send(Write::ClearStorage(*address))?;
            let (root, leaves) = whole_storage_root(ctx, &ctx.begin()?, address)?;
            Ok((root, leaves, false))
        }
    }
}

/// The subtrie under the root's child `nibble`: its leaves hashed by a builder over the keys
/// after their first nibble, its nodes handed to `send` under their full paths as they
/// finish (at most [`SPILL_NODES`] held).
fn part<S: TrieSource<Error = TrieDbError>>(
    source: &mut S,
    nibble: u8,
    leaves: &mut u64,
    mut send: impl FnMut(Nodes) -> Result<(), TrieDbError>,
) -> Result<Part, TrieDbError> {
    let prefix = Nibbles::from_nibbles_unchecked([nibble]);
    let mut from = B256::ZERO;
    from.0[0] = nibble << 4;
    let mut hb = HashBuilder::default().with_updates(true);
    let mut buf = Vec::with_capacity(128);
    // Whether the builder stored its top node: the subtrie's top is a stored branch.
    let mut stored_top = false;
    let mut count = 0u64;
    let mut next = source.seek_leaf(&from)?;
    while let Some((key, leaf)) = next.take() {
        if key[0] >> 4 != nibble {
            break;
        }
        buf.clear();
        source.leaf_value(&key, &leaf, &mut buf)?;
        hb.add_leaf(Nibbles::unpack(key).slice(1..), &buf);
        count += 1;
        if hb.updates_len() >= SPILL_NODES {
            let nodes = hb.updated_branch_nodes.replace(HashMap::default());
            send(under(&prefix, nodes.unwrap_or_default(), &mut stored_top))?;
        }
        next = source.next_leaf()?;
    }
    *leaves += count;
    if count == 0 {
        return Ok(Part::Empty);
    }
    let hash = hb.root();
    let (_, nodes) = hb.split();
    let nodes = under(&prefix, nodes, &mut stored_top);
    if !nodes.is_empty() {
        send(nodes)?;
    }
    Ok(if stored_top {
        Part::Stored(hash)
    } else {
        Part::Other
    })
}

/// A part's nodes under their full paths, sorted; notes whether the part's top is among them
/// (the builder stored it as its root: it must not keep a root hash below the real root).
fn under(prefix: &Nibbles, nodes: HashMap<Nibbles, BranchNodeCompact>, top: &mut bool) -> Nodes {
    let mut out: Nodes = nodes
        .into_iter()
        .map(|(path, mut node)| {
            if path.is_empty() {
                *top = true;
                node.root_hash = None;
            }
            (prefix.join(&path), node)
        })
        .collect();
    out.sort_unstable_by_key(|(path, _)| *path);
    out
}

/// The root over the parts' tops and the root node (if stored), or `None` when some part's
/// top is not a stored branch.
fn combine(parts: &[Part]) -> Option<(B256, Nodes)> {
    let mut hb = HashBuilder::default().with_updates(true);
    for (nibble, part) in (0u8..).zip(parts) {
        match part {
            Part::Empty => {}
            Part::Stored(hash) => {
                hb.add_branch(Nibbles::from_nibbles_unchecked([nibble]), *hash, true)
            }
            Part::Other => return None,
        }
    }
    let root = hb.root();
    let (_, nodes) = hb.split();
    Some((root, nodes.into_iter().collect()))
}

/// The account trie rebuilt on this thread over the storage tries already stored (their
/// root nodes give the roots; a trie too small to store one is read again).
fn serial_account_trie(dbs: &TrieDbs, txn: &RwTxUnsync) -> Result<B256, TrieDbError> {
    let known = B256Map::default();
    let roots = StoredRoots::new(dbs, txn, &known, true, Discard)?;
    let mut source = AccountSource::new(dbs, txn, false, roots)?;
    let mut spill = |nodes: &[(Nibbles, BranchNodeCompact)]| put_account_nodes(dbs, txn, nodes);
    let run = walk::run_spilling(
        &mut source,
        &PrefixSet::all(),
        Vec::new(),
        true,
        Some(Spill {
            every: SPILL_NODES,
            to: &mut spill,
        }),
    )?;
    write_account_trie(dbs, txn, &run)?;
    Ok(run.root)
}

#[cfg(test)]
mod tests {
    //! The parallel rebuild against the serial one over the same committed state: the same
    //! root and the same stored nodes, row for row, where the parts split the tries and where
    //! they do not (tiny tries, keys that share their first nibbles).

    use alloy_primitives::{keccak256, Address, U256};
    use gigas_primitives::AccountState;
    use gigas_trie::ScratchState;

    use super::*;
    use crate::root;
    use crate::rows;

    /// A genesis entry: an account (address, nonce) or a slot (owner, slot, value).
    enum Entry {
        Account(Address, u64),
        Slot(Address, U256, u64),
    }

    fn account(address: Address, nonce: u64) -> Entry {
        Entry::Account(address, nonce)
    }

    fn slot(address: Address, slot: U256, value: u64) -> Entry {
        Entry::Slot(address, slot, value)
    }

    fn state(nonce: u64) -> AccountState {
        AccountState {
            nonce,
            balance: U256::from(nonce * 7 + 1),
            code_hash: alloy_primitives::KECCAK256_EMPTY,
        }
    }

    /// A trie environment in `dir` holding `entries` as its leaves, and their root computed
    /// from scratch (alloy-trie's).
    fn load(dir: &std::path::Path, entries: Vec<Entry>) -> (Environment, TrieDbs, B256) {
        let options = gigas_mdbx::EnvOptions {
            max_size_bytes: 1 << 30,
            growth_step_bytes: 16 << 20,
            page_size: None,
            max_readers: 64,
            sync_mode: signet_libmdbx::SyncMode::SafeNoSync,
            readahead: false,
            write_map: false,
            autosync_period: None,
            max_dirty_pages: None,
        };
        let env = gigas_mdbx::open_env(dir, &options).unwrap();
        let dbs = TrieDbs::open(&env, dir).unwrap();
        let mut scratch = ScratchState::new();
        let mut accounts = Vec::new();
        let mut slots = Vec::new();
        for entry in entries {
            match entry {
                Entry::Account(address, nonce) => {
                    scratch.account(address, state(nonce));
                    accounts.push((keccak256(address), state(nonce)));
                }
                Entry::Slot(address, s, value) => {
                    scratch.slot(address, s, U256::from(value));
                    slots.push((
                        keccak256(address),
                        keccak256(s.to_be_bytes::<32>()),
                        U256::from(value),
                    ));
                }
            }
        }
        accounts.sort_unstable_by_key(|a| a.0);
        slots.sort_unstable_by_key(|s| (s.0, s.1));
        let txn = env.begin_rw_unsync().unwrap();
        let buf = &mut Vec::new();
        rows::put_accounts(&dbs, &txn, &accounts, buf).unwrap();
        rows::put_slots(&dbs, &txn, slots.into_iter(), buf).unwrap();
        txn.commit().unwrap();
        (env, dbs, scratch.root().unwrap())
    }

    /// Addresses from `start` on whose hashed key begins with `prefix`'s nibbles.
    fn addresses_under(prefix: &[u8], start: u64, count: usize) -> Vec<Address> {
        (start..)
            .map(|n| Address::left_padding_from(&n.to_be_bytes()))
            .filter(|a| Nibbles::unpack(keccak256(a)).starts_with(&Nibbles::from_nibbles(prefix)))
            .take(count)
            .collect()
    }

    /// Slots whose hashed key begins with `prefix`'s nibbles.
    fn slots_under(prefix: &[u8], count: usize) -> Vec<U256> {
        (1u64..)
            .map(U256::from)
            .filter(|s| {
                Nibbles::unpack(keccak256(s.to_be_bytes::<32>()))
                    .starts_with(&Nibbles::from_nibbles(prefix))
            })
            .take(count)
            .collect()
    }

    type Rows = Vec<(Vec<u8>, Vec<u8>)>;

    fn rows(dbs: &TrieDbs, txn: &RwTxUnsync, table: TrieTable) -> Rows {
        let mut c = cursor(dbs, txn, table).unwrap();
        let mut out = Vec::new();
        let mut row: Option<(Vec<u8>, Vec<u8>)> = c.first().unwrap();
        while let Some(r) = row {
            out.push(r);
            row = c.next().unwrap();
        }
        out
    }

    /// Writes `entries` as a genesis, rebuilds both ways (each in a transaction then
    /// dropped), asserts they agree, and returns whether the parallel one split the account
    /// trie, and its counts.
    fn compare(entries: Vec<Entry>, split: u64) -> (bool, Counts) {
        let dir = tempfile::tempdir().unwrap();
        let (env, dbs, scratch_root) = load(dir.path(), entries);
        let dump = |txn: &RwTxUnsync| {
            (
                rows(&dbs, txn, TrieTable::AccountsTrie),
                rows(&dbs, txn, TrieTable::StoragesTrie),
            )
        };
        let txn = env.begin_rw_unsync().unwrap();
        let serial = root::rebuild_root(&dbs, &txn).unwrap();
        let serial_rows = dump(&txn);
        drop(txn);
        let txn = env.begin_rw_unsync().unwrap();
        let (parallel, split_accounts, counts) = rebuild(&env, &dbs, &txn, split).unwrap();
        let parallel_rows = dump(&txn);
        drop(txn);
        assert_eq!(parallel.root, serial.root);
        assert_eq!(scratch_root, serial.root);
        assert_eq!(parallel.leaves, serial.leaves);
        assert_eq!(parallel.storage_tries, serial.storage_tries);
        assert_eq!(parallel_rows.0.len(), serial_rows.0.len());
        assert_eq!(parallel_rows.0, serial_rows.0, "account trie nodes");
        assert_eq!(parallel_rows.1.len(), serial_rows.1.len());
        assert_eq!(parallel_rows.1, serial_rows.1, "storage trie nodes");
        let txn = env.begin_ro_unsync().unwrap();
        assert_eq!(root::root_from_scratch(&dbs, &txn).unwrap(), serial.root);
        (split_accounts, counts)
    }

    #[test]
    fn many_accounts_and_storage_tries_split_and_match_the_serial_rebuild() {
        let mut entries: Vec<Entry> = (0..3000u64)
            .map(|n| account(Address::left_padding_from(&n.to_be_bytes()), n))
            .collect();
        // Storage tries of every size: the large ones are split (split = 400), the small ones
        // are computed whole inside the account parts.
        for (i, size) in [1u64, 2, 3, 17, 100, 399, 400, 2500, 6000]
            .iter()
            .enumerate()
        {
            let owner = Address::repeat_byte(0xa0 + i as u8);
            entries.push(account(owner, 1));
            entries.extend((0..*size).map(|s| slot(owner, U256::from(s * 31 + 5), s + 1)));
        }
        let (split_accounts, counts) = compare(entries, 400);
        assert!(split_accounts);
        assert_eq!(counts.storage_tries, 9);
        assert_eq!(counts.split_tries, 3);
        assert_eq!(counts.unsplit_tries, 0);
        assert_eq!(counts.accounts, 3009);
    }

    #[test]
    fn tries_the_parts_do_not_split_are_rebuilt_serially_to_the_same_nodes() {
        // Nothing at all; one account; a handful.
        assert!(compare(Vec::new(), 1).0);
        let one = Address::repeat_byte(1);
        assert!(!compare(vec![account(one, 1)], 1).0);
        let few: Vec<_> = (0..5u64)
            .map(|n| account(Address::left_padding_from(&n.to_be_bytes()), n))
            .collect();
        assert!(!compare(few, 1).0);

        // Every account under one first nibble: one part, whose top is a stored branch; the
        // root is an extension over it.
        let one_nibble: Vec<_> = addresses_under(&[5], 0, 300)
            .into_iter()
            .map(|a| account(a, 3))
            .collect();
        assert!(compare(one_nibble, 1).0);

        // Every account under two shared nibbles: the part's top is an extension.
        let two_nibbles: Vec<_> = addresses_under(&[5, 3], 0, 300)
            .into_iter()
            .map(|a| account(a, 3))
            .collect();
        assert!(!compare(two_nibbles, 1).0);

        // Storage tries split where their parts allow it, and computed again whole where
        // they do not: slots sharing two nibbles, a few slots, slots under one nibble.
        let mut entries: Vec<Entry> = (0..2000u64)
            .map(|n| account(Address::left_padding_from(&n.to_be_bytes()), n))
            .collect();
        let owners = [
            Address::repeat_byte(0xb1),
            Address::repeat_byte(0xb2),
            Address::repeat_byte(0xb3),
        ];
        for owner in owners {
            entries.push(account(owner, 1));
        }
        entries.extend(
            slots_under(&[0xe, 0x2], 200)
                .into_iter()
                .map(|s| slot(owners[0], s, 9)),
        );
        entries.extend((1..4u64).map(|s| slot(owners[1], U256::from(s), s)));
        entries.extend(
            slots_under(&[0x7], 300)
                .into_iter()
                .map(|s| slot(owners[2], s, 4)),
        );
        let (split_accounts, counts) = compare(entries, 1);
        assert!(split_accounts);
        assert_eq!(counts.split_tries, 3);
        assert_eq!(counts.unsplit_tries, 2);
    }
}
