//! Review tests, on the real file system, for defects found in the store:
//!
//! - a store directory is not locked, so a second `open` runs recovery under a live writer;
//! - a failed open can already have changed the directory (unlinked a compacted file put back,
//!   truncated a torn tail, removed a torn newest file) before it finds the error;
//! - a legal crash state (the newest file's size reached the disk before some of the last
//!   batch's pages, which read back as zeros) is reported as corruption;
//! - logs from a peer (`sync_from_logs`) are trusted before they are checked;
//! - file names that only parse as a number (`1.vlog`, `+1.vlog`) are replayed as log files.
//!
//! Every test states the behaviour the store must have; several fail on the code they were
//! written against, which is the point. Cases that could panic, hang or try to allocate
//! gigabytes run in a child process (this test binary, under an address-space limit and a
//! timeout), so that such a failure is reported as a failed case instead of ending the run.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gigas_vilmo::format::{
    batch_checksum, decode_batch_header, encode_batch_header, Checksum, FileHeader, FileSpan,
    Record, BATCH_HEADER_LEN, FILE_HEADER_LEN, FOOTER_LEN, FOOTER_MAGIC, NO_FILE,
};
use gigas_vilmo::{Batch, Commit, Error, Options, Vilmo};

/// Contents of a store: key to value.
type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every file of a directory: name to bytes.
type Snapshot = BTreeMap<String, Vec<u8>>;

/// The page size the zeroed-tail rule is about: file systems write back whole pages.
const PAGE: usize = 4096;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Deterministic bytes with no zero byte, so that a zeroed page part of a batch made of them
/// can only come from the zeroing itself.
fn nonzero_bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (mix(seed ^ (i as u64).wrapping_mul(0x1000_0001)) as u8) | 1)
        .collect()
}

fn log_name(id: u32) -> String {
    format!("{id:08}.vlog")
}

fn log_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(log_name(id))
}

/// The numbers of the log files in `dir` with names of the exact form `NNNNNNNN.vlog`.
fn log_ids(dir: &Path) -> Vec<u32> {
    let mut ids: Vec<u32> = fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            let digits = name.strip_suffix(".vlog")?;
            if digits.len() == 8 && digits.bytes().all(|b| b.is_ascii_digit()) {
                digits.parse().ok()
            } else {
                None
            }
        })
        .collect();
    ids.sort_unstable();
    ids
}

fn snapshot(dir: &Path) -> Snapshot {
    fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().into_string().expect("utf-8 name");
            (name, fs::read(e.path()).expect("read"))
        })
        .collect()
}

/// What changed between two snapshots of a store directory. A new `LOCK` file is not a change
/// to the store: it is where a store takes its directory lock.
fn changes(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (name, bytes) in before {
        match after.get(name) {
            None => out.push(format!("{name} ({} bytes) was removed", bytes.len())),
            Some(now) if now.len() != bytes.len() => out.push(format!(
                "{name} changed length from {} to {}",
                bytes.len(),
                now.len()
            )),
            Some(now) if now != bytes => {
                let at = now.iter().zip(bytes).position(|(a, b)| a != b).unwrap_or(0);
                out.push(format!("{name} changed at byte {at}"));
            }
            Some(_) => {}
        }
    }
    for name in after.keys() {
        if !before.contains_key(name) && name != "LOCK" {
            out.push(format!("{name} appeared"));
        }
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

/// Overwrites `from..to` of the file with zeros, keeping its length.
fn zero(path: &Path, from: usize, to: usize) {
    let mut bytes = fs::read(path).expect("read");
    bytes[from..to].fill(0);
    fs::write(path, &bytes).expect("write");
}

fn cut(path: &Path, by: u64) {
    let f = fs::OpenOptions::new().write(true).open(path).expect("open");
    let len = f.metadata().expect("stat").len();
    f.set_len(len - by).expect("truncate");
}

/// The byte ranges of the complete batches of a log file, in order.
fn batches_in(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while let Ok(bh) = decode_batch_header(&bytes[at.min(bytes.len())..]) {
        let end = at + BATCH_HEADER_LEN + bh.body_len as usize + FOOTER_LEN;
        if end > bytes.len() {
            break;
        }
        out.push((at, end));
        at = end;
    }
    out
}

/// The files named by drop records in a log file.
fn drops_in(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    for (start, end) in batches_in(bytes) {
        let body = &bytes[start + BATCH_HEADER_LEN..end - FOOTER_LEN];
        let mut at = 0;
        while at < body.len() {
            let (record, len) = Record::decode(&body[at..]).expect("record");
            if let Record::Drop(span) = record {
                out.push(span.file_id);
            }
            at += len;
        }
    }
    out
}

/// The parts of `start..end` that lie in one aligned page each.
fn page_parts(start: usize, end: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let page_end = (at / PAGE + 1) * PAGE;
        out.push((at, page_end.min(end)));
        at = page_end.min(end);
    }
    out
}

/// A store of `batches` of the common workload in `<tempdir>/store`, with compaction off so
/// that every file stays, and the options it was written with.
fn store_without_compaction(batches: u64, durable: bool) -> (tempfile::TempDir, PathBuf, Options) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let options = Options {
        compaction_threshold_percent: 0,
        ..common::options(durable)
    };
    let mut store = Vilmo::open(&path, options.clone()).expect("open");
    for n in 1..=batches {
        store.commit(common::batch(n)).expect("commit");
    }
    drop(store);
    (dir, path, options)
}

/// A store that saw only `batches`, written with `options` (file size and compaction decide
/// the bytes, and so the checksums): its last commit and contents.
fn reference_with(batches: &[Batch], options: Options) -> (Commit, Contents) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Vilmo::open(dir.path(), options).expect("open reference");
    for b in batches {
        store.commit(b.clone()).expect("reference commit");
    }
    (store.last_commit(), common::contents(&store))
}

