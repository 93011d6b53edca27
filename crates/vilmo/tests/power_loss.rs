//! Power loss, on a simulated disk (`common/sim.rs`): at every sync barrier of a run with
//! rotation and compaction, the disk produces crash images (the synced state plus subsets of
//! what was not synced: directory operations, pages and sizes), and the store must open on each
//! one at or past the last acknowledged batch, with the checksum and contents of that batch.
//! Along the way the run pulls the plug between commits and continues on the crash image.
//!
//! SIGKILL (`crash.rs`) keeps the page cache, so it cannot see an unlink that reached the disk
//! before the batch explaining it, a batch kept after its fdatasync failed, or a size persisted
//! before the pages: this test can.
//!
//! The default run is bounded for the test suite. A longer one:
//!
//! ```sh
//! GIGAS_VILMO_SIM_SEED=7 GIGAS_VILMO_SIM_BATCHES=3000 GIGAS_VILMO_SIM_IMAGES=8 \
//!     cargo test --release -p gigas-vilmo --test power_loss -- --nocapture
//! ```

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use gigas_storage::sim::SimDisk;
use gigas_vilmo::{Checksum, Error, Storage, Vilmo};

const ROOT: &str = "/db";
const DIR: &str = "/db/store";

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

/// A disk whose database root exists durably (the store's own directory does not yet).
fn disk(seed: u64) -> SimDisk {
    let disk = SimDisk::new(seed);
    disk.create_dir_all(Path::new(ROOT)).expect("mkdir /db");
    disk.sync_dir(Path::new("/")).expect("sync /");
    disk
}

/// What every batch acknowledged so far left: its checksum and the contents after it.
struct History {
    checksums: Vec<Checksum>,
    models: Vec<Model>,
}

impl History {
    fn new() -> Self {
        Self {
            checksums: vec![[0; 32]],
            models: vec![Model::new()],
        }
    }

    fn acknowledged(&self) -> u64 {
        self.models.len() as u64 - 1
    }

    fn push(&mut self, number: u64, checksum: Checksum) {
        assert_eq!(
            number,
            self.acknowledged() + 1,
            "batches are acknowledged in order"
        );
        let mut model = self.models[self.models.len() - 1].clone();
        common::apply(&mut model, number);
        self.models.push(model);
        self.checksums.push(checksum);
    }

    /// Opens the store on every image and checks it holds a batch in `lo..=hi`, exactly as
    /// acknowledged. `hi` may be one past what is acknowledged yet (a batch in flight), whose
    /// checksum and contents `in_flight` gives.
    fn check_images(
        &self,
        images: Vec<SimDisk>,
        lo: u64,
        hi: u64,
        in_flight: Option<(Checksum, &Model)>,
    ) -> usize {
        let count = images.len();
        for image in images {
            let origin = image.origin().unwrap_or_default();
            let store = Vilmo::open_with(image, DIR, common::options(true))
                .unwrap_or_else(|e| panic!("{origin}: the store does not open: {e}"));
            let got = store.last_commit();
            assert!(
                (lo..=hi).contains(&got.number),
                "{origin}: opened at batch {}, expected {lo}..={hi} (batch {lo} was acknowledged)",
                got.number
            );
            let (checksum, model) = if got.number <= self.acknowledged() {
                (
                    self.checksums[got.number as usize],
                    &self.models[got.number as usize],
                )
            } else {
                in_flight.unwrap_or_else(|| {
                    panic!("{origin}: opened at unacknowledged batch {}", got.number)
                })
            };
            assert_eq!(
                got.checksum, checksum,
                "{origin}: checksum of batch {}",
                got.number
            );
            assert!(
                common::contents(&store) == *model,
                "{origin}: contents differ from the model at batch {}",
                got.number
            );
        }
        count
    }
}

