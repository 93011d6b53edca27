#!/usr/bin/env bash
# Makes sure this machine has what Gigas needs beyond Rust and crates.io, installing what is
# missing from Debian's packages when it can.
#
# Usage: scripts/prerequisites.sh [build|devnet|tests] [--check]
#
#   build   a C compiler and pkg-config (revm's KZG and secp256k1 code, MDBX, zstd are C)
#   devnet  build, plus Prometheus (the devnet scrapes both nodes with deploy/prometheus.yml)
#   tests   devnet, plus what the suite runs as real components: nginx (the caching proxy of
#           fullnode/tests/proxy.rs), prometheus and promtool (fullnode/tests/prometheus.rs),
#           python3 with its venv module (sequencer/tests/web3py.rs makes a web3.py venv)
#   --check only report what is missing; exit 1 if anything is
#
# Run as root with apt-get (as on CI and the project's machines), it installs what is missing
# with `apt-get install --no-install-recommends` and no service started. Otherwise it prints
# the exact command to run and exits 1. Rust itself (1.94 or newer, with cargo, clippy and
# rustfmt) must already be there: Debian's rustc is older than the workspace needs.
set -euo pipefail

PROG=prerequisites.sh
want=tests
check_only=0
for arg in "$@"; do
  case "$arg" in
    build | devnet | tests) want="$arg" ;;
    --check) check_only=1 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "$PROG: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

have() { command -v "$1" >/dev/null 2>&1; }
have_file() { [ -x "$1" ]; }

# Each requirement: the Debian package that provides it and how to tell it is there.
missing_pkgs=()
missing_what=()
need() { # need PACKAGE WHAT TEST...
  local pkg="$1" what="$2"
  shift 2
  if ! "$@"; then
    missing_pkgs+=("$pkg")
    missing_what+=("$what")
  fi
}

have_c_compiler() { have cc || have gcc || have clang; }
have_nginx() { have nginx || have_file /usr/sbin/nginx || have_file /usr/bin/nginx; }
have_promtool() { have promtool; }
have_prometheus() { have prometheus; }
# The venv module alone is not enough on Debian: `python3 -m venv` also needs ensurepip, which
# is what python3-venv adds.
have_venv() { have python3 && python3 -c 'import venv, ensurepip' >/dev/null 2>&1; }

need build-essential "a C compiler (cc)" have_c_compiler
need pkg-config "pkg-config" have pkg-config
if [ "$want" = devnet ] || [ "$want" = tests ]; then
  need prometheus "prometheus" have_prometheus
fi
if [ "$want" = tests ]; then
  need prometheus "promtool" have_promtool
  need nginx-light "nginx" have_nginx
  need python3-venv "python3 with the venv module" have_venv
fi

rust_problem=""
if ! have cargo; then
  rust_problem="no cargo on PATH: install Rust 1.94 or newer (rustup, or your distribution's toolchain if new enough) with clippy"
elif [ "$want" = tests ] && ! cargo clippy --version >/dev/null 2>&1; then
  rust_problem="cargo has no clippy: rustup component add clippy"
fi

# One package may answer several needs (prometheus gives prometheus and promtool).
mapfile -t pkgs < <(printf '%s\n' "${missing_pkgs[@]+"${missing_pkgs[@]}"}" | awk 'NF && !seen[$0]++')

if [ ${#pkgs[@]} -eq 0 ]; then
  if [ -n "$rust_problem" ]; then
    echo "$PROG: $rust_problem" >&2
    exit 1
  fi
  exit 0
fi

what=$(IFS=,; echo "${missing_what[*]}" | sed 's/,/, /g')
command_line="apt-get install -y --no-install-recommends ${pkgs[*]}"
echo "$PROG: missing for '$want': $what"

if [ "$check_only" = 1 ]; then
  echo "$PROG: install with: $command_line" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ] || ! have apt-get; then
  if have apt-get; then
    echo "$PROG: not root, so not installing. Run: sudo apt-get update && sudo $command_line" >&2
  else
    echo "$PROG: no apt-get here. Install the equivalents of these Debian packages: ${pkgs[*]}" >&2
  fi
  exit 1
fi

# Installing nginx or prometheus on Debian starts its service where an init system runs; the
# suite starts its own on free loopback ports and wants no daemon on 80 or 9090. A policy-rc.d
# that refuses every start (the Debian convention for chroots and images) holds them off, and is
# removed again unless one was already there.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  own_policy=1
fi
cleanup() { if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
echo "$PROG: installing ${pkgs[*]} (apt-get update, then install)"
log=$(mktemp)
if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${pkgs[@]}"; } >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  rm -f "$log"
  echo "$PROG: apt-get failed (its last lines above). Run by hand: apt-get update && $command_line" >&2
  exit 1
fi
rm -f "$log"

# Check again: a package that installed but does not provide the tool is worth a clear error
# now rather than a test failure in half an hour.
still=()
have_c_compiler || still+=("a C compiler")
if [ "$want" = devnet ] || [ "$want" = tests ]; then have_prometheus || still+=("prometheus"); fi
if [ "$want" = tests ]; then
  have_promtool || still+=("promtool")
  have_nginx || still+=("nginx")
  have_venv || still+=("python3's venv module (python3 on PATH is $(command -v python3 || echo none))")
fi
if [ ${#still[@]} -gt 0 ]; then
  echo "$PROG: installed ${pkgs[*]}, but still missing: ${still[*]}" >&2
  exit 1
fi
echo "$PROG: installed ${pkgs[*]}"
if [ -n "$rust_problem" ]; then
  echo "$PROG: $rust_problem" >&2
  exit 1
fi
