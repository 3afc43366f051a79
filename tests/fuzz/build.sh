#!/usr/bin/env bash
# build.sh — builds the fuzz targets of tests/fuzz/ (one <name>.c each, with
# LLVMFuzzerTestOneInput) with clang's libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer. Bazel's toolchain is gcc, which has no
# libFuzzer, so kiln's sources are compiled here, once, into objects under
# the build directory, and only what changed is compiled again.
#
#   tests/fuzz/build.sh [BUILD_DIR]     default: $TMPDIR/kiln-fuzz-<checkout> (or /tmp)
#
# The targets land in BUILD_DIR/bin/<name>.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# One build directory per checkout: two trees never share objects.
readonly OUT=${1:-${TMPDIR:-/tmp}/kiln-fuzz-$(pwd | md5sum | cut -c1-12)}
readonly CC=${FUZZ_CC:-clang}
command -v "$CC" >/dev/null 2>&1 || { echo "build.sh: $CC not found" >&2; exit 1; }

# The folders behind //api (bazel query 'kind("source file", deps(//api))'),
# less what only other targets use: the MPI shim (its own shared library) and
# the CUDA self-test program.
readonly FOLDERS=(api graph autograd lower jit jit/cpu jit/ref jit/cuda jit/cstyle cache dist)
readonly EXCLUDE=(dist/mpi_shim.c jit/cuda/selftest.c)
# Everything links kiln's objects statically, so visibility is moot here.
readonly CFLAGS=(-std=c11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
    -I. -Iapi -isystem /usr/include/llvm-c-14 -isystem /usr/include/llvm-14)
# kiln.pc's Libs.private, with clang's OpenMP runtime.
readonly LIBS=(-lxxhash -ljson-c -lm -ldl -lpthread -fopenmp)

mkdir -p "$OUT/obj" "$OUT/bin"

sources=()
for dir in "${FOLDERS[@]}"; do
    for src in "$dir"/*.c; do
        for ex in "${EXCLUDE[@]}"; do [[ $src == "$ex" ]] && continue 2; done
        sources+=("$src")
    done
done

# An object is rebuilt when the digest of its source, every header of the
# tree and the flags differs from the one it was built with (contents, not
# times: a checkout of older files, or another tree, never passes for new).
headers=$(find api graph autograd lower jit cache dist -name '*.h' -print0 | sort -z |
    xargs -0 cat | md5sum | cut -c1-32)
objects=() pids=() failed=0
jobs=$(nproc 2>/dev/null || echo 2)
for src in "${sources[@]}"; do
    obj="$OUT/obj/${src//\//_}.o"
    objects+=("$obj")
    key=$( (cat "$src"; echo "$headers ${CFLAGS[*]}") | md5sum | cut -c1-32)
    if [[ -f $obj && -f $obj.key && $(<"$obj.key") == "$key" ]]; then
        continue
    fi
    rm -f "$obj.key"
    extra=()
    # What generated kernels call at run time is built with OpenMP, as in
    # jit/cpu/BUILD.
    [[ $src == jit/cpu/llvm_runtime.c ]] && extra=(-fopenmp)
    { "$CC" "${CFLAGS[@]}" "${extra[@]}" -c "$src" -o "$obj" && echo "$key" >"$obj.key"; } &
    pids+=($!)
    if ((${#pids[@]} >= jobs)); then
        wait "${pids[0]}" || failed=1
        pids=("${pids[@]:1}")
    fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
((failed == 0)) || { echo "build.sh: kiln's sources did not compile" >&2; exit 1; }

for target in tests/fuzz/*.c; do
    name=$(basename "$target" .c)
    "$CC" "${CFLAGS[@]}" -fsanitize=fuzzer "$target" "${objects[@]}" "${LIBS[@]}" \
        -o "$OUT/bin/$name"
done
# The seed maker is an ordinary program over the same objects.
"$CC" "${CFLAGS[@]}" tests/fuzz/seeds/make_seeds.c "${objects[@]}" "${LIBS[@]}" \
    -o "$OUT/bin/make_seeds"
echo "build.sh: built $(ls tests/fuzz/*.c | wc -l) fuzz targets in $OUT/bin" >&2
