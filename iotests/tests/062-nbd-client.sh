#!/bin/bash
# NBD images in qimg's commands (block/nbd.c, libnbd), qemu-nbd as the
# server and qemu-img as the oracle on the same URIs:
#  - info, map (base:allocation), compare, io, convert from an export, and
#    convert -n into one; URI forms nbd+unix://, nbd://host:port/name and
#    qemu-img's nbd:unix:PATH / nbd:HOST:PORT:exportname=NAME;
#  - check and writes of a qcow2 file exported raw (qemu-nbd -f raw);
#  - several connections to a multi-conn server (qimg nbd -e 0), and to
#    one that takes fewer clients than qimg would open (qemu-nbd -e 2
#    leaves the third in its backlog): the open goes on with two;
#  - a read-only export refuses a read-write open; server errors reach the
#    command (nbdkit's error filter); a server that is not there is a clear
#    open error;
#  - odd servers (nbdkit's blocksize, nozero, noextents, delay filters).
# Each server is used only once it answered a handshake (nbd_ready: qemu-nbd
# ignores a SIGTERM that comes before, and the test hung on its wait), and
# each stop is bounded (stop_server): a server that does not end fails the
# test in 30 s.
. "${0%/*}/../common.sh"
requires qimg qimg-nbd-plugin nbdkit nbdinfo qemu-img qemu-io qemu-nbd

"$QEMU_IMG" create -q -f qcow2 d.qcow2 64M
"$QEMU_IO" -c 'write -P 0x11 0 4M' -c 'write -z 8M 1M' -c 'write -P 0x12 30M 64k' \
    -c 'write -P 0x13 63M 1M' d.qcow2 >/dev/null
cp d.qcow2 ref.qcow2 # d.qcow2 as served, for local comparisons while it is
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; _cleanup' EXIT
U="nbd+unix:///?socket=$PWD/q.sock"
qemu-nbd -t -e 4 -k "$PWD/q.sock" -f qcow2 d.qcow2 &
pids+=($!)
nbd_ready q.sock $! || finish

# 1. Reading through an export, as qemu-img reads it.
same_as_qemu info -f raw "$U"
same_as_qemu info -f raw --output=json "$U"
same_as_qemu map -f raw --output=json "$U"
same_as_qemu map -f raw "$U"
same_as_qemu info -f raw "nbd:unix:$PWD/q.sock"
same_as_qemu compare -f raw -F qcow2 "$U" ref.qcow2
rm -f from.qcow2
assert_rc "convert from an export" 0 "$QIMG" convert -f raw -O qcow2 "$U" from.qcow2
assert_rc "convert from an export: contents" 0 "$QEMU_IMG" compare ref.qcow2 from.qcow2
rm -f qfrom.qcow2
"$QEMU_IMG" convert -f raw -O qcow2 "$U" qfrom.qcow2
assert_eq "convert from an export: qemu-img's map" "$(map_flags qfrom.qcow2)" \
    "$(map_flags from.qcow2)"
assert_rc "io through an export" 0 \
    "$QIMG" io -f raw -c 'write -P 0x21 1M 100k' -c 'read -P 0x21 1M 100k' "$U"
assert_rc "io: the write reached the image" 0 "$QEMU_IO" -f raw -c 'read -P 0x21 1M 100k' "$U"

stop_server "${pids[0]}" qemu-nbd

# 2. convert -n into an export (qemu-nbd serving a fresh qcow2).
"$QEMU_IMG" create -q -f qcow2 t.qcow2 64M
qemu-nbd -t -k "$PWD/t.sock" -f qcow2 t.qcow2 &
tpid=$!
pids+=($tpid)
nbd_ready t.sock $tpid || finish
assert_rc "convert -n into an export" 0 \
    "$QIMG" convert -n -f qcow2 -O raw d.qcow2 "nbd+unix:///?socket=$PWD/t.sock"
stop_server $tpid qemu-nbd
assert_rc "convert -n into an export: contents" 0 "$QEMU_IMG" compare d.qcow2 t.qcow2
assert_rc "convert -n into an export: check" 0 "$QEMU_IMG" check t.qcow2

# 3. A qcow2 file exported as raw: qimg check and writes through NBD.
cp d.qcow2 c.qcow2
qemu-nbd -t -k "$PWD/c.sock" -f raw c.qcow2 &
cpid=$!
pids+=($cpid)
nbd_ready c.sock $cpid || finish
C="nbd+unix:///?socket=$PWD/c.sock"
same_as_qemu check -f qcow2 "$C"
same_as_qemu check -f qcow2 --output=json "$C"
# (in place: the export cannot grow, as for qemu-io)
assert_rc "write a qcow2 on an export" 0 \
    "$QIMG" io -f qcow2 -c 'write -P 0x31 1M 2M' -c 'write -z 0 64k' "$C"
