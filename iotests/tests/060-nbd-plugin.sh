#!/bin/bash
# nbdkit-qimg-plugin.so (nbd/qimg-plugin.c) against real clients: qemu-io,
# qemu-img, nbdinfo and nbdcopy, with qemu-nbd serving the same image as the
# oracle for what the export shows:
#  - extents (base:allocation) as qemu-nbd's, backing chain included
#    (invariant 4); size, block sizes, multi-conn, flags;
#  - writes from qemu-io, qemu-img convert -n and nbdcopy (4 connections)
#    land as they would locally: qemu-img compare equal, check clean;
#  - 4 clients at once writing disjoint ranges;
#  - a client that leaves without flushing loses nothing: the recording
#    node shows a flush after every write once the last client is gone
#    (invariant 2);
#  - a client killed mid-write leaves what it flushed, a server killed
#    mid-write leaves a consistent image (leaks at most);
#  - readonly=true and snapshot= refuse writes; bad parameters, a malformed
#    image and an image another process holds fail the server at start.
. "${0%/*}/../common.sh"
requires qimg qimg-nbd-plugin nbdkit nbdinfo nbdcopy qemu-img qemu-io qemu-nbd python3

P=$QIMG_NBD_PLUGIN
MiB=$((1024 * 1024))

"$QEMU_IMG" create -q -f qcow2 base.qcow2 64M
"$QEMU_IO" -c 'write -P 0x11 0 16M' -c 'write -P 0x12 40M 1M' base.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 top.qcow2 64M
"$QEMU_IO" -c 'write -P 0x21 4M 2M' -c 'write -z 8M 1M' -c 'write -P 0x22 32M 64k' \
    -c 'write -z 40M 512k' top.qcow2 >/dev/null

# serve SOCKET ARGS...: nbdkit with the plugin in the background, ready:
# its parent returns once it listens, its daemon writes the pid file after
# (up to 60 s: a daemon starts late on a loaded machine, and stop needs
# its pid).
serve() {
    local sock=$1
    shift
    rm -f "$sock" srv.pid
    nbdkit -U "$sock" -P srv.pid "$P" "$@" 2>srv.err || return 1
    for _ in $(seq 1200); do
        [ -S "$sock" ] && [ -s srv.pid ] && return 0
        sleep 0.05
    done
    return 1
}
# stop: end the server serve started, bounded (stop_server: SIGTERM, 30 s,
# then a FAILED line): the next serve of the same image needs its lock.
stop() {
    [ -s srv.pid ] && stop_server "$(cat srv.pid)" nbdkit
    rm -f srv.pid
}
qpid=
trap 'stop; [ -z "$qpid" ] || kill -9 $qpid 2>/dev/null; _cleanup' EXIT
uri() { echo "nbd+unix:///?socket=$PWD/$1"; }
# merge adjacent extents of the same type (servers may split differently)
nmap() {
    nbdinfo --map "$1" | awk '{ if (n && $3 == t && $1 == s + l) { l += $2 } else {
        if (n) print s, l, t; s = $1; l = $2; t = $3; n = 1 } } END { if (n) print s, l, t }'
}

# 1. What the export shows, against qemu-nbd on the same image.
assert_rc "serve top.qcow2 read-only" 0 serve m.sock file=top.qcow2 readonly=true
rm -f q.sock
qemu-nbd -r -t -k "$PWD/q.sock" -f qcow2 top.qcow2 &
qpid=$!
nbd_ready q.sock $qpid || finish
assert_eq "extents: qemu-nbd's" "$(nmap "$(uri q.sock)")" "$(nmap "$(uri m.sock)")"
assert_eq "size" "$(nbdinfo --size "$(uri q.sock)")" "$(nbdinfo --size "$(uri m.sock)")"
info=$(nbdinfo "$(uri m.sock)")
for f in "can_multi_conn: true" "is_read_only: true" "can_flush: true" \
    "block_size_minimum: 1" "block_size_preferred: 65536" "block_size_maximum: 33554432"; do
    _checks=$((_checks + 1))
    grep -qF "$f" <<<"$info" || _fail "nbdinfo: no '$f'"
done
assert_rc "contents through the export" 0 \
    "$QEMU_IMG" compare -f raw -F qcow2 "$(uri m.sock)" top.qcow2
