//! SIGKILL of a following full node at random instants, then restart, again and again
//! (`GIGAS_KILL_POINTS`, 50 by default; `GIGAS_KILL_SEED` picks the instants), while the
//! sequencer runs under load.
//!
//! After every restart the durable head is at or past the last block the node reported
//! before it was killed (nothing reported applied is lost). At the end the node catches up
//! and serves the sequencer's state for everything the load touched, and its kept root
//! equals the root recomputed from scratch from its plain state.

mod common;

use std::time::{Duration, Instant};

use common::{head, Load, Process};
use gigas_statedb::{StateDb, StateDbOptions};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

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
        let node = Process::fullnode(&fn_dir, &seq.url, &flags);
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
            Duration::from_millis(rng.next() % 40)
        } else {
            Duration::from_millis(50 + rng.next() % 600)
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
