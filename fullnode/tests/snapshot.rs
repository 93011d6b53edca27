//! Snapshot sync end to end, with real processes on loopback: a sequencer under load, a
//! full node beside it that replays every diff and writes snapshots into the sequencer's
//! archive (`--snapshot-every`), and new nodes that start from those snapshots
//! (`--bootstrap snapshot`) through the sequencer, through nginx serving the archive
//! directory as plain files, and through a source that serves a forged manifest and
//! damaged, truncated and missing chunks.

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use alloy_primitives::{B256, U256};
use alloy_signer::SignerSync;
use common::{head, Load, Process, Touched};
use gigas_primitives::AccountState;
use gigas_statedb::{StateDb, StateDbOptions};
use gigas_statediff::StateKey;

const CHUNK: &str = "2KiB";

/// A sequencer, a load, and a replaying full node that writes a snapshot every 8 blocks
/// into the sequencer's archive; returns once a snapshot holds the load's state.
struct Setup {
    dir: tempfile::TempDir,
    seq: Process,
    replay: Process,
    touched: Touched,
    snapshot: u64,
}

fn archive(dir: &Path) -> PathBuf {
    dir.join("seq").join("archive")
}

async fn setup(seed: u64) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let seq = Process::sequencer(&dir.path().join("seq"));
    let snapshots = archive(dir.path()).join("snapshots");
    let groups = ["--commit-blocks", "4", "--commit-interval", "200ms"];
    let snapshot_dir = snapshots.display().to_string();
    let mut args = vec!["--snapshot-every", "8", "--snapshot-dir", &snapshot_dir];
    args.extend(["--snapshot-chunk-size", CHUNK]);
    args.extend(groups);
    let mut replay = Process::fullnode(&dir.path().join("fn-replay"), &seq.url, &args);
    let load = Load::start(&seq.url, 4, seed).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let touched = load.stop(&seq.url).await;
    let target = head(&seq.url).await;
    // A snapshot of a block after the load: the snapshot holds what it wrote.
    let mut snapshot = 0;
    common::wait_until(Duration::from_secs(60), "a snapshot past the load", || {
        snapshot = gigas_snapshot::read_head(&snapshots)
            .ok()
            .flatten()
            .map_or(0, |h| h.number);
        snapshot >= target
    });
    // The same node follows on without writing more: the snapshot stays the newest, so
    // that each test knows which one a new node takes.
    replay.interrupt();
    let replay = Process::fullnode(&dir.path().join("fn-replay"), &seq.url, &groups);
    Setup {
        dir,
        seq,
        replay,
        touched,
        snapshot,
    }
}

/// Everything a state database holds, in key order (headers apart: a bootstrapped node
/// holds those from 256 before its snapshot on; `assert_same_databases` compares them).
type Contents = (
    Vec<(B256, AccountState)>,
    Vec<(B256, B256, U256)>,
    Vec<(B256, Vec<u8>)>,
    Vec<(u64, StateKey)>,
);

