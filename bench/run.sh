#!/usr/bin/env bash
# Runs kiln's benchmarks (bench/ops.c, bench/compile_cost.c) and the peers in
# bench/peers/ (NumPy, PyTorch eager, torch.compile, tinygrad) on the same
# workloads back to back, keeps their JSON lines in bench/results/, and writes
# bench/RESULTS.md and bench/results.png with bench/report.py.
#
# Usage (from anywhere): bench/run.sh [--quick | --full] [--steps N]
#                                      [--baseline REV] [STEPS]
#   --quick   3 timed steps, no 4096 matmul, a time budget per peer: under 5
#             minutes on 2 cores
#   --full    also the 4096 matmul
#   --baseline REV
#             also builds kiln's benchmarks at git revision REV (in a scratch
#             worktree) and runs them alternately with this tree's, so that
#             RESULTS.md says, workload by workload, whether this tree is
#             slower than REV, measured under the same load
# The peers are installed on first use into the virtual environment
# bench/peers/.venv (several GiB: PyTorch's wheels bring CUDA libraries even
# where only the CPU is used). Environment: BAZEL (default bazel),
# BAZEL_STARTUP_OPTS and BAZEL_BUILD_OPTS for the build, BENCH_THREADS
# (default: every online CPU) for kiln and the peers alike.
set -euo pipefail
cd "$(dirname "$0")/.."

