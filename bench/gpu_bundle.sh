#!/usr/bin/env bash
# bench/gpu_bundle.sh — builds, here, what bench/gpu_check.sh runs on a
# machine with a GPU, into .gpu/ (ignored by git): the op, gradient, fusion,
# optimiser and random-number test binaries, the Fashion-MNIST example, the
# GPU benchmarks (bench/ops and bench/nn on --device cuda, bench/gpu_blas),
# the shared libraries they need beyond glibc (Criterion's among them), and
# the Fashion-MNIST data. A GPU machine may have no Bazel, no Criterion and
# no network: the bundle (about 50 MB, ignored by git) is copied there with
# the tree and needs only glibc; no C compiler (the suites run on ref and
# cuda alone); NVRTC and the driver are found there at run time, as
# everywhere.
#
# bench/gpu_check.sh runs it itself where Bazel is installed and the bundle
# is missing or was built from another tree: .gpu/built holds the hash of
# the build inputs it was built from (what `--hash` prints for the tree now)
# and, on its second line, when and from which commit.
#
# Usage: bench/gpu_bundle.sh [--hash]   (then run bench/gpu_check.sh there with .gpu)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The build inputs' contents, hashed in a fixed order.
tree_hash() {
    find . \( -path ./.git -o -path './bazel-*' -o -path ./.gpu -o -path ./bench/peers \) -prune \
        -o -type f \( -name '*.[ch]' -o -name BUILD -o -name '*.bzl' -o -name WORKSPACE \
        -o -name .bazelrc \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum |
        cut -c1-32
}
if [[ ${1:-} == --hash ]]; then
    tree_hash
    exit 0
fi
hash=$(tree_hash)

TESTS=(ops_binary_test ops_cast_test ops_conv_test ops_create_test ops_einsum_test
    ops_index_test ops_loss_test ops_math_test ops_matmul_test ops_reduce_test ops_scan_test
    ops_select_test ops_softmax_rows_test ops_sort_test ops_sum_accuracy_test ops_unary_test
    ops_view_test grad_test fusion_test optim_test rand_test nn_test transformer_test
    assign_test attention_test)
BINS=(//examples:fashion_mnist //bench:ops //bench:nn //bench:gpu_blas //bench:cuda_host)

targets=("${BINS[@]}")
for t in "${TESTS[@]}"; do targets+=("//tests:$t"); done
bazel build "${targets[@]}"
bin=$(bazel info bazel-bin 2>/dev/null)

rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib .gpu/data
for t in "${TESTS[@]}"; do cp "$bin/tests/$t" .gpu/bin/; done
cp "$bin/examples/fashion_mnist" "$bin/bench/ops" "$bin/bench/nn" "$bin/bench/gpu_blas" \
    "$bin/bench/cuda_host" .gpu/bin/
chmod u+w .gpu/bin/*
strip --strip-all .gpu/bin/*

# Every library the binaries load that glibc and the compiler's runtime do not
# provide (a GPU machine has those, not Criterion's dependencies).
for f in .gpu/bin/*; do
    ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    case $(basename "$lib") in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libresolv.so* | \
        ld-linux* | libgcc_s.so* | libstdc++.so*) ;;
    *) cp -L "$lib" .gpu/lib/ ;;
    esac
done
cp /usr/share/datasets/fashion-mnist/*-ubyte.gz .gpu/data/
{
    echo "$hash"
    echo "built $(date -u '+%Y-%m-%d %H:%M UTC')$(git rev-parse --short HEAD 2>/dev/null |
        sed 's/^/ from /')$(git status --porcelain 2>/dev/null | grep -q . && echo ' (with changes)')"
} >.gpu/built
du -sh .gpu | sed 's/^/bench\/gpu_bundle.sh: .gpu holds /'
