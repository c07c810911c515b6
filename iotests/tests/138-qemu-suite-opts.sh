#!/bin/bash
# qemu-io's options and messages where QEMU's own iotests read them (issue
# 29, branch qsuite5), each against qemu-io 7.2 on the same input:
#  - an export the NBD server does not have: "Requested export not
#    available" and the server's own text under it (QEMU 140 143).
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io qemu-nbd

# ---- NBD: an export the server does not have (140 143) ----
"$QEMU_IMG" create -q -f qcow2 n.qcow2 1M
qemu-nbd -t -k "$PWD/n.sock" -x there -f qcow2 n.qcow2 &
npid=$!
trap 'kill $npid 2>/dev/null; _cleanup' EXIT
wait_sock n.sock
same_as_qemu_io "export not there" -f raw -c 'read 0 512' "nbd+unix:///gone?socket=$PWD/n.sock"
same_as_qemu_io "export there" -f raw -c 'read 0 512' "nbd+unix:///there?socket=$PWD/n.sock"
kill $npid
wait $npid 2>/dev/null

finish
