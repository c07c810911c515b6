#!/bin/bash
# qimg nbd (tools/nbd.c) with qemu-nbd's options and defaults, clients
# qemu-io, qemu-img and nbdinfo:
#  - by default one client, and the server exits when it leaves (data
#    flushed, check clean); -t keeps serving; --fork returns once ready
#    and writes --pid-file; -p/-b TCP; -x only that export name; -e limits
#    the clients at once (one past it waits, as with qemu-nbd); -r
#    refuses writes; -s throws writes away; -l serves a snapshot; qemu-img map through the export is qemu-nbd's;
#    TLS with qemu-nbd's --object tls-creds-x509 / --tls-creds; -L prints
#    qemu-nbd -L's listing of either server;
#  - bad options, nbdkit missing, a malformed image and an image in use
#    (by qemu-io, and by a running QEMU) end with exit 1 and the reason
#    (nbd.c facts 3, 4).
. "${0%/*}/../common.sh"
requires qimg qimg-nbd-plugin nbdkit nbdinfo qemu-img qemu-io qemu-nbd openssl qemu-system-x86_64

"$QEMU_IMG" create -q -f qcow2 d.qcow2 64M
"$QEMU_IO" -c 'write -P 0x11 0 4M' -c 'write -z 8M 1M' -c 'write -P 0x12 30M 64k' \
    d.qcow2 >/dev/null
uri() { echo "nbd+unix:///${2:-}?socket=$PWD/$1"; }
refused() { # DESC PATTERN ARGS...
    local desc=$1 pat=$2
    shift 2
    timeout 60 "$@" >r.out 2>r.err
    local rc=$?
    assert_eq "$desc: exit code" 1 "$rc"
    _checks=$((_checks + 1))
    grep -q "$pat" r.err || _fail "$desc: stderr: $(cat r.err)"
}
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; _cleanup' EXIT

# Servers without -t take one client: each is used once it listens
# (nbd_listening: its socket exists from bind(), and a client that came
# before listen() was refused, and the server then waited for one forever),
# and its end is waited for 60 s (server_left).  Servers with -t are used
# once they answered a handshake (nbd_ready), and stopped by stop_server.

# 1. Defaults: serve, one client writes, the server exits when it leaves.
"$QIMG" nbd -k "$PWD/a.sock" --pid-file "$PWD/a.pid" d.qcow2 2>a.err &
srv=$!
pids+=($srv)
nbd_listening a.sock a.pid $srv || finish
assert_rc "a client writes" 0 \
    timeout 60 "$QEMU_IO" -f raw -c 'write -P 0x21 1M 1M' "$(uri a.sock)"
assert_rc "the server exits after the last client (no -t)" 0 server_left $srv "qimg nbd"
assert_eq "the server's exit status" 0 "$LEFT_RC"
assert_rc "the write is in the image" 0 "$QEMU_IO" -c 'read -P 0x21 1M 1M' d.qcow2
assert_rc "check clean" 0 "$QEMU_IMG" check d.qcow2

# 2. -t: several clients one after the other; qemu-img map is qemu-nbd's.
"$QIMG" nbd -t -r -k "$PWD/m.sock" d.qcow2 &
srv=$!
pids+=($srv)
qemu-nbd -t -r -k "$PWD/q.sock" -f qcow2 d.qcow2 &
qsrv=$!
pids+=($qsrv)
{ nbd_ready m.sock $srv && nbd_ready q.sock $qsrv; } || finish
for i in 1 2; do
    assert_eq "-t: client $i: qemu-img map as through qemu-nbd" \
        "$("$QEMU_IMG" map -f raw --output=json "$(uri q.sock)")" \
        "$("$QEMU_IMG" map -f raw --output=json "$(uri m.sock)")"
done
# -L: the listing of both servers, as qemu-nbd -L prints it
for sk in m.sock q.sock; do
    assert_eq "-L -k $sk: qemu-nbd's listing" "$(qemu-nbd -L -k "$PWD/$sk")" \
        "$("$QIMG" nbd -L -k "$PWD/$sk")"
done
_checks=$((_checks + 1))
kill -0 $srv 2>/dev/null || _fail "-t: the server exited"
rm -f w.out
"$QEMU_IO" -f raw -c 'write -P 0x33 0 4k' "$(uri m.sock)" >w.out 2>&1
_checks=$((_checks + 1))
grep -q "Permission denied\|Operation not permitted\|read-only" w.out ||
    _fail "-r: a write was not refused: $(cat w.out)"
assert_rc "SIGTERM ends the server" 0 stop_server $srv "qimg nbd -t"
stop_server $qsrv qemu-nbd

