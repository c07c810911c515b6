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
# none.  A monolithicSparse VMDK ends a FUA write through a grain table
# with its flush sequence (vmdk/write.c invariant 7; before, the flag was
# dropped there and this model failed it).  And a FUA zero write on a raw
# file syncs it as qemu-io's does (block/file.c invariant 2: fallocate is
# no FUA; the recording node flushes after FUA zeros itself, so this one
# is traced with strace, qemu-io's count of syncs the oracle).
. "${0%/*}/../common.sh"
CRASH_STATES=${CRASH_STATES:-6}
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3 strace

M=$((1 << 20))
NO_CONTROL=1 crash_io_case fua-qcow2 $((64 * M)) 65536 "" --ops 80 --fua 0.3
IO_CACHE=none NO_CONTROL=1 crash_io_case fua-qcow2-none $((16 * M)) 4096 \
    "-o cluster_size=4k" --ops 80 --fua 0.3
FORMAT=vmdk NO_CONTROL=1 EXPLORE_ARGS="--min-fua-writes 4" crash_io_case fua-vmdk-flat \
    $((16 * M)) 65536 "-o subformat=monolithicFlat" --ops 60 --max-len $((2 * M)) --fua 0.4
FORMAT=vmdk IO_CACHE=none NO_CONTROL=1 EXPLORE_ARGS="--min-fua-writes 4" \
    crash_io_case fua-vmdk-flat-none $((16 * M)) 65536 "-o subformat=monolithicFlat" --ops 60 \
    --max-len $((2 * M)) --fua 0.4
FORMAT=vmdk NO_CONTROL=1 crash_io_case fua-vmdk-sparse $((16 * M)) 65536 \
    "-o subformat=monolithicSparse" --ops 60 --max-len $((2 * M)) --fua 0.4
FORMAT=vmdk IO_CACHE=none NO_CONTROL=1 crash_io_case fua-vmdk-sparse-none $((16 * M)) 65536 \
    "-o subformat=monolithicSparse" --ops 60 --max-len $((2 * M)) --fua 0.4

# A FUA write or zero write on a raw file (writeback: no O_DSYNC) is synced
# before it is reported done: the first sync of the trace comes before
# qimg io's "wrote" line (qemu-io prints at exit, so only its count of
# syncs is compared).  Each traced run must succeed with nothing on stderr
# (traced: a failed one is its own FAILED line, not a wrong count), and
# the tools' outputs be the same (qemu-io words a failed command on stdout).
fua_trace() { # DESC IO-COMMAND TOOL...
    local desc=$1 c=$2
    shift 2
    rm -f z.raw && truncate -s 1M z.raw
    traced "$desc" z.trace -e trace=fdatasync,fsync,write -- "$@" -t writeback -f raw \
        -c "$c" -c aio_flush z.raw
}
for c in 'aio_write -z -f 0 64k' 'aio_write -f -P 7 0 64k'; do
    fua_trace "raw: '$c': qimg io" "$c" "$QIMG" io || continue
    assert_eq "raw: '$c' synced before it is reported" "sync(" \
        "$(grep -o -E 'sync\(|"wrote' z.trace | head -1)"
    n=$(grep -c "sync(" z.trace)
    mv traced.out m.out || exit 1
    fua_trace "raw: '$c': qemu-io" "$c" "$QEMU_IO" || continue
    assert_same_filtered "raw: '$c': output" io_filter traced.out m.out
    assert_eq "raw: '$c' + aio_flush: syncs as qemu-io's" "$(grep -c "sync(" z.trace)" "$n"
done

crash_summary
finish
