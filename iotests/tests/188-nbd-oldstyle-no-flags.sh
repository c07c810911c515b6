#!/bin/bash
# 188-nbd-oldstyle-no-flags: an NBD server whose oldstyle handshake has no
# flags at all (not even NBD_FLAG_HAS_FLAGS; QEMU's nbd-fault-injector, QEMU
# iotest 277) is used as QEMU's client uses it (block/nbd.c invariant 9),
# against qemu-io and qemu-img 7.2 on the same server (iotests/nbd_oldstyle.py):
#  - a write and a read back, through a Unix socket URI, json's
#    server.type=unix (--image-opts) and qemu-img's nbd:unix: name;
#  - 277's case: the server drops the connection after a write's data and
#    the client, with reconnect-delay, writes again on a new connection;
#  - the export's name and size (info), and QEMU's message for a socket
#    nobody listens on (qimg connects Unix sockets itself, invariant 8).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

srv=
trap '[ -z "$srv" ] || kill "$srv" 2>/dev/null; _cleanup' EXIT

# serve [--drop-after-data]: a fresh oldstyle server on $PWD/s.sock, 4 MiB,
# flags 0 (its pid in srv, its output in srv.log), once it listens: its
# "listening" line, not its socket, which exists from bind() (a client
# that comes before listen() is refused).  60 s at most: python3 alone
# took seconds to start on a loaded machine.
serve() {
    rm -f s.sock srv.log
    python3 "$IOTESTS_DIR/nbd_oldstyle.py" "$PWD/s.sock" 4194304 0 "$@" >srv.log 2>&1 &
    srv=$!
    for _ in $(seq 1200); do
        grep -qx listening srv.log && return 0
        running "$srv" || break
        sleep 0.05
    done
    _fail "the oldstyle server did not start: $(cat srv.log)"
    exit 1
}

# both DESC ARGS...: qemu-io ARGS, then qimg io ARGS, each on a fresh
# server: the same exit code, stdout and stderr (same_as_qemu_io's rules)
both() {
    local desc=$1 qrc mrc
    shift
    serve "${SERVE_ARGS[@]}"
    timeout 30 "$QEMU_IO" "$@" >q.out 2>q.err
    qrc=$?
    gone "$srv"
    serve "${SERVE_ARGS[@]}"
    timeout 30 "$QIMG" io "$@" >m.out 2>m.err
    mrc=$?
    gone "$srv"
    srv=
    assert_eq "$desc: exit code" "$qrc" "$mrc"
    assert_eq "$desc: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$desc: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
}

sock=$PWD/s.sock
rw=(-c 'write -P 0x7 0 3M' -c 'read -P 0x7 0 3M' -c 'read -P 0 3M 1M')
SERVE_ARGS=()
both "nbd+unix URI" "${rw[@]}" -f raw "nbd+unix:///?socket=$sock"
both "--image-opts" "${rw[@]}" --image-opts "driver=nbd,server.type=unix,server.path=$sock"
both "nbd:unix:" "${rw[@]}" -f raw "nbd:unix:$sock"

# 277: the first connection dies after the write's data; the write is
# done again on the second one
SERVE_ARGS=(--drop-after-data)
both "reconnect after a dropped write" -c 'write -P 0x7 0 3M' --image-opts \
    "driver=nbd,server.type=unix,server.path=$sock,reconnect-delay=7"
assert_eq "the server dropped qimg's first connection" \
    "dropped the connection after the write data" "$(tail -n 1 srv.log)"

# info: the export's name and size; a socket nobody listens on
SERVE_ARGS=()
serve
"$QEMU_IMG" info "nbd+unix:///?socket=$sock" >q.out 2>&1
gone "$srv"
serve
"$QIMG" info "nbd+unix:///?socket=$sock" >m.out 2>&1
gone "$srv"
srv=
assert_eq "info" "$(cat q.out)" "$(cat m.out)"
same_as_qemu_err info "nbd+unix:///?socket=$PWD/nobody.sock"
same_as_qemu_err info "nbd:unix:$PWD/nobody.sock"

finish
