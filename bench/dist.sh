#!/usr/bin/env bash
# Runs bench/dist_allreduce.c at 2 ranks (the all-reduce sizes and the
# data-parallel step) and at 1 rank (the step alone matters there), and keeps
# the output in bench/results_dist.txt (bench/run.sh clears bench/results/),
# with the load average beside it; bench/report.py puts it in RESULTS.md.
#
# Usage (from anywhere): bench/dist.sh     (./kiln.sh bench-dist)
set -euo pipefail
cd "$(dirname "$0")/.."
BAZEL=${BAZEL:-bazel}
"$BAZEL" build --noshow_progress //bench:dist_allreduce //dist:libkiln_mpi.so
bin=$("$BAZEL" info bazel-bin 2>/dev/null)
export KILN_DIST_MPI_SHIM=$bin/dist/libkiln_mpi.so
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
out=bench/results_dist.txt
mkdir -p bench/results
{
    echo "# $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
    mpirun --bind-to none -np 2 "$bin/bench/dist_allreduce"
    mpirun --bind-to none -np 1 "$bin/bench/dist_allreduce" | tail -n 1
} | tee "$out"
