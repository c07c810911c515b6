#!/bin/bash
# 190-close-flush-data-file: what a close says after a failed flush, as
# qemu-io 7.2 says it (QEMU iotest 244's "Flushing should flush the data
# file"; api/image.c invariant 3, qcow2/meta.c invariant 13).  QEMU's
# bdrv_close ignores its flush's result and only qcow2's own close code
# speaks (its two cache lines, 181); here a qcow2 image's data file fails
# every flush (blkdebug, iotype flush) while its metadata file works:
#  - write, flush: the flush command fails (exit 1) and prints nothing,
#    and the close prints nothing more (qimg printed "Failed to flush ...:
#    writes are refused until the image is reopened" again);
#  - write alone: the close's own flush fails, the caches it writes back
#    work: nothing printed, exit 0;
#  - the same through --image-opts and with the data file as a json
#    object under -f qcow2.
# (a failed vmstate write told once, to the write: 156 and 181.)
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f qcow2 -o data_file=t.data t.qcow2 64M || exit 1
bd="'driver': 'blkdebug', 'inject-error': [{'event': 'none', 'iotype': 'flush'}],
    'image': {'driver': 'file', 'filename': 't.data'}"
json="json:{'driver': 'qcow2', 'file': {'driver': 'file', 'filename': 't.qcow2'},
    'data-file': {$bd}}"
opts="driver=qcow2,file.filename=t.qcow2,data-file.driver=blkdebug"
opts+=",data-file.inject-error.0.event=none,data-file.inject-error.0.iotype=flush"
opts+=",data-file.image.driver=file,data-file.image.filename=t.data"

same_as_qemu_io "json: write, flush" -t writeback -c 'write 0 512' -c flush "$json"
same_as_qemu_io "json: write" -t writeback -c 'write 0 512' "$json"
same_as_qemu_io "json: write, flush, read" -t writeback -c 'write -P 7 0 512' -c flush \
    -c 'read -P 7 0 512' "$json"
same_as_qemu_io "--image-opts: write, flush" -t writeback -c 'write 0 512' -c flush \
    --image-opts "$opts"
same_as_qemu_io "--image-opts: write" -t writeback -c 'write 0 512' --image-opts "$opts"

finish
