//! Helpers shared by the integration tests.
// Not every test binary uses every helper.
#![allow(dead_code)]

use std::path::PathBuf;

/// `shared/data/<rest>`, beside the project root. Panics with a clear message when absent:
/// these tests must never pass by skipping.
pub fn shared_data(rest: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(rest);
    assert!(
        dir.exists(),
        "shared data missing: expected {} (clone the project with shared/ beside it)",
        dir.display()
    );
    dir
}

/// `shared/data/mainnet`: the mainnet fixtures.
pub fn mainnet_dir() -> PathBuf {
    shared_data("mainnet")
}
