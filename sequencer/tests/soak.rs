//! A steady load of signed transfers against a dev sequencer for `GIGAS_SOAK_SECS` (600 by
//! default) at `GIGAS_SOAK_TPS` (200 by default): resident memory (total, anonymous, file-backed) sampled from /proc every
//! 10 seconds, and each block stage's median and p99 read from `/metrics` at the end. A
//! measurement, not a check: run it by hand (`--ignored --nocapture`).

mod common;

use std::time::{Duration, Instant};

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, Bytes, TxKind, U256};
use alloy_provider::{Provider, ProviderBuilder};
use common::NodeProcess;
use gigas_chain::dev_signer;

/// A field of /proc/PID/status in KiB. Resident memory is split because MDBX and Vilmo map
/// their files: file-backed pages grow with the database and the kernel reclaims them under
/// pressure, while anonymous memory is what the node itself holds.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The `q` quantile of a Prometheus histogram's cumulative buckets (upper bound of the bucket
/// it falls in).
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    buckets
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map_or(f64::NAN, |(le, _)| *le)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a 10-minute measurement"]
async fn soak() {
    let secs: u64 = std::env::var("GIGAS_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let tps: u64 = std::env::var("GIGAS_SOAK_TPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = 19_000 + (std::process::id() % 1000) as u16;
    let metrics = format!("127.0.0.1:{metrics_port}");
    let node = NodeProcess::start(&dir.path().join("node"), &["--metrics", &metrics]);
    let provider = ProviderBuilder::new().connect_http(node.url.parse().unwrap());
    let signers: Vec<_> = (0..10).map(|i| dev_signer(i).unwrap()).collect();
    let mut nonces = vec![0u64; signers.len()];
    let started = Instant::now();
    let mut next_sample = started;
    let mut sent = 0u64;
    let interval = Duration::from_secs_f64(1.0 / tps as f64);
    let mut next_send = started;
    println!("seconds,rss_mib,anon_mib,file_mib,sent,head");
    while started.elapsed() < Duration::from_secs(secs) {
        if Instant::now() >= next_sample {
            let head = provider.get_block_number().await.unwrap_or(0);
            println!(
                "{},{:.1},{:.1},{:.1},{sent},{head}",
                started.elapsed().as_secs(),
                status_kib(node.pid(), "VmRSS") as f64 / 1024.0,
                status_kib(node.pid(), "RssAnon") as f64 / 1024.0,
                status_kib(node.pid(), "RssFile") as f64 / 1024.0,
            );
            next_sample += Duration::from_secs(10);
        }
        let i = (sent % signers.len() as u64) as usize;
        let tx = TxEip1559 {
            chain_id: 1337,
            nonce: nonces[i],
            gas_limit: 21_000,
            max_fee_per_gas: 100_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(Address::with_last_byte((sent % 200) as u8)),
            value: U256::from(1),
            access_list: Default::default(),
            input: Bytes::new(),
        };
        let raw = gigas_test_support::sign_raw(&signers[i], tx);
        if provider.send_raw_transaction(&raw).await.is_ok() {
            nonces[i] += 1;
            sent += 1;
        }
        next_send += interval;
        if let Some(wait) = next_send.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }
    let text = common::scrape_metrics(&metrics);
    println!("\nstage,median_ms,p99_ms,blocks");
    for stage in gigas_sequencer::metrics::Stage::ALL.map(|s| s.name()) {
        let mut buckets = Vec::new();
        for line in text.lines() {
            if line.starts_with("gigas_sequencer_stage_seconds_bucket")
                && line.contains(&format!("stage=\"{stage}\""))
            {
                let le = line.split("le=\"").nth(1).and_then(|r| r.split('"').next());
                let count = line.rsplit(' ').next().and_then(|c| c.parse::<f64>().ok());
                if let (Some(le), Some(count)) = (le, count) {
                    let le = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap_or(f64::NAN)
                    };
                    buckets.push((le, count));
                }
            }
        }
        println!(
            "{stage},{:.3},{:.3},{}",
            quantile(&buckets, 0.5) * 1e3,
            quantile(&buckets, 0.99) * 1e3,
            buckets.last().map_or(0.0, |b| b.1)
        );
    }
    println!("\nsent {sent} transfers in {secs} s");
}
