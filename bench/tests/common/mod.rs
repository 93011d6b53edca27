//! What the benchmark smoke tests share.

use std::path::PathBuf;

/// The `gigas-sequencer` binary the workspace build made beside this test.
pub(crate) fn sequencer_binary() -> PathBuf {
    gigas_test_support::workspace_binary("gigas-sequencer")
}