#[test]
fn every_power_loss_image_opens_at_or_past_the_last_acknowledged_batch() {
    let seed = env_u64("GIGAS_VILMO_SIM_SEED", 0x5EED_0001);
    let batches = env_u64("GIGAS_VILMO_SIM_BATCHES", 1000);
    let random_images = env_u64("GIGAS_VILMO_SIM_IMAGES", 3) as usize;
    let mut disk = disk(seed);
    disk.enable_images(random_images);
    let mut history = History::new();
    let mut checked = 0usize;
    let mut barriers = 0u64;
    let mut plugs_pulled = 0;
    let mut compactions = 0u64;
    let mut max_files = 0usize;

    let mut store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("open");
    checked += history.check_images(disk.take_images(), 0, 0, None);
    let mut n = 1;
    while n <= batches {
        let commit = store.commit(common::batch(n)).expect("commit");
        assert_eq!(commit.number, n);
        let mut after = history.models[history.models.len() - 1].clone();
        common::apply(&mut after, n);
        // Barriers inside commit n: batch n-1 was acknowledged, n was in flight.
        checked += history.check_images(
            disk.take_images(),
            n - 1,
            n,
            Some((commit.checksum, &after)),
        );
        history.push(n, commit.checksum);
        compactions = compactions.max(store.metrics().compactions.get());
        max_files = max_files.max(store.stats().files);

        if n % 41 == 0 {
            // Pull the plug between commits and carry on with what the disk kept.
            barriers += disk.stats().barriers;
            drop(store);
            disk = disk.crash_now();
            disk.enable_images(random_images);
            plugs_pulled += 1;
            store = Vilmo::open_with(disk.clone(), DIR, common::options(true))
                .unwrap_or_else(|e| panic!("after pulling the plug at batch {n}: {e}"));
            assert_eq!(
                store.last_commit().number,
                n,
                "pulling the plug between commits lost an acknowledged batch"
            );
            checked += history.check_images(disk.take_images(), n, n, None);
        } else if n % 29 == 0 {
            // A clean restart: the lock is released and the page cache kept.
            drop(store);
            store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("reopen");
            assert_eq!(store.last_commit().number, n);
            checked += history.check_images(disk.take_images(), n, n, None);
        }
        n += 1;
    }
    barriers += disk.stats().barriers;
    eprintln!(
        "power loss: seed {seed:#x}, {batches} batches, {barriers} barriers, {checked} crash \
         images opened and checked, {plugs_pulled} plugs pulled, {compactions} compactions in \
         the last run segment, up to {max_files} files"
    );
    assert!(compactions > 0, "the run never compacted a file away");
    assert!(max_files > 2, "the run never rotated");
    assert!(
        checked as u64 > 3 * batches,
        "only {checked} images checked"
    );
}

/// After a failed fdatasync the page cache still holds the batch: the store must cut it off
/// the file, so that neither a reopen in this process nor a power loss afterwards keeps a batch
/// whose commit returned an error.
#[test]
fn a_batch_whose_fdatasync_failed_is_not_kept() {
    let disk = disk(11);
    let mut history = History::new();
    let mut store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("open");
    for n in 1..=60 {
        let c = store.commit(common::batch(n)).expect("commit");
        history.push(n, c.checksum);
    }
    // Fail the batch's own fdatasync, which follows the header's when the batch rotates.
    let probe = self::disk(11);
    let mut dry = Vilmo::open_with(probe.clone(), DIR, common::options(true)).expect("dry run");
    for n in 1..=60 {
        dry.commit(common::batch(n)).expect("dry commit");
    }
    let syncs = probe.stats().sync_data;
    dry.commit(common::batch(61)).expect("dry commit");
    disk.fail_sync_data_after(probe.stats().sync_data - syncs - 1);
    let err = store
        .commit(common::batch(61))
        .expect_err("the batch's fdatasync failed");
    assert!(
        matches!(
            err,
            Error::Io {
                op: "fdatasync batch",
                ..
            }
        ),
        "unexpected error: {err}"
    );
    assert!(matches!(
        store.commit(common::batch(61)),
        Err(Error::Poisoned)
    ));
    drop(store);
    disk.enable_images(4);

    // A reopen in the same life of the machine sees the page cache.
    let store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("reopen");
    assert_eq!(
        store.last_commit().number,
        60,
        "a batch whose commit failed came back from the page cache"
    );
    drop(store);
    history.check_images(disk.take_images(), 60, 60, None);
    // And after a power loss.
    history.check_images(vec![disk.restart(), disk.crash_now()], 60, 60, None);

    // The store carries on with the same batch and the same checksum a store without the
    // fault computes.
    let mut store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("reopen");
    let c = store
        .commit(common::batch(61))
        .expect("commit after recovery");
    let mut reference = Vilmo::open_with(self::disk(12), DIR, common::options(false)).expect("ref");
    for n in 1..=61 {
        reference
            .commit(common::batch(n))
            .expect("reference commit");
    }
    assert_eq!(c, reference.last_commit());
}

/// Finds the first batch whose commit compacts a file away without rotating: its only
/// directory fsync is the one after the unlink.
fn first_pure_drop(limit: u64) -> u64 {
    let disk = disk(21);
    let mut store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("open");
    for n in 1..=limit {
        let before = (
            store.metrics().compactions.get(),
            store.stats().files,
            disk.stats().sync_dir,
        );
        store.commit(common::batch(n)).expect("commit");
        let dirs = disk.stats().sync_dir - before.2;
        if store.metrics().compactions.get() > before.0 && dirs == 1 {
            return n;
        }
    }
    panic!("no batch up to {limit} compacted a file away without rotating");
}