fn hex(c: &Checksum) -> String {
    c.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Checksum {
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Child processes: contain panics, aborts (allocation failure), hangs and runaway memory.
// ---------------------------------------------------------------------------------------------

const CHILD_MODE: &str = "GIGAS_VILMO_REVIEW_CHILD";
const CHILD_SRC: &str = "GIGAS_VILMO_REVIEW_SRC";
const CHILD_DEST: &str = "GIGAS_VILMO_REVIEW_DEST";
const CHILD_EXPECTED: &str = "GIGAS_VILMO_REVIEW_EXPECTED";
/// Address space of a child: far more than a store of these sizes needs, far less than a table
/// indexed by a file number near 2^32.
const CHILD_MEMORY: u64 = 1 << 30;
const CHILD_TIMEOUT: Duration = Duration::from_secs(15);

/// The child: one `sync_from_logs` or `open`, reported on stdout as `OUTCOME ok|err ...`.
#[test]
#[ignore = "run as a child process by the tests of this file"]
fn review_child() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let limit = libc::rlimit {
        rlim_cur: CHILD_MEMORY,
        rlim_max: CHILD_MEMORY,
    };
    // SAFETY: setrlimit only reads the struct, which lives across the call.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    assert_eq!(rc, 0, "setrlimit");
    let dest = PathBuf::from(std::env::var(CHILD_DEST).expect("dest"));
    let outcome = match mode.as_str() {
        "sync" => {
            let src = PathBuf::from(std::env::var(CHILD_SRC).expect("src"));
            let mut logs: Vec<PathBuf> = fs::read_dir(&src)
                .expect("read src")
                .map(|e| e.expect("entry").path())
                .collect();
            logs.sort();
            let expected = std::env::var(CHILD_EXPECTED).expect("expected");
            let (number, checksum) = expected.split_once(' ').expect("number and checksum");
            let expected = Commit {
                number: number.parse().expect("number"),
                checksum: unhex(checksum),
            };
            Vilmo::sync_from_logs(&logs, &dest, common::options(false), expected)
                .map(|s| s.last_commit())
        }
        "open" => Vilmo::open(&dest, common::options(false)).map(|s| s.last_commit()),
        other => panic!("unknown child mode {other}"),
    };
    match outcome {
        // On a line of its own: the test harness has already written part of a line.
        // Which log files the store kept tells a wrong success apart from a right one.
        Ok(c) => println!(
            "\nOUTCOME ok batch {} {}, log files left in the store: {:?}",
            c.number,
            c.checksum_hex(),
            log_ids(&dest)
        ),
        Err(e) => println!("\nOUTCOME err {}", e.to_string().replace('\n', " ")),
    }
}

/// How a child ended.
#[derive(Debug)]
enum Outcome {
    /// The operation returned `Ok`; the text says where the store ended.
    Ok(String),
    /// The operation returned an error; its Display.
    Err(String),
    /// A panic, an abort, a signal or a timeout.
    Crashed(String),
}

struct Job {
    name: String,
    env: Vec<(&'static str, String)>,
}

/// Runs the jobs as children of this test binary, a few at a time, each under a timeout.
fn run_children(jobs: Vec<Job>) -> Vec<(String, Outcome)> {
    const PARALLEL: usize = 3;
    let logs = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let mut pending = jobs.into_iter().enumerate().collect::<Vec<_>>();
    pending.reverse();
    let mut running: Vec<(usize, String, Child, Instant)> = Vec::new();
    let mut done: Vec<(usize, String, Outcome)> = Vec::new();
    while !pending.is_empty() || !running.is_empty() {
        while running.len() < PARALLEL {
            let Some((i, job)) = pending.pop() else { break };
            let out = fs::File::create(logs.path().join(format!("{i}.out"))).expect("out");
            let err = fs::File::create(logs.path().join(format!("{i}.err"))).expect("err");
            let mut cmd = Command::new(&exe);
            cmd.args([
                "--exact",
                "review_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            // The panic or allocation failure message is what the report needs, not a trace.
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
            for (k, v) in &job.env {
                cmd.env(k, v);
            }
            running.push((i, job.name, cmd.spawn().expect("spawn"), Instant::now()));
        }
        let mut still = Vec::new();
        for (i, name, mut child, started) in running.drain(..) {
            let status = child.try_wait().expect("wait");
            let read = |ext: &str| {
                fs::read_to_string(logs.path().join(format!("{i}.{ext}"))).unwrap_or_default()
            };
            let tail = |s: String| {
                let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
                lines[lines.len().saturating_sub(4)..].join(" | ")
            };
            match status {
                None if started.elapsed() > CHILD_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let msg = format!("hung: no result after {CHILD_TIMEOUT:?}");
                    done.push((i, name, Outcome::Crashed(msg)));
                }
                None => still.push((i, name, child, started)),
                Some(status) => {
                    let stdout = read("out");
                    let line = stdout
                        .lines()
                        .find_map(|l| l.strip_prefix("OUTCOME ").map(str::to_string));
                    let outcome = match (status.success(), line) {
                        (true, Some(l)) if l.starts_with("ok ") => Outcome::Ok(l[3..].into()),
                        (true, Some(l)) if l.starts_with("err ") => Outcome::Err(l[4..].into()),
                        _ => Outcome::Crashed(match status.signal() {
                            Some(sig) => format!("killed by signal {sig}: {}", tail(read("err"))),
                            None => {
                                format!("exited with {:?}: {}", status.code(), tail(read("err")))
                            }
                        }),
                    };
                    done.push((i, name, outcome));
                }
            }
        }
        running = still;
        std::thread::sleep(Duration::from_millis(5));
    }
    done.sort_by_key(|d| d.0);
    done.into_iter().map(|(_, n, o)| (n, o)).collect()
}

// ---------------------------------------------------------------------------------------------
// 3. The directory lock
// ---------------------------------------------------------------------------------------------

fn assert_locked(result: Result<Vilmo, Error>, how: &str) {
    match result {
        Ok(second) => {
            let at = second.last_commit().number;
            drop(second);
            panic!("{how}: a second open of a store in use succeeded (at batch {at}); it must fail as locked");
        }
        Err(e) => assert!(
            e.to_string().to_lowercase().contains("locked"),
            "{how}: a second open failed, but not as locked: {e}"
        ),
    }
}

/// Checks that the first store keeps committing while the second open was refused, and that
/// a reopen after it is dropped holds every batch.
fn finish_after_refused_open(mut first: Vilmo, path: &Path, model: &mut Contents, from: u64) {
    let mut last = first.last_commit();
    for n in from..from + 10 {
        last = first
            .commit(common::batch(n))
            .expect("the first store keeps committing");
        common::apply(model, n);
    }
    drop(first);
    let reopened = Vilmo::open(path, common::options(true)).expect("reopen after the first closed");
    assert_eq!(reopened.last_commit(), last);
    assert_eq!(&common::contents(&reopened), model);
}

#[test]
fn a_second_open_of_a_store_in_use_fails_as_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let mut first = Vilmo::open(&path, common::options(true)).expect("open");
    let mut model = Contents::new();
    for n in 1..=10 {
        first.commit(common::batch(n)).expect("commit");
        common::apply(&mut model, n);
    }
    assert_locked(
        Vilmo::open(&path, common::options(true)),
        "same path, same process",
    );
    // Another spelling of the same directory must be refused too: the lock is on the directory,
    // not on the string.
    assert_locked(
        Vilmo::open(path.join("."), common::options(true)),
        "the directory spelled `store/.`",
    );
    finish_after_refused_open(first, &path, &mut model, 11);
}

#[test]
fn a_second_process_cannot_open_a_store_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let mut first = Vilmo::open(&path, common::options(true)).expect("open");
    let mut model = Contents::new();
    for n in 1..=10 {
        first.commit(common::batch(n)).expect("commit");
        common::apply(&mut model, n);
    }
    let outcome = run_children(vec![Job {
        name: "open in another process".into(),
        env: vec![
            (CHILD_MODE, "open".into()),
            (CHILD_DEST, path.display().to_string()),
        ],
    }]);
    match &outcome[0].1 {
        Outcome::Err(e) => assert!(
            e.to_lowercase().contains("locked"),
            "the other process failed, but not as locked: {e}"
        ),
        other => {
            panic!("another process opened the store in use: {other:?}; it must fail as locked")
        }
    }
    finish_after_refused_open(first, &path, &mut model, 11);
}

// ---------------------------------------------------------------------------------------------
// Sanity: a clean reopen keeps the last acknowledged batch.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_batch_acknowledged_just_before_a_clean_reopen_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut model = Contents::new();
    let mut n = 0;
    for round in 0..3 {
        let mut store = Vilmo::open(dir.path(), common::options(true)).expect("open");
        assert_eq!(store.last_commit().number, n, "round {round}");
        let mut acked = store.last_commit();
        for _ in 0..15 {
            n += 1;
            acked = store.commit(common::batch(n)).expect("commit");
            common::apply(&mut model, n);
        }
        drop(store);
        let reopened = Vilmo::open(dir.path(), common::options(true)).expect("reopen");
        assert_eq!(reopened.last_commit(), acked, "round {round}");
        assert_eq!(common::contents(&reopened), model, "round {round}");
    }
}

