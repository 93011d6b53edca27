//! Random ChangeSet streams through a real MDBX environment: every account and slot against
//! an in-memory model, the incremental root against alloy-trie's root of the model after
//! every block and against the database's own from-scratch root, each block decoded from its
//! diff against the writer's open group, groups of several blocks, restarts, the trie turned
//! off and rebuilt, groups that never commit, and groups written into the transaction between
//! blocks.

mod common;

use alloy_primitives::{Address, U256};
use common::{
    address, apply_genesis, block, consistent, open, random_changes, random_model, Chain, Model,
    Rng,
};
use gigas_evm::revm::database_interface::DatabaseRef;
use gigas_primitives::ChangeSet;
use gigas_statedb::{
    BlockToApply, HashedWrites, RootInfo, StateDbError, StateWriter, WriterOptions,
};
use gigas_statediff::{
    decode_body, encode_body, DecodedBody, HashedKeys, KeyIndex, MemoryKeyIndex, PackedBody,
    PriorValues,
};

const ACCOUNTS: u64 = 400;

struct Run {
    rng: Rng,
    accounts: u64,
    model: Model,
    chain: Chain,
    index: MemoryKeyIndex,
    touched: Vec<Address>,
}

impl Run {
    fn new(seed: u64) -> Self {
        Self::with_accounts(seed, ACCOUNTS)
    }

    fn with_accounts(seed: u64, accounts: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut model = random_model(&mut rng, accounts);
        // A genesis stores the code its accounts use: in a model this small, maybe none.
        let used: Vec<_> = model.accounts.values().map(|s| s.code_hash).collect();
        model.codes.retain(|hash, _| used.contains(hash));
        Self {
            rng,
            accounts,
            model,
            chain: Chain::genesis(),
            index: MemoryKeyIndex::new(),
            touched: (0..accounts + accounts / 5 + 1).map(address).collect(),
        }
    }

    /// Makes the next block, decodes its diff against the writer (the open group included)
    /// as a follower would, and applies it. Returns the root the writer computed, if any.
    fn step(&mut self, writer: &mut StateWriter<'_>) -> Option<alloy_primitives::B256> {
        self.step_info(writer).map(|r| r.root)
    }

    /// The next block: its number, its changes, its body as the sequencer packs it (against
    /// the run's index and the model's prior values) and the body decoded against `writer`
    /// (the open group included) as a follower decodes it.
    fn next_body(&mut self, writer: &StateWriter<'_>) -> (u64, ChangeSet, PackedBody, DecodedBody) {
        let number = self.chain.parent.number + 1;
        let raw = random_changes(&mut self.rng, &self.model, self.accounts, number);
        let changes = consistent(raw, &self.model);
        let prior = PriorValues::capture(&changes, &common::ModelPrior(&self.model)).unwrap();
        let body = encode_body(&changes, &self.index, &prior).unwrap();
        let decoded = decode_body(&body.bytes, writer, writer)
            .unwrap_or_else(|e| panic!("block {number} does not decode against the writer: {e}"));
        (number, changes, body, decoded)
    }

    /// [`Run::step`], with all the writer said about its root.
    fn step_info(&mut self, writer: &mut StateWriter<'_>) -> Option<RootInfo> {
        let (number, changes, body, decoded) = self.next_body(writer);
        assert_eq!(decoded.changes, changes, "block {number}");
        assert_eq!(decoded.new_keys, body.new_keys, "block {number}");
        assert_eq!(decoded.hashed, HashedKeys::of(&changes), "block {number}");
        self.index.extend(&body.new_keys).unwrap();
        let (header, hash) = self.chain.next(&changes);
        // The node's path writes with the decoder's hashes; every third block the writer
        // hashes the keys itself, so that both paths meet the model in every stream.
        let root = writer
            .apply(BlockToApply {
                hashed: (!number.is_multiple_of(3)).then_some(&decoded.hashed),
                ..block(&header, hash, &changes, &decoded.new_keys)
            })
            .unwrap_or_else(|e| panic!("block {number}: {e}"));
        self.model.apply(&changes);
        assert_eq!(writer.tip().number, number);
        root
    }
}

fn stream(hashed_writes: HashedWrites, seed: u64, trie_cache_bytes: usize) {
    stream_with(
        WriterOptions {
            hashed_writes,
            trie_cache_bytes,
            ..common::synthetic_headers()
        },
        seed,
    );
}

/// Returns how many roots split the account trie across threads.
fn stream_with(options: WriterOptions, seed: u64) -> u64 {
    stream_idle(options, seed, 0)
}

/// [`stream_with`], with the group's changes written into the transaction between blocks
/// ([`StateWriter::flush_idle`], a follower at the head) after `idle_percent` of blocks.
fn stream_idle(options: WriterOptions, seed: u64, idle_percent: u64) -> u64 {
    stream_observed(options, seed, idle_percent, &|_| {})
}