same_as_qemu check -f qcow2 "$C"
stop_server $cpid qemu-nbd
assert_rc "qcow2 on an export: check after" 0 "$QEMU_IMG" check c.qcow2
assert_rc "qcow2 on an export: the data" 0 "$QEMU_IO" -c 'read -P 0x31 1M 2M' c.qcow2

# 4. Several connections (qimg nbd -e 0 advertises multi-conn), TCP and a
# named export in both URI forms.
port=$(tcp_port)
cp d.qcow2 m.qcow2
"$QIMG" nbd -t -e 0 -p $port -b 127.0.0.1 -x disk m.qcow2 &
mpid=$!
pids+=($mpid)
nbd_ready "nbd://127.0.0.1:$port" $mpid || finish
M="nbd://127.0.0.1:$port/disk"
rm -f src.raw
head -c $((64 * 1024 * 1024)) /dev/urandom >src.raw
assert_rc "convert -n -m 16 into a multi-conn export" 0 \
    "$QIMG" convert -n -m 16 -f raw -O raw src.raw "$M"
assert_rc "multi-conn: the data" 0 "$QEMU_IMG" compare -f raw -F raw src.raw \
    "nbd:127.0.0.1:$port:exportname=disk"
same_as_qemu info -f raw "nbd:127.0.0.1:$port:exportname=disk"
stop_server $mpid "qimg nbd"
assert_rc "multi-conn: check" 0 "$QEMU_IMG" check m.qcow2

# A multi-conn server that takes two clients (nbd.c invariant 1): the third
# connection sits in qemu-nbd's listen backlog, never answered; the open
# gives up on it and works with two instead of waiting forever.
cp d.qcow2 e2.qcow2
qemu-nbd -t -e 2 -k "$PWD/e2.sock" -f qcow2 e2.qcow2 2>/dev/null &
pids+=($!)
nbd_ready e2.sock $! || finish
assert_rc "a server that takes two clients: write" 0 timeout 60 \
    "$QIMG" io -f raw -c 'write -P 0x77 1M 64k' "nbd+unix:///?socket=$PWD/e2.sock"
assert_rc "a server that takes two clients: read back" 0 timeout 60 \
    "$QIMG" io -f raw -c 'read -P 0x77 1M 64k' -c 'read -P 0x11 0 1M' \
    "nbd:unix:$PWD/e2.sock"

# 5. Errors.
qemu-nbd -t -r -k "$PWD/r.sock" -f qcow2 d.qcow2 &
pids+=($!)
nbd_ready r.sock $! || finish
"$QIMG" io -f raw -c 'write 0 4k' "nbd+unix:///?socket=$PWD/r.sock" >e.out 2>&1
assert_eq "read-only export: exit code" 1 "$?"
_checks=$((_checks + 1))
grep -q "^qimg: .*read-only" e.out || _fail "read-only export: $(cat e.out)"
assert_rc "read-only export: -r reads" 0 \
    "$QIMG" io -r -f raw -c 'read -P 0x11 2M 2M' "nbd+unix:///?socket=$PWD/r.sock"
"$QIMG" info -f raw "nbd+unix:///?socket=$PWD/nosuch.sock" >e.out 2>&1
assert_eq "no server: exit code" 1 "$?"
_checks=$((_checks + 1))
grep -q "^qimg: Could not open 'nbd+unix:///?socket=.*nosuch.sock'" e.out ||
    _fail "no server: $(cat e.out)"
"$QIMG" info -f raw "nbd:bogus:1:2:3" >e.out 2>&1
assert_eq "bad nbd: name: exit code" 1 "$?"
_checks=$((_checks + 1))
grep -q "expected nbd:unix:PATH" e.out || _fail "bad nbd: name: $(cat e.out)"
# read errors from the server reach the command with the offset
cp d.qcow2 f.qcow2
nbdkit -U "$PWD/f.sock" -P f.pid --filter=error "$QIMG_NBD_PLUGIN" file=f.qcow2 \
    error=EIO error-pread-rate=100% error-pwrite-rate=100%
wait_sock f.sock f.pid
pids+=("$(cat f.pid)")
nbd_ready f.sock "$(cat f.pid)" || finish
"$QIMG" convert -f raw -O raw "nbd+unix:///?socket=$PWD/f.sock" out.raw >e.out 2>&1
assert_eq "server read error: exit code" 1 "$?"
_checks=$((_checks + 1))
grep -q "^qimg: error while reading at byte [0-9]*: .*Input/output error" e.out ||
    _fail "server read error: $(cat e.out)"
"$QIMG" io -f raw -c 'write 0 4k' "nbd+unix:///?socket=$PWD/f.sock" >e.out 2>&1
_checks=$((_checks + 1))
grep -q "Input/output error" e.out || _fail "server write error: $(cat e.out)"

