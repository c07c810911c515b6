# shellcheck shell=bash
# bench/lib.sh: helpers shared by the benchmarks (source it).
#
# Rules for every number (../shared/tools/README.md):
#  1. memwarm right before each timed run (this VM hands freed memory back to
#     the host; the first touch afterwards is slow), built with cc -O2 into
#     bench/out/.
#  2. Every timed run includes its final flush / sync.
#  3. The tools being compared run interleaved, in rounds (A B A B ...), and
#     results are medians plus the per-round ratios.
#
# Sets REPO_DIR, QIMG, QEMU_IMG, BENCH_OUT (bench/out), BENCH_SCRATCH (a
# scratch folder removed at exit; parent BENCH_TMPDIR, default bench/out)
# and MEMWARM.  Functions:
#   bench_warm                 run memwarm (MEMWARM_MIB, default 6144)
#   bench_time VAR CMD...      warm, run CMD, sync; VAR := wall seconds;
#                              a command (not a shell function) running
#                              longer than BENCH_RUN_TIMEOUT seconds
#                              (default 600) is killed and ends the bench;
#                              BENCH_C := CPU seconds (user + sys) of CMD
#                              and its children, the sync left out
#   bench_children_cpu         CPU seconds (user + sys) of the shell's
#                              waited-for children so far
#   bench_pid_cpu PID          CPU seconds (user + sys) of a live process,
#                              its ended threads included
#   bench_median N...          median of the numbers (3 decimals)
#   bench_ratio A B            A / B (3 decimals)
#   bench_require_space GIB    exit unless the scratch file system has it
#   bench_rounds ROUNDS CASE NAME... : for each round, call "CASE NAME" for
#                              every NAME, rotating the order each round;
#                              CASE sets BENCH_T (and BENCH_C, CPU seconds,
#                              which bench_time sets; a case may add a
#                              server's); results are kept as
#                              BENCH_RESULT[NAME] = "t1 t2 ..." (round order)
#                              and BENCH_CPU[NAME] likewise
#   bench_table TITLE BASE NAME...   print "name  median  ratio to BASE
#                              (median of per-round ratios)  median CPU
#                              seconds  per-round ratios"
#   bench_reset                forget the results

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
# ../shared beside the checkout; from a git worktree, beside its main one
if [ -z "${SHARED_DIR:-}" ]; then
    SHARED_DIR=$(dirname "$REPO_DIR")/shared
    if [ ! -d "$SHARED_DIR" ] &&
        common=$(git -C "$REPO_DIR" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
        SHARED_DIR=$(dirname "$(dirname "$common")")/shared
    fi
fi
BENCH_OUT=$BENCH_DIR/out

if [ -z "${QIMG:-}" ]; then
    if [ -x "$REPO_DIR/build/tools/qimg" ]; then
        QIMG=$REPO_DIR/build/tools/qimg
    else
        QIMG=$REPO_DIR/build/qimg
    fi
fi
QEMU_IMG=${QEMU_IMG:-qemu-img}
[ -x "$QIMG" ] || { echo "qimg not built: $QIMG" >&2; exit 1; }
command -v "$QEMU_IMG" >/dev/null || { echo "qemu-img not found" >&2; exit 1; }

mkdir -p "$BENCH_OUT" || exit 1
MEMWARM=$BENCH_OUT/memwarm
if [ ! -x "$MEMWARM" ] || [ "$SHARED_DIR/tools/memwarm.c" -nt "$MEMWARM" ]; then
    cc -O2 -o "$MEMWARM" "$SHARED_DIR/tools/memwarm.c" || {
        echo "cannot build memwarm from $SHARED_DIR/tools/memwarm.c" >&2
        exit 1
    }
fi
MEMWARM_MIB=${MEMWARM_MIB:-6144}
BENCH_RUN_TIMEOUT=${BENCH_RUN_TIMEOUT:-600}

# Scratch on the repository's file system: the numbers are about this
# machine's disk, not a tmpfs.
BENCH_SCRATCH=$(mktemp -d "${BENCH_TMPDIR:-$BENCH_OUT}/scratch.XXXXXX") || exit 1
_bench_cleanup() {
    rm -rf "$BENCH_SCRATCH"
}
trap _bench_cleanup EXIT
trap 'exit 130' INT TERM

declare -A BENCH_RESULT=()
declare -A BENCH_CPU=()

bench_warm() {
    "$MEMWARM" "$MEMWARM_MIB" >/dev/null
}

bench_children_cpu() {
    # fields 16 and 17 of /proc/$$/stat (cutime, cstime: the waited-for
    # children of this shell -- $$ even in a subshell) in clock ticks;
    # the command name (field 2) may hold spaces, so count after its ')'
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.2f\n", ($14 + $15) / hz }' \
        "/proc/$$/stat"
}

bench_pid_cpu() {
    # fields 14 and 15 of /proc/PID/stat (utime, stime) in clock ticks;
    # the command name (field 2) may hold spaces, so count after its ')'
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.2f\n", ($12 + $13) / hz }' \
        "/proc/$1/stat" 2>/dev/null || echo 0
}

bench_time() {
    local __var=$1 t0 t1 c0
    shift
    bench_warm
    c0=$(bench_children_cpu)
    t0=$EPOCHREALTIME
    local limit=(timeout "$BENCH_RUN_TIMEOUT")
    declare -F "$1" >/dev/null && limit=() # a shell function: its own commands
    "${limit[@]}" "$@" >/dev/null || {
        local rc=$?
        [ $rc = 124 ] && echo "timed out after $BENCH_RUN_TIMEOUT s (a hang?): $*" >&2
        echo "failed: $*" >&2
        exit 1
    }
    BENCH_C=$(awk -v a="$c0" -v b="$(bench_children_cpu)" 'BEGIN { printf "%.2f", b - a }')
    sync
    t1=$EPOCHREALTIME
    printf -v "$__var" '%s' "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}

bench_median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "-"; exit }
        if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2];
        else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

