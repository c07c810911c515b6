#!/bin/bash
# qemu-img amend -o compat=0.10 failing on corrupt metadata says "Failed to
# turn zero into data clusters: Input/output error", QEMU's words (the
# corruption has its own line), where QEMU's iotest 060 shows it: against
# qemu-img 7.2 on copies of the same image.
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

# make WRITE-LEN OFFSET=VALUE...: q.qcow2 and m.qcow2, 64M, WRITE-LEN
# written at 0, then the 8-byte values poked
make() {
    local len=$1 kv
    shift
    for t in q m; do
        mk_qcow2 $t.qcow2 64M "" "write 0 $len"
        for kv in "$@"; do
            set_u64 $t.qcow2 "${kv%=*}" "${kv#*=}"
        done
    done
}

# amend's error after a corruption (060's unaligned L1 entry and
# preallocated zero cluster)
for c in "unaligned L1 entry|0x30000=0x8000000000042a00" \
    "unaligned preallocated zero cluster|0x40000=0x8000000000052a01"; do
    IFS='|' read -r desc kv <<<"$c"
    make 64k "$kv"
    "$QEMU_IMG" amend -o compat=0.10 q.qcow2 >q.out 2>q.err
    QRC=$?
    "$QIMG" amend -o compat=0.10 m.qcow2 >m.out 2>m.err
    assert_eq "$desc: exit code" "$QRC" "$?"
    assert_eq "$desc: stderr" "$(io_filter <q.err)" "$(io_filter <m.err)"
done
finish
