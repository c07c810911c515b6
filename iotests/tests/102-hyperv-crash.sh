#!/bin/bash
# Power-loss states of guest I/O into VHD (dynamic), VHDX (dynamic, fixed)
# and VDI images (the crash-state explorer, iotests/crash/): random tagged
# writes, zero writes, discards and flushes through `qimg io` on the
# recording node, each case CRASH_STATES states (QIMG_LONG=1: 200), judged
# by crash/formats.py -- a VHD state must open in qemu-img, a VDI state
# must pass qemu-img check (the header counting not yet referenced blocks
# is a leak, vdi.c invariant 3), a VHDX state must pass qemu-img check,
# after QEMU's own replay of its log when it has one to replay (the log is
# what makes VHDX metadata updates safe) -- and every write a completed
# flush covered must read back.  qemu-io over QEMU's blklogwrites runs the
# same scripts as the positive control (reported, not judged).
. "$(dirname "$0")/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3
# a few states per case keep make test short; QIMG_LONG=1 explores 200
if [ -z "${QIMG_LONG:-}" ]; then
    CRASH_STATES=${CRASH_HYPERV_STATES:-6}
    CRASH_CONTROL_STATES=4
fi

M=$((1 << 20))
FORMAT=vpc crash_io_case vpc-dynamic $((64 * M)) $((2 * M)) "" --ops 60 --max-len $((3 * M))
FORMAT=vpc NO_CONTROL=1 crash_io_case vpc-spread $((256 * M)) $((2 * M)) "" --ops 40 --spread \
    --max-len $M
FORMAT=vdi crash_io_case vdi-dynamic $((64 * M)) $M "" --ops 60 --max-len $((2 * M))
FORMAT=vdi NO_CONTROL=1 crash_io_case vdi-spread $((512 * M)) $M "" --ops 40 --spread \
    --max-len $M
FORMAT=vhdx crash_io_case vhdx-dynamic $((64 * M)) $M "-o block_size=1M" --ops 60 \
    --max-len $((2 * M))
FORMAT=vhdx NO_CONTROL=1 crash_io_case vhdx-8m $((128 * M)) $((8 * M)) "" --ops 40 \
    --spread --max-len $((2 * M))
FORMAT=vhdx NO_CONTROL=1 crash_io_case vhdx-fixed $((32 * M)) $M \
    "-o subformat=fixed,block_size=1M,block_state_zero=off" --ops 50 --max-len $M
# the asynchronous path: writes in flight (qimg io aio_write; no control)
FORMAT=vhdx NO_CONTROL=1 crash_io_case vhdx-aio $((64 * M)) $M "-o block_size=1M" \
    --ops 60 --aio
FORMAT=vpc NO_CONTROL=1 crash_io_case vpc-aio $((64 * M)) $((2 * M)) "" --ops 60 --aio

crash_summary
finish
