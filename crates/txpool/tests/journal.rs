//! The journal: replay in order, torn tails, corruption, rewrite, group commit, and appends
//! racing with rewrites, on a real file system.

mod common;

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use alloy_primitives::{Bytes, U256};
use common::*;
use gigas_txpool::{AddOutcome, Journal, JournalError, TxPool};
use tokio::task::JoinSet;

/// A directory on the build's disk (not a tmpfs), so that fsync does real work.
fn dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

fn records(count: usize, salt: u8) -> Vec<Bytes> {
    (0..count)
        .map(|i| {
            let len = 50 + (i * 37) % 300;
            Bytes::from(
                (0..len)
                    .map(|j| (i as u8).wrapping_mul(31) ^ (j as u8) ^ salt)
                    .collect::<Vec<_>>(),
            )
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn append_all(journal: &Journal, raws: &[Bytes]) {
    runtime().block_on(async {
        for raw in raws {
            journal.append(raw.clone()).await.expect("append");
        }
    });
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("metadata").len()
}

#[test]
fn appends_replay_in_order_after_reopen() {
    let dir = dir();
    let path = dir.path().join("txpool.journal");
    let (journal, replay) = Journal::open(&path).expect("create");
    assert!(replay.is_empty());
    assert_eq!(journal.len_bytes(), 16);
    let raws = records(100, 0);
    append_all(&journal, &raws);
    assert_eq!(journal.len_bytes(), file_len(&path));
    assert_eq!(journal.metrics().appends.get(), 100);
    drop(journal);

    let (journal, replay) = Journal::open(&path).expect("reopen");
    assert_eq!(replay, raws);
    let more = records(10, 7);
    append_all(&journal, &more);
    drop(journal);
    let (_, replay) = Journal::open(&path).expect("reopen");
    assert_eq!(replay, [raws, more].concat());
}

#[test]
fn a_torn_tail_is_cut_and_the_journal_goes_on() {
    let dir = dir();
    let path = dir.path().join("txpool.journal");
    let (journal, _) = Journal::open(&path).expect("create");
    let raws = records(20, 1);
    append_all(&journal, &raws);
    drop(journal);
    let intact = file_len(&path);

    // A crash in the middle of the next batch's write: its header and part of its payload.
    let (journal, _) = Journal::open(&path).expect("reopen");
    append_all(&journal, &records(1, 2));
    drop(journal);
    let grown = file_len(&path);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .set_len(grown - 5)
        .expect("truncate");
    let (journal, replay) = Journal::open(&path).expect("a torn tail is not an error");
    assert_eq!(replay, raws);
    assert_eq!(
        file_len(&path),
        intact,
        "the torn batch is cut from the file"
    );
    append_all(&journal, &records(3, 3));
    drop(journal);
    let (_, replay) = Journal::open(&path).expect("reopen");
    assert_eq!(replay, [raws.clone(), records(3, 3)].concat());

    // A power loss after the file grew but before its data reached the disk: zeros.
    let before = file_len(&path);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open")
        .write_all(&[0u8; 700])
        .expect("write");
    let (_, replay) = Journal::open(&path).expect("a zeroed tail is not an error");
    assert_eq!(replay.len(), raws.len() + 3);
    assert_eq!(file_len(&path), before);

    // A few bytes of a batch header.
    OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open")
        .write_all(&[9, 9, 9])
        .expect("write");
    let (_, replay) = Journal::open(&path).expect("a short tail is not an error");
    assert_eq!(replay.len(), raws.len() + 3);
}

#[test]
fn damage_before_the_tail_is_an_error_with_file_and_offset() {
    let dir = dir();
    let path = dir.path().join("txpool.journal");
    let (journal, _) = Journal::open(&path).expect("create");
    let first = records(5, 4);
    append_all(&journal, &first);
    append_all(&journal, &records(5, 5));
    drop(journal);

    // One bit of the first batch's payload (the first batch starts after the 16-byte header).
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[16 + 12 + 20] ^= 0x01;
    std::fs::write(&path, &bytes).expect("write");
    let err = Journal::open(&path).expect_err("corruption must not be replayed");
    match &err {
        JournalError::Corrupt {
            path: at, offset, ..
        } => {
            assert_eq!(at, &path);
            assert_eq!(*offset, 16);
        }
        other => panic!("unexpected {other}"),
    }
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("offset 16"), "{message}");

    // A damaged batch header in the middle.
    bytes[16 + 20] ^= 0x01;
    bytes[16 + 2] ^= 0x40;
    std::fs::write(&path, &bytes).expect("write");
    let err = Journal::open(&path).expect_err("corruption must not be replayed");
    assert!(
        matches!(err, JournalError::Corrupt { offset: 16, .. }),
        "{err}"
    );

    std::fs::write(&path, b"definitely not a journal").expect("write");
    assert!(matches!(
        Journal::open(&path),
        Err(JournalError::NotAJournal { .. })
    ));
}

#[test]
fn rewrite_replaces_the_contents_and_survives_reopen() {
    let dir = dir();
    let path = dir.path().join("txpool.journal");
    let (journal, _) = Journal::open(&path).expect("create");
    let raws = records(200, 6);
    append_all(&journal, &raws);
    let grown = journal.len_bytes();
    let live: Vec<Bytes> = raws.iter().skip(150).cloned().collect();
    let kept = live.clone();
    journal.rewrite(move || kept).expect("rewrite");
    assert!(journal.len_bytes() < grown);
    assert_eq!(journal.len_bytes(), file_len(&path));
    assert!(!tmp(&path).exists());
    let after = records(4, 8);
    append_all(&journal, &after);
    assert_eq!(journal.metrics().rewrites.get(), 1);
    drop(journal);
    let (journal, replay) = Journal::open(&path).expect("reopen");
    assert_eq!(replay, [live, after].concat());

    // An empty pool rewrites to an empty journal.
    journal.rewrite(Vec::new).expect("rewrite");
    drop(journal);
    let (_, replay) = Journal::open(&path).expect("reopen");
    assert!(replay.is_empty());

    // A crash before the rename leaves the old journal and a stale temporary file.
    std::fs::write(tmp(&path), b"half a rewrite").expect("write");
    let (_, replay) = Journal::open(&path).expect("reopen");
    assert!(replay.is_empty());
    assert!(!tmp(&path).exists());
}

fn tmp(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

#[test]
fn concurrent_appends_share_fsyncs() {
    let dir = dir();
    let path = dir.path().join("txpool.journal");
    let (journal, _) = Journal::open(&path).expect("create");
    let journal = Arc::new(journal);
    let raws = records(1000, 9);
    runtime().block_on(async {
        let mut tasks = JoinSet::new();
        for raw in raws.clone() {
            let journal = Arc::clone(&journal);
            tasks.spawn(async move { journal.append(raw).await });
        }
        while let Some(joined) = tasks.join_next().await {
            joined.expect("task").expect("append");
        }
    });
    let metrics = journal.metrics();
    let (appends, fsyncs) = (metrics.appends.get(), metrics.fsyncs.get());
    println!("group commit: {appends} appends in {fsyncs} fdatasyncs");
    assert_eq!(appends, 1000);
    assert!(fsyncs < appends, "{fsyncs} fsyncs for {appends} appends");
    drop(journal);
    let (_, replay) = Journal::open(&path).expect("reopen");
    let expected: HashSet<&Bytes> = raws.iter().collect();
    assert_eq!(replay.len(), raws.len());
    assert_eq!(replay.iter().collect::<HashSet<_>>(), expected);
}

/// The node's order: add to the pool, then append; the rewrite snapshots the pool. Whatever got
/// an acknowledged append is in the journal after any number of racing rewrites.
#[test]
fn appends_racing_with_rewrites_are_never_lost() {
    let dir = dir();
    let path = dir.path().join("txpool.journal");
    let (journal, _) = Journal::open(&path).expect("create");
    let journal = Arc::new(journal);
    let keys: Vec<_> = (0..40).map(signer).collect();
    let state = Arc::new(MemState::funded(
        keys.iter().map(|k| k.address()),
        U256::from(ETH),
    ));
    let pool = Arc::new(TxPool::new(config()));
    let txs: Vec<Bytes> = (0..15)
        .flat_map(|nonce| keys.iter().map(move |key| transfer(key, nonce, 10, 1)))
        .collect();

    // After each rewrite the rewriter copies the journal file, as a crash at that instant
    // would leave it: every append acknowledged before the copy started must be in the copy.
    let acked = Arc::new(std::sync::Mutex::new(HashSet::<Bytes>::new()));
    let rewriter = {
        let (journal, pool, acked) = (Arc::clone(&journal), Arc::clone(&pool), Arc::clone(&acked));
        let (path, dir) = (path.clone(), dir.path().to_path_buf());
        std::thread::spawn(move || {
            let mut crashes = Vec::new();
            for round in 0..25 {
                let pool = Arc::clone(&pool);
                journal
                    .rewrite(move || pool.all_encoded())
                    .expect("rewrite");
                let before = acked.lock().expect("lock").clone();
                let copy = dir.join(format!("crash-{round}.journal"));
                std::fs::copy(&path, &copy).expect("copy");
                crashes.push((copy, before));
                std::thread::yield_now();
            }
            crashes
        })
    };
    let acknowledged = runtime().block_on(async {
        let mut tasks = JoinSet::new();
        // One task per sender keeps each sender's nonces in order.
        for chunk in 0..keys.len() {
            let mine: Vec<Bytes> = txs
                .iter()
                .skip(chunk)
                .step_by(keys.len())
                .cloned()
                .collect();
            let (journal, pool, state, acked) = (
                Arc::clone(&journal),
                Arc::clone(&pool),
                Arc::clone(&state),
                Arc::clone(&acked),
            );
            tasks.spawn(async move {
                let mut done = Vec::new();
                for raw in mine {
                    let tx = pooled(&raw);
                    let outcome = pool.add(tx, state.as_ref(), 1).expect("valid");
                    assert_eq!(outcome, AddOutcome::Pending);
                    journal.append(raw.clone()).await.expect("append");
                    acked.lock().expect("lock").insert(raw.clone());
                    done.push(raw);
                }
                done
            });
        }
        let mut acknowledged = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            acknowledged.extend(joined.expect("task"));
        }
        acknowledged
    });
    let crashes = rewriter.join().expect("rewriter");
    assert_eq!(journal.metrics().rewrites.get(), 25);
    let journal = Arc::try_unwrap(journal).expect("last handle");
    drop(journal);

    let mut checked = 0;
    for (copy, before) in crashes {
        let (_, replay) = Journal::open(&copy).expect("a crash copy opens");
        let held: HashSet<&Bytes> = replay.iter().collect();
        let lost = before.iter().filter(|raw| !held.contains(raw)).count();
        assert_eq!(
            lost,
            0,
            "{} lost {lost} of {} acknowledged appends",
            copy.display(),
            before.len()
        );
        checked += before.len();
    }
    println!("crash copies checked {checked} acknowledged appends");
    let (_, replay) = Journal::open(&path).expect("reopen");
    let held: HashSet<&Bytes> = replay.iter().collect();
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|raw| !held.contains(raw))
        .collect();
    assert!(lost.is_empty(), "{} acknowledged appends lost", lost.len());
    assert_eq!(acknowledged.len(), txs.len());

    // Replaying (duplicates are "already known") rebuilds the pool.
    let again = TxPool::new(config());
    for raw in replay {
        match again.add(pooled(&raw), state.as_ref(), 1) {
            Ok(_) | Err(gigas_txpool::TxPoolError::AlreadyKnown) => {}
            Err(err) => panic!("replay: {err}"),
        }
    }
    assert_eq!(again.stats(), pool.stats());
}

/// A rewrite runs beside the appends (issue 29, finding 7): while the new file of a full
/// pool's size is written in the background, appends are acknowledged from the old file, and
/// the swap carries them into the new one. Before, the rewrite ran on the writer thread and
/// every append waited for all of it (and the node's producer waited too).
#[test]
fn appends_go_on_while_a_rewrite_writes_the_new_file() {
    let dir = dir();
    let path = dir.path().join("txpool.journal");
    let (journal, _) = Journal::open(&path).expect("create");
    // 256 MiB of snapshot (one 1 MiB record 256 times: the bytes are shared, the file is not).
    let big = Bytes::from(vec![0xab; 1 << 20]);
    let snapshot: Vec<Bytes> = vec![big.clone(); 256];
    assert!(journal.start_rewrite(move || snapshot).expect("start"));
    assert!(
        !journal.start_rewrite(Vec::new).expect("second start"),
        "one rewrite at a time"
    );
    let appended = records(200, 7);
    let mut during = 0;
    let mut latencies = Vec::new();
    runtime().block_on(async {
        for raw in &appended {
            let t = std::time::Instant::now();
            journal.append(raw.clone()).await.expect("append");
            latencies.push(t.elapsed());
            during += usize::from(journal.is_rewriting());
        }
    });
    while journal.is_rewriting() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    latencies.sort();
    println!(
        "{during} of 200 appends acknowledged while the 256 MiB rewrite ran; append latency \
         median {:?}, max {:?}; {} bytes copied at the swap",
        latencies[100],
        latencies[199],
        journal.metrics().rewrite_tail_bytes.get()
    );
    assert!(
        during > 0,
        "no append was acknowledged while the rewrite ran: they waited for it"
    );
    assert_eq!(journal.metrics().rewrites.get(), 1);
    assert_eq!(journal.metrics().rewrite_failures.get(), 0);
    assert!(journal.metrics().rewrite_tail_bytes.get() > 0);
    assert!(!tmp(&path).exists());
    drop(journal);

    // Reopened: the snapshot, then every append (those before the swap from the copied tail,
    // the rest appended to the new file), in order.
    let (_journal, replay) = Journal::open(&path).expect("reopen");
    assert_eq!(replay.len(), 256 + appended.len());
    assert!(replay[..256].iter().all(|r| *r == big));
    assert_eq!(&replay[256..], &appended[..]);
}

/// A journal dropped while its rewrite runs waits for it: no temporary file is left for the
/// next open to trip over, and nothing acknowledged is lost.
#[test]
fn closing_during_a_rewrite_loses_nothing() {
    let dir = dir();
    let path = dir.path().join("txpool.journal");
    let (journal, _) = Journal::open(&path).expect("create");
    let first = records(20, 1);
    append_all(&journal, &first);
    let kept = first.clone();
    assert!(journal.start_rewrite(move || kept).expect("start"));
    let second = records(20, 2);
    append_all(&journal, &second);
    drop(journal);
    assert!(!tmp(&path).exists());
    let (_journal, replay) = Journal::open(&path).expect("reopen");
    let replayed: HashSet<&Bytes> = replay.iter().collect();
    assert!(first.iter().chain(&second).all(|r| replayed.contains(r)));
}
