#!/bin/bash
# 204-qemu-suite-args: command lines from QEMU 7.2's qcow2 iotests outside
# the quick group, against qemu-img 7.2:
#  - 049: an empty backing file name (-b '', -o backing_file=), refused
#    before any other backing check, -u or not (tools/create.c fact 6);
#    qimg tried to open it ("Expecting one image file name").
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io

# 049: empty backing names
qi create -q -f qcow2 base.qcow2 1M
for args in "-b ''" "-u -b ''" "-b '' -F qcow2" "-u -b '' -F raw" "-o backing_file=" \
    "-o backing_file=,backing_fmt=qcow2" "-o size=1M -b ''"; do
    rm -f e.qcow2
    eval "same_as_qemu_err create -f qcow2 $args e.qcow2 1M"
    assert_eq "create $args: no image left" "" "$(ls e.qcow2 2>/dev/null)"
done
same_as_qemu_err create -f qcow2 -b '' e.qcow2

finish
