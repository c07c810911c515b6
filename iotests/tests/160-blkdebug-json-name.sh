#!/bin/bash
# The name of an image over a blkdebug node given by options (issue 29:
# QEMU's 110; json-blkdebug.c invariant 6), against qemu-img 7.2's info:
# "blkdebug:CONFIG:FILE" when the node has only a config file and its
# image, otherwise QEMU's json: name -- its QDict member order, the JSON
# types of a json: name's values (strings from --image-opts), colliding
# keys (inject-error.0.errno and .event) in QEMU's order -- and the
# backing file still resolved next to the image (the disk size, which QEMU
# cannot tell through blkdebug, is left out).
. "${0%/*}/../common.sh"
requires qimg qemu-img

"$QEMU_IMG" create -q -f qcow2 b.qcow2 64M
"$QEMU_IMG" create -q -f qcow2 -b b.qcow2 -F qcow2 t.qcow2 64M
: >empty.conf
img="'image': {'driver': 'file', 'filename': '$PWD/t.qcow2'}"
# same_info DESC NAME [--image-opts]: qimg info's and qemu-img info's lines
same_info() {
    local desc=$1
    shift
    assert_eq "$desc" "$("$QEMU_IMG" info "$@" 2>&1 | sed -n '1,6p' | grep -v '^disk size')" \
        "$("$QIMG" info "$@" 2>&1 | sed -n '1,6p' | grep -v '^disk size')"
}
for o in "'set-state': [{'event': 'read_aio', 'new_state': 42}]" \
    "'set-state': [{'event': 'read_aio', 'new_state': 42, 'state': 1}]" \
    "'inject-error': [{'event': 'l2_update', 'errno': 28}]" \
    "'inject-error': {'event': 'l2_update', 'errno': 5, 'once': true}" \
    "'align': 512" \
    "'max-transfer': 65536, 'opt-discard': 4096, 'max-discard': 8192" \
    "'config': '$PWD/empty.conf'" \
    "'config': '$PWD/empty.conf', 'set-state.0.event': 'read_aio', 'set-state.0.new_state': '3'"; do
    same_info "json: $o" "json:{'driver': 'qcow2', 'file': {'driver': 'blkdebug', $img, $o}}"
done
same_info "json: no options" "json:{'driver': 'qcow2', 'file': {'driver': 'blkdebug', $img}}"
base="driver=qcow2,file.driver=blkdebug,file.image.filename=$PWD/t.qcow2"
for o in file.align=512 file.set-state.0.event=read_aio,file.set-state.0.new_state=2 \
    file.inject-error.0.errno=28,file.inject-error.0.event=l2_update \
    "file.config=$PWD/empty.conf"; do
    same_info "--image-opts: $o" --image-opts "$base,$o"
done
finish
