#!/bin/bash
# A vmstate save into an image that cannot take an internal snapshot is
# refused before any state is written (BlkDriver.snapshot_check, asked by
# qimg_vmstate_save_begin; qcow2/snapshot-ops.c create_refused): a qcow2
# image with an external data file.  The refusal is the error qemu-img's
# snapshot -c gives for the same image (Operation not supported); the
# metadata file and the data file keep their sizes and qemu-img check
# finds no cluster allocated (the state used to be written first, into the
# data file past the disk's end, and the snapshot refused after it: the
# data file grew by the vmstate offset, 512 MiB here, and the image kept
# the state's clusters).  The same stream into an image without a data
# file is saved and loads back unchanged.
. "${0%/*}/../common.sh"
requires qimg qemu-img

qi create -q -f qcow2 -o data_file=df.raw img.qcow2 64M
head -c $((2 * 1048576 + 77)) /dev/urandom >state.bin
meta0=$(stat -c %s img.qcow2)
data0=$(stat -c %s df.raw)

qerr=$("$QEMU_IMG" snapshot -c s img.qcow2 2>&1)
"$QEMU_IMG" snapshot -c s img.qcow2 >/dev/null 2>&1
assert_eq "qemu-img snapshot -c: exit 1" 1 $?
out=$("$QIMG" vmstate save img.qcow2 s state.bin 2>&1)
assert_eq "vmstate save: exit 1" 1 $?
assert_eq "vmstate save: qemu-img's reason" \
    "$(sed -n 's/.*(\(.*\))$/\1/p' <<<"$qerr")" "$(sed -n "s/^qimg: Could not save VM state to snapshot 's': //p" <<<"$out")"
assert_eq "metadata file size unchanged" "$meta0" "$(stat -c %s img.qcow2)"
assert_eq "data file size unchanged" "$data0" "$(stat -c %s df.raw)"
allocated=$("$QEMU_IMG" check --output=json img.qcow2 |
    sed -n 's/.*"allocated-clusters": \([0-9]*\).*/\1/p')
assert_eq "no cluster allocated" 0 "${allocated:-0}"
assert_eq "no snapshot" "" "$("$QEMU_IMG" snapshot -l img.qcow2)"

# the same stream without a data file
qi create -q -f qcow2 plain.qcow2 64M
"$QIMG" vmstate save plain.qcow2 s state.bin
assert_eq "save without a data file" 0 $?
"$QIMG" vmstate load plain.qcow2 s back.bin
same_file "loads back unchanged" state.bin back.bin
assert_rc "qemu-img check clean" 0 "$QEMU_IMG" check plain.qcow2

finish
