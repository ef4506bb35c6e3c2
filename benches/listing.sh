#!/usr/bin/env bash
# Listing at scale (issue 12): two `paramdex` binaries side by side on one native file of N
# tiny tensors (written by `paramdex demo`), printed as a markdown table.
#
#   benches/listing.sh OLD_BINARY NEW_BINARY [TENSORS]      # TENSORS defaults to 3000000
#
# e.g. build the previous main into /tmp/paramdex-before, `cargo build --release`, then
#   benches/listing.sh /tmp/paramdex-before target/release/paramdex 3000000
#
# Measured, per binary: time to the first line of `ls` (read through a pipe that is then
# closed, as `ls | head -1`), and for `ls`, `ls --json`, `ls --prefix` (one layer: 9
# tensors), `stat`, `verify` and `diff F F` (output to /dev/null) the wall time, the CPU time
# (user + system), the peak resident set size (GNU time's "Maximum resident set size": it
# counts the pages of the mapped file that were touched, page cache shared with every other
# reader) and the peak anonymous (heap) memory (RssAnon, sampled every 10 ms, so a run shorter
# than that shows about 0). Every figure is the median of REPS runs (default 3), the two
# binaries interleaved so that a noisy machine affects both alike. A command running past
# LIMIT seconds (default 300) is stopped and reported as such, so the run time is bounded.
# Nothing here asserts a time. Needs Linux (/proc) and GNU time.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,8p' "$0" >&2
    exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
N=${3:-3000000}
REPS=${REPS:-3}
LIMIT=${LIMIT:-300}
GNU_TIME=${GNU_TIME:-/usr/bin/time}
[[ -x $GNU_TIME ]] || { echo "needs GNU time at $GNU_TIME (apt-get install time)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/paramdex-listing.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
F=$WORK/demo.pdx

echo "writing $N tensors with $NEW demo ..." >&2
"$NEW" demo --tensors "$N" --dir "$WORK" > "$WORK/demo.log"
# One transformer layer of the demo: 9 tensors under model.layers.L.
LAYER=$((N / 9 / 2))
PREFIX="model.layers.$LAYER."

# now_ns: nanoseconds since the epoch.
now_ns() { date +%s%N; }

# measure CMD...: runs CMD (stdout to /dev/null), prints "seconds cpu_seconds max_rss_kib
# peak_anon_kib" (CPU time: user + system, which other processes on the machine disturb less);
# "timeout" instead of the seconds if it ran past LIMIT, "failed" if it exited non-zero
# (diff exits 5 when the inputs differ; `diff F F` must not).
measure() {
    local tf=$WORK/time.out pid timer="" child="" anon=0 a k v start=$SECONDS stopped=0
    # The wall time is taken around GNU time (whose own %e has 10 ms steps).
    (
        t0=$(now_ns)
        "$GNU_TIME" -f "%M %x %U %S" -o "$tf" "$@" > /dev/null 2> "$WORK/err" || true
        t1=$(now_ns)
        echo $((t1 - t0)) > "$WORK/ns"
    ) &
    pid=$!
    while kill -0 "$pid" 2> /dev/null; do
        [[ -n $timer ]] || timer=$(pgrep -P "$pid" | head -n 1 || true)
        [[ -z $timer || -n $child ]] || child=$(pgrep -P "$timer" | head -n 1 || true)
        if [[ -n $child && -r /proc/$child/status ]]; then
            while IFS=: read -r k v; do
                if [[ $k == RssAnon ]]; then
                    a=${v//[^0-9]/}
                    ((a > anon)) && anon=$a
                fi
            done < "/proc/$child/status" 2> /dev/null || true
        fi
        if ((SECONDS - start > LIMIT)) && [[ -n $child ]]; then
            kill "$child" 2> /dev/null || true
            stopped=1
        fi
        sleep 0.01
    done
    wait "$pid" || true
    local secs rss code user sys cpu
    read -r rss code user sys < <(tail -n 1 "$tf")
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f\n", u + s }')
    secs=$(awk -v n="$(cat "$WORK/ns")" 'BEGIN { printf "%.4f\n", n / 1e9 }')
    if ((stopped)); then
        secs=timeout
    elif [[ ${code:-1} != 0 ]]; then
        secs=failed
    fi
    echo "$secs $cpu $rss $anon"
}

# first_line BIN: seconds until the first line of `ls` arrives through a pipe; the reader then
# closes the pipe, and the command must stop (exit 0 on the closed pipe).
first_line() {
    local t0 t1
    t0=$(now_ns)
    t1=$(timeout "$LIMIT" "$1" ls "$F" 2> /dev/null | { IFS= read -r _ && now_ns; } || true)
    [[ -n $t1 ]] || { echo timeout; return; }
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", (b - a) / 1e9 }'
}

# median of numbers (or the first word that is not a number, e.g. "timeout").
median() {
    local bad
    bad=$(printf '%s\n' "$@" | grep -v -E '^[0-9.]+$' | head -n 1 || true)
    if [[ -n $bad ]]; then echo "$bad"; return; fi
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

fmt_s() {
    case $1 in
        *[!0-9.]*) echo "$1" ;;
        *) awk -v s="$1" 'BEGIN { if (s < 1) printf "%.0f ms\n", s * 1000; else printf "%.2f s\n", s }' ;;
    esac
}
fmt_kib() {
    awk -v k="$1" 'BEGIN {
        if (k >= 1048576) printf "%.2f GiB\n", k / 1048576;
        else if (k >= 10240) printf "%.0f MiB\n", k / 1024;
        else printf "%.1f MiB\n", k / 1024 }'
}
ratio() {
    case "$1$2" in
        *[!0-9.]*) echo "" ;;
        *) awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f×\n", a / b; else print "" }' ;;
    esac
}

