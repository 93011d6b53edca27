//! Simulated power loss under `Durability::Periodic`, the follower's durability: commits are
//! not synced, durable points are.
//!
//! The disk is simulated as LazyFS does: what was synced survives and unsynced writes are
//! lost, except that any data page written since the last durable point may have reached
//! the disk anyway (the kernel writes dirty pages back when it likes), so each trial keeps a
//! random share of them. The meta pages are the durable point's: a weak meta page that the
//! kernel wrote back is refused after a reboot by MDBX itself (its boot id differs), which
//! one boot cannot simulate. What must hold in every trial: the database opens, its head is
//! the last durable point, every account and slot and the MPT root are that block's, and the
//! blocks after it apply again to the same final state.
//!
//! The model holds only if the writer's durable points are the only ones: without a sync
//! period MDBX makes a steady point of its own whenever the file must grow, after which it
//! may reuse the pages of the older one, and the trials here then failed with a corrupted
//! `HashedStorages` page (the simulated disk missed a durable point the real one had). The
//! store sets a period (four times its schedule's) that turns that off, as a backstop only.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use alloy_consensus::Header;
use alloy_primitives::B256;
use common::{
    apply_genesis, block, consistent, new_keys, random_changes, random_model, small_options, Chain,
    Model, Rng,
};
use gigas_primitives::ChangeSet;
use gigas_statedb::{
    Durability, StateDb, StateDbOptions, StateWriter, SyncSchedule, WriterOptions,
};
use gigas_statediff::{MemoryKeyIndex, StateKey};

const ACCOUNTS: u64 = 3_000;
const PAGE: usize = 4096;
/// MDBX's meta pages, at the start of the file.
const META_PAGES: usize = 3;

/// Durable points on this schedule (`background`: written back on a thread), `PAGE`-byte
/// pages.
fn scheduled(period: Duration, bytes: u64, background: bool) -> StateDbOptions {
    StateDbOptions {
        durability: Durability::Periodic(SyncSchedule {
            period,
            bytes,
            background,
        }),
        page_size: Some(PAGE),
        ..small_options()
    }
}

/// Durable points only when the test makes them.
fn periodic() -> StateDbOptions {
    scheduled(Duration::from_secs(3600), u64::MAX, false)
}

struct Recorded {
    header: Header,
    hash: B256,
    changes: ChangeSet,
    keys: Vec<StateKey>,
}

fn data_file(dir: &Path) -> std::path::PathBuf {
    dir.join("mdbx.dat")
}

/// The file after a power loss: `synced` (the file at the last durable point) with a random
/// share of the data pages `now` holds differently.
fn after_power_loss(synced: &[u8], now: &[u8], rng: &mut Rng, percent: u64) -> (Vec<u8>, usize) {
    let mut disk = synced.to_vec();
    if now.len() > disk.len() {
        // A grown file: the new pages are zeros unless written back.
        disk.resize(now.len(), 0);
    }
    let mut kept = 0;
    for page in META_PAGES..now.len() / PAGE {
        let range = page * PAGE..(page + 1) * PAGE;
        if disk[range.clone()] != now[range.clone()] && rng.chance(percent) {
            disk[range.clone()].copy_from_slice(&now[range]);
            kept += 1;
        }
    }
    (disk, kept)
}

/// A database under [`periodic`] with a genesis of `ACCOUNTS` random accounts, and what
/// the blocks after it are drawn from.
struct Start {
    dir: tempfile::TempDir,
    rng: Rng,
    model: Model,
    chain: Chain,
    index: MemoryKeyIndex,
    db: StateDb,
}

fn start(seed: u64) -> Start {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed);
    let model = random_model(&mut rng, ACCOUNTS);
    let chain = Chain::genesis();
    let db = StateDb::open(dir.path(), periodic()).unwrap();
    apply_genesis(&db, &chain, &model, 500);
    Start {
        dir,
        rng,
        model,
        chain,
        index: MemoryKeyIndex::new(),
        db,
    }
}

