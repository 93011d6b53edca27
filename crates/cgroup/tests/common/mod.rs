//! What the cgroup tests share.

use std::process::Output;

/// A child's exit status and output, for assertion messages.
pub(crate) fn describe(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
