//! A child process commits batches and is killed with SIGKILL at random points, 200 times.
//! After each kill, reopening succeeds, holds every batch whose commit had returned (the child
//! prints each acknowledgement), holds no partial batch, and equals a reference store at the
//! same batch, checksum and contents.
//!
//! The test also proves where kills landed, and requires some in each of the delicate windows:
//! during rotation (the newest file holds no complete batch yet), during a compaction (a
//! reopened store continues a compaction under way) and between a durable drop record and the
//! unlink of the file it drops (a reopened store removes a dropped file). The child's storage
//! sleeps inside the last two windows so that random kills find them.
//!
//! SIGKILL keeps the page cache, so this cannot show what a power loss does: `power_loss.rs`
//! does that on a simulated disk.

mod common;

use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use gigas_vilmo::{FsStorage, Storage, Vilmo};

/// The real file system, slowed where a kill is rare but telling: after creating a log file
/// (rotation) and before unlinking a compacted one (after its drop is durable).
struct SlowFs;

impl Storage for SlowFs {
    type File = <FsStorage as Storage>::File;
    type Lock = <FsStorage as Storage>::Lock;

    fn create_dir_all(&self, dir: &Path) -> io::Result<bool> {
        FsStorage.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage.list_dir(dir)
    }
    fn open(&self, path: &Path) -> io::Result<Self::File> {
        FsStorage.open(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<Self::File> {
        let file = FsStorage.create_new(path);
        std::thread::sleep(Duration::from_millis(3));
        file
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::thread::sleep(Duration::from_millis(6));
        FsStorage.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Self::Lock> {
        FsStorage.lock_dir(dir)
    }
}

const CHILD_DIR: &str = "GIGAS_VILMO_CRASH_CHILD_DIR";

/// The child: commits batches until it is killed, acknowledging each on stdout.
#[test]
#[ignore = "run as the child process of crash_recovery_keeps_every_acknowledged_batch"]
fn crash_child() {
    let dir = std::env::var(CHILD_DIR).expect("the parent sets the store directory");
    let mut store =
        Vilmo::open_with(SlowFs, &dir, common::options(true)).expect("child opens the store");
    let stdout = std::io::stdout();
    loop {
        let n = store.last_commit().number + 1;
        let commit = store.commit(common::batch(n)).expect("commit");
        let mut out = stdout.lock();
        writeln!(out, "ACK {} {}", commit.number, commit.checksum_hex()).expect("stdout");
        out.flush().expect("flush");
    }
}

#[test]
fn crash_recovery_keeps_every_acknowledged_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store_dir = dir.path().join("store");
    let reference_dir = tempfile::tempdir().expect("tempdir");
    let mut reference =
        Vilmo::open(reference_dir.path(), common::options(false)).expect("reference");
    let mut model = std::collections::BTreeMap::new();
    let exe = std::env::current_exe().expect("test binary");
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut last_recovered = 0u64;
    let mut kills_with_acks = 0;
    // Rounds whose reopened store holds a batch that was durable but not yet acknowledged.
    let mut unacknowledged_batches_kept = 0;
    let mut torn_tails_cut = 0;
    let mut kills_in_rotation = 0;
    let mut kills_in_compaction = 0;
    let mut kills_between_drop_and_unlink = 0;

    for round in 0..200 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, &store_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // From before the child has opened the store to well into its commits.
        std::thread::sleep(Duration::from_micros(2_000 + rng % 40_000));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");

        let mut last_ack = None;
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut parts = line.split_whitespace();
                if parts.next() == Some("ACK") {
                    let number: u64 = parts.next().and_then(|n| n.parse().ok()).expect("number");
                    let checksum = parts.next().expect("checksum").to_string();
                    last_ack = Some((number, checksum));
                }
            }
        }

        if newest_file_holds_no_batch(&store_dir) {
            kills_in_rotation += 1;
        }
        let store = Vilmo::open(&store_dir, common::options(true))
            .unwrap_or_else(|e| panic!("round {round}: reopening after SIGKILL failed: {e}"));
        let recovery = store.recovery();
        if recovery.torn_bytes > 0 {
            torn_tails_cut += 1;
        }
        if recovery.compaction_in_progress {
            kills_in_compaction += 1;
        }
        if recovery.dropped_files_removed > 0 {
            kills_between_drop_and_unlink += 1;
        }
        let recovered = store.last_commit();
        if let Some((number, checksum)) = &last_ack {
            kills_with_acks += 1;
            assert!(
                recovered.number >= *number,
                "round {round}: batch {number} was acknowledged but only {} survived",
                recovered.number
            );
            if recovered.number == *number {
                assert_eq!(&recovered.checksum_hex(), checksum, "round {round}");
            } else {
                // The batch being written when the child died reached the disk whole.
                assert_eq!(
                    recovered.number,
                    number + 1,
                    "round {round}: more than one unacknowledged batch"
                );
            }
        }
        assert!(
            recovered.number >= last_recovered,
            "round {round}: recovery went backwards"
        );
        if recovered.number > last_recovered
            && last_ack.as_ref().map(|a| a.0) != Some(recovered.number)
        {
            unacknowledged_batches_kept += 1;
        }
        last_recovered = recovered.number;

        // The recovered store equals a store that was never interrupted, at the same batch.
        while reference.last_commit().number < recovered.number {
            let n = reference.last_commit().number + 1;
            reference
                .commit(common::batch(n))
                .expect("reference commit");
            common::apply(&mut model, n);
        }
        assert_eq!(
            reference.last_commit(),
            recovered,
            "round {round}: checksum chain differs"
        );
        assert_eq!(
            common::contents(&store),
            model,
            "round {round}: contents differ"
        );
    }
    assert!(
        kills_with_acks > 100,
        "only {kills_with_acks} kills happened after a commit"
    );
    assert!(
        last_recovered > 200,
        "only {last_recovered} batches were committed in 200 rounds"
    );
    eprintln!(
        "200 kills: {last_recovered} batches survived, {kills_with_acks} kills after an \
         acknowledgement, {unacknowledged_batches_kept} rounds kept a durable but unacknowledged \
         batch, {torn_tails_cut} torn tails cut; kills during rotation {kills_in_rotation}, \
         during compaction {kills_in_compaction}, between a drop and its unlink \
         {kills_between_drop_and_unlink}"
    );
    assert!(kills_in_rotation > 0, "no kill landed during rotation");
    assert!(
        kills_in_compaction > 0,
        "no kill landed during a compaction"
    );
    assert!(
        kills_between_drop_and_unlink > 0,
        "no kill landed between a durable drop and its unlink"
    );
}

/// Whether the newest log file has no complete batch: the child was killed while rotating
/// (the file created, its header or first batch not yet whole).
fn newest_file_holds_no_batch(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let newest = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "vlog"))
        .max();
    let Some(newest) = newest else { return false };
    let Ok(bytes) = std::fs::read(&newest) else {
        return false;
    };
    if bytes.len() < 64 + 24 {
        return true;
    }
    let body = u32::from_le_bytes([
        bytes[64 + 16],
        bytes[64 + 17],
        bytes[64 + 18],
        bytes[64 + 19],
    ]);
    bytes.len() < 64 + 24 + body as usize + 36
}