/// [`stream_idle`], showing the writer to `observe` after the last block.
fn stream_observed(
    options: WriterOptions,
    seed: u64,
    idle_percent: u64,
    observe: &dyn Fn(&StateWriter<'_>),
) -> u64 {
    stream_of(options, Run::new(seed), idle_percent, observe)
}

/// [`stream_observed`] over the chain `run` makes.
fn stream_of(
    options: WriterOptions,
    mut run: Run,
    idle_percent: u64,
    observe: &dyn Fn(&StateWriter<'_>),
) -> u64 {
    let trie_cache_bytes = options.trie_cache_bytes;
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let genesis_root = apply_genesis(&db, &run.chain, &run.model, 97);
    assert_eq!(genesis_root, run.model.root(), "genesis root");
    let mut writer = db
        .writer(WriterOptions {
            root_every: 1,
            max_group_blocks: 4,
            ..options
        })
        .unwrap();
    let (mut roots, mut splits, mut idle_writes, mut remembered) = (0, 0, 0, 0);
    // The model's root at every block: a root that overlaps the next blocks reaches the
    // test a call late, naming its block.
    let mut expected = std::collections::HashMap::new();
    let mut check = |info: Option<RootInfo>, expected: &std::collections::HashMap<u64, _>| {
        let Some(info) = info else { return };
        splits += u64::from(info.split);
        remembered += info.remembered;
        assert_eq!(
            Some(&info.root),
            expected.get(&info.block),
            "block {}",
            info.block
        );
        roots += 1;
    };
    let overlapped = options.roots_overlap();
    let background = options.commits_in_background();
    assert_eq!(writer.commits_in_background(), background);
    // With the commit thread: groups handed over and not yet checked, by head, with the
    // model's root there.
    let mut handed: Vec<(u64, alloy_primitives::B256)> = Vec::new();
    // Blocks decoded against the writer while a group was committing (deterministic: only
    // a later call takes a landed commit in), and blocks after whose write (and root
    // launch) it still was (the commit thread was slower than the block).
    let (mut decoded_over, mut written_over, mut landed) = (0, 0, 0);
    let mut late = 0;
    for _ in 0..80 {
        decoded_over += u64::from(writer.committing_bytes() > 0);
        let info = run.step_info(&mut writer);
        written_over += u64::from(writer.committing_bytes() > 0);
        let root = run.model.root();
        let tip = writer.tip().number;
        expected.insert(tip, root);
        if !overlapped {
            assert!(info.is_some(), "a root every block");
        }
        late += u64::from(info.is_some_and(|i| i.block < tip));
        check(info, &expected);
        if idle_percent > 0 && run.rng.chance(idle_percent) {
            writer.flush_idle().unwrap();
            // A second call has nothing left to write.
            assert_eq!(writer.flush_idle().unwrap(), 0);
            idle_writes += 1;
        }
        if background {
            // What readers see is what landed, and it lands whole.
            if writer.poll_commit().unwrap() {
                landed += 1;
            }
            let committed = writer.committed_tip();
            handed.retain(|(head, _)| *head > committed.number);
            // A reader may see a commit before the writer took it in, never a part of one.
            let seen = db.view().unwrap().tip().unwrap().map(|t| t.number);
            assert!(
                seen == Some(committed.number) || handed.iter().any(|(h, _)| Some(*h) == seen),
                "readers see block {seen:?}; landed {}, handed over {handed:?}",
                committed.number
            );
        }
        // Random group sizes: commit on the count bound or at random.
        if background && (writer.should_commit() || run.rng.chance(30)) {
            let info = writer.start_commit().unwrap().expect("a group to commit");
            check(info.root, &expected);
            assert_eq!(info.head, writer.tip().number);
            handed.push((info.head, root));
            // Sometimes it is waited for at once; otherwise the next blocks are decoded
            // and written (and their roots computed) over it while it commits.
            if run.rng.chance(25) {
                let done = writer.finish_commit().unwrap().expect("a commit under way");
                landed += 1;
                assert_eq!(done.head, info.head);
                assert_eq!(writer.committed_tip(), writer.tip());
                let view = db.view().unwrap();
                assert_eq!(view.tip().unwrap(), Some(writer.tip()));
                assert_eq!(view.last_root().unwrap(), Some((info.head, root)));
                assert_eq!(view.state_root_from_scratch().unwrap(), root);
                handed.clear();
            }
        } else if writer.should_commit() || run.rng.chance(30) {
            let info = writer.commit().unwrap().expect("a group to commit");
            check(info.root, &expected);
            assert_eq!(info.head, writer.tip().number);
            let view = db.view().unwrap();
            assert_eq!(view.tip().unwrap(), Some(writer.tip()));
            assert_eq!(view.last_root().unwrap(), Some((info.head, root)));
            assert_eq!(view.state_root_from_scratch().unwrap(), root);
            assert_eq!(
                view.header(info.head).unwrap().unwrap().state_root,
                Some(root)
            );
        }
    }
    check(writer.finish_root().unwrap(), &expected);
    assert_eq!(roots, 80);
    if background {
        eprintln!("{landed} commits landed, {decoded_over} blocks decoded and {written_over} written over one under way");
        assert!(
            landed >= 10 && decoded_over >= 10,
            "{landed} commits landed, {decoded_over} blocks decoded over one under way"
        );
    }
    // Overlapped, a root ran while the next block was decoded and written whenever no
    // commit or idle write came between.
    if overlapped {
        assert!(
            late >= 20,
            "{late} of 80 roots ran on while the next block was written"
        );
    } else {
        assert_eq!(late, 0);
    }
    observe(&writer);
    if idle_percent > 0 {
        assert!(idle_writes >= 10, "{idle_writes} idle writes");
    }
    let cache = writer.trie_cache_stats();
    // Sibling leaves are taken from the hashes kept with their node only through a cache.
    match trie_cache_bytes {
        0 => assert_eq!(remembered, 0),
        TINY_CACHE => {}
        _ => assert!(remembered > 0, "no leaf taken from a kept hash"),
    }
    match trie_cache_bytes {
        0 => assert_eq!((cache.hits, cache.misses, cache.entries), (0, 0, 0)),
        TINY_CACHE => assert!(
            cache.evicted > 0 && cache.bytes <= TINY_CACHE as u64,
            "{cache:?}"
        ),
        _ => assert!(cache.hits > cache.misses && cache.evicted == 0, "{cache:?}"),
    }
    writer.commit().unwrap();
    assert_eq!(writer.committed_tip(), writer.tip());
    let view = db.view().unwrap();
    run.model.assert_held_by(&view, &run.touched);
    // Every block's header row holds its root, including those stored before it landed.
    for (block, root) in &expected {
        assert_eq!(
            view.header(*block).unwrap().unwrap().state_root,
            Some(*root),
            "block {block}"
        );
    }
    // revm's view agrees.
    for a in run.touched.iter().take(100) {
        let info = view.basic_ref(*a).unwrap();
        let expected = run.model.accounts.get(a);
        assert_eq!(info.as_ref().map(|i| i.nonce), expected.map(|s| s.nonce));
        assert_eq!(
            info.as_ref().map(|i| i.balance),
            expected.map(|s| s.balance)
        );
        if let Some(s) = expected {
            let code = view.code_by_hash_ref(s.code_hash).unwrap();
            assert_eq!(
                code.original_bytes(),
                run.model
                    .codes
                    .get(&s.code_hash)
                    .cloned()
                    .unwrap_or_default()
            );
        }
        assert_eq!(
            view.storage_ref(*a, U256::from(3)).unwrap(),
            run.model.slot(a, &U256::from(3))
        );
    }
    let n = writer.tip().number;
    assert_eq!(view.block_hash_ref(n).unwrap(), writer.tip().hash);
    // No stale trie node survived the incremental updates: the tables hold exactly what a
    // genesis of the final state stores.
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = open(fresh_dir.path());
    apply_genesis(&fresh, &Chain::genesis(), &run.model, 1000);
    let trie_entries = |db: &gigas_statedb::StateDb| {
        db.table_stats()
            .unwrap()
            .into_iter()
            .filter(|t| {
                matches!(
                    t.table,
                    gigas_statedb::AnyTable::Trie(
                        gigas_statedb::TrieTable::AccountsTrie
                            | gigas_statedb::TrieTable::StoragesTrie
                    )
                )
            })
            .map(|t| t.entries)
            .collect::<Vec<_>>()
    };
    assert_eq!(trie_entries(&db), trie_entries(&fresh));
    // The enumeration index, as the writer's and the reader's.
    assert_eq!(KeyIndex::len(&view).unwrap(), run.index.key_count());
    for i in 0..run.index.key_count() {
        let key = run.index.key_at(i).unwrap().unwrap();
        assert_eq!(view.key_at(i).unwrap(), Some(key));
        assert_eq!(view.index_of(&key).unwrap(), Some(i));
    }
    drop(view);
    // The stored nodes' hashes are right, not only their count: roots that walk them, in a
    // writer without caches or a trie in memory, take every unchanged subtrie's hash from
    // them.
    drop(writer);
    let mut walker = db
        .writer(WriterOptions {
            root_every: 1,
            trie_cache_bytes: 0,
            sparse_trie_bytes: 0,
            ..common::synthetic_headers()
        })
        .unwrap();
    for _ in 0..5 {
        let root = run.step(&mut walker).expect("a root every block");
        assert_eq!(
            root,
            run.model.root(),
            "block {} walked",
            walker.tip().number
        );
    }
    walker.commit().unwrap();
    splits
}

/// A trie cache budget smaller than one root's nodes: every root evicts.
const TINY_CACHE: usize = 2048;

/// A database in a temporary directory holding `run`'s genesis.
fn genesis_db(run: &Run) -> (tempfile::TempDir, gigas_statedb::StateDb) {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    apply_genesis(&db, &run.chain, &run.model, 97);
    (dir, db)
}

/// Hashes that do not fit the block's ChangeSet (another block's) are refused before
/// anything is written: the tip and the open group stay, and the block with its own hashes
/// applies after.
#[test]
fn key_hashes_that_do_not_fit_the_block_are_refused_and_leave_no_trace() {
    let mut run = Run::new(61);
    let (_dir, db) = genesis_db(&run);
    let mut writer = db
        .writer(WriterOptions {
            root_every: 1,
            ..common::synthetic_headers()
        })
        .unwrap();
    run.step(&mut writer);
    let tip = writer.tip();
    let (_, changes, body, decoded) = run.next_body(&writer);
    let (header, hash) = run.chain.next(&changes);
    // The same block less its last account: one account hash too many for it.
    assert!(!changes.accounts().is_empty());
    let mut b = gigas_primitives::ChangeSetBuilder::new();
    for (address, change) in &changes.accounts()[..changes.accounts().len() - 1] {
        match change.state {
            Some(state) => b.account(*address, state, change.storage_wiped),
            None => b.destroyed(*address),
        }
    }
    let fewer = b.build();
    let wrong = writer.apply(BlockToApply {
        hashed: Some(&decoded.hashed),
        ..block(&header, hash, &fewer, &decoded.new_keys)
    });
    assert!(
        matches!(wrong, Err(StateDbError::HashesDoNotFit { .. })),
        "{wrong:?}"
    );
    assert_eq!(
        writer.tip(),
        tip,
        "nothing of the refused block was written"
    );
    assert_eq!(writer.group_blocks(), 1, "the open group stays");
    let root = writer
        .apply(BlockToApply {
            hashed: Some(&decoded.hashed),
            ..block(&header, hash, &changes, &decoded.new_keys)
        })
        .unwrap();
    run.index.extend(&body.new_keys).unwrap();
    run.model.apply(&changes);
    assert_eq!(root.map(|r| r.root), Some(run.model.root()));
}

/// The account trie in memory loaded ahead (`preload_account_trie`) at the start and
/// between groups, then changed by roots: every root equals the model's, whole and within
/// a budget that stops the loading part way. An open group refuses it.
#[test]
fn the_account_trie_loaded_ahead_gives_the_same_roots() {
    for (seed, budget) in [(71, 64 << 20), (73, 24 << 10)] {
        let mut run = Run::with_accounts(seed, 3000);
        let (_dir, db) = genesis_db(&run);
        let mut writer = db
            .writer(WriterOptions {
                root_every: 1,
                overlap_roots: false,
                root_threads: 4,
                sparse_trie_bytes: budget,
                ..common::synthetic_headers()
            })
            .unwrap();
        let first = writer
            .preload_account_trie(usize::MAX)
            .unwrap()
            .expect("a trie in memory");
        assert!(first.nodes > 0 && first.loaded_leaves > 0, "{first:?}");
        assert!(
            first.bytes <= (budget / 4 * 3 + 8192) as u64,
            "{first:?} over three quarters of {budget}"
        );
        for i in 0..45 {
            let root = run.step(&mut writer).expect("a root every block");
            let number = run.chain.parent.number;
            assert_eq!(root, run.model.root(), "seed {seed}, block {number}");
            if i % 15 == 14 {
                writer.commit().unwrap();
                let again = writer.preload_account_trie(usize::MAX).unwrap().unwrap();
                assert!(again.nodes > 0, "{again:?}");
            }
        }
        run.step(&mut writer);
        assert!(matches!(
            writer.preload_account_trie(usize::MAX),
            Err(StateDbError::Invariant { .. })
        ));
    }
}

#[test]
fn random_stream_sorted_hashed_writes() {
    stream(HashedWrites::SortedPerGroup, 1, 64 << 20);
}

#[test]
fn random_stream_with_the_trie_cache_evicting_every_root() {
    stream(HashedWrites::SortedPerGroup, 5, TINY_CACHE);
}

/// Layered roots (the group in memory over the last commit) split across four threads
/// whenever the root node allows: every root equals the model's, and the stored nodes the
/// split writes are exactly those of a genesis of the final state.
#[test]
fn random_stream_layered_roots_split_across_threads() {
    let splits = stream_with(
        WriterOptions {
            root_threads: 4,
            root_split_min_accounts: 1,
            ..common::synthetic_headers()
        },
        3,
    );
    assert!(splits >= 40, "{splits} of 80 roots split the account trie");
}

/// Layered roots through the trie cache, split across four threads: each thread's walk
/// seeks its first nibble's nodes in its own shard of the cache and takes unchanged
/// sibling leaves from the hashes kept with their node. Every root equals the model's.
#[test]
fn random_stream_layered_roots_through_the_trie_cache_split_across_threads() {
    let splits = stream_with(
        WriterOptions {
            root_threads: 4,
            root_split_min_accounts: 1,
            trie_cache_bytes: 64 << 20,
            ..common::synthetic_headers()
        },
        9,
    );
    assert!(splits >= 40, "{splits} of 80 roots split the account trie");
}

/// The same with a cache smaller than one root's nodes, and idle writes between blocks.
#[test]
fn random_stream_layered_roots_split_through_an_evicting_trie_cache_with_idle_writes() {
    let splits = stream_idle(
        WriterOptions {
            root_threads: 4,
            root_split_min_accounts: 1,
            trie_cache_bytes: TINY_CACHE,
            ..common::synthetic_headers()
        },
        10,
        50,
    );
    assert!(splits >= 40, "{splits} of 80 roots split the account trie");
}

/// Layered roots through the account trie held in memory, its parts set on four threads,
/// with idle writes between blocks: every root equals the model's, and the nodes it stores
/// are those of a genesis of the final state.
#[test]
fn random_stream_layered_roots_through_the_trie_in_memory() {
    let (splits, stats) = stream_sparse(64 << 20, 12, false);
    assert!(splits >= 40, "{splits} of 80 roots split the account trie");
    assert!(stats.nodes > 0 && stats.pruned == 0, "{stats:?}");
}

/// The same with each root running while the next block is decoded against the writer
/// and written ([`WriterOptions::overlap_roots`]): the reads see the layer the root holds
/// under the newer writes, every root reaches the test a call late and equals the
/// model's at its block, and every header row ends with its block's root.
#[test]
fn random_stream_roots_through_the_trie_in_memory_overlapping_the_next_blocks() {
    let (splits, stats) = stream_sparse(64 << 20, 14, true);
    assert!(splits >= 40, "{splits} of 80 roots split the account trie");
    assert!(stats.nodes > 0, "{stats:?}");
}

/// The same within a budget so small that every root folds what it loaded back into
/// hashes, to load it again from the stored nodes the next time.
#[test]
fn random_stream_layered_roots_through_the_trie_in_memory_pruned_every_root() {
    let (_, stats) = stream_sparse(1, 13, true);
    assert!(stats.pruned > 0, "{stats:?}");
}

/// Each group committed on the commit thread ([`WriterOptions::commit_thread`]) while
/// the next blocks are decoded against the writer and written, and their roots computed
/// over the last landed commit with the committing group's copy laid over it: every root
/// equals the model's, readers see only whole groups, and the tables end as a genesis of
/// the final state would have them (no node lost or left stale by the copy's pruning).
#[test]
fn random_stream_commits_on_their_own_thread() {
    for (seed, budget) in [(41, 64 << 20), (42, 1)] {
        stream_observed(
            WriterOptions {
                root_threads: 2,
                root_split_min_accounts: 1,
                sparse_trie_bytes: budget,
                overlap_roots: true,
                commit_thread: true,
                ..common::synthetic_headers()
            },
            seed,
            20,
            &|_| {},
        );
    }
}

/// Tries of one to three accounts, emptied and refilled: while the keys lie under fewer
/// than two first nibbles, the root is the one part's top lifted a nibble (or empty), and
/// no root node is stored; with more, the root node again.
#[test]
fn tiny_tries_through_the_trie_in_memory() {
    for (accounts, seed) in [(1, 21), (2, 22), (3, 23)] {
        let stats = std::cell::Cell::new(None);
        stream_of(
            WriterOptions {
                root_threads: 2,
                root_split_min_accounts: 1,
                sparse_trie_bytes: 64 << 20,
                overlap_roots: true,
                ..common::synthetic_headers()
            },
            Run::with_accounts(seed, accounts),
            30,
            &|writer| stats.set(Some(writer.sparse_trie_stats())),
        );
        assert!(stats.take().is_some());
    }
}

fn stream_sparse(
    budget: usize,
    seed: u64,
    overlap_roots: bool,
) -> (u64, gigas_statedb::SparseTrieStats) {
    let stats = std::cell::Cell::new(None);
    let splits = stream_observed(
        WriterOptions {
            overlap_roots,
            root_threads: 4,
            root_split_min_accounts: 1,
            sparse_trie_bytes: budget,
            ..common::synthetic_headers()
        },
        seed,
        50,
        &|writer| stats.set(Some(writer.sparse_trie_stats())),
    );
    let stats = stats.take().expect("the stream observed its writer");
    assert!(stats.loaded_leaves > 0, "{stats:?}");
    (splits, stats)
}

/// Roots inside the write transaction through the trie cache.
#[test]
fn random_stream_roots_in_the_transaction_through_the_trie_cache() {
    stream_with(
        WriterOptions {
            layered_roots: false,
            trie_cache_bytes: 64 << 20,
            ..common::synthetic_headers()
        },
        11,
    );
}

/// Layered roots on one thread: the account trie walked whole over the layer.
#[test]
fn random_stream_layered_roots_on_one_thread() {
    let splits = stream_with(
        WriterOptions {
            root_threads: 1,
            ..common::synthetic_headers()
        },
        4,
    );
    assert_eq!(splits, 0);
}

/// Roots inside the write transaction (the path the trie cache takes), with the cache off.
#[test]
fn random_stream_roots_in_the_transaction() {
    stream_with(
        WriterOptions {
            layered_roots: false,
            ..common::synthetic_headers()
        },
        6,
    );
}

/// Idle writes between blocks: a block's changes reach the transaction before its group's
/// commit, some keys (hot accounts, wiped and re-created storage, trie nodes) several
/// times in one group. Every root equals the model's, every commit's from-scratch root
/// equals it, and the committed trie nodes are a genesis's of the final state.
#[test]
fn random_stream_with_idle_writes_between_blocks() {
    stream_idle(common::synthetic_headers(), 7, 50);
}

/// The same with roots inside the write transaction, which write everything first.
#[test]
fn random_stream_with_idle_writes_and_roots_in_the_transaction() {
    stream_idle(
        WriterOptions {
            layered_roots: false,
            ..common::synthetic_headers()
        },
        8,
        50,
    );
}

#[test]
fn random_stream_changeset_order_hashed_writes_without_trie_cache() {
    stream(HashedWrites::ChangeSetOrder, 2, 0);
}

#[test]
fn roots_every_k_blocks_survive_restarts_and_the_trie_off_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::new(3);
    {
        let db = open(dir.path());
        apply_genesis(&db, &run.chain, &run.model, 1000);
    }
    // K = 3, commits every 2 blocks, reopening the database every 5 blocks: the changed keys
    // of blocks without a root cross commits and restarts.
    for round in 0..6 {
        let db = open(dir.path());
        let mut writer = db
            .writer(WriterOptions {
                root_every: 3,
                max_group_blocks: 2,
                ..common::synthetic_headers()
            })
            .unwrap();
        for _ in 0..5 {
            let root = run.step(&mut writer);
            let number = writer.tip().number;
            assert_eq!(root.is_some(), number.is_multiple_of(3), "block {number}");
            if let Some(root) = root {
                assert_eq!(root, run.model.root(), "block {number}");
            }
            if writer.should_commit() {
                writer.commit().unwrap();
            }
        }
        writer.commit().unwrap();
        drop(writer);
        // A proof is against the head's state even between roots.
        let view = db.view().unwrap();
        let a = address(round);
        let proof = view.proof(&a, &[U256::from(1)]).unwrap();
        assert_eq!(proof.state_root, run.model.root());
    }
    // The trie off for a while: nothing tracked, proofs refused, then a root rebuilds it.
    let db = open(dir.path());
    {
        let mut writer = db
            .writer(WriterOptions {
                root_every: 0,
                max_group_blocks: 3,
                ..common::synthetic_headers()
            })
            .unwrap();
        for _ in 0..7 {
            assert!(run.step(&mut writer).is_none());
            if writer.should_commit() {
                writer.commit().unwrap();
            }
        }
        writer.commit().unwrap();
    }
    assert!(matches!(
        db.view().unwrap().proof(&address(1), &[]),
        Err(StateDbError::TrieStale { .. })
    ));
    let mut writer = db.writer(common::synthetic_headers()).unwrap();
    let root = run.step(&mut writer).expect("root_every 1");
    assert_eq!(root, run.model.root());
    assert_eq!(db.metrics().trie_rebuilds.get(), 1);
    for _ in 0..5 {
        assert_eq!(run.step(&mut writer), Some(run.model.root()));
        writer.commit().unwrap();
    }
    let view = db.view().unwrap();
    assert_eq!(view.state_root_from_scratch().unwrap(), run.model.root());
    run.model.assert_held_by(&view, &run.touched);
}

#[test]
fn a_group_never_committed_leaves_the_previous_head() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = Run::new(4);
    let committed_model;
    let committed_tip;
    {
        let db = open(dir.path());
        apply_genesis(&db, &run.chain, &run.model, 50);
        let mut writer = db.writer(common::synthetic_headers()).unwrap();
        for _ in 0..3 {
            run.step(&mut writer);
            writer.commit().unwrap();
        }
        committed_model = run.model.clone();
        committed_tip = writer.tip();
        for _ in 0..4 {
            run.step(&mut writer);
        }
        assert_eq!(writer.committed_tip(), committed_tip);
        assert_ne!(writer.tip(), committed_tip);
        // Readers see only the commit.
        let view = db.view().unwrap();
        assert_eq!(view.tip().unwrap(), Some(committed_tip));
        committed_model.assert_held_by(&view, &run.touched);
        drop(view);
        drop(writer);
        assert_eq!(db.metrics().groups_discarded.get(), 1);
    }
    let db = open(dir.path());
    let view = db.view().unwrap();
    assert_eq!(view.tip().unwrap(), Some(committed_tip));
    committed_model.assert_held_by(&view, &run.touched);
    assert_eq!(
        view.state_root_from_scratch().unwrap(),
        committed_model.root()
    );
    assert!(view.header(committed_tip.number + 1).unwrap().is_none());
    drop(view);
    // A new writer starts from the committed head, and an explicit discard does the same.
    let mut writer = db.writer(common::synthetic_headers()).unwrap();
    assert_eq!(writer.tip(), committed_tip);
    let resume = |seed| Run {
        rng: Rng::new(seed),
        accounts: ACCOUNTS,
        model: committed_model.clone(),
        chain: Chain {
            parent: db
                .view()
                .unwrap()
                .header(committed_tip.number)
                .unwrap()
                .unwrap()
                .header,
            hash: committed_tip.hash,
        },
        index: {
            let mut index = MemoryKeyIndex::new();
            let view = db.view().unwrap();
            let keys: Vec<_> = (0..KeyIndex::len(&view).unwrap())
                .map(|i| view.key_at(i).unwrap().unwrap())
                .collect();
            index.extend(&keys).unwrap();
            index
        },
        touched: run.touched.clone(),
    };
    let mut again = resume(99);
    for _ in 0..3 {
        again.step(&mut writer);
    }
    writer.discard();
    assert_eq!(writer.tip(), committed_tip);
    assert!(matches!(writer.commit(), Ok(None)));
    // The same writer goes on from the committed head: nothing of the discarded group (its
    // trie nodes in the writer's cache included) shows in the next roots.
    let mut other = resume(7);
    for _ in 0..4 {
        let root = other.step(&mut writer).expect("a root every block");
        assert_eq!(root, other.model.root(), "block {}", writer.tip().number);
        writer.commit().unwrap();
    }
    assert_eq!(
        db.view().unwrap().state_root_from_scratch().unwrap(),
        other.model.root()
    );
}

