#!/bin/bash
# QEMU's words for corrupt metadata where QEMU's 060 reads them, against
# qemu-io 7.2 on the same image:
#  - indexes in corruption messages as QEMU's "%#" prints them: index 0 is
#    "0", not "0x0" (refcount.c, amend-zero.c, snapshot-write.c);
#  - "Image does not contain a reference count table" for a header with
#    no refcount table clusters;
#  - a dirty image whose repair fails: "Could not repair dirty image: " and
#    the errno's text when the repair gives no cause (qcow2.c invariant 8).
. "${0%/*}/../common.sh"
requires qimg qemu-img qemu-io python3

# poke IMG VALUE: the first refcount table entry becomes VALUE
poke() {
    python3 - "$@" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(48)
    f.seek(struct.unpack(">Q", f.read(8))[0])
    f.write(struct.pack(">Q", int(sys.argv[2], 0)))
PY
}

qi create -q -f qcow2 a.qcow2 64M
poke a.qcow2 0x22a00 # refcount block 0 at an unaligned offset
cp a.qcow2 aq.qcow2
"$QEMU_IO" -c 'write 0 64k' aq.qcow2 >aq.out 2>aq.err
qrc=$?
"$QIMG" io -c 'write 0 64k' a.qcow2 >am.out 2>am.err
assert_eq "unaligned refblock, index 0: exit code" "$qrc" "$?"
assert_eq "unaligned refblock, index 0: stdout" "$(cat aq.out)" "$(cat am.out)"
assert_eq "unaligned refblock, index 0: stderr" "$(cat aq.err)" "$(cat am.err)"

qi create -q -f qcow2 z.qcow2 64M
python3 - z.qcow2 <<'PY' # refcount_table_clusters = 0
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(56)
    f.write(struct.pack(">I", 0))
PY
same_as_qemu_io "no refcount table" -c 'read 0 512' z.qcow2

qi create -q -f qcow2 d.qcow2 64M
poke d.qcow2 0xffff2a00
python3 - d.qcow2 <<'PY' # the dirty bit
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(72)
    v = struct.unpack(">Q", f.read(8))[0]
    f.seek(72)
    f.write(struct.pack(">Q", v | 1))
PY
cp d.qcow2 dq.qcow2
"$QEMU_IO" -c close dq.qcow2 >/dev/null 2>dq.err
"$QIMG" io -c close d.qcow2 >/dev/null 2>dm.err
assert_eq "dirty image whose repair fails: the open's error" \
    "$(grep "can't open" dq.err | sed 's/^qemu-io: //; s/dq.qcow2/IMG/')" \
    "$(grep "can't open" dm.err | sed 's/^qimg: //; s/d.qcow2/IMG/')"
finish