rm -f w.out
"$QEMU_IO" -f raw -c 'write -P 0x33 0 4k' "$(uri m.sock)" >w.out 2>&1
_checks=$((_checks + 1))
grep -q "Operation not permitted\|Permission denied\|read-only\|Read-only" w.out ||
    _fail "readonly=true: a write was not refused: $(cat w.out)"
stop_server $qpid qemu-nbd
qpid=
stop

# 2. Writes through the export land as they would locally.
cp top.qcow2 ref.qcow2
cp top.qcow2 w.qcow2
ops=(-c 'write -P 0x44 1M 3M' -c 'write -P 0x45 9M 100k' -c 'write -z 5M 512k'
    -c 'discard 32M 64k' -c 'write -P 0x46 63M 1M' -c 'flush')
"$QEMU_IO" "${ops[@]}" ref.qcow2 >/dev/null
assert_rc "serve w.qcow2 (discard=unmap)" 0 serve m.sock file=w.qcow2 discard=unmap
assert_rc "qemu-io writes through the export" 0 "$QEMU_IO" -f raw "${ops[@]}" "$(uri m.sock)"
stop
assert_rc "qemu-io writes: contents" 0 "$QEMU_IMG" compare ref.qcow2 w.qcow2
assert_rc "qemu-io writes: check" 0 "$QEMU_IMG" check w.qcow2

# qemu-img convert -n and nbdcopy (multi-conn) into a new qcow2 export
python3 -c "
import random
random.seed(60)
with open('src.raw', 'wb') as f:
    f.truncate(64 << 20)
    for off in range(0, 64 << 20, 3 << 20):
        f.seek(off); f.write(random.getrandbits(8 << 20).to_bytes(1 << 20, 'little'))
"
for client in qemu-img nbdcopy; do
    rm -f c.qcow2
    "$QEMU_IMG" create -q -f qcow2 c.qcow2 64M
    assert_rc "$client: serve" 0 serve m.sock file=c.qcow2
    if [ $client = qemu-img ]; then
        assert_rc "qemu-img convert -n into the export" 0 \
            "$QEMU_IMG" convert -n -f raw -O raw src.raw "$(uri m.sock)"
    else
        assert_rc "nbdcopy into the export" 0 nbdcopy --connections=4 src.raw "$(uri m.sock)"
    fi
    stop
    assert_rc "$client: contents" 0 "$QEMU_IMG" compare -f raw -F qcow2 src.raw c.qcow2
    assert_rc "$client: check" 0 "$QEMU_IMG" check c.qcow2
done

# 3. Four clients at once, disjoint ranges.
rm -f c.qcow2
"$QEMU_IMG" create -q -f qcow2 c.qcow2 64M
assert_rc "serve for 4 clients" 0 serve m.sock file=c.qcow2
pids=()
for i in 0 1 2 3; do
    "$QEMU_IO" -f raw -c "write -P $((0x50 + i)) $((i * 16))M 15M" "$(uri m.sock)" >/dev/null &
    pids+=($!)
done
for p in "${pids[@]}"; do
    wait "$p"
    assert_eq "a client's writes" 0 "$?"
done
stop
for i in 0 1 2 3; do
    assert_rc "client $i: its data" 0 \
        "$QEMU_IO" -c "read -P $((0x50 + i)) $((i * 16))M 15M" c.qcow2
done
assert_rc "4 clients: check" 0 "$QEMU_IMG" check c.qcow2

# 4. A client that never flushes (nbdcopy without --flush): once it is
# gone, a flush covering all its writes is in the recording node's log.
rm -f c.qcow2 rec.log
"$QEMU_IMG" create -q -f raw c.raw 64M
assert_rc "serve a recorded raw" 0 serve m.sock "file=record:$PWD/rec.log:$PWD/c.raw" format=raw
assert_rc "nbdcopy, no flush" 0 nbdcopy src.raw "$(uri m.sock)"
# the server keeps running: the flush came when the client left
cat >flushed.py <<'PY'
# Is there a completed flush that covers the log's last change?
import struct, sys
f = open(sys.argv[1], 'rb'); f.read(16)
pos, last_change, flushed = 16, -1, -1
while True:
    e = f.read(32)
    if len(e) < 32:
        break
    t, _fid, off, n, aux = struct.unpack('<IIQQQ', e)
    if t in (1, 6):
        f.seek(n, 1)
    if t in (1, 2, 3, 4):
        last_change = pos
    if t == 5:
        flushed = aux
    pos = f.tell()
