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
            assert!(p.executions_per_tx >= 1.0 && p.speedup > 0.0);
        }
    }
    assert!(out.path().join("blockstm.json").is_file() && out.path().join("blockstm.md").is_file());
}
