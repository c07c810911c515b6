#!/bin/bash
# bench/io-bench.sh: the guest I/O path (issue 11's table) against qemu-img
# bench and the floor, fio on a raw file.
#
# The same requests for every tool: COUNT (default 60000) requests of 4 KiB,
# offsets 0, step, 2 step, ... modulo a SIZE_GIB (default 4) GiB image, step
# 1 MiB + 4 KiB (every request lands in a different 64 KiB cluster).
# Workloads (name: cache, depth, what):
#   alloc-d1      none, 1   allocating writes into an empty qcow2 image
#   alloc-d32     none, 32  the same at depth 32
#   alloc-wb-d32  writeback, 32, allocating (the flush at close included)
#   rewrite-d32   none, 32  writes to allocated clusters
#   rewrite-d1    none, 1   the same at depth 1 (latency)
#   read-d32      none, 32  reads of allocated clusters
#   read-d1       none, 1   the same at depth 1 (latency)
# Tools: qemu-img (qemu-img bench), qimg (qimg bench; QIMG_BENCH_ARGS adds
# options such as "-i threads"), qimg-before (QIMG_BEFORE=binary), and the
# floor: fio replaying the same offsets from an I/O log (O_DIRECT except for
# the writeback case, io_uring, fio's own run time including end_fsync) on a
# fully written raw file of the same size (for the allocating cases, too).
# Every run: caches dropped (when root), memwarm, wall time of the whole
# process plus a sync.  ROUNDS (default 3) rounds, tools interleaved in a
# rotating order.  Printed: IOPS medians and ratios to qemu-img and to fio
# (higher is better), then per-round times.  CASES selects workloads.
set -u
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-3}
COUNT=${COUNT:-60000}
SIZE_GIB=${SIZE_GIB:-4}
STEP=$((1024 * 1024 + 4096))
CASES=${CASES:-alloc-d1 alloc-d32 alloc-wb-d32 rewrite-d32 rewrite-d1 read-d32 read-d1}
QIMG_BEFORE=${QIMG_BEFORE:-}
read -ra QIMG_BENCH_ARGS <<<"${QIMG_BENCH_ARGS:-}"
command -v fio >/dev/null || { echo "fio not found (scripts/install-deps.sh)" >&2; exit 1; }
tools=(qemu-img qimg)
[ -n "$QIMG_BEFORE" ] && tools+=(qimg-before)
tools+=(fio)
cd "$BENCH_SCRATCH" || exit 1
bench_require_space $((SIZE_GIB * 5 + 2))

echo "# io-bench: $COUNT x 4 KiB, step $STEP, ${SIZE_GIB} GiB, $ROUNDS rounds"
echo "# $("$QEMU_IMG" --version | head -n 1); $("$QIMG" --version | head -n 1); $(fio --version)"

drop_caches() {
    sync
    [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches
}

# A fully written raw file for fio, and one prepared qcow2 image per qcow2
# tool (allocated by that tool, untimed) for rewrites and reads.
dd if=/dev/zero of=floor.raw bs=1M count=$((SIZE_GIB * 1024)) oflag=direct status=none
for op in write read; do
    {
        echo "fio version 2 iolog"
        echo "floor.raw add"
        echo "floor.raw open"
        awk -v n="$COUNT" -v step="$STEP" -v size=$((SIZE_GIB << 30)) -v op=$op \
            'BEGIN { for (i = 0; i < n; i++) printf "floor.raw %s %.0f 4096\n", op, (i * step) % size }'
        echo "floor.raw close"
    } >$op.iolog
done
prepared() {
    local bin=$1 img=$2
    if [ ! -e "$img" ]; then
        "$QEMU_IMG" create -q -f qcow2 "$img" "${SIZE_GIB}G"
        "$bin" bench -f qcow2 -w -c "$COUNT" -s 4k -S "$STEP" -d 32 -t none "$img" >/dev/null
        sync
    fi
}

# run_case WORKLOAD TOOL: sets BENCH_T
run_case() {
    local w=$1 tool=$2 cache depth mode bin img
    case $w in
    alloc-d1) cache=none depth=1 mode=alloc ;;
    alloc-d32) cache=none depth=32 mode=alloc ;;
    alloc-wb-d32) cache=writeback depth=32 mode=alloc ;;
    rewrite-d32) cache=none depth=32 mode=rewrite ;;
    rewrite-d1) cache=none depth=1 mode=rewrite ;;
    read-d32) cache=none depth=32 mode=read ;;
    read-d1) cache=none depth=1 mode=read ;;
    esac
    if [ "$tool" = fio ]; then
        local direct=1 log=write.iolog
        [ $mode = read ] && log=read.iolog
        [ $cache = writeback ] && direct=0
        drop_caches
        bench_warm
        # fio's own run time (its start-up, ~0.3 s, is not I/O)
        BENCH_T=$(fio --name=floor --filename=floor.raw --read_iolog=$log --bs=4k \
            --direct=$direct --iodepth="$depth" --ioengine=io_uring --end_fsync=1 \
            --output-format=json |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["job_runtime"] / 1000)')
        return
    fi
    case $tool in
    qemu-img) bin=$QEMU_IMG ;;
    qimg) bin=$QIMG ;;
    qimg-before) bin=$QIMG_BEFORE ;;
    esac
    local args=(-f qcow2 -c "$COUNT" -s 4k -S "$STEP" -d "$depth" -t "$cache")
    [ "$tool" != qemu-img ] && args+=("${QIMG_BENCH_ARGS[@]}")
    if [ $mode = alloc ]; then
        img=alloc.qcow2
        rm -f $img
        "$QEMU_IMG" create -q -f qcow2 $img "${SIZE_GIB}G"
        args+=(-w)
    else
        img=prep-$tool.qcow2
        prepared "$bin" "$img"
        [ $mode = rewrite ] && args+=(-w --pattern=7)
    fi
    drop_caches
    bench_time BENCH_T "$bin" bench "${args[@]}" "$img"
    [ $mode = alloc ] && rm -f alloc.qcow2
}

iops() { awk -v c="$COUNT" -v t="$1" 'BEGIN { if (t > 0) printf "%.1fk", c / t / 1000; else print "-" }'; }

declare -A MED=()
for w in $CASES; do
    wcase() { run_case "$w" "$1"; }
    bench_rounds "$ROUNDS" wcase "${tools[@]}"
    for t in "${tools[@]}"; do
        read -ra ts <<<"${BENCH_RESULT[$t]}"
        MED[$w.$t]=$(bench_median "${ts[@]}")
        echo "# $w $t: ${BENCH_RESULT[$t]}"
    done
    bench_reset
done

echo
printf '%-14s' workload
for t in "${tools[@]}"; do printf ' %10s' "$t"; done
printf ' %12s %12s\n' "qimg/qemu" "qimg/fio"
for w in $CASES; do
    printf '%-14s' "$w"
    for t in "${tools[@]}"; do printf ' %10s' "$(iops "${MED[$w.$t]}")"; done
    printf ' %12s %12s\n' "$(bench_ratio "${MED[$w.qemu-img]}" "${MED[$w.qimg]}")" \
        "$(bench_ratio "${MED[$w.fio]}" "${MED[$w.qimg]}")"
done