// ---------------------------------------------------------------------------------------------
// 4. A failed open changes nothing
// ---------------------------------------------------------------------------------------------

/// A compacting store, with the final bytes of every log file that stopped being the current
/// one (so also of every file compacted away).
struct Compacted {
    _dir: tempfile::TempDir,
    path: PathBuf,
    saved: BTreeMap<u32, Vec<u8>>,
}

fn compacted_store(batches: u64) -> Compacted {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let mut store = Vilmo::open(&path, common::options(false)).expect("open");
    let mut saved = BTreeMap::new();
    for n in 1..=batches {
        store.commit(common::batch(n)).expect("commit");
        // A file is compacted only once it is no longer the current one, so its final bytes
        // are saved here before it can disappear.
        let ids = log_ids(&path);
        let newest = ids.last().copied().unwrap_or(0);
        for id in ids {
            if id != newest && !saved.contains_key(&id) {
                saved.insert(id, fs::read(log_path(&path, id)).expect("read"));
            }
        }
    }
    assert!(
        store.metrics().compactions.get() > 0,
        "no compaction happened"
    );
    Compacted {
        _dir: dir,
        path,
        saved,
    }
}

#[test]
fn a_failed_open_does_not_remove_a_compacted_file_put_back() {
    let fixture = compacted_store(300);
    let present = log_ids(&fixture.path);
    let (oldest, newest) = (present[0], *present.last().expect("files"));
    // Which present file holds the drop record of each compacted file.
    let mut holder = BTreeMap::new();
    for &id in &present {
        for dropped in drops_in(&fs::read(log_path(&fixture.path, id)).expect("read")) {
            holder.insert(dropped, id);
        }
    }
    // X: compacted away, its drop record in a present file. Z: a present middle file that does
    // not hold X's drop record, so that X's drop is still replayed when Z is missing.
    // The most recently compacted file that fits: its drop record is the freshest.
    let (x, z) = fixture
        .saved
        .keys()
        .rev()
        .filter(|id| !present.contains(id))
        .find_map(|&x| {
            let h = *holder.get(&x)?;
            let z = present
                .iter()
                .copied()
                .find(|&z| z != oldest && z != newest && z != h)?;
            Some((x, z))
        })
        .unwrap_or_else(|| panic!("fixture: no compacted file and middle file to use; present {present:?}, drops {holder:?}"));

    let scratch = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixture.path, scratch.path());
    // The process stopped between making X's drop durable and unlinking X.
    fs::write(log_path(scratch.path(), x), &fixture.saved[&x]).expect("put X back");
    fs::remove_file(log_path(scratch.path(), z)).expect("remove Z");
    let before = snapshot(scratch.path());
    let result = Vilmo::open(scratch.path(), common::options(false));
    let after = snapshot(scratch.path());
    let changed = changes(&before, &after);
    match result {
        Err(Error::MissingFile { file_id, .. }) if file_id == z => {}
        Err(e) => panic!("compacted file {x} put back, file {z} missing: unexpected error {e}"),
        Ok(s) => panic!(
            "compacted file {x} put back, file {z} missing: open succeeded at batch {}",
            s.last_commit().number
        ),
    }
    assert!(
        changed.is_empty(),
        "compacted file {x} put back, file {z} missing: the failed open changed the directory: {changed:?}"
    );
}