fn contents(db: &StateDb) -> Contents {
    let view = db.view().unwrap();
    let mut out: Contents = Default::default();
    view.scan_accounts(|k, s| {
        out.0.push((*k, *s));
        ControlFlow::Continue(())
    })
    .unwrap();
    view.scan_slots(|a, s, v| {
        out.1.push((*a, *s, *v));
        ControlFlow::Continue(())
    })
    .unwrap();
    view.scan_codes(|h, c| {
        out.2.push((*h, c.to_vec()));
        ControlFlow::Continue(())
    })
    .unwrap();
    view.scan_index(|i, k| {
        out.3.push((i, *k));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

/// Stops the sequencer, lets both nodes reach its last block, stops them, and compares
/// their databases key for key and root for root.
async fn assert_same_databases(setup: &mut Setup, other: &mut Process, other_dir: &Path) {
    setup.seq.interrupt();
    let mut last = (0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = (head(&setup.replay.url).await, head(&other.url).await);
        if now.0 == now.1 && now == last {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the nodes never met: {now:?}"
        );
        last = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    setup.replay.interrupt();
    other.interrupt();
    let a = StateDb::open(
        &setup.dir.path().join("fn-replay/state"),
        StateDbOptions::default(),
    )
    .unwrap();
    let b = StateDb::open(&other_dir.join("state"), StateDbOptions::default()).unwrap();
    assert_eq!(a.head().unwrap(), b.head().unwrap(), "one head");
    let (ca, cb) = (contents(&a), contents(&b));
    assert!(
        ca.0.len() > 20 && !ca.1.is_empty() && !ca.3.is_empty(),
        "a state to compare"
    );
    assert_eq!(ca, cb, "key for key");
    let (va, vb) = (a.view().unwrap(), b.view().unwrap());
    assert_eq!(
        va.lattice().unwrap(),
        vb.lattice().unwrap(),
        "the same commitment"
    );
    // Every header the bootstrapped node holds (from 256 blocks before its snapshot, or the
    // genesis, to the head) is the replaying node's, hash and fields.
    let tip = b.head().unwrap().expect("a head").number;
    let mut held = 0u64;
    for n in (0..=tip).rev() {
        let Some(theirs) = vb.header(n).unwrap() else {
            break;
        };
        let ours = va
            .header(n)
            .unwrap()
            .expect("the replaying node holds every header");
        assert_eq!(
            (ours.hash, &ours.header),
            (theirs.hash, &theirs.header),
            "header {n}"
        );
        held += 1;
    }
    assert!(
        held > 256.min(tip),
        "the bootstrapped node holds {held} headers up to {tip}"
    );
    let root = va.state_root_from_scratch().unwrap();
    assert_eq!(root, vb.state_root_from_scratch().unwrap(), "root for root");
    assert_eq!(
        vb.last_root().unwrap().map(|r| r.1),
        Some(root),
        "the kept root"
    );
}

/// nginx serving the archive directory as plain files (`good`), and the same files with a
/// forged manifest and damaged chunks (`bad`), on two ports.
fn serve_statically(
    dir: &Path,
    good_root: &Path,
    bad_root: &Path,
) -> (common::Nginx, String, String) {
    let bad_port = gigas_launch::free_port().unwrap();
    let (nginx, good) = common::nginx(dir, "default_type application/octet-stream;", |port| {
        format!(
            r#"
    server {{ listen 127.0.0.1:{port}; root {}; etag on; }}
    server {{ listen 127.0.0.1:{bad_port}; root {}; }}"#,
            good_root.display(),
            bad_root.display()
        )
    });
    common::wait_until(Duration::from_secs(10), "nginx's second port", || {
        std::net::TcpStream::connect(("127.0.0.1", bad_port)).is_ok()
    });
    (nginx, good, format!("http://127.0.0.1:{bad_port}"))
}

/// Copies snapshot `block`'s files from the snapshots directory `from` to
/// `to/snapshots/block/`, which it returns.
fn copy_snapshot_files(from: &Path, to: &Path, block: u64) -> PathBuf {
    let dst = to.join("snapshots").join(block.to_string());
    std::fs::create_dir_all(&dst).unwrap();
    for entry in std::fs::read_dir(from.join(block.to_string())).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
    }
    dst
}

/// A new node bootstrapping from the `bad` source first, then `good`, with `extra` flags.
fn boot_from(setup: &Setup, bad: &str, good: &str, extra: &[&str]) -> (PathBuf, Process) {
    let boot_dir = setup.dir.path().join("fn-boot");
    let mut args = vec![
        "--bootstrap",
        "snapshot",
        "--snapshot-source",
        bad,
        "--snapshot-source",
        good,
    ];
    args.extend_from_slice(extra);
    let boot = Process::fullnode(&boot_dir, &setup.seq.url, &args);
    (boot_dir, boot)
}

/// The node follows the sequencer to its head and then holds what a node that replayed
/// every diff holds.
async fn follows_on_and_equals_the_replay(setup: &mut Setup, boot: &mut Process, dir: &Path) {
    let target = head(&setup.seq.url).await;
    common::wait_for_block(&boot.url, target, Duration::from_secs(60)).await;
    common::assert_same_state(&boot.url, &setup.seq.url, &setup.touched).await;
    assert_same_databases(setup, boot, dir).await;
}

/// A copy of snapshot `block` under `to/snapshots/` whose manifest's header is signed by
/// another key, and whose chunks 0, 2 and 4 are flipped, cut short and missing (chunk `k`
/// is asked of source `k mod 2` first: these come from the bad source first).
fn damaged_copy(from: &Path, to: &Path, block: u64) {
    let dst = copy_snapshot_files(from, to, block);
    std::fs::copy(from.join("head"), to.join("snapshots").join("head")).unwrap();
    let mut manifest =
        gigas_snapshot::Manifest::decode(&std::fs::read(dst.join("manifest")).unwrap()).unwrap();
    assert!(
        manifest.chunks.len() >= 5,
        "{} chunks: too few to damage",
        manifest.chunks.len()
    );
    let other = alloy_signer_local::PrivateKeySigner::random();
    manifest.signature = other.sign_hash_sync(&manifest.hash).unwrap();
    std::fs::write(dst.join("manifest"), manifest.encode()).unwrap();
    let mut flipped = std::fs::read(dst.join("0")).unwrap();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    std::fs::write(dst.join("0"), flipped).unwrap();
    let cut = std::fs::read(dst.join("2")).unwrap();
    std::fs::write(dst.join("2"), &cut[..cut.len() - 7]).unwrap();
    std::fs::remove_file(dst.join("4")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_bootstrapped_from_a_snapshot_equals_one_that_replayed_every_diff() {
    let mut setup = setup(31).await;
    let block = setup.snapshot;
    let snapshots = archive(setup.dir.path()).join("snapshots");

    // The sequencer serves the files its archive holds, immutable, with ETags.
    let client = reqwest::Client::new();
    let url = format!("{}/snapshots/{block}/manifest", setup.seq.url);
    let answer = client.get(&url).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.headers()["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    let etag = answer.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(
        answer.bytes().await.unwrap().to_vec(),
        std::fs::read(snapshots.join(block.to_string()).join("manifest")).unwrap()
    );
    let again = client
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    for bad in [
        "/snapshots/../keys.log",
        "/snapshots/01/manifest",
        "/snapshots/1/x",
    ] {
        let answer = client
            .get(format!("{}{bad}", setup.seq.url))
            .send()
            .await
            .unwrap();
        assert!(
            answer.status().is_client_error(),
            "{bad}: {}",
            answer.status()
        );
    }

    // Through the bad source first, then nginx over the archive directory.
    let bad_root = setup.dir.path().join("bad");
    damaged_copy(&snapshots, &bad_root, block);
    let (_nginx, good, bad) = serve_statically(
        &setup.dir.path().join("nginx"),
        &archive(setup.dir.path()),
        &bad_root,
    );
    // A block after the snapshot whose execution reads BLOCKHASH of a block before it: a
    // contract whose creation stores blockhash(N - 3) at slot 0. The new node re-executes
    // it (`--verify-execution`), so a hash it lacks would make it disagree with the diff.
    let before = block - 3;
    let mut init = vec![0x63];
    init.extend_from_slice(&u32::try_from(before).unwrap().to_be_bytes());
    // BLOCKHASH PUSH1 0 SSTORE STOP
    init.extend_from_slice(&[0x40, 0x60, 0x00, 0x55, 0x00]);
    let (reader, read_at) = common::deploy(&setup.seq.url, 6, init.into()).await;
    assert!(
        read_at > block && read_at <= before + 256,
        "block {read_at} reads block {before}'s hash"
    );
    let (boot_dir, mut boot) = boot_from(&setup, &bad, &good, &["--verify-execution"]);
    let log = boot.log_text();
    assert!(
        log.contains("snapshot manifest refused"),
        "the forged manifest:\n{log}"
    );
    assert!(
        log.contains("snapshot chunk refused"),
        "the damaged chunks:\n{log}"
    );
    assert!(log.contains("bootstrapped from a snapshot"), "{log}");
    assert_eq!(boot.metric("gigas_fullnode_bootstrap_phase"), Some(4.0));
    assert_eq!(
        boot.metric("gigas_fullnode_bootstrap_block"),
        Some(block as f64)
    );
    boot.assert_metric_at_least(
        "gigas_fullnode_bootstrap_refused_total",
        2.0,
        "chunks 0 and 2",
    );
    assert!(head(&boot.url).await >= block);

    // It follows on, and serves the sequencer's state.
    let target = head(&setup.seq.url).await;
    common::wait_for_block(&boot.url, target, Duration::from_secs(60)).await;
    common::assert_same_state(&boot.url, &setup.seq.url, &setup.touched).await;
    assert_same_headers_and_blockhash(&boot.url, &setup.seq.url, block, target, reader).await;
    boot.assert_metric_at_least(
        "gigas_fullnode_reexecuted_blocks_total",
        1.0,
        "the blocks after the snapshot, re-executed",
    );
    assert_same_databases(&mut setup, &mut boot, &boot_dir).await;
}

/// A node bootstrapped at `block` answers as the sequencer does for the headers of the 256
/// blocks before it and after it (to `head`), BLOCKHASH of them in `eth_call`, and the slot
/// `reader`'s creation stored from BLOCKHASH of block `block - 3`.
async fn assert_same_headers_and_blockhash(
    node: &str,
    seq: &str,
    block: u64,
    head: u64,
    reader: alloy_primitives::Address,
) {
    let first = block.saturating_sub(256);
    for n in (first..=head)
        .step_by(7)
        .chain([first, block - 1, block, head])
    {
        let tag = format!("{n:#x}");
        let (a, b) = (
            common::rpc(node, "eth_getHeaderByNumber", serde_json::json!([tag])).await,
            common::rpc(seq, "eth_getHeaderByNumber", serde_json::json!([tag])).await,
        );
        assert!(
            b["result"]["hash"].is_string(),
            "the sequencer's header {n}: {b}"
        );
        for field in ["hash", "parentHash", "number", "stateRoot", "timestamp"] {
            assert_eq!(
                a["result"][field], b["result"][field],
                "header {n}'s {field}"
            );
        }
    }
    // eth_call at the head of code returning blockhash(NUMBER - k) for blocks before the
    // snapshot: PUSH2 k NUMBER SUB BLOCKHASH PUSH1 0 MSTORE PUSH1 32 PUSH1 0 RETURN.
    let at = format!("{head:#x}");
    // Blocks before the snapshot that BLOCKHASH at the head still reaches (the head is
    // some tens of blocks past the snapshot here).
    let backs: Vec<u64> = [block - 1, block - 5, first.max(head.saturating_sub(255))]
        .into_iter()
        .filter(|back| *back < block && head - back <= 256)
        .collect();
    assert!(
        !backs.is_empty(),
        "the head {head} is too far past the snapshot {block}"
    );
    for back in backs {
        let k = u16::try_from(head - back).unwrap();
        let mut code = vec![0x61];
        code.extend_from_slice(&k.to_be_bytes());
        code.extend_from_slice(&[
            0x43, 0x03, 0x40, 0x60, 0x00, 0x52, 0x60, 0x20, 0x60, 0x00, 0xf3,
        ]);
        let to = "0x00000000000000000000000000000000000b1a5e";
        let params = serde_json::json!([
            {"to": to},
            at,
            {to: {"code": alloy_primitives::hex::encode_prefixed(&code)}}
        ]);
        let (a, b) = (
            common::rpc(node, "eth_call", params.clone()).await,
            common::rpc(seq, "eth_call", params).await,
        );
        let expected = common::rpc(
            seq,
            "eth_getHeaderByNumber",
            serde_json::json!([format!("{back:#x}")]),
        )
        .await;
        assert_eq!(
            b["result"], expected["result"]["hash"],
            "the sequencer's BLOCKHASH({back})"
        );
        assert_eq!(
            a["result"], b["result"],
            "BLOCKHASH({back}) at block {head}"
        );
    }
    let slot = serde_json::json!([reader, "0x0", at]);
    let (a, b) = (
        common::rpc(node, "eth_getStorageAt", slot.clone()).await,
        common::rpc(seq, "eth_getStorageAt", slot).await,
    );
    let expected = common::rpc(
        seq,
        "eth_getHeaderByNumber",
        serde_json::json!([format!("{:#x}", block - 3)]),
    )
    .await;
    assert_eq!(
        b["result"], expected["result"]["hash"],
        "the stored BLOCKHASH"
    );
    assert_eq!(
        a["result"],
        b["result"],
        "the slot a BLOCKHASH of block {} wrote",
        block - 3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_killed_part_way_serves_nothing_and_resumes_where_it_stopped() {
    let mut setup = setup(37).await;
    let root = archive(setup.dir.path());
    // nginx over the archive, with chunk 3 of every snapshot served at a byte a second:
    // the bootstrap writes chunks 0 to 2 and waits there.
    let (_nginx, slow) = common::nginx(
        &setup.dir.path().join("nginx"),
        "default_type application/octet-stream;",
        |port| {
            format!(
                r#"
    server {{
        listen 127.0.0.1:{port};
        root {};
        location ~ ^/snapshots/[0-9]+/3$ {{ limit_rate 1; }}
    }}"#,
                root.display()
            )
        },
    );
    let boot_dir = setup.dir.path().join("fn-boot");
    let (rpc_port, metrics_port) = (
        gigas_launch::free_port().unwrap(),
        gigas_launch::free_port().unwrap(),
    );
    let log = boot_dir.with_extension("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gigas-fullnode"))
        .args([
            "--dev",
            "--sequencer",
            &setup.seq.url,
            "--bootstrap",
            "snapshot",
        ])
        .args([
            "--snapshot-source",
            &slow,
            "--datadir",
            &boot_dir.display().to_string(),
        ])
        .args(["--http.port", &rpc_port.to_string()])
        .args(["--metrics", &format!("127.0.0.1:{metrics_port}")])
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let metrics = format!("http://127.0.0.1:{metrics_port}/metrics");
    let written = |text: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with("gigas_fullnode_bootstrap_chunks_written "))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    common::wait_until(Duration::from_secs(60), "chunks 0 to 2 written", || {
        common::reqwest::blocking_get(&metrics).is_some_and(|t| written(&t) >= 3.0)
    });
    std::thread::sleep(Duration::from_millis(500));
    let text = common::reqwest::blocking_get(&metrics).unwrap_or_default();
    assert_eq!(written(&text), 3.0, "chunk 3 holds the rest back:\n{text}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", rpc_port)).is_err(),
        "nothing is served as state during a bootstrap"
    );
    let _ = child.kill();
    let _ = child.wait();
    {
        let db = StateDb::open(&boot_dir.join("state"), StateDbOptions::default()).unwrap();
        assert_eq!(db.head().unwrap(), None, "no head after a kill part-way");
        let progress = db
            .bootstrap_progress()
            .unwrap()
            .expect("the bootstrap's progress");
        assert_eq!((progress.block, progress.chunks_done), (setup.snapshot, 3));
    }

    // Started again from the sequencer: it resumes at chunk 3 of the same snapshot.
    let mut boot = Process::fullnode(&boot_dir, &setup.seq.url, &["--bootstrap", "snapshot"]);
    let text = boot.log_text();
    assert!(text.contains("resuming the bootstrap"), "{text}");
    assert_eq!(boot.metric("gigas_fullnode_bootstrap_phase"), Some(4.0));
    follows_on_and_equals_the_replay(&mut setup, &mut boot, &boot_dir).await;
}

/// A copy of snapshot `block` under `to/snapshots/` whose manifest moves a share between
/// chunks 0 and 1 (the shares still add up to the signed lattice hash, so it verifies) and
/// whose head names that manifest: chunk 0 is refused from every source. Returns its
/// identity.
fn moved_shares_copy(from: &Path, to: &Path, block: u64) -> B256 {
    let dst = copy_snapshot_files(from, to, block);
    let mut manifest =
        gigas_snapshot::Manifest::decode(&std::fs::read(dst.join("manifest")).unwrap()).unwrap();
    let moved =
        gigas_primitives::LatticeHash::index_entry(99, &alloy_primitives::Address::ZERO, None);
    manifest.chunks[0].share.add(&moved);
    manifest.chunks[1].share.sub(&moved);
    let bytes = manifest.encode();
    std::fs::write(dst.join("manifest"), &bytes).unwrap();
    let id = gigas_snapshot::manifest_id(&bytes);
    let head = gigas_snapshot::SnapshotHead {
        number: block,
        manifest: id,
    };
    std::fs::write(to.join("snapshots").join("head"), head.to_json()).unwrap();
    id
}

/// Issue 66, item 3: a manifest that verifies but cannot be completed ended the bootstrap,
/// and every restart resumed it first. It is now remembered, and the next candidate taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_that_cannot_be_completed_is_remembered_and_another_taken() {
    let mut setup = setup(41).await;
    let block = setup.snapshot;
    let snapshots = archive(setup.dir.path()).join("snapshots");
    let bad_root = setup.dir.path().join("bad");
    let forged = moved_shares_copy(&snapshots, &bad_root, block);
    let (_nginx, good, bad) = serve_statically(
        &setup.dir.path().join("nginx"),
        &archive(setup.dir.path()),
        &bad_root,
    );
    // The forged manifest's source first: both name the same block, so it is tried first.
    let (boot_dir, mut boot) = boot_from(&setup, &bad, &good, &["--snapshot-attempts", "1"]);
    let log = boot.log_text();
    assert!(
        log.contains("this snapshot cannot be completed"),
        "the forged manifest was not given up:\n{log}"
    );
    assert!(log.contains("bootstrapped from a snapshot"), "{log}");
    let remembered =
        std::fs::read_to_string(boot_dir.join("bootstrap-failed-manifests")).unwrap_or_default();
    assert!(
        remembered.contains(&forged.to_string()),
        "the failed manifest is remembered: {remembered:?}"
    );
    follows_on_and_equals_the_replay(&mut setup, &mut boot, &boot_dir).await;
}

/// Issue 66, item 6: a snapshot whose next diff the diff source no longer keeps was
/// downloaded whole, and the node then asked for the diff forever (HTTP 410). It is passed
/// over before anything is downloaded, and with no other snapshot the node stops and says
/// why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_whose_next_diff_is_gone_is_passed_over_before_downloading() {
    let dir = tempfile::tempdir().unwrap();
    let seq = Process::sequencer_with(&dir.path().join("seq"), &["--diffs.retain", "8"]);
    let snapshots = archive(dir.path()).join("snapshots");
    let snapshot_dir = snapshots.display().to_string();
    let mut replay = Process::fullnode(
        &dir.path().join("fn-replay"),
        &seq.url,
        &["--snapshot-every", "8", "--snapshot-dir", &snapshot_dir],
    );
    let mut block = 0;
    common::wait_until(Duration::from_secs(60), "a snapshot", || {
        block = gigas_snapshot::read_head(&snapshots)
            .ok()
            .flatten()
            .map_or(0, |h| h.number);
        block > 0
    });
    // No newer snapshot from now on; the sequencer's retention passes the snapshot.
    replay.interrupt();
    block = gigas_snapshot::read_head(&snapshots)
        .unwrap()
        .unwrap()
        .number;
    let gone = format!("{}/diffs/{}", seq.url, block + 1);
    common::wait_until(
        Duration::from_secs(60),
        "diff N + 1 removed by retention",
        || common::reqwest::blocking_status(&gone) == Some(410),
    );

    let boot_dir = dir.path().join("fn-boot");
    let log = boot_dir.with_extension("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gigas-fullnode"))
        .args(["--dev", "--sequencer", &seq.url, "--bootstrap", "snapshot"])
        .args(["--datadir", &boot_dir.display().to_string()])
        .args(["--http.port", "0"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::from(
            std::fs::File::create(boot_dir.with_extension("err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let mut status = None;
    common::wait_until(Duration::from_secs(60), "the node to stop", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default()
        + &std::fs::read_to_string(boot_dir.with_extension("err")).unwrap_or_default();
    assert!(!status.unwrap().success(), "{text}");
    assert!(
        text.contains(&format!("no longer keeps diff {}", block + 1)),
        "the node did not say why:\n{text}"
    );
    assert!(
        !text.contains("snapshot manifest checked"),
        "the snapshot was taken:\n{text}"
    );
}
