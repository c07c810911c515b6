#!/bin/bash
# QEMU's quorum node (block/quorum.c, api/quorum.c; QEMU iotests 110 and
# 312), against qemu-io/qemu-img 7.2: raw over a quorum of three qcow2
# images by dotted options (open -o, --image-opts) and a qcow2 image over a
# quorum of two files (json:), writes that reach every child, reads that
# return the majority's data when one child differs and fail when no
# version reaches vote-threshold, rewrite-corrupted, read-pattern fifo,
# block status, the name and the backing file that has no folder, and the
# options refused.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

for i in 0 1 2; do "$QEMU_IMG" create -q -f qcow2 c$i.qcow2 1M || exit 1; done
q="driver=raw,file.driver=quorum,file.vote-threshold=2"
for i in 0 1 2; do q="$q,file.children.$i.driver=qcow2,file.children.$i.file.filename=c$i.qcow2"; done

same_as_qemu_err map --output=json --image-opts "$q"
same_as_qemu_err map --image-opts "$q"
# (info by its json: form: QEMU names a dotted vote-threshold as a string,
# a JSON one as a number, and qimg keeps no option's type)
same_as_qemu_err info "json:{'driver': 'raw', 'file': {'driver': 'quorum',
 'vote-threshold': 2, 'children': [{'driver': 'qcow2', 'file.filename': 'c0.qcow2'},
 {'driver': 'qcow2', 'file': {'driver': 'file', 'filename': 'c1.qcow2'}}]}}"

# a write through the quorum reaches every child
"$QIMG" io -c "open -o $q" -c 'write -P 1 0 64k' -c 'write -z 64k 64k' >/dev/null ||
    _fail "write through the quorum"
for i in 0 1 2; do
    assert_rc "child $i holds the write" 0 "$QEMU_IO" -c 'read -P 1 0 64k' \
        -c 'read -P 0 64k 64k' c$i.qcow2
done
same_as_qemu_err map --output=json --image-opts "$q"

# one child differs: the majority's data is read, by both tools
"$QEMU_IO" -c 'write -P 9 4k 4k' c1.qcow2 >/dev/null
same_as_qemu_io "one child outvoted" -c "open -o $q" -c 'read -P 1 0 64k'
# two differ from the third and each other: no version has two votes
"$QEMU_IO" -c 'write -P 8 4k 4k' c2.qcow2 >/dev/null
same_as_qemu_io "no quorum" -c "open -o $q" -c 'read -P 1 0 64k'
# with vote-threshold 1 the version first seen last of equal counts wins
q1=${q/vote-threshold=2/vote-threshold=1}
same_as_qemu_io "threshold 1" -c "open -o $q1" -c 'read -v 4k 16'
# read-pattern fifo reads the first child only
same_as_qemu_io "fifo" -c "open -o $q1,file.read-pattern=fifo" -c 'read -P 1 0 64k'

# rewrite-corrupted puts the winner back on the outvoted child
"$QEMU_IO" -c 'write -P 1 4k 4k' c2.qcow2 >/dev/null
"$QIMG" io -c "open -o $q,file.rewrite-corrupted=on" -c 'read -P 1 0 64k' >/dev/null ||
    _fail "read with rewrite-corrupted"
assert_rc "rewrite-corrupted repaired child 1" 0 "$QEMU_IO" -c 'read -P 1 0 64k' c1.qcow2

# a qcow2 image over a quorum of two files: its relative backing file has
# no folder to be found in
"$QEMU_IMG" create -q -f qcow2 base.qcow2 1M || exit 1
"$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 top.qcow2 || exit 1
cp top.qcow2 top2.qcow2
j="json:{'driver': 'qcow2', 'file': {'driver': 'quorum', 'vote-threshold': 1,
 'children': [{'driver': 'file', 'filename': 'top.qcow2'},
              {'driver': 'file', 'filename': 'top2.qcow2'}]}}"
same_as_qemu_err info "$j"
same_as_qemu_io "relative backing under a quorum" -c 'read 0 512' "$j"
# without a backing file, qcow2 over the quorum writes to both files
"$QEMU_IMG" create -q -f qcow2 top.qcow2 1M && cp top.qcow2 top2.qcow2
"$QIMG" io -c 'write -P 7 0 128k' "$j" >/dev/null || _fail "qcow2 over a quorum: write"
for f in top.qcow2 top2.qcow2; do
    assert_rc "$f: check" 0 "$QEMU_IMG" check -q "$f"
    assert_rc "$f: data" 0 "$QEMU_IO" -c 'read -P 7 0 128k' "$f"
done

# options: QEMU's refusals, and blkverify (QEMU exits the process on a
# mismatch) refused by name
same_as_qemu_err info --image-opts "${q/vote-threshold=2/vote-threshold=4}"
same_as_qemu_err info --image-opts "${q/vote-threshold=2/vote-threshold=0}"
same_as_qemu_err info --image-opts "$q,file.read-pattern=x"
same_as_qemu_err info --image-opts "$q,file.blkverify=on"
same_as_qemu_err info --image-opts "driver=raw,file.driver=quorum,file.vote-threshold=1"
same_as_qemu_err info --image-opts "$q,file.foo=1"
q2="driver=raw,file.driver=quorum,file.vote-threshold=2,file.blkverify=on"
for i in 0 1; do q2="$q2,file.children.$i.driver=qcow2,file.children.$i.file.filename=c$i.qcow2"; done
assert_rc "blkverify=on" 1 "$QIMG" info --image-opts "$q2"
assert_eq "blkverify=on: message" \
    "qimg: Could not open '$q2': The quorum option 'blkverify' is not supported by qimg" \
    "$(cat "$SCRATCH/.out")"

finish
