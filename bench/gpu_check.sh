#!/usr/bin/env bash
# bench/gpu_check.sh — kiln on a machine with an NVIDIA GPU, in one run of
# under 8 minutes: the op, gradient, optimiser, random-number and nn suites
# on KILN_CUDA against the float64 reference evaluator, the differential
# fuzzer (random graphs, lazy and eager on the GPU against the reference),
# one epoch of the Fashion-MNIST MLP, then timings: elementwise, softmax,
# layer-norm, sum and matmuls (bench/ops) and the convolution, MLP step and
# transformer block (bench/nn), lazy against eager, rated against the
# device's copy bandwidth and f32 peak measured in the same run; matmul
# against cuBLAS (bench/gpu_blas); and PyTorch on the same workloads where
# it is installed. A short table comes last; the details go to
# DIR/gpu_details.txt.
#
# It runs the bundle bench/gpu_bundle.sh built (.gpu/: binaries, their
# libraries, the data), since a GPU machine may have no Bazel, Criterion or
# network. KILN_GPU_CHECK_DEVICE=cpu runs the same steps on the CPU (a check
# of this script where there is no GPU); KILN_GPU_CHECK_QUICK=1 runs two
# suites and quick benchmarks.
#
# Usage: bench/gpu_check.sh [DIR]     (exit status 1 when a check failed)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly ROOT=$PWD B=$PWD/.gpu DIR=${1:-$PWD/bench}
readonly DEV=${KILN_GPU_CHECK_DEVICE:-cuda} QUICK=${KILN_GPU_CHECK_QUICK:-0}
mkdir -p "$DIR"
readonly DETAILS=$DIR/gpu_details.txt WORK=$(mktemp -d)
: >"$DETAILS"
if [[ ! -x $B/bin/ops ]]; then
    echo "gpu_check: no bundle in $B: run bench/gpu_bundle.sh first, and bring .gpu along" >&2
    exit 2
fi
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KILN_CACHE_DIR=$WORK/kernels KILN_TEST_DEVICES=ref,$DEV KILN_DEVICE=$DEV
readonly START=$SECONDS
JOBS=$(nproc 2>/dev/null || echo 4)
STATUS=0

log() { echo "== $* ($((SECONDS - START)) s)" | tee -a "$DETAILS" >&2; }
check() { # check NAME VERDICT DETAIL
    printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$WORK/checks"
    [[ $2 == ok ]] || STATUS=1
}

log "device"
{ command -v nvidia-smi >/dev/null && nvidia-smi -L; } >>"$DETAILS" 2>&1 || true
uname -a >>"$DETAILS"

# ---- correctness: the suites, each test binary with a time limit ----
log "suites on ref and $DEV"
SUITES=(ops_binary_test ops_cast_test ops_conv_test ops_create_test ops_einsum_test
    ops_index_test ops_loss_test ops_math_test ops_matmul_test ops_reduce_test ops_scan_test
    ops_select_test ops_softmax_rows_test ops_sort_test ops_sum_accuracy_test ops_unary_test
    ops_view_test grad_test optim_test rand_test nn_test transformer_test assign_test
    attention_test)
((QUICK)) && SUITES=(ops_unary_test grad_test)
passed=0 failed=0 failing=()
for t in "${SUITES[@]}"; do
    out=$WORK/$t.log
    timeout 150 "$B/bin/$t" --jobs "$JOBS" >"$out" 2>&1
    rc=$?
    synth=$(grep -a 'Synthesis: Tested:' "$out" | tail -n 1)
    if [[ $synth =~ Passing:\ *([0-9]+)\ *\|\ *Failing:\ *([0-9]+) ]]; then
        passed=$((passed + BASH_REMATCH[1])) failed=$((failed + BASH_REMATCH[2]))
        ((BASH_REMATCH[2] > 0)) && failing+=("$t")
    else
        failed=$((failed + 1)) failing+=("$t(rc $rc)")
    fi
    { echo "-- $t: ${synth:-no summary (exit $rc)}"; grep -a -A3 '\[FAIL\]\|Assertion Failed' "$out" | head -n 40; } >>"$DETAILS"
    # a GPU executor that did not open is not a pass
    if grep -aq 'kiln-test: skipped without a GPU' "$out" && [[ $DEV == cuda ]]; then
        failing+=("$t(no GPU context)") failed=$((failed + 1))
        grep -a -m1 'kiln-test: skipped without a GPU' "$out" >>"$DETAILS"
    fi
done
check "suites (ref, $DEV)" "$( ((failed == 0)) && echo ok || echo FAILED)" \
    "$passed passed, $failed failed${failing[*]:+: ${failing[*]}}"

log "differential fuzzer"
graphs=$( ((QUICK)) && echo 20 || echo 200)
KILN_FUZZ_DEVICE=$DEV KILN_FUZZ_GRAPHS=$graphs timeout 120 "$B/bin/fusion_test" \
    --filter='fusion/random_graphs*' >"$WORK/fuzz.log" 2>&1
