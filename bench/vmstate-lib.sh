# shellcheck shell=bash
# bench/vmstate-lib.sh: helpers for bench/vmstate-bench.sh and
# bench/qemu-savevm.sh (bench/lib.sh did not exist when these were written).
#
# Source it; it sets REPO_DIR, SHARED_DIR, QIMG, QEMU_IMG and defines:
#   vm_scratch_init            BENCH_SCRATCH := new folder on the repository's
#                              file system (removed at exit), MEMWARM built there
#   vm_require_space GIB       fail unless the scratch file system has GIB free
#   vm_warm                    memwarm (see /work/shared/tools/README.md)
#   vm_drop_caches             sync + drop the page cache; returns 1 (and
#                              says so once) where that is not permitted
#   vm_time VAR CMD...         run CMD, then sync; VAR := wall seconds,
#                              VM_C := CPU seconds (user + sys) of CMD
#   vm_median N...             median
#   vm_ratio A B               A / B with 2 decimals
#   vm_on_exit CMD             run CMD at exit (before the scratch is removed)
# Rules (shared/tools/README.md): memwarm right before every timed run,
# every timing ends with a flush or sync, tools interleave in rounds,
# medians and per-round ratios are reported.

VM_BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$VM_BENCH_DIR")
SHARED_DIR=${SHARED_DIR:-$(dirname "$REPO_DIR")/shared}

if [ -z "${QIMG:-}" ]; then
    if [ -x "$REPO_DIR/build/tools/qimg" ]; then
        QIMG=$REPO_DIR/build/tools/qimg
    else
        QIMG=$REPO_DIR/build/qimg
    fi
fi
QEMU_IMG=${QEMU_IMG:-qemu-img}
MEMWARM_MIB=${MEMWARM_MIB:-6144}

_vm_exit_cmds=()
vm_on_exit() {
    _vm_exit_cmds+=("$1")
}
_vm_cleanup() {
    local c
    for c in "${_vm_exit_cmds[@]}"; do
        eval "$c"
    done
    if [ -n "${BENCH_SCRATCH:-}" ] && [ -z "${VM_KEEP_SCRATCH:-}" ]; then
        rm -rf "$BENCH_SCRATCH"
    fi
}
trap _vm_cleanup EXIT
trap 'exit 130' INT TERM

vm_scratch_init() {
    BENCH_SCRATCH=$(mktemp -d "${BENCH_TMPDIR:-$REPO_DIR/bench}/.scratch-vmstate.XXXXXX") ||
        exit 1
    MEMWARM=$BENCH_SCRATCH/memwarm
    cc -O2 -o "$MEMWARM" "$SHARED_DIR/tools/memwarm.c" || {
        echo "cannot build memwarm from $SHARED_DIR/tools/memwarm.c" >&2
        exit 1
    }
}

vm_require_space() {
    local need=$1 avail
    avail=$(df -P -B1G "$BENCH_SCRATCH" | awk 'NR == 2 { print $4 }')
    if [ "$avail" -lt "$need" ]; then
        echo "need ${need} GiB free in $BENCH_SCRATCH, have ${avail} GiB" >&2
        exit 1
    fi
}

vm_warm() {
    "$MEMWARM" "$MEMWARM_MIB" >/dev/null
}

_vm_drop_warned=
vm_drop_caches() {
    sync
    if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
        if [ -z "$_vm_drop_warned" ]; then
            echo "# note: cannot drop the page cache here; 'cold' reads are warm" >&2
            _vm_drop_warned=1
        fi
        return 1
    fi
}

# CPU seconds (user + sys) of the shell's waited-for children so far.
vm_children_cpu() {
    # fields 16 and 17 of /proc/$$/stat (cutime, cstime: the waited-for
    # children of this shell -- $$ even in a subshell) in clock ticks;
    # the command name (field 2) may hold spaces, so count after its ')'
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.2f\n", ($14 + $15) / hz }' \
        "/proc/$$/stat"
}

# vm_time VAR CMD...: wall time of CMD plus a final sync; VM_C: its CPU.
vm_time() {
    local __var=$1 t0 t1 c0
    shift
    c0=$(vm_children_cpu)
    t0=$EPOCHREALTIME
    "$@" || { echo "failed: $*" >&2; exit 1; }
    VM_C=$(awk -v a="$c0" -v b="$(vm_children_cpu)" 'BEGIN { printf "%.2f", b - a }')
    sync
    t1=$EPOCHREALTIME
    printf -v "$__var" '%s' "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}

vm_median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "-"; exit }
        if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2];
        else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

vm_ratio() {
    echo "$1 $2" | awk '{ if ($2 > 0 && $1 != "-" && $2 != "-") printf "%.2f\n", $1 / $2; else print "-" }'
}
