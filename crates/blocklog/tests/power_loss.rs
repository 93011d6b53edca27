//! Power loss on a simulated disk (`gigas_storage::sim`): at every sync barrier of a run that
//! appends groups of records, rotates segments and removes covered ones, the disk produces
//! crash images (the synced state plus subsets of what was not synced: pages, sizes, directory
//! entries), and the log must open on each with every acknowledged record that was still
//! needed, byte for byte. Along the way the run pulls the plug and continues on the image.
//!
//! A longer run: `GIGAS_BLOCKLOG_SIM_SEED=7 GIGAS_BLOCKLOG_SIM_GROUPS=3000 cargo test
//! --release -p gigas-blocklog --test power_loss -- --nocapture`.

use std::path::Path;

use gigas_blocklog::{BlockLog, Options};
use gigas_storage::sim::SimDisk;
use gigas_storage::Storage;

const DIR: &str = "/chain/blocks";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn payload(n: u64) -> Vec<u8> {
    let len = 50 + (n * 7919 % 2500) as usize;
    (0..len).map(|i| (n as usize * 131 + i * 7) as u8).collect()
}

fn options() -> Options {
    Options {
        segment_bytes: 12 << 10,
    }
}

/// What the caller may rely on at an instant: records `needed..acknowledged` (the ones
/// before `needed` were declared covered elsewhere, so may be gone).
#[derive(Debug, Clone, Copy)]
struct Promise {
    needed: u64,
    acknowledged: u64,
}

/// Opens the log on every image and checks the promise; returns how many were checked.
fn check_images(images: Vec<SimDisk>, promise: Promise) -> usize {
    let count = images.len();
    for image in images {
        let origin = image.origin().unwrap_or_default();
        let (log, _) = BlockLog::open_with(image, Path::new(DIR), options())
            .unwrap_or_else(|e| panic!("{origin}: the log does not open: {e}"));
        let next = log.next().unwrap_or(0);
        assert!(
            next >= promise.acknowledged,
            "{origin}: the log continues at {next}, but {} records were acknowledged",
            promise.acknowledged
        );
        if promise.acknowledged > promise.needed {
            let first = log.first().unwrap_or(u64::MAX);
            assert!(
                first <= promise.needed,
                "{origin}: the log starts at {first}, record {} was still needed",
                promise.needed
            );
        }
        // Every record the log holds, needed or not, acknowledged or not, is whole.
        for n in log.first().unwrap_or(next)..next {
            assert_eq!(
                log.read(n)
                    .unwrap_or_else(|e| panic!("{origin}: record {n}: {e}")),
                Some(payload(n)),
                "{origin}: record {n}"
            );
        }
    }
    count
}

#[test]
fn every_power_loss_image_keeps_every_acknowledged_record_still_needed() {
    let seed = env_u64("GIGAS_BLOCKLOG_SIM_SEED", 0xB10C_0001);
    let groups = env_u64("GIGAS_BLOCKLOG_SIM_GROUPS", 400);
    let random_images = env_u64("GIGAS_BLOCKLOG_SIM_IMAGES", 3) as usize;
    let mut disk = SimDisk::new(seed);
    disk.create_dir_all(Path::new("/chain")).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    disk.enable_images(random_images);

    let mut promise = Promise {
        needed: 0,
        acknowledged: 0,
    };
    let (mut log, _) = BlockLog::open_with(disk.clone(), Path::new(DIR), options()).unwrap();
    let mut checked = check_images(disk.take_images(), promise);
    let (mut removed, mut plugs, mut max_segments) = (0usize, 0, 0);
    let mut next = 0u64;
    for group in 0..groups {
        let size = 1 + (group * 5 + 3) % 8;
        for _ in 0..size {
            log.append(next, &payload(next)).unwrap();
            next += 1;
        }
        // Barriers inside the sync: the group is in flight, the promise is the old one.
        log.sync().unwrap();
        checked += check_images(disk.take_images(), promise);
        promise.acknowledged = next;
        max_segments = max_segments.max(log.segment_count());

        if group % 3 == 2 && next > 20 {
            // An indexer that trails by up to 20 records declares the rest covered.
            promise.needed = next - 20;
            removed += log.remove_through(promise.needed - 1).unwrap();
            checked += check_images(disk.take_images(), promise);
        }
        if group % 37 == 36 {
            drop(log);
            disk = disk.crash_now();
            disk.enable_images(random_images);
            plugs += 1;
            let opened = BlockLog::open_with(disk.clone(), Path::new(DIR), options())
                .unwrap_or_else(|e| panic!("after pulling the plug at group {group}: {e}"));
            log = opened.0;
            assert_eq!(
                log.next(),
                Some(next),
                "pulling the plug lost acknowledged records"
            );
            checked += check_images(disk.take_images(), promise);
        }
    }
    eprintln!(
        "block log power loss: seed {seed:#x}, {groups} groups, {next} records, {checked} \
         crash images opened and checked, {removed} segments removed, {plugs} plugs pulled, \
         up to {max_segments} segments"
    );
    assert!(removed > 10, "the run removed only {removed} segments");
    assert!(
        max_segments > 2,
        "the run never kept more than {max_segments} segments"
    );
    assert!(checked as u64 > 3 * groups, "only {checked} images checked");
}

/// A sync that fails poisons the log: nothing more is acknowledged, and a reopen finds only
/// what reached the disk (never the failed group as if it had been acknowledged and lost).
#[test]
fn a_failed_sync_poisons_the_log_until_it_is_reopened() {
    let disk = SimDisk::new(5);
    disk.create_dir_all(Path::new("/chain")).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let (mut log, _) = BlockLog::open_with(disk.clone(), Path::new(DIR), options()).unwrap();
    for n in 0..5 {
        log.append(n, &payload(n)).unwrap();
    }
    log.sync().unwrap();
    log.append(5, &payload(5)).unwrap();
    disk.fail_next_sync_data();
    let err = log.sync().unwrap_err();
    assert!(err.to_string().contains("sync a segment"), "{err}");
    let err = log.append(6, &payload(6)).unwrap_err();
    assert!(err.to_string().contains("reopen it"), "{err}");
    assert!(log.sync().is_err());
    drop(log);

    let image = disk.crash_now();
    let (log, _) = BlockLog::open_with(image, Path::new(DIR), options()).unwrap();
    let next = log.next().unwrap();
    assert!((5..=6).contains(&next), "the log continues at {next}");
    for n in 0..next {
        assert_eq!(log.read(n).unwrap(), Some(payload(n)));
    }
}
