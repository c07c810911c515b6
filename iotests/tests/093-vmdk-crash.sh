#!/bin/bash
# Power-loss states of guest I/O into VMDK images (the crash-state explorer,
# iotests/crash/): random tagged writes, zero writes, discards (VMDK has
# none: they change nothing) and flushes through `qimg io` on the recording
# node, which records the extent files of a twoGbMaxExtentSparse image in
# the same log as its descriptor.  Judged by crash/formats.py: a state must
# pass `qemu-img check -f vmdk`, every grain table and grain the grain
# directories (and their redundant copies) reference must end inside its
# extent file (vmdk/write.c invariant 1), and every write a completed flush
# covered must read back through qemu-img convert.  Cases: monolithicSparse,
# twoGbMaxExtentSparse (writes across the first extents' 2 GiB boundary, a
# sparse 6 GiB image), writes in flight (qimg io aio_write), and
# zeroed_grain=on with grain-aligned zero writes (zeroed grain table
# entries).  make test: 3 states a case of 30 operations, no control;
# QIMG_LONG=1 (make check-long): 200 a case of 40-60 operations, two more
# cases, and qemu-io over QEMU's blklogwrites running the same scripts on
# the single-file images as the positive control (reported, not judged:
# QEMU writes a grain table entry right after its grain, with no flush
# between them).  The twoGb cases have no control: blklogwrites logs one
# file, and QEMU opens the extent files beside it.
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3
M=$((1 << 20))
G=$((1 << 30))
GRAIN=65536
if [ -z "${QIMG_LONG:-}" ]; then
    CRASH_STATES=${CRASH_VMDK_STATES:-3}
    export NO_CONTROL=1
fi
long() { [ -n "${QIMG_LONG:-}" ]; }
ops() { if long; then echo "$1"; else echo 30; fi; }
export FORMAT=vmdk

crash_io_case vmdk-sparse $((64 * M)) $GRAIN "" --ops "$(ops 60)" --max-len $((2 * M))
# 6 GiB - 6 MiB: extents of 2, 2 and 2 GiB - 6 MiB; --spread writes around
# a third of the disk (2 GiB - 2 MiB: across the first boundary), half of
# it (inside the second extent) and its end (the third)
NO_CONTROL=1 crash_io_case vmdk-2gb $((6 * G - 6 * M)) $GRAIN "-o subformat=twoGbMaxExtentSparse" \
    --ops "$(ops 50)" --spread --max-len $M
NO_CONTROL=1 crash_io_case vmdk-aio $((64 * M)) $GRAIN "" --ops "$(ops 60)" --aio
crash_io_case vmdk-zeroed $((64 * M)) $GRAIN "-o zeroed_grain=on" --ops "$(ops 60)" \
    --max-len $((2 * M)) --zero-align $GRAIN
long && NO_CONTROL=1 crash_io_case vmdk-2gb-aio $((6 * G - 6 * M)) $GRAIN \
    "-o subformat=twoGbMaxExtentSparse,zeroed_grain=on" --ops 50 --spread --max-len $M \
    --aio --zero-align $GRAIN
long && NO_CONTROL=1 crash_io_case vmdk-zeroed-aio $((64 * M)) $GRAIN "-o zeroed_grain=on" \
    --ops 60 --aio --zero-align $GRAIN

crash_summary
finish
