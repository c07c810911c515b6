#!/bin/bash
# Power-loss states of guest I/O on encrypted images (the crash-state
# explorer, iotests/crash/, with LUKS=PASS): random tagged writes of every
# alignment (partial sectors: qcow2 write.c invariant 15), zero writes,
# discards and flushes through `qimg io` on the recording node, synchronous
# and with writes in flight.  Each state is judged with qemu-img opening the
# image with its key: no corruption, and every write a completed flush
# covered reads back.  crash.py decrypts the log with a LUKS reader of its
# own to find the workload's markers, and fails if the recording shows any
# of the workload's data in the clear.  qemu-io over QEMU's blklogwrites
# runs the same script as the positive control.
. "${0%/*}/../common.sh"
. "$IOTESTS_DIR/crash/lib.sh"
requires qimg qemu-img qemu-io python3
python3 -c 'import cryptography' 2>/dev/null || missing "python3-cryptography not found"

M=$((1 << 20))
# make test: XTS (the default), 64k clusters, writes in flight; QIMG_LONG=1
# (make check-long) adds synchronous XTS and CBC-ESSIV 4k, CBC-ESSIV with
# extended L2 in flight, each with qemu-io's control (which also proves the
# LUKS reader finds the markers in QEMU's own encrypted writes).
if [ -z "${QIMG_LONG:-}" ]; then
    LUKS=hunter2 NO_CONTROL=1 crash_io_case luks-xts-aio $((16 * M)) 65536 "" --ops 40 --aio
else
    LUKS=hunter2 crash_io_case luks-xts-64k $((16 * M)) 65536 "" --ops 60
    LUKS=hunter2 crash_io_case luks-aio-xl2 $((16 * M)) 32768 \
        "-o extended_l2=on,cluster_size=32k,encrypt.cipher-alg=aes-128,encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv" \
        --ops 60 --aio
    LUKS=hunter2 crash_io_case luks-cbc-4k $((8 * M)) 4096 \
        "-o cluster_size=4k,encrypt.cipher-alg=aes-128,encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv" \
        --ops 60
fi

crash_summary
finish
