//! A small run of the Block-STM benchmark over every generated workload: each parallel run is
//! checked against sequential inside the benchmark, and the report covers every thread count.
//! (The real run is `gigas-bench blockstm`.)

use std::path::PathBuf;

use gigas_bench::blockstm::{run, BlockstmArgs, Workload};

#[test]
fn small_blockstm_run_checks_every_workload() {
    let blocks = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/mainnet");
    assert!(
        blocks.is_dir(),
        "shared data missing at {}",
        blocks.display()
    );
    let out = tempfile::tempdir().expect("tempdir");
    let args = BlockstmArgs {
        blocks: Some(blocks),
        workloads: vec![
            Workload::Independent,
            Workload::Zipf,
            Workload::Erc20,
            Workload::Dependent,
        ],
        threads: vec![1, 2],
        txs: 300,
        accounts: 1_000,
        repeats: 1,
        out: out.path().to_path_buf(),
        seed: 3,
    };
    let report = run(&args).expect("every parallel run equals sequential");
    assert_eq!(report.workloads.len(), 4);
    for w in &report.workloads {
        assert_eq!(w.txs, 300);
        assert!(
            w.gas > 300 * 21_000 - 1,
            "{:?} used {} gas",
            w.workload,
            w.gas
        );
        // 1 and 2 threads with the bailout, then 2 threads without it.
        assert_eq!(w.parallel.len(), 3);
        assert!(!w.parallel[2].bailout && w.parallel[2].threads == 2);
        for p in &w.parallel {
            // The figures are the ones measured: sequential over parallel time, gas over time.
            assert!(p.seconds > 0.0 && w.sequential_s > 0.0, "{:?}", w.workload);
            let ratio = w.sequential_s / p.seconds;
            assert!(
                (p.speedup - ratio).abs() <= 1e-9 * ratio,
                "{:?} with {} threads reports {} but measured {ratio}",
                w.workload,
                p.threads,
                p.speedup
            );
            assert!((p.gas_per_second * p.seconds - w.gas as f64).abs() <= 1e-6 * w.gas as f64);
            // One worker never runs a transaction twice: it only ever reads final values.
            if p.threads == 1 {
                assert_eq!(p.executions_per_tx, 1.0, "{:?}", w.workload);
            } else {
                assert!(p.executions_per_tx >= 1.0);
            }
        }
    }
    // The files hold this run, not a stale one.
    let json = std::fs::read_to_string(out.path().join("blockstm.json")).expect("blockstm.json");
    let expected = serde_json::to_string_pretty(&report).expect("serialises");
    assert!(json == expected, "blockstm.json is not this run's report");
    assert!(out.path().join("blockstm.md").is_file());
}
