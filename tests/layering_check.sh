#!/bin/sh
# Data flows one way: no object of graph/, autograd/, lower/, cache/ or jit/
# (jit/cpu and jit/cuda included) may leave undefined a symbol that an object
# of api/ defines. The arguments are every object file of the build.
set -u
tmp=${TEST_TMPDIR:-/tmp}/layering.$$
mkdir -p "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/api"
: >"$tmp/below"
for o in "$@"; do
    # the package is the path below bazel-out/<config>/bin/, if any
    pkg=$(printf '%s\n' "$o" | sed 's|^.*/bin/||; s|/.*||')
    case $pkg in
    api) printf '%s\n' "$o" >>"$tmp/api" ;;
    graph | autograd | lower | cache | jit) printf '%s\n' "$o" >>"$tmp/below" ;;
    esac
done
if [ ! -s "$tmp/api" ] || [ ! -s "$tmp/below" ]; then
    echo "layering_check: no objects of api/ or of the layers below it were given" >&2
    exit 1
fi
xargs nm -g --defined-only <"$tmp/api" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/defs"
status=0
nobj=0
while read -r o; do
    nobj=$((nobj + 1))
    nm -u "$o" | awk '{ print $NF }' | sort -u | comm -12 - "$tmp/defs" >"$tmp/hits"
    if [ -s "$tmp/hits" ]; then
        sed "s|^|$o calls api/'s |" "$tmp/hits" >&2
        status=1
    fi
done <"$tmp/below"
echo "layering_check: $nobj objects below api/ checked against $(wc -l <"$tmp/defs") symbols of $(wc -l <"$tmp/api") api/ objects"
# The test command counts cases by Criterion's summary line: this is one case.
echo "[====] Synthesis: Tested: 1 | Passing: $((1 - status)) | Failing: $status | Crashing: 0"
exit $status
