#!/bin/bash
# fashion_mnist_smoke.sh — examples/fashion_mnist end to end on a slice of
# the data: both models train on 2100 images (16 batches of 128 and one of
# 52; the MLP two epochs, the CNN one) and evaluate 2100 test images (4
# batches of 500 and one of 100), the loss falls, and no step of a batch size
# seen before builds a program; a missing dataset and malformed IDX
# files are refused with messages that say what is wrong. The dataset comes
# from Debian's dataset-fashion-mnist (in kiln.sh's package list); without it
# the training checks fail with the example's message saying so.
#
# Usage: fashion_mnist_smoke.sh PATH/TO/fashion_mnist
# The last line is a Criterion-style synthesis, which kiln.sh counts.
set -u
bin=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
passed=0
failed=0

ok() {
    passed=$((passed + 1))
    echo "  ok      $1"
}

bad() {
    failed=$((failed + 1))
    echo "  FAILED  $1"
    [[ -n ${2:-} ]] && printf '          %s\n' "${2//$'\n'/$'\n'          }"
}

# The run must succeed, train and evaluate every image (the last batches
# smaller), report no program built for a batch size seen before, and end
# with a smaller loss than its first step's.
train_check() {
    local model=$1 epochs=$2 out rc=0
    out=$("$bin" "$model" --limit 2100 --epochs "$epochs" 2>&1) || rc=$?
    if ((rc != 0)); then
        bad "$model trains on 2100 images (exit status $rc)" "$out"
        return
    fi
    ok "$model trains on 2100 images"
    if grep -q "2100 training images in 17 batches of 128 (the last of 52), 2100 test images" <<<"$out" &&
        grep -q "2 training and 2 evaluation batch sizes" <<<"$out"; then
        ok "$model: no image left out, the last batches smaller"
    else
        bad "$model: no image left out, the last batches smaller" "$out"
    fi
    # Into a pipe the progress bar is plain lines, never carriage returns.
    if [[ $out == *$'\r'* ]]; then
        bad "$model: no carriage returns in a log" "$out"
    else
        ok "$model: no carriage returns in a log"
    fi
    if grep -q "steps of a size seen before: 0 programs built, [1-9][0-9]* graph-cache hits" <<<"$out" &&
        grep -q "; 0 built, [1-9][0-9]* hits in" <<<"$out"; then
        ok "$model: every step of a batch size seen before replays its program"
    else
        bad "$model: every step of a batch size seen before replays its program" "$out"
    fi
    if awk '/: loss .* at step 1, .* over the last/ {
                first = $3; last = $7; found = 1
            }
            END { exit !(found && last + 0 < 0.8 * first) }' <<<"$out"; then
        ok "$model: the loss falls by more than 20%"
    else
        bad "$model: the loss falls by more than 20%" "$out"
    fi
}

# The run must fail with status 1 and print every pattern given.
refuse_check() {
    local what=$1 dir=$2 out rc=0 pattern
    shift 2
    out=$("$bin" mlp --limit 512 --data "$dir" 2>&1) || rc=$?
    if ((rc != 1)); then
        bad "$what (exit status $rc, wanted 1)" "$out"
        return
    fi
    for pattern in "$@"; do
        if ! grep -q -- "$pattern" <<<"$out"; then
            bad "$what (no \"$pattern\" in the message)" "$out"
            return
        fi
    done
    ok "$what"
}

# An IDX header for n images of 28x28 unsigned bytes.
images_header() { printf '\0\0\x08\x03\0\0\0%b\0\0\0\x1c\0\0\0\x1c' "\\x$(printf %02x "$1")"; }

train_check mlp 2
train_check cnn 1

refuse_check "a missing dataset is refused and the package named" "$tmp/nowhere" \
    "cannot open $tmp/nowhere/train-images-idx3-ubyte.gz" "dataset-fashion-mnist"

mkdir -p "$tmp/garbage"
echo "not a dataset" | gzip >"$tmp/garbage/train-images-idx3-ubyte.gz"
refuse_check "a file that is not IDX is refused" "$tmp/garbage" \
    "garbage/train-images-idx3-ubyte.gz: not an IDX file"

mkdir -p "$tmp/truncated"
{
    images_header 2
    head -c 1000 /dev/zero
} | gzip >"$tmp/truncated/train-images-idx3-ubyte.gz"
refuse_check "a truncated IDX file is refused" "$tmp/truncated" \
    "truncated/train-images-idx3-ubyte.gz: truncated: 1000 of 1568 data bytes"

mkdir -p "$tmp/long"
{
    images_header 1
    head -c 785 /dev/zero
} | gzip >"$tmp/long/train-images-idx3-ubyte.gz"
refuse_check "an IDX file longer than its header says is refused" "$tmp/long" \
    "long/train-images-idx3-ubyte.gz: longer than its header says"

mkdir -p "$tmp/rank"
printf '\0\0\x08\x01\0\0\0\x01\x07' | gzip >"$tmp/rank/train-images-idx3-ubyte.gz"
refuse_check "an IDX file of the wrong rank is refused" "$tmp/rank" \
    "rank/train-images-idx3-ubyte.gz: 1 dimensions, expected 3"

mkdir -p "$tmp/labels"
{
    images_header 2
    head -c 1568 /dev/zero
} | gzip >"$tmp/labels/train-images-idx3-ubyte.gz"
printf '\0\0\x08\x01\0\0\0\x02\x03\x0c' | gzip >"$tmp/labels/train-labels-idx1-ubyte.gz"
refuse_check "a label outside the 10 classes is refused" "$tmp/labels" \
    "label 12 of image 1 is not a class 0-9"

counts="Tested: $((passed + failed)) | Passing: $passed | Failing: $failed | Crashing: 0"
echo "[====] Synthesis: $counts"
((failed == 0))