args=()
baseline=
while (($#)); do
    a=$1
    shift
    # A bare number is the step count (./kiln.sh bench STEPS).
    if [[ $a == --baseline ]]; then
        baseline=${1:?--baseline needs a revision}
        shift
    elif [[ $a == --steps ]]; then
        args+=(--steps "${1:?--steps needs a count}")
        shift
    elif [[ $a =~ ^[0-9]+$ ]]; then args+=(--steps "$a"); else args+=("$a"); fi
done
quick=false
for a in "${args[@]+"${args[@]}"}"; do [[ $a == --quick ]] && quick=true; done
# In quick mode each peer gets a time budget (seconds) past which its
# remaining workloads are reported as skipped: torch.compile's compiler alone
# can take minutes on two busy cores.
budget() { if $quick; then echo --budget "$1"; fi; }

threads=${BENCH_THREADS:-$(nproc)}
export KILN_THREADS=$threads BENCH_THREADS=$threads PYTHONDONTWRITEBYTECODE=1
venv=bench/peers/.venv
results=bench/results
start=$SECONDS
stage() { echo "== $1 ($((SECONDS - start)) s)" >&2; }

if [ ! -x "$venv/bin/python" ] ||
    ! "$venv/bin/python" -c 'import numpy, scipy, matplotlib, torch, tinygrad' 2>/dev/null; then
    stage "installing the peers into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet numpy scipy matplotlib tinygrad torch
fi

stage "building"
read -r -a startup <<<"${BAZEL_STARTUP_OPTS:-}"
read -r -a build <<<"${BAZEL_BUILD_OPTS:-}"
bazel=${BAZEL:-bazel}
"$bazel" "${startup[@]+"${startup[@]}"}" build "${build[@]+"${build[@]}"}" \
    --ui_event_filters=-info --noshow_progress //bench:ops //bench:nn //bench:compile_cost \
    //bench:embedding //bench:gpt2 //bench:dynamic //bench:conv //bench:cuda_host //bench:overhead \
    //bench:cnn_epoch //tests:libfake_cuda.so
bin=$("$bazel" "${startup[@]+"${startup[@]}"}" info "${build[@]+"${build[@]}"}" bazel-bin 2>/dev/null)

base_bin=
if [[ -n $baseline ]]; then
    stage "building the baseline $baseline"
    base_tree=$(mktemp -d)
    trap 'git worktree remove --force "$base_tree" >/dev/null 2>&1 || true' EXIT
    git worktree add --detach "$base_tree" "$baseline" >/dev/null
    (cd "$base_tree" && "$bazel" "${startup[@]+"${startup[@]}"}" build "${build[@]+"${build[@]}"}" \
        --ui_event_filters=-info --noshow_progress //bench:ops //bench:nn //bench:conv)
    base_bin=$(cd "$base_tree" && "$bazel" "${startup[@]+"${startup[@]}"}" info \
        "${build[@]+"${build[@]}"}" bazel-bin 2>/dev/null)
fi

rm -rf "$results"
mkdir -p "$results"
printf '{"suite":"run","date":"%s","quick":%s,"threads":%s,"loadavg":"%s","commit":"%s"}\n' \
    "$(date -u +%Y-%m-%d)" "$quick" "$threads" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >"$results/run.jsonl"

status=0
run() { # run NAME COMMAND...: JSON lines into results/NAME.jsonl
    local name=$1
    shift
    stage "$name"
    "$@" >"$results/$name.jsonl" || { echo "bench: $name failed" >&2; status=1; }
}
# With a baseline, its runs alternate with this tree's, into results/baseline/
# (which the peers' tables do not read).
if [[ -n $base_bin ]]; then
    mkdir -p "$results/baseline"
    git -C "$base_tree" rev-parse --short HEAD >"$results/baseline/REVISION"
    run baseline/kiln_ops "$base_bin/bench/ops" "${args[@]+"${args[@]}"}"
fi
run kiln_ops "$bin/bench/ops" "${args[@]+"${args[@]}"}"
if [[ -n $base_bin ]]; then
    run baseline/kiln_nn "$base_bin/bench/nn" "${args[@]+"${args[@]}"}"
fi
run kiln_nn "$bin/bench/nn" "${args[@]+"${args[@]}"}"
run kiln_compile "$bin/bench/compile_cost" "${args[@]+"${args[@]}"}"
# The embedding lookup and its weight gradient against the one-hot matmul
# they were (text, beside RESULTS.md, with its own load average).
stage "embedding"
{ echo "measured $(date -u +%F)"; echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"; "$bin/bench/embedding"; } \
    >bench/results_embedding.txt || echo "bench/embedding failed" >&2
# A GPT-2 training step at two sizes (text beside RESULTS.md; --quick: the
# small one only, its 124M-parameter step costs minutes of compiling cold).
stage "gpt2"
gpt2_args=()
[[ $quick == true ]] && gpt2_args=(--small)
{ echo "measured $(date -u +%F)"; "$bin/bench/gpt2" "${gpt2_args[@]+"${gpt2_args[@]}"}"; } \
    >bench/results_gpt2.txt || echo "bench/gpt2 failed" >&2
# Sizes read at run time against literals (text beside RESULTS.md).
stage "dynamic"
{ echo "measured $(date -u +%F)"; "$bin/bench/dynamic"; } >bench/results_dynamic.txt ||
    echo "bench/dynamic failed" >&2
# What kiln costs beside its kernels (text beside RESULTS.md): recording an
# op, a graph-cache hit, 1000 small kernels cold, a fresh 64 MB output.
stage "overhead"
{ echo "measured $(date -u +%F)"; echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"; "$bin/bench/overhead"; } \
    >bench/results_overhead.txt || echo "bench/overhead failed" >&2
# A convolution layer alone (text beside RESULTS.md), three rounds, each
# with the baseline's build first where there is one.
stage "conv"
{
    echo "measured $(date -u +%F)"
    echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
    for _ in 1 2 3; do
        [[ -n $base_bin ]] && "$base_bin/bench/conv" | sed "s/^/$baseline: /"
        "$bin/bench/conv" | sed "s/^/this tree: /"
    done
} >bench/results_conv.txt || echo "bench/conv failed" >&2
# The host's share of a replayed step on the CUDA device, on the stand-in
# driver (no GPU here; its kernels take no time), with and without graphs.
stage "cuda_host"
{
    echo "measured $(date -u +%F)"
    echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
    for _ in 1 2 3; do
        KILN_CUDA_DRIVER="$bin/tests/libfake_cuda.so" FAKE_CUDA_KERNELS=1 KILN_CUDA_MATMUL=kernel \
            "$bin/bench/cuda_host" --layers 12 --steps 30
    done
} >bench/results_cuda_host.txt || echo "bench/cuda_host failed" >&2
# A Fashion-MNIST CNN epoch, kiln against PyTorch eager run alternately, three
# rounds (text beside RESULTS.md, with the load average at its start and end;
# --quick: the first 100 batches of the epoch's 468).
stage "cnn epoch"
cnn_args=()
[[ $quick == true ]] && cnn_args=(--batches 100)
"$venv/bin/python" bench/cnn_epoch.py "$bin/bench/cnn_epoch" --rounds 3 \
    "${cnn_args[@]+"${cnn_args[@]}"}" >bench/results_cnn.txt || echo "bench/cnn_epoch failed" >&2
# The peers get their best: as many threads as kiln, and a current NumPy or
# PyTorch with its bundled OpenBLAS is slowed by these two settings.
peer_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads"
    OPENBLAS_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads")
py="$venv/bin/python"
run numpy "${peer_env[@]}" "$py" bench/peers/numpy_peer.py $(budget 30) "${args[@]+"${args[@]}"}"
run torch "${peer_env[@]}" "$py" bench/peers/torch_peer.py $(budget 30) "${args[@]+"${args[@]}"}"
run torch_compile "${peer_env[@]}" "$py" bench/peers/torch_peer.py --compile $(budget 75) \
    "${args[@]+"${args[@]}"}"
run tinygrad "${peer_env[@]}" "$py" bench/peers/tinygrad_peer.py $(budget 45) \
    "${args[@]+"${args[@]}"}"

stage "report"
"$py" bench/report.py "$results" bench/RESULTS.md bench/results.png
stage "done: bench/RESULTS.md, bench/results.png"
exit "$status"