#[test]
fn blocks_that_do_not_follow_the_tip_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let mut run = Run::new(5);
    apply_genesis(&db, &run.chain, &run.model, 1000);
    let mut writer = db.writer(common::synthetic_headers()).unwrap();
    run.step(&mut writer);
    let tip = writer.tip();
    let changes = gigas_primitives::ChangeSet::default();
    let mut skipped = run.chain.clone();
    skipped.next(&changes);
    let (far, far_hash) = skipped.next(&changes);
    assert!(matches!(
        writer.apply(block(&far, far_hash, &changes, &[])),
        Err(StateDbError::NotNext { expected, got }) if expected == tip.number + 1 && got == tip.number + 2
    ));
    let mut fork = run.chain.clone();
    fork.hash = alloy_primitives::B256::repeat_byte(7);
    let (orphan, orphan_hash) = fork.next(&changes);
    assert!(matches!(
        writer.apply(block(&orphan, orphan_hash, &changes, &[])),
        Err(StateDbError::WrongParent { .. })
    ));
    // The open group survived both refusals.
    assert_eq!(writer.tip(), tip);
    writer
        .commit()
        .unwrap()
        .expect("the first block is still there");
    assert_eq!(db.head().unwrap(), Some(tip));
    // One writer at a time.
    assert!(matches!(
        db.writer(common::synthetic_headers()),
        Err(StateDbError::WriterBusy)
    ));

    // A block that gives an indexed key a new index is refused after writing began: the
    // open group goes with it, back to the commit.
    run.step(&mut writer);
    assert_ne!(writer.tip(), tip);
    let known = KeyIndex::key_at(&writer, 0)
        .unwrap()
        .expect("an indexed key");
    let mut next = run.chain.clone();
    let (header, hash) = next.next(&changes);
    assert!(matches!(
        writer.apply(block(&header, hash, &changes, &[known])),
        Err(StateDbError::KeyAlreadyIndexed { index: 0, .. })
    ));
    assert_eq!(writer.tip(), tip);
    assert_eq!(db.metrics().groups_discarded.get(), 1);
    drop(writer);

    // The time bound: with no age allowed, one block is a group.
    let mut writer = db
        .writer(WriterOptions {
            max_group_blocks: 100,
            max_group_age: std::time::Duration::ZERO,
            ..common::synthetic_headers()
        })
        .unwrap();
    assert!(!writer.should_commit());
    let mut chain = Chain {
        parent: db
            .view()
            .unwrap()
            .header(tip.number)
            .unwrap()
            .unwrap()
            .header,
        hash: tip.hash,
    };
    let (header, hash) = chain.next(&changes);
    writer.apply(block(&header, hash, &changes, &[])).unwrap();
    assert!(writer.should_commit());
    assert_eq!(writer.commit().unwrap().map(|c| c.blocks), Some(1));
}