# 3. -e: one client at a time by default, -e 2 lets a second in; a client
# past the limit waits until a place frees (qemu-nbd stops accepting, it
# never refuses; qimg-plugin.c invariant 7), against qemu-nbd the same way.
for e in 1 2; do
    for tool in qimg qemu-nbd; do
        rm -f e.sock
        if [ $tool = qimg ]; then
            "$QIMG" nbd -t -e $e -k "$PWD/e.sock" d.qcow2 &
        else
            qemu-nbd -t -e $e -f qcow2 -k "$PWD/e.sock" d.qcow2 &
        fi
        srv=$!
        pids+=($srv)
        nbd_ready e.sock $srv || finish
        # a client that stays connected (qemu-io's sleep command), once it
        # was served (its read done: a loaded machine can take longer than
        # any sleep to start it, and the second client would come first)
        rm -f hold.out
        stdbuf -oL "$QEMU_IO" -f raw -c 'read 0 512' -c 'sleep 30000' "$(uri e.sock)" \
            >hold.out 2>&1 &
        hold=$!
        for _ in $(seq 1200); do
            { grep -qs '^read 512/512' hold.out || ! kill -0 $hold 2>/dev/null; } && break
            sleep 0.05
        done
        timeout 60 nbdinfo --size "$(uri e.sock)" >e.out 2>&1 &
        waiter=$!
        sleep 2
        if [ $e = 1 ]; then
            _checks=$((_checks + 1))
            kill -0 $waiter 2>/dev/null || _fail "$tool -e 1: a second client did not wait: $(cat e.out)"
            kill $hold
            wait $waiter
            assert_eq "$tool -e 1: the waiting client is served once the first left" \
                "0 67108864" "$? $(cat e.out)"
        else
            wait $waiter
            assert_eq "$tool -e 2: a second client is served at once" "0 67108864" \
                "$? $(cat e.out)"
            kill $hold
        fi
        wait $hold 2>/dev/null
        stop_server $srv "$tool -t -e $e"
    done
done

# 4. --fork and --pid-file; TCP with -p and -b; -x NAME only.
port=$(tcp_port)
assert_rc "--fork returns once ready" 0 \
    timeout 60 "$QIMG" nbd --fork --pid-file "$PWD/n.pid" -t -p $port -b 127.0.0.1 -x disk \
    d.qcow2
_checks=$((_checks + 1))
[ -s n.pid ] || _fail "--pid-file: no pid"
srv=$(cat n.pid)
pids+=($srv)
nbdinfo --size "nbd://127.0.0.1:$port/other" >x.out 2>&1
rc=$?
_checks=$((_checks + 1))
[ $rc != 0 ] || _fail "-x disk: export 'other' was served"
nbdinfo --size "nbd://127.0.0.1:$port/" >x.out 2>&1
rc=$?
_checks=$((_checks + 1))
[ $rc != 0 ] || _fail "-x disk: the default export was served"
_checks=$((_checks + 1))
nbdinfo --list "nbd://127.0.0.1:$port/" | grep -q "^export=\"disk\":\|export=.disk" ||
    _fail "-x disk: not listed: $(nbdinfo --list "nbd://127.0.0.1:$port/" 2>&1)"
assert_eq "-x disk: the size over TCP" 67108864 "$(nbdinfo --size "nbd://127.0.0.1:$port/disk")"
assert_eq "-L over TCP: qemu-nbd's listing" "$(qemu-nbd -L -b 127.0.0.1 -p $port)" \
    "$("$QIMG" nbd -L -b 127.0.0.1 -p $port)"
stop_server "$srv" "qimg nbd --fork -t"
# without -t a forked server also ends with its client
rm -f f.pid
assert_rc "--fork (no -t)" 0 timeout 60 "$QIMG" nbd --fork --pid-file "$PWD/f.pid" \
    -k "$PWD/f.sock" d.qcow2
srv=$(cat f.pid)
pids+=($srv)
assert_eq "--fork: served" 67108864 "$(nbdinfo --size "$(uri f.sock)")"
assert_rc "--fork: the server exits after the last client" 0 \
    server_left "$srv" "qimg nbd --fork"

# TLS: --object tls-creds-x509 and --tls-creds, as qemu-nbd takes them;
# a client without TLS is refused.
mkdir pki
(cd pki &&
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca-cert.pem -days 2 \
        -subj "/CN=qimg test CA" &&
    openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr \
        -subj "/CN=localhost" &&
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >ext.cnf &&
    openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial \
        -out server-cert.pem -days 2 -extfile ext.cnf) >/dev/null 2>&1
port=$(tcp_port)
assert_rc "TLS: serve" 0 timeout 60 "$QIMG" nbd --fork --pid-file "$PWD/t.pid" -t \
    -p $port -b 127.0.0.1 --object "tls-creds-x509,id=tls0,dir=$PWD/pki,endpoint=server" \
    --tls-creds tls0 d.qcow2
