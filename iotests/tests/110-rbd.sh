#!/bin/bash
# 110-rbd: Ceph RBD images (block/rbd.c) against qemu-img 7.2 on the same
# one-machine cluster (scripts/ceph-micro.sh, started once here and
# killed at the end by PID, also when a check fails): every command on
# rbd: names, json: and --image-opts fields, RBD snapshots, qcow2 on RBD,
# qimg nbd serving an RBD image, faults (a cluster that does not answer,
# an OSD stopped in the middle of a convert, missing pools and images, a
# snapshot opened for writing, requests the OSD or librbd fails: each
# reported for its own request by qimg io, convert and nbd), and the
# asynchronous API's random workload on RBD, also under TSan.
#
# make test runs the core of each part (one cluster start and stop, some
# 110 commands); QIMG_LONG=1 (make check-long) adds the other names,
# messages and options, convert -S 0, dd and measure, the dead cluster's
# timeout precedence, and the full asynchronous workload in the normal
# build besides TSan.
. "${0%/*}/../common.sh"
long() { [ -n "${QIMG_LONG:-}" ]; }

requires qimg qemu-img qemu-io qemu-nbd ceph-mon ceph-osd ceph rbd monmaptool uuidgen \
    python3 nbdkit nbdcopy
if ! "$QEMU_IMG" --help | grep -q 'Supported formats:.* rbd'; then
    missing "qemu-img has no RBD (install qemu-block-extra)"
fi
if "$QIMG" info rbd:p/i 2>&1 | grep -q 'built without RBD'; then
    missing "qimg was built without RBD (librbd-dev, librados-dev)"
fi

CLUSTER=$(mktemp -d /tmp/qimg-ceph.XXXXXX)
stop_cluster() {
    "$REPO_DIR/scripts/ceph-micro.sh" kill "$CLUSTER"
    rm -rf "$CLUSTER"
}
trap 'stop_cluster; _cleanup' EXIT
trap 'exit 143' TERM INT HUP
if ! "$REPO_DIR/scripts/ceph-micro.sh" start "$CLUSTER" >ceph.out 2>&1; then
    cat ceph.out
    _checks=$((_checks + 1))
    _fail "the test cluster did not start"
    finish
fi
export CEPH_CONF=$CLUSTER/ceph.conf
OSD_PID=$(cat "$CLUSTER"/osd*.pid)

