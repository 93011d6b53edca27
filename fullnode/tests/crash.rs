//! SIGKILL of a following full node at random instants, then restart, again and again
//! (`GIGAS_KILL_POINTS`, 50 by default; `GIGAS_KILL_SEED` picks the instants), while the
//! sequencer runs under load.
//!
//! After every restart the durable head is at or past the last block the node reported
//! before it was killed (nothing reported applied is lost). Every other start commits on
//! the commit thread (`--db.commit-thread true`), so that kills land while a group commits
//! beside the apply thread too, and each mode opens what the other left. At the end the node catches up
//! and serves the sequencer's state for everything the load touched, and its kept root
//! equals the root recomputed from scratch from its plain state.

mod common;

use std::time::{Duration, Instant};

use common::{head, Load, Process};
use gigas_statedb::{StateDb, StateDbOptions};

use gigas_test_support::XorShift as Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_the_full_node_converges_to_the_sequencers_state() {
    let points: u32 = std::env::var("GIGAS_KILL_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("GIGAS_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_f011);
    println!("{points} kill points, seed {seed}");
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let seq = Process::sequencer(&dir.path().join("seq"));
    let load = Load::start(&seq.url, 3, seed).await;
    let fn_dir = dir.path().join("fn");
    let started = Instant::now();
    let mut reported_before_kill = 0u64;
    let mut kills_while_behind = 0;
    // Small groups so that kills land between and inside commits; a root every 2 blocks so
    // that some kills land in root work.
    let flags = [
        "--commit-blocks",
        "4",
        "--commit-interval",
        "100ms",
        "--root-every",
        "2",
    ];
    for point in 0..points {
        let commit_thread = ["--db.commit-thread", "true"];
        let mut args = flags.to_vec();
        if point % 2 == 1 {
            args.extend(commit_thread);
        }
        let node = Process::fullnode(&fn_dir, &seq.url, &args);
        let durable = head(&node.url).await;
        assert!(
            durable >= reported_before_kill,
            "kill {point}: the node reported block {reported_before_kill} applied, and restarted at {durable}"
        );
        // Every few kills, let the node fall behind first (a longer stop), so that kills
        // also land in catch-up (ranges, several in flight, large groups).
        // After a long stop (every fifth kill) the node has blocks to catch up: kill it
        // within the first tens of milliseconds, while it applies them.
        let wait = if point % 5 == 0 && point > 0 {
            Duration::from_millis(rng.next_u64() % 40)
        } else {
            Duration::from_millis(50 + rng.next_u64() % 600)
        };
        tokio::time::sleep(wait).await;
        reported_before_kill = head(&node.url).await;
        if head(&seq.url).await > reported_before_kill + 4 {
            kills_while_behind += 1;
        }
        let mut node = node;
        node.kill();
        if point % 5 == 4 {
            tokio::time::sleep(Duration::from_millis(3000)).await;
        }
    }
    println!(
        "{points} kills in {:.1} s, {kills_while_behind} while the node was more than 4 blocks behind",
        started.elapsed().as_secs_f64()
    );
    let touched = load.stop(&seq.url).await;
    let mut node = Process::fullnode(&fn_dir, &seq.url, &flags);
    let target = head(&seq.url).await;
    common::wait_for_block(&node.url, target, Duration::from_secs(120)).await;
    common::assert_same_state(&node.url, &seq.url, &touched).await;
    node.interrupt();
    let db = StateDb::open(&fn_dir.join("state"), StateDbOptions::default()).unwrap();
    let view = db.view().unwrap();
    let (_, root) = view.last_root().unwrap().expect("a root was kept");
    assert_eq!(
        view.state_root_from_scratch().unwrap(),
        root,
        "the kept root"
    );
}

/// Blocks served before their group commits (commits 10 minutes apart, so none lands in the
/// test): the node serves each block as soon as it applies it, from memory over the last
/// commit: the state and proofs at `latest` and at a block above the commit, and headers.
/// A SIGKILL then loses none of them: the next start applies the logged blocks again before
/// it serves anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_served_before_their_commit_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let seq = Process::sequencer(&dir.path().join("seq"));
    let fn_dir = dir.path().join("fn");
    let flags = ["--commit-blocks", "1000000", "--commit-interval", "10m"];
    let mut node = Process::fullnode(&fn_dir, &seq.url, &flags);
    let load = Load::start(&seq.url, 2, 41).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let touched = load.stop(&seq.url).await;
    let target = head(&seq.url).await;
    common::wait_for_block(&node.url, target, Duration::from_secs(60)).await;
    assert_eq!(
        node.metric("gigas_statedb_groups_committed_total"),
        Some(0.0),
        "a group was committed: the test would not read uncommitted blocks"
    );
    let logged = std::fs::metadata(fn_dir.join("applied.wal")).unwrap().len();
    assert!(logged > 0, "the served blocks are logged");
    node.assert_metric_at_least(
        "gigas_fullnode_uncommitted_blocks",
        target as f64,
        "blocks above the commit, with the target block served and none committed",
    );
    common::assert_same_state(&node.url, &seq.url, &touched).await;
    let tag = serde_json::json!(format!("{target:#x}"));
    common::assert_proofs_at(&node.url, &seq.url, &touched, tag.clone()).await;
    let below = serde_json::json!(format!("{:#x}", target - 1));
    common::assert_same_state_at(&node.url, &seq.url, &touched, below).await;
    let block = |url: String| {
        let tag = tag.clone();
        async move { common::rpc(&url, "eth_getHeaderByNumber", serde_json::json!([tag])).await }
    };
    let (ours, theirs) = (block(node.url.clone()).await, block(seq.url.clone()).await);
    assert_eq!(
        ours["result"]["hash"], theirs["result"]["hash"],
        "{ours} vs {theirs}"
    );
    let by_hash = common::rpc(
        &node.url,
        "eth_getBlockByHash",
        serde_json::json!([theirs["result"]["hash"], false]),
    )
    .await;
    assert_eq!(
        by_hash["result"]["number"],
        serde_json::json!(format!("{target:#x}")),
        "{by_hash}"
    );

    let reported = head(&node.url).await;
    node.kill();
    let node = Process::fullnode(&fn_dir, &seq.url, &flags);
    let restarted = head(&node.url).await;
    assert!(
        restarted >= reported,
        "the node served block {reported}, and restarted at {restarted}"
    );
    assert!(
        node.log_text().contains("applied again the blocks logged"),
        "the start replayed the log: {}",
        node.log_text()
    );
    common::assert_same_state(&node.url, &seq.url, &touched).await;
}

