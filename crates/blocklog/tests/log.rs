//! The block log on the real disk: records round-trip across segments and reopens, a torn
//! tail is cut, damage to synced segments is refused, and whole segments go on request.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use gigas_blocklog::{BlockLog, Error, Options};

/// Record `n`'s payload: its number and a length that varies, so that records straddle
/// segment boundaries at odd offsets.
fn payload(n: u64) -> Vec<u8> {
    let len = 100 + (n * 7919 % 3000) as usize;
    (0..len).map(|i| (n as usize * 31 + i) as u8).collect()
}

fn small() -> Options {
    Options {
        segment_bytes: 16 << 10,
    }
}

fn segments(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".blocks"))
        .collect();
    names.sort();
    names
}

/// A directory holding records 0 to 59, synced, in small segments, the log closed.
fn closed_log_of_60() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = BlockLog::open(dir.path(), small()).unwrap();
    for n in 0..60 {
        log.append(n, &payload(n)).unwrap();
    }
    log.sync().unwrap();
    dir
}

#[test]
fn records_round_trip_across_segments_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, report) = BlockLog::open(dir.path(), small()).unwrap();
    assert_eq!(report.records, 0);
    assert_eq!((log.first(), log.next()), (None, None));
    // A log starts wherever its first record is numbered.
    for n in 5..205 {
        log.append(n, &payload(n)).unwrap();
        if n % 7 == 0 {
            log.sync().unwrap();
        }
    }
    log.sync().unwrap();
    assert!(log.segment_count() > 5, "{} segments", log.segment_count());
    for n in 5..205 {
        assert_eq!(log.read(n).unwrap(), Some(payload(n)), "record {n}");
    }
    assert_eq!(log.read(4).unwrap(), None);
    assert_eq!(log.read(205).unwrap(), None);
    let tail = log.tail();
    drop(log);

    let (mut log, report) = BlockLog::open(dir.path(), small()).unwrap();
    assert_eq!(report.records, 200);
    assert_eq!(report.cut_bytes, 0);
    assert_eq!((log.first(), log.next()), (Some(5), Some(205)));
    assert_eq!(log.tail(), tail);
    let err = log.append(207, b"gap").unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotNext {
                expected: 205,
                got: 207
            }
        ),
        "{err}"
    );
    log.append(205, &payload(205)).unwrap();
    log.sync().unwrap();
    assert_eq!(log.read(205).unwrap(), Some(payload(205)));
}

#[test]
fn a_torn_tail_is_cut_and_the_log_continues_where_the_last_whole_record_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = BlockLog::open(dir.path(), Options::default()).unwrap();
    for n in 0..10 {
        log.append(n, &payload(n)).unwrap();
    }
    log.sync().unwrap();
    drop(log);
    let segment = dir.path().join(&segments(dir.path())[0]);
    let whole = std::fs::metadata(&segment).unwrap().len();

    // Half a record, then a run of zeros: what a power loss leaves when the size reached the
    // disk and the data did not.
    let mut file = OpenOptions::new().append(true).open(&segment).unwrap();
    let next = payload(10);
    file.write_all(b"GBLK").unwrap();
    file.write_all(&(next.len() as u32).to_le_bytes()).unwrap();
    file.write_all(&10u64.to_le_bytes()).unwrap();
    file.write_all(&next[..next.len() / 2]).unwrap();
    file.write_all(&[0u8; 4096]).unwrap();
    drop(file);

    let (mut log, report) = BlockLog::open(dir.path(), Options::default()).unwrap();
    assert!(report.cut_bytes > 4096, "{report:?}");
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), whole);
    assert_eq!(log.next(), Some(10));
    for n in 0..10 {
        assert_eq!(log.read(n).unwrap(), Some(payload(n)));
    }
    log.append(10, &payload(10)).unwrap();
    log.sync().unwrap();
    drop(log);
    let (log, report) = BlockLog::open(dir.path(), Options::default()).unwrap();
    assert_eq!(report.cut_bytes, 0);
    assert_eq!(log.read(10).unwrap(), Some(payload(10)));
}

#[test]
fn a_flipped_byte_in_a_synced_older_segment_is_refused_with_its_place() {
    let dir = closed_log_of_60();
    let names = segments(dir.path());
    assert!(names.len() >= 3);
    let older = dir.path().join(&names[1]);
    let mut bytes = std::fs::read(&older).unwrap();
    bytes[500] ^= 0x40;
    std::fs::write(&older, &bytes).unwrap();

    let err = BlockLog::open(dir.path(), small()).unwrap_err();
    match &err {
        Error::Corrupt { path, .. } => assert_eq!(path, &older),
        other => panic!("expected Corrupt, got {other}"),
    }
    assert!(err.to_string().contains(&names[1]), "{err}");
}

#[test]
fn a_missing_segment_in_the_middle_breaks_the_chain() {
    let dir = closed_log_of_60();
    let names = segments(dir.path());
    std::fs::remove_file(dir.path().join(&names[1])).unwrap();
    let err = BlockLog::open(dir.path(), small()).unwrap_err();
    assert!(
        err.to_string()
            .contains("does not continue the previous segment"),
        "{err}"
    );
}

#[test]
fn removal_takes_whole_covered_segments_and_never_the_newest() {
    let dir = closed_log_of_60();
    let (mut log, _) = BlockLog::open(dir.path(), small()).unwrap();
    let before = log.segment_count();
    assert!(before > 2);
    // The first segment holds more than record 0: nothing is covered yet.
    assert_eq!(log.remove_through(0).unwrap(), 0);
    let removed = log.remove_through(30).unwrap();
    assert!(removed >= 1);
    let first = log.first().unwrap();
    assert!(
        first <= 31,
        "record 31 must stay, the log starts at {first}"
    );
    assert_eq!(log.read(first - 1).unwrap(), None);
    for n in first..60 {
        assert_eq!(log.read(n).unwrap(), Some(payload(n)));
    }
    // Everything covered: only the newest segment stays, and says where the log continues.
    log.remove_through(1_000).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.next(), Some(60));
    drop(log);
    let (log, _) = BlockLog::open(dir.path(), small()).unwrap();
    assert_eq!(log.next(), Some(60));
    assert_eq!(log.read(59).unwrap(), Some(payload(59)));
}

#[test]
fn a_second_open_of_the_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, _) = BlockLog::open(dir.path(), small()).unwrap();
    let err = BlockLog::open(dir.path(), small()).unwrap_err();
    assert!(matches!(err, Error::Locked(_)), "{err}");
}
