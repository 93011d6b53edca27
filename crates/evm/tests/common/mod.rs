//! Helpers shared by the integration tests.

use std::path::PathBuf;

/// `shared/data/mainnet`, beside the project root. Panics with a clear message when absent:
/// these tests must never pass by skipping.
pub fn mainnet_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/mainnet");
    assert!(
        dir.is_dir(),
        "shared data missing: expected the mainnet fixtures at {} (clone the project with shared/ beside it)",
        dir.display()
    );
    dir
}
