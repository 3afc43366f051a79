#!/usr/bin/env bash
# run.sh — builds the fuzz targets (tests/fuzz/build.sh) and runs each for
# SECONDS on its seed corpus tests/fuzz/corpus/<name>/, after running every
# regression input of tests/fuzz/crashers/<name>/ once. A crash, leak,
# timeout (10 s for one input) or memory blow-up (2 GB) fails the target,
# and the input that did it is written to tests/fuzz/crashers/<name>/, to be
# kept once the bug is fixed. New inputs the fuzzer finds go to a scratch
# corpus, never into the committed seeds.
#
#   tests/fuzz/run.sh [SECONDS [BUILD_DIR]]    default 60 s per target
#
# The last line counts one check per target as Criterion does:
# "Synthesis: Tested: N | Passing: P | Failing: F | Crashing: 0".
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
readonly SECONDS_EACH=${1:-60}
readonly OUT=${2:-${TMPDIR:-/tmp}/kiln-fuzz-$(pwd | md5sum | cut -c1-12)}
[[ $SECONDS_EACH =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: SECONDS must be a positive integer" >&2; exit 2; }

targets=()
for src in tests/fuzz/*.c; do targets+=("$(basename "$src" .c)"); done
if ! tests/fuzz/build.sh "$OUT"; then
    echo "Synthesis: Tested: ${#targets[@]} | Passing: 0 | Failing: ${#targets[@]} | Crashing: 0"
    exit 1
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kiln-fuzz-corpus.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# Leaks fail an input as crashes do; a report names the whole stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# FUZZ_RUNS and FUZZ_SEED make a run repeatable (the test command's: the same
# inputs on every machine, so that CI passes or fails on the code, not on luck);
# without them a run explores afresh for SECONDS per target.
limits=(-max_total_time="$SECONDS_EACH")
[[ -n ${FUZZ_RUNS:-} ]] && limits+=(-runs="$FUZZ_RUNS")
[[ -n ${FUZZ_SEED:-} ]] && limits+=(-seed="$FUZZ_SEED")

passed=0 failed=0
for t in "${targets[@]}"; do
    bin="$OUT/bin/$t" log="$scratch/$t.log" ok=true start=$SECONDS
    crashers="tests/fuzz/crashers/$t"
    mkdir -p "$crashers" "$scratch/$t"
    regressions=("$crashers"/*)
    [[ -e ${regressions[0]} ]] || regressions=()
    if ((${#regressions[@]})) && ! "$bin" -timeout=10 -rss_limit_mb=2048 "${regressions[@]}" \
        >"$log" 2>&1; then
        ok=false
        echo "run.sh: $t fails on a regression input of $crashers:" >&2
        tail -n 40 "$log" >&2
    fi
    if $ok && ! "$bin" "${limits[@]}" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$crashers/" -print_final_stats=1 "$scratch/$t" "tests/fuzz/corpus/$t" \
        >"$log" 2>&1; then
        ok=false
        echo "run.sh: $t found a failure; the input is in $crashers/:" >&2
        tail -n 60 "$log" >&2
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if $ok; then
        passed=$((passed + 1))
        printf '  ok      %-14s %ss, %s inputs, %d regression inputs\n' "$t" \
            $((SECONDS - start)) "${runs:-?}" ${#regressions[@]}
    else
        failed=$((failed + 1))
        printf '  FAILED  %-14s\n' "$t"
    fi
done
echo "Synthesis: Tested: ${#targets[@]} | Passing: $passed | Failing: $failed | Crashing: 0"
((failed == 0))
