#!/usr/bin/env bash
# Checks a running Gigas devnet against the observability kit in deploy/, by hand:
#   1. deploy/prometheus.yml and deploy/rules.yml pass `promtool check config` / `check rules`;
#   2. each node's /metrics parses (`promtool check metrics`; lint problems are printed, only
#      parse errors fail);
#   3. every metric the Grafana dashboard and the rules read is exported by one of the nodes
#      (the dashboard would otherwise show "No data" in silence);
#   4. with --prometheus URL: Prometheus has both targets up and answers the full node's lag and
#      the sequencer's block-time queries.
# fullnode/tests/prometheus.rs runs the same checks on nodes it starts itself.
#
# Usage:
#   scripts/check-observability.sh [--sequencer-metrics URL] [--fullnode-metrics URL]
#                                  [--prometheus URL] [--dashboard FILE] [--rules FILE]
# Defaults: http://127.0.0.1:9001/metrics and http://127.0.0.1:9002/metrics (deploy/prometheus.yml's
# targets), no Prometheus check. Needs curl, python3 and promtool (apt-get install -y prometheus).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seq_url="http://127.0.0.1:9001/metrics"
fn_url="http://127.0.0.1:9002/metrics"
prom_url=""
dashboard="$root/deploy/grafana/gigas-dashboard.json"
rules="$root/deploy/rules.yml"
config="$root/deploy/prometheus.yml"

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --sequencer-metrics) seq_url="${2:?--sequencer-metrics needs a URL}"; shift 2 ;;
    --fullnode-metrics) fn_url="${2:?--fullnode-metrics needs a URL}"; shift 2 ;;
    --prometheus) prom_url="${2:?--prometheus needs a URL}"; shift 2 ;;
    --dashboard) dashboard="${2:?--dashboard needs a file}"; shift 2 ;;
    --rules) rules="${2:?--rules needs a file}"; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage 2 ;;
  esac
done

for tool in curl python3 promtool; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    case "$tool" in
      promtool) echo "promtool not found: install Debian's prometheus package (apt-get install -y prometheus)" >&2 ;;
      *) echo "$tool not found: install it (apt-get install -y $tool)" >&2 ;;
    esac
    exit 1
  fi
done

failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== promtool check config / rules"
if ! promtool check config "$config"; then fail "promtool check config $config"; fi
if ! promtool check rules "$rules"; then fail "promtool check rules $rules"; fi

for who in sequencer fullnode; do
  if [ "$who" = sequencer ]; then url="$seq_url"; else url="$fn_url"; fi
  echo "== $who: $url"
  if ! curl -fsS --max-time 10 "$url" -o "$work/$who.txt"; then
    fail "cannot scrape the $who at $url (started with --metrics ADDR:PORT?)"
    : > "$work/$who.txt"
    continue
  fi
  if [ "$(tail -n 1 "$work/$who.txt")" != "# EOF" ]; then
    fail "the $who's exposition does not end with '# EOF' (OpenMetrics)"
  fi
  rc=0
  promtool check metrics < "$work/$who.txt" > "$work/$who.lint" 2>&1 || rc=$?
  # promtool 2.x reads with the 0.0.4 text parser: an OpenMetrics counter family X has its
  # sample as X_total, which it reports as "X_total no help text". Those are not problems.
  python3 - "$work/$who.txt" "$work/$who.lint" "$who" <<'PY'
import sys
body, lint, who = (open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3])
counters = {l.split()[2] + "_total" for l in body.splitlines()
            if l.startswith("# TYPE ") and l.split()[3:4] == ["counter"]}
artifacts, other = 0, []
for line in filter(None, map(str.strip, lint.splitlines())):
    if line.endswith(" no help text") and line[: -len(" no help text")] in counters:
        artifacts += 1
    else:
        other.append(line)
print(f"promtool check metrics: {len(other)} problems, {artifacts} counter HELP lines promtool misreads in OpenMetrics")
for line in other:
    print(f"  {who}: {line}")
PY
  case "$rc" in
    0|3) ;;
    *) fail "promtool check metrics could not parse the $who's exposition (exit $rc)"; cat "$work/$who.lint" >&2 ;;
  esac