/// A group is also bounded by the memory its changes hold: with a bound of one byte the
/// first block asks for a commit; without, a group of many blocks does not.
#[test]
fn a_group_is_bounded_by_the_memory_its_changes_hold() {
    for (max_group_bytes, expect) in [(1, true), (u64::MAX, false)] {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let mut run = Run::new(9);
        apply_genesis(&db, &run.chain, &run.model, 97);
        let mut writer = db
            .writer(WriterOptions {
                max_group_blocks: 1000,
                max_group_age: std::time::Duration::from_secs(3600),
                max_group_bytes,
                ..common::synthetic_headers()
            })
            .unwrap();
        for _ in 0..5 {
            run.step(&mut writer);
        }
        assert!(writer.group_bytes() > 0);
        assert_eq!(writer.should_commit(), expect, "bound {max_group_bytes}");
    }
}

/// The account trie in memory counts toward the group's memory bound what it holds beyond
/// its budget (the nodes a group changed stay until its commit): with a budget of one byte
/// the group reaches a bound that its layer alone stays under, and the commit gives the
/// excess back; with a budget that holds the trie, it does not.
#[test]
fn the_trie_in_memory_beyond_its_budget_counts_toward_the_group_bound() {
    // Above the three blocks' layer (about 14 KB here), below it with the trie (about
    // 54 KB more).
    const BOUND: u64 = 32 << 10;
    for (sparse_trie_bytes, expect) in [(1, true), (64 << 20, false)] {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let mut run = Run::new(31);
        apply_genesis(&db, &run.chain, &run.model, 97);
        let mut writer = db
            .writer(WriterOptions {
                max_group_blocks: 1000,
                max_group_age: std::time::Duration::from_secs(3600),
                max_group_bytes: BOUND,
                sparse_trie_bytes,
                root_threads: 2,
                overlap_roots: true,
                ..common::synthetic_headers()
            })
            .unwrap();
        for _ in 0..3 {
            run.step(&mut writer);
        }
        // The trie's size is known once its root lands.
        writer.finish_root().unwrap();
        let held = writer.group_bytes();
        assert_eq!(
            writer.should_commit(),
            expect,
            "budget {sparse_trie_bytes}: {held} bytes"
        );
        writer.commit().unwrap();
        // The commit drains the trie and folds it back within its budget.
        assert!(
            writer.group_bytes() < BOUND,
            "after the commit: {}",
            writer.group_bytes()
        );
        assert_eq!(
            writer.sparse_trie_stats().pruned > 0,
            expect,
            "budget {sparse_trie_bytes}"
        );
    }
}

