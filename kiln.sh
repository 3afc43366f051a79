#!/usr/bin/env bash
# kiln.sh — the one entry point for building, running, testing and installing
# kiln.
#
#   ./kiln.sh demo [ARGS...]    the API tour (examples/demo.c), then an MLP and
#                               a CNN trained on Fashion-MNIST to their test
#                               accuracy targets (ARGS go to both trainings)
#   ./kiln.sh test              the whole check: the test suite in the normal
#                               build and under ASan+UBSan, the demo, an
#                               install smoke test, and 20000 inputs of each
#                               fuzz target from a fixed seed; the last line is
#                               "N passed, N failed" over every test case and check
#   ./kiln.sh asan              the test suite under ASan+UBSan only
#   ./kiln.sh fuzz [SECONDS]    the libFuzzer targets of tests/fuzz/ (clang,
#                               ASan+UBSan), each SECONDS (default 60) on its
#                               seeds after its regression inputs; a crash or
#                               leak is written to tests/fuzz/crashers/NAME/
#   ./kiln.sh install [PREFIX]  install kiln.h, libkiln.a, libkiln.so, kiln.pc,
#                               the CMake package (lib/cmake/kiln) and
#                               libkiln_mpi.so (what kiln_dist_init loads) under
#                               PREFIX (default /usr/local)
#   ./kiln.sh bench [--quick|--full] [--baseline REV] [STEPS]
#                               lazy against eager and kiln against NumPy,
#                               PyTorch, torch.compile and tinygrad on the
#                               workloads of bench/; rewrites bench/RESULTS.md;
#                               with --baseline, also kiln built at REV,
#                               alternately, workload by workload
#   ./kiln.sh bench-dist        kiln_all_reduce against MPI_Allreduce and memcpy
#                               from 4 KB to 256 MB over 2 ranks, and
#                               data-parallel steps at 1 and 2 ranks
#                               (bench/results_dist.txt)
#   ./kiln.sh mutate [--check] [NAME...]
#                               mutation testing: each mutant of tests/mutants/
#                               (all, or those named) applied alone to a scratch
#                               copy of the tree, built, and its tests run;
#                               prints killed/survived/stale per mutant, the
#                               kill ratio and the survivors (not run in CI);
#                               --check only checks that every snippet matches
#
# On Debian and Ubuntu, build dependencies that are missing are installed with
# apt-get first (through sudo when not run as root).
set -euo pipefail

# A relative install prefix is taken from where the script was called.
readonly CALLER_DIR=$PWD
cd "$(dirname "${BASH_SOURCE[0]}")"

# Open MPI (libopenmpi-dev, openmpi-bin) builds dist/'s MPI shim and runs the
# distributed tests; libkiln itself never links it (dist/load.c). The fuzzers
# need clang with its sanitizer and libFuzzer runtimes (libclang-rt-dev, only
# recommended by clang, and --no-install-recommends skips it) and its OpenMP.
PACKAGES=(bazel-bootstrap libcriterion-dev libxxhash-dev pkg-config gcc llvm-14-dev libjson-c-dev zlib1g-dev dataset-fashion-mnist libopenmpi-dev openmpi-bin libdlpack-dev cmake clang libclang-rt-dev libomp-dev python3-numpy)

usage() {
    echo "usage:" >&2
    sed -n '/^#   \.\/kiln\.sh/,/^#$/{s/^#//;p}' "$0" >&2
    exit 2
}

