#!/bin/bash
# cuda_check_test.sh — every kernel the op tests generate must compile for
# CUDA: runs the op test binaries with KILN_CHECK_CUDA=1, which renders every
# scheduled program to CUDA C and compiles it with NVRTC for sm_90 (any error
# or warning fails the sync, and so the test). Without NVRTC it says so and
# passes, having checked nothing (a machine without the toolkit); with NVRTC
# installed, checking nothing fails, so that the check cannot go quiet.
set -u
cuda="${KILN_CUDA_PATH:-/usr/local/cuda}"
has_nvrtc() { compgen -G "$1/lib64/libnvrtc.so*" >/dev/null; }
if ! has_nvrtc "$cuda" && ! /sbin/ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
    if has_nvrtc /usr/local/cuda; then
        echo "cuda_check_test: NVRTC is installed in /usr/local/cuda, but KILN_CUDA_PATH=$cuda has none:"
        echo "cuda_check_test: NOTHING WAS CHECKED"
        echo "[====] Synthesis: Tested: 1 | Passing: 0 | Failing: 1 | Crashing: 0"
        exit 1
    fi
    echo "cuda_check_test: NVRTC NOT FOUND in $cuda/lib64 nor on the library path:"
    echo "cuda_check_test: NOTHING WAS CHECKED (install the CUDA toolkit or set KILN_CUDA_PATH)"
    echo "[====] Synthesis: Tested: 0 | Passing: 0 | Failing: 0 | Crashing: 0"
    exit 0
fi
export KILN_CHECK_CUDA=1
status=0
tested=0 passing=0 failing=0
ms() { echo $(($(date +%s%N) / 1000000)); }
start=$(ms)
for t in "$@"; do
    t0=$(ms)
    if ! "$t" >"$TEST_TMPDIR/out" 2>&1; then
        status=1
        echo "cuda_check_test: $t FAILED:"
        cat "$TEST_TMPDIR/out"
    fi
    # the wrapped binaries' cases add up to one summary, which kiln.sh counts
    synth=$(grep -a 'Synthesis: Tested:' "$TEST_TMPDIR/out" | tail -n 1 | sed 's/\x1b\[[0-9;]*m//g')
    if [[ $synth =~ Tested:\ *([0-9]+)\ *\|\ *Passing:\ *([0-9]+)\ *\|\ *Failing:\ *([0-9]+) ]]; then
        tested=$((tested + BASH_REMATCH[1]))
        passing=$((passing + BASH_REMATCH[2]))
        failing=$((failing + BASH_REMATCH[1] - BASH_REMATCH[2]))
    else
        tested=$((tested + 1))
        failing=$((failing + 1))
        status=1
    fi
    echo "cuda_check_test: $(basename "$t") $(($(ms) - t0)) ms"
done
echo "cuda_check_test: total $(($(ms) - start)) ms"
if ((tested == 0)); then
    echo "cuda_check_test: NVRTC is installed, but no test case ran: NOTHING WAS CHECKED"
    tested=1 failing=1 status=1
fi
echo "[====] Synthesis: Tested: $tested | Passing: $passing | Failing: $failing | Crashing: 0"
exit $status