#[test]
fn a_power_loss_comes_back_at_the_last_durable_point_and_converges() {
    let Start {
        dir,
        mut rng,
        mut model,
        mut chain,
        mut index,
        db,
    } = start(11);
    let mut writer = db
        .writer(WriterOptions {
            root_every: 1,
            max_group_blocks: 1,
            ..common::synthetic_headers()
        })
        .unwrap();
    let mut blocks = Vec::new();
    let mut durable: Option<(u64, Model, Vec<u8>)> = None;
    let mut final_root = B256::ZERO;
    for number in 1..=60u64 {
        let (recorded, root) =
            next_block(&mut writer, &mut rng, &mut index, &mut chain, &mut model);
        blocks.push(recorded);
        final_root = root;
        let info = writer.commit().unwrap().expect("a commit");
        assert_eq!(info.sync_seconds, 0.0, "no durable point is due");
        // A commit is the applied head, and not durable.
        assert_eq!(db.head().unwrap().unwrap().number, number);
        if number == 20 || number == 35 {
            writer.sync().unwrap();
            assert_eq!(writer.durable_tip().number, number);
            let synced = std::fs::read(data_file(dir.path())).unwrap();
            durable = Some((number, model.clone(), synced));
        } else {
            assert!(writer.durable_tip().number < number);
        }
    }
    assert_eq!(
        db.metrics().durable_block.get(),
        35,
        "the gauge names the last durable point"
    );
    let (at, durable_model, synced) = durable.expect("durable points");
    power_loss_trials(
        dir.path(),
        &mut rng,
        &blocks,
        (at, &durable_model, &synced),
        (&model, final_root),
    );
}

/// The same with every commit on the commit thread (`WriterOptions::commit_thread`): the
/// writer applies the next block while the last one commits, and a durable point covers
/// what landed (a sync waits for the commit under way first). A power loss comes back at
/// the last durable point with its state and root, and the blocks after it converge.
#[test]
fn a_power_loss_with_commits_on_their_own_thread_comes_back_at_the_last_durable_point() {
    let Start {
        dir,
        mut rng,
        mut model,
        mut chain,
        mut index,
        db,
    } = start(12);
    let mut writer = db
        .writer(WriterOptions {
            root_every: 1,
            max_group_blocks: 1,
            sparse_trie_bytes: 64 << 20,
            overlap_roots: true,
            commit_thread: true,
            root_threads: 2,
            ..common::synthetic_headers()
        })
        .unwrap();
    assert!(writer.commits_in_background());
    let mut blocks = Vec::new();
    let mut durable: Option<(u64, Model, Vec<u8>)> = None;
    for number in 1..=60u64 {
        let changes = consistent(random_changes(&mut rng, &model, ACCOUNTS, number), &model);
        let keys = new_keys(&mut index, &model, &changes);
        let (header, hash) = chain.next(&changes);
        // Its root runs on, and comes back with the hand-over of its group.
        writer.apply(block(&header, hash, &changes, &keys)).unwrap();
        model.apply(&changes);
        let info = writer
            .start_commit()
            .unwrap()
            .expect("a group to hand over");
        assert_eq!(
            info.root.map(|r| (r.block, r.root)),
            Some((number, model.root()))
        );
        blocks.push(Recorded {
            header,
            hash,
            changes,
            keys,
        });
        // At most one commit is under way: the one before this block's landed.
        assert!(writer.committed_tip().number + 1 >= number);
        if number == 20 || number == 35 {
            writer.sync().unwrap();
            assert_eq!(writer.committed_tip().number, number);
            assert_eq!(writer.durable_tip().number, number);
            let synced = std::fs::read(data_file(dir.path())).unwrap();
            durable = Some((number, model.clone(), synced));
        } else {
            assert!(writer.durable_tip().number < number);
        }
    }
    writer.finish_commit().unwrap();
    assert_eq!(db.head().unwrap().unwrap().number, 60);
    assert_eq!(db.metrics().durable_block.get(), 35);
    drop(writer);
    let final_root = model.root();
    let (at, durable_model, synced) = durable.expect("durable points");
    power_loss_trials(
        dir.path(),
        &mut rng,
        &blocks,
        (at, &durable_model, &synced),
        (&model, final_root),
    );
}

