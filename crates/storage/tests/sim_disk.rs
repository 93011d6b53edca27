//! The simulated disk's own semantics, through the `Storage` traits only: what a crash image
//! may and may not contain, reproducibility, fault injection, POSIX unlink and locks. The
//! power-loss tests of the store are only as good as these guarantees.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use gigas_storage::sim::{SimDisk, Snapshot, PAGE_SIZE};
use gigas_storage::{Storage, StorageFile};

const DIR: &str = "/sim/store";

fn path(name: &str) -> PathBuf {
    Path::new(DIR).join(name)
}

/// A disk with `DIR` durable.
fn disk(seed: u64) -> SimDisk {
    let disk = SimDisk::new(seed);
    assert!(disk.create_dir_all(Path::new(DIR)).unwrap());
    disk.sync_dir(Path::new("/sim")).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    assert!(!disk.has_pending());
    disk
}

/// A file named `name` in `DIR` holding `bytes`, durable (content and entry).
fn durable_file(disk: &SimDisk, name: &str, bytes: &[u8]) -> <SimDisk as Storage>::File {
    let mut file = disk.create_new(&path(name)).unwrap();
    file.append(bytes).unwrap();
    file.sync_data().unwrap();
    disk.sync_dir(Path::new(DIR)).unwrap();
    file
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed | 1)
        .collect()
}

fn read_all(file: &<SimDisk as Storage>::File) -> Vec<u8> {
    let mut buf = vec![0; file.size().unwrap() as usize];
    file.read_exact_at(&mut buf, 0).unwrap();
    buf
}

/// Whether `image` is a page-by-page mix of `durable` and `current` (each padded with zeros)
/// at the length of one of them.
fn is_page_mix(image: &[u8], durable: &[u8], current: &[u8]) -> bool {
    if image.len() != durable.len() && image.len() != current.len() {
        return false;
    }
    let padded = |bytes: &[u8], start: usize, end: usize| {
        let mut out = bytes
            .get(start..end.min(bytes.len()))
            .unwrap_or(&[])
            .to_vec();
        out.resize(end - start, 0);
        out
    };
    (0..image.len()).step_by(PAGE_SIZE).all(|start| {
        let end = (start + PAGE_SIZE).min(image.len());
        let page = &image[start..end];
        page == padded(durable, start, end) || page == padded(current, start, end)
    })
}

#[test]
fn appended_unsynced_bytes_vanish_or_read_as_zeros_or_survive() {
    let disk = disk(1);
    let synced = pattern(1, 5_000);
    let mut file = durable_file(&disk, "a", &synced);
    let appended = pattern(2, 3 * PAGE_SIZE);
    file.append(&appended).unwrap();
    let current = [synced.clone(), appended].concat();
    assert_eq!(read_all(&file), current, "reads see the page cache");

    disk.enable_images(40);
    file.sync_data().unwrap();
    let images = disk.take_images();
    assert_eq!(images.len(), 42);
    let (mut vanished, mut zeros, mut whole) = (0, 0, 0);
    for image in &images {
        let bytes = image.read_file(&path("a")).unwrap();
        assert!(
            is_page_mix(&bytes, &synced, &current),
            "{:?}",
            image.origin()
        );
        assert_eq!(&bytes[..synced.len()], &synced[..], "synced bytes survive");
        if bytes == synced {
            vanished += 1;
        } else if bytes == current {
            whole += 1;
        } else if bytes.len() == current.len() {
            assert!(bytes[synced.len()..].contains(&0));
            zeros += 1;
        }
        assert!(!image.has_pending(), "everything in an image is durable");
    }
    assert!(
        vanished > 0 && zeros > 0 && whole > 0,
        "{vanished} {zeros} {whole}"
    );
}

#[test]
fn synced_bytes_always_survive() {
    let disk = disk(2);
    disk.enable_images(6);
    let mut file = durable_file(&disk, "log", b"");
    // Images from before the file's entry was durable, which may lack it.
    disk.take_images();
    let mut synced = Vec::new();
    let mut written = Vec::new();
    for round in 0..30u8 {
        let chunk = pattern(round, 700 + 397 * round as usize);
        file.append(&chunk).unwrap();
        written.extend_from_slice(&chunk);
        // Every third round syncs; the rounds between leave bytes pending across barriers
        // of another file.
        // Images are taken before the barrier applies, so the bytes synced by this very call
        // are not yet guaranteed; those of earlier calls are.
        let guaranteed = synced.len();
        if round % 3 == 0 {
            file.sync_data().unwrap();
            synced = written.clone();
        } else {
            let other = disk.create_new(&path(&format!("other-{round}"))).unwrap();
            other.sync_data().unwrap();
        }
        let images = disk.take_images();
        assert!(!images.is_empty());
        for image in images {
            let bytes = image.read_file(&path("log")).unwrap();
            assert!(bytes.len() >= guaranteed, "{:?}", image.origin());
            assert_eq!(
                &bytes[..guaranteed],
                &written[..guaranteed],
                "{:?}",
                image.origin()
            );
        }
    }
}

