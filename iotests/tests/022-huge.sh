#!/bin/bash
# qimg check stays within bounded memory and time on images whose tables
# point far away or that are huge sparse files (QEMU iotest 138 and more):
#   - a data cluster at 32 PB (iotest 138) and an L2 table at 32 PB: the
#     same report as qemu-img, a few MiB of memory;
#   - a 4 TiB sparse image: clean, a few MiB (the in-memory refcount table
#     is only address space until something is counted in it);
#   - 2^31 clusters of file (1 TiB of 512-byte clusters): refused cleanly
#     like qemu-img ("Check failed: File too large"), also under ulimit -v;
#   - an L1 table whose 4M entries all name one L2 table (clean, or
#     unaligned): finishes, or stops with a clear message, in seconds;
#   - -p prints the progress line.
# Memory is the maximum resident set size from /usr/bin/time -v.
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

EDIT=("python3" "$IOTESTS_DIR/tests/020-qcow2edit.py")
HAVE_TIME=
[ -x /usr/bin/time ] && HAVE_TIME=1
# A sanitizer build (QIMG=build-asan/tools/qimg) needs its shadow memory:
# no ulimit -v then, and more room for its allocator.
SAN=1
grep -q -a __asan_init "$QIMG" && SAN=4

# measure LIMIT_KIB ARGS...: run qimg ARGS (timeout 60); sets RC and
# checks the peak RSS stays below LIMIT_KIB.
measure() {
    local limit=$(($1 * SAN)) rss
    shift
    if [ -n "$HAVE_TIME" ]; then
        timeout 60 /usr/bin/time -v -o .time "$QIMG" "$@" >.out 2>.err
        RC=$?
        rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' .time)
        _checks=$((_checks + 1))
        if [ -z "$rss" ] || [ "$rss" -gt "$limit" ]; then
            _fail "qimg $*: peak RSS ${rss:-?} KiB, limit $limit KiB"
        fi
    else
        timeout 60 "$QIMG" "$@" >.out 2>.err
        RC=$?
    fi
    _checks=$((_checks + 1))
    if [ "$RC" -ge 124 ]; then
        _fail "qimg $*: exit $RC (hang or crash)"
        head -n 5 .err
    fi
}

expect() { # expect DESC WANT_RC [SUBSTRING]
    _checks=$((_checks + 1))
    if [ "$RC" != "$2" ]; then
        _fail "$1: exit $RC, expected $2"
        head -n 5 .err
    elif [ -n "${3:-}" ] && ! grep -q -F -- "$3" .out .err; then
        _fail "$1: no '$3' in the output"
        head -n 5 .err
    fi
}

# ---- iotest 138: a data cluster at 32 PB ----

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 pb.qcow2 512
"$QEMU_IO" -f qcow2 -c 'write 0 512' pb.qcow2 >/dev/null
"${EDIT[@]}" pb.qcow2 l2 0 0x8080000000000000
measure 65536 check pb.qcow2
expect "138: data cluster at 32 PB" 2 \
    "ERROR: counting reference for region exceeding the end of the file by one cluster or more: offset 0x80000000000000 size 0x200"
same_as_qemu_err check pb.qcow2
same_as_qemu_err check --output=json pb.qcow2
cp pb.qcow2 pb-fix.qcow2
measure 65536 check -r all pb-fix.qcow2
expect "138: -r all" 2 "1 errors were found on the image."

# an L2 table at 32 PB
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 pb-l2.qcow2 1M
"$QEMU_IO" -f qcow2 -c 'write 0 512' pb-l2.qcow2 >/dev/null
"${EDIT[@]}" pb-l2.qcow2 l1 0 0x8080000000000000
measure 65536 check pb-l2.qcow2
expect "L2 table at 32 PB" 2 "offset 0x80000000000000 size 0x200"
same_as_qemu_err check pb-l2.qcow2

# ---- huge sparse files ----

"$QEMU_IMG" create -q -f qcow2 sparse.qcow2 64M
"$QEMU_IO" -f qcow2 -c 'write 0 128k' sparse.qcow2 >/dev/null
truncate -s 4T sparse.qcow2 || skip "no 4 TiB sparse files here"
measure 65536 check sparse.qcow2
expect "4 TiB sparse image" 0 "No errors were found on the image."
same_as_qemu check sparse.qcow2
cp --sparse=always sparse.qcow2 sparse-fix.qcow2
measure 65536 check -r all sparse-fix.qcow2
expect "4 TiB sparse image, -r all" 0 "No errors were found on the image."

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 sparse512.qcow2 1M
truncate -s 1T sparse512.qcow2
measure 65536 check sparse512.qcow2
expect "2^31 clusters" 1 "qimg: Check failed: File too large"
same_as_qemu_err check sparse512.qcow2
if [ "$SAN" = 1 ]; then
    (ulimit -v 200000 && exec "$QIMG" check sparse512.qcow2) >.out 2>.err
    RC=$?
    expect "2^31 clusters under ulimit -v" 1 "Check failed"
    # 2^30 clusters of 2 bytes do not fit in 200 MB of address space: refused
    truncate -s 512G sparse512.qcow2
    (ulimit -v 200000 && exec "$QIMG" check sparse512.qcow2) >.out 2>.err
    RC=$?
    expect "2^30 clusters under ulimit -v" 1 "qimg: Check failed: Cannot allocate memory"
fi

# ---- one L2 table named by every entry of a 32 MiB L1 ----

make_l1() { # make_l1 FILE ENTRY
    "$QEMU_IMG" create -q -f qcow2 "$1" 64M
    "$QEMU_IO" -f qcow2 -c 'write -P 1 0 64k' "$1" >/dev/null
    python3 - "$1" "$2" <<'EOF'
import struct, sys
path, entry = sys.argv[1], int(sys.argv[2], 0)
n = 4 * 1024 * 1024
with open(path, 'r+b') as f:
    f.seek(0, 2)
    end = (f.tell() + 65535) // 65536 * 65536
    f.seek(end)
    f.write(struct.pack('>Q', entry) * n)
    f.seek(36)
    f.write(struct.pack('>IQ', n, end))
EOF
}
make_l1 l1-same.qcow2 0x0000000000040000
measure 262144 check l1-same.qcow2
expect "4M references to one L2 table" 2 "ERROR cluster 4 refcount=1 reference=65535"
make_l1 l1-unaligned.qcow2 0x0000000000040200
measure 262144 check l1-unaligned.qcow2
expect "4M references to one unaligned L2 table" 1 \
    "The image references its metadata tables too many times to be checked"

# ---- progress ----

"$QEMU_IMG" create -q -f qcow2 p.qcow2 64M
"$QIMG" check -p p.qcow2 >.out 2>.err
RC=$?
expect "-p" 0 "    (100.00/100%)"
"$QIMG" check -p -q p.qcow2 >.out 2>.err
_checks=$((_checks + 1))
[ -s .out ] && _fail "-p -q printed something"

finish
