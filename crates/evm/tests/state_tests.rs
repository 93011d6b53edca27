//! Every vector of the shipped Ethereum state tests (`../shared/data/state-tests`) gives the
//! expected post-state root and logs hash both interpreted and with every contract compiled
//! before its first frame (`JitMode::Eager`), and the two runs agree on everything.

use gigas_test_support as common;

use gigas_evm::jit::JitMode;
use gigas_evm::statetest::{run_dir, KNOWN_DEVIATIONS};
use std::path::PathBuf;

fn state_tests_dir() -> PathBuf {
    common::shared_data("state-tests")
}

#[test]
fn every_state_test_vector_matches_interpreted_and_compiled() {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let results =
        run_dir(&state_tests_dir(), JitMode::Eager, threads, |_, _| {}).expect("state tests run");
    assert!(
        results.errors.is_empty(),
        "files not run: {:?}",
        results.errors
    );
    // shared/data/README.md: 486 files, 7,925 vectors, all Cancun.
    assert_eq!(results.files, 486);
    assert_eq!(results.vectors.len(), 7925);
    assert!(results.skipped.is_empty(), "{:?}", results.skipped);
    let differing = results.differing();
    let listing: Vec<String> = differing
        .iter()
        .map(|(v, problems)| format!("{}: {}", v.id, problems.join("; ")))
        .collect();
    assert!(
        differing.is_empty(),
        "{} vectors differ:\n{}",
        differing.len(),
        listing.join("\n")
    );
    let known: Vec<_> = results
        .vectors
        .iter()
        .filter(|v| v.known_deviation)
        .collect();
    assert_eq!(known.len(), KNOWN_DEVIATIONS.len());
    // The comparison is only worth something if compiled code ran: contracts compiled, frames
    // started in compiled code and resumed after CALLs, and almost none handed back early.
    let jit = results.jit.expect("JIT counters");
    assert!(jit.compiled > 1500, "{jit:?}");
    assert!(jit.compiled_frames > 100_000, "{jit:?}");
    assert!(jit.suspensions > 100_000, "{jit:?}");
    assert!(jit.bailed_frames * 100 < jit.compiled_frames, "{jit:?}");
}

/// A vector whose expected root is wrong is reported, for both runs.
#[test]
fn a_wrong_expected_root_is_reported() {
    let source = state_tests_dir().join("GeneralStateTests/stExample/add11.json");
    let text = std::fs::read_to_string(&source).expect("add11.json");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("json");
    let post = json["add11"]["post"]["Cancun"][0]["hash"].clone();
    assert!(post.is_string(), "add11 has a Cancun vector");
    json["add11"]["post"]["Cancun"][0]["hash"] =
        serde_json::Value::String(format!("0x{}", "11".repeat(32)));
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("add11.json"), json.to_string()).expect("write");
    let results = run_dir(dir.path(), JitMode::Eager, 1, |_, _| {}).expect("runs");
    let differing = results.differing();
    assert_eq!(differing.len(), 1);
    let problems = &differing[0].1;
    assert!(problems
        .iter()
        .any(|p| p.starts_with("interpreter: state root")));
    assert!(problems.iter().any(|p| p.starts_with("jit: state root")));
}