# 6. Odd servers (nbdkit filters in front of the plugin): small maximum
# requests, no zeroes, no extents, slow reads; data right, map as qemu-img's.
cp d.qcow2 o.qcow2
odd() { # DESC "FILTERS" PARAMS...
    local desc=$1 filters=$2
    shift 2
    rm -f o.sock o.pid
    # shellcheck disable=SC2086
    nbdkit -U "$PWD/o.sock" -P o.pid $filters "$QIMG_NBD_PLUGIN" file=o.qcow2 "$@"
    wait_sock o.sock o.pid
    pids+=("$(cat o.pid)")
    nbd_ready o.sock "$(cat o.pid)" || finish
    O="nbd+unix:///?socket=$PWD/o.sock"
    assert_rc "$desc: io" 0 "$QIMG" io -f raw -c 'write -P 0x71 100 300000' \
        -c 'read -P 0x71 100 300000' -c 'write -z 5M 1M' -c 'read -P 0 5M 1M' "$O"
    same_as_qemu map -f raw --output=json "$O"
    rm -f odd.qcow2
    assert_rc "$desc: convert from it" 0 "$QIMG" convert -f raw -O qcow2 "$O" odd.qcow2
    assert_rc "$desc: the copy" 0 "$QEMU_IMG" compare -f raw "$O" odd.qcow2
    stop_server "$(cat o.pid)" "nbdkit ($desc)"
}
odd "blocksize maxdata=64k" --filter=blocksize maxdata=65536
odd "nozero, noextents" "--filter=nozero --filter=noextents"
odd "slow reads" --filter=delay rdelay=5ms

# 7. Requests in flight per connection (nbd.c invariant 1): eight reads on a
# server whose reads take 300 ms overlap on the connections (nbdkit's log
# filter records when each starts and returns); a server killed while they
# are in flight fails each of them with EIO (nbd.c invariant 2), no hang.
rm -f l.sock l.pid l.log
nbdkit -U "$PWD/l.sock" -P l.pid --filter=log --filter=delay file src.raw \
    delay-read=300ms logfile="$PWD/l.log"
wait_sock l.sock l.pid
pids+=("$(cat l.pid)")
nbd_ready l.sock "$(cat l.pid)" || finish
L="nbd+unix:///?socket=$PWD/l.sock"
reads=()
for i in 0 1 2 3 4 5 6 7; do reads+=(-c "aio_read -P 0 ${i}M 64k"); done
timeout 60 "$QIMG" io -r -f raw "${reads[@]/-P 0 /}" -c aio_flush "$L" >/dev/null
assert_rc "in flight: reads done" 0 test "$(grep -c '\.\.\.Read id=.* return=0' l.log)" = 8
inflight=$(awk '/ Read id=/ { c = $3; n[c]++; if (n[c] > m) m = n[c] }
    /\.\.\.Read id=/ { n[$3]-- } END { print m + 0 }' l.log)
assert_rc "in flight: several reads on one connection ($inflight)" 0 test "$inflight" -ge 2
stop_server "$(cat l.pid)" "nbdkit (delay-read=300ms)"
rm -f l.sock l.pid
rm -f l.log
nbdkit -U "$PWD/l.sock" -P l.pid --filter=log --filter=delay file src.raw delay-read=5 \
    logfile="$PWD/l.log"
wait_sock l.sock l.pid
pids+=("$(cat l.pid)")
nbd_ready l.sock "$(cat l.pid)" || finish
# killed once a read reached it (its log), not after a fixed time: on a
# loaded machine the client could connect after the kill
(
    for _ in $(seq 600); do
        grep -qs ' Read id=' l.log && break
        sleep 0.05
    done
    kill -9 "$(cat l.pid)"
) &
timeout 30 "$QIMG" io -r -f raw "${reads[@]/-P 0 /}" "$L" >e.out 2>&1
rc=$? # (aio failures print, as qemu-io's; the exit code is not theirs)
assert_rc "server killed mid-read: no hang ($rc)" 0 test "$rc" -ne 124
assert_eq "server killed mid-read: every read failed" 8 \
    "$(grep -c 'readv failed: Input/output error' e.out)"

# 8. libnbd is loaded at the first NBD open, not at start-up (nbd-lib.h
# invariant 1, dl.h invariant 1): a command on a file never maps it, one on
# an export does, and so does -L (tools/nbd-list.c).
loaded() { LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -c 'calling init: .*/libnbd\.so\.0$'; }
assert_eq "lazy libnbd: info of a file" 0 "$(loaded "$QIMG" info -f raw src.raw)"
assert_eq "lazy libnbd: version" 0 "$(loaded "$QIMG" --version)"
rm -f l.sock l.pid
nbdkit -U "$PWD/l.sock" -P l.pid file src.raw
wait_sock l.sock l.pid
pids+=("$(cat l.pid)")
nbd_ready l.sock "$(cat l.pid)" || finish
assert_eq "lazy libnbd: info of an export" 1 \
    "$(loaded "$QIMG" info "nbd+unix:///?socket=$PWD/l.sock")"
assert_eq "lazy libnbd: nbd -L" 1 "$(loaded "$QIMG" nbd -L -k "$PWD/l.sock")"
stop_server "$(cat l.pid)" nbdkit

finish