#[test]
fn an_unsynced_create_may_vanish() {
    let disk = disk(3);
    disk.enable_images(20);
    let mut file = disk.create_new(&path("new")).unwrap();
    file.append(b"data").unwrap();
    file.sync_data().unwrap();
    let images = disk.take_images();
    assert!(images.iter().any(|i| !i.exists(&path("new"))));
    assert!(images.iter().any(|i| i.exists(&path("new"))));
    assert!(
        !images[0].exists(&path("new")),
        "the nothing-persisted image"
    );
    assert_eq!(images[1].read_file(&path("new")).unwrap(), b"data");

    // Once the directory is synced, the entry and the synced data survive every crash.
    disk.sync_dir(Path::new(DIR)).unwrap();
    disk.take_images();
    disk.sync_dir(Path::new(DIR)).unwrap();
    for image in disk.take_images() {
        assert_eq!(image.read_file(&path("new")).unwrap(), b"data");
    }
}

#[test]
fn an_unsynced_directory_vanishes_with_its_files() {
    let disk = disk(4);
    assert!(disk.create_dir_all(Path::new("/sim/new/deeper")).unwrap());
    assert!(!disk.create_dir_all(Path::new("/sim/new/deeper")).unwrap());
    let deeper = Path::new("/sim/new/deeper");
    let file = disk.create_new(&deeper.join("f")).unwrap();
    file.sync_data().unwrap();
    // Syncing the new directories themselves does not make their own entries durable.
    disk.sync_dir(deeper).unwrap();
    disk.sync_dir(Path::new("/sim/new")).unwrap();
    assert!(!disk.durable_snapshot().dirs.contains(Path::new("/sim/new")));

    disk.enable_images(30);
    disk.sync_dir(Path::new("/sim")).unwrap();
    let images = disk.take_images();
    let mut gone = 0;
    for image in &images {
        let snap = image.snapshot();
        if !snap.dirs.contains(Path::new("/sim/new")) {
            gone += 1;
            assert!(snap.dirs.iter().all(|d| !d.starts_with("/sim/new")));
            assert!(snap.files.keys().all(|f| !f.starts_with("/sim/new")));
            assert!(image.list_dir(deeper).is_err());
        } else {
            assert!(image.exists(&deeper.join("f")));
        }
    }
    assert!(gone > 0 && gone < images.len());
    assert!(disk
        .durable_snapshot()
        .files
        .contains_key(&deeper.join("f")));
}

#[test]
fn an_unsynced_remove_may_or_may_not_take_effect() {
    let disk = disk(5);
    let file = durable_file(&disk, "old", b"old bytes");
    let other = durable_file(&disk, "other", b"");
    disk.remove_file(&path("old")).unwrap();
    assert!(!disk.exists(&path("old")));
    disk.enable_images(20);
    other.sync_data().unwrap();
    let images = disk.take_images();
    assert_eq!(images[0].read_file(&path("old")).unwrap(), b"old bytes");
    assert!(!images[1].exists(&path("old")));
    assert!(images[2..].iter().any(|i| i.exists(&path("old"))));
    assert!(images[2..].iter().any(|i| !i.exists(&path("old"))));
    assert_eq!(read_all(&file), b"old bytes", "the open handle still reads");
}

#[test]
fn a_removed_then_synced_file_never_comes_back() {
    let disk = disk(6);
    let mut file = durable_file(&disk, "gone", b"before");
    let other = durable_file(&disk, "other", b"");
    disk.remove_file(&path("gone")).unwrap();
    disk.sync_dir(Path::new(DIR)).unwrap();
    // Writes through the open handle after the removal are not resurrected either.
    file.append(b" and after").unwrap();
    file.sync_data().unwrap();
    assert_eq!(read_all(&file), b"before and after");
    disk.enable_images(20);
    other.sync_data().unwrap();
    disk.sync_dir(Path::new(DIR)).unwrap();
    let images = disk.take_images();
    assert_eq!(images.len(), 44);
    for image in images {
        assert!(!image.exists(&path("gone")), "{:?}", image.origin());
    }
    for _ in 0..50 {
        assert!(!disk.crash_now().exists(&path("gone")));
    }
    assert!(!disk.restart().exists(&path("gone")));
}

