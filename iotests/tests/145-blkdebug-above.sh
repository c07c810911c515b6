#!/bin/bash
# QEMU's blkdebug node ABOVE a format (issue 29: QEMU's 177 204 197 215
# 251), against qemu-io / qemu-img 7.2 on copies of the same images:
# "driver": "blkdebug" with image.driver=qcow2 (api/json-blkdebug.c
# invariant 5, block/faulty.c's node over a format).
#  - request limits imposed on its user's requests (block/limits.c facts
#    1-4): padded and cut reads and writes, zero writes whose unaligned
#    pieces fall back to data, non-power-of-two zero-write and discard
#    limits; the same output, guest data and allocation map (the map shows
#    which pieces became data).
#  - block status through it (QEMU's 204: alloc below the alignment, map,
#    qemu-img map --image-opts down the backing chain).
#  - copy-on-read through it with a cor_write rule at an allocated
#    cluster (QEMU's 197; and the copy-on-read filter over it, 215).
#  - convert --salvage from it with "none" rules failing block status and
#    reads (QEMU's 251): the same warnings in the same order, same bytes.
#  - refusals: bad limits in QEMU's words; "none" rules beside other
#    events' (which the fault node cannot follow) by name.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

# io_both DESC IMG ARGS...: qemu-io ARGS on a copy q of IMG, qimg io on a
# copy m (Q in ARGS is the copy): same exit code, stdout, stderr, data and
# allocation map.
io_both() {
    local desc=$1 img=$2 qrc mrc
    shift 2
    cp "$img" q.qcow2 && cp "$img" m.qcow2 || exit 1
    timeout 30 "$QEMU_IO" "${@//Q/$PWD/q.qcow2}" >q.out 2>q.err
    qrc=$?
    timeout 30 "$QIMG" io "${@//Q/$PWD/m.qcow2}" >m.out 2>m.err
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stdout" "$(io_filter <q.out | sed "s|$PWD/q|$PWD/m|g")" \
        "$(io_filter <m.out)"
    assert_eq "$desc: stderr" "$(io_filter <q.err | sed "s|$PWD/q|$PWD/m|g")" \
        "$(io_filter <m.err)"
    assert_eq "$desc: contents" 0 "$("$QEMU_IMG" compare -q q.qcow2 m.qcow2; echo $?)"
    assert_eq "$desc: map" "$("$QEMU_IMG" map q.qcow2 | sed 's|q.qcow2|IMG|;s/ *0x[0-9a-f]* *IMG$//')" \
        "$("$QEMU_IMG" map m.qcow2 | sed 's|m.qcow2|IMG|;s/ *0x[0-9a-f]* *IMG$//')"
}

# QEMU's 177 on a 16 MiB image with 64 KiB clusters over a backing file
qi create -q -f qcow2 -o cluster_size=64k base.qcow2 16M
qio base.qcow2 'write -P 11 0 16M'
qi create -q -f qcow2 -o cluster_size=64k -b "$PWD/base.qcow2" -F qcow2 top.qcow2 16M
qio top.qcow2 'write -P 22 0 14M'
O=driver=blkdebug,image.driver=qcow2
io_both "align and max-transfer" top.qcow2 \
    -c "open -o $O,align=4k,max-transfer=8k blkdebug::Q" \
    -c 'write -P 33 1000 40000' -c 'read -P 33 1000 40000' -c 'read -P 22 0 1000'
io_both "zero write, opt-write-zero" top.qcow2 \
    -c "open -o $O,align=512,max-transfer=8k,opt-write-zero=64k blkdebug::Q" \
    -c 'write -z 500224 300032' -c 'read -P 0 500224 300032'
L=align=512,opt-write-zero=192k,max-write-zero=192k,opt-discard=192k,max-discard=192k
io_both "non-power-of-2 zero-write limits" top.qcow2 \
    -c "open -o $O,$L blkdebug::Q" -c 'write -z 2M 2M'
