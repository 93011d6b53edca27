//! A small run of the storage benchmark: both engines take every batch, the report adds up,
//! and Vilmo reopens with every key. (The real run is `gigas-bench storage`.)

use gigas_bench::storage::{run, EngineKind, StorageArgs};

#[test]
fn small_storage_run_reports_both_engines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = StorageArgs {
        keys: 30_000,
        batch: 5_000,
        update_batches: 4,
        engines: vec![EngineKind::Vilmo, EngineKind::Mdbx],
        dir: Some(dir.path().join("data")),
        keep: false,
        out: dir.path().join("report"),
        seed: 7,
    };
    let report = run(&args).expect("benchmark runs");
    assert_eq!(report.points.len(), 6 + 4);
    assert!(report
        .points
        .iter()
        .all(|p| p.seconds.len() == 2 && p.seconds.iter().all(|s| *s > 0.0)));
    let loaded: usize = report
        .points
        .iter()
        .filter(|p| p.phase == "load")
        .map(|p| p.kvs)
        .sum();
    assert_eq!(loaded, 30_000);
    // Zipf draws repeat hot keys, so an update batch holds fewer distinct keys than draws.
    assert!(report
        .points
        .iter()
        .filter(|p| p.phase == "update")
        .all(|p| p.kvs < 5_000 && p.kvs > 100));
    assert_eq!(report.summary.len(), 4);
    assert!(report.vilmo_reopen_seconds.is_some());
    let per_key = report.vilmo_index_bytes_per_key.expect("index size");
    assert!(per_key > 8.0 && per_key < 80.0, "{per_key} bytes per key");
    assert!(report.vilmo_disk_over_live.expect("disk") > 1.0);
    for file in ["storage.json", "storage.md", "storage.svg"] {
        assert!(args.out.join(file).is_file(), "{file} missing");
    }
}