/// A little of everything pending: a new file, a removal, appends, a cut.
fn mixed_workload(disk: &SimDisk) -> Vec<Snapshot> {
    let mut a = durable_file(disk, "a", &pattern(1, 3 * PAGE_SIZE + 10));
    let mut b = durable_file(disk, "b", &pattern(2, 100));
    durable_file(disk, "c", &pattern(3, 10));
    let mut expected = Vec::new();
    for round in 0..5u8 {
        a.append(&pattern(round, 5_000)).unwrap();
        b.set_len(50 + round as u64).unwrap();
        b.append(&pattern(round, 2 * PAGE_SIZE)).unwrap();
        if round == 1 {
            disk.remove_file(&path("c")).unwrap();
        }
        let mut n = disk.create_new(&path(&format!("n{round}"))).unwrap();
        n.append(&pattern(round, 10)).unwrap();
        disk.create_dir_all(Path::new(&format!("/sim/d{round}")))
            .unwrap();
        expected.push(disk.durable_snapshot());
        expected.push(disk.snapshot());
        if round % 2 == 0 {
            a.sync_data().unwrap();
        } else {
            disk.sync_dir(Path::new(DIR)).unwrap();
        }
    }
    expected
}

#[test]
fn the_two_extreme_images_are_always_present() {
    let disk = disk(7);
    disk.enable_images(3);
    let expected = mixed_workload(&disk);
    let images = disk.take_images();
    // Two barriers in each of three `durable_file`s, then one in each of five rounds.
    let rounds = &images[6 * 5..];
    assert_eq!(rounds.len(), 5 * 5);
    for (round, images) in rounds.chunks(5).enumerate() {
        assert_eq!(
            images[0].snapshot(),
            expected[2 * round],
            "round {round}: nothing persisted"
        );
        assert_eq!(
            images[1].snapshot(),
            expected[2 * round + 1],
            "round {round}: everything persisted"
        );
        assert_ne!(expected[2 * round], expected[2 * round + 1]);
        for image in images {
            // An image is its own durable state.
            assert_eq!(image.snapshot(), image.durable_snapshot());
        }
    }
    let stats = disk.stats();
    // The two barriers of `disk` came before images were on.
    assert_eq!(stats.images, (stats.barriers - 2) * 5);
}

