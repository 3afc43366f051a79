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
# It runs what bench/gpu_bundle.sh builds (.gpu/: binaries, their
# libraries, the data), since a GPU machine may have no Bazel, Criterion or
# network. Where Bazel is installed it builds the bundle first when there is
# none or it was built from other build inputs (C sources, headers, BUILD
# files) than the tree holds; without Bazel it runs the bundle that came
# with the tree, saying in the table when that was built from another.
#
# The whole run, the build included, has a budget of KILN_GPU_CHECK_BUDGET
# seconds (default 480): each step's time limit is cut to what is left of
# it, and a step that would start after it is spent is skipped, by name in
# the table, rather than making the run overrun.
#
# KILN_GPU_CHECK_DEVICE=cpu runs the same steps on the CPU (a check of this
# script where there is no GPU); KILN_GPU_CHECK_QUICK=1 runs two suites and
# quick benchmarks.
#
# Usage: bench/gpu_check.sh [DIR]     (exit status 1 when a check failed)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly START=$SECONDS
readonly ROOT=$PWD B=$PWD/.gpu DIR=${1:-$PWD/bench}
readonly DEV=${KILN_GPU_CHECK_DEVICE:-cuda} QUICK=${KILN_GPU_CHECK_QUICK:-0}
readonly BUDGET=${KILN_GPU_CHECK_BUDGET:-480}
# kept back from the steps for the report at the end
readonly RESERVE=10
# no step starts with less than this left: it could only be cut short
readonly MIN_STEP=15
mkdir -p "$DIR"
readonly DETAILS=$DIR/gpu_details.txt WORK=$(mktemp -d)
: >"$DETAILS"
JOBS=$(nproc 2>/dev/null || echo 4)
STATUS=0

# the terminal, whatever a step's output is redirected to
exec 3>&2
log() { echo "== $* ($((SECONDS - START)) s)" | tee -a "$DETAILS" >&3; }
check() { # check NAME VERDICT DETAIL; only FAILED fails the run
    printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$WORK/checks"
    [[ $2 != FAILED ]] || STATUS=1
}
# limit PLANNED: the time limit of a step planned to take at most PLANNED
# seconds, cut to what the budget has left; fails when less than MIN_STEP
# is left (the caller skips the step).
limit() {
    local left=$((BUDGET - RESERVE - (SECONDS - START)))
    ((left >= MIN_STEP)) || return 1
    echo $((left < $1 ? left : $1))
}
skip() { # skip NAME
    check "$1" skipped "not run: the $BUDGET s budget was spent ($((SECONDS - START)) s gone)"
}
# cut RC LIMIT PLANNED: whether a step's exit status RC is its timeout
# killing it at a LIMIT the budget had cut below its PLANNED one (the time
# ran out; the step did not fail).
cut() { (($1 == 124 && $2 < $3)); }

# ---- the bundle ----
# Whether the bundle was built from other build inputs than the tree holds
# (by their contents, which a copy to the GPU machine keeps and its times
# need not), or has no stamp (an older gpu_bundle.sh made it).
stale() { [[ $(head -n 1 "$B/built" 2>/dev/null) != "$(bench/gpu_bundle.sh --hash)" ]]; }
# The build counts against the budget but is never cut short: a bundle is
# worth keeping for the next run, even when this one has no time left for
# the steps after it.
log "bundle"
if [[ ! -x $B/bin/ops ]] || stale; then
    if command -v bazel >/dev/null; then
        why=$([[ -x $B/bin/ops ]] && echo "the last was of another tree" || echo "none yet")
        log "building the bundle ($why)"
        if bench/gpu_bundle.sh >>"$DETAILS" 2>&1; then
            check "build (bench/gpu_bundle.sh)" ok "bundle built ($why) in $((SECONDS - START)) s"
        else
            check "build (bench/gpu_bundle.sh)" FAILED "see $DETAILS"
        fi
    elif [[ -x $B/bin/ops ]]; then
        check "bundle" stale "not built from this tree, and no Bazel here to rebuild it: \
$(sed -n 2p "$B/built" 2>/dev/null | grep . || echo 'it has no stamp')"
    fi
else
    check "bundle" ok "built from this tree: $(sed -n 2p "$B/built")"
fi
if [[ ! -x $B/bin/ops ]]; then
    echo "gpu_check: no bundle in $B and it could not be built here (see $DETAILS): run" \
        "bench/gpu_bundle.sh where Bazel is, and bring .gpu along" >&2
    rm -rf "$WORK"
    exit 2
fi
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export KILN_CACHE_DIR=$WORK/kernels KILN_TEST_DEVICES=ref,$DEV KILN_DEVICE=$DEV

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
passed=0 failed=0 ran=0 failing=() unrun=()
for t in "${SUITES[@]}"; do
    if ! lim=$(limit 150); then
        unrun+=("$t")
        continue
    fi
    out=$WORK/$t.log
    timeout "$lim" "$B/bin/$t" --jobs "$JOBS" >"$out" 2>&1
    rc=$?
    if cut $rc "$lim" 150; then
        unrun+=("$t(cut at $lim s)")
        echo "-- $t: stopped at $lim s, the end of the budget" >>"$DETAILS"
        continue
    fi
    ran=$((ran + 1))
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
((ran == 0)) || check "suites (ref, $DEV)" "$( ((failed == 0)) && echo ok || echo FAILED)" \
    "$ran suites: $passed passed, $failed failed${failing[*]:+: ${failing[*]}}"
