#!/bin/bash
# QEMU's reconnect-delay of the NBD client (block/nbd-reconnect.c; QEMU
# iotest 277), against qemu-io 7.2: the server goes away between two
# requests and comes back; with reconnect-delay the next requests wait
# for a new connection and succeed, as qemu-io's do; when the server stays
# away longer than reconnect-delay, or without it, they fail.  (QEMU's
# 277 itself cannot run against qimg: nbd-fault-injector.py's oldstyle
# handshake sends export flags 0, which libnbd refuses.)  A request on a
# dead connection fails with EIO, as in QEMU (block/nbd.c invariant 2),
# also when the server dies with the request in flight.  Over TCP as over
# a Unix socket: qimg connects TCP names itself (block/nbd.c invariant 8),
# and a reconnect connects the same way again.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io qemu-nbd nbdkit nbdinfo

"$QEMU_IMG" create -q -f qcow2 d.qcow2 1M || exit 1
srv=
# (k.pid: died's nbdkit, if a failed check left it running)
trap '[ -z "$srv" ] || kill "$srv" 2>/dev/null; [ ! -s k.pid ] || kill -9 "$(cat k.pid)" 2>/dev/null; _cleanup' EXIT

# serve ADDR: qemu-nbd serving d.qcow2 on ADDR, a Unix socket SOCK (its
# own for each run: a server of an earlier run never removes it) or
# tcp:PORT on 127.0.0.1 (the same port again after a stop), once it
# answered a handshake (nbd_ready: a qemu-nbd SIGTERMed before it serves
# runs on, and stop waited for it; -t: the probe is a client too).
serve() {
    case $1 in
    tcp:*)
        qemu-nbd -t -b 127.0.0.1 -p "${1#tcp:}" -f qcow2 d.qcow2 &
        srv=$!
        nbd_ready "nbd://127.0.0.1:${1#tcp:}" $srv || finish
        ;;
    *)
        qemu-nbd -t -k "$PWD/$1" -f qcow2 d.qcow2 &
        srv=$!
        nbd_ready "$1" $srv || finish
        ;;
    esac
}

# addr_opts ADDR: the --image-opts server options of ADDR
addr_opts() {
    case $1 in
    tcp:*) echo "server.type=inet,server.host=127.0.0.1,server.port=${1#tcp:}" ;;
    *) echo "server.type=unix,server.path=$PWD/$1" ;;
    esac
}

stop() {
    stop_server "$srv" qemu-nbd
    srv=
}

# one_run OUT ADDR RESTART OPTS MS TOOL...: TOOL --image-opts OPTS (an NBD
# export on ADDR) writes, sleeps MS ms, reads and writes again; the server
# is stopped once the first write is done, and started again when RESTART
# is 1.  A restarted server must be up before the read: if the client got
# there first (a loaded machine), late=1 and the run does not count.
one_run() {
    local out=$1 sock=$2 restart=$3 opts=$4 ms=$5 client
    shift 5
    serve "$sock"
    rm -f "$out" # the wait below must not see an earlier run's "wrote"
    stdbuf -oL "$@" --image-opts "driver=nbd,$(addr_opts "$sock")$opts" \
        -c 'write -P 1 0 64k' -c "sleep $ms" -c 'read -P 1 0 64k' \
        -c 'write -P 2 64k 64k' >"$out" 2>"$out.err" &
    client=$!
    for _ in $(seq 1200); do
        { grep -qs '^wrote' "$out" || ! kill -0 $client 2>/dev/null; } && break
        sleep 0.05
    done
    stop
    if [ "$restart" = 1 ]; then
        serve "$sock"
        grep -qs '^read' "$out" "$out.err" && late=1
    fi
    wait "$client"
    echo "rc $?" >>"$out"
    [ -z "$srv" ] || stop
}