ensure_packages() {
    local missing=() pkg
    if ! command -v dpkg >/dev/null 2>&1; then
        for pkg in bazel cc pkg-config; do
            command -v "$pkg" >/dev/null 2>&1 ||
                { echo "kiln.sh: $pkg not found; install it first" >&2; exit 1; }
        done
        return 0
    fi
    for pkg in "${PACKAGES[@]}"; do
        [[ $(dpkg -s "$pkg" 2>/dev/null) == *"Status: install ok installed"* ]] || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0

    local sudo=()
    if [[ $(id -u) != 0 ]]; then
        command -v sudo >/dev/null 2>&1 ||
            { echo "kiln.sh: missing packages ${missing[*]}, and no sudo to install them" >&2; exit 1; }
        sudo=(sudo)
    fi
    echo "kiln.sh: installing ${missing[*]}" >&2
    "${sudo[@]}" apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# Totals over everything `test` and `asan` run.
PASSED=0
FAILED=0

count() { # count PASSED FAILED WHAT
    PASSED=$((PASSED + $1))
    FAILED=$((FAILED + $2))
    printf '%-44s %d passed, %d failed\n' "$3:" "$1" "$2"
}

# Runs the tests of //tests:all with the given Bazel flags (SUITE_EXCEPT, if
# set, a query expression of tests to leave out) and counts Criterion test
# cases from each test binary's log. A target that fails to build, or that
# fails without a Criterion summary (a crash outside a test, a leak reported at
# exit, a timeout), counts as one failed case.
run_suite() {
    local name=$1
    shift
    local targets logdir output rc=0 query='tests(//tests:all)'
    local passed=0 failed=0

    [[ -n ${SUITE_EXCEPT:-} ]] && query="$query except ($SUITE_EXCEPT)"
    if ! targets=$(bazel query --noshow_progress "$query" 2>/dev/null) ||
        [[ -z $targets ]]; then
        echo "kiln.sh: no test targets in $query" >&2
        count 0 1 "tests ($name)"
        return
    fi
    # Without it every log is missing, and every target counts as failed.
    logdir=$(bazel info "$@" bazel-testlogs 2>/dev/null) || logdir=/nonexistent
    output=$(mktemp)
    # shellcheck disable=SC2086 # one target per word
    bazel test --keep_going "$@" -- $targets 2>&1 | tee "$output" || rc=$?

    local target line log synth tested passing failing
    while IFS= read -r target; do
        # The summary line: "//tests:x_test   (cached) PASSED in 0.1s" and the like.
        line=$(sed 's/\x1b\[[0-9;]*m//g' "$output" | awk -v t="$target" '$1 == t' | tail -n 1)
        case $line in
        *"FAILED TO BUILD"* | *"NO STATUS"* | "")
            echo "kiln.sh: $target did not run: ${line:-no result}" >&2
            failed=$((failed + 1))
            continue
            ;;
        esac
        log="${target#//}"
        log="$logdir/${log%%:*}/${target##*:}/test.log"
        synth=$(sed 's/\x1b\[[0-9;]*m//g' "$log" 2>/dev/null | grep -a 'Synthesis: Tested:' | tail -n 1 || true)
        if [[ $synth =~ Tested:\ *([0-9]+)\ *\|\ *Passing:\ *([0-9]+)\ *\|\ *Failing:\ *([0-9]+) ]]; then
            tested=${BASH_REMATCH[1]} passing=${BASH_REMATCH[2]} failing=${BASH_REMATCH[3]}
            # Criterion counts a crashed case among the failing ones.
            ((tested - passing > failing)) && failing=$((tested - passing))
            if [[ $line != *PASSED* ]] && ((failing == 0)); then
                echo "kiln.sh: $target failed after its test cases: see $log" >&2
                failing=1
            fi
            passed=$((passed + passing))
            failed=$((failed + failing))
        else
            echo "kiln.sh: $target left no Criterion summary: see $log" >&2
            failed=$((failed + 1))
        fi
    done <<<"$targets"
    rm -f "$output"

    if ((rc != 0 && failed == 0)); then
        echo "kiln.sh: bazel test failed (exit status $rc)" >&2
        failed=1
    fi
    count "$passed" "$failed" "tests ($name)"
    gpu_skips "$logdir" "$name"
}

