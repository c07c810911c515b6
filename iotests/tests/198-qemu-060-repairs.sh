#!/bin/bash
# QEMU iotest 060's corrupt images where qimg now takes QEMU's steps,
# against qemu-io and qemu-img 7.2 on copies of the same image (exit code,
# stdout, stderr, corrupt bit, file size):
#  - check -r all grows the file to hold a refcount block outside it,
#    however far (check.c invariant 2; 060's "Discarding a refblock covered
#    by an unaligned refblock": a block at 64 GiB of a 256 KiB file).
. "$(dirname "$0")/../common.sh"
requires qimg qemu-img qemu-io python3

# set_u64 IMG OFFSET VALUE
set_u64() {
    python3 - "$@" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2], 0))
    f.write(struct.pack(">Q", int(sys.argv[3], 0)))
PY
}

corrupt_bit() {
    "$QEMU_IMG" info "$1" | grep 'corrupt:'
}

# same DESC RC: q.out/q.err/QRC (qemu's) against m.out/m.err/RC (qimg's)
same() {
    assert_eq "$1: exit code" "$QRC" "$2"
    assert_eq "$1: stdout" "$(io_filter <q.out)" "$(io_filter <m.out)"
    assert_eq "$1: stderr" "$(io_filter <q.err | sed 's/q\.qcow2/X/g')" \
        "$(io_filter <m.err | sed 's/m\.qcow2/X/g')"
    assert_eq "$1: corrupt bit" "$(corrupt_bit q.qcow2)" "$(corrupt_bit m.qcow2)"
    assert_eq "$1: file size" "$(stat -c %s q.qcow2)" "$(stat -c %s m.qcow2)"
}

# io DESC ARGS...: qemu-io ARGS q.qcow2 and qimg io ARGS m.qcow2
io() {
    local desc=$1
    shift
    "$QEMU_IO" "$@" q.qcow2 >q.out 2>q.err
    QRC=$?
    "$QIMG" io "$@" m.qcow2 >m.out 2>m.err
    same "$desc" $?
}

# img DESC ARGS...: qemu-img ARGS q.qcow2 and qimg ARGS m.qcow2
img() {
    local desc=$1
    shift
    "$QEMU_IMG" "$@" q.qcow2 >q.out 2>q.err
    QRC=$?
    "$QIMG" "$@" m.qcow2 >m.out 2>m.err
    same "$desc" $?
}

# make OPTS WRITE-LEN OFFSET=VALUE...: q.qcow2 and m.qcow2, 64M with -o
# OPTS (reftable at 0x10000, L1 at 0x30000), WRITE-LEN written at 0 (if
# any), then the 8-byte values poked
make() {
    local opts=$1 len=$2 kv t
    shift 2
    for t in q m; do
        rm -f $t.qcow2
        mk_qcow2 $t.qcow2 64M "$opts" ${len:+"write 0 $len"}
        for kv in "$@"; do
            set_u64 $t.qcow2 "${kv%=*}" "${kv#*=}"
        done
    done
}

# 1. Refcount blocks outside the file: -r all grows it to hold them.
# DESC|OPTS|POKES
while IFS='|' read -r desc opts pokes; do
    [ -n "$desc" ] || continue
    # shellcheck disable=SC2086 # several pokes
    make "$opts" "" $pokes
    img "$desc: shrink" resize --shrink 32M
    img "$desc: first repair" check -q -r all
    img "$desc: second repair" check -r all
    img "$desc: check" check
done <<'EOF'
covered by an unaligned block (060)|refcount_bits=1|0x10008=0x1000000000 0x10010=0x200
at 64 GiB|refcount_bits=1|0x10008=0x1000000000
at 1 GiB, 16-bit refcounts||0x10008=0x40000000
EOF

finish