rc=$?
cat "$WORK/fuzz.log" >>"$DETAILS"
if ((rc == 0)) && grep -aq 'Passing: 1' "$WORK/fuzz.log"; then
    check "random graphs, lazy and eager on $DEV" ok "$graphs graphs agree with the reference"
else
    check "random graphs, lazy and eager on $DEV" FAILED \
        "$(grep -a -m1 'nmse\|skip' "$WORK/fuzz.log" | cut -c1-160) (exit $rc)"
fi

log "Fashion-MNIST MLP, one epoch"
limit=()
((QUICK)) && limit=(--limit 4096)
timeout 180 "$B/bin/fashion_mnist" mlp --epochs 1 --data "$B/data" "${limit[@]}" \
    >"$WORK/mlp.log" 2>&1
rc=$?
cat "$WORK/mlp.log" >>"$DETAILS"
acc=$(grep -a -o 'test accuracy [0-9.]*%' "$WORK/mlp.log" | tail -n 1)
check "Fashion-MNIST MLP, 1 epoch" "$( ((rc == 0)) && echo ok || echo FAILED)" \
    "${acc:-no accuracy printed} (exit $rc); $(grep -a -m1 -o '[0-9.]* s per epoch' "$WORK/mlp.log")"

# ---- timings, each program alone ----
bench_flags=(--device "$DEV")
((QUICK)) && bench_flags+=(--quick)
log "bench/ops on $DEV"
timeout 150 "$B/bin/ops" "${bench_flags[@]}" >"$WORK/ops.jsonl" 2>>"$DETAILS" ||
    check "bench/ops" FAILED "exit $? (see $DETAILS)"
log "bench/nn on $DEV"
timeout 150 "$B/bin/nn" "${bench_flags[@]}" >"$WORK/nn.jsonl" 2>>"$DETAILS" ||
    check "bench/nn" FAILED "exit $? (see $DETAILS)"
if [[ $DEV == cuda ]]; then
    log "matmul against cuBLAS"
    quick=()
    ((QUICK)) && quick=(--quick)
    timeout 90 "$B/bin/gpu_blas" "${quick[@]}" >"$WORK/blas.jsonl" 2>>"$DETAILS"
    rc=$?
    ((rc == 0)) || check "matmul against cuBLAS" FAILED "exit $rc (see $DETAILS)"
    log "kiln's generated matmul against cuBLAS"
    KILN_CUDA_MATMUL=kernel timeout 90 "$B/bin/gpu_blas" --quick >>"$WORK/blas.jsonl" \
        2>>"$DETAILS" || check "generated matmul against cuBLAS" FAILED "exit $? (see $DETAILS)"
fi
if [[ $DEV == cuda ]]; then
    log "a replayed training step's host time"
    timeout 60 "$B/bin/cuda_host" --layers 12 --steps 30 >"$WORK/host.txt" 2>>"$DETAILS"
    rc=$?
    cat "$WORK/host.txt" >>"$DETAILS"
    check "12-layer MLP step replayed (record, sync incl. the GPU's time)" \
        "$( ((rc == 0)) && echo ok || echo FAILED)" \
        "$(sed 's/cuda_host layers=12 //' "$WORK/host.txt" | tr '\n' ';')"
fi
peer=()
if [[ $DEV == cuda ]] && python3 -c 'import torch, scipy; assert torch.cuda.is_available()' \
    2>/dev/null; then
    log "PyTorch on the GPU"
    (cd bench/peers && timeout 150 python3 torch_peer.py --device cuda --quick) \
        >"$WORK/torch.jsonl" 2>>"$DETAILS"
    peer+=(--torch "$WORK/torch.jsonl")
    left=$((420 - (SECONDS - START)))
    if ((left > 60)); then
        log "torch.compile on the GPU (at most $left s)"
        (cd bench/peers && timeout "$left" python3 torch_peer.py --device cuda --compile \
            --quick --budget $((left - 30))) >"$WORK/compile.jsonl" 2>>"$DETAILS"
        peer+=(--compile "$WORK/compile.jsonl")
    fi
else
    echo "no PyTorch with CUDA here: no peer column" >>"$DETAILS"
fi
blas=()
[[ -s $WORK/blas.jsonl ]] && blas=(--blas "$WORK/blas.jsonl")

cat "$WORK"/*.jsonl >>"$DETAILS" 2>/dev/null
log "done"
python3 "$ROOT/bench/gpu_report.py" "$WORK/checks" "$WORK/ops.jsonl" "$WORK/nn.jsonl" \
    "${peer[@]}" "${blas[@]}" | tee -a "$DETAILS"
echo "gpu_check: $((SECONDS - START)) s; details in $DETAILS"
rm -rf "$WORK"
exit $STATUS
