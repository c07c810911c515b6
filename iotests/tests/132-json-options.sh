#!/bin/bash
# Images named by QEMU's nested options (issue 29 item 2; api/json-name.c
# invariants 6 and 9, block/nbd.c invariant 5), against qemu-img and
# qemu-io 7.2 on the same names:
#  - driver=nbd with server.type/server.path (and QEMU's older path),
#    export, x-dirty-bitmap (qemu:allocation-depth, qemu:dirty-bitmap:B:
#    the context's values read as base:allocation's flags, a hole that does
#    not read as zeros not allocated at all), as --image-opts and as json:
#    (a nested server object); raw over nbd (file.driver=nbd); the image is
#    the NBD node itself (format "nbd"); -f nbd on a file; a context the
#    server does not have (QEMU 223, nbd-qemu-allocation).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-nbd

pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; _cleanup' EXIT
filter() { sed -e 's/^qemu-img: /qimg: /' -e 's/^qemu-io: /qimg: /'; }
# both_io DESC ARGS...: qemu-io and qimg io, outputs and exit codes
both_io() {
    local desc=$1 qrc mrc
    shift
    "$QEMU_IO" "$@" >q.out 2>q.err
    qrc=$?
    "$QIMG" io "$@" >m.out 2>m.err
    mrc=$?
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: output" "$(filter <q.out | sed 's/ops; .*/ops/'; filter <q.err)" \
        "$(filter <m.out | sed 's/ops; .*/ops/'; cat m.err)"
}

# base (1 MiB at 0) <- top (1 MiB at 2M, zeros at 3M); bitmap b0 in top
qi create -q -f qcow2 base.qcow2 4M
qio base.qcow2 'write -P 1 0 1M'
qi create -q -f qcow2 -b base.qcow2 -F qcow2 top.qcow2
qi bitmap --add top.qcow2 b0
qio top.qcow2 'write -P 2 2M 1M' 'write -z 3M 512k'
qemu-nbd -t -r -e 10 -k "$PWD/a.sock" -f qcow2 -A -B b0 -x e top.qcow2 &
pids+=($!)
nbd_ready a.sock $! || finish
S=$PWD/a.sock

N="driver=nbd,export=e,server.type=unix,server.path=$S"
for o in "" ",x-dirty-bitmap=qemu:allocation-depth" ",x-dirty-bitmap=qemu:dirty-bitmap:b0" \
    ",x-dirty-bitmap=qemu:dirty-bitmap:nope"; do
    same_as_qemu_err map --output=json --image-opts "$N$o"
    same_as_qemu_err map --image-opts "$N$o"
done
# refused (vsock, TLS) or worded by libnbd (a missing export): both fail,
# qimg's message names what it refused
for o in ",export=nope:nope" ",server.type=vsock:vsock" ",tls-creds=x:tls-creds"; do
    expect_error "${o%%:*}" map --image-opts "$N${o%%:*}"
    assert_eq "${o%%:*}: message names it" 1 "$(grep -c "'${o##*:}'" <<<"$M_ERR")"
done
same_as_qemu_err info --image-opts "$N"
same_as_qemu_err info --output=json --image-opts "$N"
same_as_qemu_err info "json:{'driver': 'nbd', 'export': 'e', 'server': {'type': 'unix', 'path': '$S'}}"
same_as_qemu_err info "json:{'driver': 'nbd', 'export': 'e', 'path': '$S'}"
same_as_qemu_err map --output=json \
    "json:{'driver': 'raw', 'file': {'driver': 'nbd', 'export': 'e', 'server': {'type': 'unix', 'path': '$S'}}}"
same_as_qemu_err info -f nbd "nbd+unix:///e?socket=$S"
same_as_qemu_err info -f nbd top.qcow2
same_as_qemu_err compare --image-opts "$N" "driver=raw,file.driver=nbd,file.export=e,file.server.type=unix,file.server.path=$S"
both_io "read through driver=nbd" -r -c 'read -P 2 2M 1M' -c 'read -P 1 0 1M' --image-opts "$N"
both_io "open -o driver=nbd" -c "open -r -o $N"  -c 'read -P 0 3M 512k'

finish
