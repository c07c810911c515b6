#!/bin/bash
# 196-blkdebug-as-qemu: what qemu-img and qemu-io 7.2 say about a QEMU
# blkdebug node (issue 29), against them:
#  - info: "disk size: unavailable" under a format and over one
#    (block/faulty.c invariant 10);
#  - convert from an image whose read_aio rule fails its data read: only
#    qemu-img's "error while reading at byte 0: ..." line and exit code 1,
#    no qimg detail under it (block/faulty.c invariant 11, api/copy.c);
#  - write_aio rules over the raw format: a data write raises it, a zero
#    write does not, a probed raw image's block-0 write does (raw/raw.c
#    invariant 1).
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io

"$QEMU_IMG" create -q -f raw r.raw 1M
"$QEMU_IO" -f raw -c 'write -P 1 0 64k' r.raw >/dev/null
qi create -q -f qcow2 a.qcow2 1M
qio a.qcow2 'write -P 9 0 64k'

img='"image": {"driver": "file", "filename": "r.raw"}'
dbg() { # dbg EVENT ERRNO: raw over a blkdebug node with one inject-error rule
    echo "json:{\"driver\": \"raw\", \"file\": {\"driver\": \"blkdebug\", $img," \
        "\"inject-error\": [{\"event\": \"$1\", \"errno\": $2}]}}"
}

# info: no disk size for the blkdebug node, whichever side of the format
same_as_qemu_err info "$(dbg read_aio 5)"
same_as_qemu_err info "json:{\"driver\": \"raw\", \"file\": {\"driver\": \"blkdebug\", $img}}"
same_as_qemu_err info 'json:{"driver": "blkdebug", "image": {"driver": "raw",
    "file": {"driver": "file", "filename": "r.raw"}}}'
same_as_qemu_err info -f raw blkdebug::r.raw
same_as_qemu_err info -f qcow2 blkdebug::a.qcow2

# convert: qemu-img's one line, its exit code
for e in 5 28; do
    same_as_qemu_err convert -f raw -O raw "$(dbg read_aio $e)" out.raw
    same_as_qemu_err convert -O qcow2 "$(dbg read_aio $e)" out.qcow2
done

# write_aio over raw: the write fails, a zero write passes, the next write
# and the reads see what QEMU's see ("once" rules: the close's flush is
# not failed, api/image.c invariant 3)
once() { # once EVENT ERRNO
    echo "json:{\"driver\": \"raw\", \"file\": {\"driver\": \"blkdebug\", $img," \
        "\"inject-error\": [{\"event\": \"$1\", \"errno\": $2, \"once\": true}]}}"
}
"$QEMU_IMG" create -q -f raw base.raw 1M
"$QEMU_IO" -f raw -c 'write -P 1 0 64k' base.raw >/dev/null
for e in 5 28; do
    IO_RAW=1 IO_IMAGE=r.raw IO_FROM=base.raw same_as_qemu_io "write_aio errno $e" \
        -c 'write -P 3 0 4k' -c 'write -P 4 4k 4k' -c 'read -P 1 0 4k' \
        -c 'read -P 4 4k 4k' "$(once write_aio $e)"
    IO_RAW=1 IO_IMAGE=r.raw IO_FROM=base.raw same_as_qemu_io "write_aio errno $e, zero write" \
        -c 'write -z 0 4k' -c 'write -P 5 8k 4k' -c 'read -P 0 0 4k' \
        -c 'read -P 1 8k 4k' "$(once write_aio $e)"
done
printf '[inject-error]\nevent = "write_aio"\nerrno = "5"\nonce = "on"\n' >wr.conf
IO_RAW=1 IO_IMAGE=r.raw IO_FROM=base.raw same_as_qemu_io "probed raw, block 0" \
    -c 'write -P 6 0 4k' -c 'write -P 7 0 4k' -c 'read -P 7 0 4k' blkdebug:wr.conf:r.raw

finish
