#!/bin/bash
# file.locking (QEMU iotests 102, 153; block/lock.c invariant 6), against
# qemu-img/qemu-io 7.2: locking=off opens an image another process holds
# (and keeps nobody out while it holds one), on and auto lock as without
# the option, a bad value is QEMU's message; the option is the image
# file's only: the backing file is still locked.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

qi create -q -f raw base.img 1M
qi create -q -f qcow2 -b base.img -F raw img.qcow2 1M
qio img.qcow2 'write -P 5 0 64k'

# another process holds the image read-write
hold_image img.qcow2 || finish
for v in off on auto; do
    same_as_qemu_io "locking=$v on a held image" \
        -c "open -r -o driver=qcow2,file.locking=$v img.qcow2" -c 'read -P 5 0 64k'
    same_as_qemu_err info --image-opts "driver=qcow2,file.locking=$v,file.filename=img.qcow2"
done
same_as_qemu_io "locking=off, read-write" -c "open -o driver=qcow2,file.locking=off img.qcow2" \
    -c 'write -P 6 64k 64k'
kill "$HOLDER"
wait "$HOLDER" 2>/dev/null
same_as_qemu_err info --image-opts "driver=qcow2,file.locking=bad,file.filename=img.qcow2"

# qimg holds it with locking=off: qemu-io still writes it, but not the
# backing file qimg has open (read-only, not sharing write, as QEMU's)
"$QIMG" io -c 'open -o driver=qcow2,file.locking=off img.qcow2' -c 'sleep 60000' &
pid=$!
# (until it locked the backing file, which it opens after the image:
# lock_bytes, one look of the kernel's, not /proc/locks, whose readings
# can miss a lock or list one twice while other processes lock files)
for _ in $(seq 1200); do
    [ -n "$(lock_bytes base.img)" ] || ! kill -0 $pid 2>/dev/null && break
    sleep 0.05
done
assert_eq "no lock on the image" "" "$(lock_bytes img.qcow2)"
assert_rc "qemu-io writes the image qimg holds with locking=off" 0 \
    "$QEMU_IO" -c 'write -P 7 128k 64k' img.qcow2
assert_eq "the backing file is locked" "yes" \
    "$([ -n "$(lock_bytes base.img)" ] && echo yes || echo no)"
kill "$pid"
wait "$pid" 2>/dev/null

finish