bench_ratio() {
    echo "$1 $2" | awk '{ if ($2 > 0) printf "%.3f\n", $1 / $2; else print "-" }'
}

bench_require_space() {
    local need=$1 avail
    avail=$(df -P -B1G "$BENCH_SCRATCH" | awk 'NR == 2 { print $4 }')
    if [ "$avail" -lt "$need" ]; then
        echo "need ${need} GiB free in $BENCH_SCRATCH, have ${avail} GiB" >&2
        exit 1
    fi
}

bench_rounds() {
    local rounds=$1 case_fn=$2 r i n
    shift 2
    local names=("$@")
    n=${#names[@]}
    for ((r = 0; r < rounds; r++)); do
        for ((i = 0; i < n; i++)); do
            local name=${names[$(((i + r) % n))]}
            BENCH_T=
            BENCH_C=
            "$case_fn" "$name"
            BENCH_RESULT[$name]="${BENCH_RESULT[$name]:-}${BENCH_RESULT[$name]:+ }$BENCH_T"
            BENCH_CPU[$name]="${BENCH_CPU[$name]:-}${BENCH_CPU[$name]:+ }${BENCH_C:--}"
        done
    done
}

bench_reset() {
    BENCH_RESULT=()
    BENCH_CPU=()
}

bench_table() {
    local title=$1 base=$2 name
    shift 2
    local -a bt
    read -ra bt <<<"${BENCH_RESULT[$base]}"
    printf '%s\n' "$title"
    printf '  %-24s %9s %9s %9s  %s\n' "case" "median s" "x $base" "cpu s" "per-round ratios"
    for name in "$@"; do
        local -a t ratios=()
        read -ra t <<<"${BENCH_RESULT[$name]}"
        for ((i = 0; i < ${#t[@]}; i++)); do
            ratios+=("$(bench_ratio "${t[$i]}" "${bt[$i]}")")
        done
        local -a c=()
        read -ra c <<<"${BENCH_CPU[$name]//-/}"
        printf '  %-24s %9s %9s %9s  %s\n' "$name" "$(bench_median "${t[@]}")" \
            "$(bench_median "${ratios[@]}")" "$( ((${#c[@]})) && bench_median "${c[@]}" || echo -)" \
            "${ratios[*]}"
    done
}
