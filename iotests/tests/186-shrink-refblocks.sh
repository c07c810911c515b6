#!/bin/bash
# A shrink drops the refcount blocks that count nothing but themselves, as
# qemu-img 7.2 does (qcow2/resize.c invariant 6, QEMU's
# qcow2_shrink_reftable), and so refuses to shrink an image whose refcount
# table names a block no refcount structure covers (QEMU iotest 060's
# "Discarding an out-of-bounds refblock" cases): the corrupt bit is set,
# the size stays, and the table entry is gone, so a check finds nothing and
# the next shrink works.  qemu-img on one copy, qimg on another.
. "${0%/*}/../common.sh"
requires qimg qemu-img python3

# reftable IMG: the first three refcount table entries, in hex
reftable() {
    python3 - "$1" <<'PY'
import struct, sys
with open(sys.argv[1], "rb") as f:
    f.seek(48)
    f.seek(struct.unpack(">Q", f.read(8))[0])
    print(" ".join("%x" % e for e in struct.unpack(">3Q", f.read(24))))
PY
}

# set_entry IMG INDEX VALUE: refcount table entry INDEX becomes VALUE
set_entry() {
    python3 - "$@" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(48)
    f.seek(struct.unpack(">Q", f.read(8))[0] + 8 * int(sys.argv[2]))
    f.write(struct.pack(">Q", int(sys.argv[3], 0)))
PY
}

info() {
    "$QEMU_IMG" info "$1" | grep -E 'virtual size|corrupt'
}

# shrink DESC: qemu-img resize --shrink q.qcow2 32M and qimg's on
# m.qcow2; sets QRC/MRC and q.err/m.err (qemu-img's prefix as qimg's).
shrink() {
    "$QEMU_IMG" resize --shrink q.qcow2 32M >q.out 2>q.err
    QRC=$?
    "$QIMG" resize --shrink m.qcow2 32M >m.out 2>m.err
    MRC=$?
    sed -i 's/^qemu-img: /qimg: /' q.err
    assert_eq "$1: exit code" "$QRC" "$MRC"
    assert_eq "$1: output" "$(cat q.out)" "$(cat m.out)"
}

# A healthy image of 4 KiB clusters whose data reaches past several
# refcount blocks: the same file, byte for byte, after the shrink.
for t in q m; do
    mk_qcow2 $t.qcow2 32M cluster_size=4096 'write -P 1 0 24M'
done
shrink "healthy"
assert_eq "healthy: errors" "$(cat q.err)" "$(cat m.err)"
assert_eq "healthy: file length" "$(stat -c %s q.qcow2)" "$(stat -c %s m.qcow2)"
assert_rc "healthy: the same file" 0 cmp q.qcow2 m.qcow2
assert_rc "healthy: check" 0 "$QEMU_IMG" check m.qcow2

# corrupt OPTS ENTRY1 [ENTRY2]: fresh copies with those refcount table
# entries at indexes 1 (and 2)
corrupt() {
    for t in q m; do
        mk_qcow2 $t.qcow2 64M "$1"
        set_entry $t.qcow2 1 "$2"
        [ -z "${3:-}" ] || set_entry $t.qcow2 2 "$3"
    done
}

for c in "refblock past the end of the file||0xffffff00000000" \
    "refblock past every refblock's range|refcount_bits=1|0x1000000000"; do
    IFS='|' read -r desc opts entry <<<"$c"
    corrupt "$opts" "$entry"
    shrink "$desc"
    assert_eq "$desc: errors" "$(cat q.err)" "$(cat m.err)"
    assert_eq "$desc: size and corrupt bit" "$(info q.qcow2)" "$(info m.qcow2)"
    assert_eq "$desc: refcount table" "$(reftable q.qcow2)" "$(reftable m.qcow2)"
    # The entry went first: the check finds nothing left.  (Not compared:
    # the image end, as QEMU's discard of the cut-off range gave the
    # unallocated range an L2 table and qimg's does not.)
    "$QEMU_IMG" check -r all q.qcow2 2>&1 | grep -v '^Image end offset' >q.chk
    "$QIMG" check -r all m.qcow2 2>&1 | grep -v '^Image end offset' >m.chk
    assert_eq "$desc: repair" "$(cat q.chk)" "$(cat m.chk)"
    shrink "$desc, again"
    assert_eq "$desc, again: size" "$(info q.qcow2)" "$(info m.qcow2)"
    assert_rc "$desc, again: check" 0 "$QEMU_IMG" check m.qcow2
done

# A third entry that is not aligned: found before anything is written,
# and named as QEMU's cache names it ("Cannot get entry from refcount
# block cache: Offset 0x200 is unaligned", refcount.c invariant 5).
desc="unaligned refblock behind the dropped one"
corrupt refcount_bits=1 0x1000000000 0x200
shrink "$desc"
assert_eq "$desc: errors" "$(cat q.err)" "$(cat m.err)"
assert_eq "$desc: size and corrupt bit" "$(info q.qcow2)" "$(info m.qcow2)"
assert_eq "$desc: refcount table" "$(reftable q.qcow2)" "$(reftable m.qcow2)"
finish
