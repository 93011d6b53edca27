#!/usr/bin/env bash
# The whole test suite, as the README gives it and CI runs it (.ci/run calls this script):
#   1. scripts/prerequisites.sh tests: installs the Debian packages the build and the suite's
#      real components need (nginx, prometheus, python3-venv, a C compiler) when missing;
#   2. clippy over every target with warnings as errors;
#   3. every test of the workspace, in release mode (the nodes and the EVM are tested at the
#      speed they run at). One workspace build makes every binary the tests start
#      (gigas-sequencer, gigas-fullnode, ...), so no test runs cargo itself.
# Arguments after the script name go to `cargo test` (for example `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/prerequisites.sh tests
cargo clippy --release --workspace --all-targets -- -D warnings
# --no-fail-fast: one failing test binary must not hide the results of the others.
cargo test --workspace --release --no-fail-fast "$@"
echo "scripts/test.sh: passed in $(( $(date +%s) - start )) s"
