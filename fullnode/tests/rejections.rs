//! Bad diffs are rejected with nothing applied, and the node does not go past them.
//!
//! A real sequencer records a short chain under load; a static HTTP server in this test then
//! serves its archive (files and `diffs/head` only, as any web server would) to a real
//! `gigas-fullnode`, and at one block `k` serves in turn: a tampered diff (body changed,
//! frame and CRC redone), one signed by another key, a header signed by the sequencer's own
//! key with a wrong `stateRoot`, block `k + 1` in place of `k` (a skipped block), and a
//! truncated file. Each must be rejected with its reason in `/metrics`, the node held at
//! `k - 1` (durable head, RPC and state unchanged); the genuine file then lets it reach the
//! end with the sequencer's state.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy_primitives::Address;
use alloy_signer::SignerSync;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use common::{head, rpc_u256, wait_until, Load, Process};
use gigas_statediff::archive::{Archive, FileKind};
use gigas_statediff::{Compression, DiffFile};

type Files = Arc<Mutex<(u64, HashMap<u64, Vec<u8>>)>>;

async fn serve_diff(
    State(files): State<Files>,
    UrlPath(name): UrlPath<String>,
) -> axum::response::Response {
    let files = files.lock().unwrap();
    if name == "head" {
        return (
            [("content-type", "application/json")],
            format!("{{\"number\":{}}}", files.0),
        )
            .into_response();
    }
    match name
        .parse::<u64>()
        .ok()
        .and_then(|n| files.1.get(&n).filter(|_| n <= files.0))
    {
        Some(bytes) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_forged_skipped_and_truncated_diffs_are_rejected_with_nothing_applied() {
    let dir = tempfile::tempdir().unwrap();
    let seq = Process::sequencer(&dir.path().join("seq"));
    let load = Load::start(&seq.url, 3, 5).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let touched = load.stop(&seq.url).await;
    let last = head(&seq.url).await;

    // The recording: every diff up to `last`, and a block `k` that changes a touched account.
    let archive = Archive::open(&dir.path().join("seq/archive")).unwrap();
    // The diff writer files a block's diff after the block is committed and reported by
    // eth_blockNumber: wait for the last one to be in the archive.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while archive.read(FileKind::Diff, last).unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sequencer's archive never filed diff {last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut diffs = HashMap::new();
    for n in 0..=last {
        diffs.insert(
            n,
            archive
                .read(FileKind::Diff, n)
                .unwrap()
                .expect("the archive holds every block"),
        );
    }
    let k = (1..last)
        .find(|n| DiffFile::decode(&diffs[n]).unwrap().header.gas_used > 0)
        .expect("a block with transactions");
    let files: Files = Arc::new(Mutex::new((k - 1, diffs.clone())));
    let app = axum::Router::new()
        .route("/diffs/{name}", axum::routing::get(serve_diff))
        .with_state(files.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let source = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let node = Process::fullnode(
        &dir.path().join("fn"),
        &source,
        &["--source-layout", "static"],
    );
    let node = Arc::new(node);
    {
        let node = node.clone();
        tokio::task::spawn_blocking(move || {
            wait_until(Duration::from_secs(60), "the node to reach k - 1", || {
                node.metric("gigas_fullnode_applied_block") == Some((k - 1) as f64)
            })
        })
        .await
        .unwrap();
    }
    let watched: Vec<Address> = touched.accounts.iter().copied().collect();
    let mut before = Vec::new();
    for a in &watched {
        before.push(
            rpc_u256(
                &node.url,
                "eth_getBalance",
                serde_json::json!([a, "latest"]),
            )
            .await,
        );
    }

    let genuine = DiffFile::decode(&diffs[&k]).unwrap();
    let compression = Compression::default();
    let mut tampered = genuine.clone();
    let at = tampered.body.len() - 1;
    tampered.body[at] ^= 0x01;
    let other = gigas_chain::dev_signer(3).unwrap();
    let mut forged = genuine.clone();
    forged.signature = other.sign_hash_sync(&forged.header.hash_slow()).unwrap();
    // The sequencer's own key over a header whose stateRoot its changes do not give: only
    // the node's own root can tell.
    let sequencer_key = gigas_chain::ChainConfig::dev(250)
        .unwrap()
        .signer()
        .unwrap();
    let mut wrong_root = genuine.clone();
    wrong_root.header.state_root = alloy_primitives::B256::repeat_byte(0x77);
    let wrong_hash = wrong_root.header.hash_slow();
    wrong_root.signature = sequencer_key.sign_hash_sync(&wrong_hash).unwrap();
    // Its state commitment is signed over the header's hash: signed again too.
    if let Some(c) = wrong_root.commitment.as_mut() {
        c.signature = sequencer_key
            .sign_hash_sync(&gigas_statediff::commitment_digest(&wrong_hash, &c.lattice))
            .unwrap();
    }
    let truncated = diffs[&k][..diffs[&k].len() / 2].to_vec();
    let cases: [(&str, Vec<u8>, &[&str]); 5] = [
        (
            "tampered",
            tampered.encode(&compression).unwrap(),
            &["state_root", "body", "code"],
        ),
        (
            "wrong root",
            wrong_root.encode(&compression).unwrap(),
            &["state_root"],
        ),
        (
            "forged",
            forged.encode(&compression).unwrap(),
            &["wrong_signer"],
        ),
        ("skipped", diffs[&(k + 1)].clone(), &["not_next"]),
        ("truncated", truncated, &["truncated", "crc", "malformed"]),
    ];
    for (name, bytes, reasons) in cases {
        let counts = |node: &Process| -> f64 {
            reasons
                .iter()
                .filter_map(|r| {
                    node.metric(&format!(
                        "gigas_fullnode_diffs_rejected_total{{reason=\"{r}\"}}"
                    ))
                })
                .sum()
        };
        let before_count = counts(&node);
        {
            let mut files = files.lock().unwrap();
            files.1.insert(k, bytes);
            files.0 = last;
        }
        let node2 = node.clone();
        let waited = tokio::task::spawn_blocking(move || {
            wait_until(
                Duration::from_secs(30),
                &format!("the {name} diff to be rejected"),
                || counts(&node2) > before_count,
            )
        })
        .await;
        if waited.is_err() {
            let log = node.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "the {name} diff was not rejected (applied block {:?}, k = {k}); the node's \
                 log ends:\n{}",
                node.metric("gigas_fullnode_applied_block"),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        assert_eq!(
            node.metric("gigas_fullnode_applied_block"),
            Some((k - 1) as f64),
            "{name}: the node moved"
        );
        assert_eq!(
            node.metric("gigas_fullnode_halted"),
            Some(1.0),
            "{name}: the node says it is held"
        );
        assert_eq!(head(&node.url).await, k - 1, "{name}: RPC latest moved");
        for (a, b) in watched.iter().zip(&before) {
            let now = rpc_u256(
                &node.url,
                "eth_getBalance",
                serde_json::json!([a, "latest"]),
            )
            .await;
            assert_eq!(now, *b, "{name}: balance of {a} changed");
        }
        assert!(
            node.log_text().contains(&format!("block {k}"))
                || node.log_text().contains(&format!("block={k}")),
            "{name}: the log names the block"
        );
    }

    // The genuine file: the node goes on to the end, with the sequencer's state.
    files.lock().unwrap().1.insert(k, diffs[&k].clone());
    {
        let node = node.clone();
        tokio::task::spawn_blocking(move || {
            wait_until(Duration::from_secs(60), "the node to reach the end", || {
                node.metric("gigas_fullnode_applied_block") == Some(last as f64)
            })
        })
        .await
        .unwrap();
    }
    assert_eq!(node.metric("gigas_fullnode_halted"), Some(0.0));
    let at = format!("{last:#x}");
    for a in &watched {
        assert_eq!(
            rpc_u256(
                &node.url,
                "eth_getBalance",
                serde_json::json!([a, "latest"])
            )
            .await,
            rpc_u256(&seq.url, "eth_getBalance", serde_json::json!([a, at])).await,
            "balance of {a} at {last}"
        );
    }
}
