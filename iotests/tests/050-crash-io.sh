#!/bin/bash
# Power-loss states of guest I/O (the crash-state explorer, iotests/crash/):
# random tagged writes, zero writes, discards and flushes through `qimg io`
# on the recording node, in every configuration the write path knows:
# v2 and v3, cluster sizes 512 B to 2 MiB, refcount widths 1 to 64, extended
# L2, lazy refcounts, an external data file, a backing file, and far-apart
# offsets that grow the L1 and the refcount table.  Each case rebuilds
# CRASH_STATES states (below) from the log and judges them with qemu-img:
# no corruption (leaks are fine; a dirty image must be repaired clean by
# check -r all), and every write a completed flush covered reads back.  qemu-io over QEMU's blklogwrites runs the same scripts as the
# positive control (reported, not judged).  The aio cases drive the
# asynchronous path with writes in flight (crash.py workload --aio), with
# the page cache and with O_DIRECT.
. "${0%/*}/../common.sh"
# make test: every case, 4 power-loss states each (identical states are
# judged once), the positive control (2 states) for the first case only
# (crash/lib.sh: it judges nothing of qimg's); QIMG_LONG=1 (make
# check-long): lib.sh's 200 states, and the control (100) in every case
CRASH_STATES=${CRASH_STATES:-4}
CRASH_CONTROL_STATES=${CRASH_CONTROL_STATES:-2}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3

M=$((1 << 20))
crash_io_case v3-64k $((64 * M)) 65536 "" --ops 80
crash_io_case v3-4k $((16 * M)) 4096 "-o cluster_size=4k" --ops 80
crash_io_case v2-64k $((64 * M)) 65536 "-o compat=0.10" --ops 80
crash_io_case rc1-512 $((4 * M)) 512 "-o cluster_size=512,refcount_bits=1" --ops 60 \
    --max-len 65536
crash_io_case rc64-2m $((256 * M)) 2097152 "-o cluster_size=2M,refcount_bits=64" \
    --ops 40 --max-len $((4 * M))
crash_io_case rc8-16k $((32 * M)) 16384 "-o cluster_size=16k,refcount_bits=8" --ops 80
crash_io_case xl2-32k $((64 * M)) 32768 "-o extended_l2=on,cluster_size=32k" --ops 80
crash_io_case lazy-64k $((64 * M)) 65536 "-o lazy_refcounts=on" --ops 80
# discards of up to 4 MiB, then writes past the end of the file: the flush
# that lets them reuse the freed clusters (qcow2 alloc.c invariant 10)
crash_io_case reuse-64k $((64 * M)) 65536 "" --ops 60 --max-len $((4 * M))
NO_CONTROL=1 crash_io_case datafile-64k $((64 * M)) 65536 "-o data_file=img.data" --ops 80
BACKING=$((8 * M)) crash_io_case backing-64k $((32 * M)) 65536 "" --ops 80
BACKING=$((2 * M)) crash_io_case backing-v2-4k $((8 * M)) 4096 "-o compat=0.10,cluster_size=4k" \
    --ops 80
# 512-byte clusters over 4 GiB: far offsets grow the L1; 64-bit refcounts
# fill refcount blocks fast and grow the refcount table
crash_io_case grow-512 $((4096 * M)) 512 "-o cluster_size=512,refcount_bits=64" --ops 60 \
    --spread --max-len 65536

# the asynchronous path (qimg io aio_write, api/aio.c; fastmap.c rewrites in
# place): up to 8 tagged writes in flight; qemu-io has no aio_write -s, so
# no control
NO_CONTROL=1 crash_io_case aio-64k $((64 * M)) 65536 "" --ops 100 --aio
NO_CONTROL=1 crash_io_case aio-xl2-lazy $((32 * M)) 16384 \
    "-o extended_l2=on,cluster_size=16k,lazy_refcounts=on" --ops 100 --aio
# the same with O_DIRECT (-t none: the io_uring engine's rewrites, grow.c's
# file growth and write.c invariants 13-14 with writes in flight), refcount
# widths 1 and 64
IO_CACHE=none NO_CONTROL=1 crash_io_case aio-none-64k $((64 * M)) 65536 "" --ops 100 --aio --aio-depth 32
IO_CACHE=none NO_CONTROL=1 crash_io_case aio-none-rc1-4k $((16 * M)) 4096 \
    "-o cluster_size=4k,refcount_bits=1" --ops 100 --aio
IO_CACHE=none NO_CONTROL=1 crash_io_case aio-none-rc64-xl2 $((32 * M)) 32768 \
    "-o extended_l2=on,cluster_size=32k,refcount_bits=64,lazy_refcounts=on" --ops 100 --aio

crash_summary
finish