done

echo "== dashboard and rules against the exported metrics"
if ! python3 -m json.tool "$dashboard" > /dev/null; then fail "$dashboard is not JSON"; fi
if ! python3 - "$dashboard" "$rules" "$work/sequencer.txt" "$work/fullnode.txt" <<'PY'
import json, os, re, sys
dashboard, rules, *bodies = sys.argv[1:]
# Absent from a healthy run without a limit: exported once they have something to say.
absent_ok = {
    "gigas_memory_limit_bytes": "exported only under --memory-limit",
    "gigas_fullnode_diffs_rejected_total": "appears with the first rejected diff",
    "gigas_txpool_rejected_total": "appears with the first rejected transaction",
}
# The cgroup collector exports nothing where the kernel shows no memory cgroup (v1 hierarchy or
# v2 controller); where it does, its names are required.
try:
    v2 = "memory" in open("/sys/fs/cgroup/cgroup.controllers").read().split()
except OSError:
    v2 = False
memory_cgroup = os.path.isdir("/sys/fs/cgroup/memory") or v2
def names(expr):
    expr = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|`[^`]*`', "", expr)
    return {m for m in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr)
            if m.startswith("gigas_") and ":" not in m}
refs = {}
def walk(panels):
    for p in panels or []:
        for t in p.get("targets", []):
            for n in names(t.get("expr", "")):
                refs.setdefault(n, set()).add("panel " + repr(p.get("title")))
        walk(p.get("panels"))
walk(json.load(open(dashboard)).get("panels"))
for line in open(rules):
    s = line.strip()
    if s.startswith("expr:"):
        for n in names(s[5:]):
            refs.setdefault(n, set()).add("rules")
scraped = set()
for b in bodies:
    for line in open(b):
        if line.strip() and not line.startswith("#"):
            scraped.add(re.split(r"[{ ]", line, 1)[0])
bad = 0
for n in sorted(refs):
    if n in scraped:
        continue
    if n.startswith("gigas_cgroup_") and not memory_cgroup:
        print(f"  not exported on this machine (no memory cgroup): {n}")
        continue
    if n in absent_ok:
        print(f"  not exported now (expected): {n}: {absent_ok[n]}")
        continue
    print(f"  MISSING: {n} (read by {', '.join(sorted(refs[n]))})")
    bad += 1
print(f"{len(refs)} metrics referenced, {bad} missing")
sys.exit(1 if bad else 0)
PY
then
  fail "the dashboard or the rules read metrics the nodes do not export"
fi

if [ -n "$prom_url" ]; then
  echo "== Prometheus at $prom_url"
  query() {
    curl -fsS --max-time 10 -G "$prom_url/api/v1/query" --data-urlencode "query=$1"
  }
  if ! curl -fsS --max-time 10 "$prom_url/api/v1/targets" | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
up = {x["labels"].get("job") for x in t if x["health"] == "up"}
for x in t:
    print("  %s %s: %s %s" % (x["labels"].get("job"), x["scrapeUrl"], x["health"], x["lastError"]))
sys.exit(0 if {"gigas-sequencer", "gigas-fullnode"} <= up else 1)'; then
    fail "Prometheus does not have both gigas-sequencer and gigas-fullnode up"
  fi
  for expr in \
    'gigas_fullnode_lag_blocks' \
    'gigas_fullnode_lag_seconds' \
    'histogram_quantile(0.5, sum by (le) (rate(gigas_sequencer_block_seconds_bucket[1m])))' \
    'histogram_quantile(0.99, sum by (le) (rate(gigas_sequencer_block_interval_seconds_bucket[1m])))' \
    'job:gigas_sequencer_block_seconds:p50_1m'; do
    if ! query "$expr" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print("  " + sys.argv[1] + " = " + (", ".join(v["value"][1] for v in r) or "(no data)"))
sys.exit(0 if r else 1)' "$expr"; then
      fail "Prometheus has no data for: $expr"
    fi
  done
fi

if [ "$failed" -ne 0 ]; then
  echo "observability check: FAILED" >&2
  exit 1
fi
echo "observability check: OK"