echo "| measurement | before | after | before / after |"
echo "|---|---|---|---|"

declare -a fo=() fn=()
for ((r = 0; r < REPS; r++)); do
    echo "ls | head -1, run $((r + 1))" >&2
    fo+=("$(first_line "$OLD")")
    fn+=("$(first_line "$NEW")")
done
a=$(median "${fo[@]}")
b=$(median "${fn[@]}")
echo "| \`ls\`: first line | $(fmt_s "$a") | $(fmt_s "$b") | $(ratio "$a" "$b") |"

row() {
    local what=$1
    shift
    local -a ot=() ocpu=() orss=() oanon=() nt=() ncpu=() nrss=() nanon=()
    local r t c m an
    for ((r = 0; r < REPS; r++)); do
        echo "$what, run $((r + 1))" >&2
        read -r t c m an < <(measure "$OLD" "$@")
        ot+=("$t") ocpu+=("$c") orss+=("$m") oanon+=("$an")
        read -r t c m an < <(measure "$NEW" "$@")
        nt+=("$t") ncpu+=("$c") nrss+=("$m") nanon+=("$an")
    done
    local a b
    a=$(median "${ot[@]}")
    b=$(median "${nt[@]}")
    echo "| $what: time | $(fmt_s "$a") | $(fmt_s "$b") | $(ratio "$a" "$b") |"
    a=$(median "${ocpu[@]}")
    b=$(median "${ncpu[@]}")
    echo "| $what: CPU time | $(fmt_s "$a") | $(fmt_s "$b") | $(ratio "$a" "$b") |"
    a=$(median "${orss[@]}")
    b=$(median "${nrss[@]}")
    echo "| $what: peak RSS | $(fmt_kib "$a") | $(fmt_kib "$b") | $(ratio "$a" "$b") |"
    a=$(median "${oanon[@]}")
    b=$(median "${nanon[@]}")
    echo "| $what: peak anonymous memory | $(fmt_kib "$a") | $(fmt_kib "$b") | $(ratio "$a" "$b") |"
}

row '`ls`' ls "$F"
row '`ls --json`' ls --json "$F"
row "\`ls --prefix $PREFIX\` (9 tensors)" ls --prefix "$PREFIX" "$F"
row '`stat`' stat "$F"
row '`verify`' verify "$F"
row '`diff F F`' diff "$F" "$F"

file_bytes=$(stat -c %s "$F")
index_bytes=$("$NEW" stat --json "$F" | awk -F'[:,]' '/"index_bytes"/ { gsub(/ /, "", $2); print $2 }')
echo
echo "File: $N tensors, $(fmt_kib $((file_bytes / 1024))) ($(fmt_kib $((index_bytes / 1024))) of index)," \
    "written by \`paramdex demo --tensors $N\`. Median of $REPS runs each; load average after the" \
    "run: $(cut -d' ' -f1-3 /proc/loadavg), on $(nproc) cores."
