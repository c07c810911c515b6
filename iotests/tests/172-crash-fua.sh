#!/bin/bash
# 172-crash-fua: power-loss states of guest writes with FUA (qimg io
# aio_write -f, crash.py workload --fua).  The recording node logs a FUA write
# that reaches it as durable by itself -- not as write + flush -- and
# crash.py keeps it, whole, in every state that holds it (block/record.c
# invariant 6); the workload model asks that a FUA write whose marker is
# visible reads back (or what a later op put there).  qcow2 answers a FUA
# write with a flush of the image (qcow2/write.c); a monolithicFlat VMDK
# hands the FUA to its extent file with the data, so its log holds FUA
# writes (--min-fua-writes: the precise path is taken).  Writeback and -t
# none.  Not a sparse VMDK: a FUA write to a new grain comes back before
# its grain table entry is durable (vmdk/write.c drops the flag there), and
# this model fails it.
. "$(dirname "$0")/../common.sh"
CRASH_STATES=${CRASH_STATES:-6}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img python3

M=$((1 << 20))
NO_CONTROL=1 crash_io_case fua-qcow2 $((64 * M)) 65536 "" --ops 80 --fua 0.3
IO_CACHE=none NO_CONTROL=1 crash_io_case fua-qcow2-none $((16 * M)) 4096 \
    "-o cluster_size=4k" --ops 80 --fua 0.3
FORMAT=vmdk NO_CONTROL=1 EXPLORE_ARGS="--min-fua-writes 4" crash_io_case fua-vmdk-flat \
    $((16 * M)) 65536 "-o subformat=monolithicFlat" --ops 60 --max-len $((2 * M)) --fua 0.4
FORMAT=vmdk IO_CACHE=none NO_CONTROL=1 EXPLORE_ARGS="--min-fua-writes 4" \
    crash_io_case fua-vmdk-flat-none $((16 * M)) 65536 "-o subformat=monolithicFlat" --ops 60 \
    --max-len $((2 * M)) --fua 0.4

crash_summary
finish
