//! A small run of the load generator against real `gigas-sequencer` processes: a benchmark
//! genesis of 1,000 accounts with WETH9 built into a temporary directory, a few hundred signed
//! transfers and ERC-20 transfers, and checks that every transaction sent is accepted,
//! included and counted. No rate is asserted. (The real runs are `gigas-bench load` and
//! `gigas-bench ramp`.)

mod common;

use std::path::Path;

use clap::Parser;
use common::sequencer_binary;
use gigas_bench::load::{
    ensure_genesis, run_load, run_ramp, GenesisSpec, LoadArgs, LoadReport, RampArgs,
    SequencerProcess,
};

#[derive(Debug, Parser)]
struct LoadCli {
    #[command(flatten)]
    args: LoadArgs,
}

#[derive(Debug, Parser)]
struct RampCli {
    #[command(flatten)]
    args: RampArgs,
}

fn shared_args(dir: &Path, bin: &Path, out: &str) -> Vec<String> {
    [
        "--accounts",
        "1000",
        "--seed",
        "5",
        "--workload-seed",
        "9",
        "--batch",
        "20",
        "--in-flight",
        "8",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "--sequencer-bin".into(),
        bin.display().to_string(),
        "--genesis-dir".into(),
        dir.join("genesis").display().to_string(),
        "--datadir-root".into(),
        dir.join("nodes").display().to_string(),
        "--out".into(),
        dir.join(out).display().to_string(),
    ])
    .collect()
}

/// Every transaction the run sent was answered with its hash and seen in a block, and the
/// per-second counts add up to the same totals.
fn assert_all_included(report: &LoadReport, expected: u64) {
    assert_eq!(report.sent_total, expected, "sent");
    assert_eq!(report.included_total, expected, "included");
    let sent: u64 = report.steps.iter().map(|s| s.sent).sum();
    let accepted: u64 = report.steps.iter().map(|s| s.accepted).sum();
    let included: u64 = report.steps.iter().map(|s| s.included).sum();
    assert_eq!((sent, accepted), (expected, expected), "answers");
    assert!(
        included <= expected,
        "{included} included of {expected} sent"
    );
    for s in &report.steps {
        assert_eq!(
            s.rejected + s.gave_up,
            0,
            "step {}: {:?}",
            s.step,
            s.refusals
        );
        assert!(
            s.refusals.iter().all(|r| r.backpressure),
            "step {}: {:?}",
            s.step,
            s.refusals
        );
        assert!(
            s.blocks > 0 && s.latency_ms.p50.is_finite(),
            "step {}",
            s.step
        );
    }
    let timeline: u64 = report.timeline.iter().map(|p| p.accepted).sum();
    assert!(timeline <= expected);
    assert_eq!(report.foreign_txs, 0);
    // The sampled receipts: every ERC-20 transfer and every ether transfer succeeded.
    assert!(report.receipts.checked > 0);
    assert_eq!(
        report.receipts.succeeded, report.receipts.checked,
        "{:?}",
        report.receipts
    );
}

