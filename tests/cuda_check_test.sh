#!/bin/bash
# cuda_check_test.sh — every kernel the op tests generate must compile for
# CUDA: runs the op test binaries with KILN_CHECK_CUDA=1, which renders every
# scheduled program to CUDA C and compiles it with NVRTC for sm_90 (any error
# or warning fails the sync, and so the test). Without NVRTC it says so and
# passes, having checked nothing.
set -u
cuda="${KILN_CUDA_PATH:-/usr/local/cuda}"
if ! compgen -G "$cuda/lib64/libnvrtc.so*" >/dev/null && ! /sbin/ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
    echo "cuda_check_test: NVRTC NOT FOUND in $cuda/lib64 nor on the library path:"
    echo "cuda_check_test: NOTHING WAS CHECKED (install the CUDA toolkit or set KILN_CUDA_PATH)"
    exit 0
fi
export KILN_CHECK_CUDA=1
status=0
ms() { echo $(($(date +%s%N) / 1000000)); }
start=$(ms)
for t in "$@"; do
    t0=$(ms)
    if ! "$t" >"$TEST_TMPDIR/out" 2>&1; then
        status=1
        echo "cuda_check_test: $t FAILED:"
        cat "$TEST_TMPDIR/out"
    fi
    echo "cuda_check_test: $(basename "$t") $(($(ms) - t0)) ms"
done
echo "cuda_check_test: total $(($(ms) - start)) ms"
exit $status
