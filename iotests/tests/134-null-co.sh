#!/bin/bash
# QEMU's null-co and null-aio nodes (block/null.c; QEMU iotests 133, 150,
# 153), against qemu-img/qemu-io 7.2: the node as a format (-f null-co,
# json: "driver": "null-co") and under raw (null-co://), its options size,
# read-zeroes and latency-ns and their checks, what it refuses (another
# name, resize, create), what info, map and qemu-io's info print, and a
# convert from it (sparse and not); -U with a force-share option (153).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

Z="json:{'driver': 'null-co', 'size': 1048576, 'read-zeroes': true}"
for args in "info null-co://" "info null-aio://" "info --output=json null-co://" \
    "info -f null-co null-co://" "info -f null-aio null-aio://"; do
    # shellcheck disable=SC2086
    same_as_qemu_err $args
done
same_as_qemu_err info "$Z"
same_as_qemu_err info "json:{'driver': 'null-co', 'size': 65536}"
same_as_qemu_err info --output=json "json:{'driver': 'null-aio', 'size': 65536}"
same_as_qemu_err info -U --image-opts driver=null-co,force-share=on
# -U with force-share other than "on" is refused (QEMU 153; a short-form
# "noforce-share" in --image-opts is not: qimg takes no short forms there)
for v in force-share=off force-share=true force-share=off,force-share=on; do
    same_as_qemu_err info -U --image-opts driver=null-co,$v
    same_as_qemu_io "-U --image-opts $v" -r -U --image-opts driver=null-co,$v -c 'read 0 1'
done
for v in force-share=off noforce-share force-share=on,force-share=yes; do
    same_as_qemu_io "open -U -o $v" -c "open -r -U -o driver=null-co,$v" -c 'read 0 1'
done
same_as_qemu_err map --output=json "json:{'driver': 'null-co', 'size': 65536}"
same_as_qemu_err map --output=json "$Z"
same_as_qemu_err map -f null-co null-co://
expect_error "another name" info null-co://foo
same_as_qemu_err info null-co://foo
# (qemu-img 7.2 aborts after its message on a bad size or latency-ns)
assert_rc "a bad size" 1 "$QIMG" info "json:{'driver': 'null-co', 'size': 'x'}"
assert_eq "a bad size: message" "qimg: Could not open 'json:{'driver': 'null-co', 'size': 'x'}': Parameter 'size' expects a non-negative number below 2^64" "$(head -n 1 "$SCRATCH/.out")"
expect_error "an unknown option" info "json:{'driver': 'null-co', 'foo': 1}"
same_as_qemu_err create -f null-co null-co:// 1M

# a convert from it: sparse (nothing allocated) and not (all data)
for s in 512 0; do
    "$QEMU_IMG" convert -O qcow2 -S $s "$Z" q.qcow2 || exit 1
    "$QIMG" convert -O qcow2 -S $s "$Z" m.qcow2
    assert_eq "convert -S $s: map" "$(map_flags q.qcow2)" "$(map_flags m.qcow2)"
    assert_rc "convert -S $s: contents" 0 "$QEMU_IMG" compare -q q.qcow2 m.qcow2
done

same_as_qemu_io "reads without read-zeroes leave the buffer" -c 'read -v 0 16' null-co://
same_as_qemu_io "reads with read-zeroes" -c 'read -v 0 16' -f null-co "$Z"
same_as_qemu_io "writes, zeroes, discards, flushes" -c 'write 0 512' -c 'write -z 0 64k' \
    -c 'discard 0 512' -c flush -c 'read 1k 1k' -c 'truncate 1M' -c info null-co://
same_as_qemu_io "reopen and info of the node" -f null-co -c reopen -c info \
    "json:{'driver': 'null-co', 'size': 65536}"
same_as_qemu_io "latency-ns" -f null-co -c 'read 0 512' -c 'write 0 512' \
    "json:{'driver': 'null-co', 'latency-ns': 1000000}"
same_as_qemu_io "open -o" -c 'open -r -o driver=null-co,size=4096' -c 'read 0 4k' -c info

finish
