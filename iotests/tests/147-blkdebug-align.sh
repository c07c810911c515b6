#!/bin/bash
# QEMU's blkdebug "align" (issue 29, QEMU's 033 and 268): -o
# driver=qcow2,file.align=N over a "blkdebug::" name, and "align" in a
# json: blkdebug node, pad every request to N (block/limits.c; json-name.c
# invariant 13).  Against qemu-io 7.2 on copies of one image: 033's
# aligned and misaligned (aio_)write -z, 268's 512-byte write into a
# 2 KiB cluster under a 4 KiB alignment, concurrent unaligned writes into
# one block, discards -- the same output and the same guest data, and a
# clean check; then the refusals as qemu-io words them.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# both DESC OPEN ARGS...: qemu-io and qimg io ARGS after "open OPEN" on
# fresh copies of base.qcow2 at img.qcow2 (common.sh's same_as_qemu_io)
export IO_FROM=base.qcow2 IO_IMAGE=img.qcow2
both() {
    local desc=$1 open=$2
    shift 2
    same_as_qemu_io "$desc" -c "open ${open//IMG/$PWD/img.qcow2}" "$@"
}

qi create -q -f qcow2 base.qcow2 1M
for align in 512 4k 64k; do
    O="-o driver=qcow2,file.align=$align blkdebug::IMG"
    for z in "write -z" "aio_write -z"; do
        both "033 $z, align $align" "$O" -c 'write -P 0xa 0x200 0x400' \
            -c 'write -P 0xa 0x20000 0x600' -c "$z 0x400 0x20000" -c 'aio_flush' \
            -c 'read -P 0xa 0x200 0x200' -c 'read -P 0 0x400 0x20000' \
            -c 'read -P 0xa 0x20400 0x200' -c 'write -P 0xb 0 0x1000' \
            -c "$z 0x200 0x200" -c 'aio_flush' -c 'read -P 0xb 0 0x200' \
            -c 'read -P 0 0x200 0x200' -c 'read -P 0xb 0x400 0xc00'
    done
    IO_SORT=1 both "unaligned aio_writes into one block, align $align" "$O" \
        -c 'aio_write -P 1 0x10000 0x200' -c 'aio_write -P 2 0x10200 0x200' \
        -c 'aio_write -P 3 0x10400 0x300' -c 'aio_write -P 4 0x10700 0x100' -c 'aio_flush' \
        -c 'read -P 1 0x10000 0x200' -c 'read -P 2 0x10200 0x200' \
        -c 'read -P 3 0x10400 0x300' -c 'read -P 4 0x10700 0x100'
    both "discard, align $align" "$O" -c 'write -P 5 0 128k' -c 'discard 0x200 64k' \
        -c 'read -P 5 0 0x200' -c 'read -P 5 0x10200 0xfe00'
done

# 268: a 512-byte write into an unallocated 2 KiB cluster, 4 KiB alignment
qi create -q -f qcow2 -o cluster_size=2k base.qcow2 1M
both "268" "-o driver=qcow2,file.align=4k blkdebug::IMG" -c 'write 0 512' -c 'read -P 0xcd 0 512'

# the json: form: "align" in the blkdebug node
qi create -q -f qcow2 base.qcow2 1M
both "json align" "json:{'driver': 'qcow2', 'file': {'driver': 'blkdebug', 'align': 4096, 'image.filename': 'IMG'}}" \
    -c 'write -P 6 0x300 0x1100' -c 'read -P 6 0x300 0x1100' -c 'read -P 0 0 0x300'

# refusals
for a in 3 0x3000 2G x; do
    both "align $a refused" "-o driver=qcow2,file.align=$a blkdebug::IMG" -c 'read 0 512'
done
both "align of a plain file refused" "-o driver=qcow2,file.align=4k IMG" -c 'read 0 512'
finish