io_both "non-power-of-2 discard limits" top.qcow2 \
    -c "open -o $O,$L blkdebug::Q" -c 'discard 5000001 2M' -c 'read -P 22 0 4M'
io_both "unaligned write at the end" top.qcow2 \
    -c "open -o $O,align=64k blkdebug::Q" -c 'write -P 44 16775000 2216' \
    -c 'read -P 44 16775000 2216'

# QEMU's 204: block status below the alignment, map, and qemu-img map
io_both "block status below the alignment" top.qcow2 \
    -c "open -o $O,align=4k blkdebug::Q" -c 'alloc 1 1' -c 'alloc 0xdffff0 1000' \
    -c 'alloc 15m 5P' -c map
same_as_qemu map --image-opts \
    "$O,image.file.driver=file,image.file.filename=$PWD/top.qcow2,align=4k"
same_as_qemu map --output=json --image-opts \
    "$O,image.file.driver=file,image.file.filename=$PWD/top.qcow2,align=4k"

# QEMU's 197 and 215: a read over an allocated and an unallocated cluster
# copies only the second; a cor_write rule at the first would fail it
qi create -q -f qcow2 -b "$PWD/base.qcow2" -F qcow2 wrap.qcow2 16M
qio wrap.qcow2 'write -z -u 1M 64k'
printf '[inject-error]\nevent = "cor_write"\nsector = "2048"\n' >cor.conf
io_both "copy-on-read, cor_write rule" wrap.qcow2 \
    -c "open -C -o $O,config=$PWD/cor.conf Q" -c 'read -P 0 1M 64k' -c 'read -P 11 1M+64k 64k'
io_both "copy-on-read filter over it" wrap.qcow2 \
    -c "open -o driver=copy-on-read,file.driver=blkdebug,file.config=$PWD/cor.conf,file.image.driver=qcow2 Q" \
    -c 'read -P 0 1M 128k'
printf '[inject-error]\nevent = "cor_write"\nsector = "2176"\n' >cor2.conf
io_both "copy-on-read, the copy fails" wrap.qcow2 \
    -c "open -C -o $O,config=$PWD/cor2.conf Q" -c 'read 1M 128k' -c 'read -P 11 2M 64k'

# QEMU's 251: convert --salvage with block status and read errors above
# the format, warned in the same order
ERR=""
for s in 16400 24577; do
    ERR+="{'event': 'none', 'iotype': 'block-status', 'errno': 5, 'sector': $s},"
done
for s in 16256 24577 26624 26625; do
    ERR+="{'event': 'none', 'iotype': 'read', 'errno': 5, 'sector': $s},"
done
SRC="json:{'driver': 'blkdebug', 'image': {'driver': 'qcow2', 'file': {'driver': 'file', 'filename': '$PWD/top.qcow2'}}, 'inject-error': [${ERR%,}]}"
rm -f q.img m.img
"$QEMU_IMG" convert --salvage -O qcow2 "$SRC" q.img >q.err 2>&1
qrc=$?
"$QIMG" convert --salvage -O qcow2 "$SRC" m.img >m.err 2>&1
assert_eq "salvage: exit code" "$qrc" "$?"
assert_eq "salvage: warnings" "$(sed 's/^qemu-img: /qimg: /' q.err)" "$(cat m.err)"
assert_eq "salvage: the bytes" 0 "$("$QEMU_IMG" compare -q q.img m.img; echo $?)"

# refusals
io_both "align not a power of two" top.qcow2 -c "open -o $O,align=3000 blkdebug::Q"
io_both "max-transfer not aligned" top.qcow2 \
    -c "open -o $O,align=4k,max-transfer=6k blkdebug::Q"
printf '[inject-error]\nevent = "none"\n[inject-error]\nevent = "l2_update"\n' >mix.conf
"$QIMG" io -c "open -o $O,config=$PWD/mix.conf $PWD/top.qcow2" >m.out 2>&1
assert_eq "none with other events refused" 1 \
    "$(grep -c "cannot combine event 'none' rules with other events' rules" m.out)"
finish