/// The sequencer's key index log damaged in its middle (issue 29, finding 13): the sequencer
/// refuses to start and names the remedy; `gigas-sequencer rebuild-key-log` writes the log
/// again from a stopped full node's index; the sequencer then re-encodes the blocks after the
/// full node's head to the very bytes it published before, and the full node follows on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_key_log_is_rebuilt_from_a_full_nodes_index() {
    let dir = tempfile::tempdir().unwrap();
    let (seq_dir, fn_dir) = (dir.path().join("seq"), dir.path().join("fn"));
    let mut seq = Process::sequencer(&seq_dir);
    let mut node = Process::fullnode(&fn_dir, &seq.url, &[]);
    let load = Load::start(&seq.url, 2, 31).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut touched = load.stop(&seq.url).await;
    common::wait_for_block(&node.url, head(&seq.url).await, Duration::from_secs(60)).await;
    node.interrupt();
    // New keys the full node has not seen: blocks to encode again after the rebuild.
    let load = Load::start(&seq.url, 2, 32).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let more = load.stop(&seq.url).await;
    touched.accounts.extend(more.accounts);
    touched.slots.extend(more.slots);
    seq.interrupt();

    let archive = seq_dir.join("archive");
    let db = StateDb::open(&fn_dir.join("state"), StateDbOptions::default()).unwrap();
    let fn_head = db.view().unwrap().tip().unwrap().unwrap().number;
    drop(db);
    let newest = (fn_head + 1..)
        .take_while(|n| archive.join("diffs").join(n.to_string()).is_file())
        .last()
        .expect("the sequencer published blocks after the full node stopped");
    let published: Vec<Vec<u8>> = (fn_head + 1..=newest)
        .map(|n| std::fs::read(archive.join("diffs").join(n.to_string())).unwrap())
        .collect();

    // A flipped byte inside the first record: not a torn tail, a damaged log.
    let log = archive.join("keys.log");
    let mut bytes = std::fs::read(&log).unwrap();
    assert!(bytes.len() > 200, "the log holds several records");
    bytes[14] ^= 0x40;
    std::fs::write(&log, &bytes).unwrap();
    let refused = run_to_end(&[
        "--dev",
        "--http.port",
        "0",
        "--datadir",
        &seq_dir.display().to_string(),
    ]);
    assert!(
        !refused.status.success(),
        "the sequencer started on a damaged log"
    );
    assert!(
        refused.text.contains("rebuild-key-log"),
        "the error names the remedy: {}",
        refused.text
    );

    let rebuilt = run_to_end(&[
        "rebuild-key-log",
        "--datadir",
        &seq_dir.display().to_string(),
        "--from-state",
        &fn_dir.join("state").display().to_string(),
    ]);
    assert!(rebuilt.status.success(), "{}", rebuilt.text);
    println!("{}", rebuilt.text.trim());
    assert!(
        rebuilt.text.contains(&format!("as of block {fn_head}")),
        "{}",
        rebuilt.text
    );

    // The bytes the sequencer publishes again are the ones it published before.
    for n in fn_head + 1..=newest {
        std::fs::remove_file(archive.join("diffs").join(n.to_string())).unwrap();
    }
    let seq = Process::sequencer(&seq_dir);
    for (i, file) in published.iter().enumerate() {
        let n = fn_head + 1 + i as u64;
        let path = archive.join("diffs").join(n.to_string());
        common::wait_until(Duration::from_secs(60), "the diff written again", || {
            path.is_file()
        });
        assert_eq!(&std::fs::read(&path).unwrap(), file, "block {n}'s diff");
    }
    let node = Process::fullnode(&fn_dir, &seq.url, &[]);
    let load = Load::start(&seq.url, 2, 33).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let last = load.stop(&seq.url).await;
    touched.accounts.extend(last.accounts);
    touched.slots.extend(last.slots);
    common::wait_for_block(&node.url, head(&seq.url).await, Duration::from_secs(60)).await;
    common::assert_same_state(&node.url, &seq.url, &touched).await;
}

struct Ended {
    status: std::process::ExitStatus,
    /// Standard output and error together.
    text: String,
}

/// Runs the sequencer binary with `args` until it exits (within two minutes).
fn run_to_end(args: &[&str]) -> Ended {
    let mut child = std::process::Command::new(common::sequencer_bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gigas-sequencer {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    Ended {
        status: out.status,
        text: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}
