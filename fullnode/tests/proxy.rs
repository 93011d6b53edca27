//! The full node follows through an HTTP caching proxy: nginx (Debian's `nginx-light`) in
//! front of the sequencer caches the immutable diff files and ranges by their
//! `Cache-Control`, honours their `ETag`s (a conditional request is answered 304 from the
//! cache), never caches the head, and passes the WebSocket push through. Two full nodes
//! follow through it: one as from the sequencer (ranges, then the push), one as from a static
//! server (files, polling the head), and both end with the sequencer's state.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{head, Load, Process};

/// Starts nginx in front of `upstream` (`127.0.0.1:PORT`), caching by the answers' own
/// headers and passing the WebSocket push through; returns it and its URL.
fn start_nginx(dir: &Path, upstream: &str) -> (common::Nginx, String) {
    let d = dir.display();
    common::nginx(dir, &format!("proxy_cache_path {d}/cache levels=1:2 keys_zone=diffs:10m max_size=256m inactive=60m use_temp_path=off;"), |port| {
        format!(
            r#"
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    server {{
        listen 127.0.0.1:{port};
        location /diffs/stream {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 1h;
        }}
        location / {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_cache diffs;
            proxy_cache_revalidate on;
            add_header X-Cache-Status $upstream_cache_status always;
        }}
    }}"#
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_nodes_follow_through_an_nginx_cache_that_honours_etags() {
    let dir = tempfile::tempdir().unwrap();
    let seq = Process::sequencer(&dir.path().join("seq"));
    let upstream = seq.url.trim_start_matches("http://").to_string();
    let (_nginx, proxy) = start_nginx(&dir.path().join("nginx"), &upstream);

    let pushed = Process::fullnode(&dir.path().join("fn-push"), &proxy, &[]);
    let load = Load::start(&seq.url, 3, 11).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let touched = load.stop(&seq.url).await;
    let target = head(&seq.url).await;
    let polled = Process::fullnode(
        &dir.path().join("fn-static"),
        &proxy,
        &["--source-layout", "static"],
    );
    for node in [&pushed, &polled] {
        common::wait_for_block(&node.url, target, Duration::from_secs(60)).await;
        common::assert_same_state(&node.url, &seq.url, &touched).await;
    }
    assert!(
        pushed
            .metric("gigas_fullnode_diffs_fetched_total{source=\"stream\"}")
            .unwrap_or(0.0)
            > 0.0,
        "the pushed node got diffs over the WebSocket through the proxy"
    );
    assert!(
        polled
            .metric("gigas_fullnode_diffs_fetched_total{source=\"file\"}")
            .unwrap_or(0.0)
            >= target as f64,
        "the static node fetched every file"
    );

    // The cache: a file is stored once and served again with the sequencer's ETag; a
    // conditional request with it is answered 304; the head is never cached.
    let client = reqwest::Client::new();
    let n = target / 2;
    let direct = client
        .get(format!("{}/diffs/{n}", seq.url))
        .send()
        .await
        .unwrap();
    let etag = direct.headers()["etag"].to_str().unwrap().to_string();
    let body = direct.bytes().await.unwrap();
    let mut statuses = Vec::new();
    for _ in 0..2 {
        let r = client
            .get(format!("{proxy}/diffs/{n}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["etag"].to_str().unwrap(),
            etag,
            "the proxy keeps the ETag"
        );
        statuses.push(r.headers()["x-cache-status"].to_str().unwrap().to_string());
        assert_eq!(r.bytes().await.unwrap(), body);
    }
    assert_eq!(
        statuses[1], "HIT",
        "the second request is served from the cache: {statuses:?}"
    );
    let conditional = client
        .get(format!("{proxy}/diffs/{n}"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(conditional.status(), 304, "If-None-Match with the ETag");
    let head_answer = client
        .get(format!("{proxy}/diffs/head"))
        .send()
        .await
        .unwrap();
    let head_cache = head_answer
        .headers()
        .get("x-cache-status")
        .map(|v| v.to_str().unwrap().to_string());
    assert_ne!(
        head_cache.as_deref(),
        Some("HIT"),
        "the head is never served from the cache"
    );
    let log = std::fs::read_to_string(dir.path().join("nginx/access.log")).unwrap();
    let hits = log.lines().filter(|l| l.ends_with(" HIT")).count();
    println!("nginx: {} requests, {hits} cache hits", log.lines().count());
}