# both DESC RESTART OPTS: qemu-io and qimg io print the same; over TCP
# when TCP is set.  Runs where a restarted server came up after the
# client's read (late) are run again with a longer sleep: what is compared
# is the client after a restart.
n=0
TCP=
port=$(tcp_port)
both() {
    local desc=$1 restart=$2 opts=$3 ms=1500 qa ma
    if [ -n "$TCP" ]; then
        desc="TCP: $desc"
    fi
    while :; do
        n=$((n + 1))
        qa=q$n.sock ma=m$n.sock
        if [ -n "$TCP" ]; then
            qa=tcp:$port ma=tcp:$port
        fi
        late=0
        "$QEMU_IMG" create -q -f qcow2 d.qcow2 1M || exit 1
        one_run q.out "$qa" "$restart" "$opts" $ms "$QEMU_IO"
        "$QEMU_IMG" create -q -f qcow2 d.qcow2 1M || exit 1 # qimg's writes alone
        one_run m.out "$ma" "$restart" "$opts" $ms "$QIMG" io
        [ "$late" = 0 ] && break
        [ $ms -lt 12000 ] || _fail "$desc: the server never restarted within ${ms} ms"
        ms=$((ms * 2))
    done
    assert_eq "$desc" "$(io_filter <q.out)" "$(io_filter <m.out)" || cat q.out.err m.out.err
}

both "reconnected within reconnect-delay" 1 ",reconnect-delay=7"
grep -q '^read 65536/65536' m.out || _fail "the read after the reconnect"
assert_rc "the writes reached the image" 0 "$QEMU_IO" -c 'read -P 1 0 64k' \
    -c 'read -P 2 64k 64k' d.qcow2
both "no server within reconnect-delay" 0 ",reconnect-delay=1"
grep -q '^read failed' m.out || _fail "the read without a server"
both "without reconnect-delay" 1 ""
grep -q '^read failed: Input/output error' m.out || _fail "EIO after the server went away"
TCP=1
both "reconnected within reconnect-delay" 1 ",reconnect-delay=7"
grep -q '^read 65536/65536' m.out || _fail "TCP: the read after the reconnect"
assert_rc "TCP: the writes reached the image" 0 "$QEMU_IO" -c 'read -P 1 0 64k' \
    -c 'read -P 2 64k 64k' d.qcow2
both "no server within reconnect-delay" 0 ",reconnect-delay=1"
grep -q '^read failed' m.out || _fail "TCP: the read without a server"

# died TOOL...: TOOL reads from an nbdkit export whose reads take 2 s; the
# server is killed (SIGKILL: no reply at all) once the first read reached
# it (its log filter), while it is in flight.
died() {
    local kpid
    rm -f k.sock k.pid k.log
    nbdkit -U "$PWD/k.sock" -P "$PWD/k.pid" --filter=log --filter=delay memory 1M \
        rdelay=2 logfile="$PWD/k.log" ||
        _fail "nbdkit did not start"
    wait_sock k.sock k.pid || _fail "nbdkit did not start"
    kpid=$(cat k.pid)
    [ -n "$kpid" ] || _fail "nbdkit wrote no pid"
    "$@" --image-opts "driver=nbd,server.type=unix,server.path=$PWD/k.sock" \
        -c 'read 0 64k' -c 'read 0 4k' >died.out 2>&1 &
    local client=$!
    for _ in $(seq 1200); do
        { grep -q 'Read id=' k.log 2>/dev/null || ! kill -0 $client 2>/dev/null; } && break
        sleep 0.05
    done
    grep -q 'Read id=' k.log || _fail "the read did not reach nbdkit"
    kill -9 "$kpid"
    wait "$client"
    echo "rc $?" >>died.out
    gone "$kpid" && rm -f k.pid || _fail "nbdkit still runs"
    cat died.out
}
assert_eq "the server died under a read" "$(died "$QEMU_IO")" "$(died "$QIMG" io)"

same_as_qemu_err info --image-opts \
    "driver=nbd,server.type=unix,server.path=$PWD/x.sock,reconnect-delay=x"

finish
