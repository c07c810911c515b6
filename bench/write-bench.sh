#!/bin/bash
# bench/write-bench.sh: the qcow2 write path against qemu-img and the floor.
#
# Three workloads, each run by "qemu-img bench -w" and "qimg bench -w" with
# the same parameters on a fresh qcow2 image (64 KiB clusters), and by the
# floor (the same requests on a plain preallocated raw file, plus dd for the
# sequential case):
#   seq-1M      SEQ_MIB (default 1024) sequential 1 MiB writes into an empty
#               image (allocating, whole clusters)
#   rand-alloc  RAND_COUNT (default 65536) 4 KiB writes scattered over a
#               SIZE_GIB (default 4) image (16384 into 1 GiB took 0.2-0.6 s,
#               too short to rise above the noise): offsets advance by a step of
#               9973 x 4 KiB modulo the image size (qemu-img bench has no
#               random mode; the odd step visits the 4 KiB blocks in a
#               scattered order), nearly every one allocating a cluster
#   rand-rewrite  the same requests again on an image that already holds
#               them (no allocation: L2 lookups and data writes only)
# Queue depth DEPTH (default 16) requests in flight, cache CACHE (default
# writeback; "none" for O_DIRECT), FLUSH_INTERVAL (default none) requests
# between flushes (qemu-img bench --flush-interval; there is always a flush
# at the end).  QIMG_BEFORE=/path/to/qimg adds that binary as a fourth tool
# ("qimg-before") in the same interleaved rounds, for before/after tables.
# WITH_BITMAP=1 adds "qimg-bitmap" and "qemu-img-bitmap" to the scattered
# rows: the same tool on an image with one enabled persistent dirty bitmap
# (qemu-img bitmap --add, 64 KiB granularity), whose bits they maintain and
# store at close -- the cost of bitmap maintenance.
# Every run: memwarm first, wall time of
# the whole process (which flushes at close) plus a sync.  ROUNDS rounds
# (default 5), tools interleaved in a rotating order; the table shows
# medians, the median of the per-round ratios to qemu-img (lower is
# better) and the per-round ratios.
set -u
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-5}
DEPTH=${DEPTH:-16}
CACHE=${CACHE:-writeback}
FLUSH_INTERVAL=${FLUSH_INTERVAL:-}
QIMG_BEFORE=${QIMG_BEFORE:-}
flush_args=()
[ -n "$FLUSH_INTERVAL" ] && flush_args=(--flush-interval="$FLUSH_INTERVAL")
qimgs=(qimg)
[ -n "$QIMG_BEFORE" ] && qimgs+=(qimg-before)
scattered=("${qimgs[@]}")
[ -n "${WITH_BITMAP:-}" ] && scattered+=(qimg-bitmap qemu-img-bitmap)
SEQ_MIB=${SEQ_MIB:-1024}
SIZE_GIB=${SIZE_GIB:-4}
RAND_COUNT=${RAND_COUNT:-65536}
STEP=$((9973 * 4096))
cd "$BENCH_SCRATCH" || exit 1
bench_require_space $((SIZE_GIB * 3 + SEQ_MIB / 1024 * 2 + 2))

echo "# write-bench: depth $DEPTH, cache $CACHE, flush every ${FLUSH_INTERVAL:-(end only)}, $ROUNDS rounds"
echo "# $("$QEMU_IMG" --version | head -n 1); $("$QIMG" --version | head -n 1)"
echo "# disk: $(df -h --output=avail,target "$BENCH_SCRATCH" | tail -n 1)"

fresh_qcow2() {
    rm -f "$1"
    "$QEMU_IMG" create -q -f qcow2 "$1" "$2"
    sync
}

# fresh_bitmap IMG SIZE: a fresh qcow2 image with one enabled bitmap
fresh_bitmap() {
    fresh_qcow2 "$1" "$2"
    "$QEMU_IMG" bitmap --add "$1" b
    sync
}

fresh_raw() {
    rm -f "$1"
    "$QEMU_IMG" create -q -f raw -o preallocation=full "$1" "$2"
    sync
}