/// A commit that fails on the commit thread (here the map is full: the environment has room
/// for the genesis and a few hundred blocks) discards both groups, the one it was
/// committing and the one applied over it: the writer's tip goes back to the last commit
/// that landed, readers and a reopened database hold exactly that state, and nothing of a
/// failed group shows.
#[test]
fn a_failed_commit_on_the_commit_thread_discards_both_groups() {
    let mut run = Run::new(51);
    // What the genesis takes, measured on a scratch copy.
    let genesis_bytes = {
        let scratch = tempfile::tempdir().unwrap();
        let db = open(scratch.path());
        apply_genesis(&db, &run.chain, &run.model, 97);
        db.refresh_size_metrics();
        u64::try_from(db.metrics().used_bytes.get()).unwrap()
    };
    assert!(genesis_bytes > 0);
    let options = gigas_statedb::StateDbOptions {
        max_size_bytes: usize::try_from(genesis_bytes).unwrap() + (512 << 10),
        growth_step_bytes: 64 << 10,
        ..common::small_options()
    };
    let dir = tempfile::tempdir().unwrap();
    let db = gigas_statedb::StateDb::open(dir.path(), options.clone()).unwrap();
    apply_genesis(&db, &run.chain, &run.model, 97);
    let mut writer = db
        .writer(WriterOptions {
            root_every: 1,
            root_threads: 2,
            sparse_trie_bytes: 64 << 20,
            overlap_roots: true,
            commit_thread: true,
            ..common::synthetic_headers()
        })
        .unwrap();
    assert!(writer.commits_in_background());
    // The model at each head handed over, and at the genesis.
    let mut models = std::collections::HashMap::new();
    models.insert(writer.tip().number, run.model.clone());
    let mut failed = None;
    for _ in 0..2000 {
        let (number, changes, body, decoded) = run.next_body(&writer);
        assert_eq!(decoded.changes, changes, "block {number}");
        let (header, hash) = run.chain.next(&changes);
        // A failed commit surfaces at the first call that takes it in.
        let step = writer
            .apply(block(&header, hash, &changes, &decoded.new_keys))
            .and_then(|_| writer.poll_commit())
            .and_then(|_| writer.start_commit());
        if let Err(e) = step {
            failed = Some((number, e));
            break;
        }
        run.index.extend(&body.new_keys).unwrap();
        run.model.apply(&changes);
        models.insert(number, run.model.clone());
    }
    let (number, error) = failed.expect("the map fills up");
    let committed = writer.committed_tip();
    assert_eq!(writer.tip(), committed, "block {number}: {error}");
    assert!(
        committed.number + 1 < number,
        "a group was under way when block {number} failed: {error}"
    );
    assert!(db.metrics().groups_discarded.get() >= 1);
    let model = &models[&committed.number];
    let view = db.view().unwrap();
    assert_eq!(view.tip().unwrap(), Some(committed));
    model.assert_held_by(&view, &run.touched);
    assert_eq!(view.state_root_from_scratch().unwrap(), model.root());
    assert!(view.header(committed.number + 1).unwrap().is_none());
    drop(view);
    drop(writer);
    drop(db);
    let db = gigas_statedb::StateDb::open(dir.path(), options).unwrap();
    let view = db.view().unwrap();
    assert_eq!(view.tip().unwrap(), Some(committed));
    model.assert_held_by(&view, &run.touched);
}

