# shellcheck shell=bash
# bench/read-lib.sh: helpers for the read benchmarks (bench/read-*.sh).
# Source it; it sets REPO_DIR, QIMG, QEMU_IMG, BENCH_SCRATCH (removed at
# exit) and MEMWARM, and defines:
#   bench_require_space GIB      fail unless the scratch file system has GIB free
#   bench_warm                   run memwarm (see /work/shared/tools/README.md)
#   bench_time VAR CMD...        run CMD followed by sync; VAR := seconds
#   bench_median N...            print the median of the numbers
#   bench_ratio A B              print A/B with 3 decimals
# Rules (shared/tools/README.md): memwarm before every timed run, every
# timed run ends with a sync, tools interleave in rounds, report medians and
# per-round ratios.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
SHARED_DIR=${SHARED_DIR:-$(dirname "$REPO_DIR")/shared}

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

# Scratch on the same file system as the repository by default (the
# benchmark measures this machine's disk, not a tmpfs).
BENCH_SCRATCH=$(mktemp -d "${BENCH_TMPDIR:-$REPO_DIR/bench}/.scratch.XXXXXX") || exit 1
_bench_cleanup() {
    rm -rf "$BENCH_SCRATCH"
}
trap _bench_cleanup EXIT
trap 'exit 130' INT TERM

MEMWARM=$BENCH_SCRATCH/memwarm
cc -O2 -o "$MEMWARM" "$SHARED_DIR/tools/memwarm.c" || {
    echo "cannot build memwarm from $SHARED_DIR/tools/memwarm.c" >&2
    exit 1
}
MEMWARM_MIB=${MEMWARM_MIB:-6144}

bench_require_space() {
    local need=$1 avail
    avail=$(df -P -B1G "$BENCH_SCRATCH" | awk 'NR == 2 { print $4 }')
    if [ "$avail" -lt "$need" ]; then
        echo "need ${need} GiB free in $BENCH_SCRATCH, have ${avail} GiB" >&2
        exit 1
    fi
}

bench_warm() {
    "$MEMWARM" "$MEMWARM_MIB" >/dev/null
}

# bench_time VAR CMD...: time CMD plus a final sync (wall clock, seconds).
bench_time() {
    local __var=$1 t0 t1
    shift
    t0=$EPOCHREALTIME
    "$@" || { echo "failed: $*" >&2; exit 1; }
    sync
    t1=$EPOCHREALTIME
    printf -v "$__var" '%s' "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}

bench_median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2];
        else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

bench_ratio() {
    echo "$1 $2" | awk '{ printf "%.3f\n", $1 / $2 }'
}