# ---- sequential 1 MiB writes ----
seq_args=(-w -c "$SEQ_MIB" -s 1M -d "$DEPTH" -t "$CACHE" "${flush_args[@]}")
seq_case() {
    case $1 in
    qemu-img)
        fresh_qcow2 seq.qcow2 "${SEQ_MIB}M"
        bench_time BENCH_T "$QEMU_IMG" bench -f qcow2 "${seq_args[@]}" seq.qcow2
        ;;
    qimg)
        fresh_qcow2 seq.qcow2 "${SEQ_MIB}M"
        bench_time BENCH_T "$QIMG" bench -f qcow2 "${seq_args[@]}" seq.qcow2
        ;;
    qimg-before)
        fresh_qcow2 seq.qcow2 "${SEQ_MIB}M"
        bench_time BENCH_T "$QIMG_BEFORE" bench -f qcow2 "${seq_args[@]}" seq.qcow2
        ;;
    floor-raw)
        fresh_raw seq.raw "${SEQ_MIB}M"
        bench_time BENCH_T "$QEMU_IMG" bench -f raw "${seq_args[@]}" seq.raw
        ;;
    floor-dd)
        rm -f seq.raw
        local flags=conv=fdatasync
        [ "$CACHE" = none ] && flags="$flags oflag=direct"
        # shellcheck disable=SC2086
        bench_time BENCH_T dd if=/dev/zero of=seq.raw bs=1M count="$SEQ_MIB" $flags status=none
        ;;
    esac
    rm -f seq.qcow2 seq.raw
}
bench_rounds "$ROUNDS" seq_case qemu-img "${qimgs[@]}" floor-raw floor-dd
echo
bench_table "sequential 1 MiB writes, ${SEQ_MIB} MiB into an empty image" qemu-img \
    qemu-img "${qimgs[@]}" floor-raw floor-dd
bench_reset

# ---- scattered 4 KiB writes: allocating, then rewriting ----
rand_args=(-w -c "$RAND_COUNT" -s 4k -S "$STEP" -d "$DEPTH" -t "$CACHE" "${flush_args[@]}")
alloc_case() {
    local tool=$1 img=alloc.qcow2 fmt=qcow2
    case $tool in
    qemu-img | qimg | qimg-before) fresh_qcow2 $img "${SIZE_GIB}G" ;;
    qimg-bitmap | qemu-img-bitmap)
        fresh_bitmap $img "${SIZE_GIB}G"
        tool=${tool%-bitmap}
        ;;
    floor-raw)
        img=alloc.raw fmt=raw
        fresh_raw $img "${SIZE_GIB}G"
        tool=qemu-img
        ;;
    esac
    case $tool in
    qemu-img) bench_time BENCH_T "$QEMU_IMG" bench -f $fmt "${rand_args[@]}" $img ;;
    qimg) bench_time BENCH_T "$QIMG" bench -f $fmt "${rand_args[@]}" $img ;;
    qimg-before) bench_time BENCH_T "$QIMG_BEFORE" bench -f $fmt "${rand_args[@]}" $img ;;
    esac
    rm -f $img
}
bench_rounds "$ROUNDS" alloc_case qemu-img "${scattered[@]}" floor-raw
echo
bench_table "scattered 4 KiB allocating writes, $RAND_COUNT into ${SIZE_GIB} GiB" qemu-img \
    qemu-img "${scattered[@]}" floor-raw
bench_reset

# each tool rewrites an image it allocated itself (untimed first pass)
rewrite_case() {
    local tool=$1 img=rw-$1.img fmt=qcow2 bin
    case $tool in
    qemu-img | qemu-img-bitmap) bin=$QEMU_IMG ;;
    qimg | qimg-bitmap) bin=$QIMG ;;
    qimg-before) bin=$QIMG_BEFORE ;;
    floor-raw) bin=$QEMU_IMG fmt=raw ;;
    esac
    if [ ! -e "$img" ]; then
        if [ $fmt = raw ]; then
            fresh_raw "$img" "${SIZE_GIB}G"
        else
            case $tool in
            *-bitmap) fresh_bitmap "$img" "${SIZE_GIB}G" ;;
            *) fresh_qcow2 "$img" "${SIZE_GIB}G" ;;
            esac
            "$bin" bench -f qcow2 "${rand_args[@]}" "$img" >/dev/null
            sync
        fi
    fi
    bench_time BENCH_T "$bin" bench -f $fmt --pattern=7 "${rand_args[@]}" "$img"
}
bench_rounds "$ROUNDS" rewrite_case qemu-img "${scattered[@]}" floor-raw
rm -f rw-*.img
echo
bench_table "scattered 4 KiB rewrites of allocated clusters, $RAND_COUNT" qemu-img \
    qemu-img "${scattered[@]}" floor-raw