# The test bodies whose CUDA executors were skipped for want of a GPU, by
# name (test_util.h prints them): counted here, listed in a file.
gpu_skips() { # gpu_skips LOGDIR NAME
    local list="$1/gpu_skipped.txt" n
    find "$1" -name test.log -print0 2>/dev/null | xargs -0 -r cat |
        sed -n 's/\x1b\[[0-9;]*m//g; s/^kiln-test: skipped without a GPU: \([^ ]*\) on .*/\1/p' |
        sort -u >"$list" 2>/dev/null || return 0
    n=$(wc -l <"$list")
    ((n > 0)) || return 0
    printf '%-44s %d test bodies (cuda/lazy, cuda/eager), by name in %s\n' \
        "skipped without a GPU ($2):" "$n" "$list"
}

bazel_bin() { bazel info "$@" bazel-bin 2>/dev/null; }

# tests/fuzz/run.sh, counted from its Criterion-style last line (one check
# per target); no such line counts as one failure.
run_fuzz() { # run_fuzz SECONDS
    local output synth rc=0
    output=$(mktemp)
    tests/fuzz/run.sh "$1" 2>&1 | tee "$output" || rc=$?
    synth=$(grep -a 'Synthesis: Tested:' "$output" | tail -n 1 || true)
    rm -f "$output"
    if [[ $synth =~ Tested:\ *([0-9]+)\ *\|\ *Passing:\ *([0-9]+)\ *\|\ *Failing:\ *([0-9]+) ]]; then
        local failing=${BASH_REMATCH[3]}
        ((rc != 0 && failing == 0)) && failing=1
        count "${BASH_REMATCH[2]}" "$failing" "fuzzing (${FUZZ_RUNS:+$FUZZ_RUNS inputs, at most }${1} s per target)"
    else
        count 0 1 "fuzzing (${1} s per target)"
    fi
}

