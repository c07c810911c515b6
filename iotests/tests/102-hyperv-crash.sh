#!/bin/bash
# Power-loss states of guest I/O into VHD (dynamic), VHDX (dynamic, fixed)
# and VDI images (the crash-state explorer, iotests/crash/): random tagged
# writes, zero writes, discards and flushes through `qimg io` on the
# recording node, CRASH_STATES states per case (3 in each of four cases;
# QIMG_LONG=1: 200 in each of nine), judged by crash/formats.py -- a VHD
# state must open in qemu-img, a VDI state must pass qemu-img check (the
# header counting not yet referenced blocks is a leak, vdi.c invariant 3),
# a VHDX state must pass qemu-img check, after QEMU's own replay of its log
# when it has one to replay (the log is what makes VHDX metadata updates
# safe) -- every write a completed flush covered must read back, and no
# block a table references may end past the end of the file
# (crash/formats.py check_inside_file).  qemu-io over QEMU's blklogwrites
# runs the same scripts as the positive control (reported, not judged;
# QIMG_LONG=1 only).
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3
# make test: three states in each of four cases (one per format, and the
# asynchronous path) of 30 operations, no control; QIMG_LONG=1 (make
# check-long): 200 in each of nine, of 40-60 operations, with the control
M=$((1 << 20))
if [ -z "${QIMG_LONG:-}" ]; then
    CRASH_STATES=${CRASH_HYPERV_STATES:-3}
    export NO_CONTROL=1
fi
long() { [ -n "${QIMG_LONG:-}" ]; }
ops() { if long; then echo "$1"; else echo 30; fi; }

FORMAT=vpc crash_io_case vpc-dynamic $((64 * M)) $((2 * M)) "" --ops $(ops 60) --max-len $((3 * M))
long && FORMAT=vpc NO_CONTROL=1 crash_io_case vpc-spread $((256 * M)) $((2 * M)) "" --ops $(ops 40) \
    --spread --max-len $M
FORMAT=vdi crash_io_case vdi-dynamic $((64 * M)) $M "" --ops $(ops 60) --max-len $((2 * M))
long && FORMAT=vdi NO_CONTROL=1 crash_io_case vdi-spread $((512 * M)) $M "" --ops $(ops 40) --spread \
    --max-len $M
FORMAT=vhdx crash_io_case vhdx-dynamic $((64 * M)) $M "-o block_size=1M" --ops $(ops 60) \
    --max-len $((2 * M))
long && FORMAT=vhdx NO_CONTROL=1 crash_io_case vhdx-8m $((128 * M)) $((8 * M)) "" --ops $(ops 40) \
    --spread --max-len $((2 * M))
long && FORMAT=vhdx NO_CONTROL=1 crash_io_case vhdx-fixed $((32 * M)) $M \
    "-o subformat=fixed,block_size=1M,block_state_zero=off" --ops $(ops 50) --max-len $M
# the asynchronous path: writes in flight (qimg io aio_write; no control)
FORMAT=vhdx NO_CONTROL=1 crash_io_case vhdx-aio $((64 * M)) $M "-o block_size=1M" \
    --ops $(ops 60) --aio
long && FORMAT=vpc NO_CONTROL=1 crash_io_case vpc-aio $((64 * M)) $((2 * M)) "" --ops $(ops 60) --aio

crash_summary
finish