/// A failed directory fsync after a durable drop must not turn the durable batch into an error
/// (a caller would retry it and write it twice); the removal is finished later.
#[test]
fn a_failed_directory_fsync_after_a_durable_drop_still_acknowledges() {
    let drop_at = first_pure_drop(400);
    let disk = disk(21);
    let mut store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("open");
    let mut reference = Vilmo::open_with(self::disk(22), DIR, common::options(false)).expect("ref");
    for n in 1..drop_at {
        store.commit(common::batch(n)).expect("commit");
        reference
            .commit(common::batch(n))
            .expect("reference commit");
    }
    disk.fail_next_sync_dir();
    let c = store
        .commit(common::batch(drop_at))
        .unwrap_or_else(|e| panic!("batch {drop_at} is durable, but commit returned: {e}"));
    assert_eq!(disk.stats().failed_sync_dir, 1, "the fault did not fire");
    assert_eq!(
        c,
        reference.commit(common::batch(drop_at)).expect("reference")
    );
    for n in drop_at + 1..drop_at + 20 {
        let c = store
            .commit(common::batch(n))
            .expect("commit after the fault");
        assert_eq!(c, reference.commit(common::batch(n)).expect("reference"));
    }
    drop(store);
    let store = Vilmo::open_with(disk.crash_now(), DIR, common::options(true)).expect("reopen");
    assert_eq!(store.last_commit(), reference.last_commit());
    assert!(common::contents(&store) == common::contents(&reference));
}

/// Replay verifies with ordinary reads: a device read error is an error naming the file and
/// offset. Through the map (as before) it would be SIGBUS on a real disk; the simulated map
/// shows the bytes, so a store that verified through the map would open here.
#[test]
fn a_read_error_at_open_names_the_file_and_offset() {
    let disk = disk(31);
    let mut store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("open");
    for n in 1..=40 {
        store.commit(common::batch(n)).expect("commit");
    }
    let files = store.log_files();
    drop(store);
    let victim = &files[files.len() / 2];
    disk.fail_reads(victim, 3000..3001).expect("arm read fault");
    match Vilmo::open_with(disk.clone(), DIR, common::options(true)) {
        Err(Error::Corrupt {
            path,
            offset,
            reason,
        }) => {
            assert_eq!(&path, victim);
            assert!(offset <= 3000, "offset {offset}");
            assert!(reason.contains("read failed"), "{reason}");
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("a read error at open went unnoticed"),
    }
    disk.clear_read_faults();
    let store = Vilmo::open_with(disk, DIR, common::options(true)).expect("reopen");
    assert_eq!(store.last_commit().number, 40);
}

/// Two opens of one store would write over each other.
#[test]
fn a_second_open_of_a_live_store_is_refused() {
    let disk = disk(41);
    let mut store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("open");
    store.commit(common::batch(1)).expect("commit");
    match Vilmo::open_with(disk.clone(), DIR, common::options(true)) {
        Err(Error::Locked { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("a second open of a live store succeeded"),
    }
    store
        .commit(common::batch(2))
        .expect("the first store carries on");
    drop(store);
    let store = Vilmo::open_with(disk, DIR, common::options(true)).expect("reopen");
    assert_eq!(store.last_commit().number, 2);
}

/// A commit in two halves, as the sequencer runs it to keep the fdatasync out of its lock:
/// after `commit_unsynced` reads see the batch and `last_commit` does not; a power loss
/// before the sync opens at the previous batch, one after it at this batch; `finish_commit`
/// acknowledges it; and a second batch before the first is finished is refused.
#[test]
fn an_unsynced_batch_is_read_not_acknowledged_and_lost_only_before_its_sync() {
    let disk = disk(21);
    let mut history = History::new();
    let mut store = Vilmo::open_with(disk.clone(), DIR, common::options(true)).expect("open");
    for n in 1..=20 {
        let c = store.commit(common::batch(n)).expect("commit");
        history.push(n, c.checksum);
    }
    let unsynced = store
        .commit_unsynced(common::batch(21))
        .expect("written and applied");
    assert_eq!(unsynced.number(), 21);
    let mut expected = history.models[20].clone();
    common::apply(&mut expected, 21);
    assert!(
        common::contents(&store) == expected,
        "reads see the unsynced batch"
    );
    assert_eq!(store.last_commit().number, 20, "not acknowledged yet");

    // Every crash from here to the end of the sync: before it, batch 20; after it, 21.
    disk.enable_images(4);
    let synced = unsynced.sync();
    let images = disk.take_images();
    assert!(!images.is_empty(), "the sync is a barrier");
    let commit = store.finish_commit(unsynced, synced).expect("acknowledged");
    assert_eq!(commit.number, 21);
    assert_eq!(store.last_commit(), commit);
    let checked = history.check_images(images, 20, 21, Some((commit.checksum, &expected)));
    println!("{checked} power-loss images around the sync open at batch 20 or 21");
    history.push(21, commit.checksum);

    // The same batch through `commit` on a fresh store has the same checksum.
    let mut reference = Vilmo::open_with(self::disk(22), DIR, common::options(false)).expect("ref");
    for n in 1..=21 {
        reference.commit(common::batch(n)).expect("reference");
    }
    assert_eq!(reference.last_commit(), commit);

    // Two halves may not interleave.
    let first = store.commit_unsynced(common::batch(22)).expect("written");
    assert!(matches!(
        store.commit_unsynced(common::batch(23)),
        Err(Error::Poisoned)
    ));
    drop(first);
}
