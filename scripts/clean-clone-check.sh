#!/usr/bin/env bash
# Checks the README contract the way CI does: a fresh clone of the committed main branch with
# ../shared beside it, running .ci/run with an empty target directory. Prints the wall time.
#
# Usage: scripts/clean-clone-check.sh [WORKDIR]   (default: a new temporary directory)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$(cd "$repo/../shared" && pwd)" || { echo "no ../shared beside $repo" >&2; exit 1; }
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
rm -rf "$work/main" "$work/shared"
git clone --quiet --branch main "$repo" "$work/main"
ln -s "$shared" "$work/shared"
echo "clean clone in $work/main (shared -> $shared)"
start=$(date +%s)
(cd "$work/main" && CI=true bash .ci/run)
echo "clean-clone .ci/run passed in $(( $(date +%s) - start )) s"
