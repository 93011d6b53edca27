//! What the benchmark smoke tests share.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `gigas-sequencer` binary of this build. A test can only name its own package's
/// binaries (`CARGO_BIN_EXE_*`), so the sequencer's is built into the same target directory
/// and profile (a no-op when it is fresh, as under `cargo test --workspace`).
pub(crate) fn sequencer_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<this test>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps")
        .to_path_buf();
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "gigas-sequencer", "--bin", "gigas-sequencer"])
        .args(["--profile", &profile])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building gigas-sequencer failed");
    let bin = profile_dir.join(format!("gigas-sequencer{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "no {}", bin.display());
    bin
}