/// Draws the next block over `model`, applies it with a root that must be the model's, and
/// moves `model` to it: the block and its root.
fn next_block(
    writer: &mut StateWriter<'_>,
    rng: &mut Rng,
    index: &mut MemoryKeyIndex,
    chain: &mut Chain,
    model: &mut Model,
) -> (Recorded, B256) {
    let number = chain.parent.number + 1;
    let changes = consistent(random_changes(rng, model, ACCOUNTS, number), model);
    let keys = new_keys(index, model, &changes);
    let (header, hash) = chain.next(&changes);
    let root = writer
        .apply(block(&header, hash, &changes, &keys))
        .unwrap()
        .expect("a root every block");
    model.apply(&changes);
    assert_eq!(root.root, model.root(), "block {number}");
    let recorded = Recorded {
        header,
        hash,
        changes,
        keys,
    };
    (recorded, root.root)
}

/// Five simulated power losses of the database in `dir`, last synced as `synced` at block
/// `at` (whose state `durable_model` is), each keeping another share of the pages written
/// since: each must open at block `at` with its state and root, and `blocks` after it must
/// apply again to `model`'s state and `final_root`.
fn power_loss_trials(
    dir: &Path,
    rng: &mut Rng,
    blocks: &[Recorded],
    (at, durable_model, synced): (u64, &Model, &[u8]),
    (model, final_root): (&Model, B256),
) {
    let last = blocks.last().map_or(0, |b| b.header.number);
    let now = std::fs::read(data_file(dir)).unwrap();
    assert_eq!(now.len() % PAGE, 0);

    for (trial, percent) in [0u64, 10, 50, 90, 100].into_iter().enumerate() {
        let (disk, kept) = after_power_loss(synced, &now, rng, percent);
        println!("trial {trial}: {percent}% of the unsynced pages, {kept} pages");
        let lost = tempfile::tempdir().unwrap();
        std::fs::write(data_file(lost.path()), &disk).unwrap();
        let after = StateDb::open(lost.path(), periodic())
            .unwrap_or_else(|e| panic!("trial {trial} ({kept} pages kept): {e}"));
        let view = after.view().unwrap();
        let head = view.tip().unwrap().expect("a head");
        assert_eq!(
            head.number, at,
            "trial {trial} ({kept} of the unsynced pages on the disk): not the last durable point"
        );
        assert_eq!(head.hash, blocks[at as usize - 1].hash);
        assert_eq!(
            view.last_root().unwrap().map(|r| r.1),
            Some(durable_model.root())
        );
        assert_eq!(
            view.state_root_from_scratch().unwrap(),
            durable_model.root(),
            "trial {trial}: the state is not the durable point's"
        );
        let touched: Vec<_> = (0..ACCOUNTS + ACCOUNTS / 5).map(common::address).collect();
        durable_model.assert_held_by(&view, &touched);
        drop(view);
        // The rest is fetched again: the same blocks reach the same state.
        let mut again = after
            .writer(WriterOptions {
                root_every: 1,
                max_group_blocks: 8,
                ..common::synthetic_headers()
            })
            .unwrap();
        let mut root = B256::ZERO;
        for b in &blocks[at as usize..] {
            if let Some(r) = again
                .apply(block(&b.header, b.hash, &b.changes, &b.keys))
                .unwrap_or_else(|e| panic!("trial {trial}, block {}: {e}", b.header.number))
            {
                root = r.root;
            }
            if again.should_commit() {
                again.commit().unwrap();
            }
        }
        again.commit().unwrap();
        again.sync().unwrap();
        assert_eq!(root, final_root, "trial {trial}: another final state");
        assert_eq!(again.durable_tip().number, last);
        drop(again);
        let view = after.view().unwrap();
        model.assert_held_by(&view, &touched);
        assert_eq!(view.state_root_from_scratch().unwrap(), final_root);
    }
}