#[test]
fn other_failed_opens_change_nothing_in_the_directory() {
    let (_dir, path, options) = store_without_compaction(80, false);
    let ids = log_ids(&path);
    assert!(ids.len() >= 4, "{} files", ids.len());
    let newest = *ids.last().expect("files");
    let middle = ids[ids.len() / 2];
    let older = ids[1];

    type Mutation = Box<dyn Fn(&Path)>;
    let remove_middle = move |d: &Path| fs::remove_file(log_path(d, middle)).expect("remove");
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "a flipped byte in an older file, a torn tail in the newest",
            Box::new(move |d| {
                let p = log_path(d, older);
                let mut bytes = fs::read(&p).expect("read");
                bytes[FILE_HEADER_LEN + 100] ^= 0x10;
                fs::write(&p, &bytes).expect("write");
                cut(&log_path(d, newest), 7);
            }),
        ),
        (
            "a missing middle file, a torn tail in the newest",
            Box::new(move |d| {
                remove_middle(d);
                cut(&log_path(d, newest), 7);
            }),
        ),
        (
            "a missing middle file, a newest file shorter than its header",
            Box::new(move |d| {
                remove_middle(d);
                let header = FileHeader {
                    file_id: newest + 1,
                    first_batch: 81,
                    anchor: [0; 32],
                }
                .encode();
                fs::write(log_path(d, newest + 1), &header[..30]).expect("write");
            }),
        ),
        (
            "a missing middle file, a newest file of zeros",
            Box::new(move |d| {
                remove_middle(d);
                fs::write(log_path(d, newest + 1), vec![0u8; PAGE]).expect("write");
            }),
        ),
        (
            "a missing middle file, the newest file's last batch zeroed in its last page",
            Box::new(move |d| {
                remove_middle(d);
                let p = log_path(d, newest);
                let bytes = fs::read(&p).expect("read");
                let &(start, end) = batches_in(&bytes).last().expect("batches");
                let &(from, to) = page_parts(start, end).last().expect("part");
                zero(&p, from, to);
            }),
        ),
    ];
    let mut failures = Vec::new();
    for (name, mutate) in &cases {
        let scratch = tempfile::tempdir().expect("tempdir");
        copy_dir(&path, scratch.path());
        mutate(scratch.path());
        let before = snapshot(scratch.path());
        let result = Vilmo::open(scratch.path(), options.clone());
        let changed = changes(&before, &snapshot(scratch.path()));
        match result {
            Ok(s) => failures.push(format!(
                "{name}: open succeeded at batch {}",
                s.last_commit().number
            )),
            Err(e) if !changed.is_empty() => failures.push(format!(
                "{name}: failed ({e}) but changed the directory: {changed:?}"
            )),
            Err(_) => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed opens were wrong:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Page-aligned zeros in the newest file's last batch are a torn write
// ---------------------------------------------------------------------------------------------

/// A durable store of one file whose last batch is `last`, placed so that it starts at byte
/// `start_in_page` of a page when given.
struct LastBatch {
    _dir: tempfile::TempDir,
    path: PathBuf,
    newest: PathBuf,
    /// Byte range of the last batch in the newest file.
    start: usize,
    end: usize,
    /// Every batch committed, the last one included, and the last commit.
    batches: Vec<Batch>,
    acked: Commit,
}

/// One file, no compaction: the zeros are the only thing that differs between cases.
fn single_file_options() -> Options {
    Options {
        target_file_size: 1 << 20,
        compaction_threshold_percent: 0,
        ..common::options(true)
    }
}

fn with_last_batch(last: Batch, start_in_page: Option<usize>) -> LastBatch {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let mut store = Vilmo::open(&path, single_file_options()).expect("open");
    let mut batches: Vec<Batch> = (1..=30).map(common::batch).collect();
    for b in &batches {
        store.commit(b.clone()).expect("commit");
    }
    let newest = log_path(&path, 1);
    if let Some(pos) = start_in_page {
        // One put of a new key: header, put header, key, value, footer.
        let key = b"filler";
        let len = fs::metadata(&newest).expect("stat").len() as usize;
        let fixed = BATCH_HEADER_LEN + 11 + key.len() + FOOTER_LEN;
        let value_len = (pos + 2 * PAGE - (len + fixed) % PAGE) % PAGE;
        let mut filler = Batch::new();
        filler.put(key, &nonzero_bytes(7, value_len)).expect("put");
        store.commit(filler.clone()).expect("commit filler");
        batches.push(filler);
        let len = fs::metadata(&newest).expect("stat").len() as usize;
        assert_eq!(
            len % PAGE,
            pos,
            "fixture: filler did not place the last batch"
        );
    }
    let acked = store.commit(last.clone()).expect("commit last");
    batches.push(last);
    drop(store);
    let bytes = fs::read(&newest).expect("read");
    let &(start, end) = batches_in(&bytes).last().expect("batches");
    assert_eq!(end, bytes.len(), "fixture: the last batch ends the file");
    assert_eq!(log_ids(&path), vec![1], "fixture: one file");
    LastBatch {
        _dir: dir,
        path,
        newest,
        start,
        end,
        batches,
        acked,
    }
}

fn big_last_batch() -> Batch {
    let mut b = Batch::new();
    for i in 0..8u64 {
        b.put(format!("big-{i}").as_bytes(), &nonzero_bytes(100 + i, 2000))
            .expect("put");
    }
    b
}

fn small_last_batch() -> Batch {
    let mut b = Batch::new();
    b.put(b"tail", &nonzero_bytes(5, 200)).expect("put");
    b
}

/// Zeros `from..to` of the last batch and checks that open treats it as a torn write: the
/// store is at the batch before, equal to a store that never saw the last batch, the file is
/// cut where the last batch began, and committing the same batch again gives the same checksum.
fn assert_zeros_are_a_torn_write(fixture: &LastBatch, from: usize, to: usize) {
    assert!(fixture.start <= from && to <= fixture.end && from < to);
    zero(&fixture.newest, from, to);
    let mut store = match Vilmo::open(&fixture.path, single_file_options()) {
        Ok(s) => s,
        Err(e) => panic!(
            "the last batch (bytes {}..{}) zeroed at {from}..{to}, file length kept: open failed: {e}",
            fixture.start, fixture.end
        ),
    };
    let n = fixture.batches.len();
    let options = Options {
        durable: false,
        ..single_file_options()
    };
    let (commit, contents) = reference_with(&fixture.batches[..n - 1], options);
    assert_eq!(
        store.last_commit(),
        commit,
        "not at the batch before the zeroed one"
    );
    assert_eq!(common::contents(&store), contents);
    assert_eq!(
        fs::metadata(&fixture.newest).expect("stat").len(),
        fixture.start as u64,
        "the zeroed batch was not truncated away"
    );
    let again = store
        .commit(fixture.batches[n - 1].clone())
        .expect("commit the lost batch again");
    assert_eq!(
        again, fixture.acked,
        "the store does not continue the same chain"
    );
}

#[test]
fn a_large_last_batch_with_a_zeroed_middle_page_is_a_torn_write() {
    let fixture = with_last_batch(big_last_batch(), None);
    let full: Vec<(usize, usize)> = page_parts(fixture.start, fixture.end)
        .into_iter()
        .filter(|(a, b)| b - a == PAGE)
        .collect();
    assert!(full.len() >= 3, "fixture: only {} full pages", full.len());
    let (from, to) = full[full.len() / 2];
    assert_zeros_are_a_torn_write(&fixture, from, to);
}

#[test]
fn a_small_last_batch_zeroed_in_its_last_page_is_a_torn_write() {
    // The batch starts 100 bytes before a page boundary: its header and the start of its body
    // are intact, the rest (with the footer) reads as zeros.
    let fixture = with_last_batch(small_last_batch(), Some(PAGE - 100));
    let parts = page_parts(fixture.start, fixture.end);
    assert_eq!(parts.len(), 2, "fixture: the batch spans two pages");
    let (from, to) = parts[1];
    assert_zeros_are_a_torn_write(&fixture, from, to);
}

#[test]
fn a_small_last_batch_zeroed_whole_within_its_page_is_a_torn_write() {
    let fixture = with_last_batch(small_last_batch(), Some(100));
    let parts = page_parts(fixture.start, fixture.end);
    assert_eq!(parts.len(), 1, "fixture: the batch lies in one page");
    assert_zeros_are_a_torn_write(&fixture, fixture.start, fixture.end);
}

#[test]
fn a_newest_file_of_zeros_is_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    let mut model = Contents::new();
    let mut acked = Commit {
        number: 0,
        checksum: [0; 32],
    };
    {
        let mut store = Vilmo::open(&path, common::options(true)).expect("open");
        for n in 1..=40 {
            acked = store.commit(common::batch(n)).expect("commit");
            common::apply(&mut model, n);
        }
    }
    let next = *log_ids(&path).last().expect("files") + 1;
    let mut failures = Vec::new();
    for len in [FILE_HEADER_LEN, PAGE] {
        let scratch = tempfile::tempdir().expect("tempdir");
        copy_dir(&path, scratch.path());
        let zeros = log_path(scratch.path(), next);
        // Created at rotation; its size reached the disk, none of its pages did.
        fs::write(&zeros, vec![0u8; len]).expect("write");
        match Vilmo::open(scratch.path(), common::options(true)) {
            Ok(store) => {
                if store.last_commit() != acked || common::contents(&store) != model {
                    failures.push(format!(
                        "{len} zero bytes: open at batch {} instead of {}",
                        store.last_commit().number,
                        acked.number
                    ));
                }
                if zeros.exists() {
                    failures.push(format!(
                        "{len} zero bytes: the file of zeros is still there"
                    ));
                }
            }
            Err(e) => failures.push(format!("{len} zero bytes: open failed: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_flipped_bit_in_the_last_batch_is_still_corruption() {
    let fixture = with_last_batch(big_last_batch(), None);
    let scratch = tempfile::tempdir().expect("tempdir");
    let name = fixture.newest.file_name().expect("name");
    let original = fs::read(&fixture.newest).expect("read");
    let (start, end) = (fixture.start, fixture.end);
    let mut offsets: Vec<usize> = (start..start + BATCH_HEADER_LEN).collect();
    offsets.extend((start + BATCH_HEADER_LEN..end - FOOTER_LEN).step_by(211));
    offsets.extend(end - FOOTER_LEN..end);
    let mut tried = 0;
    for offset in offsets {
        let mut bytes = original.clone();
        bytes[offset] ^= 0x10;
        // A flip that leaves a page part of the batch all zeros is what a torn write looks
        // like; this test is about flips that cannot be one.
        if page_parts(start, end)
            .iter()
            .any(|&(a, b)| bytes[a..b].iter().all(|&x| x == 0))
        {
            continue;
        }
        let dir = scratch.path().join(format!("flip-{offset}"));
        copy_dir(&fixture.path, &dir);
        let target = dir.join(name);
        fs::write(&target, &bytes).expect("write");
        let before = snapshot(&dir);
        match Vilmo::open(&dir, single_file_options()) {
            Err(e @ Error::Corrupt { .. }) => {
                let text = e.to_string();
                let Error::Corrupt {
                    path, offset: at, ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!(path, target, "flip at {offset}: {text}");
                assert!(
                    (start as u64..=offset as u64).contains(&at),
                    "flip at {offset} reported at {at}: {text}"
                );
                assert!(text.contains("corrupt"), "{text}");
            }
            Err(other) => panic!("flip at {offset}: unexpected error {other}"),
            Ok(s) => panic!(
                "flip at {offset} of the last batch went unnoticed (open at batch {})",
                s.last_commit().number
            ),
        }
        let changed = changes(&before, &snapshot(&dir));
        assert!(changed.is_empty(), "flip at {offset}: {changed:?}");
        fs::remove_dir_all(&dir).expect("cleanup");
        tried += 1;
    }
    assert!(tried > 100, "only {tried} flips");
}

#[test]
fn zeros_outside_the_newest_files_last_batch_are_still_corruption() {
    let (_dir, path, options) = store_without_compaction(60, true);
    let ids = log_ids(&path);
    assert!(ids.len() >= 3, "{} files", ids.len());
    let newest = *ids.last().expect("files");
    let older = ids[ids.len() - 2];
    let batches = |id: u32| batches_in(&fs::read(log_path(&path, id)).expect("read"));
    let newest_batches = batches(newest);
    assert!(
        newest_batches.len() >= 2,
        "fixture: one batch in the newest file"
    );
    let older_batches = batches(older);
    // (file, batch range, what)
    let cases = [
        (
            newest,
            newest_batches[newest_batches.len() - 2],
            "the newest file's second-to-last batch",
        ),
        (
            older,
            *older_batches.last().expect("batches"),
            "an older file's last batch",
        ),
        (
            older,
            older_batches[older_batches.len() / 2],
            "an older file's middle batch",
        ),
    ];
    let mut failures = Vec::new();
    for (file, (start, end), what) in cases {
        let &(from, to) = page_parts(start, end).last().expect("part");
        let scratch = tempfile::tempdir().expect("tempdir");
        copy_dir(&path, scratch.path());
        let target = log_path(scratch.path(), file);
        zero(&target, from, to);
        let before = snapshot(scratch.path());
        match Vilmo::open(scratch.path(), options.clone()) {
            Err(Error::Corrupt { path: p, .. }) if p == target => {}
            Err(e) => failures.push(format!(
                "{what} zeroed at {from}..{to}: unexpected error {e}"
            )),
            Ok(s) => failures.push(format!(
                "{what} zeroed at {from}..{to}: open succeeded at batch {}",
                s.last_commit().number
            )),
        }
        let changed = changes(&before, &snapshot(scratch.path()));
        if !changed.is_empty() {
            failures.push(format!("{what}: the failed open changed {changed:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// 7. Logs from a peer are checked before they are trusted
// ---------------------------------------------------------------------------------------------

/// A log file being crafted: header and checksummed batches, as a malicious peer can make them.
struct Craft {
    bytes: Vec<u8>,
    next: u64,
    last: Checksum,
}

impl Craft {
    fn new(file_id: u32, first_batch: u64, anchor: Checksum) -> Self {
        Self {
            bytes: FileHeader {
                file_id,
                first_batch,
                anchor,
            }
            .encode()
            .to_vec(),
            next: first_batch,
            last: anchor,
        }
    }

    fn batch(&mut self, records: &[Record<'_>]) -> &mut Self {
        let mut body = Vec::new();
        for r in records {
            r.encode_into(&mut body);
        }
        let header = encode_batch_header(self.next, records.len() as u32, body.len() as u32);
        self.last = batch_checksum(&self.last, &header, &body);
        self.bytes.extend_from_slice(&header);
        self.bytes.extend_from_slice(&body);
        self.bytes.extend_from_slice(&FOOTER_MAGIC);
        self.bytes.extend_from_slice(&self.last);
        self.next += 1;
        self
    }

    fn commit(&self) -> Commit {
        Commit {
            number: self.next - 1,
            checksum: self.last,
        }
    }
}

/// An honest store of a few files, whose last commit is what an honest peer announces.
struct Honest {
    _dir: tempfile::TempDir,
    files: Vec<PathBuf>,
    last: Commit,
}

fn honest() -> Honest {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        compaction_threshold_percent: 0,
        ..common::options(false)
    };
    let mut store = Vilmo::open(dir.path(), options).expect("open");
    for n in 1..=30 {
        store.commit(common::batch(n)).expect("commit");
    }
    let files = store.log_files();
    assert!(files.len() >= 3, "fixture: {} files", files.len());
    Honest {
        last: store.last_commit(),
        files,
        _dir: dir,
    }
}

impl Honest {
    fn next_id(&self) -> u32 {
        self.files.len() as u32 + 1
    }

    /// A new file after the honest ones, continuing the honest chain.
    fn craft_next(&self) -> Craft {
        Craft::new(self.next_id(), self.last.number + 1, self.last.checksum)
    }

    fn bytes(&self, id: u32) -> Vec<u8> {
        fs::read(&self.files[id as usize - 1]).expect("read")
    }
}

/// A set of files a peer sends, and the last commit of the chain they make.
struct SyncCase {
    name: &'static str,
    src: tempfile::TempDir,
    own_last: Commit,
}

/// The honest files (all, or without those named in `without`) plus `extra` (name, bytes).
fn sync_case(
    honest: &Honest,
    name: &'static str,
    without: &[&str],
    extra: Vec<(String, Vec<u8>)>,
    own_last: Commit,
) -> SyncCase {
    let src = tempfile::tempdir().expect("tempdir");
    for f in &honest.files {
        let file_name = f.file_name().expect("name");
        if !without.iter().any(|w| file_name == *w) {
            fs::copy(f, src.path().join(file_name)).expect("copy");
        }
    }
    for (file_name, bytes) in extra {
        fs::write(src.path().join(file_name), bytes).expect("write");
    }
    SyncCase {
        name,
        src,
        own_last,
    }
}

/// Runs `sync_from_logs` on every case, expecting the honest checksum and the crafted chain's
/// own checksum, in child processes. Every run must return an error, and the source files must
/// be unchanged.
fn assert_sync_rejects(honest: &Honest, cases: Vec<SyncCase>) {
    let work = tempfile::tempdir().expect("tempdir");
    let mut jobs = Vec::new();
    let mut sources = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        sources.push(snapshot(case.src.path()));
        let mut expectations = vec![("the honest checksum", honest.last)];
        if case.own_last != honest.last {
            expectations.push(("the crafted chain's own checksum", case.own_last));
        }
        for (j, (label, expected)) in expectations.into_iter().enumerate() {
            jobs.push(Job {
                name: format!("{} (expecting {label})", case.name),
                env: vec![
                    (CHILD_MODE, "sync".into()),
                    (CHILD_SRC, case.src.path().display().to_string()),
                    (
                        CHILD_DEST,
                        work.path().join(format!("{i}-{j}")).display().to_string(),
                    ),
                    (
                        CHILD_EXPECTED,
                        format!("{} {}", expected.number, hex(&expected.checksum)),
                    ),
                ],
            });
        }
    }
    let total = jobs.len();
    let mut failures = Vec::new();
    for (name, outcome) in run_children(jobs) {
        match outcome {
            Outcome::Err(_) => {}
            Outcome::Ok(at) => failures.push(format!("{name}: sync succeeded ({at})")),
            Outcome::Crashed(how) => failures.push(format!("{name}: {how}")),
        }
    }
    for (case, before) in cases.iter().zip(&sources) {
        let changed = changes(before, &snapshot(case.src.path()));
        if !changed.is_empty() {
            failures.push(format!("{}: source files changed: {changed:?}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} syncs of malicious logs did not fail cleanly:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn put<'a>(key: &'a [u8], value: &'a [u8], supersedes: u32) -> Record<'a> {
    Record::Put {
        key,
        value,
        supersedes,
        moved: false,
    }
}

#[test]
fn sync_rejects_drop_records_of_their_own_or_a_later_file() {
    let h = honest();
    let id = h.next_id();
    // A span that fits the chain exactly where the file would be: empty, from the honest end.
    let empty_span = |file_id| FileSpan {
        file_id,
        first_batch: h.last.number + 1,
        last_batch: h.last.number,
        anchor: h.last.checksum,
        last: h.last.checksum,
    };
    let mut own = h.craft_next();
    own.batch(&[Record::Drop(empty_span(id))]);

    let mut first = h.craft_next();
    first.batch(&[Record::Drop(FileSpan {
        file_id: id + 1,
        first_batch: h.last.number + 2,
        last_batch: h.last.number + 2,
        anchor: [0; 32],
        last: [0; 32],
    })]);
    let mut later = Craft::new(id + 1, first.next, first.last);
    later.batch(&[put(b"later", b"value", NO_FILE)]);

    let cases = vec![
        sync_case(
            &h,
            "a drop record of its own file",
            &[],
            vec![(log_name(id), own.bytes.clone())],
            own.commit(),
        ),
        sync_case(
            &h,
            "a drop record of a later file that is present",
            &[],
            vec![
                (log_name(id), first.bytes.clone()),
                (log_name(id + 1), later.bytes.clone()),
            ],
            later.commit(),
        ),
        sync_case(
            &h,
            "a drop record of a later file that is absent",
            &[],
            vec![(log_name(id), first.bytes.clone())],
            first.commit(),
        ),
    ];
    assert_sync_rejects(&h, cases);
}

#[test]
fn sync_rejects_file_numbers_near_the_top_of_u32() {
    let h = honest();
    let id = h.next_id();
    let top = u32::MAX - 1;
    let mut drop_top = h.craft_next();
    drop_top.batch(&[
        put(b"k", b"v", NO_FILE),
        Record::Drop(FileSpan {
            file_id: top,
            first_batch: h.last.number + 1,
            last_batch: h.last.number,
            anchor: h.last.checksum,
            last: h.last.checksum,
        }),
    ]);
    let mut header_top = Craft::new(top, h.last.number + 1, h.last.checksum);
    header_top.batch(&[put(b"k", b"v", NO_FILE)]);
    let mut header_eight = Craft::new(99_999_999, h.last.number + 1, h.last.checksum);
    header_eight.batch(&[put(b"k", b"v", NO_FILE)]);

    let cases = vec![
        sync_case(
            &h,
            "a drop record of file u32::MAX - 1",
            &[],
            vec![(log_name(id), drop_top.bytes.clone())],
            drop_top.commit(),
        ),
        sync_case(
            &h,
            "file u32::MAX - 1 named 4294967294.vlog",
            &[],
            vec![(log_name(top), header_top.bytes.clone())],
            header_top.commit(),
        ),
        sync_case(
            &h,
            "file u32::MAX - 1 in a file named as the next file",
            &[],
            vec![(log_name(id), header_top.bytes.clone())],
            header_top.commit(),
        ),
        sync_case(
            &h,
            "file 99999999, the largest eight-digit name",
            &[],
            vec![(log_name(99_999_999), header_eight.bytes.clone())],
            header_eight.commit(),
        ),
    ];
    assert_sync_rejects(&h, cases);
}

#[test]
fn sync_rejects_cursors_off_a_boundary_past_the_end_or_of_a_missing_file() {
    let h = honest();
    let id = h.next_id();
    let victim = 2u32;
    let victim_bytes = h.bytes(victim);
    let boundaries: Vec<usize> = batches_in(&victim_bytes).iter().map(|b| b.0).collect();
    let off = boundaries[0] + 8;
    assert!(!boundaries.contains(&off));
    let with_cursor = |victim, next| {
        let mut c = h.craft_next();
        c.batch(&[put(b"k", b"v", NO_FILE), Record::Cursor { victim, next }]);
        (log_name(id), c.bytes.clone(), c.commit())
    };
    let cases = [
        (
            "a cursor off a batch boundary",
            with_cursor(victim, off as u64),
        ),
        (
            "a cursor inside a record",
            with_cursor(victim, (boundaries[0] + BATCH_HEADER_LEN + 1) as u64),
        ),
        (
            "a cursor past the end of its file",
            with_cursor(victim, victim_bytes.len() as u64 + 4096),
        ),
        (
            "a cursor naming a file that does not exist",
            with_cursor(77, FILE_HEADER_LEN as u64),
        ),
    ]
    .into_iter()
    .map(|(name, (file, bytes, last))| sync_case(&h, name, &[], vec![(file, bytes)], last))
    .collect();
    assert_sync_rejects(&h, cases);
}

#[test]
fn sync_rejects_a_put_superseding_a_file_near_the_top_of_u32() {
    let h = honest();
    let id = h.next_id();
    let top = u32::MAX - 1;
    let mut once = h.craft_next();
    once.batch(&[put(b"evil", b"value", top)]);
    // The same, then overwritten, so that the dead put's duty towards its superseded file is
    // taken up too.
    let mut overwritten = h.craft_next();
    overwritten
        .batch(&[put(b"evil", b"value", top)])
        .batch(&[put(b"evil", b"other", NO_FILE)]);
    let cases = vec![
        sync_case(
            &h,
            "a put superseding file u32::MAX - 1",
            &[],
            vec![(log_name(id), once.bytes.clone())],
            once.commit(),
        ),
        sync_case(
            &h,
            "a put superseding file u32::MAX - 1, then overwritten",
            &[],
            vec![(log_name(id), overwritten.bytes.clone())],
            overwritten.commit(),
        ),
    ];
    assert_sync_rejects(&h, cases);
}

#[test]
fn sync_rejects_file_names_not_of_the_exact_form() {
    let h = honest();
    let first = h.bytes(1);
    let cases = vec![
        sync_case(
            &h,
            "an extra +1.vlog, a copy of file 1",
            &[],
            vec![("+1.vlog".into(), first.clone())],
            h.last,
        ),
        sync_case(
            &h,
            "an extra 1.vlog, a copy of file 1",
            &[],
            vec![("1.vlog".into(), first.clone())],
            h.last,
        ),
        sync_case(
            &h,
            "an extra 000000001.vlog, a copy of file 1",
            &[],
            vec![("000000001.vlog".into(), first.clone())],
            h.last,
        ),
        sync_case(
            &h,
            "file 1 sent as 1.vlog",
            &["00000001.vlog"],
            vec![("1.vlog".into(), first.clone())],
            h.last,
        ),
    ];
    assert_sync_rejects(&h, cases);
}

// ---------------------------------------------------------------------------------------------
// 8c. Stray files whose names only parse as a number
// ---------------------------------------------------------------------------------------------

/// Opens `path` with the stray file `stray` (a copy of an old `00000001.vlog`) and a copy of
/// `path` without it; both must give the same state and go on to the same checksums, and the
/// stray file must be left alone. Returns what went wrong.
fn check_stray(path: &Path, stray: &str, bytes: &[u8], options: &Options) -> Vec<String> {
    let mut problems = Vec::new();
    let plain = tempfile::tempdir().expect("tempdir");
    copy_dir(path, plain.path());
    let with = tempfile::tempdir().expect("tempdir");
    copy_dir(path, with.path());
    let stray_path = with.path().join(stray);
    fs::write(&stray_path, bytes).expect("write stray");
    let mut expected = Vilmo::open(plain.path(), options.clone()).expect("open without the stray");
    let mut store = match Vilmo::open(with.path(), options.clone()) {
        Ok(s) => s,
        Err(e) => return vec![format!("{stray}: open failed: {e}")],
    };
    if store.last_commit() != expected.last_commit() {
        problems.push(format!(
            "{stray}: open at batch {}, without it at batch {}",
            store.last_commit().number,
            expected.last_commit().number
        ));
    }
    if common::contents(&store) != common::contents(&expected) {
        problems.push(format!("{stray}: contents differ"));
    }
    if store.stats() != expected.stats() {
        problems.push(format!(
            "{stray}: stats differ (live bytes decide compaction): {:?} vs {:?} without it",
            store.stats(),
            expected.stats()
        ));
    }
    let from = expected.last_commit().number + 1;
    for n in from..from + 150 {
        let a = store.commit(common::batch(n));
        let b = expected
            .commit(common::batch(n))
            .expect("commit without the stray");
        match a {
            Ok(a) if a == b => {}
            Ok(_) => {
                problems.push(format!("{stray}: checksums diverge at batch {n}"));
                break;
            }
            Err(e) => {
                problems.push(format!("{stray}: commit of batch {n} failed: {e}"));
                break;
            }
        }
    }
    drop(store);
    match fs::read(&stray_path) {
        Ok(now) if now == bytes => {}
        Ok(_) => problems.push(format!("{stray}: the stray file was modified")),
        Err(e) => problems.push(format!("{stray}: the stray file is gone ({e})")),
    }
    problems
}

#[test]
fn stray_one_dot_vlog_files_are_not_replayed_as_file_one() {
    // File 1 is still in the store; the strays are copies of it.
    let (_dir, path, _) = store_without_compaction(40, false);
    assert!(log_ids(&path).len() >= 2);
    let first = fs::read(log_path(&path, 1)).expect("read");
    // Continue with compaction on, so that live-byte accounting decides what gets written.
    let mut problems = Vec::new();
    for stray in ["1.vlog", "+1.vlog"] {
        problems.extend(check_stray(&path, stray, &first, &common::options(false)));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_stray_copy_of_a_compacted_file_one_is_ignored() {
    // File 1 was compacted away; the stray is a copy of it from before.
    let fixture = compacted_store(300);
    assert!(
        !log_ids(&fixture.path).contains(&1),
        "fixture: file 1 was not compacted away"
    );
    let first = fixture.saved[&1].clone();
    let mut problems = Vec::new();
    for stray in ["1.vlog", "+1.vlog"] {
        problems.extend(check_stray(
            &fixture.path,
            stray,
            &first,
            &common::options(false),
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A batch far larger than a block's (a genesis) must not leave its encode buffer behind for
/// the store's life: a heap profile of the sequencer after a 1M-account genesis found 112 MiB
/// held by it.
#[test]
fn a_huge_batch_does_not_pin_its_encode_buffer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Vilmo::open(dir.path(), common::options(false)).expect("open");
    let mut big = Batch::new();
    for i in 0..40_000u32 {
        big.put(&i.to_be_bytes(), &nonzero_bytes(u64::from(i), 512))
            .expect("put");
    }
    store.commit(big).expect("a 20 MB batch");
    assert!(
        store.stats().buffer_bytes <= 16 << 20,
        "{} bytes kept after a 20 MB batch",
        store.stats().buffer_bytes
    );
    let mut small = Batch::new();
    small.put(b"k", b"v").expect("put");
    store.commit(small).expect("a small batch");
    assert!(store.stats().buffer_bytes < 1 << 20);
    assert_eq!(store.get(&7u32.to_be_bytes()).map(<[u8]>::len), Some(512));
}