sys.exit(0 if last_change >= 0 and flushed > last_change else 1)
PY
for _ in $(seq 100); do
    python3 flushed.py rec.log && break
    sleep 0.05
done
_checks=$((_checks + 1))
python3 flushed.py rec.log ||
    _fail "no flush after the last write of a client that left: $(python3 "$IOTESTS_DIR/reclog.py" rec.log)"
stop
assert_rc "nbdcopy, no flush: contents" 0 cmp src.raw c.raw

# 4b. A client killed mid-write: what it flushed is there, the image is
# consistent.  A server killed (SIGKILL) mid-write: consistent, leaks at most.
rm -f k.qcow2
"$QEMU_IMG" create -q -f qcow2 k.qcow2 64M
assert_rc "serve k.qcow2" 0 serve m.sock file=k.qcow2
assert_rc "a client writes and flushes" 0 \
    "$QEMU_IO" -f raw -c 'write -P 0x61 0 8M' -c flush "$(uri m.sock)"
"$QEMU_IO" -f raw -c 'write -P 0x62 16M 40M' "$(uri m.sock)" >/dev/null 2>&1 &
client=$!
sleep 0.2
kill -9 $client 2>/dev/null
wait $client 2>/dev/null
stop
assert_rc "client killed: check" 0 "$QEMU_IMG" check k.qcow2
assert_rc "client killed: the flushed data" 0 "$QEMU_IO" -c 'read -P 0x61 0 8M' k.qcow2
assert_rc "serve k.qcow2 again" 0 serve m.sock file=k.qcow2
nbdcopy src.raw "$(uri m.sock)" >/dev/null 2>&1 &
client=$!
sleep 0.3
spid=$(cat srv.pid)
kill -9 "$spid"
wait $client 2>/dev/null
# (not our child: wait until it is gone and its locks with it)
for _ in $(seq 200); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
rm -f srv.pid
"$QEMU_IMG" check k.qcow2 >c.out 2>&1
rc=$?
_checks=$((_checks + 1))
[ "$rc" = 0 ] || [ "$rc" = 3 ] || { _fail "server killed: check rc $rc"; cat c.out; }

# 5. Snapshots are read-only views.
cp top.qcow2 s.qcow2
"$QEMU_IMG" snapshot -c snap1 s.qcow2
"$QEMU_IO" -c 'write -P 0x66 0 1M' s.qcow2 >/dev/null
assert_rc "serve snapshot=snap1" 0 serve m.sock file=s.qcow2 snapshot=snap1
assert_rc "snapshot: its contents" 0 "$QEMU_IMG" compare -f raw -F qcow2 "$(uri m.sock)" top.qcow2
_checks=$((_checks + 1))
nbdinfo "$(uri m.sock)" | grep -q "is_read_only: true" || _fail "snapshot export is writable"
stop

# 6. The server refuses to start, with the reason.
start_fails() { # DESC PATTERN ARGS...
    local desc=$1 pat=$2
    shift 2
    # --run: a server that does start exits when the command is done
    timeout 20 nbdkit -U - "$P" "$@" --run true >x.out 2>x.err
    local rc=$?
    _checks=$((_checks + 1))
    if [ $rc = 0 ] || ! grep -q "$pat" x.err; then
        _fail "$desc: rc $rc, stderr: $(cat x.err)"
    fi
}
start_fails "no file" "file parameter is required" format=qcow2
start_fails "unknown parameter" "unknown parameter 'bogus'" file=top.qcow2 bogus=1
start_fails "bad cache mode" "cache=sometimes" file=top.qcow2 cache=sometimes
start_fails "detect-zeroes=unmap without discard=unmap" "needs discard=unmap" \
    file=top.qcow2 detect-zeroes=unmap
printf 'QFI\373\0\0\0\3garbage' >bad.qcow2
truncate -s 1M bad.qcow2
start_fails "malformed image" "bad.qcow2" file=bad.qcow2 format=qcow2
start_fails "missing image" "No such file" file=nosuch.qcow2
# an image another process holds for writing (QEMU's locks)
cp top.qcow2 held.qcow2
hold_image held.qcow2
hold=$HOLDER
start_fails "image in use" "lock" file=held.qcow2
kill $hold 2>/dev/null
wait $hold 2>/dev/null

finish
