#!/bin/bash
# QEMU's blkdebug rules as QEMU runs them (issue 29: QEMU's 026 089), against
# qemu-io 7.2 (block/faulty.c invariants 7 and 8, faulty-config.c fact 6):
#  - an event arms its rule for every later request, reads too (QEMU's
#    default I/O types): l2_load fails the read that loads the L2 table
#    (QEMU's 089) and, with once=off, the write and read of later opens
#    that load it again (026); refblock_load fails the first write of a
#    fresh image, which loads its refcount block (026); cluster_alloc the
#    write that allocates (026).
#  - a flush with nothing written since the node's last good flush never
#    reaches the rules: closing after the failed read reports nothing (089).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# QEMU's 089: the rule given as blkdebug's inject-error list in json:
"$QEMU_IMG" create -q -f qcow2 t.qcow2 64M
"$QEMU_IO" -c 'write -P 42 0x38000 512' t.qcow2 >/dev/null
J='json:{"driver": "qcow2", "file": {"driver": "blkdebug",
  "inject-error": [{"event": "l2_load"}], "image.filename": "'$PWD/t.qcow2'"}}'
same_as_qemu_io "l2_load fails the read" -c 'read -P 42 0x38000 512' "$J"
same_as_qemu_io "l2_load: a read of an unallocated cluster loads nothing" \
    -c 'read -P 0 0 512' "$J"

conf() { # EVENT ERRNO ONCE
    printf '[inject-error]\nevent = "%s"\nerrno = "%s"\nonce = "%s"\n' "$1" "$2" "$3" >bd.conf
}

# QEMU's 026: l2_load is not raised when the L2 table is allocated, so the
# first write works; the next open loads it for a write, then for a read
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=1k base.qcow2 1G
for once in on off; do
    conf l2_load 28 "$once"
    IO_IMAGE=t.qcow2 IO_FROM=base.qcow2 same_as_qemu_io "l2_load once=$once: allocating" \
        -c 'write 0 128k' "blkdebug:$PWD/bd.conf:$PWD/t.qcow2"
    cp t.qcow2 again.qcow2
    IO_IMAGE=t.qcow2 IO_FROM=again.qcow2 same_as_qemu_io "l2_load once=$once: rewriting" \
        -c 'write 0 128k' "blkdebug:$PWD/bd.conf:$PWD/t.qcow2"
    same_as_qemu_io "l2_load once=$once: reading" \
        -c 'read 0 128k' "blkdebug:$PWD/bd.conf:$PWD/again.qcow2"
done

conf refblock_load 5 on
IO_IMAGE=t.qcow2 IO_FROM=base.qcow2 same_as_qemu_io "refblock_load once=on" \
    -c 'write 0 128k' "blkdebug:$PWD/bd.conf:$PWD/t.qcow2"
for once in on off; do
    conf cluster_alloc 5 "$once"
    IO_IMAGE=t.qcow2 IO_FROM=base.qcow2 same_as_qemu_io "cluster_alloc once=$once" \
        -c 'write 0 128k' "blkdebug:$PWD/bd.conf:$PWD/t.qcow2"
done

finish
