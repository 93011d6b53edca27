//! Flipped bytes and truncated or missing files end in the documented error, naming the file
//! and offset, or in a clean truncation of the newest file's torn tail; never in silently
//! different state.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use gigas_vilmo::{Commit, Error, Vilmo};

/// Contents of a store: key to value.
type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// The commit and contents after every batch.
    history: Vec<(Commit, Contents)>,
}

fn build(batches: u64) -> Fixture {
    build_with(batches, common::options(true))
}

fn build_with(batches: u64, options: gigas_vilmo::Options) -> Fixture {
    let compacting = options.compaction_threshold_percent > 0;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let mut store = Vilmo::open(&path, options).expect("open");
    let mut model = BTreeMap::new();
    let mut history = vec![(store.last_commit(), model.clone())];
    for n in 1..=batches {
        let commit = store.commit(common::batch(n)).expect("commit");
        common::apply(&mut model, n);
        history.push((commit, model.clone()));
    }
    assert_eq!(
        store.metrics().compactions.get() > 0,
        compacting,
        "the fixture must include compacted files exactly when compaction is on"
    );
    Fixture {
        _dir: dir,
        path,
        history,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_flipped_byte_is_reported_with_file_and_offset() {
    let fixture = build(150);
    let files = log_files(&fixture.path);
    assert!(files.len() >= 3, "{} files", files.len());
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut cases = 0;
    for (i, file) in files.iter().enumerate() {
        let len = fs::metadata(file).expect("stat").len();
        // Every header byte, then a spread of offsets through the file and its last bytes.
        let mut offsets: Vec<u64> = (0..64).collect();
        offsets.extend((64..len).step_by(89));
        offsets.extend(len.saturating_sub(40)..len);
        for offset in offsets {
            let dir = scratch.path().join(format!("flip-{i}-{offset}"));
            copy_dir(&fixture.path, &dir);
            let target = dir.join(file.file_name().expect("name"));
            let mut bytes = fs::read(&target).expect("read");
            bytes[offset as usize] ^= 0x10;
            fs::write(&target, &bytes).expect("write");
            match Vilmo::open(&dir, common::options(true)) {
                Err(Error::Corrupt {
                    path,
                    offset: at,
                    reason,
                }) => {
                    assert_eq!(
                        path, target,
                        "flip at {offset}: error names another file ({reason})"
                    );
                    assert!(at <= offset, "flip at {offset} reported at {at}: {reason}");
                }
                Err(other) => panic!(
                    "flip in {} at {offset}: unexpected error {other}",
                    target.display()
                ),
                Ok(store) => panic!(
                    "flip in {} at {offset} went unnoticed (store at batch {})",
                    target.display(),
                    store.last_commit().number
                ),
            }
            fs::remove_dir_all(&dir).expect("cleanup");
            cases += 1;
        }
    }
    assert!(cases > 300, "only {cases} flips tried");
}

#[test]
fn truncating_the_newest_file_is_a_clean_truncation() {
    // Without compaction every cut is a clean truncation.
    let (clean, errors) = truncate_newest(&build_with(
        120,
        gigas_vilmo::Options {
            compaction_threshold_percent: 0,
            ..common::options(true)
        },
    ));
    assert_eq!(errors, 0);
    assert!(clean > 20, "{clean} clean truncations");
}

#[test]
fn truncating_a_compacting_store_never_gives_wrong_state() {
    // With compaction, cutting into acknowledged batches can remove the drop record of a file
    // already compacted away (a real crash cannot: a file is removed only after its drop
    // record is durable). That state is gone and recovery must say so, or recover cleanly.
    let (clean, errors) = truncate_newest(&build(120));
    assert!(clean + errors > 20);
}

/// Cuts the newest file at many points; returns (clean truncations, reported losses).
fn truncate_newest(fixture: &Fixture) -> (usize, usize) {
    let files = log_files(&fixture.path);
    let newest = files.last().expect("files").clone();
    let len = fs::metadata(&newest).expect("stat").len();
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut cut_points: Vec<u64> = (0..len).step_by(53).collect();
    cut_points.push(len - 1);
    let newest_batch = fixture.history.len() as u64 - 1;
    let last_batch_start = len - last_batch_size(&newest);
    let (mut clean, mut errors) = (0, 0);
    for cut in cut_points {
        let dir = scratch.path().join(format!("cut-{cut}"));
        copy_dir(&fixture.path, &dir);
        let target = dir.join(newest.file_name().expect("name"));
        let f = fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .expect("open");
        f.set_len(cut).expect("truncate");
        drop(f);
        match Vilmo::open(&dir, common::options(true)) {
            Ok(store) => {
                let commit = store.last_commit();
                let (expected, contents) = &fixture.history[commit.number as usize];
                assert_eq!(&commit, expected, "cut at {cut}");
                assert_eq!(&common::contents(&store), contents, "cut at {cut}");
                assert!(commit.number < newest_batch, "cut at {cut} lost nothing?");
                if cut >= last_batch_start {
                    assert_eq!(
                        commit.number,
                        newest_batch - 1,
                        "a torn last batch loses only itself"
                    );
                }
                clean += 1;
            }
            Err(Error::MissingFile { .. }) => errors += 1,
            Err(e) => panic!("cut at {cut}: {e}"),
        }
        fs::remove_dir_all(&dir).expect("cleanup");
    }
    (clean, errors)
}

/// Size of the last batch in a log file, found by walking its batch headers.
fn last_batch_size(file: &Path) -> u64 {
    let bytes = fs::read(file).expect("read");
    let mut at = 64usize;
    let mut last = 0;
    while at + 24 <= bytes.len() {
        let body =
            u32::from_le_bytes(bytes[at + 16..at + 20].try_into().expect("4 bytes")) as usize;
        last = 24 + body + 36;
        at += last;
    }
    last as u64
}

#[test]
fn truncating_an_older_file_is_corruption() {
    let fixture = build(120);
    let files = log_files(&fixture.path);
    let older = files[files.len() - 2].clone();
    let len = fs::metadata(&older).expect("stat").len();
    for cut in [len / 3, len - 1] {
        let scratch = tempfile::tempdir().expect("tempdir");
        copy_dir(&fixture.path, scratch.path());
        let target = scratch.path().join(older.file_name().expect("name"));
        let f = fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .expect("open");
        f.set_len(cut).expect("truncate");
        drop(f);
        match Vilmo::open(scratch.path(), common::options(true)) {
            Err(Error::Corrupt { path, .. }) => assert_eq!(path, target),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("truncated older file at {cut} went unnoticed"),
        }
    }
}

#[test]
fn a_missing_middle_file_is_named() {
    let fixture = build(120);
    let files = log_files(&fixture.path);
    let middle = files[files.len() / 2].clone();
    let scratch = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixture.path, scratch.path());
    fs::remove_file(scratch.path().join(middle.file_name().expect("name"))).expect("remove");
    let id: u32 = middle
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("numbered file");
    match Vilmo::open(scratch.path(), common::options(true)) {
        Err(Error::MissingFile { file_id, .. }) => assert_eq!(file_id, id),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("missing file {id} went unnoticed"),
    }
}
