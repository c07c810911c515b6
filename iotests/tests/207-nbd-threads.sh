#!/bin/bash
# qimg nbd's nbdkit thread count (tools/nbd.c fact 8): a local image read
# through the page cache (writeback by default, writethrough, unsafe) is
# served with --threads=4, so that nbdkit's per-thread request buffers stay
# in the CPU caches; O_DIRECT (-n, cache none and directsync), protocol
# names and --image-opts keep nbdkit's default.  nbdkit's command line is
# read from a stand-in nbdkit first in PATH; then the real server, so
# configured, serves nbdcopy's four connections the image's bytes.
. "${0%/*}/../common.sh"
requires qimg qimg-nbd-plugin nbdkit nbdcopy qemu-img qemu-io

"$QEMU_IMG" create -q -f qcow2 d.qcow2 16M
"$QEMU_IO" -c 'write -P 0x5a 0 5M' -c 'write -P 0xa5 9M 3M' d.qcow2 >/dev/null
mkdir fake
cat >fake/nbdkit <<'SH'
#!/bin/sh
printf '%s\n' "$@" >"$NBDKIT_ARGS"
SH
chmod +x fake/nbdkit
threads() { # QIMG-NBD-ARGS...: nbdkit's --threads argument, or "default"
    rm -f args
    NBDKIT_ARGS=$PWD/args PATH=$PWD/fake:$PATH "$QIMG" nbd -k "$PWD/x.sock" "$@" ||
        _fail "qimg nbd $*: exit $?"
    grep '^--threads=' args || echo default
}

# 1. Through the page cache: 4 threads per connection.
assert_eq "default cache (writeback)" "--threads=4" "$(threads d.qcow2)"
assert_eq "--cache=writethrough" "--threads=4" "$(threads --cache=writethrough d.qcow2)"
assert_eq "--cache=unsafe" "--threads=4" "$(threads --cache=unsafe -t -e 4 d.qcow2)"
assert_eq "-r -f qcow2" "--threads=4" "$(threads -r -f qcow2 d.qcow2)"

# 2. O_DIRECT, remote nodes, --image-opts: nbdkit's default.
assert_eq "-n" default "$(threads -n d.qcow2)"
assert_eq "--cache=none" default "$(threads --cache=none d.qcow2)"
assert_eq "--cache=directsync" default "$(threads --cache=directsync d.qcow2)"
assert_eq "a protocol name" default \
    "$(threads -f raw "nbd+unix:///?socket=$PWD/nosuch.sock")"
assert_eq "--image-opts" default \
    "$(threads --image-opts driver=qcow2,file.driver=file,file.filename=d.qcow2)"

# 3. The real server so configured: nbdcopy (4 connections) reads the image.
"$QEMU_IMG" convert -f qcow2 -O raw d.qcow2 ref.raw
# (used once it answered a handshake: its socket exists from bind(), and a
# client that comes before listen() is refused)
"$QIMG" nbd -t -e 4 -k "$PWD/s.sock" d.qcow2 2>s.err &
srv=$!
trap 'kill $srv 2>/dev/null; _cleanup' EXIT
nbd_ready s.sock $srv || finish
assert_rc "nbdcopy reads the export" 0 \
    timeout 60 nbdcopy "nbd+unix:///?socket=$PWD/s.sock" out.raw
assert_rc "nbdcopy's bytes are the image's" 0 cmp out.raw ref.raw
stop_server $srv "qimg nbd -t -e 4"

finish
