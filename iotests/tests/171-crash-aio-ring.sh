#!/bin/bash
# 171-crash-aio-ring: power-loss states of the io_uring engine's allocating
# writes (api/aio.c invariant 13, qcow2/write.c invariant 18: planned on
# the submitting thread, data on the ring, L2 link on its completion),
# recorded through the recording node, which the ring drives for its file
# child and which logs each ring write when it completes (block/record.c
# invariant 5, block/uring.c invariant 6).  Two workloads on record:
# images with -t none:
#  - crash.py's tagged workload through `qimg io` aio_write, up to 32 in
#    flight (flushed writes survive, no data that was never written, no
#    corruption: crash.py's model);
#  - `qimg bench -w -d 32` with flushes (--flush-interval) over fresh
#    clusters: no corruption, and every sector of every state reads
#    zeros or what the run left there (no data that was never written).
# Each case asks the log for a minimum of ring writes to fresh ranges
# (crash.py --min-ring-allocs), so it cannot pass without the ring, and
# checks the whole log's order (crash.py --check-order, crash/order.py):
# every L2 entry that links a cluster is written after a flush covered the
# cluster's first write (write.c invariant 1).  That check, not the sampled
# states, is what sees an L2 entry that could reach the disk before its
# data: on the ring path the guest flush's first fdatasync covers the
# links made before it, and the L2 cache's depends_on_flush (set by each
# link, and by the refcount dependency when refcounts are accurate) the
# links made while that fdatasync ran unlocked (meta.c invariant 12) --
# without a drain (--no-drain) and with lazy refcounts, the link's own
# alone.  Dropping that (and zeroing the data_gen the debug assertion of
# cache.c invariant 4 checks, which alone changes no write or flush)
# passed every state here, and fails the order check of bench-seq-nodrain
# (lazy refcounts for that: 196 of its 400 links).
# Cluster sizes 4k, 64k and 2M, extended L2, lazy refcounts, refcount
# widths 1 and 64; the same workloads with writeback (the pool's path)
# as the comparison.
# make test leaves out (QIMG_LONG=1 runs them) the cases whose image
# options another case of the same path covers: ring-lazy-64k and
# wb-rc1-4k (lazy refcounts: ring-rc64-xl2-lazy; refcount width 1 with
# writeback: wb-64k's path, ring-rc1-4k's width), and the bench workload
# over plain fresh clusters for 4k, 2M, extended L2 and lazy refcounts,
# refcount widths 1 and 64, and writeback (bench-4k, bench-2m,
# bench-xl2-lazy, bench-rc1, bench-rc64, bench-wb-64k: the tagged ring
# cases take those options through the same ring plan, and bench-64k takes
# the bench workload through it); the backing-file, --no-drain and
# sequential cases (the ring plan's link ordering and its joins) all run.
# (~8 s of the explorer's ~31 s of CPU in a run here.)
. "${0%/*}/../common.sh"
CRASH_STATES=${CRASH_STATES:-6}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img python3

# sampled LABEL: whether the case runs (the header: make test leaves some
# out)
sampled() {
    [ -n "${QIMG_LONG:-}" ] && return 0
    case $1 in
    ring-lazy-64k | wb-rc1-4k | bench-4k | bench-2m | bench-xl2-lazy | bench-rc1 | \
        bench-rc64 | bench-wb-64k) return 1 ;;
    esac
}

M=$((1 << 20))

# tagged workloads (crash.py's model); no positive control: qemu-io has no
# aio_write -s
for c in "4k 4096 16 -o cluster_size=4k" \
    "64k 65536 64 -o cluster_size=64k" \
    "2m 2097152 64 -o cluster_size=2M" \
    "xl2-32k 32768 64 -o extended_l2=on,cluster_size=32k" \
    "lazy-64k 65536 64 -o lazy_refcounts=on" \
    "rc1-4k 4096 16 -o cluster_size=4k,refcount_bits=1" \
    "rc64-xl2-lazy 65536 64 -o extended_l2=on,refcount_bits=64,lazy_refcounts=on"; do
    read -r label cs mib copts <<<"$c"
    sampled "ring-$label" || continue
    IO_CACHE=none NO_CONTROL=1 EXPLORE_ARGS="--min-ring-allocs 8 --check-order" \
        crash_io_case "ring-$label" $((mib * M)) "$cs" "$copts" --ops 100 --aio \
        --aio-depth 32
done
IO_CACHE=writeback NO_CONTROL=1 EXPLORE_ARGS=--check-order crash_io_case wb-64k $((64 * M)) \
    65536 "" --ops 100 --aio --aio-depth 32
sampled wb-rc1-4k && IO_CACHE=writeback NO_CONTROL=1 EXPLORE_ARGS=--check-order \
    crash_io_case wb-rc1-4k $((16 * M)) 4096 "-o cluster_size=4k,refcount_bits=1" --ops 100 \
    --aio --aio-depth 32