#[test]
fn a_small_load_and_ramp_are_included_and_counted() {
    let bin = sequencer_binary();
    let dir = tempfile::tempdir().expect("tempdir");

    // 1. `load`, starting its own node: 300 transactions, half of them WETH9 transfers.
    let mut argv = vec!["load".to_string()];
    argv.extend(["--workload", "mix", "--rate", "100", "--duration", "3s"].map(String::from));
    // The history's indexer at every block, so that its phases show within 3 s.
    argv.extend(["--node-arg=--history.index-batch", "--node-arg=1"].map(String::from));
    argv.extend(shared_args(dir.path(), &bin, "load"));
    let cli = LoadCli::try_parse_from(&argv).expect("load arguments");
    let report = run_load(&cli.args).expect("load run");
    assert_eq!(report.steps.len(), 1);
    assert_all_included(&report, 300);
    let step = &report.steps[0];
    assert!(step.node_cpu_cores.is_some_and(|c| c > 0.0));
    assert!(
        step.stages.iter().any(|s| s.stage == "execute"),
        "the stage split comes from the node's metrics: {:?}",
        step.stages
    );
    assert!(step.diff_bytes_per_tx.is_some_and(|b| b > 0.0));
    // The state commitment is on by default: its time per transaction, and its share of
    // the node's CPU (a share: below one).
    assert!(step.commitment_us_per_tx.is_some_and(|us| us > 0.0));
    assert!(step
        .commitment_cpu_us_per_tx
        .zip(step.commitment_us_per_tx)
        .is_some_and(|(cpu, wall)| cpu > 0.0 && cpu <= wall * 1.01));
    assert!(step
        .commitment_cpu_share
        .is_some_and(|s| s > 0.0 && s < 1.0));
    assert!(
        step.history_phases.iter().any(|p| p.stage == "sync"),
        "the history commit's phases: {:?}",
        step.history_phases
    );
    assert!(
        step.index_phases.iter().any(|p| p.stage == "commit"),
        "the history indexer's phases: {:?}",
        step.index_phases
    );
    assert!(
        step.recovery_us_per_tx.is_some_and(|us| us > 0.0),
        "sender recovery's cost from the node's threads: {:?}",
        step.node_threads
    );
    assert!(report
        .config
        .disk_sync
        .is_some_and(|d| d.small_ms_p50 > 0.0));
    assert!(step.library_recovery_us.is_some_and(|us| us > 0.0));
    assert!(!step.node_threads.is_empty());
    for file in [
        "load.json",
        "load.md",
        "load-tps.svg",
        "load-latency.svg",
        "node.log",
    ] {
        assert!(dir.path().join("load").join(file).is_file(), "{file}");
    }
    let md = std::fs::read_to_string(dir.path().join("load/load.md")).expect("markdown");
    assert!(md.contains("| step | target/s"), "{md}");

    // 2. A node started apart and driven by URL: a ramp of two short steps, then a load over
    // WebSocket whose senders' nonces are past 0 (the generator asks the node for them).
    let (_, chain) = ensure_genesis(
        Some(&bin),
        &dir.path().join("genesis"),
        &GenesisSpec {
            accounts: 1000,
            seed: 5,
            gas_limit: 1_000_000_000,
            erc20: true,
        },
        &gigas_bench::shared_data("mainnet"),
    )
    .expect("the cached genesis");
    let node = SequencerProcess::start(
        &bin,
        &chain,
        std::time::Duration::from_millis(250),
        &[],
        Some(&dir.path().join("nodes")),
        &dir.path().join("url-node.log"),
    )
    .expect("start a node");
    let pid = node.pid().to_string();
    let by_url = |out: &str| -> Vec<String> {
        let mut v: Vec<String> = shared_args(dir.path(), &bin, out);
        v.extend(
            [
                "--sequencer",
                node.url.as_str(),
                "--metrics-url",
                node.metrics.as_str(),
                "--sequencer-pid",
                pid.as_str(),
            ]
            .map(String::from),
        );
        v
    };
    let mut argv = vec!["ramp".to_string()];
    argv.extend(
        [
            "--workload",
            "erc20",
            "--start",
            "60",
            "--factor",
            "2",
            "--step-secs",
            "2",
            "--max-steps",
            "2",
        ]
        .map(String::from),
    );
    argv.extend(by_url("ramp"));
    let cli = RampCli::try_parse_from(&argv).expect("ramp arguments");
    let ramp = run_ramp(&cli.args).expect("ramp run");
    assert!(!ramp.steps.is_empty());
    let expected: u64 = [120u64, 240].iter().take(ramp.steps.len()).sum();
    assert_all_included(&ramp, expected);
    assert!(dir.path().join("ramp/ramp.json").is_file());

    let mut argv = vec!["load".to_string()];
    argv.extend(
        [
            "--workload",
            "erc20",
            "--rate",
            "80",
            "--duration",
            "2s",
            "--transport",
            "ws",
        ]
        .map(String::from),
    );
    argv.extend(by_url("again"));
    let again = run_load(&LoadCli::try_parse_from(&argv).expect("arguments").args)
        .expect("a second run on the same node");
    assert_all_included(&again, 160);
    node.stop().expect("the node stops cleanly");
}
