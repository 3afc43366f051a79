#!/bin/bash
# fashion_mnist_dist.sh — examples/fashion_mnist trained data parallel over 2
# ranks (mpirun -np 2, --dist: each rank on half of every batch of 128, and
# of the last one of 52) follows the single-process run with the same global
# batch: every step's loss agrees to float tolerance, and neither run builds a
# program for a batch size it has seen before.
#
# Usage: fashion_mnist_dist.sh PATH/TO/fashion_mnist
# The last line is a Criterion-style synthesis, which kiln.sh counts.
set -u
bin=$1
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok      $1"; }
bad() {
    failed=$((failed + 1))
    echo "  FAILED  $1"
    [[ -n ${2:-} ]] && printf '          %s\n' "${2//$'\n'/$'\n'          }"
}
args=(mlp --limit 2100 --epochs 1 --batch 128 --print-loss)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Open MPI's plugins stay loaded, so that LeakSanitizer (the ASan build) can
# name them in tests/dist_lsan.supp.
export OMPI_MCA_mca_base_component_disable_dlclose=1

one=$("$bin" "${args[@]}" 2>&1) && ok "one process trains" || bad "one process trains" "$one"
two=$(mpirun --oversubscribe --bind-to none -np 2 "$bin" "${args[@]}" --dist 2>&1) &&
    ok "two ranks train (mpirun -np 2 ... --dist)" || bad "two ranks train (mpirun -np 2 ... --dist)" "$two"

for out in "$one" "$two"; do
    grep -q "steps of a size seen before: 0 programs built" <<<"$out" ||
        bad "every step of a batch size seen before replays its program" "$out"
done
grep -q "data parallel over 2 ranks" <<<"$two" || bad "the run is data parallel" "$two"

# Step by step: |a - b| <= 1e-4 (1 + |a|). Float sums in another order, and
# AdamW's normalisation of small gradients, keep the runs from agreeing bit
# for bit.
cmp=$(awk 'NR == FNR { if ($1 == "step") a[$2] = $4; next }
           $1 == "step" { n++; d = $4 - a[$2]; if (d < 0) d = -d
                          r = d / (1 + (a[$2] < 0 ? -a[$2] : a[$2])); if (r > worst) worst = r
                          if (!($2 in a) || r > 1e-4) bad++ }
           END { printf "%d steps, %d apart, worst relative difference %.2g\n", n, bad, worst
                 exit !(n > 0 && bad == 0) }' <(echo "$one") <(echo "$two")) &&
    ok "the loss curves agree: $cmp" || bad "the loss curves agree: $cmp" "$(paste <(grep '^step' <<<"$one") <(grep '^step' <<<"$two"))"

echo "Synthesis: Tested: $((passed + failed)) | Passing: $passed | Failing: $failed | Crashing: 0"
((failed == 0))
