#!/usr/bin/env bash
# Runs kiln's benchmarks and the NumPy peer on the same workloads, back to back
# on this machine, and prints the ratios. Usage: bench/run.sh [steps]
# (from the repository root; ./kiln.sh bench calls it).
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-5}"
venv=bench/peers/.venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import numpy, scipy' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet numpy scipy
fi
bazel build --ui_event_filters=-info --noshow_progress //bench:lazy_vs_eager
kiln_out=$(./bazel-bin/bench/lazy_vs_eager "$steps")
echo "$kiln_out"
# The peer gets its best: a current NumPy is slowed by these two settings.
peer_out=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$venv/bin/python" \
    bench/peers/numpy_peer.py "$steps")
numpy_version=$("$venv/bin/python" -c 'import numpy; print(numpy.__version__)')
echo
printf '%-36s %12s %12s %14s\n' workload "kiln ms" "numpy ms" "numpy/kiln"
while IFS=$'\t' read -r name ms; do
    line=$(grep -F "$name" <<<"$kiln_out")
    kms=$(awk '{print $(NF-1)}' <<<"$line")
    awk -v n="$name" -v k="$kms" -v p="$ms" 'BEGIN { printf "%-36s %12.2f %12.2f %14.2f\n", n, k, p, p / k }'
done <<<"$peer_out"
echo "(NumPy $numpy_version; above 1: kiln is faster)"