pids+=("$(cat t.pid)")
assert_eq "TLS: a TLS client is served" 67108864 \
    "$(nbdinfo --size "nbds://localhost:$port/?tls-certificates=$PWD/pki")"
nbdinfo --size "nbd://localhost:$port/" >x.out 2>&1
rc=$?
_checks=$((_checks + 1))
[ $rc != 0 ] || _fail "TLS: a plain client was served"
stop_server "$(cat t.pid)" "qimg nbd --tls-creds"
refused "--tls-creds without its object" "No TLS credentials object with id 'x'" \
    "$QIMG" nbd --tls-creds x -p $port d.qcow2

# 5. -s: writes go to a throw-away overlay; -l: a snapshot, read-only.
cp d.qcow2 s.qcow2
sum=$(md5sum <s.qcow2)
"$QIMG" nbd -s -k "$PWD/s.sock" --pid-file "$PWD/s.pid" s.qcow2 &
srv=$!
pids+=($srv)
nbd_listening s.sock s.pid $srv || finish
assert_rc "-s: writes accepted" 0 timeout 60 \
    "$QEMU_IO" -f raw -c 'write -P 0x44 0 1M' -c 'read -P 0x44 0 1M' "$(uri s.sock)"
server_left $srv "qimg nbd -s"
assert_eq "-s: the image unchanged" "$sum" "$(md5sum <s.qcow2)"
"$QEMU_IMG" snapshot -c snap s.qcow2
"$QEMU_IO" -c 'write -P 0x55 0 1M' s.qcow2 >/dev/null
"$QIMG" nbd -l snap -k "$PWD/l.sock" --pid-file "$PWD/l.pid" s.qcow2 &
srv=$!
pids+=($srv)
nbd_listening l.sock l.pid $srv || finish
assert_rc "-l snap: the snapshot's data" 0 timeout 60 \
    "$QEMU_IO" -f raw -r -c 'read -P 0x21 1M 1M' "$(uri l.sock)"
server_left $srv "qimg nbd -l"

# 6. Errors: exit 1 and the reason.
refused "unknown option" "^qimg: .*unrecognized option\|^qimg: invalid option" \
    "$QIMG" nbd --bogus d.qcow2
refused "no file" "Expecting one image file name" "$QIMG" nbd -k x.sock
refused "-c /dev/nbd0" "^qimg: /dev/nbd devices are not supported" \
    "$QIMG" nbd -c /dev/nbd0 d.qcow2
refused "bad cache" "^qimg: Invalid cache option: sometimes" \
    "$QIMG" nbd --cache=sometimes -k x.sock d.qcow2
refused "bad port" "^qimg: Invalid port number" "$QIMG" nbd -p 99999 d.qcow2
refused "-A" "not supported" "$QIMG" nbd -A -k x.sock d.qcow2
refused "-L with a file" "L takes no image file name" "$QIMG" nbd -L -k x.sock d.qcow2
refused "-L, no server" "^qimg: .*connect" "$QIMG" nbd -L -k "$PWD/nosuch.sock"
refused "nbdkit missing" "^qimg: nbdkit not found" \
    env PATH=/nonexistent "$QIMG" nbd -k x.sock d.qcow2
printf 'QFI\373\0\0\0\3garbage' >bad.qcow2
truncate -s 1M bad.qcow2
refused "malformed image" "bad.qcow2" "$QIMG" nbd -f qcow2 -k "$PWD/x.sock" bad.qcow2
cp d.qcow2 held.qcow2
hold_image held.qcow2
hold=$HOLDER
pids+=($hold)
refused "image in use" "lock" "$QIMG" nbd -k "$PWD/x.sock" held.qcow2
kill $hold
wait $hold 2>/dev/null
# a running QEMU (TCG, no guest: -S) with the image as its disk
cp d.qcow2 vm.qcow2
timeout 120 "$QEMU_SYSTEM" -machine pc,accel=tcg -m 64 -nographic -nodefaults -S \
    -drive file=vm.qcow2,format=qcow2,if=virtio -monitor none >vm.out 2>&1 &
vm=$!
pids+=($vm)
# Watch /proc/locks for QEMU's write lock (byte 101), as hold_image does:
# opening vm.qcow2 here (qemu-img info) could take its lock while QEMU
# opens, and make QEMU's own open fail.
locked=
for _ in $(seq 400); do
    proc_locks vm.qcow2 | awk '$7 <= 101 && $8 >= 101 { f = 1 } END { exit !f }' &&
        { locked=1; break; }
    kill -0 $vm 2>/dev/null || break
    sleep 0.05
done
assert_eq "QEMU holds vm.qcow2" 1 "$locked" || cat vm.out
refused "an image QEMU runs" "lock" "$QIMG" nbd -k "$PWD/x.sock" vm.qcow2
kill $vm

finish