((${#unrun[@]} == 0)) ||
    check "suites not run" skipped "the $BUDGET s budget was spent: ${unrun[*]}"

# step NAME PLANNED COMMAND...: runs COMMAND under the time limit the budget
# leaves it (rc, and lim, for the caller), or skips it by name; false when it
# did not run to its end.
step() {
    local name=$1 planned=$2
    shift 2
    rc=0
    if ! lim=$(limit "$planned"); then
        skip "$name"
        return 1
    fi
    log "$name"
    timeout "$lim" "$@"
    rc=$?
    if cut $rc "$lim" "$planned"; then
        check "$name" skipped "stopped at $lim s, the end of the $BUDGET s budget"
        return 1
    fi
}

graphs=$( ((QUICK)) && echo 20 || echo 200)
fuzz="random graphs, lazy and eager on $DEV"
if step "$fuzz" 120 env KILN_FUZZ_DEVICE="$DEV" KILN_FUZZ_GRAPHS=$graphs "$B/bin/fusion_test" \
    --filter='fusion/random_graphs*' >"$WORK/fuzz.log" 2>&1; then
    cat "$WORK/fuzz.log" >>"$DETAILS"
    if ((rc == 0)) && grep -aq 'Passing: 1' "$WORK/fuzz.log"; then
        check "$fuzz" ok "$graphs graphs agree with the reference"
    else
        check "$fuzz" FAILED "$(grep -a -m1 'nmse\|skip' "$WORK/fuzz.log" | cut -c1-160) (exit $rc)"
    fi
fi

mlp=()
((QUICK)) && mlp=(--limit 4096)
if step "Fashion-MNIST MLP, 1 epoch" 180 "$B/bin/fashion_mnist" mlp --epochs 1 \
    --data "$B/data" "${mlp[@]}" >"$WORK/mlp.log" 2>&1; then
    cat "$WORK/mlp.log" >>"$DETAILS"
    acc=$(grep -a -o 'test accuracy [0-9.]*%' "$WORK/mlp.log" | tail -n 1)
    check "Fashion-MNIST MLP, 1 epoch" "$( ((rc == 0)) && echo ok || echo FAILED)" \
        "${acc:-no accuracy printed} (exit $rc); $(grep -a -m1 -o '[0-9.]* s per epoch' "$WORK/mlp.log")"
fi

# ---- timings, each program alone ----
bench_flags=(--device "$DEV")
((QUICK)) && bench_flags+=(--quick)
step "bench/ops on $DEV" 150 "$B/bin/ops" "${bench_flags[@]}" >"$WORK/ops.jsonl" \
    2>>"$DETAILS" && ((rc != 0)) && check "bench/ops on $DEV" FAILED "exit $rc (see $DETAILS)"
step "bench/nn on $DEV" 150 "$B/bin/nn" "${bench_flags[@]}" >"$WORK/nn.jsonl" \
    2>>"$DETAILS" && ((rc != 0)) && check "bench/nn on $DEV" FAILED "exit $rc (see $DETAILS)"
if [[ $DEV == cuda ]]; then
    quick=()
    ((QUICK)) && quick=(--quick)
    step "matmul against cuBLAS" 90 "$B/bin/gpu_blas" "${quick[@]}" >"$WORK/blas.jsonl" \
        2>>"$DETAILS" && ((rc != 0)) && check "matmul against cuBLAS" FAILED "exit $rc (see $DETAILS)"
    step "generated matmul against cuBLAS" 90 env KILN_CUDA_MATMUL=kernel "$B/bin/gpu_blas" \
        --quick >>"$WORK/blas.jsonl" 2>>"$DETAILS" && ((rc != 0)) &&
        check "generated matmul against cuBLAS" FAILED "exit $rc (see $DETAILS)"
    host="12-layer MLP step replayed (record, sync incl. the GPU's time)"
    if step "$host" 60 "$B/bin/cuda_host" --layers 12 --steps 30 >"$WORK/host.txt" \
        2>>"$DETAILS"; then
        cat "$WORK/host.txt" >>"$DETAILS"
        check "$host" "$( ((rc == 0)) && echo ok || echo FAILED)" \
            "$(sed 's/cuda_host layers=12 //' "$WORK/host.txt" | tr '\n' ';')"
    fi
fi
peer=()
if [[ $DEV == cuda ]] && python3 -c 'import torch, scipy; assert torch.cuda.is_available()' \
    2>/dev/null; then
    step "PyTorch on the GPU" 150 bash -c 'cd bench/peers && exec python3 torch_peer.py \
        --device cuda --quick' >"$WORK/torch.jsonl" 2>>"$DETAILS"
    peer+=(--torch "$WORK/torch.jsonl")
    # torch.compile takes what is left, if that is worth its compiles
    if lim=$(limit "$BUDGET") && ((lim > 60)); then
        step "torch.compile on the GPU" "$lim" bash -c 'cd bench/peers && exec python3 \
            torch_peer.py --device cuda --compile --quick --budget "$1"' _ $((lim - 30)) \
            >"$WORK/compile.jsonl" 2>>"$DETAILS"
        peer+=(--compile "$WORK/compile.jsonl")
    else
        skip "torch.compile on the GPU"
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