# json_ints VAR KEY JSON: VAR = the numbers of each "KEY": N in the
# JSON text (one line, space-separated), read by the shell: the Ceph
# tools' answers are flat and a python3 costs ~40 ms of CPU a parse.
json_ints() {
    local _j=$3 _out=
    while [[ "$_j" =~ [{,][[:space:]]*\"$2\":[[:space:]]*([0-9]+)(.*) ]]; do
        _out+="${_out:+ }${BASH_REMATCH[1]}"
        _j=${BASH_REMATCH[2]}
    done
    printf -v "$1" '%s' "$_out"
}

# rbd_du IMAGE: the bytes the image's objects use ("rbd du": the
# used_size of each entry, summed).
rbd_du() {
    local j n u sum=0
    j=$(rbd du --format json "rbd/$1")
    json_ints u used_size "$j"
    if [ -z "$u" ]; then
        echo "no rbd du of $1" # (never the same as another image's)
        return 1
    fi
    for n in $u; do sum=$((sum + n)); done
    echo "$sum"
}

# 1. create (qemu-img makes rbd/qN, qimg rbd/mN): the same output, and
# images of the same size and object size.
both_create() { # N SIZE OPTIONS...
    local n=$1 size=$2
    shift 2
    "$QEMU_IMG" create "$@" "rbd:rbd/q$n" "$size" >q.out 2>&1
    local qrc=$?
    "$QIMG" create "$@" "rbd:rbd/m$n" "$size" >m.out 2>&1
    local mrc=$?
    assert_eq "create $*: exit code" "$qrc" "$mrc"
    assert_eq "create $*: output" "$(sed -e "s|rbd/q$n|rbd/X|" -e 's/^qemu-img:/qimg:/' q.out)" \
        "$(sed "s|rbd/m$n|rbd/X|" m.out)"
}
rbd_geometry() { # IMAGE: "SIZE ORDER OBJECT-SIZE" ("rbd info")
    local j size order osize
    j=$(rbd info --format json "rbd/$1")
    json_ints size size "$j"
    json_ints order order "$j"
    json_ints osize object_size "$j"
    if [ -z "$size" ] || [ -z "$order" ] || [ -z "$osize" ]; then
        echo "no rbd info of $1" # (never the same as another image's)
        return 1
    fi
    echo "$size $order $osize"
}
both_create 1 24M -f raw -o cluster_size=1M
assert_eq "create: object size 1M" "$(rbd_geometry q1)" "$(rbd_geometry m1)"
both_create 2 10M -f raw
assert_eq "create: default object size" "$(rbd_geometry q2)" "$(rbd_geometry m2)"
both_create 3 10M -f raw -o cluster_size=1000
both_create 5 64M -f qcow2
assert_eq "create qcow2 on RBD: the RBD image's size" "$(rbd_geometry q5)" \
    "$(rbd_geometry m5)"
if long; then
    both_create 4 10M -f raw -o preallocation=full
    both_create 2 10M -f raw # exists
    same_as_qemu check rbd:rbd/m5
    same_as_qemu create -f raw -o help rbd:rbd/x
fi

# 2. info and map of an image with data, by every kind of name
qio rbd:rbd/q1 'write -P 0x11 0 1M' 'write -P 0x22 5M 100k' 'write -P 0x33 17M 3M'
same_as_qemu info rbd:rbd/q1
same_as_qemu map --output=json rbd:rbd/q1
names=("rbd:rbd/q1:conf=$CEPH_CONF:id=admin:rados_osd_op_timeout=60"
    'json:{"file":{"driver":"rbd","pool":"rbd","image":"q1","namespace":""}}')
long && names+=(rbd:rbd/q1 'json:{"driver":"rbd","pool":"rbd","image":"q1"}')
for name in "${names[@]}"; do
    same_as_qemu info --output=json "$name"
done
same_as_qemu info --image-opts driver=raw,file.driver=rbd,file.pool=rbd,file.image=q1
if long; then
    same_as_qemu map rbd:rbd/q1
    same_as_qemu info -f rbd rbd:rbd/q1
fi

# 3. errors, as qemu-img words them
names=(rbd:nopool/x rbd:rbd/nope rbd:rbd rbd:rbd/ns/q1 rbd:rbd/q1:foo)
long && names+=(rbd:rbd/q1:foo_bar=1 rbd:rbd/q1:conf=/nonexistent
    'json:{"driver":"rbd","pool":"rbd"}' 'json:{"driver":"rbd","pool":"rbd","image":"nope"}'
    'json:{"driver":"rbd","pool":"rbd","image":"q1","bogus":1}')
for name in "${names[@]}"; do
    same_as_qemu_err info "$name"
done
long && same_as_qemu_err info -f rbd "$CEPH_CONF"

# 4. convert to and from RBD: the same bytes, the same objects written
qi create -q -f qcow2 src.qcow2 32M
qio src.qcow2 'write -P 0x5a 0 3M' 'write -P 0x11 10M 64k' 'write -z 12M 2M' \
    'write -P 0x33 16M 5M' 'write -P 0x44 31M 1M'
"$QEMU_IMG" convert -O raw src.qcow2 rbd:rbd/cq
assert_rc "convert to RBD" 0 "$QIMG" convert -O raw src.qcow2 rbd:rbd/cm
assert_rc "convert to RBD: the bytes" 0 "$QEMU_IMG" compare src.qcow2 rbd:rbd/cm
du_cq=$(rbd_du cq)
assert_eq "convert to RBD: only the data written (rbd du)" "$du_cq" "$(rbd_du cm)"
assert_eq "convert to RBD: map" "$("$QEMU_IMG" map --output=json rbd:rbd/cq)" \
    "$("$QEMU_IMG" map --output=json rbd:rbd/cm)"
same_as_qemu compare rbd:rbd/cm rbd:rbd/q1
if long; then
    same_as_qemu compare src.qcow2 rbd:rbd/cm
    same_as_qemu compare rbd:rbd/cq rbd:rbd/cm
    same_as_qemu_err convert -O raw src.qcow2 rbd:rbd/cm # exists
    same_as_qemu measure -O qcow2 rbd:rbd/cm
fi
for t in fq fm; do # data in whole objects where the source has none
    rbd create --size 32M "$t"
    qio "rbd:rbd/$t" 'write -P 0x77 4M 4M' 'write -P 0x77 12M 4M' 'write -P 0x77 24M 4M'
done
"$QEMU_IMG" convert -n -O raw src.qcow2 rbd:rbd/fq
assert_rc "convert -n onto a full image" 0 "$QIMG" convert -n -O raw src.qcow2 rbd:rbd/fm
assert_rc "convert -n: the bytes" 0 "$QEMU_IMG" compare src.qcow2 rbd:rbd/fm
assert_eq "convert -n: zero ranges deallocated (rbd du)" "$(rbd_du fq)" "$(rbd_du fm)"
rbd create --size 32M tz
assert_rc "convert --target-is-zero" 0 "$QIMG" convert -n --target-is-zero -O raw \
    src.qcow2 rbd:rbd/tz
assert_rc "convert --target-is-zero: the bytes" 0 "$QEMU_IMG" compare src.qcow2 rbd:rbd/tz
assert_eq "convert --target-is-zero: no zeros written" "$du_cq" "$(rbd_du tz)"
if long; then
    "$QEMU_IMG" convert -S 0 -O raw src.qcow2 rbd:rbd/sq
    assert_rc "convert -S 0" 0 "$QIMG" convert -S 0 -O raw src.qcow2 rbd:rbd/sm
    assert_eq "convert -S 0: everything written" "$(rbd_du sq)" "$(rbd_du sm)"
fi
"$QEMU_IMG" convert -O qcow2 rbd:rbd/cq back-q.qcow2
assert_rc "convert from RBD" 0 "$QIMG" convert -O qcow2 rbd:rbd/cm back-m.qcow2
assert_rc "convert from RBD: the bytes" 0 "$QEMU_IMG" compare back-m.qcow2 src.qcow2
assert_rc "convert from RBD: check" 0 "$QEMU_IMG" check -q back-m.qcow2
assert_eq "convert from RBD: allocation" "$(map_flags back-q.qcow2)" \
    "$(map_flags back-m.qcow2)"
if long; then
    "$QEMU_IMG" dd if=src.qcow2 of=rbd:rbd/ddq -O raw bs=1M count=20 skip=1 >/dev/null 2>&1
    assert_rc "dd to RBD" 0 "$QIMG" dd if=src.qcow2 of=rbd:rbd/ddm -O raw bs=1M count=20 skip=1
    assert_rc "dd to RBD: the bytes" 0 "$QEMU_IMG" compare rbd:rbd/ddq rbd:rbd/ddm
fi

# 5. resize
same_as_qemu resize -f raw rbd:rbd/m2 20M
same_as_qemu_err resize -f raw rbd:rbd/m2 5M
same_as_qemu resize -f raw --shrink rbd:rbd/m2 5M
if long; then
    same_as_qemu resize -f raw rbd:rbd/q2 20M
    same_as_qemu_err resize -f raw --preallocation=full rbd:rbd/m2 30M
    same_as_qemu info --output=json rbd:rbd/m2
fi

# 6. RBD snapshots, as qemu-img's
qi snapshot -c s0 rbd:rbd/q1
assert_rc "snapshot -c" 0 "$QIMG" snapshot -c s1 rbd:rbd/q1
same_as_qemu snapshot -l rbd:rbd/q1
same_as_qemu info rbd:rbd/q1@s1
same_as_qemu_err snapshot -c s1 rbd:rbd/q1
same_as_qemu_err resize rbd:rbd/q1@s1 30M
if long; then
    same_as_qemu info --output=json rbd:rbd/q1
    same_as_qemu_err snapshot -c '' rbd:rbd/q1
    same_as_qemu_err snapshot -d nope rbd:rbd/q1
    same_as_qemu_err snapshot -a nope rbd:rbd/q1
fi
assert_rc "a snapshot opened for writing (qimg io)" 1 "$QIMG" io -c 'write 0 512' \
    rbd:rbd/q1@s1
"$QEMU_IMG" convert -O raw rbd:rbd/q1 before.raw
qio rbd:rbd/q1 'write -P 0x99 0 4M' 'truncate 30M'
assert_rc "snapshot -a" 0 "$QIMG" snapshot -a s1 rbd:rbd/q1
assert_rc "snapshot -a: the bytes and size of the snapshot" 0 "$QEMU_IMG" compare \
    -f raw -F raw before.raw rbd:rbd/q1
assert_rc "snapshot -d" 0 "$QIMG" snapshot -d s1 rbd:rbd/q1
same_as_qemu snapshot -l rbd:rbd/q1

# 7. qcow2 on RBD, made by qimg, written by qemu-io, read back by both
qio rbd:rbd/m5 'write -P 0x61 0 1M' 'write -P 0x62 40M 64k'
same_as_qemu check rbd:rbd/m5
same_as_qemu map --output=json rbd:rbd/m5
if long; then
    same_as_qemu info --output=json rbd:rbd/m5
    same_as_qemu compare -f qcow2 -F qcow2 rbd:rbd/m5 rbd:rbd/m5
fi

# 8. qimg nbd serving an RBD image (through the public API).  Its servers
# with -t are used once they answered a handshake (nbd_ready), those
# without once they listen (nbd_listening): the socket exists from bind(),
# and a client that comes before listen() is refused.
rm -f n.sock
"$QIMG" nbd -t -k "$PWD/n.sock" -f raw rbd:rbd/cm >nbd.out 2>&1 &
NBD_PID=$!
nbd_ready n.sock $NBD_PID || finish
timeout 120 nbdcopy "nbd+unix:///?socket=$PWD/n.sock" nbd-copy.raw
assert_rc "qimg nbd of an RBD image: the bytes" 0 "$QEMU_IMG" compare -f raw nbd-copy.raw \
    src.qcow2
stop_server "$NBD_PID" "qimg nbd -t"

# 9. faults
# 9a. a cluster that does not answer: librados' timeouts (rbd.c invariant
# 2); timeout(1) only guards against a hang (qimg's own bound is 30 s).
sed 's/^mon host = .*/mon host = [v1:127.0.0.1:9]/' "$CEPH_CONF" >dead.conf
same_as_qemu_err info "rbd:rbd/q1:conf=$PWD/dead.conf:client_mount_timeout=1"
{ cat dead.conf; printf '[client]\nclient mount timeout = 1\n'; } >dead2.conf
assert_rc "dead cluster: the configuration file's timeout" 1 timeout 25 "$QIMG" info \
    "rbd:rbd/q1:conf=$PWD/dead2.conf"
cp .out dead.out
assert_rc "dead cluster: the message ($(cat dead.out))" 0 grep -q \
    'error connecting: Connection timed out' dead.out
{ cat dead.conf; printf '[client]\nclient mount timeout = 300\n'; } >dead3.conf
assert_rc "dead cluster: the name's setting over the file's" 1 timeout 25 "$QIMG" info \
    "rbd:rbd/q1:conf=$PWD/dead3.conf:client_mount_timeout=1"

# 9b. the OSD stopped while a convert runs: the source (nbdkit, paused)
# holds the copy until the target is open (a watcher on its header), then
# the OSD stops and the source resumes.  With a 1 s OSD timeout the
# convert fails (exit 1, ETIMEDOUT) and ends; with the default one and the
# OSD back after 2 s it finishes with every byte.
head -c 16M /dev/urandom >fault.raw
ctl() {
    python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.send(sys.argv[2].encode())
s.recv(1)' "$PWD/ctl.sock" "$1"
}
fault_convert() { # TARGET NAME-OPTIONS RESUME-AFTER
    rm -f f.sock ctl.sock f.pid
    rbd create --size 16M "$1"
    nbdkit -U "$PWD/f.sock" -P f.pid --filter=pause file fault.raw \
        pause-control="$PWD/ctl.sock"
    wait_sock ctl.sock f.pid && ctl p
    timeout 120 "$QIMG" convert -m 1 -n -f raw -O raw "nbd+unix:///?socket=$PWD/f.sock" \
        "rbd:rbd/$1$2" >conv.out 2>&1 &
    local cpid=$! i
    for i in $(seq 150); do
        rbd status "rbd/$1" 2>/dev/null | grep -q watcher= && break
        sleep 0.2
    done
    kill -STOP $OSD_PID
    ctl r
    if [ -n "$3" ]; then
        sleep "$3"
        kill -CONT $OSD_PID
    fi
    wait "$cpid"
    CONV_RC=$?
    kill -CONT $OSD_PID
    kill "$(cat f.pid)"
}
fault_convert ft ":rados_osd_op_timeout=1" ""
assert_eq "OSD stopped mid-convert: exit 1, no hang ($(cat conv.out))" 1 "$CONV_RC"
assert_rc "OSD stopped mid-convert: ETIMEDOUT" 0 grep -q 'Connection timed out' conv.out
fault_convert fb "" 2
assert_eq "OSD back mid-convert: done ($(cat conv.out))" 0 "$CONV_RC"
assert_rc "OSD back mid-convert: every byte" 0 "$QEMU_IMG" compare -f raw -F raw \
    fault.raw rbd:rbd/fb

# 9c. failed completions (rbd.c invariant 3; libnbd's CVE-2022-0485 was an
# ignored asynchronous error): real errors, each reported for the request
# that met it, with qemu-io, qemu-img and qemu-nbd on the same cluster as
# the oracle.  The OSD refuses a write, zero write or discard reaching past
# osd_max_object_size into its object (EFBIG: at 1 MiB, writes in the first
# MiB of each 4 MiB object succeed), and any request on an object whose
# name is longer than osd_max_object_name_len (ENAMETOOLONG: at 30 every
# rbd_data.* object, while the header objects are shorter); both are set on
# the running OSD and put back (config unset).  librbd itself fails a read
# starting past the end of an image another client shrank (EINVAL) and
# returns a short count for one crossing it, which qimg zero-fills.  No
# timing: qemu-io and the NBD servers run with cache=none (librbd's cache
# off), and convert's target with its default cache=unsafe, which never
# flushes, so librbd's cache writes through (rbd_cache_writethrough_until_flush):
# each request's own completion carries its error.  (With the cache on
# and flushes, librbd acknowledges writes early and a failure comes with a
# later flush; qemu-io then reports it on a later request.)
# osd_config VAR [VALUE]: set VAR on the running OSD (without VALUE: back
# to its default) through its admin socket, as "ceph daemon osd.N config
# set/unset" does (a JSON command and a NUL; the reply: a big-endian
# 32-bit length and the text); the value read back must be VALUE.  (The
# ceph tool costs a second a call on the loaded test machine.)
osd_config() {
    python3 - "$CLUSTER"/run/osd.*."$OSD_PID".asok "$@" <<'EOF'
import json, socket, struct, sys

def call(cmd):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(sys.argv[1])
    s.sendall(json.dumps(cmd).encode() + b"\0")
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        more = s.recv(65536)
        if not more:
            sys.exit("the OSD's admin socket closed before its reply to %s" % cmd)
        data += more
    return data[4:]

var = sys.argv[2]
if len(sys.argv) > 3:
    call({"prefix": "config set", "var": var, "val": [sys.argv[3]]})
else:
    call({"prefix": "config unset", "var": var})
now = json.loads(call({"prefix": "config get", "var": var}))[var]
if len(sys.argv) > 3 and now != sys.argv[3]:
    sys.exit("%s is %s on the OSD, not %s" % (var, now, sys.argv[3]))
EOF
}
T=(timeout 60) # a hang fails the check, never the run
# io_both DESC IMAGE-Q IMAGE-M FAILURES ARGS...: qemu-io on rbd:rbd/IMAGE-Q,
# qimg io on rbd:rbd/IMAGE-M, with ARGS; the same stdout (one line per
# failed request) and exit code, and FAILURES "failed:" lines (the fault
# did happen).
io_both() {
    local desc=$1 q=$2 m=$3 n=$4 qrc mrc
    shift 4
    "${T[@]}" "$QEMU_IO" "$@" "rbd:rbd/$q" >io-q.out 2>io-q.err
    qrc=$?
    "${T[@]}" "$QIMG" io "$@" "rbd:rbd/$m" >io-m.out 2>io-m.err
    mrc=$?
    assert_eq "$desc: output as qemu-io's" "$(cat io-q.out)" "$(cat io-m.out)"
    assert_eq "$desc: exit code as qemu-io's" "$qrc" "$mrc"
    assert_eq "$desc: failed requests ($(cat io-q.out))" "$n" \
        "$(grep -c 'failed:' io-q.out)"
}
# nbd_client SERVER...: start the NBD server command SERVER... on a Unix
# socket, run qemu-io with NBD_ARGS against it (NBD_RC its status), stop it.
nbd_client() {
    rm -f nb.sock nb.pid
    "$@" -k "$PWD/nb.sock" --pid-file "$PWD/nb.pid" >nbd-srv.out 2>&1 &
    local spid=$!
    nbd_listening nb.sock nb.pid $spid || echo "$1's output: $(cat nbd-srv.out)"
    "${T[@]}" "$QEMU_IO" -f raw "${NBD_ARGS[@]}" "nbd+unix:///?socket=$PWD/nb.sock"
    NBD_RC=$?
    stop_server "$spid" "$1"
}
for i in wq wm nq nm; do rbd create --size 8M "$i"; done
assert_rc "OSD: config set osd_max_object_size 1048576" 0 \
    osd_config osd_max_object_size 1048576
io_both "writes failing with EFBIG" wq wm 5 -t none -f raw -c 'write -q -P 0x11 0 64k' \
    -c 'write -q -P 0x22 1M 64k' -c 'write -q -P 0x33 4M 64k' -c 'write -q -P 0x44 7M 64k' \
    -c 'write -q -z 5M 64k' -c 'write -q -z -u 6M 4k' -c 'discard -q 1M 64k' \
    -c 'write -q -z 8k 4k' -c 'read -q -P 0x11 0 8k' -c 'read -q -P 0 1M 64k' \
    -c 'read -q -P 0x33 4M 64k' -c 'read -q -P 0 7M 64k'
io_both "asynchronous writes failing with EFBIG" wq wm 3 -t none -f raw \
    -c 'aio_write -q -P 0x55 64k 64k' -c 'aio_write -q -P 0x66 2M 64k' \
    -c 'aio_write -q -P 0x77 4160k 64k' -c 'aio_write -q -P 0x88 5M 4k' \
    -c 'aio_write -q -P 0x99 3M 4k' -c 'aio_flush' -c 'read -q -P 0x55 64k 64k' \
    -c 'read -q -P 0x77 4160k 64k' -c 'read -q -P 0 2M 64k'
qi create -f qcow2 cf.qcow2 8M
qio cf.qcow2 'write -P 0x5a 0 512k' 'write -P 0x5b 4M 512k' 'write -P 0x5c 5M 64k'
"${T[@]}" "$QEMU_IMG" convert -O raw cf.qcow2 rbd:rbd/cvq >cv-q.out 2>&1
qrc=$?
"${T[@]}" "$QIMG" convert -O raw cf.qcow2 rbd:rbd/cvm >cv-m.out 2>&1
assert_eq "convert to RBD, a write failing: exit code as qemu-img's" "$qrc" "$?"
assert_eq "convert to RBD, a write failing: the error as qemu-img's" \
    "$(sed -n 's/^qemu-img: \(error while writing\)/qimg: \1/p' cv-q.out)" \
    "$(grep '^qimg: error while' cv-m.out)"
NBD_ARGS=(-c 'write -q -P 0x11 0 64k' -c 'write -q -P 0x22 1M 64k'
    -c 'aio_write -q -P 0x33 4M 64k' -c 'aio_write -q -P 0x44 6M 64k'
    -c 'aio_write -q -P 0x55 3M 64k' -c 'aio_flush' -c 'read -q -P 0x11 0 64k'
    -c 'read -q -P 0 1M 64k' -c 'read -q -P 0x33 4M 64k')
nbd_client qemu-nbd --cache=none -f raw rbd:rbd/nq >nbd-q.out 2>&1
qrc=$NBD_RC
nbd_client "$QIMG" nbd --cache=none -f raw rbd:rbd/nm >nbd-m.out 2>&1
assert_eq "qimg nbd, writes failing: the client's output as with qemu-nbd" \
    "$(cat nbd-q.out)" "$(cat nbd-m.out)"
assert_eq "qimg nbd, writes failing: the client's exit code as with qemu-nbd" "$qrc" \
    "$NBD_RC"
assert_eq "qimg nbd, writes failing: NBD errors ($(cat nbd-q.out))" 3 \
    "$(grep -c 'failed: No space left on device' nbd-q.out)"
assert_rc "OSD: config unset osd_max_object_size" 0 osd_config osd_max_object_size
assert_rc "OSD: config set osd_max_object_name_len 30" 0 \
    osd_config osd_max_object_name_len 30
io_both "reads failing with ENAMETOOLONG" wq wm 4 -r -t none -f raw \
    -c 'read -q -P 0x11 0 8k' -c 'aio_read -q -P 0x11 0 8k' \
    -c 'aio_read -q -P 0x33 4M 64k' -c 'aio_read -q -P 0 6M 4k' -c 'aio_flush'
assert_rc "OSD: config unset osd_max_object_name_len" 0 osd_config osd_max_object_name_len
# shrunk IMAGE TOOL...: TOOL (qemu-io or qimg io) opens rbd:rbd/IMAGE and
# reads commands from a pipe; once its prompt shows the image open, another
# client shrinks the image to 4 MiB + 32 KiB (rbd resize returns once
# every watcher has acknowledged the new size), then the reads: across the
# new end (its data, then zeros: never the 0xab the buffer starts as) and
# past it.  SHRUNK: its output without the prompts, SHRUNK_RC its status
# (its stderr in shrunk.err).
shrunk() {
    local img=$1 pid
    shift
    rm -f cmds.fifo
    mkfifo cmds.fifo
    "${T[@]}" "$@" -f raw "rbd:rbd/$img" <cmds.fifo >shrunk.out 2>shrunk.err &
    pid=$!
    exec 7>cmds.fifo
    for _ in $(seq 300); do
        grep -q 'io> ' shrunk.out && break
        sleep 0.1
    done
    rbd resize --no-progress --allow-shrink --size 4128K "rbd/$img"
    (printf '%s\n' 'read -q -P 0x33 -l 32k 4M 64k' 'read -q -P 0 -s 32k -l 32k 4M 64k' \
        'read -q 5M 4k' 'read -q -P 0x11 0 8k' >&7) 2>/dev/null # SIGPIPE if it ended
    exec 7>&-
    wait "$pid"
    SHRUNK_RC=$?
    SHRUNK=$(sed 's/q[a-z]*-io> //g' shrunk.out)
}
shrunk wq "$QEMU_IO"
qout=$SHRUNK qrc=$SHRUNK_RC
shrunk wm "$QIMG" io
assert_eq "shrunk by another client: reads as qemu-io's" "$qout" "$SHRUNK"
assert_eq "shrunk by another client: exit code as qemu-io's ($(cat shrunk.err))" "$qrc" \
    "$SHRUNK_RC"
assert_eq "shrunk by another client: the read past the end failed" \
    "read failed: Invalid argument" "$qout"
# the same over NBD (qemu-nbd is no oracle here: it drops the connection
# on a failed read), the image shrunk while qimg nbd has it open
rm -f ns.sock
"$QIMG" nbd -t -k "$PWD/ns.sock" -f raw rbd:rbd/nm >nbd-srv.out 2>&1 &
NBD_PID=$!
nbd_ready ns.sock $NBD_PID || echo "qimg nbd's output: $(cat nbd-srv.out)"
rbd resize --no-progress --allow-shrink --size 4128K rbd/nm
"${T[@]}" "$QEMU_IO" -f raw -c 'read -q -P 0x33 -l 32k 4M 64k' \
    -c 'read -q -P 0 -s 32k -l 32k 4M 64k' -c 'read -q 5M 4k' -c 'read -q -P 0x11 0 64k' \
    "nbd+unix:///?socket=$PWD/ns.sock" >nbd-s.out 2>&1
assert_eq "qimg nbd, the image shrunk: an NBD error for the read past the end" \
    "read failed: Invalid argument" "$(cat nbd-s.out)"
stop_server "$NBD_PID" "qimg nbd -t"

# 10. the asynchronous API on RBD: the random workload of
# tests/test-aio-workload.c (64 requests in flight, each byte read checked
# against the model) under TSan (tests/tsan-ceph.supp: the Ceph libraries
# are not instrumented); make test runs 1000 requests per part, QIMG_LONG=1
# the full workload, and in the normal build too.
BUILD=$(cd "$(dirname "$QIMG")/.." && pwd)
requests=1000
if long; then
    requests=3000
    assert_rc "async workload on RBD" 0 env QIMG_TEST_RBD_POOL=rbd \
        "$BUILD/tests/test-aio-workload"
fi
TSAN=$REPO_DIR/build-tsan/tests/test-aio-workload
if [ -x "$TSAN" ]; then
    assert_rc "async workload on RBD under TSan" 0 env QIMG_TEST_RBD_POOL=rbd \
        QIMG_TEST_AIO_REQUESTS=$requests \
        TSAN_OPTIONS="halt_on_error=1 suppressions=$REPO_DIR/tests/tsan-ceph.supp" "$TSAN"
elif in_ci; then
    _checks=$((_checks + 1))
    _fail "no TSan build ($TSAN): CI runs the RBD workload under TSan"
else
    echo "note: no TSan build ($TSAN): the TSan run of the RBD workload did not run"
    assert_rc "async workload on RBD" 0 env QIMG_TEST_RBD_POOL=rbd \
        QIMG_TEST_AIO_REQUESTS=$requests "$BUILD/tests/test-aio-workload"
fi

finish
