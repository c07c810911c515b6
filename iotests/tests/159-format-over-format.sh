#!/bin/bash
# A format over a format (json-name.c invariant 15; QEMU's 072 and 120):
# an image stored as the guest data of another, opened with "file" naming
# the lower format -- qcow2 over qcow2 and raw over qcow2, by -o, json:
# and --image-opts -- reads and writes as qemu-io's and is named as
# qemu-img names it; an option of the upper format is refused by name.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io

qi create -q -f qcow2 base.qcow2 64M
qio base.qcow2 'write -P 42 0 512' 'write -P 23 512 512' 'write -P 66 1024 512'
qi convert -f raw -O qcow2 base.qcow2 nest.qcow2

same_as_qemu_io "qcow2 over qcow2 (open -o)" \
    -c "open -o driver=qcow2,file.driver=qcow2,file.file.filename=nest.qcow2" \
    -c 'read -P 42 0 512' -c 'read -P 23 512 512' -c 'read -P 66 1024 512'
same_as_qemu_io "one layer only without a driver: qcow2 data" -c 'read -P 42 0 512' nest.qcow2
raw_over="json:{'driver': 'raw', 'file': {'driver': 'qcow2', 'file': {'filename': 'base.qcow2'}}}"
same_as_qemu_io "raw over qcow2 (json:)" -c 'read -P 66 1024 512' -c 'read -P 0 2048 512' \
    "$raw_over"
same_as_qemu_err info "$raw_over"
same_as_qemu_err info --image-opts "driver=qcow2,file.driver=qcow2,file.file.filename=nest.qcow2"
same_as_qemu_err info --image-opts \
    "driver=raw,read-only=on,file.driver=qcow2,file.file.filename=base.qcow2"

# writes through the upper raw layer land in the lower qcow2's guest data
cp base.qcow2 q.qcow2
"$QEMU_IO" -c 'write -P 7 64k 4k' \
    "json:{'driver': 'raw', 'file': {'driver': 'qcow2', 'file': {'filename': 'q.qcow2'}}}" \
    >/dev/null
"$QIMG" io -c 'write -P 7 64k 4k' "$raw_over" >/dev/null
assert_rc "raw over qcow2: written as qemu-io writes" 0 "$QEMU_IMG" compare q.qcow2 base.qcow2
assert_rc "raw over qcow2: the lower image checks clean" 0 "$QEMU_IMG" check -q base.qcow2

"$QIMG" info --image-opts "driver=qcow2,file.driver=qcow2,file.file.filename=nest.qcow2,lazy-refcounts=on" \
    >/dev/null 2>err.txt
assert_eq "an upper format's option: refused by name" \
    "qimg: Could not open 'driver=qcow2,file.driver=qcow2,file.file.filename=nest.qcow2,lazy-refcounts=on': qimg takes no option 'lazy-refcounts' of a format over a format" \
    "$(cat err.txt)"
finish