# bench_case LABEL CACHE MIN-RING-ALLOCS CREATE-OPTS BENCH-ARGS...: qimg
# bench -w -d 32 on a record: image, then every state judged: no
# corruption, and each sector reads what the run left there or what it
# read before (zeros; with BACKING=N the backing file's 0x33).  The image
# is 64 MiB; with BACKING=N, N MiB, over a backing file of as many bytes
# of 0x33 (every state is converted and compared whole: its size is the
# case's cost).
bench_case() {
    local label=$1 cache=$2 min=$3 copts=$4
    shift 4
    sampled "$label" || return 0
    local d=$SCRATCH/$label old=zero link=() mib=64
    mkdir -p "$d"
    if [ -n "${BACKING:-}" ]; then
        mib=$BACKING
        head -c $((mib << 20)) /dev/zero | tr '\0' 3 >"$d/backing.raw" # ('3': 0x33)
        copts="$copts -b backing.raw -F raw"
        old=$d/backing.raw
        link=(--link "backing.raw=$d/backing.raw")
    fi
    # shellcheck disable=SC2086
    (cd "$d" && "$QEMU_IMG" create -q -f qcow2 $copts img.qcow2 "${mib}M") || {
        _fail "$label: create"
        return
    }
    cp "$d/img.qcow2" "$d/base.qcow2"
    if ! (cd "$d" && "$QIMG" bench -q -w -d 32 -t "$cache" --pattern=0x5a "$@" \
        "record:$d/log:img.qcow2" >bench.out 2>&1); then
        _fail "$label: qimg bench failed"
        cat "$d/bench.out"
        return
    fi
    (cd "$d" && "$QEMU_IMG" convert -O raw img.qcow2 final.raw) || {
        _fail "$label: convert"
        return
    }
    crash_explore "qimg-$label" --log "$d/log" --base "$d/img.qcow2=$d/base.qcow2" \
        --image "$d/img.qcow2" "${link[@]}" --expect-raw "$d/final.raw,$old" \
        --expect-mode per-sector --min-ring-allocs "$min" --check-order
}
bench_case bench-4k none 400 "-o cluster_size=4k" -c 800 -s 4k -S 12k --flush-interval=100
bench_case bench-64k none 400 "" -c 800 -s 16k -S 64k --flush-interval=100
bench_case bench-2m none 20 "-o cluster_size=2M" -c 64 -s 64k -S 1M --flush-interval=32
bench_case bench-xl2-lazy none 400 "-o extended_l2=on,lazy_refcounts=on,cluster_size=32k" \
    -c 800 -s 8k -S 32k --flush-interval=100
bench_case bench-rc1 none 400 "-o cluster_size=4k,refcount_bits=1" -c 800 -s 4k -S 8k \
    --flush-interval=100
bench_case bench-rc64 none 400 "-o refcount_bits=64" -c 800 -s 4k -S 64k \
    --flush-interval=100
# flushes with writes in flight (--no-drain), whole clusters over a
# backing file: a state whose L2 entry is durable before its data reads
# zeros where the backing file's bytes belong.  Linking at the plan instead
# of on the data's completion (a throwaway patch to write.c) failed 1 or 2
# of 6 states in 3 of 4 runs here, 3 or 4 of 24 in 3 of 3: 20 states.
# The image and its backing file are as large as the writes reach (every
# state is converted and compared whole: 64 MiB of them cost 12 s of CPU
# for the two cases): 256 fresh 64 KiB clusters filling 16 MiB, a flush
# each 32 writes; 800 4 KiB writes 8 KiB apart in 8 MiB.  (Linking at the
# plan in write-ring.c failed 1 to 6 of the 20 states in 4 of 4 runs here,
# and 1 of the 6 of the 4k case in 2 of 3.)
CRASH_STATES=20 BACKING=16 bench_case bench-backing-nodrain none 200 "" -c 256 -s 64k \
    -S 64k --flush-interval=32 --no-drain
BACKING=8 bench_case bench-backing-nodrain-4k none 400 "-o cluster_size=4k" -c 800 -s 4k \
    -S 8k --flush-interval=64 --no-drain
# sequential 4k writes: the writes into a cluster a ring plan is
# allocating join it (qcow2/write-ring.c), data on the ring at once, one
# link when the plan's last write completes; without a drain and with lazy
# refcounts (the header says why)
bench_case bench-seq-64k none 50 "" -c 1600 -s 4k --flush-interval=100
bench_case bench-seq-nodrain none 50 "-o cluster_size=16k,lazy_refcounts=on" -c 1600 -s 4k \
    --flush-interval=64 --no-drain
bench_case bench-wb-64k writeback 0 "" -c 800 -s 16k -S 64k --flush-interval=100

crash_summary
finish
