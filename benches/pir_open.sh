#!/usr/bin/env bash
# Opening a Paddle 3 model (issue 17): two `paramdex` binaries side by side on one PIR `.json`
# program of N parameters and its `.pdiparams` (written by `examples/pir_program.rs`).
#
#   benches/pir_open.sh OLD_BINARY NEW_BINARY [PARAMS]      # PARAMS defaults to 5000
#
# e.g. build the previous main into /tmp/paramdex-before, then
#   cargo build --release && cargo build --release --example pir_program
#   benches/pir_open.sh /tmp/paramdex-before target/release/paramdex
#
# Measured, per binary: the wall time of `ls MODEL.pdiparams` and `stat MODEL.pdiparams`
# (output to /dev/null), each the median of REPS runs (default 30), the two binaries
# interleaved so that a noisy machine affects both alike; then the example's in-process
# figures. Nothing here asserts a time. The example is EXAMPLE (default
# $CARGO_TARGET_DIR or target, /release/examples/pir_program).
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,9p' "$0" >&2
    exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
N=${3:-5000}
REPS=${REPS:-30}
EXAMPLE=${EXAMPLE:-${CARGO_TARGET_DIR:-target}/release/examples/pir_program}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/paramdex-pir.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
"$EXAMPLE" "$WORK" "$N" "$REPS"
M=$WORK/model.pdiparams
cmp <("$OLD" ls "$M") <("$NEW" ls "$M") || { echo "the two binaries list differently" >&2; exit 1; }

# Wall time of one run in microseconds.
wall() {
    local t0 t1
    t0=$(date +%s%N)
    "$@" > /dev/null
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000))
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| command | before (median, ms) | after (median, ms) | ratio |"
echo "|---|---|---|---|"
for cmd in ls stat; do
    : > "$WORK/old" && : > "$WORK/new"
    for _ in $(seq "$REPS"); do
        wall "$OLD" "$cmd" "$M" >> "$WORK/old"
        wall "$NEW" "$cmd" "$M" >> "$WORK/new"
    done
    o=$(median < "$WORK/old")
    n=$(median < "$WORK/new")
    awk -v c="$cmd" -v o="$o" -v n="$n" \
        'BEGIN { printf "| `paramdex %s` | %.1f | %.1f | %.2fx faster |\n", c, o / 1000, n / 1000, o / n }'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
