#!/usr/bin/env bash
# KILN_TUNE=1 against the heuristics' plans: bench/ops.c's products and
# bench/nn.c's workloads, each run in two kernel caches of their own (fresh
# ones), one with KILN_TUNE=1. The tuned cache's first run times the variants
# (its wall time says what tuning cost, once); then the two alternate ROUNDS
# times (default 2), 10 steps each, and each workload's kiln-lazy figure is the best median
# it had in each, so that both meet the same load. Writes bench/results_tune.txt.
#
# Usage (from anywhere): bench/tune.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
bazel build //bench:ops //bench:nn >&2
bin=$(bazel info bazel-bin 2>/dev/null)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -m 700 "$scratch/heuristics" "$scratch/tuned"
run() { # which (heuristics|tuned), round
    for b in ops nn; do
        if [[ $1 == tuned ]]; then
            KILN_TUNE=1 KILN_CACHE_DIR=$scratch/tuned "$bin/bench/$b" --quick --steps 10
        else
            KILN_CACHE_DIR=$scratch/heuristics "$bin/bench/$b" --quick --steps 10
        fi | grep '"impl":"kiln-lazy"' | sed "s/^/$1 $2 /"
    done
}
{
    echo "measured $(date -u +%F)"
    echo "load average $(cut -d' ' -f1-3 /proc/loadavg) before; $rounds rounds"
    t0=$SECONDS
    run tuned 0 >/dev/null
    echo "the tuned cache's first run (every variant compiled and timed): $((SECONDS - t0)) s"
    run heuristics 0 >/dev/null
    for ((r = 1; r <= rounds; r++)); do
        run heuristics "$r"
        run tuned "$r"
    done >"$scratch/lines"
    python3 - "$scratch/lines" <<'EOF'
import json, sys
best = {}
order = []
for line in open(sys.argv[1]):
    which, _, js = line.split(" ", 2)
    r = json.loads(js)
    key = (r["suite"], r["workload"], r["shape"])
    if not any(w in r["workload"] for w in ("matmul", "conv", "attention", "transformer", "mlp")):
        continue  # nothing there to tune: elementwise and reduction kernels
    if key not in order:
        order.append(key)
    d = best.setdefault(key, {})
    d[which] = min(d.get(which, 1e99), r["median_ms"])
print(f"{'workload':34} {'shape':24} {'heuristics ms':>13} {'tuned ms':>9} {'speed-up':>8}")
for key in order:
    d = best[key]
    if "heuristics" in d and "tuned" in d:
        print(f"{key[1]:34} {key[2][:24]:24} {d['heuristics']:13.3f} {d['tuned']:9.3f} "
              f"{d['heuristics'] / d['tuned']:8.2f}")
EOF
    echo "load average $(cut -d' ' -f1-3 /proc/loadavg) after"
} >bench/results_tune.txt
cat bench/results_tune.txt