# Every step is checked by hand: the smoke test runs this where set -e is off.
cmd_install() { # cmd_install [PREFIX [BAZEL FLAGS...]]
    local prefix=${1:-/usr/local} bin
    (($#)) && shift
    [[ $prefix == /* ]] || prefix="$CALLER_DIR/$prefix"
    bazel build "$@" --define=prefix="$prefix" //:libkiln.a //:libkiln.so //:kiln.pc \
        //:kilnConfig.cmake //:kilnConfigVersion.cmake //dist:libkiln_mpi.so || return 1
    bin=$(bazel_bin --define=prefix="$prefix") || return 1
    install -d "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/kiln" &&
        install -m 644 api/kiln.h "$prefix/include/kiln.h" &&
        install -m 644 "$bin/libkiln.a" "$prefix/lib/libkiln.a" &&
        install -m 755 "$bin/libkiln.so" "$prefix/lib/libkiln.so" &&
        install -m 755 "$bin/dist/libkiln_mpi.so" "$prefix/lib/libkiln_mpi.so" &&
        install -m 644 "$bin/kiln.pc" "$prefix/lib/pkgconfig/kiln.pc" &&
        install -m 644 "$bin/kilnConfig.cmake" "$bin/kilnConfigVersion.cmake" \
            "$prefix/lib/cmake/kiln/" || return 1
    echo "kiln.sh: installed kiln in $prefix" >&2
}

# One named check of the smoke test: runs the command, counts it, and shows
# its output only when it fails. The command runs with set -e off (it is an
# if's condition), so the functions below test each step themselves.
CHECK_PASSED=0
CHECK_FAILED=0
check() {
    local what=$1 out
    shift
    if out=$("$@" 2>&1); then
        CHECK_PASSED=$((CHECK_PASSED + 1))
        echo "  ok      $what"
    else
        CHECK_FAILED=$((CHECK_FAILED + 1))
        echo "  FAILED  $what"
        [[ -n $out ]] && printf '          %s\n' "${out//$'\n'/$'\n'          }"
    fi
    return 0
}

# Bazel's INFO lines and progress would bury a failing check's own messages.
readonly QUIET=(--noshow_progress --ui_event_filters=-info)

demo_runs() {
    local rc=0
    bazel build "${QUIET[@]}" //examples:demo || return 1
    "$(bazel_bin)/examples/demo" || rc=$?
    ((rc == 0)) || { echo "exit status $rc"; return 1; }
}

# The objects of libkiln.a against the C sources behind it, as multisets of
# base names (two folders may both have a util.c).
archive_complete() {
    local lib=$1 want have
    want=$(bazel query --noshow_progress \
        'filter("\.c$", kind("source file", deps(//:libkiln.a)))' 2>/dev/null |
        grep '^//' | sed 's/.*[:/]//; s/\.c$//' | sort)
    have=$(ar t "$lib" | sed 's/\.pic\.o$//; s/\.o$//' | sort)
    [[ -n $want ]] || { echo "no C sources found behind //:libkiln.a"; return 1; }
    diff <(echo "$want") <(echo "$have") >/dev/null ||
        { echo "sources vs archive members:"; diff <(echo "$want") <(echo "$have"); return 1; }
    echo "$(wc -l <<<"$have") objects"
}

# The functions kiln.h marks KILN_API against the dynamic symbols libkiln.so
# defines (less the linker's own __bss_start, _edata and _end).
exports_exact() {
    local lib=$1 want have
    want=$(sed -n 's/^KILN_API .*[ *]\(kiln_[A-Za-z0-9_]*\)(.*/\1/p' api/kiln.h | sort -u)
    have=$(nm -D --defined-only "$lib" | awk '{print $NF}' |
        grep -vxE '__bss_start|_edata|_end' | sort -u)
    diff <(echo "$want") <(echo "$have") >/dev/null ||
        { echo "kiln.h (<) vs exported (>):"; diff <(echo "$want") <(echo "$have"); return 1; }
}

# A program that knows kiln only from the installed header and pkg-config.
readonly SMOKE_APP='#include <kiln.h>
#include <stdio.h>

int main(void)
{
    kiln_ctx *ctx = kiln_ctx_new(KILN_DEVICE_DEFAULT);
    if (!ctx) {
        fprintf(stderr, "no context: %s\n", kiln_last_ctx_error());
        return 1;
    }
    const int64_t dims[] = {2, 3};
    const float data[] = {1, 2, 3, 4, 5, 6};
    kiln_tensor *a = kiln_from_data(ctx, KILN_F32, 2, dims, data);
    double sum;
    kiln_status status = kiln_item(kiln_sum(kiln_mul(a, a), 0, NULL, false), &sum);
    float gram[4] = {0};
    if (status == KILN_OK)
        status = kiln_to_host(kiln_matmul(a, kiln_transpose(a, 0, 1)), gram, sizeof gram);
    printf("kiln %d.%d sum=%g gram=%g,%g,%g,%g %s\n", KILN_VERSION_MAJOR, KILN_VERSION_MINOR,
           sum, gram[0], gram[1], gram[2], gram[3], kiln_status_string(status));
    kiln_ctx_free(ctx);
    return status != KILN_OK;
}
'

app_runs() { # app_runs BINARY [VAR=VALUE...]
    local bin=$1 out want rc=0
    shift
    want="kiln $(sed -n 's/^#define KILN_VERSION_MAJOR \([0-9]*\).*/\1/p' api/kiln.h)"
    want+=".$(sed -n 's/^#define KILN_VERSION_MINOR \([0-9]*\).*/\1/p' api/kiln.h)"
    want+=" sum=91 gram=14,32,32,77 ok"
    out=$(env "$@" "$bin") || rc=$?
    ((rc == 0)) || { echo "$out"; echo "exit status $rc"; return 1; }
    [[ $out == "$want" ]] || { echo "printed: $out"; echo "wanted:  $want"; return 1; }
}

link_shared() { # link_shared DIR
    local flags dynamic
    flags=$(pkg-config --cflags --libs kiln) || return 1
    # shellcheck disable=SC2086 # pkg-config's output is meant to be split into words
    cc -std=c11 -Wall -Wextra -Werror -o "$1/app_shared" "$1/app.c" $flags || return 1
    dynamic=$(readelf -d "$1/app_shared") || return 1
    [[ $dynamic == *"Shared library: [libkiln.so]"* ]] || { echo "not linked to libkiln.so"; return 1; }
}

link_static() { # link_static DIR
    local flags dynamic
    flags=$(pkg-config --cflags --libs --static kiln) || return 1
    # shellcheck disable=SC2086 # as in link_shared
    cc -static -std=c11 -Wall -Wextra -Werror -o "$1/app_static" "$1/app.c" $flags || return 1
    dynamic=$(readelf -d "$1/app_static") || return 1
    [[ $dynamic != *libkiln* ]] || { echo "linked to libkiln.so after all"; return 1; }
}

# The same program built by CMake from the installed package, against
# kiln::kiln and kiln::kiln_static; -DKILN_WANT asks for kiln.h's
# major.minor, which kilnConfigVersion.cmake must accept.
# shellcheck disable=SC2016 # ${KILN_WANT} is CMake's to expand
readonly SMOKE_CMAKE='cmake_minimum_required(VERSION 3.13)
project(kiln_smoke C)
set(CMAKE_C_STANDARD 11)
find_package(kiln ${KILN_WANT} REQUIRED CONFIG)
add_executable(app_cmake_shared app.c)
target_link_libraries(app_cmake_shared PRIVATE kiln::kiln)
add_executable(app_cmake_static app.c)
target_link_libraries(app_cmake_static PRIVATE kiln::kiln_static)
'

cmake_builds() { # cmake_builds APP_DIR BUILD_DIR PREFIX
    local want dynamic
    want="$(sed -n 's/^#define KILN_VERSION_MAJOR \([0-9]*\).*/\1/p' api/kiln.h)"
    want+=".$(sed -n 's/^#define KILN_VERSION_MINOR \([0-9]*\).*/\1/p' api/kiln.h)"
    cmake -S "$1" -B "$2" -DCMAKE_PREFIX_PATH="$3" -DKILN_WANT="$want" \
        -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" || return 1
    cmake --build "$2" || return 1
    dynamic=$(readelf -d "$2/app_cmake_shared") || return 1
    [[ $dynamic == *"Shared library: [libkiln.so]"* ]] || { echo "not linked to libkiln.so"; return 1; }
    [[ $dynamic == *"$3/lib"* ]] || { echo "its run path does not name $3/lib"; return 1; }
    dynamic=$(readelf -d "$2/app_cmake_static") || return 1
    [[ $dynamic != *libkiln* ]] || { echo "linked to libkiln.so after all"; return 1; }
}

# The package found from a copy of the prefix: nothing in it names the
# prefix it was installed to.
cmake_relocates() { # cmake_relocates APP_DIR PREFIX COPY
    cp -a "$2" "$3" || return 1
    cmake_builds "$1" "$1/build-moved" "$3"
}

smoke_test() {
    local tmp prefix
    tmp=$(mktemp -d)
    prefix="$tmp/prefix"
    # The program is built outside the repository, as a user's would be.
    local -x PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
    mkdir "$tmp/app"
    printf '%s' "$SMOKE_APP" >"$tmp/app/app.c"
    printf '%s' "$SMOKE_CMAKE" >"$tmp/app/CMakeLists.txt"
    echo "smoke test: install to $prefix, build a program in $tmp/app"
    CHECK_PASSED=0 CHECK_FAILED=0

    check "everything builds (bazel build //...)" bazel build "${QUIET[@]}" //...
    check "examples/demo runs and its checks pass" demo_runs
    check "install to a fresh prefix" cmd_install "$prefix" "${QUIET[@]}"
    check "libkiln.a holds every object behind it" archive_complete "$prefix/lib/libkiln.a"
    check "libkiln.so exports exactly kiln.h's API" exports_exact "$prefix/lib/libkiln.so"
    check "pkg-config finds kiln" pkg-config --exists --print-errors kiln
    check "a program links against libkiln.so" link_shared "$tmp/app"
    check "and runs" app_runs "$tmp/app/app_shared" LD_LIBRARY_PATH="$prefix/lib"
    check "a program links against libkiln.a" link_static "$tmp/app"
    check "and runs" app_runs "$tmp/app/app_static"
    check "CMake finds kiln and builds against kiln::kiln and kiln::kiln_static" \
        cmake_builds "$tmp/app" "$tmp/app/build" "$prefix"
    check "the kiln::kiln program runs" app_runs "$tmp/app/build/app_cmake_shared" \
        LD_LIBRARY_PATH="$prefix/lib"
    check "the kiln::kiln_static program runs" app_runs "$tmp/app/build/app_cmake_static"
    check "CMake finds kiln in a copy of the prefix" \
        cmake_relocates "$tmp/app" "$prefix" "$tmp/moved"
    # Debian's python3, whose python3-numpy ensure_packages installs.
    check "NumPy's from_dlpack and __dlpack__ exchange tensors with libkiln.so" \
        env KILN_CACHE_DIR="$tmp/kernels" /usr/bin/python3 tests/dlpack_numpy.py "$prefix/lib/libkiln.so"

    rm -rf "$tmp"
    count "$CHECK_PASSED" "$CHECK_FAILED" "smoke test"
}

# ---- mutation testing ------------------------------------------------------

# Mutants are blocks in tests/mutants/*.mutant (see tests/mutants/README.md):
# "mutant NAME", then "file:", "tests:", "from:" and "to:" lines, optionally a
# "filter:" (a Criterion --filter pattern for its tests), and for one known to
# behave as the original an "equivalent:" line with the reason. Each mutant
# replaces the one occurrence of `from` in `file` with `to`.
MUTANT_NAMES=() MUTANT_FILES=() MUTANT_TESTS=() MUTANT_FILTER=() MUTANT_FROM=() MUTANT_TO=()
MUTANT_EQUIV=()

mutants_load() {
    local f line key val n=-1
    for f in tests/mutants/*.mutant; do
        [[ -e $f ]] || continue
        while IFS= read -r line || [[ -n $line ]]; do
            [[ -z $line || $line == \#* ]] && continue
            if [[ $line == "mutant "* ]]; then
                n=$((n + 1))
                MUTANT_NAMES[n]=${line#mutant } MUTANT_FILES[n]='' MUTANT_TESTS[n]='' MUTANT_FILTER[n]=''
                MUTANT_FROM[n]='' MUTANT_TO[n]='' MUTANT_EQUIV[n]=''
                continue
            fi
            key=${line%%:*} val=${line#*: }
            ((n >= 0)) || { echo "kiln.sh: $f: \"$line\" before any mutant" >&2; return 1; }
            val=${val//'\n'/$'\n'}
            case $key in
            file) MUTANT_FILES[n]=$val ;;
            tests) MUTANT_TESTS[n]=$val ;;
            filter) MUTANT_FILTER[n]=$val ;;
            from) MUTANT_FROM[n]=$val ;;
            to) MUTANT_TO[n]=$val ;;
            equivalent) MUTANT_EQUIV[n]=$val ;;
            *) echo "kiln.sh: $f: unknown line \"$line\"" >&2; return 1 ;;
            esac
        done <"$f"
    done
    ((n >= 0)) || { echo "kiln.sh: no mutants in tests/mutants/" >&2; return 1; }
}

# How many times the literal text $2 occurs in the file $1.
occurrences() {
    local text rest
    IFS= read -r -d '' text <"$1" || true
    rest=${text//"$2"/}
    echo $(((${#text} - ${#rest}) / ${#2}))
}

# Writes the file $1 with its one occurrence of $2 replaced by $3.
apply_mutant() {
    local text
    IFS= read -r -d '' text <"$1" || true
    printf '%s' "${text/"$2"/"$3"}" >"$1"
}

cmd_mutate() {
    mutants_load || return 1
    local check_only=false
    [[ ${1:-} == --check ]] && { check_only=true; shift; }
    local -A wanted=()
    local name i
    for name in "$@"; do wanted[$name]=1; done
    for name in "$@"; do
        for i in "${!MUTANT_NAMES[@]}"; do [[ ${MUTANT_NAMES[i]} == "$name" ]] && continue 2; done
        echo "kiln.sh: no mutant named $name" >&2
        return 2
    done

    # A copy of the working tree (uncommitted changes included) at a path of
    # its own per checkout, so that its Bazel outputs are reused from one run
    # to the next; the user's tree is never touched. --check reads the tree.
    local scratch=$PWD
    if ! $check_only; then
        scratch="${KILN_MUTATE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kiln-mutate}/$(pwd | md5sum | cut -c1-12)"
        rm -rf "$scratch" "$scratch.kernels"
        mkdir -p "$scratch"
        git ls-files -z --cached --others --exclude-standard |
            while IFS= read -r -d '' name; do if [[ -f $name ]]; then printf '%s\0' "$name"; fi; done |
            tar --null -T - -cf - | tar -xf - -C "$scratch"
        echo "kiln.sh: mutants run in $scratch" >&2
    fi

    local killed=0 survived=0 stale=0 broken=0 equivalent=0 rc count start
    local survivors=() stales=() brokens=() targets=() t file
    for i in "${!MUTANT_NAMES[@]}"; do
        name=${MUTANT_NAMES[i]} file=${MUTANT_FILES[i]}
        ((${#wanted[@]} == 0)) || [[ -n ${wanted[$name]:-} ]] || continue
        if [[ -z $file || -z ${MUTANT_TESTS[i]} || -z ${MUTANT_FROM[i]} ||
            ${MUTANT_FROM[i]} == "${MUTANT_TO[i]}" ]]; then
            echo "kiln.sh: mutant $name lacks file, tests, from or to (or changes nothing)" >&2
            return 1
        fi
        count=0
        [[ -f $scratch/$file ]] && count=$(occurrences "$scratch/$file" "${MUTANT_FROM[i]}")
        if ((count != 1)); then
            printf '%-36s STALE     %s: the snippet occurs %d times, not once\n' \
                "$name" "$file" "$count"
            stale=$((stale + 1)) stales+=("$name")
            continue
        fi
        if $check_only; then
            printf '%-36s ok\n' "$name"
            killed=$((killed + 1))
            continue
        fi
        if [[ -n ${MUTANT_EQUIV[i]} ]]; then
            printf '%-36s equivalent (%s)\n' "$name" "${MUTANT_EQUIV[i]}"
            equivalent=$((equivalent + 1))
            continue
        fi
        # Criterion stops at the first failure: a kill needs only one.
        targets=(--test_arg=--fail-fast)
        [[ -n ${MUTANT_FILTER[i]} ]] && targets+=("--test_arg=--filter=${MUTANT_FILTER[i]}")
        for t in ${MUTANT_TESTS[i]}; do targets+=("//tests:$t"); done
        cp "$scratch/$file" "$scratch/$file.orig"
        apply_mutant "$scratch/$file" "${MUTANT_FROM[i]}" "${MUTANT_TO[i]}"
        start=$SECONDS rc=0
        # A kernel cache of the run's own: a mutant must not leave its kernels
        # (or a broken cache file) where the normal tests would read them.
        (cd "$scratch" && bazel test "${QUIET[@]}" --test_output=summary \
            --test_env=KILN_CACHE_DIR="$scratch.kernels" "${targets[@]}") \
            >"$scratch/mutant.log" 2>&1 || rc=$?
        mv "$scratch/$file.orig" "$scratch/$file"
        [[ $file == cache/* || $file == jit/* ]] && rm -rf "$scratch.kernels"
        # bazel test: 0 all passed, 3 some test failed, 1 the build failed.
        case $rc in
        0) t=survived survived=$((survived + 1)) survivors+=("$name ($file)") ;;
        3) t=killed killed=$((killed + 1)) ;;
        *) t="BROKEN (exit $rc; see below)" broken=$((broken + 1)) brokens+=("$name")
           tail -n 20 "$scratch/mutant.log" | sed 's/^/    /' ;;
        esac
        printf '%-36s %-9s %4ds  %s\n' "$name" "$t" $((SECONDS - start)) "${MUTANT_TESTS[i]}"
    done
    $check_only || (cd "$scratch" && bazel shutdown) >/dev/null 2>&1 || true

    if $check_only; then
        echo "mutants: $killed snippets match, $stale stale"
        for name in "${stales[@]}"; do echo "STALE: $name: update its snippet in tests/mutants/" >&2; done
        ((stale == 0))
        return
    fi
    local run=$((killed + survived))
    echo
    echo "mutants: $killed killed, $survived survived, $equivalent equivalent, $stale stale, $broken broken"
    ((run == 0)) || echo "kill ratio: $killed/$run ($((100 * killed / run))%)"
    for name in "${survivors[@]}"; do echo "survived: $name"; done
    for name in "${stales[@]}"; do echo "STALE: $name: update its snippet in tests/mutants/" >&2; done
    for name in "${brokens[@]}"; do echo "BROKEN: $name does not build or its tests do not run" >&2; done
    ((survived == 0 && stale == 0 && broken == 0))
}

main() {
    local cmd=${1:-}
    (($#)) && shift
    case $cmd in
    demo)
        # The API tour checked against plain C, then Fashion-MNIST trained to
        # its targets (MLP >= 88%, CNN >= 90% test accuracy); the CNN gets one
        # epoch more than it needed. ARGS go to both trainings
        # (--limit 2048 --epochs 1 is a quick look).
        ensure_packages
        bazel build //examples:demo //examples:fashion_mnist
        local bin
        bin=$(bazel_bin)
        "$bin/examples/demo"
        "$bin/examples/fashion_mnist" mlp --epochs 5 "$@"
        "$bin/examples/fashion_mnist" cnn --epochs 4 "$@"
        return
        ;;
    test)
        ensure_packages
        run_suite "-O2 build"
        # Under ASan, each host path once: the op suites again through LLVM
        # (tagged llvm; llvm_test keeps the LLVM renderer and JIT under ASan)
        # and the suites again for NVRTC (cuda_check_test and
        # cuda_check_heavy_test; cuda_render_test
        # keeps the CUDA renderer) are left to the -O2 pass and to
        # `./kiln.sh asan`, which runs them all. On the 2-core AMD EPYC the
        # two took 1190 s of the ASan pass's 2800 s of tests, and the whole
        # command ran past an hour.
        SUITE_EXCEPT='attr(tags, "llvm", tests(//tests:all)) + //tests:cuda_check_test + //tests:cuda_check_heavy_test' \
            run_suite "ASan+UBSan, once per host path" --config=asan
        smoke_test
        # Repeatable: 20000 inputs per target from seed 1 (at most 60 s
        # each), the same on every machine; ./kiln.sh fuzz explores.
        FUZZ_RUNS=20000 FUZZ_SEED=1 run_fuzz 60
        ;;
    fuzz)
        ensure_packages
        (($# <= 1)) || usage
        run_fuzz "${1:-60}"
        ;;
    asan)
        ensure_packages
        run_suite "ASan+UBSan" --config=asan
        ;;
    install)
        ensure_packages
        (($# <= 1)) || usage
        cmd_install "$@"
        return
        ;;
    bench)
        # The peers run in a virtual environment; Debian splits venv out.
        python3 -c 'import venv, ensurepip' 2>/dev/null || PACKAGES+=(python3 python3-venv)
        ensure_packages
        exec bench/run.sh "$@"
        ;;
    bench-dist)
        ensure_packages
        exec bench/dist.sh
        ;;
    mutate)
        ensure_packages
        cmd_mutate "$@"
        return
        ;;
    *) usage ;;
    esac
    echo "$PASSED passed, $FAILED failed"
    ((FAILED == 0))
}

main "$@"