/// A follower's decode thread: blocks decoded against an [`AheadState`] up to four blocks
/// before the writer applies them, with groups committed (on this thread or on the commit
/// thread) in between, so that its snapshot is renewed under blocks it still holds. Every
/// block decodes to the changes and new keys the sequencer packed, its index length agrees
/// with the writer's once the writer caught up, and what a renewal forgot is exactly what
/// the database made durable.
#[test]
fn blocks_decoded_ahead_of_the_writer_across_commits_decode_exactly() {
    use gigas_statedb::AheadState;
    use gigas_statediff::VerifiedDiff;
    for (seed, commit_thread) in [(91, false), (93, true)] {
        let mut run = Run::new(seed);
        let (_dir, db) = genesis_db(&run);
        let mut writer = db
            .writer(WriterOptions {
                root_every: 1,
                max_group_blocks: 5,
                sparse_trie_bytes: if commit_thread { 64 << 20 } else { 0 },
                overlap_roots: commit_thread,
                commit_thread,
                ..common::synthetic_headers()
            })
            .unwrap();
        assert_eq!(writer.commits_in_background(), commit_thread);
        let mut ahead = AheadState::open(&db, false).unwrap();
        assert_eq!(ahead.tip(), writer.tip());
        let mut queue: std::collections::VecDeque<VerifiedDiff> = Default::default();
        let (mut renewals, mut wipes, mut deep) = (0, 0, 0);
        for _ in 0..90 {
            // The sequencer's next block, over the model (which runs ahead with it).
            let number = run.chain.parent.number + 1;
            let raw = random_changes(&mut run.rng, &run.model, run.accounts, number);
            let changes = consistent(raw, &run.model);
            let prior = PriorValues::capture(&changes, &common::ModelPrior(&run.model)).unwrap();
            let body = encode_body(&changes, &run.index, &prior).unwrap();
            renewals += u64::from(ahead.renew().unwrap());
            let decoded = decode_body(&body.bytes, &ahead, &ahead)
                .unwrap_or_else(|e| panic!("block {number} does not decode ahead: {e}"));
            assert_eq!(decoded.changes, changes, "block {number}");
            assert_eq!(decoded.new_keys, body.new_keys, "block {number}");
            run.index.extend(&body.new_keys).unwrap();
            assert_eq!(
                ahead_len(&ahead) + body.new_keys.len() as u64,
                run.index.len().unwrap()
            );
            wipes += changes
                .accounts()
                .iter()
                .filter(|(_, c)| c.storage_wiped)
                .count();
            run.model.apply(&changes);
            let (header, hash) = run.chain.next(&changes);
            let diff = VerifiedDiff {
                header,
                hash,
                signature: alloy_primitives::Signature::new(U256::from(1), U256::from(1), false),
                changes,
                hashed: decoded.hashed,
                new_keys: decoded.new_keys,
                prior: decoded.prior,
                commitment: None,
                lattice: None,
            };
            ahead.record(&diff).unwrap();
            assert_eq!(ahead.tip(), diff.tip());
            queue.push_back(diff);
            // The writer takes blocks when the rng says so, and always at four behind.
            while queue.len() > 4 || (!queue.is_empty() && run.rng.chance(40)) {
                let diff = queue.pop_front().unwrap();
                deep = deep.max(queue.len() + 1);
                writer.apply(BlockToApply::from(&diff)).unwrap();
                if writer.should_commit() || run.rng.chance(20) {
                    if commit_thread {
                        writer.start_commit().unwrap();
                        if run.rng.chance(50) {
                            writer.finish_commit().unwrap();
                        }
                    } else {
                        writer.commit().unwrap();
                    }
                }
            }
            if queue.is_empty() {
                assert_eq!(KeyIndex::len(&writer).unwrap(), ahead_len(&ahead));
            }
        }
        // The writer catches up and commits: a renewal then holds nothing above the head.
        for diff in queue.drain(..) {
            writer.apply(BlockToApply::from(&diff)).unwrap();
        }
        writer.commit().unwrap();
        writer.finish_commit().unwrap();
        assert!(ahead.renew().unwrap());
        let stats = ahead.stats();
        assert_eq!(
            (stats.tip, stats.base, stats.entries),
            (90, 90, 0),
            "{stats:?}"
        );
        assert_eq!(writer.tip(), ahead.tip());
        run.model.assert_held_by(&db.view().unwrap(), &run.touched);
        eprintln!("seed {seed}: {renewals} renewals, {wipes} wipes, up to {deep} blocks ahead");
        assert!(
            renewals >= 10 && deep >= 4,
            "{renewals} renewals, {deep} ahead"
        );
        assert!(wipes > 0, "the stream wiped no storage");
    }
}

fn ahead_len(ahead: &gigas_statedb::AheadState<'_>) -> u64 {
    KeyIndex::len(ahead).unwrap()
}