/// With the writeback on a thread of its own ([`SyncSchedule::background`]), the commit that
/// finds a durable point due does not make it: the thread writes the file back, and the
/// writer's first `sync_if_due` after that makes it, here in the middle of the next group
/// (its write transaction holding that group's pages), covering every commit before. A
/// power loss then comes back at that point.
#[test]
fn a_background_writeback_makes_its_point_mid_group_and_survives_a_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(23);
    let mut model = random_model(&mut rng, ACCOUNTS);
    let mut chain = Chain::genesis();
    let mut index = MemoryKeyIndex::new();
    // Due at every commit of a group of three blocks.
    let options = scheduled(Duration::from_secs(3600), 64 * PAGE as u64, true);
    let db = StateDb::open(dir.path(), options).unwrap();
    apply_genesis(&db, &chain, &model, 500);
    let mut writer = db
        .writer(WriterOptions {
            root_every: 1,
            max_group_blocks: 3,
            ..common::synthetic_headers()
        })
        .unwrap();
    // The state after each block, the genesis first.
    let mut states = vec![model.clone()];
    let mut blocks = Vec::new();
    let mut points = Vec::new();
    let mut durable: Option<(u64, Vec<u8>)> = None;
    let mut final_root = B256::ZERO;
    for number in 1..=45u64 {
        let (recorded, root) =
            next_block(&mut writer, &mut rng, &mut index, &mut chain, &mut model);
        blocks.push(recorded);
        final_root = root;
        states.push(model.clone());
        if writer.should_commit() {
            let before = writer.durable_tip();
            let info = writer.commit().unwrap().expect("a commit");
            assert_eq!(
                info.sync_seconds, 0.0,
                "block {number}: synced by the commit"
            );
            assert_eq!(
                writer.durable_tip(),
                before,
                "block {number}: durable before the writer's own sync"
            );
        } else if writer.writeback_pending() {
            let committed = writer.committed_tip();
            let deadline = Instant::now() + Duration::from_secs(60);
            while writer.sync_if_due().unwrap().is_none() {
                assert!(
                    writer.writeback_pending(),
                    "block {number}: the point was dropped"
                );
                assert!(Instant::now() < deadline, "no writeback ended within 60 s");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(!writer.writeback_pending());
            assert_eq!(writer.durable_tip(), committed, "block {number}");
            assert!(committed.number < number, "made with a group open");
            points.push(committed.number);
            durable = Some((
                committed.number,
                std::fs::read(data_file(dir.path())).unwrap(),
            ));
        }
    }
    writer.commit().unwrap();
    assert!(points.len() >= 5, "durable points at blocks {points:?}");
    assert_eq!(db.metrics().syncs.get(), points.len() as u64);
    let (at, synced) = durable.expect("durable points");
    assert!(at < 45, "blocks after the last point");
    power_loss_trials(
        dir.path(),
        &mut rng,
        &blocks,
        (at, &states[at as usize], &synced),
        (&model, final_root),
    );
}

#[test]
fn durable_points_come_on_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(5);
    let mut model = random_model(&mut rng, 500);
    let mut chain = Chain::genesis();
    let mut index = MemoryKeyIndex::new();
    // A few blocks' pages; each due point synced by the commit that found it due.
    let options = scheduled(Duration::from_secs(3600), 64 * PAGE as u64, false);
    let db = StateDb::open(dir.path(), options).unwrap();
    apply_genesis(&db, &chain, &model, 500);
    let mut writer = db.writer(common::synthetic_headers()).unwrap();
    let mut synced = Vec::new();
    for number in 1..=40u64 {
        let changes = consistent(random_changes(&mut rng, &model, 500, number), &model);
        let keys = new_keys(&mut index, &model, &changes);
        let (header, hash) = chain.next(&changes);
        writer.apply(block(&header, hash, &changes, &keys)).unwrap();
        model.apply(&changes);
        let info = writer.commit().unwrap().expect("a commit");
        if info.sync_seconds > 0.0 {
            assert_eq!(writer.durable_tip().number, number);
            synced.push(number);
        }
    }
    assert!(
        synced.len() >= 2 && synced.len() < 40,
        "durable points by bytes at blocks {synced:?}"
    );
    assert_eq!(db.metrics().syncs.get(), synced.len() as u64);
    // Nothing new: nothing due. The period: a writer with a zero period syncs the next
    // commit left unsynced even when no block follows.
    assert_eq!(writer.sync_if_due().unwrap(), None);
    drop(writer);
    drop(db);
    let db = StateDb::open(dir.path(), scheduled(Duration::ZERO, u64::MAX, false)).unwrap();
    let mut writer = db.writer(common::synthetic_headers()).unwrap();
    let changes = consistent(random_changes(&mut rng, &model, 500, 41), &model);
    let keys = new_keys(&mut index, &model, &changes);
    let (header, hash) = chain.next(&changes);
    writer.apply(block(&header, hash, &changes, &keys)).unwrap();
    let info = writer.commit().unwrap().expect("a commit");
    assert!(info.sync_seconds > 0.0, "a zero period syncs every commit");
    assert_eq!(writer.durable_tip().number, 41);
}
