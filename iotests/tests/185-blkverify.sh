#!/bin/bash
# QEMU's blkverify node (block/blkverify.c, api/blkverify.c; QEMU iotest
# 071), against qemu-io/qemu-img 7.2: an image under test (qcow2) checked
# against a raw copy, named "blkverify:RAW:IMAGE", by open -o options as 071
# names it, by json: and as the image itself (driver=blkverify).  Data that
# matches reads and writes through; a mismatch, and a child failing where
# the other does not (blkdebug under either child), end qemu-io with QEMU's
# line and exit status 1, the commands after it not run; the options QEMU
# refuses are refused alike; info and map are the raw copy's.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

qi create -f raw b0.raw 1M
qi create -f qcow2 t0.qcow2 1M

# same_both DESC ARGS...: qemu-io ARGS and qimg io ARGS, each on fresh
# copies of b0.raw (b.raw) and t0.qcow2 (t.qcow2): the same exit code,
# stdout and stderr, and the same images after
same_both() {
    local desc=$1 qrc mrc
    shift
    cp b0.raw b.raw && cp t0.qcow2 t.qcow2 || exit 1
    timeout 30 "$QEMU_IO" "$@" >q.out 2>q.err
    qrc=$?
    mv b.raw b.raw.qemu && mv t.qcow2 t.qcow2.qemu || exit 1
    cp b0.raw b.raw && cp t0.qcow2 t.qcow2 || exit 1
    timeout 30 "$QIMG" io "$@" >m.out 2>m.err
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$desc: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
    assert_rc "$desc: raw copy" 0 "$QEMU_IMG" compare -q -f raw -F raw b.raw.qemu b.raw
    assert_rc "$desc: test image" 0 "$QEMU_IMG" compare -q t.qcow2.qemu t.qcow2
    assert_rc "$desc: check" 0 "$QEMU_IMG" check -q t.qcow2
}

v=blkverify:b.raw:t.qcow2
o071="driver=raw,file.driver=blkverify,file.raw.filename=b.raw"
dbg="file.test.driver=qcow2,file.test.file.driver=blkdebug,file.test.file.image.filename=t.qcow2"

# matching data: reads and writes through the name, 071's options, json:
same_both "name" -f raw -c 'read 0 512' -c 'write -P 42 0x38000 512' \
    -c 'read -P 42 0x38000 512' -c 'writev -P 7 64k 1k 3k' -c 'readv -P 7 64k 2k 2k' \
    -c 'aio_write -P 8 128k 4k' -c aio_flush -c 'aio_read -P 8 128k 4k' -c aio_flush \
    -c 'discard 0 512' -c flush -c info -c map -c 'alloc 0 512' -c length "$v"
same_both "071's options" -c "open -o $o071 t.qcow2" -c 'read 0 512' \
    -c 'write -P 42 0x38000 512' -c 'read -P 42 0x38000 512'
same_both "071's test blockref" \
    -c "open -o $o071,file.test.driver=qcow2,file.test.file.filename=t.qcow2" \
    -c 'write -P 42 0x38000 512' -c 'read -P 42 0x38000 512'
same_both "json:" -c 'write -P 9 4k 4k' -c 'read -P 9 4k 4k' "json:{'driver': 'raw',
 'file': {'driver': 'blkverify', 'raw': {'driver': 'file', 'filename': 'b.raw'},
 'test': {'driver': 'qcow2', 'file': {'driver': 'file', 'filename': 't.qcow2'}}}}"
same_both "the node as the image" -c 'open -o driver=blkverify,x-raw=b.raw,x-image=t.qcow2' \
    -c info -c map -c 'write -P 3 0 4k' -c 'read -P 3 0 4k' -c length

# a mismatch: QEMU's line, nothing after it, exit status 1
"$QEMU_IO" -c 'write -P 42 0 512' -c 'write -P 5 64k 512' t0.qcow2 >/dev/null ||
    _fail "setup: write to the test image"
same_both "mismatch" -c "open -o $o071 t.qcow2" -c 'read -P 0 4k 512' \
    -c 'read -P 42 0 512' -c 'read 4k 512'
same_both "mismatch in a piece" -f raw -c 'read 0 512' -c 'readv 60k 4k 4k' "$v"
same_both "mismatch in an aio_read" -f raw -c 'aio_read 64k 4k' -c aio_flush \
    -c 'read 4k 512' "$v"
# the format probed over the node reads block 0: the mismatch ends it there
same_both "mismatch at the probe" -c info -c 'read 4k 512' "$v"

# a child that fails where the other does not (blkdebug)
same_both "test child fails a read" -c "open -o $o071,$dbg,file.test.file.inject-error.event=l2_load" \
    -c 'read 4k 512' -c 'read 0 512'
same_both "test child fails a write" -c "open -o $o071,$dbg,file.test.file.inject-error.event=write_aio" \
    -c 'read 4k 512' -c 'write 4k 512' -c 'read 4k 512'
same_both "raw child fails a read" -c "open -o driver=raw,file.driver=blkverify,file.raw.driver=raw,file.raw.file.driver=blkdebug,file.raw.file.inject-error.event=read_aio,file.raw.file.image.filename=b.raw t.qcow2" \
    -c 'read 4k 512'

# what QEMU refuses
same_both "no test child" -c 'open -o driver=blkverify,raw.filename=b.raw'
same_both "no raw child" -c 'open -o driver=blkverify,test.file.filename=t.qcow2'
same_both "test child named twice" \
    -c 'open -o driver=blkverify,x-raw=b.raw,x-image=t.qcow2,test.file.filename=t.qcow2'
same_both "unknown option" -c 'open -o driver=blkverify,x-raw=b.raw,x-image=t.qcow2,foo=1'
same_both "no image path" -c 'read 0 512' blkverify:b.raw
same_both "no raw copy file" -c 'read 0 512' blkverify:none.raw:t.qcow2
same_both "no test image file" -c 'read 0 512' blkverify:b.raw:none.qcow2

# qemu-img: info and map are the raw copy's
cp b0.raw b.raw && cp t0.qcow2 t.qcow2
"$QEMU_IO" -f raw -c 'write -P 1 0 4k' "$v" >/dev/null || _fail "setup: write through"
same_as_qemu_err info "$v"
same_as_qemu_err map "$v"
same_as_qemu_err map --output=json -f blkverify "$v"
same_as_qemu_err info --output=json -f blkverify "$v"

# QEMU 7.2's own aborts on an assertion at a zero write; qimg writes zeros
# to both children
cp b0.raw b.raw && cp t0.qcow2 t.qcow2
assert_rc "write -z through blkverify" 0 "$QIMG" io -f raw -c 'write -P 6 0 8k' \
    -c 'write -z 4k 4k' -c 'read -P 0 4k 4k' "$v"
assert_rc "write -z: raw copy" 0 "$QEMU_IO" -f raw -c 'read -P 6 0 4k' -c 'read -P 0 4k 4k' b.raw
assert_rc "write -z: test image" 0 "$QEMU_IO" -c 'read -P 6 0 4k' -c 'read -P 0 4k 4k' t.qcow2

finish
