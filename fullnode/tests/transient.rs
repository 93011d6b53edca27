//! A source that is busy for a moment (429 on a range, 503 on the push's upgrade, as a
//! proxy in front of a restarting or overloaded sequencer answers) is not given up on: the
//! full node backs off, asks again, and ends up on ranges and the push as it would have
//! without the refusals. Before the fix, one 429 made it fetch file by file for good, and one
//! refused upgrade made it poll the head for good.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Process;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Refusals the proxy answers before it forwards: ranges get 429, stream upgrades 503.
const REFUSED_RANGES: usize = 2;
const REFUSED_UPGRADES: usize = 3;

/// A proxy to `upstream` that refuses the first range requests and stream upgrades, then
/// forwards every connection byte for byte.
async fn flaky_proxy(upstream: String) -> (String, [Arc<AtomicUsize>; 2]) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Requests of each kind seen: the first ones of each are refused.
    let (ranges, upgrades) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let seen = [ranges.clone(), upgrades.clone()];
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let (upstream, ranges, upgrades) = (upstream.clone(), ranges.clone(), upgrades.clone());
            tokio::spawn(async move {
                // The request head, to see what it asks for.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let refuse = if text.starts_with("GET /diffs?") {
                    (ranges.fetch_add(1, Ordering::SeqCst) < REFUSED_RANGES)
                        .then_some("429 Too Many Requests")
                } else if text.starts_with("GET /diffs/stream") {
                    (upgrades.fetch_add(1, Ordering::SeqCst) < REFUSED_UPGRADES)
                        .then_some("503 Service Unavailable")
                } else {
                    None
                };
                if let Some(status) = refuse {
                    let answer = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: 0\r\nRetry-After: 0\r\nConnection: close\r\n\r\n"
                    );
                    let _ = client.write_all(answer.as_bytes()).await;
                    return;
                }
                let Ok(mut server) = TcpStream::connect(&upstream).await else {
                    return;
                };
                // One request a connection, so that the proxy sees every request's head
                // (a client would otherwise send its next ones down the same connection).
                if !text.to_ascii_lowercase().contains("upgrade: websocket") {
                    head.truncate(head.len() - 2);
                    head.extend_from_slice(b"Connection: close\r\n\r\n");
                }
                if server.write_all(&head).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (format!("http://{addr}"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_source_is_asked_again_not_given_up_on() {
    let dir = tempfile::tempdir().unwrap();
    let seq = Process::sequencer(&dir.path().join("sequencer"));
    let upstream = seq.url.trim_start_matches("http://").to_string();
    let (proxy, [ranges, upgrades]) = flaky_proxy(upstream).await;
    // Blocks to catch up on before the full node starts, so that it asks for a range.
    let seq_url = seq.url.clone();
    common::wait_until(
        Duration::from_secs(60),
        "the sequencer to make blocks",
        || {
            common::reqwest::blocking_get(&format!("{seq_url}/diffs/head"))
                .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
                .and_then(|v| v["number"].as_u64())
                .is_some_and(|n| n >= 8)
        },
    );
    let node = Process::fullnode(&dir.path().join("fullnode"), &proxy, &[]);
    let log = node.log.clone();
    common::wait_until(
        Duration::from_secs(60),
        "the full node to catch up by ranges and then follow the push",
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("the source serves ranges") && text.contains("following the diff stream")
        },
    );
    let text = node.log_text();
    assert!(
        !text.contains("serves files only") && !text.contains("has no diff stream"),
        "a moment's refusal was taken for good:\n{text}"
    );
    // Every refused request was asked again: more requests came than were refused.
    let (ranges, upgrades) = (
        ranges.load(Ordering::SeqCst),
        upgrades.load(Ordering::SeqCst),
    );
    println!("range requests {ranges} ({REFUSED_RANGES} refused), upgrades {upgrades} ({REFUSED_UPGRADES} refused)");
    assert!(ranges > REFUSED_RANGES, "{ranges} range requests");
    assert!(upgrades > REFUSED_UPGRADES, "{upgrades} upgrades");
    // And it follows: its head reaches the sequencer's.
    let (seq_url, node_url) = (seq.url.clone(), node.url.clone());
    tokio::task::spawn_blocking(move || {
        let head = |url: &str| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(common::head(url))
        };
        let target = head(&seq_url);
        common::wait_until(Duration::from_secs(30), "the full node's head", || {
            head(&node_url) >= target
        });
    })
    .await
    .unwrap();
}