#[test]
fn every_image_is_a_page_mix_of_durable_and_current() {
    let disk = disk(8);
    disk.enable_images(10);
    let expected = mixed_workload(&disk);
    let rounds = disk.take_images().split_off(6 * 12);
    for (round, images) in rounds.chunks(12).enumerate() {
        let (durable, current) = (&expected[2 * round], &expected[2 * round + 1]);
        for image in images {
            let snap = image.snapshot();
            for (file, bytes) in &snap.files {
                let old = durable.files.get(file).map(Vec::as_slice);
                let new = current.files.get(file).map(Vec::as_slice);
                // A file is in the durable or the current view (or both); "c" was removed and
                // "n*" created in a pending state.
                let ok = match (old, new) {
                    (Some(o), Some(n)) => is_page_mix(bytes, o, n),
                    (Some(o), None) => bytes == o,
                    (None, Some(n)) => is_page_mix(bytes, &[], n),
                    (None, None) => false,
                };
                assert!(ok, "{file:?} in {:?}", image.origin());
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_images() {
    let run = |seed| {
        let disk = disk(seed);
        disk.enable_images(4);
        mixed_workload(&disk);
        let mut snaps: Vec<Snapshot> = disk.take_images().iter().map(SimDisk::snapshot).collect();
        snaps.extend((0..5).map(|_| disk.crash_now().snapshot()));
        let restarted = disk.restart();
        restarted.enable_images(2);
        restarted.sync_dir(Path::new(DIR)).unwrap();
        snaps.extend(restarted.take_images().iter().map(SimDisk::snapshot));
        // Each image carries its own seed on.
        snaps.push(restarted.crash_now().crash_now().snapshot());
        snaps
    };
    let first = run(42);
    assert_eq!(first, run(42));
    assert_ne!(first, run(43));
}

#[test]
fn a_failed_sync_data_keeps_the_data_pending() {
    let disk = disk(9);
    let mut file = durable_file(&disk, "f", b"durable");
    file.append(b" pending").unwrap();
    disk.fail_next_sync_data();
    let err = file.sync_data().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(read_all(&file), b"durable pending");
    assert_eq!(&*file.map(0, 0).unwrap(), b"durable pending");
    assert_eq!(
        disk.durable_snapshot().files[&path("f")],
        b"durable",
        "a failed sync makes nothing durable"
    );
    assert!(disk.has_pending());
    let stats = disk.stats();
    assert_eq!((stats.sync_data, stats.failed_sync_data), (2, 1));

    // The pending data may still reach the disk in a crash, or not.
    disk.enable_images(10);
    disk.sync_dir(Path::new(DIR)).unwrap();
    let images = disk.take_images();
    assert_eq!(images[0].read_file(&path("f")).unwrap(), b"durable");
    assert_eq!(images[1].read_file(&path("f")).unwrap(), b"durable pending");
    disk.disable_images();

    // The fault is one-shot (and a retry here succeeds; see the module documentation).
    file.sync_data().unwrap();
    assert_eq!(
        disk.durable_snapshot().files[&path("f")],
        b"durable pending"
    );

    // The Nth from now: two succeed, the third fails, the fourth succeeds.
    disk.fail_sync_data_after(2);
    for i in 0..4 {
        file.append(&[i]).unwrap();
        let result = file.sync_data();
        assert_eq!(result.is_err(), i == 2, "sync {i}");
    }
}

#[test]
fn a_failed_sync_dir_makes_nothing_durable() {
    let disk = disk(10);
    let _file = disk.create_new(&path("f")).unwrap();
    disk.fail_next_sync_dir();
    let err = disk.sync_dir(Path::new(DIR)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert!(!disk.durable_snapshot().files.contains_key(&path("f")));
    assert!(disk.exists(&path("f")));
    disk.sync_dir(Path::new(DIR)).unwrap();
    assert!(disk.durable_snapshot().files.contains_key(&path("f")));
    assert_eq!(disk.stats().failed_sync_dir, 1);
}

#[test]
fn read_faults_fail_reads_of_their_range_but_not_the_map() {
    let disk = disk(11);
    let bytes = pattern(5, 1_000);
    let file = durable_file(&disk, "f", &bytes);
    disk.fail_reads(&path("f"), 100..200).unwrap();
    let mut buf = [0; 100];
    file.read_exact_at(&mut buf, 0).unwrap();
    file.read_exact_at(&mut buf, 200).unwrap();
    for offset in [95, 150, 199] {
        let err = file.read_exact_at(&mut buf[..10], offset).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "offset {offset}");
    }
    // A second handle reads the same sectors.
    let again = disk.open(&path("f")).unwrap();
    assert!(again.read_exact_at(&mut buf, 120).is_err());
    assert_eq!(&*file.map(1_000, 0).unwrap(), &bytes[..]);
    disk.clear_read_faults();
    file.read_exact_at(&mut buf, 120).unwrap();
    assert_eq!(disk.stats().failed_reads, 4);
    assert!(disk.fail_reads(&path("missing"), 0..1).is_err());
}

#[test]
fn locks_conflict_and_release() {
    let disk = disk(12);
    disk.create_dir_all(Path::new("/sim/other")).unwrap();
    let lock = disk.lock_dir(Path::new(DIR)).unwrap();
    // A clone is the same disk, as a second open in the same process would be.
    let err = disk.clone().lock_dir(Path::new(DIR)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert_eq!(
        disk.lock_dir(Path::new("/sim/store/")).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "the same directory spelled differently"
    );
    let other = disk.lock_dir(Path::new("/sim/other")).unwrap();
    // A restarted disk is a new process: it holds no locks.
    drop(disk.restart().lock_dir(Path::new(DIR)).unwrap());
    drop(lock);
    drop(disk.lock_dir(Path::new(DIR)).unwrap());
    drop(other);
    assert_eq!(
        disk.lock_dir(Path::new("/sim/missing")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn a_removed_open_file_keeps_working() {
    let disk = disk(13);
    let mut file = durable_file(&disk, "f", b"one");
    disk.remove_file(&path("f")).unwrap();
    assert_eq!(
        disk.open(&path("f")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        disk.remove_file(&path("f")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    file.append(b" two").unwrap();
    file.sync_data().unwrap();
    let clone = file.try_clone().unwrap();
    drop(file);
    assert_eq!(read_all(&clone), b"one two");
    // The name is free for a new, different file.
    let new = disk.create_new(&path("f")).unwrap();
    assert_eq!(new.size().unwrap(), 0);
    disk.sync_dir(Path::new(DIR)).unwrap();
    assert_eq!(read_all(&clone), b"one two");
    assert_eq!(disk.read_file(&path("f")).unwrap(), b"");
}

#[test]
fn names_and_errors() {
    let disk = disk(14);
    let _a = disk.create_new(&path("a")).unwrap();
    assert_eq!(
        disk.create_new(&path("a")).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        disk.open(&path("b")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        disk.create_new(Path::new("/nowhere/a")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(
        disk.create_dir_all(&path("a")).is_err(),
        "a file is in the way"
    );
    assert!(disk.create_dir_all(&path("a/b")).is_err());
    disk.create_new(&path("b")).unwrap();
    disk.create_dir_all(&path("sub")).unwrap();
    let mut names = disk.list_dir(Path::new(DIR)).unwrap();
    names.sort();
    assert_eq!(names, ["a", "b", "sub"]);
    assert_eq!(
        disk.list_dir(Path::new("/nowhere")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(disk.open(&path("sub")).is_err());
    // Relative paths work too, under their own root.
    assert!(disk.create_dir_all(Path::new("rel/dir")).unwrap());
    disk.create_new(Path::new("rel/dir/x")).unwrap();
    assert!(disk.exists(Path::new("rel/dir/x")));
}

#[test]
fn reads_lengths_cuts_and_maps() {
    let disk = disk(15);
    let mut file = durable_file(&disk, "f", b"0123456789");
    let map = file.map(10, 1 << 20).unwrap();
    file.append(b"abc").unwrap();
    assert_eq!(&*map, b"0123456789", "a map is a snapshot of its moment");
    assert_eq!(&*file.map(13, 0).unwrap(), b"0123456789abc");
    let mut buf = [0; 4];
    file.read_exact_at(&mut buf, 9).unwrap();
    assert_eq!(&buf, b"9abc");
    assert_eq!(
        file.read_exact_at(&mut buf, 10).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    file.set_len(4).unwrap();
    assert_eq!(file.size().unwrap(), 4);
    file.set_len(6).unwrap();
    assert_eq!(read_all(&file), b"0123\0\0");

    // A pending cut: the crash keeps the durable length or the current one.
    disk.enable_images(20);
    file.sync_data().unwrap();
    let lens: std::collections::BTreeSet<usize> = disk
        .take_images()
        .iter()
        .map(|i| i.read_file(&path("f")).unwrap().len())
        .collect();
    assert_eq!(lens, [6, 10].into());
}

#[test]
fn restart_makes_the_current_state_durable() {
    let disk = disk(16);
    let mut file = durable_file(&disk, "f", b"a");
    file.append(b"b").unwrap();
    disk.create_new(&path("g")).unwrap();
    disk.create_dir_all(Path::new("/sim/x")).unwrap();
    let restarted = disk.restart();
    assert_eq!(restarted.durable_snapshot(), disk.snapshot());
    assert!(!restarted.has_pending());
    assert!(disk.has_pending(), "the original is untouched");
    assert!(restarted.origin().is_none());
    // Image generation is off unless asked.
    restarted.sync_dir(Path::new(DIR)).unwrap();
    assert!(restarted.take_images().is_empty());
    // The two disks are independent.
    restarted.remove_file(&path("g")).unwrap();
    assert!(disk.exists(&path("g")));
}

#[test]
fn crash_now_is_one_possible_image_and_continues() {
    let disk = disk(17);
    let mut file = durable_file(&disk, "f", &pattern(1, 2 * PAGE_SIZE));
    file.append(&pattern(2, 4 * PAGE_SIZE)).unwrap();
    let (durable, current) = (disk.durable_snapshot(), disk.snapshot());
    let before = disk.stats();
    for _ in 0..20 {
        let image = disk.crash_now();
        let bytes = image.read_file(&path("f")).unwrap();
        assert!(is_page_mix(
            &bytes,
            &durable.files[&path("f")],
            &current.files[&path("f")]
        ));
        // The image is a working disk, with no images of its own unless asked.
        let mut again = image.open(&path("f")).unwrap();
        again.append(b"more").unwrap();
        again.sync_data().unwrap();
        assert!(image.take_images().is_empty());
    }
    let after = disk.stats();
    assert_eq!(after.barriers, before.barriers, "a crash is not a barrier");
    assert_eq!(after.images, before.images + 20);
}
