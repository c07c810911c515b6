#!/bin/bash
# 194-crash-l2-alloc: power-loss states of new L2 tables (qcow2/l2.c
# invariant 1: the new table's refcount and the table itself are written,
# then one flush covers both, then the L1 entry is written and synced;
# issue 30).  Each case writes 4 KiB into 6 guest ranges that each need a
# new L2 table (or, over an internal snapshot, a copy of a shared one),
# then flushes, through `qimg io` on the recording node.  The log is small,
# so its states cover the windows between the table's writes and the L1
# write: a state whose L1 entry is durable before the table's refcount is
# a reference to a free cluster (qemu-img check: corrupt).  Every sector
# of every state reads what it read before or what qemu-io (the oracle)
# leaves there after the same commands.  Writing the L1 entry before the
# flush (a throwaway patch to l2.c, its debug assertions removed) failed
# 4 of 6 cases here with 40 states a case, and 3 of 6 (rc1-4k: a reference
# to a free cluster; rc64-lazy-4k: a table past the end of the file;
# snap-4k: lost data) with make test's 16 (identical states judged once:
# about 11 distinct of 16; QIMG_LONG=1: lib.sh's 200).
. "${0%/*}/../common.sh"
CRASH_STATES=${CRASH_STATES:-16}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3

M=$((1 << 20))

# l2_case LABEL CACHE SIZE STRIDE SNAPSHOT CREATE-OPTS: the writes at 0,
# STRIDE, 2 STRIDE, ... (one L2 table's reach apart); SNAPSHOT=1 fills the
# image with qemu-io and takes an internal snapshot first, so each write
# copies a shared table.
l2_case() {
    local label=$1 cache=$2 size=$3 stride=$4 snap=$5 copts=$6 d=$SCRATCH/$1 cmds=() i
    mkdir -p "$d"
    # shellcheck disable=SC2086
    (cd "$d" && "$QEMU_IMG" create -q -f qcow2 $copts img.qcow2 "$size") || {
        _fail "$label: create"
        return
    }
    if [ "$snap" = 1 ]; then
        for i in 0 1 2 3 4 5; do
            "$QEMU_IO" -f qcow2 -c "write -q -P 0x22 $((i * stride + 8192)) 8k" \
                "$d/img.qcow2" >/dev/null || _fail "$label: fill"
        done
        "$QEMU_IMG" snapshot -c s1 "$d/img.qcow2" || _fail "$label: snapshot"
    fi
    for i in 0 1 2 3 4 5; do
        cmds+=(-c "write -q -P $((0x31 + i)) $((i * stride)) 4k")
    done
    cmds+=(-c flush)
    "$QEMU_IMG" convert -O raw "$d/img.qcow2" "$d/old.raw" || _fail "$label: old"
    cp "$d/img.qcow2" "$d/oracle.qcow2"
    "$QEMU_IO" -f qcow2 "${cmds[@]}" "$d/oracle.qcow2" >/dev/null || _fail "$label: oracle"
    "$QEMU_IMG" convert -O raw "$d/oracle.qcow2" "$d/final.raw" || _fail "$label: final"
    crash_op "$label" "$d" --expect-raw "@DIR@/final.raw,@DIR@/old.raw" \
        --expect-mode per-sector -- io -t "$cache" "${cmds[@]}" -f qcow2 @IMG@
}

l2_case c4k none 64M $((2 * M)) 0 "-o cluster_size=4k"
l2_case c4k-wb writeback 64M $((2 * M)) 0 "-o cluster_size=4k"
l2_case rc1-4k none 64M $((2 * M)) 0 "-o cluster_size=4k,refcount_bits=1"
l2_case rc64-lazy-4k none 64M $((2 * M)) 0 "-o cluster_size=4k,refcount_bits=64,lazy_refcounts=on"
l2_case xl2-16k none 256M $((16 * M)) 0 "-o cluster_size=16k,extended_l2=on"
l2_case snap-4k none 64M $((2 * M)) 1 "-o cluster_size=4k"

crash_summary
finish
