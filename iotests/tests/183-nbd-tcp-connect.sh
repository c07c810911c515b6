#!/bin/bash
# 183-nbd-tcp-connect: the NBD node connects plain TCP names itself, as
# QEMU does (block/nbd.c invariant 8, block/inet.c), against qemu-img and
# qemu-io 7.2:
#  - QEMU's messages for a name that does not resolve ("address resolution
#    failed for HOST:PORT: ...", QEMU iotest 162) and for a port nobody
#    listens on ("Failed to connect to 'HOST:PORT': ..."), in every form of
#    a TCP name (nbd://, nbd:HOST:PORT, json's host/port and server.*,
#    --image-opts), and the ssh node's same messages (one implementation);
#  - the names of TCP exports (info), with and without an export name.
# (reconnect-delay over TCP: 170.)
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-nbd nbdinfo

srv=
trap '[ -z "$srv" ] || kill "$srv" 2>/dev/null; _cleanup' EXIT

# 1. Failures before any server answers.
same_as_qemu_err info 'json:{"driver": "nbd", "host": -1}'
same_as_qemu_err info 'json:{"driver": "nbd", "host": "no-such-host.invalid", "port": "10809"}'
same_as_qemu_err info nbd://no-such-host.invalid/x
# a port nobody listens on: a listener closed again
dead=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
same_as_qemu_err info "nbd://127.0.0.1:$dead/"
same_as_qemu_err info "nbd://127.0.0.1:$dead/disk"
same_as_qemu_err info "nbd:127.0.0.1:$dead"
same_as_qemu_err info "nbd:127.0.0.1:$dead:exportname=disk"
same_as_qemu_err info "json:{'driver': 'nbd', 'host': '127.0.0.1', 'port': $dead}"
same_as_qemu_err info "json:{'driver': 'nbd', 'server.type': 'inet', 'server.host': '127.0.0.1', 'server.port': '$dead', 'export': 'e'}"
same_as_qemu_err info --image-opts "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=$dead"
same_as_qemu_err info -f qcow2 "json:{'driver': 'qcow2', 'file': {'driver': 'nbd', 'host': '127.0.0.1', 'port': '$dead'}}"
if "$QEMU_IMG" --help | grep -q ' ssh '; then # the same messages from the ssh node
    same_as_qemu_err info "json:{'driver': 'ssh', 'host': '127.0.0.1', 'port': '$dead', 'path': '/x'}"
fi

# 2. Names of TCP exports (qemu-nbd -x disk, persistent).
"$QEMU_IMG" create -q -f qcow2 d.qcow2 1M || exit 1
port=$(tcp_port)
# serve: qemu-nbd serving d.qcow2 as "disk" on port (its pid in srv)
serve() {
    qemu-nbd -t -b 127.0.0.1 -p "$port" -x disk -f qcow2 d.qcow2 &
    srv=$!
    nbd_ready "nbd://127.0.0.1:$port/disk" $srv || finish
}
serve
same_as_qemu info "nbd://127.0.0.1:$port/disk"
same_as_qemu info "nbd:127.0.0.1:$port:exportname=disk"
same_as_qemu info "nbd://localhost:$port/disk"
same_as_qemu info "json:{'driver': 'nbd', 'host': '127.0.0.1', 'port': $port, 'export': 'disk'}"
same_as_qemu_err info "nbd://127.0.0.1:$port/nope"
same_as_qemu map --output=json "nbd://127.0.0.1:$port/disk"

finish
